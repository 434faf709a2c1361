// template: the library a template can call: filters (`x | trim`), tests (`x is
// string`), methods of str/dict (`s.split('x')`, `d.items()`), global functions (range,
// namespace, raise_exception, strftime_now) and attribute/item access. Each follows the
// jinja2 3.1 / CPython behaviour it is named after; anything else is an error naming it.
#pragma once

#include <string>

#include "core/status.h"
#include "template/jinja_value.h"

namespace qs::jinja {

// obj.name / obj[key] with jinja2's sandboxed getattr/getitem: a missing key is Undefined,
// but any access on Undefined is an error.
Result<Value> get_attr(const Value& obj, const std::string& name);
Result<Value> get_item(const Value& obj, const Value& key);
// obj[start:stop:step], each part possibly Undefined (omitted) or None.
Result<Value> get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// Iterates as Python's iter(): list items, dict keys, string characters; Undefined is empty.
Result<std::vector<Value>> iterate(const Value& v);

Result<Value> apply_filter(const std::string& name, const Value& input, const CallArgs& args);
Result<bool> apply_test(const std::string& name, const Value& input, const CallArgs& args);
// True when `name` is a str/dict/list method we implement, so `obj.name(...)` is a call of it.
bool has_method(const Value& obj, const std::string& name);
Result<Value> call_method(const Value& obj, const std::string& name, const CallArgs& args);

// The functions every template sees: range, namespace, dict, raise_exception, strftime_now.
Dict make_globals();

}  // namespace qs::jinja
