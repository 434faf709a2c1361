// ops: linear front end. Checks the weight once, picks the kernel for the active ISA
// (kernels/cpu/isa.h) and the shape (GEMV for decode-sized m, GEMM otherwise), and splits
// the output columns over the pool so that every thread streams its own rows of w.
#include "ops/linear.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "core/mmap_file.h"
#include "core/resident_arena.h"
#include "kernels/cpu/elementwise_cpu.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/linear_cpu.h"
#include "kernels/cpu/qlinear_bf16act.h"
#include "kernels/cpu/qlinear_cpu.h"
#include "kernels/ref/linear_ref.h"
#include "kernels/ref/qlinear_bf16act_ref.h"
#include "kernels/ref/qlinear_ref.h"
#include "ops/platform.h"

namespace qs::ops {
namespace {

// The CPU backend's packed form of a bf16 weight: pair panels, which the AVX-512 kernels read
// for every m (kernels/cpu/linear_cpu.h); `dense` stays beside them for the other ISAs.
struct CpuPairPanels final : PackedWeight {
  std::shared_ptr<uint8_t[]> data;
};

using kernels::cpu::LinearKernel;

// The GEMM packs weight panels once per call; it pays off only for many rows of x.
bool use_gemm(kernels::Isa isa, int64_t m) {
  return m >= (isa == kernels::Isa::kAvx512 ? kernels::cpu::kGemmMinRowsAvx512
                                            : kernels::cpu::kGemmMinRowsAvx2);
}

// The Highway kernels (linear_hwy.cc) of the target the per-token ops run for this ISA (the
// best the CPU has, but 256-bit code under avx2); null for the reference.
LinearKernel choose_kernel(kernels::Isa isa, int64_t m) {
  if (isa == kernels::Isa::kRef) return nullptr;
  static const kernels::cpu::LinearKernels& best =
      kernels::cpu::linear_hwy(kernels::cpu::elementwise_hwy_target(kernels::Isa::kAvx512));
  static const kernels::cpu::LinearKernels& avx2 =
      kernels::cpu::linear_hwy(kernels::cpu::elementwise_hwy_target(kernels::Isa::kAvx2));
  const kernels::cpu::LinearKernels& k = isa == kernels::Isa::kAvx2 ? avx2 : best;
  return use_gemm(isa, m) ? k.gemm : k.gemv;
}

using QLinearKernel = void (*)(const kernels::cpu::QLinearArgs&, int64_t, int64_t);
using QuantizeActs = kernels::QActsView (*)(const kernels::QMatrixView&, const float*, int64_t,
                                            void*);

// The int8 activations of one call live in a per-thread buffer that only grows, so decode
// allocates nothing after its first token.
void* acts_scratch(size_t bytes) {
  struct Scratch {
    std::unique_ptr<void, decltype(&std::free)> data{nullptr, &std::free};
    size_t bytes = 0;
  };
  thread_local Scratch scratch;
  if (scratch.bytes < bytes) {
    const size_t want = (bytes + 63) / 64 * 64;
    scratch.data.reset(std::aligned_alloc(64, want));
    // m rows of activations (a prompt chunk's tokens): out of memory is not a bug of ours.
    if (scratch.data == nullptr) throw std::bad_alloc();
    scratch.bytes = want;
  }
  return scratch.data.get();
}

// The int8-activation kernels for `isa` (not kRef): the Highway target the per-token ops run
// for `isa` (qlinear_*_hwy.cc), as ops::gemm picks its f32 kernel, but for AVX-512 on x86 the
// hand-written GEMV, which Highway's AVX3_DL GEMV trails by 1.3-1.6x at m = 1 on W8 (Qwen2.5-0.5B
// decode rows; docs/kernels.md, "Quantized linear kernels").
const kernels::cpu::QLinearKernels& qlinear_kernels(kernels::Isa isa) {
  static const kernels::cpu::QLinearKernels& hwy512 =
      kernels::cpu::qlinear_hwy(kernels::cpu::elementwise_hwy_target(kernels::Isa::kAvx512));
  static const kernels::cpu::QLinearKernels& hwy2 =
      kernels::cpu::qlinear_hwy(kernels::cpu::elementwise_hwy_target(kernels::Isa::kAvx2));
#if QS_X86
  static const kernels::cpu::QLinearKernels avx512 = {kernels::cpu::qlinear_gemv_avx512,
                                                      hwy512.gemm, hwy512.quantize_acts};
#else
  static const kernels::cpu::QLinearKernels& avx512 = hwy512;
#endif
  return isa == kernels::Isa::kAvx512 ? avx512 : hwy2;
}

// One weight's share of a call, checked and ready to run on any range of its output columns.
struct Job {
  int64_t n = 0;       // output columns
  int64_t macs = 0;    // m * n * k, to decide whether waking threads pays
  int64_t grain = 16;  // column granularity a thread's range must keep
  std::function<void(int64_t, int64_t)> run;
};

void add_bias(const float* bias, int64_t m, int64_t n, int64_t begin, int64_t end, float* y) {
  if (bias == nullptr) return;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = begin; j < end; ++j) y[i * n + j] += bias[j];
}

// `a` is the call's activations quantized for `q`'s layout (see quantize_for).
Job packed_job(kernels::Isa isa, int64_t m, const QuantMatrix& q, const kernels::QActsView* a,
               const float* bias, float* y) {
  const kernels::QMatrixView* w = &q.view();
  const int64_t n = w->n;
  const bool gemm = m >= kernels::cpu::kQGemmMinRows;
  QLinearKernel kernel = nullptr;
  if (isa != kernels::Isa::kRef) {
    const kernels::cpu::QLinearKernels& k = qlinear_kernels(isa);
    kernel = gemm ? k.gemm : k.gemv;
#if QS_X86
    if (isa == kernels::Isa::kAvx512 && m >= kernels::cpu::kQAmxMinRows &&
        kernels::amx_int8_active()) {
      kernel = kernels::cpu::qlinear_gemm_amx;
    }
#endif
  }
  Job job;
  job.n = n;
  job.macs = m * n * w->k;
  // The GEMM's 32-column panels stay whole; the GEMV's 16-column grain keeps two threads off
  // the same 64-byte line of y.
  job.grain = gemm ? 32 : 16;
  if (kernel == nullptr) {
    job.run = [=](int64_t begin, int64_t end) {
      kernels::ref::qlinear_int8(*w, *a, begin, end, y);
      add_bias(bias, m, n, begin, end, y);
    };
  } else {
    job.run = [=](int64_t begin, int64_t end) {
      const kernels::cpu::QLinearArgs args{w, a, bias, y};
      kernel(args, begin, end);
    };
  }
  return job;
}

kernels::QActsView quantize_for(kernels::Isa isa, const QuantMatrix& q, const float* x, int64_t m) {
  if (q.act().quantized()) {
    // W8A8 int8 symmetric: the checkpoint's activation scales, not our per-block ones.
    return kernels::quantize_acts_declared(q.view(), q.act_quant(), q.input_scale(), x, m,
                                           acts_scratch(kernels::qacts_bytes(q.view(), m)));
  }
  const QuantizeActs quantize =
      isa == kernels::Isa::kRef ? kernels::quantize_acts : qlinear_kernels(isa).quantize_acts;
  return quantize(q.view(), x, m, acts_scratch(kernels::qacts_bytes(q.view(), m)));
}

// The bf16-activation path: x rounded once per call (on the calling thread; the declared
// W8A8 grids on AVX-512 where the kernel runs, bit for bit the scalar rounding), then the
// AVX512-BF16 kernel where the CPU has it (on the resident panels when the weight has them),
// else the scalar one (always, off x86).
#if QS_X86
bool bf16act_simd(kernels::Isa isa) {
  return isa == kernels::Isa::kAvx512 && kernels::cpu::bf16act_supported();
}
#endif

kernels::Bf16ActsView prepare_bf16act(kernels::Isa isa, const QuantMatrix& q, const float* x,
                                      int64_t m) {
  const kernels::QMatrixView& w = q.view();
  if (!q.act().quantized()) {
    return kernels::prepare_bf16_acts(w, x, m, acts_scratch(kernels::bf16_acts_bytes(w, m)));
  }
#if QS_X86
  const auto prepare_declared = bf16act_simd(isa) ? kernels::cpu::prepare_declared_bf16_acts_avx512
                                                  : kernels::prepare_declared_bf16_acts;
#else
  const auto prepare_declared = kernels::prepare_declared_bf16_acts;
#endif
  return prepare_declared(w, q.act_quant(), q.input_scale(), q.input_zero(), x, m,
                          acts_scratch(kernels::declared_bf16_acts_bytes(w, m)));
}

// `a` must stay alive until the job has run (the job copies the view, not the buffer).
Job bf16act_job(kernels::Isa isa, const QuantMatrix& q, const kernels::Bf16ActsView& a,
                const float* bias, float* y) {
  const kernels::QMatrixView* w = &q.view();
  Job job;
  job.n = w->n;
  job.macs = a.m * w->n * w->k;
  job.grain = 16;  // whole panels, and no two threads on one line of y
  const kernels::QPanelsView* panels = q.panels();
#if QS_X86
  if (bf16act_simd(isa)) {
    if (panels != nullptr) {
      job.run = [=](int64_t b, int64_t e) {
        kernels::cpu::qlinear_bf16panels_avx512(*panels, a, bias, b, e, y);
      };
    } else {
      job.run = [=](int64_t b, int64_t e) {
        kernels::cpu::qlinear_bf16act_avx512(*w, a, bias, b, e, y);
      };
    }
    return job;
  }
#endif
  if (panels != nullptr) {
    job.run = [=](int64_t b, int64_t e) {
      kernels::ref::qlinear_bf16panels(*panels, a, bias, b, e, y);
    };
  } else {
    job.run = [=](int64_t b, int64_t e) { kernels::ref::qlinear_bf16act(*w, a, bias, b, e, y); };
  }
  return job;
}

std::atomic<ActivationPrecision>& precision_setting() {
  static std::atomic<ActivationPrecision> p = [] {
    const char* env = std::getenv("QS_ACTIVATION_PRECISION");
    const auto parsed = parse_activation_precision(env != nullptr ? env : "");
    return parsed.value_or(kDefaultActivationPrecision);
  }();
  return p;
}

// Two packed weights can share one quantization of x when they read it in the same order and
// blocks.
bool same_acts_layout(const kernels::QMatrixView& a, const kernels::QMatrixView& b) {
  return a.k_pad == b.k_pad && a.group_size == b.group_size && a.n_groups == b.n_groups &&
         a.perm == nullptr && b.perm == nullptr;
}

Status check_isa(kernels::Isa isa) {
  if (kernels::isa_supported(isa)) return ok_status();
  return unimplemented(std::string("linear: this CPU cannot run the ") + kernels::isa_name(isa) +
                       " kernels");
}

// A dense weight's job, after the checks every dense call makes. k == 0 and empty calls are
// handled by the caller.
Result<Job> dense_job(kernels::Isa isa, const float* x, int64_t m, const Tensor& w,
                      const float* bias, float* y) {
  if (w.rank() != 2) {
    return invalid_argument("linear: weight must be 2-d [n, k], got " + shape_string(w.shape));
  }
  if (w.dtype != DType::kF32 && w.dtype != DType::kF16 && w.dtype != DType::kBF16) {
    return unimplemented(std::string("linear: no kernel for weight dtype ") + dtype_name(w.dtype));
  }
  const int64_t n = w.dim(0), k = w.dim(1);
  Job job;
  job.n = n;
  job.macs = m * n * k;
  const LinearKernel kernel = choose_kernel(isa, m);
  if (kernel == nullptr) {
    job.grain = 1;
    const void* data = w.data;
    const DType dtype = w.dtype;
    job.run = [=](int64_t begin, int64_t end) {
      kernels::ref::linear(x, m, k, data, dtype, n, begin, end, y);
      add_bias(bias, m, n, begin, end, y);
    };
    return job;
  }
  // Whole GEMM panels per thread; for the GEMV a 16-column grain keeps two threads off the
  // same 64-byte line of y.
  job.grain = use_gemm(isa, m) ? kernels::cpu::kColumnGrain : 16;
  const kernels::cpu::LinearArgs args{x, m, k, w.data, w.dtype, n, bias, y};
  LinearKernel run = kernel;
  // Narrow matrices (k/v projections) lose more to packing x than the tiles win (measured,
  // docs/kernels.md "AMX bf16 GEMM"). From 8 rows on (batched decode) the tiles beat the GEMV,
  // which is compute-bound there.
#if QS_X86
  if (isa == kernels::Isa::kAvx512 && m >= kernels::cpu::kAmxBf16MinRows &&
      n >= kernels::cpu::kAmxBf16MinCols && kernels::amx_active() &&
      kernels::cpu::linear_amx_bf16_supports(args)) {
    run = kernels::cpu::linear_gemm_amx_bf16;
    job.grain = kernels::cpu::kColumnGrain;
  }
#endif
  job.run = [=](int64_t begin, int64_t end) { run(args, begin, end); };
  return job;
}

// A weight with pair panels on the AVX-512 path: one kernel for every m, whole panels per
// thread. Construction (with_panels) checked the shape; k >= 1. Off x86 no weight has them
// (with_panels makes them for avx512 only), and the code that runs them is not compiled.
#if QS_X86
Job panels_job(const float* x, int64_t m, const LinearWeight& w, const float* bias, float* y) {
  const int64_t n = w.dense.dim(0), k = w.dense.dim(1);
  Job job;
  job.n = n;
  job.macs = m * n * k;
  job.grain = kernels::cpu::kPanelCols;
  const kernels::cpu::LinearArgs args{x, m, k, w.pair_panels(), DType::kBF16, n, bias, y};
  // From prefill-sized m the k-blocked GEMM keeps its x strips in L1 (the panel kernel,
  // which streams all of k per pass, ran the Qwen2.5-0.5B prefill ~10 % slower on one thread).
  const bool gemm = use_gemm(kernels::Isa::kAvx512, m);
  static const LinearKernel gemm_pairs =
      kernels::cpu::linear_hwy(kernels::cpu::elementwise_hwy_target(kernels::Isa::kAvx512))
          .gemm_pairs;
  job.run = [=](int64_t begin, int64_t end) {
    if (gemm && begin % kernels::cpu::kPanelCols == 0) {
      gemm_pairs(args, begin, end);
    } else {
      kernels::cpu::linear_panels_bf16_avx512(args, begin, end);
    }
  };
  return job;
}
#endif

void run_job(const Job& job, ThreadPool& pool) {
  if (job.macs < kMinParallelMacs) {
    job.run(0, job.n);
  } else {
    pool.parallel_for(job.n, job.run, job.grain);
  }
}

}  // namespace

