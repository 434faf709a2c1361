// importers: the JSON files of an imported CTranslate2 Whisper model (see ct2_whisper_import.h):
// token ids from tokenizer.json by name, config.json from the shapes, generation_config.json
// laid out as the openai/whisper-* repositories on the Hugging Face hub have it, and what
// WhisperProcessor needs to load (feature extractor and tokenizer configs).
#include <algorithm>
#include <map>
#include <optional>

#include "importers/ct2_whisper_import.h"

namespace qs::importers {

namespace {

using nlohmann::json;

// The vocabulary size from which transformers' convert_openai_to_hf calls a model multilingual.
constexpr int64_t kMultilingualVocab = 51865;

const char* torch_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF16:
      return "float16";
    case DType::kBF16:
      return "bfloat16";
    default:
      return "float32";
  }
}

// A list of token ids from CTranslate2's config.json; null or absent gives nullopt.
using OptionalIds = std::optional<std::vector<int64_t>>;

Result<OptionalIds> ct2_id_list(const json& config, const char* key, int64_t vocab) {
  if (!config.is_object() || !config.contains(key) || config[key].is_null()) {
    return OptionalIds();
  }
  const json& list = config[key];
  const std::string what = std::string("CTranslate2 config.json: '") + key + "'";
  if (!list.is_array()) return data_loss(what + " is not a list");
  std::vector<int64_t> ids;
  for (const json& v : list) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= vocab) {
      return data_loss(what + " holds " + v.dump() + ", not a token id below " +
                       std::to_string(vocab));
    }
    ids.push_back(v.get<int64_t>());
  }
  return OptionalIds(std::move(ids));
}

// [[layer, head], ...] of the decoder's cross-attention that follow the alignment to audio.
// Without one, CTranslate2's converter takes every head of the second half of the layers.
Result<json> alignment_heads(const Ct2WhisperShape& s, const json& config) {
  json heads = json::array();
  if (!config.is_object() || !config.contains("alignment_heads") ||
      config["alignment_heads"].is_null()) {
    for (int64_t l = s.decoder_layers / 2; l < s.decoder_layers; ++l) {
      for (int64_t h = 0; h < s.decoder_heads; ++h) heads.push_back({l, h});
    }
    return heads;
  }
  const json& list = config["alignment_heads"];
  if (!list.is_array())
    return data_loss("CTranslate2 config.json: 'alignment_heads' is not a list");
  for (const json& pair : list) {
    const bool ok = pair.is_array() && pair.size() == 2 && pair[0].is_number_integer() &&
                    pair[1].is_number_integer() && pair[0].get<int64_t>() >= 0 &&
                    pair[0].get<int64_t>() < s.decoder_layers && pair[1].get<int64_t>() >= 0 &&
                    pair[1].get<int64_t>() < s.decoder_heads;
    if (!ok) {
      return data_loss("CTranslate2 config.json: alignment head " + pair.dump() +
                       " is not [layer, head] of a decoder with " +
                       std::to_string(s.decoder_layers) + " layers of " +
                       std::to_string(s.decoder_heads) + " heads");
    }
    heads.push_back({pair[0].get<int64_t>(), pair[1].get<int64_t>()});
  }
  return heads;
}

// HF's files give bos_token_id 50257 in both vocabularies: <|startoftranscript|> of the
// English-only models, <|endoftext|> of the multilingual ones.
int64_t whisper_bos(const Ct2WhisperShape& s, const WhisperTokens& t) {
  return whisper_is_multilingual(s, t) ? t.end_of_text : t.start_of_transcript;
}

}  // namespace

