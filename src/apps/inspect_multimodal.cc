// apps: multimodal memory from config.json (see inspect_multimodal.h). The decoder and the
// towers are sized from the same tensor lists the loaders check (models::expected_tensors,
// models/tower_tensors.h); the talker and token2wav, which quantserve does not run, from
// transformers' module layout of Qwen2_5OmniTalkerForConditionalGeneration and
// Qwen2_5OmniToken2WavModel (tests/golden/inspect_multimodal_cli_test.cc holds the counts
// transformers gives for Qwen2.5-Omni-7B).
#include "apps/inspect_multimodal.h"

#include <cstdio>

#include "core/json.h"
#include "core/units_text.h"
#include "io/quant_config.h"
#include "io/quant_export.h"
#include "models/model_config.h"
#include "models/tower_tensors.h"
#include "ops/quant_matrix.h"

namespace qs::apps {
namespace {

using nlohmann::json;

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The int4 g128 scheme AutoRound's default W4A16 export (sym, auto_round format) reads back as,
// and the rule it quantizes by: the decoder blocks' linears whose sides pack into words.
struct W4A16 {
  io::QuantConfig config;
  Result<uint64_t> bytes(const std::string& module, int64_t n, int64_t k) const {
    const auto scheme = config.scheme_for(module);
    if (!scheme.quantized()) return static_cast<uint64_t>(n * k * 2);
    return static_cast<uint64_t>(ops::QuantMatrix::resident_bytes_for(scheme, n, k));
  }
};

Result<W4A16> make_w4a16() {
  QS_ASSIGN_OR_RETURN(io::IntQuantSpec spec, io::parse_int_quant_spec("w4g128"));
  QS_ASSIGN_OR_RETURN(json qc,
                      io::make_quantization_config(io::ExportFormat::kAutoRound, spec, {}));
  W4A16 w;
  QS_ASSIGN_OR_RETURN(w.config, io::parse_quant_config(qc, "W4A16 (int4 g128 sym)"));
  return w;
}

// The decoder: embeddings and matmuls as 16-bit views (a tied lm_head is the embedding), norms
// and biases in f32; in W4A16 the block linears AutoRound can pack are int4.
Result<PartMemory> decoder_part(const std::string& name, const models::ModelConfig& c,
                                const W4A16& w4) {
  PartMemory p;
  p.name = name;
  for (const models::TensorSpec& t : models::expected_tensors(c)) {
    const int64_t n = numel_of(t.shape);
    p.params += n;
    if (t.shape.size() == 1) {
      p.bf16_bytes += n * 4;
      p.w4a16_bytes += n * 4;
      continue;
    }
    p.bf16_bytes += n * 2;
    if (!t.linear) {
      p.w4a16_bytes += n * 2;
      continue;
    }
    ++p.linears;
    const std::string module = t.name.substr(0, t.name.size() - std::string(".weight").size());
    const bool packable =
        module.starts_with("model.layers.") && io::int_packable(t.shape[0], t.shape[1]);
    if (packable) {
      ++p.quantized_linears;
      QS_ASSIGN_OR_RETURN(uint64_t b, w4.bytes(module, t.shape[0], t.shape[1]));
      p.w4a16_bytes += b;
    } else {
      p.w4a16_bytes += n * 2;
    }
  }
  return p;
}

// A tower as vision/ and audio/ load it: matmul weights (and the patch embedding, run as one)
// 16-bit views, everything else f32; the audio tower's unused audio_bos_eos_token is not read,
// and its sinusoid positions are computed at load.
PartMemory tower_part(const std::string& name, const std::vector<models::TensorSpec>& specs,
                      uint64_t computed_bytes) {
  PartMemory p;
  p.name = name;
  for (const models::TensorSpec& t : specs) {
    const int64_t n = numel_of(t.shape);
    p.params += n;
    const bool view = t.linear || t.name.ends_with("patch_embed.proj.weight");
    if (t.linear) ++p.linears;
    if (t.name.ends_with("audio_bos_eos_token.weight")) continue;
    p.bf16_bytes += n * (view ? 2 : 4);
  }
  p.bf16_bytes += computed_bytes;
  p.w4a16_bytes = p.bf16_bytes;
  return p;
}

Result<int64_t> field(const json& j, const char* part, std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    QS_ASSIGN_OR_RETURN(auto v, json_integral(j, key, part));
    if (!v) continue;
    QS_RETURN_IF_ERROR(json_check_range(*v, 1, int64_t{1} << 24, key, part));
    return *v;
  }
  return invalid_argument(std::string(part) + " needs '" + *keys.begin() + "'");
}

Result<std::vector<int64_t>> int_list(const json& j, const char* part, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_array() || it->empty()) {
    return invalid_argument(std::string(part) + " needs the list '" + key + "'");
  }
  std::vector<int64_t> out;
  for (const json& v : *it) {
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > (1 << 20)) {
      return invalid_argument(std::string(part) + " field '" + key + "' must hold sizes >= 1");
    }
    out.push_back(v.get<int64_t>());
  }
  return out;
}

