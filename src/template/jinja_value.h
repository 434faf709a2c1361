// template: the values a chat template computes with, modelled on the Python objects
// jinja2 hands around (str, int, float, bool, None, list, dict, Undefined, namespace,
// callables). Printing, truthiness, equality and JSON follow Python so that a rendered
// prompt matches transformers' apply_chat_template byte for byte.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace qs::jinja {

class Value;

// Python dict: insertion-ordered, string keys (JSON objects and template literals).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;

  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(std::string key, Value value);
};

// Arguments of a call: positional, then keyword, as the template wrote them.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // The argument named `name` or else the `index`-th positional one; nullptr if neither.
  const Value* get(size_t index, std::string_view name) const;
};

using Function = std::function<Result<Value>(const CallArgs&)>;

// jinja2's default Undefined: prints empty, is falsy and iterates as empty, but any
// attribute, item, arithmetic or call on it is an error. `hint` names what was missing.
struct Undefined {
  std::string hint;
};
struct None {};
struct Callable {
  std::string name;
  Function fn;
};
// namespace(...) objects: the one mutable value, shared by reference like Python's.
struct Namespace {
  Dict attrs;
};

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kCallable
  };

  Value() : v_(Undefined{}) {}
  Value(Undefined u) : v_(std::move(u)) {}       // NOLINT: implicit by design, as Python values
  Value(None) : v_(None{}) {}                    // NOLINT
  Value(bool b) : v_(b) {}                       // NOLINT
  Value(int64_t i) : v_(i) {}                    // NOLINT
  Value(int i) : v_(static_cast<int64_t>(i)) {}  // NOLINT
  Value(double d) : v_(d) {}                     // NOLINT
  Value(std::string s) : v_(std::move(s)) {}     // NOLINT
  Value(const char* s) : v_(std::string(s)) {}   // NOLINT
  Value(std::vector<Value> list)                 // NOLINT
      : v_(std::make_shared<const ListBox>(ListBox{std::move(list), Seq::kList})) {}
  Value(Dict dict) : v_(std::make_shared<const Dict>(std::move(dict))) {}  // NOLINT
  Value(std::shared_ptr<Namespace> ns) : v_(std::move(ns)) {}              // NOLINT
  Value(std::shared_ptr<const Callable> fn) : v_(std::move(fn)) {}         // NOLINT

  static Value undefined(std::string hint) { return Value(Undefined{std::move(hint)}); }
  // markupsafe.Markup, what `|safe` returns: a str whose `+` HTML-escapes a plain str
  // operand. transformers never autoescapes, so this is the only place escaping shows.
  static Value markup(std::string s) {
    Value v(std::move(s));
    v.markup_ = true;
    return v;
  }
  // Sequences that are lists here but other Python types in jinja2:
  //  kTuple      repr "(1, 2)", never equal to a list;
  //  kGenerator  what items/map/select*/reject*/unique/reverse return: always truthy, no
  //              len(), not subscriptable, and printing one shows an address, so it is an
  //              error here (templates apply |list or iterate);
  //  kDictItems/kDictKeys/kDictValues  d.items() etc.: repr "dict_items([...])".
  enum class Seq { kList, kTuple, kGenerator, kDictItems, kDictKeys, kDictValues };
  static Value sequence(std::vector<Value> items, Seq seq) {
    Value v;
    v.v_ = std::make_shared<const ListBox>(ListBox{std::move(items), seq});
    return v;
  }
  static Value tuple(std::vector<Value> items) { return sequence(std::move(items), Seq::kTuple); }
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return static_cast<Kind>(v_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  // Python's numbers.Number: bool counts, as in jinja2's `number` test and arithmetic.
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_markup() const { return is_string() && markup_; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_namespace() const { return kind() == Kind::kNamespace; }
  bool is_callable() const { return kind() == Kind::kCallable; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return is_bool() ? (as_bool() ? 1 : 0) : std::get<int64_t>(v_); }
  double as_double() const {
    return is_float() ? std::get<double>(v_) : static_cast<double>(as_int());
  }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const std::vector<Value>& as_list() const { return std::get<kListIndex>(v_)->items; }
  Seq seq() const { return std::get<kListIndex>(v_)->seq; }
  bool is_tuple() const { return is_list() && seq() == Seq::kTuple; }
  bool is_generator() const { return is_list() && seq() == Seq::kGenerator; }
  const Dict& as_dict() const { return *std::get<kListIndex + 1>(v_); }
  Namespace& as_namespace() const { return *std::get<kListIndex + 2>(v_); }
  const Callable& as_callable() const { return *std::get<kListIndex + 3>(v_); }
  const std::string& undefined_hint() const { return std::get<Undefined>(v_).hint; }

  // Python bool(x).
  bool truthy() const;
  // Python str(x) as jinja2 prints it; Undefined prints as "".
  std::string str() const;
  // Python repr(x), used inside str() of containers.
  std::string repr() const;
  // Python ==, with 1 == 1.0 == True.
  bool equals(const Value& other) const;
  // Python type name for error messages ("str", "int", "dict", "undefined" ...).
  std::string type_name() const;

 private:
  // The variant's alternatives are in Kind order, so index() is the kind.
  static constexpr size_t kListIndex = static_cast<size_t>(Kind::kList);
  struct ListBox {
    std::vector<Value> items;
    Seq seq;
  };
  std::variant<Undefined, None, bool, int64_t, double, std::string, std::shared_ptr<const ListBox>,
               std::shared_ptr<const Dict>, std::shared_ptr<Namespace>,
               std::shared_ptr<const Callable>>
      v_;
  bool markup_ = false;
};

// jinja2 prints a generator as "<generator object ... at 0x...>", an address: we refuse
// rather than print something else (a template meant `| list`). Ok for every other value.
Status check_printable(const Value& v);

// markupsafe.escape() of a plain string: & < > ' " become entities.
std::string html_escape(std::string_view s);

// json.dumps(v, ensure_ascii=False, indent=indent, separators=..., sort_keys=sort_keys), as
// transformers' own `tojson` filter calls it. indent < 0 means None (one line).
Result<std::string> to_json(const Value& v, int indent, bool sort_keys, std::string_view item_sep,
                            std::string_view key_sep);

// Python repr(float): the shortest digits that round-trip, "1.0", "1e-05", "inf".
std::string format_float(double d);

// UTF-8 helpers: Python strings index by code point.
std::vector<std::string> utf8_chars(std::string_view s);
size_t utf8_length(std::string_view s);

}  // namespace qs::jinja
