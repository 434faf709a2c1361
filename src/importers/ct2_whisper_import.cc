// importers: CTranslate2 WhisperSpec -> HF WhisperForConditionalGeneration (see
// ct2_whisper_import.h). The variable names are those of ctranslate2.specs.whisper_spec and the
// mapping the reverse of its converters/transformers.py WhisperLoader.
#include "importers/ct2_whisper_import.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>

#include "core/json.h"
#include "core/limits.h"
#include "core/mmap_file.h"
#include "core/tensor.h"
#include "io/checkpoint.h"

namespace qs::importers {

namespace {

namespace fs = std::filesystem;
using io::Ct2Model;
using io::Ct2Variable;

// The newest WhisperSpec revision; revision 3 renumbered the activations (GELU 1 -> 3).
constexpr uint32_t kWhisperRevision = 3;

// The layers present under `side` ("encoder" or "decoder"): the highest N of "side/layer_N/"
// among the variables and aliases, plus one. Missing layers below it surface as missing
// tensors when they are read.
Result<int64_t> ct2_layer_count(const Ct2Model& m, const std::string& side) {
  const std::string prefix = side + "/layer_";
  int64_t n = 0;
  auto visit = [&](const std::string& name) -> Status {
    // "side/layer_norm/..." is no layer; a name that is neither is left to check_all_taken.
    if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size() ||
        !std::isdigit(static_cast<unsigned char>(name[prefix.size()]))) {
      return ok_status();
    }
    const size_t end = name.find('/', prefix.size());
    const std::string digits = name.substr(prefix.size(), end - prefix.size());
    if (end == std::string::npos || digits.size() > 7 ||
        digits.find_first_not_of("0123456789") != std::string::npos) {
      return data_loss(m.path() + ": variable '" + name + "' has no layer number");
    }
    const int64_t layer = std::stoll(digits);
    QS_RETURN_IF_ERROR(
        limits::check_at_most(layer + 1, limits::kMaxLayers, m.path() + ": " + side + " layers"));
    n = std::max(n, layer + 1);
    return ok_status();
  };
  for (const Ct2Variable& v : m.variables()) QS_RETURN_IF_ERROR(visit(v.name));
  for (const auto& [alias, target] : m.aliases()) QS_RETURN_IF_ERROR(visit(alias));
  if (n == 0) return data_loss(m.path() + ": no " + side + " layers");
  return n;
}

Result<const Ct2Variable*> ct2_tensor(const Ct2Model& m, const std::string& name, size_t rank) {
  const Ct2Variable* v = m.find(name);
  if (v == nullptr) return data_loss(m.path() + ": no variable '" + name + "'");
  if (v->shape.size() != rank) {
    return data_loss(m.path() + ": '" + name + "' has shape " + shape_string(v->shape) +
                     ", expected rank " + std::to_string(rank));
  }
  return v;
}

// A size taken from a shape: positive and within `limit`.
Result<int64_t> ct2_size(const Ct2Model& m, int64_t value, int64_t limit, const std::string& what) {
  if (value <= 0) return data_loss(m.path() + ": " + what + " is " + std::to_string(value));
  QS_RETURN_IF_ERROR(limits::check_at_most(value, limit, m.path() + ": " + what));
  return value;
}

Result<int64_t> ct2_heads(const Ct2Model& m, const std::string& side, int64_t d_model) {
  QS_ASSIGN_OR_RETURN(int64_t heads, m.scalar(side + "/num_heads"));
  QS_ASSIGN_OR_RETURN(heads, ct2_size(m, heads, limits::kMaxHeads, side + "/num_heads"));
  if (d_model % heads != 0) {
    return data_loss(m.path() + ": d_model " + std::to_string(d_model) + " is not a multiple of " +
                     side + "/num_heads " + std::to_string(heads));
  }
  return heads;
}

// A flag that must hold `expected` when present: what transformers' Whisper always does.
Status ct2_flag(const Ct2Model& m, const std::string& name, int64_t expected,
                const std::string& why) {
  if (m.find(name) == nullptr) return ok_status();
  QS_ASSIGN_OR_RETURN(int64_t v, m.scalar(name));
  if (v == expected) return ok_status();
  return unimplemented(m.path() + ": " + name + " is " + std::to_string(v) + ", expected " +
                       std::to_string(expected) + " (" + why + ")");
}

// The HF tensors as they are made, and the CTranslate2 names they came from.
class WhisperTensorSink {
 public:
  WhisperTensorSink(const Ct2Model& m, DType dtype) : m_(m), dtype_(dtype) {}

