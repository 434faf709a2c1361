// template: Python-compatible printing, comparison and JSON of template values.
// The formats here (repr of str and float, json.dumps separators and escapes) are the ones
// CPython produces, because templates put them straight into the prompt.
#include "template/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace qs::jinja {

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

Value* Dict::find(std::string_view key) {
  for (auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::set(std::string key, Value value) {
  if (Value* existing = find(key)) {
    *existing = std::move(value);
  } else {
    items.emplace_back(std::move(key), std::move(value));
  }
}

const Value* CallArgs::get(size_t index, std::string_view name) const {
  for (const auto& [k, v] : keyword) {
    if (k == name) return &v;
  }
  return index < positional.size() ? &positional[index] : nullptr;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value(None{});
    case nlohmann::ordered_json::value_t::boolean:
      return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> list;
      list.reserve(j.size());
      for (const auto& e : j) list.push_back(from_json(e));
      return Value(std::move(list));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (const auto& [k, v] : j.items()) d.set(k, from_json(v));
      return Value(std::move(d));
    }
    default:  // binary and discarded values never come out of a JSON text
      return Value(None{});
  }
}

bool Value::truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return as_bool();
    case Kind::kInt:
      return as_int() != 0;
    case Kind::kFloat:
      return as_double() != 0.0;
    case Kind::kString:
      return !as_string().empty();
    case Kind::kList:
      return is_generator() || !as_list().empty();  // a Python generator object is truthy
    case Kind::kDict:
      return !as_dict().items.empty();
    case Kind::kNamespace:
    case Kind::kCallable:
      return true;
  }
  return false;
}

std::string format_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  // Shortest round-trip digits in scientific form "d.ddde±XX", then laid out as CPython's
  // float_repr_style 'short': fixed notation when -4 <= exponent < 16, else scientific.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool negative = sci[0] == '-';
  if (negative) sci.erase(0, 1);
  size_t e_pos = sci.find('e');
  std::string mantissa = sci.substr(0, e_pos);
  int exponent = std::stoi(sci.substr(e_pos + 1));
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
      out += digits + std::string(static_cast<size_t>(exponent) + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(exponent) + 1) + "." +
             digits.substr(static_cast<size_t>(exponent) + 1);
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+',
                  std::abs(exponent));
    out += exp_buf;
  }
  return out;
}

namespace {

std::string repr_string(const std::string& s) {
  char quote = '\'';
  if (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) quote = '"';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == static_cast<unsigned char>(quote)) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

}  // namespace

std::string Value::str() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return as_string();
    default:
      return repr();
  }
}

std::string Value::repr() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return as_bool() ? "True" : "False";
    case Kind::kInt:
      return std::to_string(as_int());
    case Kind::kFloat:
      return format_float(as_double());
    case Kind::kString:
      return is_markup() ? "Markup(" + repr_string(as_string()) + ")" : repr_string(as_string());
    case Kind::kList: {
      if (is_generator()) return "<generator object>";
      std::string out = is_tuple() ? "(" : "[";
      const auto& list = as_list();
      for (size_t i = 0; i < list.size(); ++i) {
        if (i) out += ", ";
        out += list[i].repr();
      }
      if (is_tuple()) return out + (list.size() == 1 ? ",)" : ")");
      switch (seq()) {
        case Seq::kDictItems:
          return "dict_items(" + out + "])";
        case Seq::kDictKeys:
          return "dict_keys(" + out + "])";
        case Seq::kDictValues:
          return "dict_values(" + out + "])";
        default:
          return out + "]";
      }
    }
    case Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : as_dict().items) {
        if (!first) out += ", ";
        first = false;
        out += repr_string(k) + ": " + v.repr();
      }
      return out + "}";
    }
    case Kind::kNamespace: {
      std::string out = "<Namespace {";
      bool first = true;
      for (const auto& [k, v] : as_namespace().attrs.items) {
        if (!first) out += ", ";
        first = false;
        out += repr_string(k) + ": " + v.repr();
      }
      return out + "}>";
    }
    case Kind::kCallable:
      return "<function " + as_callable().name + ">";
  }
  return "";
}

