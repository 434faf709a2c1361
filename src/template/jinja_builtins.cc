// template: filters, tests, attribute/item/slice access, dict and list methods and the
// global functions. Semantics follow jinja2 3.1 (filters.py, tests.py, sandbox.py), including
// corner cases (`indent` skips blank lines unless asked; `items` of Undefined is empty;
// range() is capped like the sandbox). String methods live in jinja_strings.cc.
#include "template/jinja_builtins.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>

#include "template/jinja_strings.h"

namespace qs::jinja {
namespace {

// ---- sorting helpers shared by sort, dictsort, unique, min, max ----

Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(to_lower(v.as_string()));
  return v;
}

Result<bool> value_less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.as_double() < b.as_double();
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_list() && b.is_list()) {
    const auto& x = a.as_list();
    const auto& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (x[i].equals(y[i])) continue;
      return value_less(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  return invalid_argument("'<' not supported between instances of '" + a.type_name() + "' and '" +
                          b.type_name() + "'");
}

// Stable sort by key; the first comparison error is reported.
Status sort_values(std::vector<Value>& items, const std::vector<Value>& keys, bool reverse) {
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  Status err;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    Result<bool> r = reverse ? value_less(keys[b], keys[a]) : value_less(keys[a], keys[b]);
    if (!r.ok()) {
      if (err.ok()) err = r.status();
      return false;
    }
    return *r;
  });
  QS_RETURN_IF_ERROR(err);
  std::vector<Value> sorted;
  for (size_t i : order) sorted.push_back(items[i]);
  items = std::move(sorted);
  return ok_status();
}

// jinja2's attribute paths in filters: "a.b.0".
Result<Value> get_path(const Value& v, const std::string& path) {
  Value cur = v;
  size_t start = 0;
  while (start <= path.size()) {
    size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c));
    });
    if (numeric && cur.is_list()) {
      QS_ASSIGN_OR_RETURN(cur, get_item(cur, Value(static_cast<int64_t>(std::stoll(part)))));
    } else {
      QS_ASSIGN_OR_RETURN(cur, get_item(cur, Value(part)));
    }
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

Result<Value> select_or_reject(const std::string& name, const Value& input, const CallArgs& args,
                               bool by_attr, bool select) {
  if (!input.truthy()) return Value::sequence({}, Value::Seq::kGenerator);  // `if value:` first
  QS_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  size_t first = 0;
  std::string attr;
  if (by_attr) {
    if (args.positional.empty() || !args.positional[0].is_string()) {
      return arg_error(name, "expected an attribute name");
    }
    attr = args.positional[0].as_string();
    first = 1;
  }
  std::string test;
  CallArgs test_args;
  if (args.positional.size() > first) {
    if (!args.positional[first].is_string()) return arg_error(name, "expected a test name");
    test = args.positional[first].as_string();
    test_args.positional.assign(args.positional.begin() + static_cast<long>(first) + 1,
                                args.positional.end());
  }
  std::vector<Value> out;
  for (const Value& item : items) {
    Value probe = item;
    if (by_attr) {
      QS_ASSIGN_OR_RETURN(probe, get_path(item, attr));
    }
    bool pass;
    if (test.empty()) {
      pass = probe.truthy();
    } else {
      QS_ASSIGN_OR_RETURN(pass, apply_test(test, probe, test_args));
    }
    if (pass == select) out.push_back(item);
  }
  return Value::sequence(std::move(out), Value::Seq::kGenerator);
}

Result<Value> round_value(const Value& v, int64_t precision, const std::string& method) {
  if (!v.is_number()) return arg_error("round", "expected a number, got " + v.type_name());
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = v.as_double();
  if (method == "ceil") return Value(std::ceil(x * scale) / scale);
  if (method == "floor") return Value(std::floor(x * scale) / scale);
  if (method != "common") return arg_error("round", "method must be common, ceil or floor");
  if (v.is_int() || v.is_bool()) return Value(v.as_int());  // round(int, n) keeps the int
  // Python's round() is round-half-even on the exact binary value.
  double scaled = x * scale;
  double r = std::nearbyint(scaled);
  return Value(r / scale);
}