  // The values of `name`, whose shape must be `shape`.
  Result<std::vector<float>> take(const std::string& name, const std::vector<int64_t>& shape) {
    const Ct2Variable* v = m_.find(name);
    if (v == nullptr) return data_loss(m_.path() + ": no variable '" + name + "'");
    if (v->shape != shape) {
      return data_loss(m_.path() + ": '" + name + "' has shape " + shape_string(v->shape) +
                       ", expected " + shape_string(shape));
    }
    taken_.insert(name);
    return m_.float_values(name);
  }

  void put(const std::string& hf, std::vector<int64_t> shape, const std::vector<float>& values) {
    tensors_.emplace_back(hf, Tensor::from_f32(dtype_, std::move(shape), values));
  }

  Status copy(const std::string& ct2, const std::string& hf, const std::vector<int64_t>& shape) {
    QS_ASSIGN_OR_RETURN(std::vector<float> values, take(ct2, shape));
    put(hf, shape, values);
    return ok_status();
  }

  Status layer_norm(const std::string& ct2, const std::string& hf, int64_t d) {
    QS_RETURN_IF_ERROR(copy(ct2 + "/gamma", hf + ".weight", {d}));
    return copy(ct2 + "/beta", hf + ".bias", {d});
  }

  // The linear `ct2` ([parts x rows, cols], bias [parts x rows]) split by rows into the HF
  // linears `hf`. The part at `k_part` is a key projection: transformers' Whisper gives it
  // no bias, so CTranslate2's converter filled that slice with zeros, which is checked.
  Status linear(const std::string& ct2, const std::vector<std::string>& hf, int64_t rows,
                int64_t cols, int k_part = -1) {
    const int64_t parts = static_cast<int64_t>(hf.size());
    QS_ASSIGN_OR_RETURN(std::vector<float> w, take(ct2 + "/weight", {parts * rows, cols}));
    QS_ASSIGN_OR_RETURN(std::vector<float> b, take(ct2 + "/bias", {parts * rows}));
    for (int64_t p = 0; p < parts; ++p) {
      put(hf[p] + ".weight", {rows, cols},
          std::vector<float>(w.begin() + p * rows * cols, w.begin() + (p + 1) * rows * cols));
      const std::vector<float> bias(b.begin() + p * rows, b.begin() + (p + 1) * rows);
      if (p != k_part) {
        put(hf[p] + ".bias", {rows}, bias);
      } else if (std::any_of(bias.begin(), bias.end(), [](float x) { return x != 0.0f; })) {
        return unimplemented(m_.path() + ": '" + ct2 + "/bias' has a nonzero key bias, which " +
                             hf[p] + " of transformers' Whisper does not have");
      }
    }
    return ok_status();
  }

  // Every stored tensor (not the scalar flags) must have been read: one the mapping does not
  // know would be lost silently.
  Status check_all_taken() const {
    auto check = [&](const std::string& name) -> Status {
      const Ct2Variable* v = m_.find(name);
      if (v->shape.empty() || taken_.count(name)) return ok_status();
      const size_t suffix = name.rfind("_scale");
      if (suffix != std::string::npos && suffix + 6 == name.size() &&
          taken_.count(name.substr(0, suffix))) {
        return ok_status();
      }
      return unimplemented(m_.path() + ": variable '" + name + "' " + shape_string(v->shape) +
                           " has no place in WhisperForConditionalGeneration");
    };
    for (const Ct2Variable& v : m_.variables()) QS_RETURN_IF_ERROR(check(v.name));
    for (const auto& [alias, target] : m_.aliases()) QS_RETURN_IF_ERROR(check(alias));
    return ok_status();
  }

  const std::vector<std::pair<std::string, Tensor>>& tensors() const { return tensors_; }