Result<WhisperTokens> whisper_tokens(const json& tokenizer,
                                     const std::vector<std::string>& vocabulary, int64_t vocab) {
  if (!tokenizer.is_object() || !tokenizer.contains("added_tokens") ||
      !tokenizer["added_tokens"].is_array()) {
    return data_loss("tokenizer.json has no 'added_tokens' list");
  }
  std::map<std::string, int64_t> ids;
  std::vector<std::pair<int64_t, std::string>> special;
  for (const json& t : tokenizer["added_tokens"]) {
    if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() ||
        !t.contains("content") || !t["content"].is_string()) {
      return data_loss("tokenizer.json: added token " + t.dump().substr(0, 200) +
                       " lacks an integer 'id' or a string 'content'");
    }
    const int64_t id = t["id"].get<int64_t>();
    const std::string content = t["content"].get<std::string>();
    if (id < 0 || id >= vocab) {
      return data_loss("tokenizer.json: added token '" + content + "' has id " +
                       std::to_string(id) + ", outside the model's " + std::to_string(vocab) +
                       " embeddings");
    }
    ids.emplace(content, id);
    if (t.contains("special") && t["special"].is_boolean() && t["special"].get<bool>()) {
      special.emplace_back(id, content);
    }
  }
  WhisperTokens out;
  for (auto [name, field] : {std::pair{"<|endoftext|>", &out.end_of_text},
                             {"<|startoftranscript|>", &out.start_of_transcript},
                             {"<|translate|>", &out.translate},
                             {"<|transcribe|>", &out.transcribe},
                             {"<|startofprev|>", &out.start_of_prev},
                             {"<|notimestamps|>", &out.no_timestamps}}) {
    auto it = ids.find(name);
    if (it == ids.end()) {
      return data_loss(std::string("tokenizer.json has no added token ") + name +
                       ", which every Whisper tokenizer has");
    }
    *field = it->second;
  }
  for (const auto& [content, id] : ids) {
    if (id > out.start_of_transcript && id < out.translate) out.languages.emplace_back(content, id);
  }
  std::sort(out.languages.begin(), out.languages.end(),
            [](const auto& a, const auto& b) { return a.second < b.second; });
  std::sort(special.begin(), special.end());
  for (const auto& [id, content] : special) {
    if (id != out.end_of_text) out.special.push_back(content);
  }

  if (!vocabulary.empty() && static_cast<int64_t>(vocabulary.size()) != vocab) {
    return data_loss("the CTranslate2 vocabulary has " + std::to_string(vocabulary.size()) +
                     " tokens, the model " + std::to_string(vocab) + " embeddings");
  }
  int64_t first_timestamp = -1;
  if (auto it = ids.find("<|0.00|>"); it != ids.end()) first_timestamp = it->second;
  auto in_vocab = std::find(vocabulary.begin(), vocabulary.end(), "<|0.00|>");
  if (first_timestamp < 0 && in_vocab != vocabulary.end()) {
    first_timestamp = in_vocab - vocabulary.begin();
  }
  if (first_timestamp >= 0 && first_timestamp != out.no_timestamps + 1) {
    return data_loss("<|0.00|> has id " + std::to_string(first_timestamp) +
                     "; transformers takes the timestamps to start right after <|notimestamps|> (" +
                     std::to_string(out.no_timestamps) + ")");
  }
  return out;
}

bool whisper_is_multilingual(const Ct2WhisperShape& shape, const WhisperTokens& tokens) {
  return shape.vocab >= kMultilingualVocab && !tokens.languages.empty();
}

Result<json> whisper_hf_config(const Ct2WhisperShape& s, const WhisperTokens& t,
                               const json& ct2_config, DType dtype, bool tied) {
  json c = {
      {"architectures", {"WhisperForConditionalGeneration"}},
      {"model_type", "whisper"},
      {"vocab_size", s.vocab},
      {"num_mel_bins", s.n_mels},
      {"d_model", s.d_model},
      {"encoder_layers", s.encoder_layers},
      {"decoder_layers", s.decoder_layers},
      {"num_hidden_layers", s.encoder_layers},
      {"encoder_attention_heads", s.encoder_heads},
      {"decoder_attention_heads", s.decoder_heads},
      {"encoder_ffn_dim", s.encoder_ffn},
      {"decoder_ffn_dim", s.decoder_ffn},
      {"max_source_positions", s.source_positions},
      {"max_target_positions", s.target_positions},
      {"activation_function", "gelu"},
      {"scale_embedding", false},
      {"is_encoder_decoder", true},
      {"use_cache", true},
      {"tie_word_embeddings", tied},
      {"torch_dtype", torch_dtype_name(dtype)},
      {"bos_token_id", whisper_bos(s, t)},
      {"eos_token_id", t.end_of_text},
      {"pad_token_id", t.end_of_text},
      {"decoder_start_token_id", t.start_of_transcript},
      {"dropout", 0.0},
      {"attention_dropout", 0.0},
      {"activation_dropout", 0.0},
      {"encoder_layerdrop", 0.0},
      {"decoder_layerdrop", 0.0},
      {"init_std", 0.02},
      {"apply_spec_augment", false},
      {"use_weighted_layer_sum", false},
      {"median_filter_width", 7},
  };
  QS_ASSIGN_OR_RETURN(auto suppress, ct2_id_list(ct2_config, "suppress_ids", s.vocab));
  QS_ASSIGN_OR_RETURN(auto begin, ct2_id_list(ct2_config, "suppress_ids_begin", s.vocab));
  if (suppress) c["suppress_tokens"] = *suppress;
  if (begin) c["begin_suppress_tokens"] = *begin;
  return c;
}

