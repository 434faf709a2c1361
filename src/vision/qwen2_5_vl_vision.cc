// vision: Qwen2.5-VL's vision tower (see qwen2_5_vl_vision.h), as transformers'
// modeling_qwen2_5_vl.py and vision_utils.py compute it.
#include "vision/qwen2_5_vl_vision.h"

#include <algorithm>
#include <cmath>

#include "ops/activation.h"
#include "ops/dense_attention.h"
#include "ops/elementwise.h"

namespace qs::vision {

namespace {

constexpr float kNormEps = 1e-6f;  // every RMSNorm of the tower

Result<int64_t> field(const nlohmann::json& j, const char* key, int64_t fallback, int64_t lo,
                      int64_t hi) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number_integer() || j[key].get<int64_t>() < lo || j[key].get<int64_t>() > hi) {
    return invalid_argument(std::string("vision_config field '") + key + "' must be an integer " +
                            std::to_string(lo) + " to " + std::to_string(hi));
  }
  return j[key].get<int64_t>();
}

// Each image's patches in merge-block-major order (the processor's): their row and column.
void patch_rows_cols(std::span<const models::VisionGrid> grids, int64_t m,
                     std::vector<int32_t>* rows, std::vector<int32_t>* cols) {
  for (const models::VisionGrid& g : grids) {
    for (int64_t t = 0; t < g.t; ++t) {
      for (int64_t by = 0; by < g.h / m; ++by) {
        for (int64_t bx = 0; bx < g.w / m; ++bx) {
          for (int64_t y = 0; y < m; ++y) {
            for (int64_t x = 0; x < m; ++x) {
              rows->push_back(static_cast<int32_t>(by * m + y));
              cols->push_back(static_cast<int32_t>(bx * m + x));
            }
          }
        }
      }
    }
  }
}

// transformers' get_vision_window_index: the merged units (m x m patches) reordered window by
// window (windows of `units` x `units` merged units, the last row and column of windows cut
// short), and the patch offsets where each window starts and ends.
void window_order(std::span<const models::VisionGrid> grids, int64_t m, int64_t units,
                  std::vector<int64_t>* order, std::vector<int64_t>* bounds) {
  bounds->assign(1, 0);
  int64_t base = 0;
  for (const models::VisionGrid& g : grids) {
    const int64_t gh = g.h / m, gw = g.w / m;
    for (int64_t t = 0; t < g.t; ++t) {
      for (int64_t wy = 0; wy < gh; wy += units) {
        for (int64_t wx = 0; wx < gw; wx += units) {
          int64_t n = 0;
          for (int64_t y = wy; y < std::min(wy + units, gh); ++y) {
            for (int64_t x = wx; x < std::min(wx + units, gw); ++x, ++n) {
              order->push_back(base + (t * gh + y) * gw + x);
            }
          }
          bounds->push_back(bounds->back() + n * m * m);
        }
      }
    }
    base += g.t * gh * gw;
  }
}

// Rows [s, e) of q/k/v attend among themselves, for each segment of `bounds`.
Status segment_attention(const float* q, const float* k, const float* v, int64_t v_stride,
                         const std::vector<int64_t>& bounds, int64_t heads, int64_t hd, float* out,
                         ThreadPool& pool) {
  const int64_t d = heads * hd;
  for (size_t i = 0; i + 1 < bounds.size(); ++i) {
    const int64_t s = bounds[i], n = bounds[i + 1] - s;
    if (n == 0) continue;
    const ops::DenseAttentionShape shape{
        n, n, heads, hd, d, d, v_stride, d, 1.0f / std::sqrt(static_cast<float>(hd))};
    QS_RETURN_IF_ERROR(
        ops::dense_attention(q + s * d, k + s * d, v + s * v_stride, shape, out + s * d, pool));
  }
  return ok_status();
}

