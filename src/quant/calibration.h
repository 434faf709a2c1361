// quant: calibration samples for the tuned modes (AutoRound, OPT-RTN's imatrix), drawn as
// auto-round draws them (autoround.md §2): documents shuffled with the seed, each tokenized
// with the tokenizer's own BOS and truncated to seqlen, documents shorter than seqlen dropped,
// as are those whose last token fills more than half the sample (padding), and the first
// nsamples kept. The shuffle is ours (std::mt19937_64 Fisher-Yates), so the same seed does
// not pick the same documents as HF datasets' shuffle. Short of nsamples, the unused
// documents are concatenated (auto-round's concat=True: per-document BOS stripped, one BOS
// per chunk) into further samples, and the set says how many came from where.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace qs::quant {

struct CalibrationOptions {
  int64_t nsamples = 128;
  int64_t seqlen = 2048;
  uint64_t seed = 42;
};

struct CalibrationSet {
  std::vector<std::vector<int32_t>> samples;  // each exactly seqlen tokens
  int64_t n_documents = 0;                    // in the dataset
  int64_t n_whole = 0;                        // samples that are one document's prefix
  int64_t n_concatenated = 0;                 // samples cut from concatenated documents
};

// The calibration text shipped with the project (data/calibration/c4.utf8: C4 documents, one
// per line).
std::string default_calibration_dataset();

// Documents of a calibration file: `.jsonl` -> the "text" of each line; anything else -> one
// document per non-empty line (the layout of c4.utf8 and of pile-style dumps).
Result<std::vector<std::string>> read_calibration_documents(const std::string& path);

// A pre-tokenized calibration file: `.jsonl` whose records carry "input_ids", a list of token
// ids (what auto-round takes when handed a list of tensors instead of a dataset name). The
// records are the samples, in file order, without shuffling: the first nsamples that hold at
// least seqlen ids, each cut to seqlen; shorter ones are skipped, as the tool skips them.
// Returns nullopt when `path` is not such a file (its first record has no "input_ids"), so
// text datasets go through sample_calibration. Errors: a record that is not a list of
// integers in [0, vocab_size), or no record long enough ("shorter than one sample").
Result<std::optional<CalibrationSet>> read_token_calibration(const std::string& path,
                                                             const CalibrationOptions& options,
                                                             int64_t vocab_size);

// Draws the samples. Errors: no documents, or not even the concatenated text fills one sample
// ("shorter than one sample"); fewer than nsamples is not an error (auto-round warns), the
// counts say so.
Result<CalibrationSet> sample_calibration(const tok::Tokenizer& tokenizer,
                                          const std::vector<std::string>& documents,
                                          const CalibrationOptions& options,
                                          const std::string& source);

}  // namespace qs::quant
