# Cross build for 64-bit Arm Linux with Debian's cross compiler (g++-aarch64-linux-gnu) against
# Debian's multiarch arm64 packages (dpkg --add-architecture arm64; libhwy-dev:arm64,
# libgtest-dev:arm64), the tests run under qemu-aarch64 (qemu-user). scripts/test_aarch64.sh
# installs all of it and uses this file.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Multiarch: the target's libraries and CMake packages lie in /usr/lib/aarch64-linux-gnu beside
# the build machine's, and headers in /usr/include are shared, so the whole of / stays the
# search root; this makes find_library and find_package look in the aarch64 directories.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# pkg-config (libhwy) reads the target's .pc files only, never the build machine's.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
set(ENV{PKG_CONFIG_PATH} "")
# ctest and gtest_discover_tests run every test executable through qemu. The loader, libc and
# libstdc++ are the multiarch arm64 packages' (libc6:arm64 and libstdc++6:arm64 come with
# libhwy1:arm64), at the paths the executables name, so qemu needs no -L. With
# -L /usr/aarch64-linux-gnu (the cross toolchain's copies) every std::thread start hung under
# Debian 12's qemu 7.2.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