// A part quantserve does not run: its parameters at 2 bytes each in both forms (auto-round
// leaves the talker 16-bit: quantizing it degrades long-form speech, its
// special_model_handler says).
PartMemory stored_part(const std::string& name, int64_t params, int64_t linears) {
  PartMemory p;
  p.name = name;
  p.runs_here = false;
  p.params = params;
  p.bf16_bytes = p.w4a16_bytes = static_cast<uint64_t>(params) * 2;
  p.linears = linears;
  return p;
}

// Qwen2_5OmniTalkerForConditionalGeneration: Qwen2 blocks (q/k/v biased) of `hidden` over an
// embedding of width embedding_size, thinker_to_talker_proj (biased) and codec_head.
Result<PartMemory> talker_part(const json& t) {
  const char* s = "talker_config";
  QS_ASSIGN_OR_RETURN(const int64_t hidden, field(t, s, {"hidden_size"}));
  QS_ASSIGN_OR_RETURN(const int64_t inter, field(t, s, {"intermediate_size"}));
  QS_ASSIGN_OR_RETURN(const int64_t layers, field(t, s, {"num_hidden_layers"}));
  QS_ASSIGN_OR_RETURN(const int64_t heads, field(t, s, {"num_attention_heads"}));
  QS_ASSIGN_OR_RETURN(const int64_t kv, field(t, s, {"num_key_value_heads"}));
  QS_ASSIGN_OR_RETURN(const int64_t vocab, field(t, s, {"vocab_size"}));
  QS_ASSIGN_OR_RETURN(const int64_t embed, field(t, s, {"embedding_size"}));
  auto hd_field = field(t, s, {"head_dim"});
  const int64_t hd = hd_field.ok() ? *hd_field : hidden / heads;
  const int64_t q = heads * hd, k = kv * hd;
  const int64_t layer =
      (hidden * q + q) + 2 * (hidden * k + k) + q * hidden + 3 * hidden * inter + 2 * hidden;
  const int64_t params =
      vocab * embed + layers * layer + hidden + (embed * hidden + hidden) + hidden * vocab;
  return stored_part("talker", params, layers * 7 + 2);
}