namespace {

// The CPU's kernels read host weights only; a device backend's weight reaching them is a
// caller mixing backends.
Status check_on_host(const LinearWeight& w) {
  if (!w.on_device()) return ok_status();
  return invalid_argument("linear: a weight held by " + device_name(w.packed->device) +
                          " given to the CPU's kernels");
}

}  // namespace

Status linear(const float* x, int64_t m, const Tensor& w, const float* bias, float* y,
              ThreadPool& pool) {
  return linear_with_isa(kernels::active_isa(), x, m, w, bias, y, pool);
}

Status linear_with_isa(kernels::Isa isa, const float* x, int64_t m, const Tensor& w,
                       const float* bias, float* y, ThreadPool& pool) {
  QS_RETURN_IF_ERROR(check_isa(isa));
  if (m < 0) return invalid_argument("linear: negative row count " + std::to_string(m));
  QS_ASSIGN_OR_RETURN(Job job, dense_job(isa, x, m, w, bias, y));
  const int64_t k = w.dim(1);
  if (m == 0 || job.n == 0) return ok_status();
  if (k == 0) {
    // An empty sum: y is the bias (or zero). The kernels assume k >= 1.
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < job.n; ++j) y[i * job.n + j] = bias != nullptr ? bias[j] : 0.0f;
    return ok_status();
  }
  run_job(job, pool);
  return ok_status();
}