// Qwen2.5-VL fuses the attention's projections (attn.qkv); Qwen2.5-Omni's tower keeps attn.q,
// .k and .v apart, which are stacked here into the same [3d, d] matmul, in the source dtype.
Result<ops::LinearWeight> stacked_qkv(const models::Component& c, const std::string& p, int64_t d,
                                      std::vector<float>* bias) {
  if (c.has(p + ".attn.qkv.weight") || !c.has(p + ".attn.q.weight")) {
    return c.linear(p + ".attn.qkv", 3 * d, d, bias);
  }
  QS_ASSIGN_OR_RETURN(Tensor q, c.get(p + ".attn.q.weight", {d, d}));
  std::vector<float> w;
  w.reserve(static_cast<size_t>(3 * d * d));
  bias->clear();
  for (const char* part : {".attn.q", ".attn.k", ".attn.v"}) {
    QS_ASSIGN_OR_RETURN(std::vector<float> wi, c.f32(p + part + ".weight", {d, d}));
    QS_ASSIGN_OR_RETURN(std::vector<float> bi, c.f32(p + part + ".bias", {d}));
    w.insert(w.end(), wi.begin(), wi.end());
    bias->insert(bias->end(), bi.begin(), bi.end());
  }
  return ops::LinearWeight(Tensor::from_f32(q.dtype, {3 * d, d}, w));
}

}  // namespace

Result<Qwen25VisionConfig> parse_qwen25_vision_config(const nlohmann::json& v) {
  if (!v.is_object()) return invalid_argument("vision_config must be an object");
  Qwen25VisionConfig c;
  QS_ASSIGN_OR_RETURN(c.depth, field(v, "depth", c.depth, 1, 256));
  QS_ASSIGN_OR_RETURN(c.hidden_size, field(v, "hidden_size", c.hidden_size, 1, 16384));
  QS_ASSIGN_OR_RETURN(c.intermediate_size,
                      field(v, "intermediate_size", c.intermediate_size, 1, 1 << 17));
  QS_ASSIGN_OR_RETURN(c.num_heads, field(v, "num_heads", c.num_heads, 1, 256));
  QS_ASSIGN_OR_RETURN(c.out_hidden_size, field(v, "out_hidden_size", c.out_hidden_size, 1, 65536));
  QS_ASSIGN_OR_RETURN(c.in_channels, field(v, "in_channels", c.in_channels, 1, 16));
  QS_ASSIGN_OR_RETURN(c.patch_size, field(v, "patch_size", c.patch_size, 1, 64));
  QS_ASSIGN_OR_RETURN(c.temporal_patch_size,
                      field(v, "temporal_patch_size", c.temporal_patch_size, 1, 16));
  QS_ASSIGN_OR_RETURN(c.spatial_merge_size,
                      field(v, "spatial_merge_size", c.spatial_merge_size, 1, 16));
  QS_ASSIGN_OR_RETURN(c.window_size, field(v, "window_size", c.window_size, 1, 1 << 16));
  if (v.contains("fullatt_block_indexes")) {
    const auto& f = v["fullatt_block_indexes"];
    if (!f.is_array()) return invalid_argument("vision_config 'fullatt_block_indexes' not a list");
    c.fullatt_block_indexes.clear();
    for (const auto& i : f) {
      if (!i.is_number_integer()) return invalid_argument("fullatt_block_indexes: not integers");
      c.fullatt_block_indexes.push_back(i.get<int64_t>());
    }
  }
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    if (v.contains(key) && v[key].is_object() && v[key].contains("rope_theta") &&
        v[key]["rope_theta"].is_number()) {
      c.rope_theta = v[key]["rope_theta"].get<double>();
    }
  }
  if (v.contains("rope_theta") && v["rope_theta"].is_number()) {
    c.rope_theta = v["rope_theta"].get<double>();
  }
  const std::string act = v.contains("hidden_act") && v["hidden_act"].is_string()
                              ? v["hidden_act"].get<std::string>()
                              : "silu";
  if (act != "silu") return unimplemented("vision_config hidden_act \"" + act + "\"");
  if (c.hidden_size % c.num_heads != 0 || c.head_dim() % 4 != 0) {
    return invalid_argument("vision_config: hidden_size / num_heads must be a multiple of 4");
  }
  if (c.window_size / c.spatial_merge_size / c.patch_size < 1 || !(c.rope_theta > 0)) {
    return invalid_argument("vision_config: window_size under one merged patch, or rope_theta");
  }
  return c;
}

