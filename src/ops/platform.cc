// ops: platform queries, forwarded to the kernels layer.
#include "ops/platform.h"

#include "kernels/cpu/bandwidth.h"
#include "kernels/cpu/isa.h"

namespace qs::ops {

const char* active_kernel_isa() {
  return kernels::isa_name(kernels::active_isa());
}

double measure_read_bandwidth_gbs(ThreadPool& pool, size_t bytes, int repetitions) {
  return kernels::measure_read_bandwidth_gbs(pool, bytes, repetitions);
}

size_t bandwidth_probe_bytes() {
  return kernels::bandwidth_probe_bytes();
}

size_t last_level_cache_bytes() {
  return kernels::last_level_cache_bytes();
}

}  // namespace qs::ops
