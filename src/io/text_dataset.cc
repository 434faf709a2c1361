// io: reading .txt / .jsonl datasets (see text_dataset.h).
#include "io/text_dataset.h"

#include <sstream>

#include <nlohmann/json.hpp>

#include "core/mmap_file.h"

namespace qs::io {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

Result<std::vector<std::string>> read_text_documents(const std::string& path) {
  QS_ASSIGN_OR_RETURN(std::string data, read_file(path));
  std::vector<std::string> docs;
  if (ends_with(path, ".jsonl")) {
    std::istringstream in(data);
    std::string line;
    int64_t line_no = 0;
    while (std::getline(in, line)) {
      ++line_no;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      nlohmann::json row = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
      const std::string where = path + ":" + std::to_string(line_no);
      if (row.is_discarded()) return invalid_argument(where + ": not valid JSON");
      if (!row.is_object() || !row.contains("text") || !row["text"].is_string()) {
        return invalid_argument(where + ": expected an object with a string field \"text\"");
      }
      docs.push_back(row["text"].get<std::string>());
    }
  } else {
    docs.push_back(std::move(data));
  }
  bool any = false;
  for (const std::string& d : docs) any = any || !d.empty();
  if (!any) return invalid_argument(path + ": dataset holds no text");
  return docs;
}

std::string join_documents(const std::vector<std::string>& docs, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < docs.size(); ++i) {
    if (i > 0) out += separator;
    out += docs[i];
  }
  return out;
}

}  // namespace qs::io
