// template: turns the token stream into a tree, with jinja2's operator precedence
// (jinja2/parser.py). Tags outside the supported subset are rejected here, by name and line,
// rather than rendered wrongly later.
#pragma once

#include <string_view>

#include "core/status.h"
#include "template/jinja_ast.h"
#include "template/jinja_lexer.h"

namespace qs::jinja {

Result<Body> parse_template(std::string_view source, const LexOptions& options);

}  // namespace qs::jinja
