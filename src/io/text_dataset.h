// io: plain-text datasets for evaluation and calibration. A `.jsonl` file is one JSON object
// per line whose "text" field is a document (the layout of HF dataset dumps and of auto-round's
// local calibration files); anything else is read as UTF-8 text, one document. Errors name the
// file and, for JSONL, the line.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace qs::io {

// The documents of `path`, in file order. Blank JSONL lines are skipped; a line that is not
// an object with a string "text" is an error. An empty file, or one whose documents are all
// empty, is an error ("no text"), since every user of a dataset needs at least some.
Result<std::vector<std::string>> read_text_documents(const std::string& path);

// The documents joined with `separator` (GPTQ's and auto-round's perplexity evaluation joins
// the WikiText rows with "\n\n").
std::string join_documents(const std::vector<std::string>& docs, const std::string& separator);

}  // namespace qs::io