Result<Qwen25VisionTower> Qwen25VisionTower::load(const std::string& dir) {
  Qwen25VisionTower t;
  QS_ASSIGN_OR_RETURN(t.weights_, models::Component::open(dir));
  const models::Component& c = t.weights_;
  if (!c.config().contains("vision_config")) {
    return invalid_argument(dir + "/config.json: no vision_config (the model has no vision tower)");
  }
  QS_ASSIGN_OR_RETURN(t.config_, parse_qwen25_vision_config(c.config()["vision_config"]));
  const Qwen25VisionConfig& f = t.config_;
  const int64_t d = f.hidden_size, ff = f.intermediate_size;
  {
    QS_ASSIGN_OR_RETURN(
        Tensor w, c.get("visual.patch_embed.proj.weight",
                        {d, f.in_channels, f.temporal_patch_size, f.patch_size, f.patch_size}));
    w.shape = {d, f.patch_values()};  // the stride-equal conv3d is this matmul
    t.patch_embed_ = ops::LinearWeight(std::move(w));
  }
  for (int64_t i = 0; i < f.depth; ++i) {
    const std::string p = "visual.blocks." + std::to_string(i);
    Qwen25VisionBlock b;
    QS_ASSIGN_OR_RETURN(b.norm1, c.f32(p + ".norm1.weight", {d}));
    QS_ASSIGN_OR_RETURN(b.norm2, c.f32(p + ".norm2.weight", {d}));
    QS_ASSIGN_OR_RETURN(b.qkv, stacked_qkv(c, p, d, &b.b_qkv));
    QS_ASSIGN_OR_RETURN(b.proj, c.linear(p + ".attn.proj", d, d, &b.b_proj));
    QS_ASSIGN_OR_RETURN(b.gate, c.linear(p + ".mlp.gate_proj", ff, d, &b.b_gate));
    QS_ASSIGN_OR_RETURN(b.up, c.linear(p + ".mlp.up_proj", ff, d, &b.b_up));
    QS_ASSIGN_OR_RETURN(b.down, c.linear(p + ".mlp.down_proj", d, ff, &b.b_down));
    t.blocks_.push_back(std::move(b));
  }
  const int64_t merged = d * f.spatial_merge_size * f.spatial_merge_size;
  QS_ASSIGN_OR_RETURN(t.merger_norm_, c.f32("visual.merger.ln_q.weight", {d}));
  QS_ASSIGN_OR_RETURN(t.merger_fc1_,
                      c.linear("visual.merger.mlp.0", merged, merged, &t.merger_b1_));
  QS_ASSIGN_OR_RETURN(t.merger_fc2_,
                      c.linear("visual.merger.mlp.2", f.out_hidden_size, merged, &t.merger_b2_));
  return t;
}

