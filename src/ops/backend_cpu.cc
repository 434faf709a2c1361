// ops: the CPU backend, the ops:: functions behind the Backend interface, and the registry that
// picks a backend for a device.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "core/dtype.h"
#include "kernels/cpu/isa.h"
#include "kernels/cuda/device_runtime.h"
#include "ops/backend.h"
#include "ops/backend_cuda.h"
#include "ops/elementwise.h"

namespace qs::ops {
namespace {

// The host is the device: memory is host memory, copies are memcpy, and every op runs when
// it is called, so synchronize has nothing to wait for.
class CpuBackend final : public Backend {
 public:
  Device device() const override { return kCpuDevice; }
  std::string name() const override {
    return std::string("cpu (") + kernels::isa_name(kernels::active_isa()) + ")";
  }
  bool host_addressable() const override { return true; }

  Result<Tensor> zeros(DType dtype, std::vector<int64_t> shape) override {
    return Tensor::zeros(dtype, std::move(shape));
  }
  Status copy_from_host(void* dst, const void* host_src, size_t bytes) override {
    if (bytes != 0 && dst != host_src) std::memmove(dst, host_src, bytes);
    return ok_status();
  }
  Status copy_to_host(void* host_dst, const void* src, size_t bytes) override {
    return copy_from_host(host_dst, src, bytes);
  }
  Status copy(void* dst, const void* src, size_t bytes) override {
    return copy_from_host(dst, src, bytes);
  }
  Status synchronize() override { return ok_status(); }

  Result<LinearWeight> make_dense_linear(Tensor w) override { return with_panels(std::move(w)); }
  Result<LinearWeight> make_quant_linear(const formats::QuantScheme& scheme,
                                         const formats::QuantizedWeight& w, float input_scale,
                                         int32_t input_zero) override {
    QS_ASSIGN_OR_RETURN(std::shared_ptr<const QuantMatrix> q,
                        QuantMatrix::make(scheme, w, input_scale, input_zero));
    return LinearWeight(std::move(q));
  }
  Result<LinearWeight> adopt_linear(LinearWeight host) override {
    if (host.on_device() || (!host.dense.empty() && !host.dense.is_cpu())) {
      return invalid_argument("cpu backend: a linear weight on " + device_name(host.dense.device));
    }
    return host;
  }
  Result<Tensor> adopt_tensor(Tensor host) override { return host; }
  Status adopt_params(std::span<const float>) override { return ok_status(); }
  const float* params(std::span<const float> host) const override {
    return host.empty() ? nullptr : host.data();
  }

  Status linear(const float* x, int64_t m, const LinearWeight& w, const float* bias, float* y,
                ThreadPool& pool) override {
    return ops::linear(x, m, w, bias, y, pool);
  }
  Status linear_many(const float* x, int64_t m, std::span<const LinearOut> outs,
                     ThreadPool& pool) override {
    return ops::linear_many(x, m, outs, pool);
  }
  Status linear_grouped(const float* x, std::span<const GroupedOut> outs,
                        ThreadPool& pool) override {
    return ops::linear_grouped(x, outs, pool);
  }
  void rms_norm(const float* x, int64_t m, int64_t d, const float* weight, float eps,
                float* y) override {
    ops::rms_norm(x, m, d, weight, eps, y);
  }
  void silu_mul(const float* gate, const float* up, int64_t n, float* out) override {
    ops::silu_mul(gate, up, n, out);
  }
  void rope_rotate_half(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                        const float* cos, const float* sin) override {
    ops::rope_rotate_half(x, n_tokens, n_heads, head_dim, cos, sin);
  }
  void add_inplace(float* y, const float* x, int64_t n) override { ops::add_inplace(y, x, n); }
  void paged_kv_write(const PagedKvLayer& cache, std::span<const AttentionSeq> seqs, const float* k,
                      const float* v) override {
    ops::paged_kv_write(cache, seqs, k, v);
  }
  Status paged_attention(const float* q, const PagedKvLayer& cache,
                         std::span<const AttentionSeq> seqs, const AttentionParams& params,
                         float* out, ThreadPool& pool) override {
    return ops::paged_attention(q, cache, seqs, params, out, pool);
  }

  Status embed_rows(const Tensor& table, std::span<const int32_t> ids, int64_t row_offset,
                    float* out) override {
    if (table.rank() != 2 || !table.is_cpu() || !table.is_contiguous()) {
      return invalid_argument("embed_rows: the table must be a 2-d contiguous host tensor, not " +
                              shape_string(table.shape) + " on " + device_name(table.device));
    }
    const int64_t rows = table.dim(0), d = table.dim(1);
    for (size_t t = 0; t < ids.size(); ++t) {
      const int64_t row = ids[t] - row_offset;
      if (row < 0 || row >= rows) continue;
      float* o = out + static_cast<int64_t>(t) * d;
      const int64_t base = row * d;
      if (table.dtype == DType::kF32) {
        std::copy_n(table.ptr<float>() + base, d, o);
      } else if (table.dtype == DType::kBF16) {
        const uint16_t* src = table.ptr<uint16_t>() + base;
        for (int64_t j = 0; j < d; ++j) o[j] = bf16_to_f32(src[j]);
      } else {
        for (int64_t j = 0; j < d; ++j) o[j] = load_as_f32(table.dtype, table.data, base + j);
      }
    }
    return ok_status();
  }
};

}  // namespace

std::shared_ptr<Backend> cpu_backend_shared() {
  // Never destroyed: models and caches that outlive main's locals may still hold it.
  static auto* backend = new std::shared_ptr<Backend>(std::make_shared<CpuBackend>());
  return *backend;
}

Backend& cpu_backend() {
  static Backend& backend = *cpu_backend_shared();
  return backend;
}

bool cuda_backend_built() {
  return kernels::cuda::built_with_cuda();
}

int cuda_device_count(std::string* why_none) {
  return kernels::cuda::device_count(why_none);
}

Result<std::shared_ptr<Backend>> backend_for(Device device) {
  if (device.is_cpu()) return cpu_backend_shared();
  if (!cuda_backend_built()) {
    return unimplemented("device " + device_name(device) +
                         ": this build has no CUDA backend (configure with -DQS_CUDA=ON where "
                         "the CUDA toolkit is installed)");
  }
  std::string why;
  const int n = cuda_device_count(&why);
  if (device.index >= n) {
    return invalid_argument("device " + device_name(device) + ": " +
                            (n == 0 ? "no CUDA device (" + why + ")"
                                    : "this machine has " + std::to_string(n) + " CUDA devices"));
  }
  return cuda::make_backend(device.index);
}

Result<Device> resolve_device(std::string_view text) {
  if (text == "auto") {
    if (cuda_backend_built() && cuda_device_count() > 0) return Device{DeviceType::kCuda, 0};
    return kCpuDevice;
  }
  return parse_device(text);
}

}  // namespace qs::ops
