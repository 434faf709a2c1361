// tokenizer: loading a chat template from a checkpoint directory and rendering it with the
// context transformers' apply_chat_template passes (see chat_template.h).
#include "tokenizer/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "template/jinja_eval.h"
#include "template/jinja_parser.h"

namespace qs::tok {
namespace {

Result<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("cannot open " + path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A special token in tokenizer_config.json: "text", {"content": "text", ...} or null.
Result<std::optional<std::string>> special_token(const nlohmann::ordered_json& config,
                                                 const char* key, const std::string& file) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return std::optional<std::string>((*it)["content"].get<std::string>());
  }
  return data_loss(file + ": " + key +
                   " is neither a string nor an object with a string \"content\"");
}

// Values are converted, printed and serialised recursively, so absurdly deep input (a request
// can carry any JSON) is refused up front; real messages nest a handful of levels.
constexpr int kMaxInputDepth = 128;

bool nested_deeper_than(const nlohmann::ordered_json& root, int limit) {
  std::vector<std::pair<const nlohmann::ordered_json*, int>> stack{{&root, 0}};
  while (!stack.empty()) {
    auto [node, depth] = stack.back();
    stack.pop_back();
    if (depth > limit) return true;
    if (node->is_structured()) {
      for (const auto& child : *node) stack.emplace_back(&child, depth + 1);
    }
  }
  return false;
}

}  // namespace

Result<ChatTemplate> ChatTemplate::from_model_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path config_path = fs::path(dir) / "tokenizer_config.json";
  const fs::path jinja_path = fs::path(dir) / "chat_template.jinja";
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  if (fs::exists(config_path)) {
    QS_ASSIGN_OR_RETURN(std::string text, read_file(config_path));
    config = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded() || !config.is_object()) {
      return data_loss(config_path.string() + ": not a JSON object");
    }
  }
  QS_ASSIGN_OR_RETURN(std::optional<std::string> bos,
                      special_token(config, "bos_token", config_path.string()));
  QS_ASSIGN_OR_RETURN(std::optional<std::string> eos,
                      special_token(config, "eos_token", config_path.string()));

  std::string source;
  if (fs::exists(jinja_path)) {
    QS_ASSIGN_OR_RETURN(source, read_file(jinja_path));
  } else {
    auto it = config.find("chat_template");
    if (it == config.end() || it->is_null()) {
      return not_found(
          "no chat template in " + dir +
          ": neither chat_template.jinja nor a chat_template in tokenizer_config.json");
    }
    if (it->is_string()) {
      source = it->get<std::string>();
    } else if (it->is_array()) {
      std::string names;
      bool found = false;
      for (const auto& entry : *it) {
        if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") ||
            !entry["name"].is_string() || !entry["template"].is_string()) {
          return data_loss(config_path.string() +
                           ": chat_template list entries must be {name, template} strings");
        }
        names += (names.empty() ? "" : ", ") + entry["name"].get<std::string>();
        if (entry["name"] == "default") {
          source = entry["template"].get<std::string>();
          found = true;
        }
      }
      if (!found) {
        return not_found(config_path.string() +
                         ": chat_template list has no \"default\" entry (has: " + names + ")");
      }
    } else {
      return data_loss(config_path.string() + ": chat_template must be a string or a list");
    }
  }
  Result<ChatTemplate> t = from_string(source, bos, eos);
  if (!t.ok()) return t.status().with_context("chat template of " + dir);
  return t;
}

Result<ChatTemplate> ChatTemplate::from_string(const std::string& source,
                                               std::optional<std::string> bos_token,
                                               std::optional<std::string> eos_token) {
  QS_ASSIGN_OR_RETURN(jinja::Body body, jinja::parse_template(source, jinja::LexOptions{}));
  ChatTemplate t;
  t.source_ = source;
  t.bos_token_ = std::move(bos_token);
  t.eos_token_ = std::move(eos_token);
  t.body_ = std::make_shared<const jinja::Body>(std::move(body));
  return t;
}

Result<ChatTemplate> ChatTemplate::from_file_or_string(const std::string& file_or_source) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file_or_source, ec)) return from_string(file_or_source);
  QS_ASSIGN_OR_RETURN(std::string source, read_file(file_or_source));
  return from_string(source);
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& messages,
                                         bool add_generation_prompt,
                                         const nlohmann::ordered_json& extra_context,
                                         const jinja::RenderLimits& limits) const {
  if (!messages.is_array()) return invalid_argument("chat template: messages must be a JSON array");
  if (!extra_context.is_null() && !extra_context.is_object()) {
    return invalid_argument("chat template: extra context must be a JSON object");
  }
  if (nested_deeper_than(messages, kMaxInputDepth) ||
      nested_deeper_than(extra_context, kMaxInputDepth)) {
    return invalid_argument("chat template: input nested deeper than " +
                            std::to_string(kMaxInputDepth) + " levels");
  }
  jinja::Dict context;
  context.set("messages", jinja::Value::from_json(messages));
  context.set("tools", jinja::Value(jinja::None{}));
  context.set("documents", jinja::Value(jinja::None{}));
  context.set("add_generation_prompt", jinja::Value(add_generation_prompt));
  if (bos_token_) context.set("bos_token", jinja::Value(*bos_token_));
  if (eos_token_) context.set("eos_token", jinja::Value(*eos_token_));
  if (extra_context.is_object()) {
    for (const auto& [key, value] : extra_context.items()) {
      context.set(key, jinja::Value::from_json(value));
    }
  }
  Result<std::string> out = jinja::render(*body_, context, limits);
  if (!out.ok()) return out.status().with_context("chat template");
  return out;
}

}  // namespace qs::tok