// Markup's str methods (markupsafe): string arguments are escaped first (join escapes the
// items, format its fields) and string results stay Markup; predicates return plain values.
Result<Value> call_markup_method(const std::string& s, const std::string& name,
                                 const CallArgs& args) {
  auto escaped = [](const Value& v) {
    return v.is_markup() ? v : Value::markup(html_escape(v.str()));
  };
  CallArgs safe_args = args;
  bool escapes_args = name == "strip" || name == "lstrip" || name == "rstrip" ||
                      name == "replace" || name == "format";
  if (escapes_args) {
    for (Value& v : safe_args.positional) {
      if (v.is_string() || name == "format") v = escaped(v);
    }
    for (auto& kv : safe_args.keyword) {
      if (kv.second.is_string() || name == "format") kv.second = escaped(kv.second);
    }
  }
  if (name == "join" && !safe_args.positional.empty()) {
    QS_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(safe_args.positional[0]));
    for (Value& item : items) {
      if (item.is_string()) item = escaped(item);
    }
    safe_args.positional[0] = Value(std::move(items));
  }
  QS_ASSIGN_OR_RETURN(Value out, call_str_method(s, name, safe_args));
  if (out.is_string()) return Value::markup(out.as_string());
  if (out.is_list() && (name == "split" || name == "rsplit" || name == "splitlines")) {
    std::vector<Value> parts;
    for (const Value& p : out.as_list()) parts.push_back(Value::markup(p.as_string()));
    return Value(std::move(parts));
  }
  return out;
}

}  // namespace

Result<std::vector<Value>> iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return std::vector<Value>{};
    case Value::Kind::kList:
      return v.as_list();
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& [k, _] : v.as_dict().items) keys.emplace_back(k);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      for (std::string& c : utf8_chars(v.as_string())) chars.emplace_back(std::move(c));
      return chars;
    }
    default:
      return invalid_argument("'" + v.type_name() + "' object is not iterable");
  }
}

Result<Value> get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind()) {
    case Value::Kind::kUndefined:
      return invalid_argument(obj.undefined_hint());
    case Value::Kind::kDict:
      if (const Value* v = obj.as_dict().find(name)) return *v;
      return Value::undefined("'dict object' has no attribute '" + name + "'");
    case Value::Kind::kNamespace:
      if (const Value* v = obj.as_namespace().attrs.find(name)) return *v;
      return Value::undefined("'Namespace' object has no attribute '" + name + "'");
    default:
      return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + name + "'");
  }
}

Result<Value> get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return invalid_argument(obj.undefined_hint());
  if (key.is_undefined()) return invalid_argument(key.undefined_hint());
  // jinja2's sandboxed getitem turns a failed obj[key] into Undefined.
  if (obj.is_list() && obj.seq() != Value::Seq::kList && obj.seq() != Value::Seq::kTuple) {
    return Value::undefined("'" + obj.type_name() + "' object is not subscriptable");
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t i = key.as_int();
    if (obj.is_list()) {
      const auto& list = obj.as_list();
      int64_t n = static_cast<int64_t>(list.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n)
        return Value::undefined("list object has no element " + std::to_string(key.as_int()));
      return list[static_cast<size_t>(i)];
    }
    std::vector<std::string> chars = utf8_chars(obj.as_string());
    int64_t n = static_cast<int64_t>(chars.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n)
      return Value::undefined("str object has no element " + std::to_string(key.as_int()));
    if (obj.is_markup()) return Value::markup(chars[static_cast<size_t>(i)]);
    return Value(chars[static_cast<size_t>(i)]);
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return Value::undefined("'" + obj.type_name() + " object' has no element " + key.repr());
}

