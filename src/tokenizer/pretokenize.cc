// tokenizer: regex pre-tokenization with PCRE2 (see pretokenize.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/pretokenize.h"

#include <pcre2.h>

#include <new>

#include "core/check.h"
#include "tokenizer/utf8.h"

namespace qs::tok {
namespace {

// GPT-2 encoder.py; also HF ByteLevel's built-in regex.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Meta llama3 tokenizer.py pat_str (= tiktoken cl100k_base).
constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen2 tokenizer.json Split pattern.
constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

pcre2_code* as_code(void* p) {
  return static_cast<pcre2_code*>(p);
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

std::string_view pretokenizer_pattern(PretokenizerKind kind) {
  switch (kind) {
    case PretokenizerKind::kGpt2:
      return kGpt2Pattern;
    case PretokenizerKind::kLlama3:
      return kLlama3Pattern;
    case PretokenizerKind::kQwen2:
      return kQwen2Pattern;
  }
  QS_CHECK_MSG(false, "unknown PretokenizerKind");
}

Result<std::unique_ptr<RegexSplitter>> RegexSplitter::create(std::string_view pattern,
                                                             SplitBehavior behavior) {
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &error_offset, nullptr);
  if (code == nullptr) {
    return invalid_argument("pre-tokenizer regex does not compile at offset " +
                            std::to_string(error_offset) + ": " + pcre2_message(error) +
                            " (pattern: " + std::string(pattern) + ")");
  }
  // JIT is a speed-up only: where it is unavailable, pcre2_match interprets the pattern.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return std::unique_ptr<RegexSplitter>(new RegexSplitter(code, behavior));
}

RegexSplitter::~RegexSplitter() {
  pcre2_code_free(as_code(code_));
}

void RegexSplitter::find_matches(std::string_view text,
                                 std::vector<std::pair<size_t, size_t>>* out) const {
  pcre2_code* code = as_code(code_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  if (md == nullptr) throw std::bad_alloc();  // PCRE2 returns null only when malloc fails
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start < text.size()) {
    // The caller validated the UTF-8, so PCRE2 need not re-check it on every call (which
    // would make the whole split quadratic).
    int rc = pcre2_match(code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // The interpreter keeps its backtracking state on the heap, so it has no such limit.
      rc = pcre2_match(code, subject, text.size(), start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md,
                       nullptr);
    }
    if (rc < 0) break;  // no further match (other errors cannot come from valid UTF-8)
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    size_t begin = ov[0], end = ov[1];
    if (end == begin) {
      // An empty match (possible with user patterns): step over one character.
      const size_t n = utf8_char_len(text, begin);
      start = begin + (n == 0 ? 1 : n);
      continue;
    }
    out->emplace_back(begin, end);
    start = end;
  }
  pcre2_match_data_free(md);
}

void RegexSplitter::split(std::string_view text, std::vector<std::string>* pieces) const {
  // Pieces are made per well-formed run; each ill-formed byte stands alone so that byte-level
  // BPE still encodes it (as its byte token) and decode can reproduce the input bytes.
  std::vector<std::pair<size_t, size_t>> matches;
  size_t run_begin = 0;
  while (run_begin < text.size()) {
    const std::string_view run = text.substr(run_begin);
    const size_t valid = utf8_valid_prefix(run);
    const std::string_view good = run.substr(0, valid);
    matches.clear();
    find_matches(good, &matches);
    size_t pos = 0;       // end of what has been emitted
    std::string pending;  // kMergedWithNext: a match waiting for its following gap
    auto emit = [&](std::string_view s) {
      if (!s.empty()) pieces->emplace_back(s);
    };
    for (auto [begin, end] : matches) {
      const std::string_view gap = good.substr(pos, begin - pos);
      const std::string_view match = good.substr(begin, end - begin);
      switch (behavior_) {
        case SplitBehavior::kIsolated:
          emit(gap);
          emit(match);
          break;
        case SplitBehavior::kRemoved:
          emit(gap);
          break;
        case SplitBehavior::kMergedWithPrevious:
          emit(std::string(gap) + std::string(match));
          break;
        case SplitBehavior::kMergedWithNext:
          emit(pending + std::string(gap));
          pending.assign(match);
          break;
      }
      pos = end;
    }
    const std::string_view tail = good.substr(pos);
    if (behavior_ == SplitBehavior::kMergedWithNext) {
      emit(pending + std::string(tail));
    } else {
      emit(tail);
    }
    run_begin += valid;
    if (run_begin < text.size()) {
      pieces->emplace_back(1, text[run_begin]);  // one ill-formed byte
      ++run_begin;
    }
  }
}

Result<Pretokenizer> Pretokenizer::for_kind(PretokenizerKind kind) {
  Pretokenizer p;
  QS_RETURN_IF_ERROR(p.add_split(pretokenizer_pattern(kind), SplitBehavior::kIsolated));
  return p;
}

Status Pretokenizer::add_split(std::string_view pattern, SplitBehavior behavior) {
  QS_ASSIGN_OR_RETURN(std::unique_ptr<RegexSplitter> splitter,
                      RegexSplitter::create(pattern, behavior));
  steps_.push_back(Step{std::move(splitter)});
  return ok_status();
}

void Pretokenizer::add_prefix_space() {
  steps_.push_back(Step{nullptr});
}

std::vector<std::string> Pretokenizer::run(std::string_view text) const {
  std::vector<std::string> pieces;
  if (text.empty()) return pieces;
  pieces.emplace_back(text);
  std::vector<std::string> next;
  for (const Step& step : steps_) {
    if (step.splitter == nullptr) {
      for (std::string& p : pieces) {
        if (p.empty() || p[0] != ' ') p.insert(p.begin(), ' ');
      }
      continue;
    }
    next.clear();
    for (const std::string& p : pieces) step.splitter->split(p, &next);
    pieces.swap(next);
  }
  return pieces;
}

}  // namespace qs::tok