 private:
  const Ct2Model& m_;
  DType dtype_;
  std::set<std::string> taken_;
  std::vector<std::pair<std::string, Tensor>> tensors_;
};

Status whisper_layer(WhisperTensorSink& sink, const Ct2WhisperShape& s, const std::string& side,
                     int64_t l) {
  const bool decoder = side == "decoder";
  const std::string c = side + "/layer_" + std::to_string(l) + "/";
  const std::string h = "model." + side + ".layers." + std::to_string(l) + ".";
  const int64_t d = s.d_model, ffn = decoder ? s.decoder_ffn : s.encoder_ffn;
  QS_RETURN_IF_ERROR(
      sink.layer_norm(c + "self_attention/layer_norm", h + "self_attn_layer_norm", d));
  QS_RETURN_IF_ERROR(sink.linear(
      c + "self_attention/linear_0",
      {h + "self_attn.q_proj", h + "self_attn.k_proj", h + "self_attn.v_proj"}, d, d, 1));
  QS_RETURN_IF_ERROR(sink.linear(c + "self_attention/linear_1", {h + "self_attn.out_proj"}, d, d));
  if (decoder) {
    QS_RETURN_IF_ERROR(
        sink.layer_norm(c + "attention/layer_norm", h + "encoder_attn_layer_norm", d));
    QS_RETURN_IF_ERROR(sink.linear(c + "attention/linear_0", {h + "encoder_attn.q_proj"}, d, d));
    QS_RETURN_IF_ERROR(sink.linear(
        c + "attention/linear_1", {h + "encoder_attn.k_proj", h + "encoder_attn.v_proj"}, d, d, 0));
    QS_RETURN_IF_ERROR(sink.linear(c + "attention/linear_2", {h + "encoder_attn.out_proj"}, d, d));
  }
  QS_RETURN_IF_ERROR(sink.layer_norm(c + "ffn/layer_norm", h + "final_layer_norm", d));
  QS_RETURN_IF_ERROR(sink.linear(c + "ffn/linear_0", {h + "fc1"}, ffn, d));
  return sink.linear(c + "ffn/linear_1", {h + "fc2"}, d, ffn);
}

// Fills `sink` with every HF tensor; returns whether the output projection is the embedding.
Result<bool> whisper_tensors(const Ct2Model& m, const Ct2WhisperShape& s, WhisperTensorSink& sink) {
  const int64_t d = s.d_model;
  QS_RETURN_IF_ERROR(
      sink.copy("encoder/conv1/weight", "model.encoder.conv1.weight", {d, s.n_mels, 3}));
  QS_RETURN_IF_ERROR(sink.copy("encoder/conv1/bias", "model.encoder.conv1.bias", {d}));
  QS_RETURN_IF_ERROR(sink.copy("encoder/conv2/weight", "model.encoder.conv2.weight", {d, d, 3}));
  QS_RETURN_IF_ERROR(sink.copy("encoder/conv2/bias", "model.encoder.conv2.bias", {d}));
  QS_RETURN_IF_ERROR(sink.copy("encoder/position_encodings/encodings",
                               "model.encoder.embed_positions.weight", {s.source_positions, d}));
  for (int64_t l = 0; l < s.encoder_layers; ++l) {
    QS_RETURN_IF_ERROR(whisper_layer(sink, s, "encoder", l));
  }
  QS_RETURN_IF_ERROR(sink.layer_norm("encoder/layer_norm", "model.encoder.layer_norm", d));

  QS_ASSIGN_OR_RETURN(std::vector<float> embed,
                      sink.take("decoder/embeddings/weight", {s.vocab, d}));
  sink.put("model.decoder.embed_tokens.weight", {s.vocab, d}, embed);
  QS_RETURN_IF_ERROR(sink.copy("decoder/position_encodings/encodings",
                               "model.decoder.embed_positions.weight", {s.target_positions, d}));
  for (int64_t l = 0; l < s.decoder_layers; ++l) {
    QS_RETURN_IF_ERROR(whisper_layer(sink, s, "decoder", l));
  }
  QS_RETURN_IF_ERROR(sink.layer_norm("decoder/layer_norm", "model.decoder.layer_norm", d));

  if (m.find("decoder/projection/bias") != nullptr) {
    QS_ASSIGN_OR_RETURN(std::vector<float> bias, sink.take("decoder/projection/bias", {s.vocab}));
    if (std::any_of(bias.begin(), bias.end(), [](float x) { return x != 0.0f; })) {
      return unimplemented(m.path() +
                           ": decoder/projection/bias is nonzero; transformers' "
                           "Whisper has no output bias");
    }
  }
  // The converter stores the output projection as an alias of the embedding (it copies
  // proj_out, which transformers ties to embed_tokens); a model whose projection differs
  // keeps it as proj_out.weight.
  if (m.find("decoder/projection/weight") == nullptr) return true;
  QS_ASSIGN_OR_RETURN(std::vector<float> proj,
                      sink.take("decoder/projection/weight", {s.vocab, d}));
  if (proj == embed) return true;
  sink.put("proj_out.weight", {s.vocab, d}, proj);
  return false;
}

// CTranslate2's vocabulary: vocabulary.json (a list, since CTranslate2 4) or vocabulary.txt
// (one token per line); empty when the folder has neither.
Result<std::vector<std::string>> ct2_vocabulary(const std::string& dir) {
  std::vector<std::string> tokens;
  const fs::path json_path = fs::path(dir) / "vocabulary.json";
  if (fs::exists(json_path)) {
    QS_ASSIGN_OR_RETURN(nlohmann::json list, read_json(json_path.string()));
    if (!list.is_array()) return data_loss(json_path.string() + " is not a list of tokens");
    for (const auto& t : list) {
      if (!t.is_string()) return data_loss(json_path.string() + " holds a non-string token");
      tokens.push_back(t.get<std::string>());
    }
    return tokens;
  }
  const fs::path txt_path = fs::path(dir) / "vocabulary.txt";
  if (!fs::exists(txt_path)) return tokens;
  QS_ASSIGN_OR_RETURN(std::string text, read_file(txt_path.string()));
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    tokens.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return tokens;
}

}  // namespace

