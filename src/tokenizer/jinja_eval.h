// tokenizer/jinja: renders a parsed template against a context, with jinja2's scoping (a for
// loop iteration and a macro call get their own scope; `if` does not; namespace() objects
// carry values out of loops) and its operator semantics (Python's, on Python-like values).
#pragma once

#include <string>

#include "core/status.h"
#include "tokenizer/jinja_ast.h"

namespace qs::jinja {

// `context` holds the template's variables; the globals of make_globals() sit beneath it.
// Errors name the template line and the construct that failed.
Result<std::string> render(const Body& body, const Dict& context);

}  // namespace qs::jinja
