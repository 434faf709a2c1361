// tokenizer/jinja: filters, tests, str/dict methods and global functions. Semantics follow
// jinja2 3.1 (filters.py, tests.py, sandbox.py) and CPython's str methods, including their
// corner cases (str.split() without a separator drops empty fields; `indent` skips blank
// lines unless asked; `title` capitalises after - ( { [ < and whitespace).
#include "tokenizer/jinja_builtins.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ctime>

namespace qs::jinja {
namespace {

// ---- Unicode helpers: Python strings are sequences of code points. ----

std::u32string decode(std::string_view s) {
  std::u32string out;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 1;
    if (i + n > s.size()) n = 1;
    char32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
    for (size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
    out += cp;
    i += n;
  }
  return out;
}

std::string encode(std::u32string_view s) {
  std::string out;
  for (char32_t cp : s) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }
  return out;
}

// str.isspace() for a code point.
bool py_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
         c == 0x205f || c == 0x3000;
}

// Case mapping covers ASCII only; other scripts pass through unchanged (documented limit).
char32_t upper_cp(char32_t c) {
  return c >= 'a' && c <= 'z' ? c - 32 : c;
}
char32_t lower_cp(char32_t c) {
  return c >= 'A' && c <= 'Z' ? c + 32 : c;
}
bool alpha_cp(char32_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

std::string to_upper(const std::string& s) {
  std::string out = s;
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}
std::string to_lower(const std::string& s) {
  std::string out = s;
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// str.strip/lstrip/rstrip with an optional set of characters (None = whitespace).
std::string py_strip(const std::string& s, const Value* chars, bool left, bool right) {
  std::u32string u = decode(s);
  std::u32string set;
  bool by_set = chars && chars->is_string();
  if (by_set) set = decode(chars->as_string());
  auto strip_it = [&](char32_t c) {
    return by_set ? set.find(c) != std::u32string::npos : py_space(c);
  };
  size_t b = 0, e = u.size();
  if (left) {
    while (b < e && strip_it(u[b])) ++b;
  }
  if (right) {
    while (e > b && strip_it(u[e - 1])) --e;
  }
  return encode(std::u32string_view(u).substr(b, e - b));
}

std::vector<Value> py_split(const std::string& s, const Value* sep, int64_t maxsplit) {
  std::vector<Value> out;
  if (sep && sep->is_string()) {
    const std::string& d = sep->as_string();
    size_t start = 0;
    while (maxsplit != 0) {
      size_t at = s.find(d, start);
      if (at == std::string::npos) break;
      out.emplace_back(s.substr(start, at - start));
      start = at + d.size();
      --maxsplit;
    }
    out.emplace_back(s.substr(start));
    return out;
  }
  std::u32string u = decode(s);
  size_t i = 0;
  while (i < u.size()) {
    while (i < u.size() && py_space(u[i])) ++i;
    if (i >= u.size()) break;
    if (maxsplit == 0) {
      size_t e = u.size();
      while (e > i && py_space(u[e - 1])) --e;
      out.emplace_back(encode(std::u32string_view(u).substr(i, e - i)));
      break;
    }
    size_t j = i;
    while (j < u.size() && !py_space(u[j])) ++j;
    out.emplace_back(encode(std::u32string_view(u).substr(i, j - i)));
    i = j;
    --maxsplit;
  }
  return out;
}

std::string py_replace(const std::string& s, const std::string& from, const std::string& to,
                       int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` between every character
    std::u32string u = decode(s);
    for (size_t i = 0; i <= u.size(); ++i) {
      if (count < 0 || static_cast<int64_t>(i) < count) out += to;
      if (i < u.size()) out += encode(std::u32string_view(&u[i], 1));
    }
    return out;
  }
  size_t start = 0;
  while (count != 0) {
    size_t at = s.find(from, start);
    if (at == std::string::npos) break;
    out += s.substr(start, at - start) + to;
    start = at + from.size();
    --count;
  }
  return out + s.substr(start);
}

// str.splitlines(): Python's line boundaries, separators dropped.
std::vector<std::u32string> py_splitlines(const std::u32string& u) {
  std::vector<std::u32string> lines;
  std::u32string cur;
  for (size_t i = 0; i < u.size(); ++i) {
    char32_t c = u[i];
    bool boundary = c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || c == 0x1c || c == 0x1d ||
                    c == 0x1e || c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!boundary) {
      cur += c;
      continue;
    }
    if (c == '\r' && i + 1 < u.size() && u[i + 1] == '\n') ++i;
    lines.push_back(std::move(cur));
    cur.clear();
  }
  if (!cur.empty()) lines.push_back(std::move(cur));
  return lines;
}

std::string py_title_str(const std::string& s) {  // Python str.title()
  std::u32string u = decode(s);
  bool prev_cased = false;
  for (char32_t& c : u) {
    c = prev_cased ? lower_cp(c) : upper_cp(c);
    prev_cased = alpha_cp(c);
  }
  return encode(u);
}

std::string capitalize(const std::string& s) {
  std::u32string u = decode(s);
  for (size_t i = 0; i < u.size(); ++i) u[i] = i == 0 ? upper_cp(u[i]) : lower_cp(u[i]);
  return encode(u);
}

Status arg_error(const std::string& what, const std::string& msg) {
  return invalid_argument(what + ": " + msg);
}

Result<int64_t> int_arg(const Value* v, int64_t def, const std::string& what) {
  if (!v || v->is_none()) return def;
  if (!v->is_int() && !v->is_bool())
    return arg_error(what, "expected an integer, got " + v->type_name());
  return v->as_int();
}

Result<std::string> string_arg(const Value* v, const std::string& def, const std::string& what) {
  if (!v) return def;
  if (!v->is_string()) return arg_error(what, "expected a string, got " + v->type_name());
  return v->as_string();
}

// ---- str.format: "{}", "{0}", "{name}", "{{" and "}}"; format specs are not supported. ----
Result<Value> py_format(const std::string& fmt, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') ++i;
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    size_t close = fmt.find('}', i);
    if (close == std::string::npos) return invalid_argument("str.format: single '{' encountered");
    std::string field = fmt.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!.[") != std::string::npos) {
      return unimplemented("unsupported construct: str.format field '{" + field + "}'");
    }
    const Value* v = nullptr;
    if (field.empty()) {
      v = auto_index < args.positional.size() ? &args.positional[auto_index++] : nullptr;
    } else if (std::all_of(field.begin(), field.end(),
                           [](char d) { return std::isdigit(static_cast<unsigned char>(d)); })) {
      size_t idx = std::stoul(field);
      v = idx < args.positional.size() ? &args.positional[idx] : nullptr;
    } else {
      for (const auto& [k, kv] : args.keyword) {
        if (k == field) v = &kv;
      }
    }
    if (!v) return invalid_argument("str.format: no argument for field '{" + field + "}'");
    out += v->str();
    i = close;
  }
  return Value(std::move(out));
}

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
  return Value(std::move(out));
}

// jinja2 do_indent: adds `width` before every line but the first (and blank lines only
// when `blank`), working on s + "\n" so a trailing newline survives.
std::string indent(const std::string& s, const std::string& pad, bool first, bool blank) {
  std::vector<std::u32string> lines = py_splitlines(decode(s + "\n"));
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string line = encode(lines[i]);
    if (i > 0) {
      out += "\n";
      if (blank || !line.empty()) out += pad;
    }
    out += line;
  }
  if (first) out = pad + out;
  return out;
}

// jinja2 do_title: upper-case the first character of each word, lower-case the rest, where
// words are split at runs of whitespace and - ( { [ <.
std::string jinja_title(const std::string& s) {
  std::u32string u = decode(s);
  bool at_start = true;
  for (char32_t& c : u) {
    bool sep = py_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (sep) {
      at_start = true;
      continue;
    }
    c = at_start ? upper_cp(c) : lower_cp(c);
    at_start = false;
  }
  return encode(u);
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
    return Value(chars[static_cast<size_t>(i)]);
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return Value::undefined("'" + obj.type_name() + " object' has no element " + key.repr());
}

Result<Value> get_slice(const Value& obj, const Value& start, const Value& stop,
                        const Value& step) {
  if (obj.is_undefined()) return invalid_argument(obj.undefined_hint());
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
  return Value(std::move(s_out));
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
  if (name == "safe" || name == "string") {
    if (input.is_undefined()) return Value(std::string());
    return Value(input.str());
  }
  if (name == "trim") {
    return Value(py_strip(input.str(), arg(0, "chars"), true, true));
  }
  if (name == "upper") return Value(to_upper(input.str()));
  if (name == "lower") return Value(to_lower(input.str()));
  if (name == "capitalize") return Value(capitalize(input.str()));
  if (name == "title") return Value(jinja_title(input.str()));
  if (name == "length" || name == "count") {
    if (input.is_undefined()) return Value(0);
    if (input.is_string()) return Value(static_cast<int64_t>(utf8_length(input.as_string())));
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
    if (input.is_undefined()) return Value(std::vector<Value>{});
    if (!input.is_dict()) return arg_error(what, "can only get item pairs from a mapping");
    std::vector<Value> pairs;
    for (const auto& [k, v] : input.as_dict().items) pairs.push_back(Value::tuple({Value(k), v}));
    return Value(std::move(pairs));
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
    return Value(std::move(items));
  }
  if (name == "int" || name == "float") {
    bool as_int = name == "int";
    const Value* def = arg(0, "default");
    Value fallback = def ? *def : (as_int ? Value(0) : Value(0.0));
    if (input.is_number())
      return as_int ? Value(static_cast<int64_t>(std::trunc(input.as_double())))
                    : Value(input.as_double());
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
      return Value(std::move(out));
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
    QS_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
    std::vector<Value> out;
    if (const Value* attribute = args.get(99, "attribute")) {
      const Value* def = args.get(99, "default");
      for (const Value& item : items) {
        QS_ASSIGN_OR_RETURN(Value v, get_path(item, attribute->str()));
        out.push_back(v.is_undefined() && def ? *def : v);
      }
      return Value(std::move(out));
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
    return Value(std::move(out));
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
  if (name == "sequence") return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (name == "callable") return v.is_callable();
  if (name == "lower" || name == "upper") {
    std::string s = v.str();
    return name == "lower" ? to_lower(s) == s : to_upper(s) == s;
  }
  if (name == "even" || name == "odd") {
    if (!v.is_number())
      return invalid_argument("test '" + name + "' needs a number, got " + v.type_name());
    QS_ASSIGN_OR_RETURN(Value rem, apply_filter("int", v, {}));
    int64_t r = rem.as_int() % 2;
    return name == "even" ? r == 0 : r != 0;
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
      return Value(std::move(out));
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
  const std::string& s = obj.as_string();
  if (name == "startswith" || name == "endswith") {
    const Value* p = arg(0, "prefix");
    if (!p) return arg_error(what, "needs an argument");
    std::vector<Value> options = p->is_list() ? p->as_list() : std::vector<Value>{*p};
    for (const Value& o : options) {
      if (!o.is_string())
        return arg_error(what, "argument must be str or a tuple of str, not " + o.type_name());
      const std::string& x = o.as_string();
      if (x.size() > s.size()) continue;
      if (name == "startswith" ? s.compare(0, x.size(), x) == 0
                               : s.compare(s.size() - x.size(), x.size(), x) == 0)
        return Value(true);
    }
    return Value(false);
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const Value* chars = arg(0, "chars");
    if (chars && !chars->is_string() && !chars->is_none())
      return arg_error(what, "arg must be None or str");
    return Value(py_strip(s, chars, name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    const Value* sep = arg(0, "sep");
    if (sep && sep->is_string() && sep->as_string().empty())
      return arg_error(what, "empty separator");
    QS_ASSIGN_OR_RETURN(int64_t maxsplit, int_arg(arg(1, "maxsplit"), -1, what));
    if (name == "rsplit" && maxsplit >= 0) {
      return unimplemented("unsupported construct: str.rsplit() with maxsplit");
    }
    return Value(py_split(s, sep, maxsplit));
  }
  if (name == "upper") return Value(to_upper(s));
  if (name == "lower") return Value(to_lower(s));
  if (name == "title") return Value(py_title_str(s));
  if (name == "capitalize") return Value(capitalize(s));
  if (name == "replace") {
    const Value* from = arg(0, "old");
    const Value* to = arg(1, "new");
    if (!from || !to || !from->is_string() || !to->is_string())
      return arg_error(what, "needs two strings");
    QS_ASSIGN_OR_RETURN(int64_t count, int_arg(arg(2, "count"), -1, what));
    return Value(py_replace(s, from->as_string(), to->as_string(), count));
  }
  if (name == "format") return py_format(s, args);
  if (name == "find" || name == "count") {
    const Value* sub = arg(0, "sub");
    if (!sub || !sub->is_string()) return arg_error(what, "needs a string");
    if (name == "find") {
      size_t at = s.find(sub->as_string());
      return Value(at == std::string::npos ? int64_t{-1}
                                           : static_cast<int64_t>(utf8_length(s.substr(0, at))));
    }
    if (sub->as_string().empty()) return Value(static_cast<int64_t>(utf8_length(s) + 1));
    int64_t n = 0;
    for (size_t at = s.find(sub->as_string()); at != std::string::npos;
         at = s.find(sub->as_string(), at + sub->as_string().size()))
      ++n;
    return Value(n);
  }
  if (name == "join") {
    const Value* items = arg(0, "iterable");
    if (!items) return arg_error(what, "needs an iterable");
    QS_ASSIGN_OR_RETURN(std::vector<Value> list, iterate(*items));
    std::string out;
    for (size_t i = 0; i < list.size(); ++i) {
      if (!list[i].is_string())
        return arg_error(what, "sequence item " + std::to_string(i) + ": expected str instance, " +
                                   list[i].type_name() + " found");
      if (i) out += s;
      out += list[i].as_string();
    }
    return Value(std::move(out));
  }
  if (name == "splitlines") {
    std::vector<Value> out;
    for (const auto& line : py_splitlines(decode(s))) out.emplace_back(encode(line));
    return Value(std::move(out));
  }
  // The is* predicates, ASCII-exact.
  std::u32string u = decode(s);
  auto all = [&](auto pred) { return !u.empty() && std::all_of(u.begin(), u.end(), pred); };
  if (name == "isdigit") return Value(all([](char32_t c) { return c >= '0' && c <= '9'; }));
  if (name == "isalpha") return Value(all(alpha_cp));
  if (name == "isalnum")
    return Value(all([](char32_t c) { return alpha_cp(c) || (c >= '0' && c <= '9'); }));
  if (name == "isspace") return Value(all(py_space));
  bool has_cased = std::any_of(u.begin(), u.end(), alpha_cp);
  if (name == "isupper") return Value(has_cased && to_upper(s) == s);
  if (name == "islower") return Value(has_cased && to_lower(s) == s);
  return unimplemented("unsupported method " + what);
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
