// kernels/cpu: which SIMD instruction set the CPU kernels use. Chosen once per process
// (AVX-512 > AVX2+FMA+F16C > scalar reference) from CPUID, unless QS_KERNEL=ref|avx2|avx512
// forces one for tests and benchmarks. A forced ISA the CPU lacks falls back to the best one.
#pragma once

#include <optional>
#include <string_view>

namespace qs::kernels {

enum class Isa { kRef, kAvx2, kAvx512 };

const char* isa_name(Isa isa);
std::optional<Isa> parse_isa(std::string_view name);

// True when this CPU can run kernels compiled for `isa`.
bool isa_supported(Isa isa);

// The ISA the ops use: QS_KERNEL if set and supported, else the best supported one.
// Read once; later changes to the environment have no effect.
Isa active_isa();

}  // namespace qs::kernels
