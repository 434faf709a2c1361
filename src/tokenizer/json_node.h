// tokenizer: what the tokenizer.json readers (BPE, SentencePiece-as-JSON, Unigram) share
// about its typed nodes ({"type": "BPE", ...}, {"type": "Metaspace", ...}).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace qs::tok {

// The node's "type"; "" when it is not an object or has no string "type".
inline std::string node_type(const nlohmann::json& j) {
  if (!j.is_object()) return "";
  const auto it = j.find("type");
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace qs::tok