std::string LinearWeight::kernel() const {
  if (on_device()) return packed->kernel;
  if (quant) return quant->kernel();
  const char* layout = reads_panels(kernels::active_isa()) ? " pair panels" : "";
  return std::string(dtype_name(dense.dtype)) + layout + " (" +
         kernels::isa_name(kernels::active_isa()) + ")";
}

size_t LinearWeight::resident_bytes() const {
  if (on_device()) return packed->bytes;
  if (quant) return quant->resident_bytes();
  // The panels replace the row-major form on the path that reads them; they are the same
  // size but for the padding of the last panel.
  if (reads_panels(kernels::active_isa())) {
    return static_cast<size_t>(kernels::cpu::pair_panel_elems(dense.dim(0), dense.dim(1))) * 2;
  }
  return dense.nbytes();
}

const uint16_t* LinearWeight::pair_panels() const {
  const auto* p = dynamic_cast<const CpuPairPanels*>(packed.get());
  return p != nullptr ? reinterpret_cast<const uint16_t*>(p->data.get()) : nullptr;
}

Result<LinearWeight> with_panels(Tensor dense) {
  LinearWeight w(dense);
  const char* env = std::getenv("QS_BF16_PANELS");
  const bool wanted = env == nullptr || std::string(env) != "0";
  if (!wanted || dense.dtype != DType::kBF16 || dense.rank() != 2 || dense.dim(0) == 0 ||
      dense.dim(1) == 0 || kernels::active_isa() != kernels::Isa::kAvx512 ||
      kernels::amx_active()) {
    return w;
  }
  const int64_t n = dense.dim(0), k = dense.dim(1);
  const size_t bytes = static_cast<size_t>(kernels::cpu::pair_panel_elems(n, k)) * 2;
  auto panels = std::make_shared<CpuPairPanels>();
  panels->data = alloc_resident(bytes);
  if (panels->data == nullptr) {
    return internal_error("linear: no memory for the " + std::to_string(bytes >> 20) +
                          " MiB panels of a [" + std::to_string(n) + ", " + std::to_string(k) +
                          "] bf16 weight");
  }
  kernels::cpu::pack_bf16_pair_panels(static_cast<const uint16_t*>(dense.data), n, k,
                                      reinterpret_cast<uint16_t*>(panels->data.get()));
  panels->n = n;
  panels->k = k;
  panels->bytes = bytes;
  panels->kernel = "bf16 pair panels (avx512)";
  w.packed = std::move(panels);
  // Only the panels are read from now on (on this ISA); a checkpoint's pages go back.
  release_mapped_pages(dense.data, dense.nbytes());
  return w;
}