Result<Value> get_slice(const Value& obj, const Value& start, const Value& stop,
                        const Value& step) {
  if (obj.is_undefined()) return invalid_argument(obj.undefined_hint());
  // Unlike obj[key], a failed slice is an error in jinja2, not Undefined.
  if (obj.is_list() && obj.seq() != Value::Seq::kList && obj.seq() != Value::Seq::kTuple) {
    return invalid_argument("'" + obj.type_name() + "' object is not subscriptable");
  }
  auto part = [](const Value& v, const char* what) -> Result<std::optional<int64_t>> {
    if (v.is_undefined() || v.is_none()) return std::optional<int64_t>();
    if (!v.is_int() && !v.is_bool()) {
      return invalid_argument(std::string("slice ") + what + " must be an integer, got " +
                              v.type_name());
    }
    return std::optional<int64_t>(v.as_int());
  };
  QS_ASSIGN_OR_RETURN(std::optional<int64_t> a, part(start, "start"));
  QS_ASSIGN_OR_RETURN(std::optional<int64_t> b, part(stop, "stop"));
  QS_ASSIGN_OR_RETURN(std::optional<int64_t> s, part(step, "step"));
  int64_t st = s.value_or(1);
  if (st == 0) return invalid_argument("slice step cannot be zero");
  std::vector<Value> items;
  if (obj.is_list()) {
    items = obj.as_list();
  } else if (obj.is_string()) {
    for (std::string& c : utf8_chars(obj.as_string())) items.emplace_back(std::move(c));
  } else {
    return invalid_argument("'" + obj.type_name() + "' object is not subscriptable");
  }
  // CPython PySlice_AdjustIndices.
  int64_t n = static_cast<int64_t>(items.size());
  auto clamp = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = st < 0 ? -1 : 0;
    } else if (x >= n) {
      x = st < 0 ? n - 1 : n;
    }
    return x;
  };
  int64_t lo = clamp(a, st < 0 ? n - 1 : 0);
  int64_t hi = clamp(b, st < 0 ? -1 : n);
  std::vector<Value> out;
  for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st)
    out.push_back(items[static_cast<size_t>(i)]);
  if (obj.is_list()) return Value(std::move(out));
  std::string s_out;
  for (const Value& c : out) s_out += c.as_string();
  return obj.is_markup() ? Value::markup(std::move(s_out)) : Value(std::move(s_out));
}

