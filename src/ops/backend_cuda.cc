// ops: the CUDA backend, kernels/cuda behind the Backend interface. Built where the build has
// QS_CUDA; without it, the entry points say so. One stream per backend orders every op and
// copy; ops that return void (the per-token ones) keep their first launch error, which the next
// Status-returning call or synchronize() reports. The host pointers an op takes (block tables,
// token ids) are staged into device scratch per call.
//
// Not yet on this backend (each refused with its reason): MoE layers (the router's choice is
// made on the host, models/blocks.cc), tensor parallelism (the collectives are MPI over host
// memory), quantized schemes other than W4A16 and FP8 W8A8, and weights the CPU built (a tied
// head made int8, fused experts): load the model with --device cuda from the checkpoint.
#include "ops/backend_cuda.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "kernels/cuda/device_runtime.h"

#if defined(QS_HAVE_CUDA)
#include "core/dtype.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/fp8_gemm.h"
#include "kernels/cuda/fp8_scales.h"
#include "kernels/cuda/gemm_cublas.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/w4a16_gemm.h"
#include "kernels/cuda/w4a16_layout.h"
#include "ops/cuda_weights.h"
#endif

namespace qs::ops::cuda {

namespace kc = kernels::cuda;

#if !defined(QS_HAVE_CUDA)

Result<std::shared_ptr<Backend>> make_backend(int index) {
  return unimplemented("this build has no CUDA backend (configure with -DQS_CUDA=ON)");
}

#else

namespace {

Status to_status(const kc::CudaStatus& s) {
  return s.ok() ? ok_status() : internal_error(s.message);
}

// Device memory whose last owner frees it.
Result<std::shared_ptr<void>> device_alloc(size_t bytes) {
  void* p = nullptr;
  const kc::CudaStatus s = kc::device_malloc(&p, bytes == 0 ? 256 : bytes);
  if (!s.ok()) {
    return out_of_range("cannot allocate " + std::to_string(bytes) +
                        " bytes on the GPU: " + s.message);
  }
  return std::shared_ptr<void>(p, [](void* q) { kc::device_free(q); });
}

struct CudaDense final : PackedWeight {
  std::shared_ptr<void> w;  // [n, k] bf16
};

struct CudaW4A16 final : PackedWeight {
  std::shared_ptr<void> buffer;  // the packed layout
  kc::W4A16View view;            // into `buffer`
};

struct CudaFp8 final : PackedWeight {
  std::shared_ptr<void> codes;   // [n, k] e4m3
  std::shared_ptr<void> scales;  // [n] or [1] f32
  bool per_channel = false;
  std::shared_ptr<void> input_scale;  // [1] f32: a static activation scale, else null
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int index, kc::DeviceInfo info) : index_(index), info_(std::move(info)) {}
  ~CudaBackend() override {
    if (stream_ != nullptr) kc::stream_destroy(stream_);
  }

  Status init() {
    QS_RETURN_IF_ERROR(to_status(kc::set_device(index_)));
    QS_RETURN_IF_ERROR(to_status(kc::stream_create(&stream_)));
    // NVIDIA's advice for cuBLASLt's split-k workspace: 32 MiB on Hopper, 4 MiB before it.
    const size_t ws = info_.cc_major >= 9 ? (32u << 20) : (4u << 20);
    QS_RETURN_IF_ERROR(to_status(kc::CublasLtGemm::create(ws, &gemm_)));
    if (kc::fp8_gemm_supported(info_.cc_major, info_.cc_minor)) {
      QS_RETURN_IF_ERROR(to_status(kc::Fp8Gemm::create(ws, &fp8_)));
    }
    return ok_status();
  }

  Device device() const override { return Device{DeviceType::kCuda, index_}; }
  std::string name() const override {
    return device_name(device()) + " (" + info_.name + ", sm_" + std::to_string(info_.cc_major) +
           std::to_string(info_.cc_minor) + ")";
  }
  bool host_addressable() const override { return false; }

