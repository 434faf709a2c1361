// importers: GGUF (llama) -> HF directory (see gguf_import.h).
#include "importers/gguf_import.h"

#include <filesystem>
#include <map>
#include <set>

#include "core/json.h"
#include "core/limits.h"
#include "importers/llama2c_import.h"
#include "io/checkpoint.h"
#include "io/generation_config.h"

namespace qs::importers {

using io::generation_config_to_json;
using io::GenerationConfig;
using io::GgufFile;
using io::GgufTensorInfo;
using io::write_checkpoint;

namespace {

namespace fs = std::filesystem;

// GGUF tensor suffix within a block -> HF module path within model.layers.N.
const std::map<std::string, std::string>& block_names() {
  static const std::map<std::string, std::string> kNames = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},
  };
  return kNames;
}

// A positive size no larger than `limit` (core/limits.h, the bounds config.json has): a
// block_count of 2^32 would otherwise make the importer list 2^32 layers' tensors.
Result<int64_t> positive(const GgufFile& g, const std::string& key, int64_t limit) {
  QS_ASSIGN_OR_RETURN(int64_t v, g.get_int(key));
  if (v <= 0) return data_loss(g.path() + ": " + key + " is " + std::to_string(v));
  QS_RETURN_IF_ERROR(limits::check_at_most(v, limit, g.path() + ": " + key));
  return v;
}

}  // namespace

std::string gguf_llama_hf_name(const std::string& name) {
  if (name == "token_embd.weight") return "model.embed_tokens.weight";
  if (name == "output_norm.weight") return "model.norm.weight";
  if (name == "output.weight") return "lm_head.weight";
  if (name.rfind("blk.", 0) != 0) return "";
  const size_t dot = name.find('.', 4);
  if (dot == std::string::npos || dot == 4) return "";
  const std::string layer = name.substr(4, dot - 4);
  if (layer.find_first_not_of("0123456789") != std::string::npos) return "";
  auto it = block_names().find(name.substr(dot + 1));
  if (it == block_names().end()) return "";
  return "model.layers." + layer + "." + it->second;
}

