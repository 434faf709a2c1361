// tests: kernels/cuda/device_runtime.h on whatever machine runs it, GPU or not, CUDA build or
// not. Without a usable GPU the runtime must say so (0 devices and a reason naming what is
// missing) and every device call must fail with a message instead of crashing; with one, it
// must describe it and move bytes to it and back. Also cuBLASLt's loading
// (kernels/cuda/cublaslt_loader.h): never linked, so the binaries start where it is missing,
// and a missing or wrong library is an error that names it.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/cuda/device_runtime.h"
#if defined(QS_HAVE_CUDA)
#include "kernels/cuda/cublaslt_loader.h"
#include "kernels/cuda/fp8_gemm.h"
#include "kernels/cuda/gemm_cublas.h"
#endif

namespace qs::kernels::cuda {
namespace {

bool mentions_cause(const std::string& reason) {
  for (const char* word : {"driver", "GPU", "CUDA"}) {
    if (reason.find(word) != std::string::npos) return true;
  }
  return false;
}

TEST(DeviceRuntime, BuildFlagMatchesTheRuntime) {
#if defined(QS_HAVE_CUDA)
  EXPECT_TRUE(built_with_cuda());
#else
  EXPECT_FALSE(built_with_cuda());
#endif
}

TEST(DeviceRuntime, WithoutAGpuReportsWhyAndFailsCleanly) {
  std::string reason;
  const int n = device_count(&reason);
  ASSERT_GE(n, 0);
  if (n > 0) GTEST_SKIP() << "this machine has " << n << " CUDA device(s)";
  std::printf("[   INFO   ] no CUDA device: %s\n", reason.c_str());
  EXPECT_TRUE(mentions_cause(reason)) << reason;
  // Asking again gives the same answer (a failed first initialisation is not a crash later).
  std::string again;
  EXPECT_EQ(device_count(&again), 0);
  EXPECT_EQ(again, reason);
  EXPECT_EQ(device_count(), 0);  // no reason wanted

  void* p = nullptr;
  const CudaStatus alloc = device_malloc(&p, 1024);
  EXPECT_FALSE(alloc.ok());
  EXPECT_TRUE(mentions_cause(alloc.message)) << alloc.message;
#if defined(QS_HAVE_CUDA)
  EXPECT_NE(alloc.message.find("cudaMalloc"), std::string::npos) << alloc.message;
  EXPECT_NE(alloc.message.find("1024 bytes"), std::string::npos) << alloc.message;
#endif
  DeviceInfo info;
  const CudaStatus described = device_info(0, &info);
  EXPECT_FALSE(described.ok());
  EXPECT_FALSE(described.message.empty());
  Stream stream = nullptr;
  EXPECT_FALSE(stream_create(&stream).ok());
  EXPECT_TRUE(device_free(nullptr).ok());  // freeing nothing is fine anywhere
}

TEST(DeviceRuntime, WithAGpuDescribesItAndCopiesBytes) {
  std::string reason;
  if (device_count(&reason) == 0) GTEST_SKIP() << "no CUDA device: " << reason;
  DeviceInfo info;
  const CudaStatus described = device_info(0, &info);
  ASSERT_TRUE(described.ok()) << described.message;
  EXPECT_FALSE(info.name.empty());
  EXPECT_GT(info.cc_major, 0);
  EXPECT_GT(info.total_memory_bytes, 0);
  EXPECT_GT(info.n_sms, 0);
  std::printf("[   INFO   ] device 0: %s, sm_%d%d, %lld MiB, %d SMs\n", info.name.c_str(),
              info.cc_major, info.cc_minor, static_cast<long long>(info.total_memory_bytes >> 20),
              info.n_sms);
  ASSERT_TRUE(set_device(0).ok());

  Stream stream = nullptr;
  CudaStatus s = stream_create(&stream);
  ASSERT_TRUE(s.ok()) << s.message;
  constexpr size_t kBytes = 1 << 20;
  std::vector<uint8_t> host(kBytes), back(kBytes, 0);
  std::iota(host.begin(), host.end(), uint8_t{0});
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_TRUE(device_malloc(&a, kBytes).ok());
  ASSERT_TRUE(device_malloc(&b, kBytes).ok());
  // host -> a -> b -> host, then a memset of b's first half.
  s = copy_async(a, host.data(), kBytes, CopyKind::kHostToDevice, stream);
  ASSERT_TRUE(s.ok()) << s.message;
  s = copy_async(b, a, kBytes, CopyKind::kDeviceToDevice, stream);
  ASSERT_TRUE(s.ok()) << s.message;
  s = copy(back.data(), b, kBytes, CopyKind::kDeviceToHost, stream);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_EQ(back, host);
  s = memset_async(b, 0xab, kBytes / 2, stream);
  ASSERT_TRUE(s.ok()) << s.message;
  s = copy(back.data(), b, kBytes, CopyKind::kDeviceToHost, stream);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_EQ(back[0], 0xab);
  EXPECT_EQ(back[kBytes / 2 - 1], 0xab);
  EXPECT_EQ(back[kBytes / 2], host[kBytes / 2]);

  // Pinned host memory takes the same copies.
  void* pinned = nullptr;
  ASSERT_TRUE(host_malloc_pinned(&pinned, kBytes).ok());
  s = copy(pinned, a, kBytes, CopyKind::kDeviceToHost, stream);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_EQ(static_cast<uint8_t*>(pinned)[12345], host[12345]);
  EXPECT_TRUE(host_free_pinned(pinned).ok());

  EXPECT_TRUE(device_free(a).ok());
  EXPECT_TRUE(device_free(b).ok());
  EXPECT_TRUE(stream_synchronize(stream).ok());
  EXPECT_TRUE(stream_destroy(stream).ok());
  EXPECT_TRUE(last_error().ok());
}

// `ldd path`'s output, or why it could not be had (in *why).
bool ldd_output(const std::string& path, std::string* out, std::string* why) {
  FILE* pipe = popen(("ldd '" + path + "' 2>&1").c_str(), "r");
  if (pipe == nullptr) {
    *why = "popen failed";
    return false;
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out->append(buf, n);
  const int rc = pclose(pipe);
  if (rc != 0) {
    *why = "ldd " + path + " exited with " + std::to_string(rc) + ": " + *out;
    return false;
  }
  return true;
}

// cuBLASLt is opened on first use, never linked: a linked one costs every run ~90 MiB and stops
// the binary from starting where the CUDA libraries are missing. This test's binary links the
// kernels as quantserve does; quantserve itself is checked where it has been built.
TEST(CublasLtLoader, NoBinaryLinksCublasLt) {
  std::vector<std::string> binaries = {std::filesystem::read_symlink("/proc/self/exe").string()};
  if (std::filesystem::exists(QS_BINARY)) {
    binaries.push_back(QS_BINARY);
  } else {
    std::printf("[   INFO   ] %s not built: only this test's binary is checked\n", QS_BINARY);
  }
  for (const std::string& bin : binaries) {
    std::string out, why;
    if (!ldd_output(bin, &out, &why)) GTEST_SKIP() << why;
    ASSERT_NE(out.find("libc.so"), std::string::npos) << "ldd " << bin << " listed no libc:\n"
                                                      << out;
    EXPECT_EQ(out.find("cublas"), std::string::npos) << bin << " links cuBLAS:\n" << out;
  }
}

#if defined(QS_HAVE_CUDA)

TEST(CublasLtLoader, AMissingLibraryIsNamedWithDlopensReason) {
  const std::string candidates[] = {"libqs_no_such_cublasLt.so.13"};
  CublasLtApi api;
  const CudaStatus s = load_cublaslt(candidates, &api);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code, static_cast<int>(CUBLAS_STATUS_NOT_INITIALIZED));
  EXPECT_NE(s.message.find("libqs_no_such_cublasLt.so.13: cannot open shared object file"),
            std::string::npos)
      << s.message;
  EXPECT_NE(s.message.find("LD_LIBRARY_PATH"), std::string::npos) << s.message;
  EXPECT_EQ(api.cublasLtMatmul, nullptr);
}

// A library that opens but is not cuBLASLt: the first function it lacks is named, and every
// candidate's reason is kept.
TEST(CublasLtLoader, ALibraryWithoutTheFunctionsIsRefused) {
  const std::string candidates[] = {"libqs_no_such_cublasLt.so.13", "libm.so.6"};
  CublasLtApi api;
  const CudaStatus s = load_cublaslt(candidates, &api);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message.find("libqs_no_such_cublasLt.so.13"), std::string::npos) << s.message;
  EXPECT_NE(s.message.find("libm.so.6"), std::string::npos) << s.message;
  EXPECT_NE(s.message.find("undefined symbol: cublasLtGetVersion"), std::string::npos) << s.message;
  EXPECT_EQ(api.cublasLtGetVersion, nullptr);
}

// The process's cuBLASLt, where the machine has one: every function resolved, the headers'
// major version; where it has none, the reason names the library. Either way the answer is
// the same on every call.
TEST(CublasLtLoader, TheProcessLibraryLoadsOrSaysWhyNot) {
  const CublasLtApi* api = nullptr;
  const CudaStatus s = cublaslt_api(&api);
  const CublasLtApi* again = nullptr;
  const CudaStatus s2 = cublaslt_api(&again);
  EXPECT_EQ(s.code, s2.code);
  EXPECT_EQ(s.message, s2.message);
  if (!s.ok()) {
    std::printf("[   INFO   ] %s\n", s.message.c_str());
    EXPECT_NE(s.message.find("libcublasLt.so"), std::string::npos) << s.message;
    EXPECT_EQ(api, nullptr);
    return;
  }
  ASSERT_NE(api, nullptr);
  EXPECT_EQ(api, again);
  for (const void* fn : {reinterpret_cast<const void*>(api->cublasLtCreate),
                         reinterpret_cast<const void*>(api->cublasLtMatmul),
                         reinterpret_cast<const void*>(api->cublasLtMatmulAlgoGetHeuristic),
                         reinterpret_cast<const void*>(api->cublasLtMatmulPreferenceDestroy)}) {
    EXPECT_NE(fn, nullptr);
  }
  const size_t version = api->cublasLtGetVersion();
  std::printf("[   INFO   ] cuBLASLt %zu loaded\n", version);
  EXPECT_EQ(version / 10000, static_cast<size_t>(CUBLAS_VER_MAJOR));
  EXPECT_EQ(api->check(CUBLAS_STATUS_SUCCESS, "x").code, 0);
  const CudaStatus bad = api->check(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmul");
  EXPECT_EQ(bad.code, static_cast<int>(CUBLAS_STATUS_NOT_SUPPORTED));
  EXPECT_NE(bad.message.find("cublasLtMatmul: CUBLAS_STATUS_NOT_SUPPORTED"), std::string::npos)
      << bad.message;
}

// Without a GPU the GEMMs' creation fails with a message, whether cuBLASLt is missing (the
// loader's reason) or present (the device's), and hands out nothing.
TEST(CublasLtLoader, WithoutAGpuTheGemmsFailCleanly) {
  std::string reason;
  if (device_count(&reason) > 0) GTEST_SKIP() << "this machine has a CUDA device";
  const CublasLtApi* api = nullptr;
  const CudaStatus lib = cublaslt_api(&api);

  std::unique_ptr<CublasLtGemm> gemm;
  const CudaStatus s = CublasLtGemm::create(1 << 20, &gemm);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(gemm, nullptr);
  std::printf("[   INFO   ] CublasLtGemm::create: %s\n", s.message.c_str());
  if (!lib.ok()) {
    EXPECT_EQ(s.message, lib.message);
  } else {
    EXPECT_TRUE(mentions_cause(s.message)) << s.message;
  }

  std::unique_ptr<Fp8Gemm> fp8;
  const CudaStatus f = Fp8Gemm::create(1 << 20, &fp8);
  EXPECT_FALSE(f.ok());
  EXPECT_EQ(fp8, nullptr);
  EXPECT_TRUE(mentions_cause(f.message) || f.message == lib.message) << f.message;
}

#endif  // QS_HAVE_CUDA

}  // namespace
}  // namespace qs::kernels::cuda