Status Qwen25VisionTower::forward(const float* pixels, std::span<const models::VisionGrid> grids,
                                  std::vector<float>* out, ThreadPool& pool) const {
  const Qwen25VisionConfig& f = config_;
  const int64_t m = f.spatial_merge_size, unit = m * m, d = f.hidden_size;
  const int64_t heads = f.num_heads, hd = f.head_dim(), ff = f.intermediate_size;
  int64_t n = 0;
  std::vector<int64_t> full = {0};  // full attention: each frame of each image
  for (const models::VisionGrid& g : grids) {
    if (g.t < 1 || g.h < m || g.w < m || g.h % m != 0 || g.w % m != 0 || g.h > 4096 || g.w > 4096 ||
        g.t > 4096) {
      return invalid_argument("vision tower: a grid of " + std::to_string(g.t) + " x " +
                              std::to_string(g.h) + " x " + std::to_string(g.w) +
                              " patches, not whole merged patches");
    }
    for (int64_t t = 0; t < g.t; ++t) full.push_back(full.back() + g.h * g.w);
    n += g.t * g.h * g.w;
  }
  if (n == 0) return invalid_argument("vision tower: no image");

  // Rotary angles of each patch: rows on the first quarter of the frequencies, columns on the
  // second (the rotate-half pairs of a head_dim / 2 table).
  std::vector<int32_t> rows, cols;
  patch_rows_cols(grids, m, &rows, &cols);
  const int64_t quarter = hd / 4, half = hd / 2;
  std::vector<float> inv(quarter);
  for (int64_t j = 0; j < quarter; ++j) {
    inv[j] = static_cast<float>(
        1.0 / std::pow(f.rope_theta, static_cast<double>(2 * j) / static_cast<double>(half)));
  }
  // Windows: reorder everything by window at merged-unit granularity.
  std::vector<int64_t> order, windows;
  window_order(grids, m, f.window_size / m / f.patch_size, &order, &windows);

  std::vector<float> embedded(static_cast<size_t>(n * d));
  QS_RETURN_IF_ERROR(ops::linear(pixels, n, patch_embed_, nullptr, embedded.data(), pool));
  std::vector<float> x(static_cast<size_t>(n * d)), cos(static_cast<size_t>(n * half)),
      sin(cos.size());
  for (size_t u = 0; u < order.size(); ++u) {
    for (int64_t i = 0; i < unit; ++i) {
      const int64_t src = order[u] * unit + i, dst = static_cast<int64_t>(u) * unit + i;
      std::copy_n(embedded.data() + src * d, d, x.data() + dst * d);
      for (int64_t j = 0; j < half; ++j) {
        const float pos = static_cast<float>(j < quarter ? rows[src] : cols[src]);
        const float angle = pos * inv[j % quarter];
        cos[dst * half + j] = std::cos(angle);
        sin[dst * half + j] = std::sin(angle);
      }
    }
  }

  std::vector<float> nx(x.size()), qkv(static_cast<size_t>(n * 3 * d)), q(x.size()), k(x.size()),
      a(x.size()), y(x.size()), gate(static_cast<size_t>(n * ff)), up(gate.size());
  for (int64_t l = 0; l < f.depth; ++l) {
    const Qwen25VisionBlock& b = blocks_[l];
    const bool whole = std::find(f.fullatt_block_indexes.begin(), f.fullatt_block_indexes.end(),
                                 l) != f.fullatt_block_indexes.end();
    ops::rms_norm(x.data(), n, d, b.norm1.data(), kNormEps, nx.data());
    QS_RETURN_IF_ERROR(ops::linear(nx.data(), n, b.qkv, b.b_qkv.data(), qkv.data(), pool));
    for (int64_t r = 0; r < n; ++r) {  // each row is (q, k, v) x heads x head_dim
      std::copy_n(qkv.data() + r * 3 * d, d, q.data() + r * d);
      std::copy_n(qkv.data() + r * 3 * d + d, d, k.data() + r * d);
    }
    ops::rope_rotate_half(q.data(), n, heads, hd, cos.data(), sin.data());
    ops::rope_rotate_half(k.data(), n, heads, hd, cos.data(), sin.data());
    QS_RETURN_IF_ERROR(segment_attention(q.data(), k.data(), qkv.data() + 2 * d, 3 * d,
                                         whole ? full : windows, heads, hd, a.data(), pool));
    QS_RETURN_IF_ERROR(ops::linear(a.data(), n, b.proj, b.b_proj.data(), y.data(), pool));
    ops::add_inplace(x.data(), y.data(), n * d);
    ops::rms_norm(x.data(), n, d, b.norm2.data(), kNormEps, nx.data());
    const ops::LinearOut gu[] = {{&b.gate, b.b_gate.data(), gate.data()},
                                 {&b.up, b.b_up.data(), up.data()}};
    QS_RETURN_IF_ERROR(ops::linear_many(nx.data(), n, gu, pool));
    ops::silu_mul(gate.data(), up.data(), n * ff, gate.data());
    QS_RETURN_IF_ERROR(ops::linear(gate.data(), n, b.down, b.b_down.data(), y.data(), pool));
    ops::add_inplace(x.data(), y.data(), n * d);
  }
  // The merger: each unit's m x m patches (consecutive rows) normed and concatenated.
  const int64_t units = n / unit, merged = d * unit;
  ops::rms_norm(x.data(), n, d, merger_norm_.data(), kNormEps, nx.data());
  std::vector<float> h1(static_cast<size_t>(units * merged)), h2(units * f.out_hidden_size);
  QS_RETURN_IF_ERROR(
      ops::linear(nx.data(), units, merger_fc1_, merger_b1_.data(), h1.data(), pool));
  ops::gelu_erf(h1.data(), units * merged);
  QS_RETURN_IF_ERROR(
      ops::linear(h1.data(), units, merger_fc2_, merger_b2_.data(), h2.data(), pool));
  out->resize(static_cast<size_t>(units * f.out_hidden_size));
  for (size_t u = 0; u < order.size(); ++u) {  // back to the prompt's order
    std::copy_n(h2.data() + u * f.out_hidden_size, f.out_hidden_size,
                out->data() + order[u] * f.out_hidden_size);
  }
  return ok_status();
}

}  // namespace qs::vision