  Result<Tensor> zeros(DType dtype, std::vector<int64_t> shape) override {
    QS_RETURN_IF_ERROR(to_status(kc::set_device(index_)));
    Tensor t;
    t.dtype = dtype;
    t.shape = std::move(shape);
    t.device = device();
    QS_ASSIGN_OR_RETURN(std::shared_ptr<void> p, device_alloc(t.nbytes()));
    QS_RETURN_IF_ERROR(to_status(kc::memset_async(p.get(), 0, t.nbytes(), stream_)));
    t.data = p.get();
    t.writable_data = p.get();
    t.owner = std::move(p);
    return t;
  }
  Status copy_from_host(void* dst, const void* host_src, size_t bytes) override {
    return to_status(kc::copy(dst, host_src, bytes, kc::CopyKind::kHostToDevice, stream_));
  }
  Status copy_to_host(void* host_dst, const void* src, size_t bytes) override {
    return to_status(kc::copy(host_dst, src, bytes, kc::CopyKind::kDeviceToHost, stream_));
  }
  Status copy(void* dst, const void* src, size_t bytes) override {
    return to_status(kc::copy_async(dst, src, bytes, kc::CopyKind::kDeviceToDevice, stream_));
  }
  Status synchronize() override {
    QS_RETURN_IF_ERROR(sticky());
    return to_status(kc::stream_synchronize(stream_));
  }

  Result<LinearWeight> make_dense_linear(Tensor w) override {
    if (w.rank() != 2 || !w.is_cpu() || !w.is_contiguous()) {
      return invalid_argument("cuda: a dense weight must be a 2-d host tensor, not " +
                              shape_string(w.shape) + " on " + device_name(w.device));
    }
    const int64_t n = w.dim(0), k = w.dim(1);
    std::vector<uint16_t> bf16;
    const void* src = w.data;
    if (w.dtype != DType::kBF16) {  // cuBLASLt multiplies bf16 by bf16
      bf16.resize(static_cast<size_t>(n * k));
      for (int64_t i = 0; i < n * k; ++i) bf16[i] = f32_to_bf16(load_as_f32(w.dtype, w.data, i));
      src = bf16.data();
    }
    auto d = std::make_shared<CudaDense>();
    QS_ASSIGN_OR_RETURN(d->w, upload(src, static_cast<size_t>(n * k) * 2));
    describe(d.get(), n, k, static_cast<size_t>(n * k) * 2, "bf16 (cublaslt)");
    LinearWeight out;
    out.packed = std::move(d);
    return out;
  }

  Result<LinearWeight> make_quant_linear(const formats::QuantScheme& scheme,
                                         const formats::QuantizedWeight& w, float input_scale,
                                         int32_t input_zero) override {
    LinearWeight out;
    if (w.code_type == formats::CodeType::kFp8E4m3 && scheme.act.quantized()) {
      QS_ASSIGN_OR_RETURN(out.packed, make_fp8(scheme, w, input_scale));
      return out;
    }
    if (scheme.act.quantized()) {
      return unimplemented("cuda: " + scheme.describe() +
                           " has no CUDA kernel yet (W4A16 and FP8 "
                           "W8A8 do); use --device cpu");
    }
    QS_RETURN_IF_ERROR(w4a16_supported(w));
    const W4A16Glue glue = w4a16_source(w, w4_scale_type(w.scale_dtype));
    const kc::W4A16Layout layout = kc::w4a16_layout(glue.src);
    std::unique_ptr<uint8_t, decltype(&std::free)> host(
        static_cast<uint8_t*>(std::aligned_alloc(
            kc::kW4Align, (layout.total_bytes + kc::kW4Align - 1) / kc::kW4Align * kc::kW4Align)),
        &std::free);
    if (host == nullptr) throw std::bad_alloc();
    kc::w4a16_pack(glue.src, host.get());
    auto q = std::make_shared<CudaW4A16>();
    QS_ASSIGN_OR_RETURN(q->buffer, upload(host.get(), layout.total_bytes));
    q->view = kc::w4a16_view(layout, q->buffer.get());
    describe(
        q.get(), w.n, w.k, layout.total_bytes,
        "int" + std::to_string(w.bits) + " g" + std::to_string(w.group_size) + " (cuda w4a16 mma)");
    out.packed = std::move(q);
    return out;
  }