Result<Value> apply_filter(const std::string& name, const Value& input, const CallArgs& args) {
  const std::string what = "filter '" + name + "'";
  auto arg = [&](size_t i, const char* key) { return args.get(i, key); };
  if (name == "default" || name == "d") {
    const Value* def = arg(0, "default_value");
    const Value* boolean = arg(1, "boolean");
    bool use_default = input.is_undefined() || (boolean && boolean->truthy() && !input.truthy());
    if (use_default) return def ? *def : Value(std::string());
    return input;
  }
  if (name == "safe") return Value::markup(input.str());
  if (name == "escape" || name == "e" || name == "forceescape") {
    if (input.is_markup() && name != "forceescape") return input;
    return Value::markup(html_escape(input.str()));
  }
  // These apply a str method to soft_str(value): a Markup input stays Markup (and Markup's
  // methods escape their string arguments).
  auto same_kind = [&](std::string s) {
    return input.is_markup() ? Value::markup(std::move(s)) : Value(std::move(s));
  };
  if (name == "string") {
    QS_RETURN_IF_ERROR(check_printable(input));
    return same_kind(input.str());
  }
  if (name == "trim") {
    const Value* chars = arg(0, "chars");
    Value escaped_chars;
    if (chars && chars->is_string() && input.is_markup() && !chars->is_markup()) {
      escaped_chars = Value(html_escape(chars->as_string()));
      chars = &escaped_chars;
    }
    return same_kind(py_strip(input.str(), chars, true, true));
  }
  if (name == "upper") return same_kind(to_upper(input.str()));
  if (name == "lower") return same_kind(to_lower(input.str()));
  if (name == "capitalize") return same_kind(capitalize(input.str()));
  if (name == "title") return Value(jinja_title(input.str()));
  if (name == "length" || name == "count") {
    if (input.is_undefined()) return Value(0);
    if (input.is_string()) return Value(static_cast<int64_t>(utf8_length(input.as_string())));
    if (input.is_generator()) return arg_error(what, "object of type 'generator' has no len()");
    if (input.is_list()) return Value(static_cast<int64_t>(input.as_list().size()));
    if (input.is_dict()) return Value(static_cast<int64_t>(input.as_dict().items.size()));
    return invalid_argument("object of type '" + input.type_name() + "' has no len()");
  }
  if (name == "tojson") {
    // transformers' signature: tojson(x, ensure_ascii=False, indent=None, separators=None,
    // sort_keys=False).
    if (const Value* ascii = arg(0, "ensure_ascii"); ascii && ascii->truthy()) {
      return unimplemented("unsupported construct: tojson(ensure_ascii=True)");
    }
    QS_ASSIGN_OR_RETURN(int64_t ind, int_arg(arg(1, "indent"), -1, what));
    const Value* seps = arg(2, "separators");
    const Value* sort = arg(3, "sort_keys");
    std::string item_sep = ind >= 0 ? "," : ", ", key_sep = ": ";
    if (seps && !seps->is_none()) {
      if (!seps->is_list() || seps->as_list().size() != 2 || !seps->as_list()[0].is_string() ||
          !seps->as_list()[1].is_string()) {
        return arg_error(what, "separators must be a pair of strings");
      }
      item_sep = seps->as_list()[0].as_string();
      key_sep = seps->as_list()[1].as_string();
    }
    QS_ASSIGN_OR_RETURN(std::string json, to_json(input, static_cast<int>(ind),
                                                  sort && sort->truthy(), item_sep, key_sep));
    return Value(std::move(json));
  }
  if (name == "items") {
    if (input.is_undefined()) return Value::sequence({}, Value::Seq::kGenerator);
    if (!input.is_dict()) return arg_error(what, "can only get item pairs from a mapping");
    std::vector<Value> pairs;
    for (const auto& [k, v] : input.as_dict().items) pairs.push_back(Value::tuple({Value(k), v}));
    return Value::sequence(std::move(pairs), Value::Seq::kGenerator);
  }
  if (name == "join") {
    QS_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
    QS_ASSIGN_OR_RETURN(std::string sep, string_arg(arg(0, "d"), "", what));
    const Value* attribute = arg(1, "attribute");
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += sep;
      Value item = items[i];
      if (attribute && !attribute->is_none()) {
        QS_ASSIGN_OR_RETURN(item, get_path(item, attribute->str()));
      }
      out += item.str();
    }
    return Value(std::move(out));
  }
  if (name == "replace") {
    QS_ASSIGN_OR_RETURN(std::string from, string_arg(arg(0, "old"), "", what));
    QS_ASSIGN_OR_RETURN(std::string to, string_arg(arg(1, "new"), "", what));
    QS_ASSIGN_OR_RETURN(int64_t count, int_arg(arg(2, "count"), -1, what));
    if (!arg(0, "old") || !arg(1, "new")) return arg_error(what, "needs old and new strings");
    return Value(py_replace(input.str(), from, to, count));
  }
  if (name == "last" && input.is_generator()) {
    return arg_error(what, "'generator' object is not reversible");
  }
  if (name == "first" || name == "last") {
    QS_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
    if (items.empty()) return Value::undefined("No " + name + " item, sequence was empty.");
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") {
    QS_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
    return Value(std::move(items));
  }
  if (name == "reverse") {
    if (input.is_string()) {
      std::u32string u = decode(input.as_string());
      std::reverse(u.begin(), u.end());
      return Value(encode(u));
    }
    QS_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
    std::reverse(items.begin(), items.end());
    // reversed() of a sequence is an iterator; a generator cannot be reversed, so jinja2 falls
    // back to building a reversed list.
    if (input.is_generator()) return Value(std::move(items));
    return Value::sequence(std::move(items), Value::Seq::kGenerator);
  }
  if (name == "int" || name == "float") {
    bool as_int = name == "int";
    // int(Undefined) raises UndefinedError, which jinja2 does not turn into the default.
    if (input.is_undefined()) return invalid_argument(input.undefined_hint());
    const Value* def = arg(0, "default");
    Value fallback = def ? *def : (as_int ? Value(0) : Value(0.0));
    if (input.is_number()) {
      if (!as_int || !input.is_float())
        return as_int ? Value(input.as_int()) : Value(input.as_double());
      // Python's int(inf) and int(nan) raise, and a float past int64 is a big int there; here
      // both are errors, since converting them to int64_t is UB.
      const double d = std::trunc(input.as_double());
      if (!(d >= -0x1p63 && d < 0x1p63)) {
        return out_of_range("int() of " + format_float(input.as_double()) +
                            " does not fit in a 64-bit integer");
      }
      return Value(static_cast<int64_t>(d));
    }
    if (input.is_string()) {
      std::string s = py_strip(input.as_string(), nullptr, true, true);
      try {
        size_t used = 0;
        if (as_int) {
          int64_t i = std::stoll(s, &used);
          if (used == s.size()) return Value(i);
        }
        double d = std::stod(s, &used);
        if (used == s.size()) return as_int ? Value(static_cast<int64_t>(std::trunc(d))) : Value(d);
      } catch (const std::exception&) {
      }
    }
    return fallback;
  }
  if (name == "abs") {
    if (!input.is_number())
      return arg_error(what, "bad operand type for abs(): '" + input.type_name() + "'");
    if (input.is_float()) return Value(std::fabs(input.as_double()));
    return Value(input.as_int() < 0 ? -input.as_int() : input.as_int());
  }
  if (name == "round") {
    QS_ASSIGN_OR_RETURN(int64_t precision, int_arg(arg(0, "precision"), 0, what));
    QS_ASSIGN_OR_RETURN(std::string method, string_arg(arg(1, "method"), "common", what));
    return round_value(input, precision, method);
  }
  if (name == "indent") {
    // jinja2 appends "\n" to the value first, which only a string survives.
    if (input.is_undefined()) return invalid_argument(input.undefined_hint());
    if (!input.is_string()) return arg_error(what, "expected a string, got " + input.type_name());
    const Value* width = arg(0, "width");
    std::string pad = "    ";
    if (width && width->is_string()) {
      pad = width->as_string();
    } else if (width) {
      QS_ASSIGN_OR_RETURN(int64_t w, int_arg(width, 4, what));
      pad = std::string(static_cast<size_t>(std::max<int64_t>(0, w)), ' ');
    }
    const Value* first = arg(1, "first");
    const Value* blank = arg(2, "blank");
    return Value(indent(input.str(), pad, first && first->truthy(), blank && blank->truthy()));
  }
  if (name == "sort" || name == "unique" || name == "min" || name == "max") {
    QS_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
    bool sort = name == "sort";
    const Value* reverse = sort ? arg(0, "reverse") : nullptr;
    const Value* cs = arg(sort ? 1 : 0, "case_sensitive");
    const Value* attribute = arg(sort ? 2 : 1, "attribute");
    bool case_sensitive = cs && cs->truthy();
    std::vector<Value> keys;
    for (const Value& item : items) {
      Value k = item;
      if (attribute && !attribute->is_none()) {
        QS_ASSIGN_OR_RETURN(k, get_path(item, attribute->str()));
      }
      keys.push_back(sort_key(k, case_sensitive));
    }
    if (name == "unique") {
      std::vector<Value> out, seen;
      for (size_t i = 0; i < items.size(); ++i) {
        bool dup = false;
        for (const Value& s : seen) dup = dup || s.equals(keys[i]);
        if (dup) continue;
        seen.push_back(keys[i]);
        out.push_back(items[i]);
      }
      return Value::sequence(std::move(out), Value::Seq::kGenerator);
    }
    if (sort) {
      QS_RETURN_IF_ERROR(sort_values(items, keys, reverse && reverse->truthy()));
      return Value(std::move(items));
    }
    if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
    size_t best = 0;
    for (size_t i = 1; i < items.size(); ++i) {
      QS_ASSIGN_OR_RETURN(bool less, value_less(keys[i], keys[best]));
      QS_ASSIGN_OR_RETURN(bool greater, value_less(keys[best], keys[i]));
      if (name == "min" ? less : greater) best = i;
    }
    return items[best];
  }
  if (name == "dictsort") {
    if (!input.is_dict()) return arg_error(what, "expected a mapping, got " + input.type_name());
    const Value* cs = arg(0, "case_sensitive");
    QS_ASSIGN_OR_RETURN(std::string by, string_arg(arg(1, "by"), "key", what));
    const Value* reverse = arg(2, "reverse");
    if (by != "key" && by != "value") return arg_error(what, "by must be 'key' or 'value'");
    std::vector<Value> pairs, keys;
    for (const auto& [k, v] : input.as_dict().items) {
      pairs.push_back(Value::tuple({Value(k), v}));
      keys.push_back(sort_key(by == "key" ? Value(k) : v, cs && cs->truthy()));
    }
    QS_RETURN_IF_ERROR(sort_values(pairs, keys, reverse && reverse->truthy()));
    return Value(std::move(pairs));
  }
  if (name == "sum") {
    QS_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
    const Value* attribute = arg(0, "attribute");
    const Value* start = arg(1, "start");
    Value total = start ? *start : Value(0);
    for (const Value& item : items) {
      Value x = item;
      if (attribute && !attribute->is_none()) {
        QS_ASSIGN_OR_RETURN(x, get_path(item, attribute->str()));
      }
      if (!x.is_number() || !total.is_number()) return arg_error(what, "can only sum numbers");
      total = (x.is_float() || total.is_float()) ? Value(total.as_double() + x.as_double())
                                                 : Value(total.as_int() + x.as_int());
    }
    return total;
  }
  if (name == "map") {
    if (!input.truthy()) return Value::sequence({}, Value::Seq::kGenerator);  // `if value:` first
    QS_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
    std::vector<Value> out;
    if (const Value* attribute = args.get(99, "attribute")) {
      const Value* def = args.get(99, "default");
      for (const Value& item : items) {
        QS_ASSIGN_OR_RETURN(Value v, get_path(item, attribute->str()));
        out.push_back(v.is_undefined() && def ? *def : v);
      }
      return Value::sequence(std::move(out), Value::Seq::kGenerator);
    }
    if (args.positional.empty() || !args.positional[0].is_string()) {
      return arg_error(what, "expected a filter name or attribute=");
    }
    CallArgs rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    rest.keyword = args.keyword;
    for (const Value& item : items) {
      QS_ASSIGN_OR_RETURN(Value v, apply_filter(args.positional[0].as_string(), item, rest));
      out.push_back(std::move(v));
    }
    return Value::sequence(std::move(out), Value::Seq::kGenerator);
  }
  if (name == "select" || name == "reject")
    return select_or_reject(name, input, args, false, name == "select");
  if (name == "selectattr" || name == "rejectattr") {
    return select_or_reject(name, input, args, true, name == "selectattr");
  }
  if (name == "wordcount")
    return Value(static_cast<int64_t>(py_split(input.str(), nullptr, -1).size()));
  return unimplemented("unsupported construct: unknown filter '" + name + "'");
}

