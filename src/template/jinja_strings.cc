// template: Python str semantics on UTF-8 (code-point indexing, str.split/strip/
// title/format rules, splitlines boundaries) and jinja2's text filters (indent, title), plus
// the argument checks every builtin shares. Case mapping is ASCII-only: other scripts pass
// through upper()/lower() unchanged, where Python would map them.
#include "template/jinja_strings.h"

#include <algorithm>
#include <cctype>

#include "template/jinja_builtins.h"

namespace qs::jinja {

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

void append_utf8(char32_t cp, std::string& out) {
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

std::string encode(std::u32string_view s) {
  std::string out;
  for (char32_t cp : s) append_utf8(cp, out);
  return out;
}

// str.isspace() for a code point.
bool py_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
         c == 0x205f || c == 0x3000;
}

namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

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

Result<Value> call_str_method(const std::string& s, const std::string& name, const CallArgs& args) {
  const std::string what = "str." + name + "()";
  auto arg = [&](size_t i, const char* key) { return args.get(i, key); };
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

}  // namespace qs::jinja
