// fuzz: helpers shared by the libFuzzer targets. One fuzz input often stands for several
// files (vocab.json + merges.txt, a template + its messages): split() cuts it at a separator
// line, and Scratch writes the parts into a directory private to this process, since most
// loaders take paths. Failures here are bugs of the harness, so they abort (QS_CHECK).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace qs::fuzz {

// The line that separates the parts of one input in the seeds and the dictionaries.
inline constexpr std::string_view kSeparator = "\n%%%%\n";

// `data` cut into at most `n` parts at kSeparator; the last part takes the rest, and missing
// parts are empty.
std::vector<std::string> split(const uint8_t* data, size_t size, size_t n);

// A directory under $TMPDIR unique to this process; reset() empties it before each run so
// nothing from the previous input is read.
class Scratch {
 public:
  Scratch();
  const std::string& dir() const { return dir_; }
  void reset() const;
  // Writes dir()/name and returns its path.
  std::string write(const std::string& name, std::string_view bytes) const;

 private:
  std::string dir_;
};

// Encodes `text`, decodes the result both ways, and decodes ids taken from `id_bytes` (each
// two bytes one id, wrapped into the vocabulary), checking only what must hold for any input:
// ids the tokenizer returns are inside its vocabulary.
void exercise_tokenizer(const tok::Tokenizer& t, std::string_view text, std::string_view id_bytes);

// One tokenizer directory per input: the first parts become `files` (in order), the next the
// text to encode and the last the ids to decode; then load_tokenizer() and, when it accepts
// the directory, exercise_tokenizer().
int run_tokenizer_dir(const uint8_t* data, size_t size, const std::vector<std::string>& files);

}  // namespace qs::fuzz