// Qwen2_5OmniToken2WavDiTModel: timestep MLP (256 frequencies), codec embedding, the input
// projection and its ECAPA-TDNN speaker encoder, `depth` DiT blocks (adaLN-zero linear to six
// modulations, attention, a GELU MLP of ff_mult), the final adaLN and projection to mels.
Result<int64_t> dit_params(const json& d) {
  const char* s = "token2wav_config.dit_config";
  QS_ASSIGN_OR_RETURN(const int64_t dim, field(d, s, {"hidden_size", "dim"}));
  QS_ASSIGN_OR_RETURN(const int64_t depth, field(d, s, {"num_hidden_layers", "depth"}));
  QS_ASSIGN_OR_RETURN(const int64_t heads, field(d, s, {"num_attention_heads", "heads"}));
  QS_ASSIGN_OR_RETURN(const int64_t head_dim, field(d, s, {"head_dim", "dim_head"}));
  QS_ASSIGN_OR_RETURN(const int64_t ff_mult, field(d, s, {"ff_mult"}));
  QS_ASSIGN_OR_RETURN(const int64_t emb_dim, field(d, s, {"emb_dim"}));
  QS_ASSIGN_OR_RETURN(const int64_t num_embeds, field(d, s, {"num_embeds"}));
  QS_ASSIGN_OR_RETURN(const int64_t mel, field(d, s, {"mel_dim"}));
  QS_ASSIGN_OR_RETURN(const int64_t enc_dim, field(d, s, {"enc_dim"}));
  QS_ASSIGN_OR_RETURN(const int64_t enc_emb_dim, field(d, s, {"enc_emb_dim"}));
  QS_ASSIGN_OR_RETURN(const int64_t att, field(d, s, {"enc_attention_channels"}));
  QS_ASSIGN_OR_RETURN(const int64_t scale, field(d, s, {"enc_res2net_scale"}));
  QS_ASSIGN_OR_RETURN(const int64_t se, field(d, s, {"enc_se_channels"}));
  QS_ASSIGN_OR_RETURN(std::vector<int64_t> ch, int_list(d, s, "enc_channels"));
  QS_ASSIGN_OR_RETURN(std::vector<int64_t> ks, int_list(d, s, "enc_kernel_sizes"));
  if (ks.size() != ch.size() || ch.size() < 2) {
    return invalid_argument(std::string(s) +
                            ": enc_channels and enc_kernel_sizes differ in length");
  }
  auto conv = [](int64_t in, int64_t out, int64_t k) { return in * out * k + out; };
  const int64_t n = static_cast<int64_t>(ch.size());
  int64_t ecapa = conv(mel, ch[0], ks[0]);
  for (int64_t i = 1; i + 1 < n; ++i) {  // SE-Res2Net blocks
    const int64_t in = ch[i - 1], out = ch[i];
    ecapa += conv(in, out, 1) + (scale - 1) * conv(in / scale, out / scale, ks[i]) +
             conv(out, out, 1) + conv(out, se, 1) + conv(se, out, 1);
  }
  ecapa += conv(ch[n - 1], ch[n - 1], ks[n - 1]);                  // mfa
  ecapa += conv(ch[n - 1] * 3, att, 1) + conv(att, ch[n - 1], 1);  // attentive pooling
  ecapa += conv(ch[n - 1] * 2, enc_dim, 1);                        // fc
  const int64_t inner = heads * head_dim, ff = dim * ff_mult;
  const int64_t block = (dim * 6 * dim + 6 * dim) + 3 * (dim * inner + inner) +
                        (inner * dim + dim) + (dim * ff + ff) + (ff * dim + dim);
  return (256 * dim + dim) + (dim * dim + dim) + (num_embeds + 1) * emb_dim +
         ((mel + enc_dim + enc_emb_dim + emb_dim) * dim + dim) + ecapa + depth * block +
         (dim * 2 * dim + 2 * dim) + (dim * mel + mel);
}

