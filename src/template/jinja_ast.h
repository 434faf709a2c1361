// template: the syntax tree the parser builds and the evaluator walks. Every node
// carries its template line so that runtime errors can point at the construct at fault.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "template/jinja_value.h"

namespace qs::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,  // literal
    kName,     // name
    kList,     // args = items
    kTuple,    // args = items (a Python tuple; behaves as a list here)
    kDict,     // args = key0, value0, key1, value1 ...
    kAttr,     // args[0].name
    kItem,     // args[0][args[1]]
    kSlice,    // args[0][args[1]:args[2]:args[3]], missing parts are null
    kCall,     // args[0](args[1..], kwargs)
    kFilter,   // args[0] | name(args[1..], kwargs)
    kTest,     // args[0] is [not] name(args[1..])
    kNeg,      // -args[0]
    kPos,      // +args[0]
    kNot,      // not args[0]
    kBinary,   // args[0] op args[1]: + - * / // % ** ~
    kAnd,      // args[0] and args[1]
    kOr,       // args[0] or args[1]
    kCompare,  // args[0] ops[0] args[1] ops[1] args[2] ... (Python chaining)
    kCond,     // args[1] if args[0] else args[2] (args[2] may be null)
  };

  Kind kind;
  int line = 0;
  Value literal;
  std::string name;  // identifier, attribute, filter, test or operator
  bool negated = false;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // kCompare
};

// The name a `{% set x | filter %}` or `{% filter %}` chain reads the captured block from.
inline constexpr const char* kSetBlockName = "(set block)";

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // branches (cond, body)..., else_body
    kFor,       // for targets in expr [if filter] body [else else_body]
    kSet,       // set targets = expr  |  set targets[0].attr = expr (namespace)
    kSetBlock,  // set targets[0] %}body{% endset (optionally | filters in expr chain)
    kMacro,     // macro name(params) body
    kBreak,
    kContinue,
    kScopeless,    // a body rendered in place ({% generation %} of transformers)
    kFilterBlock,  // {% filter f | g %}body{% endfilter %}: expr is the chain on kSetBlockName
  };

  Kind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;  // for-loop condition
  std::vector<std::string> targets;
  std::string attr;  // kSet on a namespace attribute
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::pair<std::string, ExprPtr>> params;  // kMacro; default may be null
};

}  // namespace qs::jinja