  Result<LinearWeight> adopt_linear(LinearWeight host) override {
    if (host.on_device()) return host;
    if (host.quant != nullptr) {
      return unimplemented("cuda: a weight the CPU built (" + host.kernel() +
                           ") cannot move to the GPU; load the checkpoint with --device cuda "
                           "(an int8 lm_head and fused MoE experts are CPU-only so far)");
    }
    return make_dense_linear(host.dense);
  }

  Result<Tensor> adopt_tensor(Tensor host) override {
    if (!host.is_cpu()) return host;
    if (!host.is_contiguous()) return invalid_argument("cuda: a strided tensor to adopt");
    QS_ASSIGN_OR_RETURN(Tensor t, zeros(host.dtype, host.shape));
    QS_RETURN_IF_ERROR(copy_from_host(t.writable_data, host.data, host.nbytes()));
    return t;
  }

  Status adopt_params(std::span<const float> host) override {
    if (host.empty() || params_.count(host.data())) return ok_status();
    QS_ASSIGN_OR_RETURN(std::shared_ptr<void> d, upload(host.data(), host.size_bytes()));
    params_[host.data()] = std::move(d);
    return ok_status();
  }
  const float* params(std::span<const float> host) const override {
    if (host.empty()) return nullptr;
    auto it = params_.find(host.data());
    QS_CHECK_MSG(it != params_.end(), "a parameter the CUDA backend was not given at load");
    return static_cast<const float*>(it->second.get());
  }

  Status linear(const float* x, int64_t m, const LinearWeight& w, const float* bias, float* y,
                ThreadPool&) override {
    QS_RETURN_IF_ERROR(sticky());
    if (!w.on_device()) {
      return invalid_argument("cuda: linear of a host weight (" + w.kernel() + ")");
    }
    const int64_t n = w.rows(), k = w.cols();
    if (m == 0) return ok_status();
    QS_RETURN_IF_ERROR(x_bf16_.resize(*this, m * k));
    QS_RETURN_IF_ERROR(to_status(kc::cast_f32_to_bf16(x, m * k, x_bf16_.data(), stream_)));
    if (auto* d = dynamic_cast<const CudaDense*>(w.packed.get())) {
      return to_status(gemm_->linear_bf16(x_bf16_.data(), static_cast<const uint16_t*>(d->w.get()),
                                          bias, m, n, k, y, stream_));
    }
    if (auto* q = dynamic_cast<const CudaW4A16*>(w.packed.get())) {
      kc::W4A16GemmArgs a;
      a.w = q->view;
      a.x = x_bf16_.data();
      a.m = m;
      a.y = y;
      a.splits = kc::w4a16_choose_splits(q->view, m, info_.n_sms);
      a.workspace_bytes = kc::w4a16_workspace_bytes(q->view, m, a.splits);
      QS_RETURN_IF_ERROR(workspace_.resize(*this, static_cast<int64_t>(a.workspace_bytes)));
      a.workspace = workspace_.data();
      QS_RETURN_IF_ERROR(to_status(kc::w4a16_gemm(a, stream_)));
      return add_bias(y, bias, m, n);
    }
    if (auto* f = dynamic_cast<const CudaFp8*>(w.packed.get())) {
      QS_RETURN_IF_ERROR(fp8_x_.resize(*this, m * k));
      QS_RETURN_IF_ERROR(fp8_scales_.resize(*this, m));
      QS_RETURN_IF_ERROR(to_status(kc::fp8_quantize_rows(
          x_bf16_.data(), m, k, static_cast<const float*>(f->input_scale.get()), fp8_x_.data(),
          fp8_scales_.data(), stream_)));
      kc::Fp8GemmArgs a;
      a.qx = fp8_x_.data();
      a.x_scales = fp8_scales_.data();
      a.x_per_token = f->input_scale == nullptr;
      a.qw = static_cast<const uint8_t*>(f->codes.get());
      a.w_scales = static_cast<const float*>(f->scales.get());
      a.w_per_channel = f->per_channel;
      a.m = m;
      a.n = n;
      a.k = k;
      a.y = y;
      a.y_bf16 = false;
      QS_RETURN_IF_ERROR(to_status(fp8_->linear(a, stream_)));
      return add_bias(y, bias, m, n);
    }
    return internal_error("cuda: a device weight of another backend");
  }
  Status linear_many(const float* x, int64_t m, std::span<const LinearOut> outs,
                     ThreadPool& pool) override {
    for (const LinearOut& o : outs) QS_RETURN_IF_ERROR(linear(x, m, *o.w, o.bias, o.y, pool));
    return ok_status();
  }
  Status linear_grouped(const float* x, std::span<const GroupedOut> outs,
                        ThreadPool& pool) override {
    for (const GroupedOut& o : outs) {
      QS_RETURN_IF_ERROR(linear(x + o.row_begin * o.w->cols(), o.rows, *o.w, o.bias, o.y, pool));
    }
    return ok_status();
  }