// Qwen2_5OmniToken2WavBigVGANModel: conv_pre, the transposed-conv upsamplers, one AMP block
// per (stage, resblock kernel) of six convolutions and six SnakeBeta (alpha, beta) pairs, the
// final SnakeBeta and conv_post (biased unless use_bias_at_final is false).
Result<int64_t> bigvgan_params(const json& b) {
  const char* s = "token2wav_config.bigvgan_config";
  QS_ASSIGN_OR_RETURN(const int64_t mel, field(b, s, {"mel_dim"}));
  QS_ASSIGN_OR_RETURN(const int64_t c0, field(b, s, {"upsample_initial_channel"}));
  QS_ASSIGN_OR_RETURN(std::vector<int64_t> up_k, int_list(b, s, "upsample_kernel_sizes"));
  QS_ASSIGN_OR_RETURN(std::vector<int64_t> res_k, int_list(b, s, "resblock_kernel_sizes"));
  const bool final_bias = !b.contains("use_bias_at_final") || b["use_bias_at_final"] != false;
  int64_t p = mel * c0 * 7 + c0;
  int64_t c = c0;
  for (int64_t k : up_k) {
    const int64_t out = c / 2;
    if (out < 1) return invalid_argument(std::string(s) + ": too many upsampling stages");
    p += c * out * k + out;
    for (int64_t rk : res_k) p += 6 * (out * out * rk + out) + 12 * out;
    c = out;
  }
  return p + 2 * c + c * 7 + (final_bias ? 1 : 0);
}

const json* object_field(const json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_object() ? &*it : nullptr;
}

std::string arch_of(const json& config) {
  const auto it = config.find("architectures");
  if (it == config.end() || !it->is_array() || it->empty() || !(*it)[0].is_string()) return "";
  return (*it)[0].get<std::string>();
}

Status add_thinker_parts(const json& thinker, const std::string& decoder_name,
                         MultimodalMemory* m) {
  QS_ASSIGN_OR_RETURN(const models::ModelConfig c, models::parse_model_config(thinker));
  QS_ASSIGN_OR_RETURN(const W4A16 w4, make_w4a16());
  QS_ASSIGN_OR_RETURN(PartMemory decoder, decoder_part(decoder_name, c, w4));
  m->parts.push_back(std::move(decoder));
  if (const json* v = object_field(thinker, "vision_config")) {
    const auto qkv = c.family == models::Family::kQwen2_5_OmniThinker ? models::VisionQkv::kSeparate
                                                                      : models::VisionQkv::kFused;
    QS_ASSIGN_OR_RETURN(auto specs, models::vision_tower_tensors(*v, qkv));
    m->parts.push_back(tower_part("vision tower", specs, 0));
  }
  if (const json* a = object_field(thinker, "audio_config")) {
    QS_ASSIGN_OR_RETURN(auto specs, models::audio_tower_tensors(*a));
    // SinusoidsPositionEmbedding: [max_source_positions, d_model] f32, made at load.
    QS_ASSIGN_OR_RETURN(const int64_t positions,
                        field(*a, "audio_config", {"max_source_positions"}));
    QS_ASSIGN_OR_RETURN(const int64_t d, field(*a, "audio_config", {"d_model"}));
    m->parts.push_back(tower_part("audio tower", specs, static_cast<uint64_t>(positions * d * 4)));
  }
  return ok_status();
}

}  // namespace

bool is_multimodal_architecture(const json& config) {
  const std::string a = arch_of(config);
  return a == "Qwen2_5OmniModel" || a == "Qwen2_5OmniForConditionalGeneration" ||
         a == "Qwen2_5OmniThinkerForConditionalGeneration" ||
         a == "Qwen2_5_VLForConditionalGeneration";
}

