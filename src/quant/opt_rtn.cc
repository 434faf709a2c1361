// quant: OPT-RTN (opt_rtn.h).
#include "quant/opt_rtn.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "formats/rtn.h"
#include "ops/scale_search.h"

namespace qs::quant {

formats::QuantizedWeight opt_rtn(const float* w, int64_t n, int64_t k, int bits, int64_t group_size,
                                 bool sym, const float* imatrix, ThreadPool* pool) {
  QS_CHECK(group_size == -1 || group_size > 0);
  // Min-max RTN is the starting point and the answer for asym (§1.5).
  formats::QuantizedWeight q = formats::rtn_quantize(w, n, k, bits, group_size, sym);
  if (!sym) return q;
  const int half = 1 << (bits - 1);
  const double step = bits == 2 ? 0.01 : 0.06;
  const int imax = bits == 2 ? 90 : 100;
  const int64_t gs = q.group_size, groups = q.n_groups();
  // Candidate 0 is RTN's own scale, then i = -imax .. imax in the order the scalar search tried
  // them: the first of equal errors wins, as before.
  const int64_t n_candidates = 2 * imax + 2;
  auto rows = [&](int64_t r_begin, int64_t r_end) {
    std::vector<float> scales(n_candidates);
    std::vector<double> errors(n_candidates);
    for (int64_t r = r_begin; r < r_end; ++r) {
      for (int64_t g = 0; g < groups; ++g) {
        const int64_t c0 = g * gs, c1 = std::min(k, c0 + gs);
        const float* wg = w + r * k + c0;
        const float* ig = imatrix != nullptr ? imatrix + c0 : nullptr;
        float gmax = 0;  // the signed value of largest magnitude
        for (int64_t j = 0; j < c1 - c0; ++j)
          if (std::abs(wg[j]) > std::abs(gmax)) gmax = wg[j];
        if (gmax == 0) continue;  // all zero: RTN's floored scale already reproduces it exactly
        scales[0] = q.scales[r * groups + g];
        ops::scale_candidates(gmax, half, step, imax, scales.data() + 1);
        ops::scale_search_errors(wg, ig, c1 - c0, scales.data(), n_candidates, half, errors.data());
        int64_t best = 0;
        for (int64_t c = 1; c < n_candidates; ++c) {
          if (errors[c] < errors[best]) best = c;
        }
        const float best_s = scales[best];
        q.scales[r * groups + g] = best_s;
        for (int64_t c = c0; c < c1; ++c) {
          const float code = std::clamp(std::nearbyint(w[r * k + c] / best_s),
                                        static_cast<float>(-half), static_cast<float>(half - 1));
          q.codes[r * k + c] = static_cast<uint8_t>(code + static_cast<float>(half));
        }
      }
    }
  };
  // Rows are independent and each is searched whole by one thread, so the result does not
  // depend on the thread count.
  if (pool != nullptr && pool->n_threads() > 1) {
    pool->parallel_for(n, rows, 8);
  } else {
    rows(0, n);
  }
  return q;
}

Result<PerLinear<std::vector<float>>> block_imatrix(const BlockTensors<float>& b,
                                                    const BlockCalibration& calib, ThreadPool& pool,
                                                    float* y_out,
                                                    BlockActivations<float>* scratch) {
  if (calib.inputs == nullptr || calib.n_samples <= 0 || calib.seqlen <= 0) {
    return invalid_argument("imatrix: calibration inputs missing or empty");
  }
  const int n_linears = b.n_linears();
  PerLinear<std::vector<double>> sums(n_linears);
  PerLinear<int64_t> seen(n_linears, 0);
  PerLinear<const float*> w(n_linears);
  for (int i = 0; i < n_linears; ++i) {
    sums[i].assign(b.in_features(i), 0.0);
    w[i] = b.w[i].data();
  }
  // q/k/v read the first norm's output, o the attention output, an MLP's gate/up the second
  // norm's output (an expert: its routed rows of it), down the SwiGLU product.
  auto add = [&](int i, const float* x, const uint8_t* mask, int64_t rows) {
    add_squares(x, rows, b.in_features(i), mask, sums[i].data(), &pool);
    seen[i] += rows;
  };
  constexpr int64_t kChunk = 8;  // samples per forward, bounding the saved activations
  const int64_t row = calib.seqlen * b.hidden, d = b.hidden;
  BlockActivations<float> own;
  BlockActivations<float>& act = scratch != nullptr ? *scratch : own;
  std::vector<float> y;
  std::vector<uint8_t> row_mask;
  for (int64_t s0 = 0; s0 < calib.n_samples; s0 += kChunk) {
    const int64_t n = std::min(kChunk, calib.n_samples - s0), tokens = n * calib.seqlen;
    const uint8_t* mask = calib.mask != nullptr ? calib.mask + s0 * calib.seqlen : nullptr;
    float* y_chunk = y_out != nullptr ? y_out + s0 * row : nullptr;
    if (y_chunk == nullptr) {
      y.resize(n * row);
      y_chunk = y.data();
    }
    block_forward<float>(b, w, calib.inputs + s0 * row, n, calib.seqlen, mask, &act, y_chunk, pool);
    // Linears that read the same input (q/k/v; each gate/up pair) share one pass of sums,
    // copied to the others below.
    add(kQProj, act.h1.data(), mask, tokens);
    add(kOProj, act.attn.data(), mask, tokens);
    if (!b.sparse()) {
      add(kGateProj, act.h2.data(), mask, tokens);
      add(kDownProj, act.act.data(), mask, tokens);
      continue;
    }
    const int64_t k = b.moe.top_k, inter = b.moe.expert_intermediate;
    if (mask != nullptr) {  // each expert-sorted row masked as its token is
      row_mask.resize(tokens * k);
      for (int64_t r = 0; r < tokens * k; ++r) row_mask[r] = mask[act.slot_of_row[r] / k];
    }
    for (int64_t e = 0; e < b.moe.n_experts; ++e) {
      const int64_t r0 = act.expert_first[e], rows = act.expert_first[e + 1] - r0;
      const uint8_t* m = mask != nullptr ? row_mask.data() + r0 : nullptr;
      add(mlp_linear(e, kMlpGate), act.expert_x.data() + r0 * d, m, rows);
      add(mlp_linear(e, kMlpDown), act.act.data() + r0 * inter, m, rows);
    }
    if (b.has_shared()) {
      const int64_t g = b.moe.n_experts;
      add(mlp_linear(g, kMlpGate), act.h2.data(), mask, tokens);
      add(mlp_linear(g, kMlpDown), act.s_act.data(), mask, tokens);
    }
  }
  auto share = [&](int from, int to) {
    sums[to] = sums[from];
    seen[to] = seen[from];
  };
  share(kQProj, kKProj);
  share(kQProj, kVProj);
  const int64_t mlps = b.sparse() ? b.moe.n_experts + (b.has_shared() ? 1 : 0) : 1;
  for (int64_t g = 0; g < mlps; ++g) share(mlp_linear(g, kMlpGate), mlp_linear(g, kMlpUp));
  PerLinear<std::vector<float>> out(n_linears);
  for (int i = 0; i < n_linears; ++i) {
    if (seen[i] > 0) out[i] = imatrix_of(sums[i], calib.n_samples);
  }
  return out;
}

void add_squares(const float* x, int64_t tokens, int64_t d, const uint8_t* mask, double* sums,
                 ThreadPool* pool) {
  // Columns split over the threads: each column's sum keeps its token order, so the result
  // does not depend on the thread count.
  // Eight unmasked tokens at a time keep each column's sum in a register across them: the
  // additions happen in the same order, with an eighth of the loads and stores of sums.
  constexpr int64_t kTokens = 8;
  auto columns = [&](int64_t j0, int64_t j1) {
    int64_t t = 0;
    while (t < tokens) {
      const bool whole = t + kTokens <= tokens &&
                         (mask == nullptr || std::all_of(mask + t, mask + t + kTokens,
                                                         [](uint8_t m) { return m != 0; }));
      if (!whole) {
        if (mask == nullptr || mask[t] != 0) {
          const float* row = x + t * d;
          for (int64_t j = j0; j < j1; ++j) sums[j] += static_cast<double>(row[j]) * row[j];
        }
        ++t;
        continue;
      }
      const float* rows = x + t * d;
      for (int64_t j = j0; j < j1; ++j) {
        double s = sums[j];
        for (int64_t u = 0; u < kTokens; ++u) {
          const double v = rows[u * d + j];
          s += v * v;
        }
        sums[j] = s;
      }
      t += kTokens;
    }
  };
  if (pool != nullptr && pool->n_threads() > 1 && tokens * d >= (int64_t{1} << 16)) {
    pool->parallel_for(d, columns, 64);
  } else {
    columns(0, d);
  }
}

std::vector<float> imatrix_of(const std::vector<double>& sums, int64_t n_samples) {
  std::vector<float> out(sums.size());
  for (size_t j = 0; j < sums.size(); ++j)
    out[j] = static_cast<float>(sums[j] / static_cast<double>(n_samples));
  return out;
}

}  // namespace qs::quant