Result<bool> apply_test(const std::string& name, const Value& v, const CallArgs& args) {
  const Value* other = args.get(0, "value");
  auto need_other = [&]() -> Status {
    if (!other) return invalid_argument("test '" + name + "' needs an argument");
    return ok_status();
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "mapping") return v.is_dict();
  // Python iter() works on str, list, dict and on jinja2's Undefined.
  if (name == "iterable") return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (name == "sequence") {
    return v.is_string() || (v.is_list() && !v.is_generator()) || v.is_dict() || v.is_undefined();
  }
  if (name == "callable") return v.is_callable();
  if (name == "lower" || name == "upper") {
    // str(value).islower()/.isupper(): needs at least one cased character.
    std::string s = v.str();
    bool has_cased = std::any_of(
        s.begin(), s.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)); });
    return has_cased && (name == "lower" ? to_lower(s) == s : to_upper(s) == s);
  }
  if (name == "even" || name == "odd") {
    if (!v.is_number())
      return invalid_argument("test '" + name + "' needs a number, got " + v.type_name());
    // value % 2 with Python's sign rule; 2.5 is neither even nor odd.
    double r = v.is_float() ? std::fmod(std::fmod(v.as_double(), 2.0) + 2.0, 2.0)
                            : static_cast<double>(((v.as_int() % 2) + 2) % 2);
    return name == "even" ? r == 0.0 : r == 1.0;
  }
  if (name == "divisibleby") {
    QS_RETURN_IF_ERROR(need_other());
    if (!v.is_number() || !other->is_number() || other->as_double() == 0.0) {
      return invalid_argument("test 'divisibleby' needs non-zero numbers");
    }
    return std::fmod(v.as_double(), other->as_double()) == 0.0;
  }
  if (name == "sameas") {
    QS_RETURN_IF_ERROR(need_other());
    if (v.kind() != other->kind()) return false;
    if (v.is_list()) return &v.as_list() == &other->as_list();
    if (v.is_dict()) return &v.as_dict() == &other->as_dict();
    return v.equals(*other);
  }
  if (name == "in") {
    QS_RETURN_IF_ERROR(need_other());
    if (other->is_string())
      return v.is_string() && other->as_string().find(v.as_string()) != std::string::npos;
    QS_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(*other));
    for (const Value& item : items) {
      if (item.equals(v)) return true;
    }
    return false;
  }
  static const std::vector<std::pair<std::vector<std::string>, std::string>> kCompare = {
      {{"equalto", "eq", "=="}, "=="},   {{"ne", "!="}, "!="},
      {{"lt", "lessthan", "<"}, "<"},    {{"le", "<="}, "<="},
      {{"gt", "greaterthan", ">"}, ">"}, {{"ge", ">="}, ">="}};
  for (const auto& [aliases, op] : kCompare) {
    if (std::find(aliases.begin(), aliases.end(), name) == aliases.end()) continue;
    QS_RETURN_IF_ERROR(need_other());
    if (op == "==") return v.equals(*other);
    if (op == "!=") return !v.equals(*other);
    if (op == "<") return value_less(v, *other);
    if (op == ">") return value_less(*other, v);
    if (op == "<=") {
      QS_ASSIGN_OR_RETURN(bool gt, value_less(*other, v));
      return !gt;
    }
    QS_ASSIGN_OR_RETURN(bool lt, value_less(v, *other));
    return !lt;
  }
  return unimplemented("unsupported construct: unknown test '" + name + "'");
}