Result<Ct2WhisperShape> ct2_whisper_shape(const Ct2Model& m) {
  if (m.spec() != "WhisperSpec") {
    return unimplemented(m.path() + ": import ct2 supports Whisper models; this is " + m.spec());
  }
  if (m.revision() > kWhisperRevision) {
    return unimplemented(m.path() + ": WhisperSpec revision " + std::to_string(m.revision()) +
                         " is newer than the " + std::to_string(kWhisperRevision) +
                         " quantserve reads");
  }
  Ct2WhisperShape s;
  QS_ASSIGN_OR_RETURN(const Ct2Variable* embed, ct2_tensor(m, "decoder/embeddings/weight", 2));
  QS_ASSIGN_OR_RETURN(s.vocab, ct2_size(m, embed->shape[0], limits::kMaxVocab, "vocabulary"));
  QS_ASSIGN_OR_RETURN(s.d_model, ct2_size(m, embed->shape[1], limits::kMaxHiddenDim, "d_model"));
  QS_ASSIGN_OR_RETURN(const Ct2Variable* conv1, ct2_tensor(m, "encoder/conv1/weight", 3));
  QS_ASSIGN_OR_RETURN(s.n_mels, ct2_size(m, conv1->shape[1], limits::kMaxHiddenDim, "mel bins"));
  QS_ASSIGN_OR_RETURN(const Ct2Variable* src,
                      ct2_tensor(m, "encoder/position_encodings/encodings", 2));
  QS_ASSIGN_OR_RETURN(s.source_positions,
                      ct2_size(m, src->shape[0], limits::kMaxContext, "encoder positions"));
  QS_ASSIGN_OR_RETURN(const Ct2Variable* tgt,
                      ct2_tensor(m, "decoder/position_encodings/encodings", 2));
  QS_ASSIGN_OR_RETURN(s.target_positions,
                      ct2_size(m, tgt->shape[0], limits::kMaxContext, "decoder positions"));
  QS_ASSIGN_OR_RETURN(s.encoder_layers, ct2_layer_count(m, "encoder"));
  QS_ASSIGN_OR_RETURN(s.decoder_layers, ct2_layer_count(m, "decoder"));
  QS_ASSIGN_OR_RETURN(s.encoder_heads, ct2_heads(m, "encoder", s.d_model));
  QS_ASSIGN_OR_RETURN(s.decoder_heads, ct2_heads(m, "decoder", s.d_model));
  QS_ASSIGN_OR_RETURN(const Ct2Variable* enc_fc1,
                      ct2_tensor(m, "encoder/layer_0/ffn/linear_0/weight", 2));
  QS_ASSIGN_OR_RETURN(s.encoder_ffn,
                      ct2_size(m, enc_fc1->shape[0], limits::kMaxHiddenDim, "encoder ffn"));
  QS_ASSIGN_OR_RETURN(const Ct2Variable* dec_fc1,
                      ct2_tensor(m, "decoder/layer_0/ffn/linear_0/weight", 2));
  QS_ASSIGN_OR_RETURN(s.decoder_ffn,
                      ct2_size(m, dec_fc1->shape[0], limits::kMaxHiddenDim, "decoder ffn"));
  QS_ASSIGN_OR_RETURN(const Ct2Variable* norm, ct2_tensor(m, "encoder/layer_norm/gamma", 1));
  if (!dtype_is_float(norm->dtype)) {
    return data_loss(m.path() + ": encoder/layer_norm/gamma is " + dtype_name(norm->dtype) +
                     ", expected a float type");
  }
  s.stored = norm->dtype;

  const int64_t gelu = m.revision() >= kWhisperRevision ? 3 : 1;
  QS_RETURN_IF_ERROR(ct2_flag(m, "decoder/activation", gelu, "Whisper's GELU"));
  QS_RETURN_IF_ERROR(ct2_flag(m, "decoder/pre_norm", 1, "Whisper normalizes before each block"));
  QS_RETURN_IF_ERROR(
      ct2_flag(m, "decoder/scale_embeddings", 0, "Whisper does not scale its embeddings"));
  QS_RETURN_IF_ERROR(ct2_flag(m, "decoder/alibi", 0, "Whisper has learned positions"));
  return s;
}

