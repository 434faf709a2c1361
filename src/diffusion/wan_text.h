// diffusion: Wan's prompt encoding (diffusers' pipeline_wan.py: prompt_clean, then
// _get_t5_prompt_embeds): the cleaned prompt is tokenized by the pipeline's UMT5 tokenizer
// (padded to max_sequence_length, truncated, "</s>" appended), encoded by its UMT5EncoderModel
// with the tokenizer's attention mask, and the rows past the prompt's tokens are set to zero.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "diffusion/t5_encoder.h"
#include "tokenizer/unigram_tokenizer.h"

namespace qs::diffusion {

// diffusers' prompt_clean: whitespace_clean(basic_clean(text)), where basic_clean is
// ftfy.fix_text (when ftfy is installed, as in Wan's requirements), html.unescape twice and a
// strip, and whitespace_clean turns each run of whitespace (Python's \s) into one space and
// strips. Reproduced exactly: Python's html.unescape (numeric references with its replacements
// of invalid code points; named references with and without ";", longest-prefix fallback) and,
// of ftfy 6.3's fix_text with its default config, its per-line segments, its "auto" HTML
// unescaping (";"-terminated references, all-caps names, off from the first line holding a
// "<" on), fix_c1_controls, fix_latin_ligatures, fix_character_width, uncurl_quotes,
// fix_line_breaks, remove_terminal_escapes, remove_control_chars and NFC, repeated until the
// text stops changing. Not reproduced: ftfy's fix_encoding (mojibake detection: "cafÃ©" stays
// as it is, where ftfy makes it "café", with its restore_byte_a0, replace_lossy_sequences and
// decode_inconsistent_utf8), and named references outside HTML 4's 252 entities, &apos;,
// their HTML5 all-caps forms (&TRADE;) and the HTML5 names that start with one of the legacy
// ";"-less names (&ltimes;, &notinva;...): the other 1900-odd HTML5 names (&checkmark;, &it;,
// &Not;...) stay as written, where Python decodes them. Bytes that are not UTF-8 become U+FFFD
// (Python's errors="replace"). The cost is that of ftfy's loop: one pass per level of
// "&amp;amp;..." nesting, so bound the input (WanTextEncoder refuses past kMaxPromptBytes).
std::string wan_prompt_clean(std::string_view text);

// A prompt as WanPipeline's tokenizer call gives it.
struct WanPromptTokens {
  std::vector<int32_t> ids;  // [max_sequence_length]: tokens, "</s>", then "<pad>"
  int64_t n_valid = 0;       // the attention mask: 1 on the first n_valid ids, 0 on the rest
};

class WanTextEncoder {
 public:
  // pipeline_dir/tokenizer (a Unigram tokenizer.json) and pipeline_dir/text_encoder (a UMT5
  // encoder: config.json model_type "umt5").
  static Result<WanTextEncoder> load(const std::string& pipeline_dir);

  // prompt_clean, then the tokenizer as _get_t5_prompt_embeds calls it (padding="max_length",
  // truncation, add_special_tokens). Fails on max_sequence_length outside 1..kMaxSequenceLength,
  // a prompt over kMaxPromptBytes, or text the tokenizer cannot encode.
  Result<WanPromptTokens> tokenize(std::string_view prompt, int64_t max_sequence_length) const;

  // [max_sequence_length, d_model]: rows past the prompt's tokens zero, as the pipeline passes
  // them to the transformer.
  Result<std::vector<float>> encode(const std::string& prompt, int64_t max_sequence_length,
                                    ThreadPool& pool) const;

  int64_t hidden_size() const { return encoder_.config().d_model; }
  const T5Encoder& encoder() const { return encoder_; }

  // Wan uses 512; the relative-position buckets allow any length, but attention over more
  // tokens than this is a request to refuse, not to serve.
  static constexpr int64_t kMaxSequenceLength = 4096;
  // A prompt past this many bytes is refused before cleaning: ftfy's unescaping loop repeats
  // once per level of "&amp;amp;..." nesting, so its cost grows with the square of the length.
  static constexpr size_t kMaxPromptBytes = 16 << 10;

 private:
  std::unique_ptr<tok::UnigramTokenizer> tokenizer_;
  T5Encoder encoder_;
};

}  // namespace qs::diffusion