Result<MultimodalMemory> multimodal_memory(const json& config) {
  MultimodalMemory m;
  m.architecture = arch_of(config);
  if (m.architecture == "Qwen2_5OmniThinkerForConditionalGeneration") {
    QS_RETURN_IF_ERROR(add_thinker_parts(config, "thinker decoder", &m));
    return m;
  }
  if (m.architecture == "Qwen2_5_VLForConditionalGeneration") {
    QS_RETURN_IF_ERROR(add_thinker_parts(config, "decoder", &m));
    return m;
  }
  if (m.architecture != "Qwen2_5OmniModel" &&
      m.architecture != "Qwen2_5OmniForConditionalGeneration") {
    return invalid_argument("no multimodal memory table for architecture '" + m.architecture + "'");
  }
  const json* thinker = object_field(config, "thinker_config");
  if (thinker == nullptr) return invalid_argument("a Qwen2.5-Omni config needs thinker_config");
  json t = *thinker;
  t["architectures"] = {"Qwen2_5OmniThinkerForConditionalGeneration"};
  QS_RETURN_IF_ERROR(add_thinker_parts(t, "thinker decoder", &m));
  if (const json* talker = object_field(config, "talker_config")) {
    QS_ASSIGN_OR_RETURN(PartMemory p, talker_part(*talker));
    m.parts.push_back(std::move(p));
  }
  if (const json* t2w = object_field(config, "token2wav_config")) {
    const json* dit = object_field(*t2w, "dit_config");
    const json* vocoder = object_field(*t2w, "bigvgan_config");
    if (dit == nullptr || vocoder == nullptr) {
      return invalid_argument("token2wav_config needs dit_config and bigvgan_config");
    }
    QS_ASSIGN_OR_RETURN(const int64_t d, dit_params(*dit));
    QS_ASSIGN_OR_RETURN(const int64_t b, bigvgan_params(*vocoder));
    m.parts.push_back(stored_part("token2wav DiT", d, 0));
    m.parts.push_back(stored_part("token2wav BigVGAN", b, 0));
  }
  return m;
}

std::string multimodal_memory_text(const MultimodalMemory& m) {
  std::string out = "resident weights by part (" + m.architecture +
                    ", from config.json; W4A16: the decoder blocks' linears int4 g128 as AutoRound "
                    "exports them, the rest 16-bit):\n"
                    "| part | parameters | bf16 | W4A16 | W4A16 / bf16 | linears (int4) |\n"
                    "|---|---:|---:|---:|---:|---|\n";
  PartMemory total, here;
  char row[256];
  for (const PartMemory& p : m.parts) {
    std::snprintf(row, sizeof(row), "| %s%s | %s | %s | %s | %.2fx | %lld (%lld) |\n",
                  p.name.c_str(), p.runs_here ? "" : " (not run here)",
                  params_text(p.params).c_str(), bytes_text(p.bf16_bytes).c_str(),
                  bytes_text(p.w4a16_bytes).c_str(),
                  static_cast<double>(p.w4a16_bytes) / static_cast<double>(p.bf16_bytes),
                  static_cast<long long>(p.linears), static_cast<long long>(p.quantized_linears));
    out += row;
    for (PartMemory* s : {&total, &here}) {
      if (s == &here && !p.runs_here) continue;
      s->params += p.params;
      s->bf16_bytes += p.bf16_bytes;
      s->w4a16_bytes += p.w4a16_bytes;
    }
  }
  // The speech parts are not run here: the thinker's own sum is what serving it takes.
  const bool all_here = here.params == total.params;
  for (const auto& [label, s] : {std::pair<const char*, const PartMemory&>{"total", total},
                                 {"thinker (decoder and towers)", here}}) {
    if (all_here && &s == &here) continue;
    std::snprintf(row, sizeof(row), "| **%s** | %s | %s | %s | %.2fx | |\n", label,
                  params_text(s.params).c_str(), bytes_text(s.bf16_bytes).c_str(),
                  bytes_text(s.w4a16_bytes).c_str(),
                  static_cast<double>(s.w4a16_bytes) / static_cast<double>(s.bf16_bytes));
    out += row;
  }
  return out;
}

json multimodal_memory_json(const MultimodalMemory& m) {
  json parts = json::array();
  for (const PartMemory& p : m.parts) {
    parts.push_back({{"name", p.name},
                     {"runs_here", p.runs_here},
                     {"parameters", p.params},
                     {"bf16_bytes", p.bf16_bytes},
                     {"w4a16_bytes", p.w4a16_bytes},
                     {"linears", p.linears},
                     {"w4a16_int4_linears", p.quantized_linears}});
  }
  return {{"architecture", m.architecture}, {"parts", parts}};
}

}  // namespace qs::apps
