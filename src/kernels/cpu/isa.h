// kernels/cpu: which SIMD instruction set the CPU kernels use. Chosen once per process
// (AVX-512 > AVX2+FMA+F16C > scalar reference on x86-64, from CPUID; Highway's best target >
// scalar reference elsewhere), unless QS_KERNEL=ref|avx2|avx512|hwy forces one for tests and
// benchmarks. A forced ISA the CPU lacks falls back to the best one.
#pragma once

#include <optional>
#include <string_view>

// The hand-written AVX2, AVX-512 and AMX kernels (*_avx2.cc, *_avx512.cc, *_amx.cc) are
// compiled for x86-64 only (CMakeLists.txt): their declarations and every call to them sit
// under `#if QS_X86`, so that another architecture's build names no missing symbol.
#if defined(__x86_64__)
#define QS_X86 1
#else
#define QS_X86 0
#endif

namespace qs::kernels {

// kAvx2 and kAvx512 exist everywhere (tests and tools name them; off x86 isa_supported() says
// no). kHwy exists only off x86: there the Highway kernels (*_hwy.cc) at the best target the
// CPU has (NEON on aarch64) are the only SIMD ones, and every other op runs the reference. On
// x86 the same Highway kernels run under kAvx2 and kAvx512 beside the hand-written ones; an
// x86 kHwy would need a case in every exhaustive switch over Isa, tests' included, for a
// mode no x86 user wants.
#if QS_X86
enum class Isa { kRef, kAvx2, kAvx512 };
#else
enum class Isa { kRef, kAvx2, kAvx512, kHwy };
#endif

const char* isa_name(Isa isa);
std::optional<Isa> parse_isa(std::string_view name);

// True when this CPU can run kernels compiled for `isa`.
bool isa_supported(Isa isa);

// The ISA the ops use: QS_KERNEL if set and supported, else the best supported one.
// Read once; later changes to the environment have no effect.
Isa active_isa();

// AMX (Sapphire Rapids and later) is not an Isa of its own: its kernels are AVX-512 ones
// whose inner products run on tiles, used for the many-row GEMMs beside the AVX-512 GEMV.
// True when CPUID reports AMX-TILE, AMX-INT8 and AMX-BF16 with the AVX-512 set, and Linux
// granted this process the tile data state (arch_prctl(ARCH_REQ_XCOMP_PERM), asked once;
// without it the first tile instruction faults). Always false off x86.
bool amx_supported();
// Whether the ops use the AMX bf16 GEMM for bf16 weights: amx_supported(), the active ISA
// is avx512, and QS_AMX is not "0" (QS_AMX=0 keeps the AVX-512 GEMM, for comparisons).
bool amx_active();
// Whether the quantized linears use the AMX int8 GEMM: amx_supported(), the active ISA is
// avx512, and QS_AMX_INT8=1.
// Off by default: on the Sapphire Rapids VM it was measured on it ran 0.66-0.91x the
// AVX-512 VNNI one (docs/kernels.md, "AMX int8 GEMM"). Both read once.
bool amx_int8_active();

}  // namespace qs::kernels
