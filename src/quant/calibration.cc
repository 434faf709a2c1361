// quant: calibration sampling (see calibration.h).
#include "quant/calibration.h"

#include <algorithm>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/data_dir.h"
#include "core/mmap_file.h"
#include "io/text_dataset.h"

namespace qs::quant {

std::string default_calibration_dataset() {
  return data_dir(QS_DATA_DIR) + "/calibration/c4.utf8";
}

Result<std::vector<std::string>> read_calibration_documents(const std::string& path) {
  QS_ASSIGN_OR_RETURN(std::vector<std::string> docs, io::read_text_documents(path));
  if (path.ends_with(".jsonl")) return docs;
  std::vector<std::string> lines;
  std::istringstream in(docs[0]);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") != std::string::npos) lines.push_back(line);
  }
  return lines;
}

Result<std::optional<CalibrationSet>> read_token_calibration(const std::string& path,
                                                             const CalibrationOptions& o,
                                                             int64_t vocab_size) {
  if (!path.ends_with(".jsonl")) return std::optional<CalibrationSet>();
  if (o.nsamples < 1 || o.seqlen < 2) {
    return invalid_argument("calibration needs nsamples >= 1 and seqlen >= 2");
  }
  QS_ASSIGN_OR_RETURN(std::string data, read_file(path));
  CalibrationSet set;
  std::istringstream in(data);
  int64_t line_no = 0, longest = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const bool has_ids = row.is_object() && row.contains("input_ids");
    // The first record decides the kind of file; a text file is read_calibration_documents'.
    if (set.n_documents == 0 && !has_ids) return std::optional<CalibrationSet>();
    const std::string where = path + ":" + std::to_string(line_no);
    if (!has_ids || !row["input_ids"].is_array()) {
      return invalid_argument(where + ": expected an object with a list field \"input_ids\"");
    }
    ++set.n_documents;
    const nlohmann::json& ids = row["input_ids"];
    longest = std::max(longest, static_cast<int64_t>(ids.size()));
    if (static_cast<int64_t>(ids.size()) < o.seqlen ||
        static_cast<int64_t>(set.samples.size()) >= o.nsamples) {
      continue;
    }
    std::vector<int32_t> sample;
    sample.reserve(static_cast<size_t>(o.seqlen));
    for (int64_t i = 0; i < o.seqlen; ++i) {
      const nlohmann::json& id = ids[static_cast<size_t>(i)];
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_size) {
        return invalid_argument(where + ": input_ids[" + std::to_string(i) +
                                "] is not a token id below the vocabulary size " +
                                std::to_string(vocab_size));
      }
      sample.push_back(static_cast<int32_t>(id.get<int64_t>()));
    }
    set.samples.push_back(std::move(sample));
  }
  if (set.n_documents == 0) return invalid_argument(path + ": dataset holds no text (no records)");
  if (set.samples.empty()) {
    return invalid_argument(path + ": every record is shorter than one calibration sample of " +
                            std::to_string(o.seqlen) + " tokens (the longest has " +
                            std::to_string(longest) + ")");
  }
  set.n_whole = static_cast<int64_t>(set.samples.size());
  return std::optional<CalibrationSet>(std::move(set));
}

Result<CalibrationSet> sample_calibration(const tok::Tokenizer& tokenizer,
                                          const std::vector<std::string>& documents,
                                          const CalibrationOptions& o, const std::string& source) {
  if (o.nsamples < 1 || o.seqlen < 2) {
    return invalid_argument("calibration needs nsamples >= 1 and seqlen >= 2");
  }
  if (documents.empty()) return invalid_argument(source + ": no calibration documents");
  CalibrationSet set;
  set.n_documents = static_cast<int64_t>(documents.size());
  std::vector<size_t> order(documents.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::mt19937_64 rng(o.seed);
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng() % i]);

  const size_t seqlen = static_cast<size_t>(o.seqlen);
  std::vector<std::vector<int32_t>> unused;  // tokenized documents not taken whole
  size_t next = 0;
  for (; next < order.size() && set.samples.size() < static_cast<size_t>(o.nsamples); ++next) {
    std::vector<int32_t> ids = tokenizer.encode(documents[order[next]], true);
    if (ids.size() >= seqlen) {
      ids.resize(seqlen);
      // A sample whose last token fills more than half of it is padding, not text.
      if (std::count(ids.begin(), ids.end(), ids.back()) <= o.seqlen / 2) {
        set.samples.push_back(std::move(ids));
        continue;
      }
    }
    unused.push_back(std::move(ids));
  }
  set.n_whole = static_cast<int64_t>(set.samples.size());
  if (set.samples.size() < static_cast<size_t>(o.nsamples)) {
    // concat=True: one stream of the remaining documents without their own BOS, cut into
    // chunks that each get one BOS (when the tokenizer adds one).
    for (; next < order.size(); ++next)
      unused.push_back(tokenizer.encode(documents[order[next]], true));
    const int32_t bos = tokenizer.encode("", true).empty() ? -1 : tokenizer.bos_id();
    std::vector<int32_t> stream;
    for (const auto& ids : unused) {
      const size_t skip = !ids.empty() && ids[0] == bos ? 1 : 0;
      stream.insert(stream.end(), ids.begin() + skip, ids.end());
    }
    const size_t body = bos >= 0 ? seqlen - 1 : seqlen;
    for (size_t pos = 0;
         pos + body <= stream.size() && set.samples.size() < static_cast<size_t>(o.nsamples);
         pos += body) {
      std::vector<int32_t> chunk;
      if (bos >= 0) chunk.push_back(bos);
      chunk.insert(chunk.end(), stream.begin() + pos, stream.begin() + pos + body);
      set.samples.push_back(std::move(chunk));
      ++set.n_concatenated;
    }
    if (set.samples.empty()) {
      return invalid_argument(source + ": the text is shorter than one calibration sample of " +
                              std::to_string(o.seqlen) + " tokens (" +
                              std::to_string(stream.size()) + " tokens in all)");
    }
  }
  return set;
}

}  // namespace qs::quant
