// ops: the backend seam. A Backend is a device together with the ops a decoder calls on it: it
// allocates the tensors that live there (activations, scratch, the paged KV cache), copies
// between them and the host, takes each weight once at load into whatever form its kernels
// want, and runs the ops. Models, the engine and the quantizer call a Backend and name no
// device; the CPU backend (backend_cpu.cc) is these ops:: functions on the host's threads.
//
// Pointers handed to the ops are the backend's own (a tensor it allocated, a weight it
// adopted); host pointers go in through copy_from_host / stage and come out through
// copy_to_host. On a backend whose memory the host can address (host_addressable()), both are
// plain host pointers and those copies cost nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/device.h"
#include "core/status.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "formats/quant_scheme.h"
#include "formats/quantized_weight.h"
#include "ops/attention.h"
#include "ops/linear.h"

namespace qs::ops {

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  // For reports: "cpu (avx512-vnni)", "cuda:0 (NVIDIA H100 80GB HBM3, sm_90)".
  virtual std::string name() const = 0;
  // Whether host code may read and write this backend's memory directly (the CPU's).
  virtual bool host_addressable() const = 0;

  // --- memory ---
  // A zero-filled tensor on this device, 64-byte aligned. Sizes come from budgets and
  // requests, so running out is the caller's to report, never an abort: a device backend
  // returns an out-of-range error naming the bytes, the CPU throws std::bad_alloc as
  // Tensor::zeros does (which every front end reports as out of memory).
  virtual Result<Tensor> zeros(DType dtype, std::vector<int64_t> shape) = 0;
  // Copies `bytes` between host memory and this backend's memory, or within the backend.
  // Ordered with the ops before and after them, as a CUDA stream orders them.
  virtual Status copy_from_host(void* dst, const void* host_src, size_t bytes) = 0;
  virtual Status copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;
  virtual Status copy(void* dst, const void* src, size_t bytes) = 0;
  // Returns once every op issued so far has finished, with the first error any of them had.
  virtual Status synchronize() = 0;

  // --- weights, once at load ---
  // A 16-bit [n, k] weight (a view of the checkpoint) in the form this backend's kernels read:
  // the CPU's pair panels where they pay (ops::with_panels), a device copy elsewhere.
  virtual Result<LinearWeight> make_dense_linear(Tensor w) = 0;
  // A quantized weight from its logical content (formats/quantized_weight.h), packed once for
  // this backend's kernels: the CPU's ops::QuantMatrix, the CUDA backend's W4A16 tiles. A scheme
  // the backend has no kernel for is an unimplemented error naming it.
  virtual Result<LinearWeight> make_quant_linear(const formats::QuantScheme& scheme,
                                                 const formats::QuantizedWeight& w,
                                                 float input_scale, int32_t input_zero) = 0;
  // A linear weight built on the host by other paths (a tied head, fused experts, the int8
  // lm_head) in this backend's form; the CPU keeps it as it is, and a weight the backend
  // already holds stays as it is.
  virtual Result<LinearWeight> adopt_linear(LinearWeight host) = 0;
  // A host tensor the backend's ops read as it is (the embedding table): itself on the CPU, a
  // device copy elsewhere.
  virtual Result<Tensor> adopt_tensor(Tensor host) = 0;
  // An f32 parameter vector the model keeps on the host (a norm weight, a bias): its copy
  // on this device, read by the ops through params(). The CPU keeps none.
  virtual Status adopt_params(std::span<const float> host) = 0;
  // The device copy of an adopted parameter vector (the host pointer itself on the CPU); an
  // empty span gives nullptr (no bias).
  virtual const float* params(std::span<const float> host) const = 0;

  // --- the ops of a decoder; each as the ops:: function of the same name (linear.h,
  // elementwise.h, attention.h), on this backend's pointers. The host's threads go with every
  // call: the CPU computes on them, a device backend uses them for host-side work only.
  virtual Status linear(const float* x, int64_t m, const LinearWeight& w, const float* bias,
                        float* y, ThreadPool& pool) = 0;
  virtual Status linear_many(const float* x, int64_t m, std::span<const LinearOut> outs,
                             ThreadPool& pool) = 0;
  virtual Status linear_grouped(const float* x, std::span<const GroupedOut> outs,
                                ThreadPool& pool) = 0;
  virtual void rms_norm(const float* x, int64_t m, int64_t d, const float* weight, float eps,
                        float* y) = 0;
  virtual void silu_mul(const float* gate, const float* up, int64_t n, float* out) = 0;
  virtual void rope_rotate_half(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                                const float* cos, const float* sin) = 0;
  virtual void add_inplace(float* y, const float* x, int64_t n) = 0;
  virtual void paged_kv_write(const PagedKvLayer& cache, std::span<const AttentionSeq> seqs,
                              const float* k, const float* v) = 0;
  virtual Status paged_attention(const float* q, const PagedKvLayer& cache,
                                 std::span<const AttentionSeq> seqs, const AttentionParams& params,
                                 float* out, ThreadPool& pool) = 0;
  // out[t, :] = row ids[t] - row_offset of `table` [rows, d] (f32, bf16 or f16, adopted or
  // host), as f32; ids outside [row_offset, row_offset + rows) leave their row of out as it
  // was (a vocabulary-parallel shard fills only its own rows). ids are host values.
  virtual Status embed_rows(const Tensor& table, std::span<const int32_t> ids, int64_t row_offset,
                            float* out) = 0;
};

// A growable array on a backend, for activations and scratch: grows to the largest size asked
// for and keeps it; what it held is not kept across a growth. Read and written by the
// backend's ops only, unless the backend is host_addressable.
template <class T>
class DeviceArray {
 public:
  // Makes room for n elements on `backend` (the array belongs to the first backend it sees).
  Status resize(Backend& backend, int64_t n) {
    size_ = n;
    if (n <= capacity_) return ok_status();
    QS_ASSIGN_OR_RETURN(storage_, backend.zeros(DType::kU8, {n * static_cast<int64_t>(sizeof(T))}));
    capacity_ = n;
    return ok_status();
  }
  T* data() { return capacity_ ? storage_.template mutable_ptr<T>() : nullptr; }
  const T* data() const { return capacity_ ? storage_.template mutable_ptr<T>() : nullptr; }
  int64_t size() const { return size_; }

 private:
  Tensor storage_;
  int64_t size_ = 0, capacity_ = 0;
};

// The process's CPU backend (kernels chosen by kernels::active_isa()).
Backend& cpu_backend();
std::shared_ptr<Backend> cpu_backend_shared();

// The backend of `device`: the CPU always; "cuda:N" where this build has the CUDA backend and
// the machine has that GPU, else an error saying which of the two is missing.
Result<std::shared_ptr<Backend>> backend_for(Device device);
// vLLM's --device: "cpu", "cuda", "cuda:N", or "auto" (cuda:0 where backend_for can make it,
// else the CPU).
Result<Device> resolve_device(std::string_view text);
// Whether this build has a CUDA backend, and how many GPUs it sees (0 with a reason where the
// driver or the device is missing).
bool cuda_backend_built();
int cuda_device_count(std::string* why_none = nullptr);

}  // namespace qs::ops