  void rms_norm(const float* x, int64_t m, int64_t d, const float* weight, float eps,
                float* y) override {
    keep(kc::rms_norm(x, m, d, weight, eps, y, stream_));
  }
  void silu_mul(const float* gate, const float* up, int64_t n, float* out) override {
    keep(kc::silu_mul(gate, up, n, out, stream_));
  }
  void rope_rotate_half(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                        const float* cos, const float* sin) override {
    keep(kc::rope_rotate_half(x, n_tokens, n_heads, head_dim, cos, sin, stream_));
  }
  void add_inplace(float* y, const float* x, int64_t n) override {
    keep(kc::add_inplace(y, x, n, stream_));
  }
  void paged_kv_write(const PagedKvLayer& cache, std::span<const AttentionSeq> seqs, const float* k,
                      const float* v) override {
    const Status s = stage_seqs(cache, seqs);
    if (!s.ok()) {
      if (sticky_.ok()) sticky_ = s;
      return;
    }
    keep(kc::paged_kv_write(kv_of(cache), seqs_.data(), static_cast<int32_t>(seqs.size()),
                            tables_.data(), k, v, n_tokens_, stream_));
  }
  Status paged_attention(const float* q, const PagedKvLayer& cache,
                         std::span<const AttentionSeq> seqs, const AttentionParams& params,
                         float* out, ThreadPool&) override {
    QS_RETURN_IF_ERROR(sticky());
    if (cache.head_dim > kc::kMaxAttentionHeadDim) {
      return unimplemented("cuda: attention over head_dim " + std::to_string(cache.head_dim) +
                           " (the kernel takes up to " + std::to_string(kc::kMaxAttentionHeadDim) +
                           ")");
    }
    QS_RETURN_IF_ERROR(stage_seqs(cache, seqs));
    kc::PagedAttentionArgs a;
    a.q = q;
    a.out = out;
    a.cache = kv_of(cache);
    a.seqs = seqs_.data();
    a.n_seqs = static_cast<int32_t>(seqs.size());
    a.block_tables = tables_.data();
    a.n_tokens = n_tokens_;
    a.n_heads = params.n_heads;
    a.scale = params.scale;
    a.sliding_window = params.sliding_window;
    a.max_seq_len = max_seq_len_;
    const size_t ws = kc::paged_attention_workspace_bytes(n_tokens_, params.n_heads, cache.head_dim,
                                                          max_seq_len_, params.sliding_window);
    if (ws > 0) {
      QS_RETURN_IF_ERROR(attn_ws_.resize(*this, static_cast<int64_t>(ws / sizeof(float)) + 1));
      a.workspace = attn_ws_.data();
    }
    return to_status(kc::paged_attention(a, stream_));
  }