Result<nlohmann::json> gguf_llama_hf_config(const GgufFile& g, DType dtype) {
  QS_ASSIGN_OR_RETURN(std::string arch, g.get_string("general.architecture"));
  if (arch != "llama") {
    return unimplemented(g.path() + ": general.architecture is '" + arch +
                         "'; only 'llama' GGUFs are imported");
  }
  QS_ASSIGN_OR_RETURN(int64_t hidden, positive(g, "llama.embedding_length", limits::kMaxHiddenDim));
  QS_ASSIGN_OR_RETURN(int64_t layers, positive(g, "llama.block_count", limits::kMaxLayers));
  QS_ASSIGN_OR_RETURN(int64_t ffn, positive(g, "llama.feed_forward_length", limits::kMaxHiddenDim));
  QS_ASSIGN_OR_RETURN(int64_t heads, positive(g, "llama.attention.head_count", limits::kMaxHeads));
  int64_t kv_heads = heads;
  if (g.has("llama.attention.head_count_kv")) {
    QS_ASSIGN_OR_RETURN(kv_heads, positive(g, "llama.attention.head_count_kv", limits::kMaxHeads));
  }
  if (heads % kv_heads != 0) {
    return data_loss(g.path() + ": llama.attention.head_count " + std::to_string(heads) +
                     " is not a multiple of head_count_kv " + std::to_string(kv_heads));
  }
  int64_t head_dim = hidden / heads;
  if (g.has("llama.attention.key_length")) {
    QS_ASSIGN_OR_RETURN(head_dim, positive(g, "llama.attention.key_length", limits::kMaxHeadDim));
  } else if (hidden % heads != 0) {
    return data_loss(g.path() + ": llama.embedding_length " + std::to_string(hidden) +
                     " is not a multiple of head_count " + std::to_string(heads));
  }
  if (g.has("llama.rope.dimension_count")) {
    QS_ASSIGN_OR_RETURN(int64_t rope_dim,
                        positive(g, "llama.rope.dimension_count", limits::kMaxHeadDim));
    if (rope_dim != head_dim) {
      return unimplemented(g.path() + ": llama.rope.dimension_count " + std::to_string(rope_dim) +
                           " differs from the head size " + std::to_string(head_dim) +
                           " (partial rotary is not supported)");
    }
  }
  if (head_dim % 2 != 0) return data_loss(g.path() + ": odd head size " + std::to_string(head_dim));
  for (const char* key : {"llama.rope.scaling.type", "llama.rope.scaling.factor"}) {
    if (!g.has(key)) continue;
    if (g.has("llama.rope.scaling.type")) {
      QS_ASSIGN_OR_RETURN(std::string type, g.get_string("llama.rope.scaling.type"));
      if (type == "none") continue;
    }
    return unimplemented(g.path() + ": " + key +
                         " (rope scaling) is not supported by the importer");
  }
  const GgufTensorInfo* embd = g.find_tensor("token_embd.weight");
  if (embd == nullptr) return data_loss(g.path() + ": no tensor 'token_embd.weight'");
  int64_t vocab = embd->hf_shape()[0];
  if (g.has("llama.vocab_size")) {
    QS_ASSIGN_OR_RETURN(int64_t v, positive(g, "llama.vocab_size", limits::kMaxVocab));
    if (v != vocab) {
      return data_loss(g.path() + ": llama.vocab_size " + std::to_string(v) +
                       " differs from token_embd.weight's " + std::to_string(vocab) + " rows");
    }
  }
  double eps = 1e-5, theta = 10000.0;
  int64_t context = 2048;
  if (g.has("llama.attention.layer_norm_rms_epsilon")) {
    QS_ASSIGN_OR_RETURN(eps, g.get_float("llama.attention.layer_norm_rms_epsilon"));
  }
  if (g.has("llama.rope.freq_base")) {
    QS_ASSIGN_OR_RETURN(theta, g.get_float("llama.rope.freq_base"));
  }
  if (g.has("llama.context_length")) {
    QS_ASSIGN_OR_RETURN(context, positive(g, "llama.context_length", limits::kMaxContext));
  }

  nlohmann::json c = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"hidden_size", hidden},
      {"intermediate_size", ffn},
      {"num_hidden_layers", layers},
      {"num_attention_heads", heads},
      {"num_key_value_heads", kv_heads},
      {"head_dim", head_dim},
      {"vocab_size", vocab},
      {"max_position_embeddings", context},
      {"rms_norm_eps", eps},
      {"rope_theta", theta},
      {"tie_word_embeddings", g.find_tensor("output.weight") == nullptr},
      {"torch_dtype", dtype == DType::kBF16 ? "bfloat16" : "float32"},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"mlp_bias", false},
  };
  for (const auto& [key, field] : {std::pair{"tokenizer.ggml.bos_token_id", "bos_token_id"},
                                   {"tokenizer.ggml.eos_token_id", "eos_token_id"},
                                   {"tokenizer.ggml.padding_token_id", "pad_token_id"}}) {
    QS_ASSIGN_OR_RETURN(int64_t id, g.get_token_id(key, vocab));
    if (id >= 0) c[field] = id;
  }
  return c;
}