bool Value::equals(const Value& other) const {
  if (is_number() && other.is_number()) {
    if (is_float() || other.is_float()) return as_double() == other.as_double();
    return as_int() == other.as_int();
  }
  if (kind() != other.kind()) return false;
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return true;
    case Kind::kString:
      return as_string() == other.as_string();
    case Kind::kList: {
      // Python: (1,) != [1]; generators and dict views compare by identity.
      if (seq() != other.seq()) return false;
      if (seq() != Seq::kList && seq() != Seq::kTuple) return &as_list() == &other.as_list();
      const auto& a = as_list();
      const auto& b = other.as_list();
      if (a.size() != b.size()) return false;
      for (size_t i = 0; i < a.size(); ++i) {
        if (!a[i].equals(b[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      const auto& a = as_dict().items;
      const Dict& b = other.as_dict();
      if (a.size() != b.items.size()) return false;
      for (const auto& [k, v] : a) {
        const Value* o = b.find(k);
        if (!o || !v.equals(*o)) return false;
      }
      return true;
    }
    case Kind::kNamespace:
      return &as_namespace() == &other.as_namespace();
    case Kind::kCallable:
      return &as_callable() == &other.as_callable();
    default:
      return false;
  }
}

std::string Value::type_name() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      switch (seq()) {
        case Seq::kTuple:
          return "tuple";
        case Seq::kGenerator:
          return "generator";
        case Seq::kDictItems:
          return "dict_items";
        case Seq::kDictKeys:
          return "dict_keys";
        case Seq::kDictValues:
          return "dict_values";
        default:
          return "list";
      }
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
  }
  return "?";
}

namespace {

// json.dumps string escaping with ensure_ascii=False: only '"', '\\' and C0 controls.
void json_escape(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

struct JsonWriter {
  int indent;
  bool sort_keys;
  std::string_view item_sep;
  std::string_view key_sep;
  std::string out;

  void newline(int level) {
    out += '\n';
    out.append(static_cast<size_t>(indent * level), ' ');
  }

  Status write(const Value& v, int level) {
    switch (v.kind()) {
      case Value::Kind::kNone:
        out += "null";
        return ok_status();
      case Value::Kind::kBool:
        out += v.as_bool() ? "true" : "false";
        return ok_status();
      case Value::Kind::kInt:
        out += std::to_string(v.as_int());
        return ok_status();
      case Value::Kind::kFloat: {
        double d = v.as_double();
        if (std::isnan(d)) {
          out += "NaN";
        } else if (std::isinf(d)) {
          out += d < 0 ? "-Infinity" : "Infinity";
        } else {
          out += format_float(d);
        }
        return ok_status();
      }
      case Value::Kind::kString:
        json_escape(v.as_string(), out);
        return ok_status();
      case Value::Kind::kList: {
        if (v.seq() != Value::Seq::kList && v.seq() != Value::Seq::kTuple) {
          return invalid_argument("Object of type " + v.type_name() + " is not JSON serializable");
        }
        const auto& list = v.as_list();
        if (list.empty()) {
          out += "[]";
          return ok_status();
        }
        out += '[';
        for (size_t i = 0; i < list.size(); ++i) {
          if (i) out += item_sep;
          if (indent >= 0) newline(level + 1);
          QS_RETURN_IF_ERROR(write(list[i], level + 1));
        }
        if (indent >= 0) newline(level);
        out += ']';
        return ok_status();
      }
      case Value::Kind::kDict: {
        std::vector<const std::pair<std::string, Value>*> entries;
        for (const auto& e : v.as_dict().items) entries.push_back(&e);
        if (entries.empty()) {
          out += "{}";
          return ok_status();
        }
        if (sort_keys) {
          std::stable_sort(entries.begin(), entries.end(),
                           [](const auto* a, const auto* b) { return a->first < b->first; });
        }
        out += '{';
        for (size_t i = 0; i < entries.size(); ++i) {
          if (i) out += item_sep;
          if (indent >= 0) newline(level + 1);
          json_escape(entries[i]->first, out);
          out += key_sep;
          QS_RETURN_IF_ERROR(write(entries[i]->second, level + 1));
        }
        if (indent >= 0) newline(level);
        out += '}';
        return ok_status();
      }
      default:
        return invalid_argument("Object of type " + v.type_name() + " is not JSON serializable");
    }
  }
};

}  // namespace

Result<std::string> to_json(const Value& v, int indent, bool sort_keys, std::string_view item_sep,
                            std::string_view key_sep) {
  JsonWriter w{indent, sort_keys, item_sep, key_sep, {}};
  QS_RETURN_IF_ERROR(w.write(v, 0));
  return std::move(w.out);
}

Status check_printable(const Value& v) {
  if (v.is_generator()) {
    return unimplemented(
        "unsupported construct: printing a generator (jinja2 prints its address); apply "
        "'| list' first");
  }
  return ok_status();
}

std::string html_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '\'':
        out += "&#39;";
        break;
      case '"':
        out += "&#34;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::vector<std::string> utf8_chars(std::string_view s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 1;
    n = std::min(n, s.size() - i);
    out.emplace_back(s.substr(i, n));
    i += n;
  }
  return out;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) {
    if ((c & 0xc0) != 0x80) ++n;
  }
  return n;
}

}  // namespace qs::jinja