bool has_method(const Value& obj, const std::string& name) {
  static const std::vector<std::string> kStr = {
      "startswith", "endswith", "strip",      "lstrip",  "rstrip",  "split",   "rsplit", "upper",
      "lower",      "title",    "capitalize", "replace", "format",  "find",    "count",  "join",
      "splitlines", "isdigit",  "isalpha",    "isalnum", "isspace", "isupper", "islower"};
  static const std::vector<std::string> kDict = {"items", "keys", "values", "get"};
  static const std::vector<std::string> kMutating = {"append",  "extend",     "insert", "pop",
                                                     "remove",  "clear",      "update", "sort",
                                                     "reverse", "setdefault", "popitem"};
  auto in = [&](const std::vector<std::string>& set) {
    return std::find(set.begin(), set.end(), name) != set.end();
  };
  if (obj.is_string()) return in(kStr);
  if (obj.is_dict()) return in(kDict) || in(kMutating);
  if (obj.is_list()) return in(kMutating) || name == "index" || name == "count";
  return false;
}

Result<Value> call_method(const Value& obj, const std::string& name, const CallArgs& args) {
  const std::string what = obj.type_name() + "." + name + "()";
  auto arg = [&](size_t i, const char* key) { return args.get(i, key); };
  if (obj.is_list()) {
    if (name == "index" || name == "count") {
      const Value* x = arg(0, "x");
      if (!x) return arg_error(what, "needs an argument");
      int64_t count = 0;
      const auto& list = obj.as_list();
      for (size_t i = 0; i < list.size(); ++i) {
        if (!list[i].equals(*x)) continue;
        if (name == "index") return Value(static_cast<int64_t>(i));
        ++count;
      }
      if (name == "index") return invalid_argument(what + ": value is not in list");
      return Value(count);
    }
    return invalid_argument("unsafe method " + what + ": templates render in an immutable sandbox");
  }
  if (obj.is_dict()) {
    const Dict& d = obj.as_dict();
    if (name == "items" || name == "keys" || name == "values") {
      std::vector<Value> out;
      for (const auto& [k, v] : d.items) {
        if (name == "items") out.push_back(Value::tuple({Value(k), v}));
        if (name == "keys") out.emplace_back(k);
        if (name == "values") out.push_back(v);
      }
      return Value::sequence(std::move(out), name == "items"  ? Value::Seq::kDictItems
                                             : name == "keys" ? Value::Seq::kDictKeys
                                                              : Value::Seq::kDictValues);
    }
    if (name == "get") {
      const Value* key = arg(0, "key");
      if (!key) return arg_error(what, "needs a key");
      const Value* def = arg(1, "default");
      if (key->is_string()) {
        if (const Value* v = d.find(key->as_string())) return *v;
      }
      return def ? *def : Value(None{});
    }
    return invalid_argument("unsafe method " + what + ": templates render in an immutable sandbox");
  }
  if (!obj.is_markup()) return call_str_method(obj.as_string(), name, args);
  return call_markup_method(obj.as_string(), name, args);
}