Result<json> whisper_generation_config(const Ct2WhisperShape& s, const WhisperTokens& t,
                                       const json& ct2_config) {
  QS_ASSIGN_OR_RETURN(json heads, alignment_heads(s, ct2_config));
  const bool multilingual = whisper_is_multilingual(s, t);
  json g = {
      {"alignment_heads", heads},
      {"bos_token_id", whisper_bos(s, t)},
      {"decoder_start_token_id", t.start_of_transcript},
      {"eos_token_id", t.end_of_text},
      {"pad_token_id", t.end_of_text},
      {"is_multilingual", multilingual},
      // OpenAI's max_initial_timestamp of 1 s in steps of 0.02 s.
      {"max_initial_timestamp_index", 50},
      {"max_length", s.target_positions},
      {"no_timestamps_token_id", t.no_timestamps},
      {"prev_sot_token_id", t.start_of_prev},
      {"return_timestamps", false},
  };
  QS_ASSIGN_OR_RETURN(auto suppress, ct2_id_list(ct2_config, "suppress_ids", s.vocab));
  QS_ASSIGN_OR_RETURN(auto begin, ct2_id_list(ct2_config, "suppress_ids_begin", s.vocab));
  if (suppress) g["suppress_tokens"] = *suppress;
  if (begin) g["begin_suppress_tokens"] = *begin;
  if (multilingual) {
    // Position 1 is the language, left for generate() to detect or be told; then the task.
    g["forced_decoder_ids"] = {{1, nullptr}, {2, t.transcribe}};
    json langs = json::object();
    for (const auto& [token, id] : t.languages) langs[token] = id;
    g["lang_to_id"] = langs;
    g["task_to_id"] = {{"transcribe", t.transcribe}, {"translate", t.translate}};
  } else {
    g["forced_decoder_ids"] = {{1, t.no_timestamps}};
  }
  return g;
}

json whisper_preprocessor_config(const Ct2WhisperShape& s) {
  // Whisper's front end: 30 s windows of 16 kHz audio, a 25 ms FFT every 10 ms.
  return {
      {"feature_extractor_type", "WhisperFeatureExtractor"},
      {"processor_class", "WhisperProcessor"},
      {"feature_size", s.n_mels},
      {"sampling_rate", 16000},
      {"hop_length", 160},
      {"n_fft", 400},
      {"chunk_length", 30},
      {"n_samples", 480000},
      {"nb_max_frames", 3000},
      {"padding_side", "right"},
      {"padding_value", 0.0},
      {"return_attention_mask", false},
  };
}

json whisper_special_tokens_map(const WhisperTokens& t) {
  const char* eot = "<|endoftext|>";
  return {{"bos_token", eot},
          {"eos_token", eot},
          {"unk_token", eot},
          {"pad_token", eot},
          {"additional_special_tokens", t.special}};
}

json whisper_tokenizer_config(const Ct2WhisperShape& s, const WhisperTokens& t) {
  json c = whisper_special_tokens_map(t);
  c["tokenizer_class"] = "WhisperTokenizer";
  c["processor_class"] = "WhisperProcessor";
  c["model_max_length"] = s.target_positions;
  c["add_prefix_space"] = false;
  c["errors"] = "replace";
  c["clean_up_tokenization_spaces"] = true;
  return c;
}

}  // namespace qs::importers