Status import_gguf_weights(const GgufFile& g, const std::string& out_dir, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16) {
    return invalid_argument("GGUF import writes f32 or bf16, not " +
                            std::string(dtype_name(dtype)));
  }
  QS_ASSIGN_OR_RETURN(nlohmann::json config, gguf_llama_hf_config(g, dtype));
  const int64_t hidden = config["hidden_size"], layers = config["num_hidden_layers"];
  const int64_t ffn = config["intermediate_size"], heads = config["num_attention_heads"];
  const int64_t kv_heads = config["num_key_value_heads"], hd = config["head_dim"];
  const int64_t vocab = config["vocab_size"];

  // Every tensor the config implies, with its HF shape.
  std::map<std::string, std::vector<int64_t>> expected = {
      {"model.embed_tokens.weight", {vocab, hidden}}, {"model.norm.weight", {hidden}}};
  if (!config["tie_word_embeddings"].get<bool>()) expected["lm_head.weight"] = {vocab, hidden};
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    expected[p + "input_layernorm.weight"] = {hidden};
    expected[p + "post_attention_layernorm.weight"] = {hidden};
    expected[p + "self_attn.q_proj.weight"] = {heads * hd, hidden};
    expected[p + "self_attn.k_proj.weight"] = {kv_heads * hd, hidden};
    expected[p + "self_attn.v_proj.weight"] = {kv_heads * hd, hidden};
    expected[p + "self_attn.o_proj.weight"] = {hidden, heads * hd};
    expected[p + "mlp.gate_proj.weight"] = {ffn, hidden};
    expected[p + "mlp.up_proj.weight"] = {ffn, hidden};
    expected[p + "mlp.down_proj.weight"] = {hidden, ffn};
  }

  std::vector<std::pair<std::string, Tensor>> tensors;
  std::set<std::string> done;
  for (const GgufTensorInfo& t : g.tensors()) {
    const std::string name = gguf_llama_hf_name(t.name);
    if (name.empty()) {
      // rope_freqs holds Llama-3.1-style RoPE factors that HF derives from a rope_scaling
      // block GGUF does not keep; importing without them would silently change RoPE.
      if (t.name == "rope_freqs.weight") {
        return unimplemented(g.path() +
                             ": rope_freqs.weight (llama3 RoPE scaling) is not "
                             "supported by the importer");
      }
      return unimplemented(g.path() + ": tensor '" + t.name + "' has no HF Llama counterpart");
    }
    auto it = expected.find(name);
    if (it == expected.end()) {
      return data_loss(g.path() + ": tensor '" + t.name + "' (" + name +
                       ") is not part of the model the metadata describes");
    }
    if (t.hf_shape() != it->second) {
      auto str = [](const std::vector<int64_t>& s) {
        std::string out = "[";
        for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
        return out + "]";
      };
      return data_loss(g.path() + ": tensor '" + t.name + "' has shape " + str(t.hf_shape()) +
                       ", expected " + str(it->second) + " for " + name);
    }
    std::vector<float> values = g.dequantize(t);
    const bool is_q = name.ends_with("q_proj.weight"), is_k = name.ends_with("k_proj.weight");
    if (is_q || is_k) {
      // convert_hf_to_gguf's permute() put HF row h*hd + p*hd/2 + i at h*hd + 2i + p; this
      // is the inverse, the same reordering llama2.c checkpoints need.
      values = permute_rows_to_rotate_half(values.data(), is_q ? heads : kv_heads, hd, hidden);
    }
    tensors.emplace_back(name, Tensor::from_f32(dtype, it->second, values));
    done.insert(name);
  }
  for (const auto& [name, shape] : expected) {
    if (!done.count(name)) return data_loss(g.path() + ": no tensor for " + name);
  }

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return io_error("cannot create " + out_dir + ": " + ec.message());
  QS_RETURN_IF_ERROR(write_json((fs::path(out_dir) / "config.json").string(), config));
  GenerationConfig gen;
  if (config.contains("bos_token_id")) gen.bos_token_id = config["bos_token_id"].get<int64_t>();
  if (config.contains("eos_token_id")) gen.eos_token_ids = {config["eos_token_id"].get<int64_t>()};
  QS_RETURN_IF_ERROR(write_json((fs::path(out_dir) / "generation_config.json").string(),
                                generation_config_to_json(gen)));
  return write_checkpoint(out_dir, tensors);
}

}  // namespace qs::importers