namespace {

Value function(const std::string& name, Function fn) {
  auto c = std::make_shared<Callable>();
  c->name = name;
  c->fn = std::move(fn);
  return Value(std::shared_ptr<const Callable>(std::move(c)));
}

}  // namespace

Dict make_globals() {
  Dict g;
  g.set("range", function("range", [](const CallArgs& args) -> Result<Value> {
          std::vector<int64_t> p;
          for (const Value& v : args.positional) {
            if (!v.is_int() && !v.is_bool())
              return invalid_argument("range() needs integers, got " + v.type_name());
            p.push_back(v.as_int());
          }
          if (p.empty() || p.size() > 3 || !args.keyword.empty())
            return invalid_argument("range() takes 1 to 3 integers");
          int64_t start = p.size() == 1 ? 0 : p[0], stop = p.size() == 1 ? p[0] : p[1];
          int64_t step = p.size() == 3 ? p[2] : 1;
          if (step == 0) return invalid_argument("range() arg 3 must not be zero");
          std::vector<Value> out;
          for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            // jinja2's sandbox caps range() at MAX_RANGE = 100000 items.
            if (out.size() >= 100000)
              return out_of_range("range() too big (sandbox limit is 100000 items)");
            out.emplace_back(i);
          }
          return Value(std::move(out));
        }));
  g.set("namespace", function("namespace", [](const CallArgs& args) -> Result<Value> {
          auto ns = std::make_shared<Namespace>();
          for (const Value& v : args.positional) {
            if (!v.is_dict())
              return invalid_argument("namespace() takes a mapping or keyword arguments");
            for (const auto& [k, x] : v.as_dict().items) ns->attrs.set(k, x);
          }
          for (const auto& [k, x] : args.keyword) ns->attrs.set(k, x);
          return Value(std::move(ns));
        }));
  g.set("dict", function("dict", [](const CallArgs& args) -> Result<Value> {
          Dict d;
          for (const Value& v : args.positional) {
            if (!v.is_dict())
              return invalid_argument("dict() takes a mapping or keyword arguments");
            for (const auto& [k, x] : v.as_dict().items) d.set(k, x);
          }
          for (const auto& [k, x] : args.keyword) d.set(k, x);
          return Value(std::move(d));
        }));
  g.set("raise_exception", function("raise_exception", [](const CallArgs& args) -> Result<Value> {
          const Value* msg = args.get(0, "message");
          return invalid_argument("raise_exception: " + (msg ? msg->str() : std::string()));
        }));
  g.set("strftime_now", function("strftime_now", [](const CallArgs& args) -> Result<Value> {
          const Value* fmt = args.get(0, "format");
          if (!fmt || !fmt->is_string())
            return invalid_argument("strftime_now() needs a format string");
          std::time_t now = std::time(nullptr);
          std::tm local{};
          localtime_r(&now, &local);
          char buf[256];
          size_t n = std::strftime(buf, sizeof(buf), fmt->as_string().c_str(), &local);
          return Value(std::string(buf, n));
        }));
  return g;
}

}  // namespace qs::jinja
