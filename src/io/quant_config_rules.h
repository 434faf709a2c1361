// io: the internals of quantization detection (quant_config.h), shared by the files that parse
// one method each: the per-layer Rule that scheme_for() walks, typed JSON getters whose errors
// name the file and key, and the validation every produced scheme passes. Not for use outside
// src/io/quant_config*.cc.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "formats/quant_scheme.h"
#include "io/quant_config.h"

namespace qs::io {

// One per-layer rule: when `match` accepts the module name, the module gets `scheme`.
// Rules are kept in priority order and the first that matches decides.
struct QuantConfig::Rule {
  enum class Match : uint8_t {
    kExact,       // module == text
    kSearch,      // regex found anywhere in the name (Python re.search: AutoRound extra_config)
    kMatchStart,  // regex matching at the start (Python re.match: GPTQModel `dynamic`,
                  // compressed-tensors "re:" targets and ignores)
    kSubstring,   // text occurs in the name (AWQ modules_to_not_convert, fp8 ignored_layers)
    kBlock,       // name starts with text + "." (AutoRound block_name_to_quantize)
    kNotListed,   // no entry of `names` occurs in the name as whole components (GPTQ
                  // modules_in_block_to_quantize: what is not listed stays dense)
    kRouter,      // last name component is "gate": a MoE router, which no producer quantizes
                  // and vLLM builds unquantized
    kAny,
  };
  Match match = Match::kAny;
  std::string text;
  std::regex regex;
  std::vector<std::string> names;
  formats::QuantScheme scheme;

  bool matches(const std::string& module) const;
};

namespace detail {

using formats::Layout;
using formats::QuantScheme;
using json = nlohmann::json;
using Rule = QuantConfig::Rule;
using Match = QuantConfig::Rule::Match;

// Where a key lives, for messages: "config.json: quantization_config.extra_config[...].bits".
struct Where {
  std::string source;  // "config.json", "quantize_config.json", ...
  std::string path;    // "quantization_config", "quantization_config.config_groups.group_0"

  Where at(const std::string& sub) const { return {source, path + sub}; }
  std::string name(const std::string& key) const {
    if (key.empty() || path.empty()) return source + ": " + path + key;
    return source + ": " + path + "." + key;
  }
  Status invalid(const std::string& key, const json& value, const std::string& why) const {
    return invalid_argument(name(key) + " = " + value.dump() + ": " + why);
  }
  Status unsupported(const std::string& key, const json& value, const std::string& why) const {
    return unimplemented(name(key) + " = " + value.dump() + ": " + why);
  }
  Status missing(const std::string& key, const std::string& why) const {
    return invalid_argument(name(key) + " is missing: " + why);
  }
};

// What parsing one method produces; parse_quant_config moves it into the QuantConfig.
struct Parsed {
  std::string method, format;
  QuantScheme dflt;
  std::vector<std::shared_ptr<const Rule>> rules;
  std::vector<std::string> notes;

  void add(Match match, std::string text, const QuantScheme& scheme, std::regex regex = {}) {
    auto rule = std::make_shared<Rule>();
    rule->match = match;
    rule->text = std::move(text);
    rule->regex = std::move(regex);
    rule->scheme = scheme;
    rules.push_back(std::move(rule));
  }
};

std::string lower(std::string s);
bool contains(const std::string& s, const std::string& part);
// The value of `key` in `obj`; nullptr when absent or null.
const json* find(const json& obj, const std::string& key);
// The first of `keys` present (AWQ spells bits as `bits` or `w_bit`), or nullptr.
const json* find_any(const json& obj, std::initializer_list<const char*> keys, std::string* key);
// Typed getters: `dflt` when the key is absent or null, an error naming it when mistyped.
Result<int64_t> as_int(const json& v, const Where& w, const std::string& key);
Result<int64_t> get_int(const json& obj, const Where& w, const std::string& key, int64_t dflt);
Result<int> as_bits(const json& v, const Where& w, const std::string& key);
Result<int> get_bits(const json& obj, const Where& w, const std::string& key, int dflt);
Result<bool> get_bool(const json& obj, const Where& w, const std::string& key, bool dflt);
Result<std::string> get_string(const json& obj, const Where& w, const std::string& key,
                               const std::string& dflt);
// A list of strings; a single string is a list of one.
Result<std::vector<std::string>> get_strings(const json& obj, const Where& w,
                                             const std::string& key);
Result<std::regex> compile(const std::string& pattern, const Where& w, const std::string& key);
// Whether the formats table can hold `s`; errors name `bits_key` / `group_key` under `w`.
Status validate(const QuantScheme& s, const Where& w, const std::string& bits_key,
                const std::string& group_key);

// One method each: fill `p` (format, default scheme, rules in priority order, notes).
Status parse_autoround(const json& qc, const Where& w, Parsed* p);  // quant_config_int.cc
Status parse_gptq(const json& qc, const Where& w, Parsed* p);       // quant_config_int.cc
Status parse_awq(const json& qc, const Where& w, Parsed* p);        // quant_config_int.cc
Status parse_compressed_tensors(const json& qc, const Where& w,
                                Parsed* p);                   // quant_config_ct_fp8.cc
Status parse_fp8(const json& qc, const Where& w, Parsed* p);  // quant_config_ct_fp8.cc

}  // namespace detail
}  // namespace qs::io