  Status embed_rows(const Tensor& table, std::span<const int32_t> ids, int64_t row_offset,
                    float* out) override {
    QS_RETURN_IF_ERROR(sticky());
    if (table.rank() != 2 || table.device != device()) {
      return invalid_argument("cuda: embed_rows of a table on " + device_name(table.device));
    }
    const int64_t n = static_cast<int64_t>(ids.size());
    QS_RETURN_IF_ERROR(ids_.resize(*this, n));
    QS_RETURN_IF_ERROR(copy_from_host(ids_.data(), ids.data(), ids.size_bytes()));
    return to_status(kc::embedding_gather(table.data, table.dtype, table.dim(0), table.dim(1),
                                          ids_.data(), n, row_offset, out, stream_));
  }

 private:
  Result<std::shared_ptr<void>> upload(const void* host, size_t bytes) {
    QS_RETURN_IF_ERROR(to_status(kc::set_device(index_)));
    QS_ASSIGN_OR_RETURN(std::shared_ptr<void> d, device_alloc(bytes));
    QS_RETURN_IF_ERROR(copy_from_host(d.get(), host, bytes));
    return d;
  }

  void describe(PackedWeight* w, int64_t n, int64_t k, size_t bytes, std::string kernel) const {
    w->device = device();
    w->n = n;
    w->k = k;
    w->bytes = bytes;
    w->kernel = std::move(kernel);
  }

  Result<std::shared_ptr<const PackedWeight>> make_fp8(const formats::QuantScheme& scheme,
                                                       const formats::QuantizedWeight& w,
                                                       float input_scale) {
    if (fp8_ == nullptr) {
      return unimplemented("cuda: FP8 W8A8 needs FP8 tensor cores (sm_89 or later); " + name() +
                           " has none");
    }
    if (w.n_groups() > 1) {
      return unimplemented("cuda: FP8 with block scales (" + scheme.describe() + ")");
    }
    if (w.n % 16 != 0 || w.k % 16 != 0) {
      return unimplemented("cuda: FP8 W8A8 of [" + std::to_string(w.n) + ", " +
                           std::to_string(w.k) + "] (cuBLASLt wants multiples of 16)");
    }
    const kc::Fp8WeightScales s = kc::fp8_weight_scales(w.scales.data(), w.n);
    auto f = std::make_shared<CudaFp8>();
    QS_ASSIGN_OR_RETURN(f->codes, upload(w.codes.data(), w.codes.size()));
    QS_ASSIGN_OR_RETURN(f->scales, upload(s.values.data(), s.values.size() * sizeof(float)));
    f->per_channel = s.per_channel;
    if (!scheme.act.dynamic) {
      QS_ASSIGN_OR_RETURN(f->input_scale, upload(&input_scale, sizeof(float)));
    }
    describe(f.get(), w.n, w.k, w.codes.size() + s.values.size() * sizeof(float),
             "fp8 w8a8 (cublaslt)");
    return std::shared_ptr<const PackedWeight>(std::move(f));
  }

  // y[i, :] += bias for m rows (the packed GEMMs take no bias).
  Status add_bias(float* y, const float* bias, int64_t m, int64_t n) {
    if (bias == nullptr) return ok_status();
    for (int64_t i = 0; i < m; ++i) {
      QS_RETURN_IF_ERROR(to_status(kc::add_inplace(y + i * n, bias, n, stream_)));
    }
    return ok_status();
  }

  static kc::PagedKvCache kv_of(const PagedKvLayer& c) {
    kc::PagedKvCache k;
    k.dtype = c.dtype;
    k.k = c.k;
    k.v = c.v;
    k.block_size = c.block_size;
    k.n_kv_heads = c.n_kv_heads;
    k.head_dim = c.head_dim;
    k.k_scale = c.k_scale;
    k.v_scale = c.v_scale;
    return k;
  }