Status import_ct2_whisper(const std::string& model_dir, const std::string& out_dir,
                          std::optional<DType> dtype) {
  const fs::path dir(model_dir);
  QS_ASSIGN_OR_RETURN(Ct2Model model, Ct2Model::open((dir / "model.bin").string()));
  QS_ASSIGN_OR_RETURN(Ct2WhisperShape shape, ct2_whisper_shape(model));
  const DType out_dtype = dtype.value_or(shape.stored);
  if (out_dtype != DType::kF32 && out_dtype != DType::kF16 && out_dtype != DType::kBF16) {
    return invalid_argument(std::string("import ct2 writes F32, F16 or BF16, not ") +
                            dtype_name(out_dtype));
  }

  const std::string tokenizer_path = (dir / "tokenizer.json").string();
  QS_ASSIGN_OR_RETURN(std::string tokenizer_text, read_file(tokenizer_path));
  QS_ASSIGN_OR_RETURN(nlohmann::json tokenizer, read_json(tokenizer_path));
  QS_ASSIGN_OR_RETURN(std::vector<std::string> vocabulary, ct2_vocabulary(model_dir));
  nlohmann::json ct2_config;
  if (fs::exists(dir / "config.json")) {
    QS_ASSIGN_OR_RETURN(ct2_config, read_json((dir / "config.json").string()));
  }
  auto tokens = whisper_tokens(tokenizer, vocabulary, shape.vocab);
  if (!tokens.ok()) return tokens.status().with_context(model_dir);

  WhisperTensorSink sink(model, out_dtype);
  QS_ASSIGN_OR_RETURN(bool tied, whisper_tensors(model, shape, sink));
  QS_RETURN_IF_ERROR(sink.check_all_taken());
  QS_ASSIGN_OR_RETURN(nlohmann::json config,
                      whisper_hf_config(shape, *tokens, ct2_config, out_dtype, tied));
  QS_ASSIGN_OR_RETURN(nlohmann::json generation,
                      whisper_generation_config(shape, *tokens, ct2_config));

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return io_error("cannot create " + out_dir + ": " + ec.message());
  const fs::path out(out_dir);
  QS_RETURN_IF_ERROR(io::write_checkpoint(out_dir, sink.tensors()));
  QS_RETURN_IF_ERROR(write_json((out / "config.json").string(), config));
  QS_RETURN_IF_ERROR(write_json((out / "generation_config.json").string(), generation));
  QS_RETURN_IF_ERROR(
      write_json((out / "preprocessor_config.json").string(), whisper_preprocessor_config(shape)));
  QS_RETURN_IF_ERROR(write_file((out / "tokenizer.json").string(), tokenizer_text));
  QS_RETURN_IF_ERROR(write_json((out / "tokenizer_config.json").string(),
                                whisper_tokenizer_config(shape, *tokens)));
  return write_json((out / "special_tokens_map.json").string(),
                    whisper_special_tokens_map(*tokens));
}

}  // namespace qs::importers