Status linear(const float* x, int64_t m, const LinearWeight& w, const float* bias, float* y,
              ThreadPool& pool) {
  return linear_with_isa(kernels::active_isa(), x, m, w, bias, y, pool);
}

Status linear_with_isa(kernels::Isa isa, const float* x, int64_t m, const LinearWeight& w,
                       const float* bias, float* y, ThreadPool& pool) {
  QS_RETURN_IF_ERROR(check_on_host(w));
  const bool panels = w.reads_panels(isa);
  if (w.quant == nullptr && !panels) return linear_with_isa(isa, x, m, w.dense, bias, y, pool);
  if (w.quant != nullptr && !w.quant->packed()) {
    return linear_with_isa(isa, x, m, w.quant->fallback(), bias, y, pool);
  }
  QS_RETURN_IF_ERROR(check_isa(isa));
  if (m < 0) return invalid_argument("linear: negative row count " + std::to_string(m));
  // Neither with_panels nor QuantMatrix::make admits an empty weight, so only m can make the
  // call empty.
  if (m == 0) return ok_status();
#if QS_X86
  if (panels) {
    run_job(panels_job(x, m, w, bias, y), pool);
    return ok_status();
  }
#endif
  const QuantMatrix& q = *w.quant;
  // Declared activations (W8A8) decide for themselves; weights made with exact panels run
  // them; other weight-only schemes follow the process-wide precision.
  if (q.needs_bf16_kernels() || q.panels() != nullptr ||
      (!q.act().quantized() && activation_precision() == ActivationPrecision::kBf16)) {
    run_job(bf16act_job(isa, q, prepare_bf16act(isa, q, x, m), bias, y), pool);
    return ok_status();
  }
  const kernels::QActsView a = quantize_for(isa, q, x, m);
  run_job(packed_job(isa, m, q, &a, bias, y), pool);
  return ok_status();
}

