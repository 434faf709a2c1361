// tokenizer: pre-tokenization for byte-level BPE, i.e. the regex split that cuts text into
// the pieces BPE merges within (HF pre_tokenizers Split/ByteLevel, tiktoken's pat_str). Runs
// the published patterns with PCRE2 (UTF + Unicode properties + JIT). Promises: unless a
// Split drops its matches (kRemoved), pieces concatenate back to the input plus any prefix
// space asked for; bytes that are not well-formed UTF-8 never reach PCRE2: each becomes a
// piece of its own.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace qs::tok {

// The pre-tokenizers of the model families we know, for files that do not carry their own
// pattern (vocab.json + merges.txt, tiktoken ranks).
enum class PretokenizerKind {
  kGpt2,    // GPT-2 and most byte-level BPEs of its era (HF ByteLevel use_regex)
  kLlama3,  // Llama-3 / tiktoken cl100k: digits in runs of up to three
  kQwen2,   // Qwen2/2.5/3: as Llama-3 but one digit per piece
};

// The exact regex of each kind (see /work/shared/data/SOURCES.md "Pre-tokenizer regexes").
std::string_view pretokenizer_pattern(PretokenizerKind kind);

// What HF's Split does with the text a match covers.
enum class SplitBehavior {
  kIsolated,            // matches and the gaps between them are separate pieces
  kRemoved,             // matches are dropped, gaps kept
  kMergedWithPrevious,  // each match is glued to the end of the gap before it
  kMergedWithNext,      // each match is glued to the start of the gap after it
};

// One compiled pattern. Immutable after creation and safe to share between threads.
class RegexSplitter {
 public:
  static Result<std::unique_ptr<RegexSplitter>> create(std::string_view pattern,
                                                       SplitBehavior behavior);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Appends the pieces of `text` to *pieces (empty pieces are never produced).
  void split(std::string_view text, std::vector<std::string>* pieces) const;

 private:
  RegexSplitter(void* code, SplitBehavior behavior) : code_(code), behavior_(behavior) {}
  // [begin, end) byte ranges of the matches in `text`, which must be valid UTF-8.
  void find_matches(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const;

  void* code_;  // pcre2_code_8*, kept opaque so pcre2.h stays out of this header
  SplitBehavior behavior_;
};

// A chain of steps applied in order to every piece, as HF's pre_tokenizers.Sequence.
class Pretokenizer {
 public:
  // The standard chain of a known family.
  static Result<Pretokenizer> for_kind(PretokenizerKind kind);

  // Step: split every piece with `pattern`.
  Status add_split(std::string_view pattern, SplitBehavior behavior);
  // Step: prepend " " to every piece that does not start with one (HF ByteLevel
  // add_prefix_space, which acts on each piece it is given).
  void add_prefix_space();

  // The pieces of `text`, in order.
  std::vector<std::string> run(std::string_view text) const;

 private:
  struct Step {
    std::shared_ptr<const RegexSplitter> splitter;  // null: the prefix-space step
  };
  std::vector<Step> steps_;
};

}  // namespace qs::tok
