// tokenizer: load_tokenizer(), which picks the tokenizer of an HF checkpoint directory by the
// files in it, in HF's order of preference: tokenizer.json, vocab.json + merges.txt, then
// tokenizer.model (a SentencePiece protobuf or tiktoken ranks, told apart by content).
// Special tokens and BOS/EOS come from tokenizer_config.json / special_tokens_map.json.
#include <filesystem>

#include "core/json.h"
#include "core/log.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/sentencepiece_model.h"
#include "tokenizer/sentencepiece_tokenizer.h"
#include "tokenizer/tiktoken.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_config.h"

namespace qs::tok {
namespace {

namespace fs = std::filesystem;

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// Added tokens for a byte-level BPE: added_tokens_decoder, which already holds every special
// token of the checkpoint with its id.
BpeFileOptions bpe_options(const TokenizerConfig& config) {
  BpeFileOptions options;
  options.added_tokens = config.added_tokens;
  if (config.tokenizer_class.rfind("Qwen2", 0) == 0) {
    options.pretokenizer = PretokenizerKind::kQwen2;
  } else if (config.tokenizer_class == "PreTrainedTokenizerFast" ||
             config.tokenizer_class.rfind("Llama", 0) == 0) {
    // Byte-level BPE files without tokenizer.json named this way are Llama-3 style.
    options.pretokenizer = PretokenizerKind::kLlama3;
  }
  return options;
}

// BOS/EOS and add_bos_token/add_eos_token from the config, where it says anything; what the
// tokenizer files said (tokenizer.json's post-processor) stands otherwise.
Status apply_config(BpeTokenizer& t, const TokenizerConfig& config, const std::string& dir) {
  if (config.bos_token) {
    QS_RETURN_IF_ERROR(t.set_bos_token(config.bos_token->content).with_context(dir));
  }
  if (config.eos_token) {
    QS_RETURN_IF_ERROR(t.set_eos_token(config.eos_token->content).with_context(dir));
  }
  if (config.add_bos_token) {
    QS_RETURN_IF_ERROR(t.set_add_bos(*config.add_bos_token).with_context(dir));
  }
  if (config.add_eos_token) {
    QS_RETURN_IF_ERROR(t.set_add_eos(*config.add_eos_token).with_context(dir));
  }
  return ok_status();
}

Result<std::unique_ptr<Tokenizer>> from_tokenizer_json(const std::string& path,
                                                       const TokenizerConfig& config,
                                                       const std::string& dir) {
  QS_ASSIGN_OR_RETURN(nlohmann::json j, read_json(path));
  if (is_spm_style_tokenizer_json(j)) {
    QS_ASSIGN_OR_RETURN(std::unique_ptr<SentencePieceTokenizer> t,
                        SentencePieceTokenizer::from_hf_json(j, config, path));
    return std::unique_ptr<Tokenizer>(std::move(t));
  }
  QS_ASSIGN_OR_RETURN(std::unique_ptr<BpeTokenizer> t, load_bpe_tokenizer_json(j, path));
  QS_RETURN_IF_ERROR(apply_config(*t, config, dir));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

Result<std::unique_ptr<Tokenizer>> from_tokenizer_model(const std::string& path,
                                                        const TokenizerConfig& config,
                                                        const std::string& dir) {
  QS_ASSIGN_OR_RETURN(std::string data, read_file(path));
  if (looks_like_tiktoken(std::string_view(data).substr(0, 4096))) {
    if (config.added_tokens.empty()) {
      // Meta's original Llama-3 layout: the ranks alone, specials implied.
      QS_ASSIGN_OR_RETURN(std::unique_ptr<BpeTokenizer> t, load_llama3_tiktoken(path));
      return std::unique_ptr<Tokenizer>(std::move(t));
    }
    BpeFileOptions options = bpe_options(config);
    options.pretokenizer = PretokenizerKind::kLlama3;  // tiktoken ranks in HF dirs: Llama-3
    options.ignore_merges.reset();
    QS_ASSIGN_OR_RETURN(std::unique_ptr<BpeTokenizer> t, load_tiktoken(path, options));
    QS_RETURN_IF_ERROR(apply_config(*t, config, dir));
    return std::unique_ptr<Tokenizer>(std::move(t));
  }
  // A ModelProto starts with field 1 (pieces), length-delimited: tag byte 0x0A.
  if (data.empty() || data[0] != '\x0A') {
    return data_loss(path + ": neither a SentencePiece model (protobuf) nor tiktoken ranks");
  }
  QS_ASSIGN_OR_RETURN(SpmModel model, parse_spm_model(data, path));
  QS_ASSIGN_OR_RETURN(std::unique_ptr<SentencePieceTokenizer> t,
                      SentencePieceTokenizer::from_model(model, config, path));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& model_dir) {
  std::error_code ec;
  if (!fs::is_directory(model_dir, ec)) {
    return not_found(model_dir + ": not a directory");
  }
  const fs::path dir(model_dir);
  QS_ASSIGN_OR_RETURN(TokenizerConfig config, read_tokenizer_config(model_dir));

  if (is_file(dir / "tokenizer.json")) {
    auto from_json = from_tokenizer_json((dir / "tokenizer.json").string(), config, model_dir);
    // A tokenizer.json we cannot run (e.g. Gemma's pre-tokenizer) may sit beside the
    // sentencepiece model it was converted from, which we can.
    if (from_json.ok() || from_json.status().code() != StatusCode::kUnimplemented ||
        !is_file(dir / "tokenizer.model")) {
      return from_json;
    }
    auto from_model = from_tokenizer_model((dir / "tokenizer.model").string(), config, model_dir);
    if (from_model.ok()) {
      QS_LOG_INFO("%s; using tokenizer.model instead", from_json.status().message().c_str());
      return from_model;
    }
    return Status(
        StatusCode::kUnimplemented,
        from_json.status().message() + "; and tokenizer.model: " + from_model.status().message());
  }
  if (is_file(dir / "vocab.json") && is_file(dir / "merges.txt")) {
    QS_ASSIGN_OR_RETURN(std::unique_ptr<BpeTokenizer> t,
                        load_bpe_vocab_merges((dir / "vocab.json").string(),
                                              (dir / "merges.txt").string(), bpe_options(config)));
    QS_RETURN_IF_ERROR(apply_config(*t, config, model_dir));
    return std::unique_ptr<Tokenizer>(std::move(t));
  }
  if (is_file(dir / "tokenizer.model")) {
    return from_tokenizer_model((dir / "tokenizer.model").string(), config, model_dir);
  }
  std::string hint;
  if (is_file(dir / "vocab.json")) hint = " (vocab.json is there but merges.txt is not)";
  if (is_file(dir / "merges.txt")) hint = " (merges.txt is there but vocab.json is not)";
  return not_found(model_dir +
                   ": no tokenizer found: expected tokenizer.json, vocab.json + merges.txt, or "
                   "tokenizer.model" +
                   hint);
}

}  // namespace qs::tok