  // The batch's descriptors and block tables on the device, uploaded once per forward: every
  // layer passes the same sequences, which are compared with the last ones staged.
  Status stage_seqs(const PagedKvLayer& cache, std::span<const AttentionSeq> seqs) {
    std::vector<int32_t> key;
    std::vector<kc::PagedSeq> host;
    std::vector<int32_t> tables;
    n_tokens_ = 0;
    max_seq_len_ = 0;
    for (const AttentionSeq& s : seqs) {
      const int64_t need = (s.start_pos + s.n_query + cache.block_size - 1) / cache.block_size;
      host.push_back({static_cast<int32_t>(s.query_start), static_cast<int32_t>(s.n_query),
                      static_cast<int32_t>(s.start_pos), static_cast<int32_t>(tables.size())});
      tables.insert(tables.end(), s.block_table.begin(), s.block_table.begin() + need);
      n_tokens_ = std::max(n_tokens_, s.query_start + s.n_query);
      max_seq_len_ = std::max(max_seq_len_, s.start_pos + s.n_query);
    }
    key.reserve(host.size() * 4 + tables.size());
    for (const kc::PagedSeq& p : host) {
      key.insert(key.end(), {p.query_start, p.n_query, p.start_pos, p.block_table_offset});
    }
    key.insert(key.end(), tables.begin(), tables.end());
    if (key == staged_key_) return ok_status();
    QS_RETURN_IF_ERROR(seqs_.resize(*this, static_cast<int64_t>(host.size())));
    QS_RETURN_IF_ERROR(tables_.resize(*this, static_cast<int64_t>(tables.size()) + 1));
    QS_RETURN_IF_ERROR(copy_from_host(seqs_.data(), host.data(), host.size() * sizeof(host[0])));
    QS_RETURN_IF_ERROR(copy_from_host(tables_.data(), tables.data(), tables.size() * 4));
    staged_key_ = std::move(key);
    return ok_status();
  }

  void keep(const kc::CudaStatus& s) {
    if (!s.ok() && sticky_.ok()) sticky_ = internal_error(s.message);
  }
  Status sticky() {
    Status s = sticky_;
    sticky_ = ok_status();
    return s;
  }

  int index_;
  kc::DeviceInfo info_;
  kc::Stream stream_ = nullptr;
  std::unique_ptr<kc::CublasLtGemm> gemm_;
  std::unique_ptr<kc::Fp8Gemm> fp8_;
  std::map<const float*, std::shared_ptr<void>> params_;  // host parameter -> its device copy
  DeviceArray<uint16_t> x_bf16_;
  DeviceArray<uint8_t> workspace_, fp8_x_;
  DeviceArray<float> fp8_scales_, attn_ws_;
  DeviceArray<int32_t> ids_, tables_;
  DeviceArray<kc::PagedSeq> seqs_;
  std::vector<int32_t> staged_key_;
  int64_t n_tokens_ = 0, max_seq_len_ = 0;
  Status sticky_;
};

}  // namespace

Result<std::shared_ptr<Backend>> make_backend(int index) {
  kc::DeviceInfo info;
  QS_RETURN_IF_ERROR(to_status(kc::device_info(index, &info)));
  if (info.cc_major < 8) {
    return unimplemented("cuda:" + std::to_string(index) + " (" + info.name + ", sm_" +
                         std::to_string(info.cc_major) + std::to_string(info.cc_minor) +
                         "): the kernels need sm_80 or later (bf16 tensor cores)");
  }
  auto b = std::make_shared<CudaBackend>(index, std::move(info));
  QS_RETURN_IF_ERROR(b->init());
  return std::shared_ptr<Backend>(std::move(b));
}

#endif

}  // namespace qs::ops::cuda
