// template: renders a parsed template against a context, with jinja2's scoping (a for
// loop iteration and a macro call get their own scope; `if` does not; namespace() objects
// carry values out of loops) and its operator semantics (Python's, on Python-like values).
#pragma once

#include <cstdint>
#include <string>

#include "core/limits.h"
#include "core/status.h"
#include "template/jinja_ast.h"

namespace qs::jinja {

// What one render may cost (limits.h holds the defaults and says why): a render that would
// pass one of these stops with an error naming the limit.
struct RenderLimits {
  int64_t max_steps = limits::kMaxTemplateSteps;
  int64_t max_output_bytes = limits::kMaxTemplateOutputBytes;
  int64_t max_value_bytes = limits::kMaxTemplateValueBytes;
  int max_recursion = limits::kMaxTemplateRecursion;
};

// `context` holds the template's variables; the globals of make_globals() sit beneath it.
// Errors name the template line and the construct that failed.
Result<std::string> render(const Body& body, const Dict& context,
                           const RenderLimits& limits = RenderLimits{});

}  // namespace qs::jinja