Status linear_many(const float* x, int64_t m, std::span<const LinearOut> outs, ThreadPool& pool) {
  std::vector<GroupedOut> grouped;
  grouped.reserve(outs.size());
  for (const LinearOut& o : outs) grouped.push_back({o.w, o.bias, 0, m, o.y});
  return linear_grouped(x, grouped, pool);
}

Status linear_grouped(const float* x, std::span<const GroupedOut> outs, ThreadPool& pool) {
  const kernels::Isa isa = kernels::active_isa();
  if (outs.empty()) return ok_status();
  const int64_t k = outs[0].w->cols();
  for (const GroupedOut& o : outs) {
    QS_RETURN_IF_ERROR(check_on_host(*o.w));
    if (o.w->cols() != k) {
      return invalid_argument("linear: grouped weights read x of " + std::to_string(k) +
                              " columns, but one has " + std::to_string(o.w->cols()));
    }
    if (o.row_begin < 0 || o.rows < 0) return invalid_argument("linear: negative row range");
  }
  // Decode-sized groups run together: one fork/join over all their output columns, and their
  // rows of x quantized once. Prefill-sized ones are compute-bound and their GEMMs want whole
  // panels: one at a time. So are weights that quantize x their own way (W8A8, fp8, act-order,
  // a different block layout) and the bf16-activation path, but for weights on the exact
  // kernel's resident panels, whose rows of x are rounded to bf16 once.
  const bool int8_acts = activation_precision() == ActivationPrecision::kInt8;
  const QuantMatrix* first_packed = nullptr;
  auto joins = [&](const GroupedOut& o) {
    if (o.rows == 0 || o.rows >= kernels::cpu::kQGemmMinRows || use_gemm(isa, o.rows)) {
      return false;
    }
    const QuantMatrix* q = o.w->quant.get();
    if (q == nullptr || !q->packed()) {
      const Tensor& t = q == nullptr ? o.w->dense : q->fallback();
      return t.rank() == 2 && t.dim(1) > 0;
    }
    if (q->act().quantized() || q->needs_bf16_kernels()) return false;
    // A group shares one kind of activations: bf16 ones only for weights on panels (which
    // run nothing else), int8 ones only for weights without.
    if (int8_acts == (q->panels() != nullptr)) return false;
    if (first_packed == nullptr) first_packed = q;
    return same_acts_layout(first_packed->view(), q->view());
  };
  std::vector<const GroupedOut*> together;
  int64_t row_lo = INT64_MAX, row_hi = 0;
  for (const GroupedOut& o : outs) {
    if (joins(o)) {
      together.push_back(&o);
      row_lo = std::min(row_lo, o.row_begin);
      row_hi = std::max(row_hi, o.row_begin + o.rows);
    } else if (o.rows > 0) {
      QS_RETURN_IF_ERROR(linear(x + o.row_begin * k, o.rows, *o.w, o.bias, o.y, pool));
    }
  }
  if (together.empty()) return ok_status();
  // Whole GEMV-sized groups when alone; a single group may still want more threads than rows.
  if (together.size() == 1 && outs.size() == 1) {
    const GroupedOut& o = *together[0];
    return linear(x + o.row_begin * k, o.rows, *o.w, o.bias, o.y, pool);
  }
  QS_RETURN_IF_ERROR(check_isa(isa));
  kernels::QActsView acts;
  kernels::Bf16ActsView bf16_acts;
  if (first_packed != nullptr && int8_acts) {
    acts = quantize_for(isa, *first_packed, x + row_lo * k, row_hi - row_lo);
  } else if (first_packed != nullptr) {
    bf16_acts = prepare_bf16act(isa, *first_packed, x + row_lo * k, row_hi - row_lo);
  }
  // Each group's rows of the one quantization (a view; the rows are contiguous).
  std::vector<kernels::QActsView> views;
  views.reserve(together.size());
  std::vector<Job> jobs;
  jobs.reserve(together.size());
  for (const GroupedOut* o : together) {
    const QuantMatrix* q = o->w->quant.get();
    const float* xo = x + o->row_begin * k;
    if (q != nullptr && q->packed() && !int8_acts) {
      const int64_t r = o->row_begin - row_lo;
      kernels::Bf16ActsView v = bf16_acts;
      v.m = o->rows;
      v.x = bf16_acts.x + r * bf16_acts.k_pad;
      v.gsum = bf16_acts.gsum + r * bf16_acts.n_groups;
      jobs.push_back(bf16act_job(isa, *q, v, o->bias, o->y));
    } else if (q != nullptr && q->packed()) {
      const int64_t r = o->row_begin - row_lo, blocks = acts.k_pad / 32;
      kernels::QActsView v = acts;
      v.m = o->rows;
      v.q = acts.q + r * acts.k_pad;
      v.d = acts.d + r * blocks;
      v.gsum = acts.gsum + r * acts.n_groups;
      v.qsum = acts.qsum + r * blocks;
      views.push_back(v);
      jobs.push_back(packed_job(isa, o->rows, *q, &views.back(), o->bias, o->y));
#if QS_X86
    } else if (o->w->reads_panels(isa)) {
      jobs.push_back(panels_job(xo, o->rows, *o->w, o->bias, o->y));
#endif
    } else {
      QS_ASSIGN_OR_RETURN(
          Job job, dense_job(isa, xo, o->rows, q ? q->fallback() : o->w->dense, o->bias, o->y));
      jobs.push_back(std::move(job));
    }
  }
  // One range over the weights' columns back to back: each thread takes a share of all of
  // them, and small projections (k, v, a rarely chosen expert) cost no fork/join of their own.
  int64_t total = 0, macs = 0;
  for (const Job& j : jobs) {
    total += j.n;
    macs += j.macs;
  }
  auto run = [&](int64_t begin, int64_t end) {
    int64_t offset = 0;
    for (const Job& j : jobs) {
      const int64_t b = std::max(begin, offset), e = std::min(end, offset + j.n);
      if (b < e) j.run(b - offset, e - offset);
      offset += j.n;
    }
  };
  if (macs < kMinParallelMacs) {
    run(0, total);
  } else {
    pool.parallel_for(total, run, 16);
  }
  return ok_status();
}

ActivationPrecision activation_precision() {
  return precision_setting().load();
}

void set_activation_precision(ActivationPrecision p) {
  precision_setting().store(p);
}

std::optional<ActivationPrecision> parse_activation_precision(const std::string& name) {
  if (name == "int8") return ActivationPrecision::kInt8;
  if (name == "bf16") return ActivationPrecision::kBf16;
  return std::nullopt;
}

const char* activation_precision_name(ActivationPrecision p) {
  return p == ActivationPrecision::kBf16 ? "bf16" : "int8";
}

}  // namespace qs::ops
