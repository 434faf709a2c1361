// template: Python str operations on UTF-8 strings (Python indexes by code point and
// has its own whitespace set and split/strip/replace rules), jinja2's text filters, and the
// argument checks the builtins share. Used by jinja_builtins.cc; not a general string API.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "template/jinja_value.h"

namespace qs::jinja {

std::u32string decode(std::string_view utf8);
std::string encode(std::u32string_view code_points);
// Appends one code point as UTF-8. Unlike tok::utf8_append it accepts lone surrogates, as
// Python strings (and so template literals like "\ud800") may hold them.
void append_utf8(char32_t cp, std::string& out);
// str.isspace() of one code point.
bool py_space(char32_t c);

std::string to_upper(const std::string& s);
std::string to_lower(const std::string& s);
std::string capitalize(const std::string& s);
// str.strip/lstrip/rstrip; `chars` null or None strips whitespace.
std::string py_strip(const std::string& s, const Value* chars, bool left, bool right);
// str.split(sep, maxsplit); `sep` null or None splits on whitespace runs, dropping empties.
std::vector<Value> py_split(const std::string& s, const Value* sep, int64_t maxsplit);
// str.replace(old, new, count); count < 0 replaces all.
std::string py_replace(const std::string& s, const std::string& from, const std::string& to,
                       int64_t count);
// jinja2's `indent` and `title` filters.
std::string indent(const std::string& s, const std::string& pad, bool first, bool blank);
std::string jinja_title(const std::string& s);

// s.name(args) for the str methods has_method() lists.
Result<Value> call_str_method(const std::string& s, const std::string& name, const CallArgs& args);

// Argument checks: `what` names the filter or method in the message.
Status arg_error(const std::string& what, const std::string& msg);
Result<int64_t> int_arg(const Value* v, int64_t def, const std::string& what);
Result<std::string> string_arg(const Value* v, const std::string& def, const std::string& what);

}  // namespace qs::jinja
