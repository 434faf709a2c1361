// kernels/cpu: run-time ISA selection from CPUID (x86-64; elsewhere Highway's own detection
// picks the target inside kHwy) and the QS_KERNEL override.
#include "kernels/cpu/isa.h"

#if QS_X86
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/log.h"

namespace qs::kernels {
namespace {

#if QS_X86
constexpr Isa kAllIsas[] = {Isa::kRef, Isa::kAvx2, Isa::kAvx512};
constexpr const char* kIsaNames = "ref, avx2, avx512";
#else
constexpr Isa kAllIsas[] = {Isa::kRef, Isa::kAvx2, Isa::kAvx512, Isa::kHwy};
constexpr const char* kIsaNames = "ref, avx2, avx512, hwy";
#endif

#if QS_X86

// F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does not know "f16c".
// CPUID once: in a VM it traps to the hypervisor (microseconds), and the ops ask on every
// call (1.6% of a batched decode step in perf before this was cached).
bool has_f16c() {
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
  }();
  return has;
}

#endif  // QS_X86

Isa best_supported() {
#if QS_X86
  if (isa_supported(Isa::kAvx512)) return Isa::kAvx512;
  if (isa_supported(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kRef;
#else
  return Isa::kHwy;
#endif
}

Isa select_isa() {
  const char* env = std::getenv("QS_KERNEL");
  if (env == nullptr || env[0] == '\0') return best_supported();
  const std::optional<Isa> forced = parse_isa(env);
  if (!forced) {
    QS_LOG_WARN("QS_KERNEL=%s is not one of %s; using %s", env, kIsaNames,
                isa_name(best_supported()));
    return best_supported();
  }
  if (!isa_supported(*forced)) {
    QS_LOG_WARN("QS_KERNEL=%s: this CPU lacks it; using %s", env, isa_name(best_supported()));
    return best_supported();
  }
  return *forced;
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kRef:
      return "ref";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
#if !QS_X86
    case Isa::kHwy:
      return "hwy";
#endif
  }
  return "?";
}

std::optional<Isa> parse_isa(std::string_view name) {
  for (Isa isa : kAllIsas) {
    if (name == isa_name(isa)) return isa;
  }
  return std::nullopt;
}

bool isa_supported(Isa isa) {
#if !QS_X86
  // Highway's static target is the compiler's baseline for this architecture (NEON on
  // aarch64), which every CPU of it has; none of the x86 kernels is compiled here.
  return isa == Isa::kRef || isa == Isa::kHwy;
#else
  switch (isa) {
    case Isa::kRef:
      return true;
    case Isa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    case Isa::kAvx512:
      // The avx512 kernels are compiled with F/BW/VL/DQ/BF16/VNNI (see CMakeLists.txt), so the
      // compiler may use any of them; require all.
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vnni") &&
             __builtin_cpu_supports("fma") && has_f16c();
  }
  return false;
#endif
}

#if QS_X86
namespace {

// CPUID.(EAX=7, ECX=0):EDX bits 22 (AMX-BF16), 24 (AMX-TILE), 25 (AMX-INT8).
bool cpu_has_amx() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  constexpr unsigned kBits = (1u << 22) | (1u << 24) | (1u << 25);
  return (edx & kBits) == kBits;
}

// Linux (5.16+) keeps the 8 KiB tile data out of a process's state until it asks for it.
bool request_tile_permission() {
  constexpr int kArchGetXcompPerm = 0x1022, kArchReqXcompPerm = 0x1023;
  constexpr unsigned long kXfeatureXtiledata = 18;  // NOLINT(runtime/int): the syscall's type
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
  uint64_t granted = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &granted) != 0) return false;
  return (granted & (uint64_t{1} << kXfeatureXtiledata)) != 0;
}

bool detect_amx() {
  if (!isa_supported(Isa::kAvx512) || !cpu_has_amx()) return false;
  if (!request_tile_permission()) {
    QS_LOG_WARN("the CPU has AMX but the kernel refused the tile state; using AVX-512 only");
    return false;
  }
  return true;
}

}  // namespace

bool amx_supported() {
  static const bool ok = detect_amx();
  return ok;
}
#else
bool amx_supported() {
  return false;
}
#endif

bool amx_active() {
  static const bool on = [] {
    const char* env = std::getenv("QS_AMX");
    if (env != nullptr && std::strcmp(env, "0") == 0) return false;
    return active_isa() == Isa::kAvx512 && amx_supported();
  }();
  return on;
}

bool amx_int8_active() {
  static const bool on = [] {
    const char* env = std::getenv("QS_AMX_INT8");
    if (env == nullptr || std::strcmp(env, "1") != 0) return false;
    return active_isa() == Isa::kAvx512 && amx_supported();
  }();
  return on;
}

Isa active_isa() {
  static const Isa isa = select_isa();
  return isa;
}

}  // namespace qs::kernels
