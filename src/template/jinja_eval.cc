// template: the tree-walking evaluator. Statements write into a string; expressions
// compute Values with Python's operator rules (int/float promotion, str and list `+`,
// floor division and modulo rounding toward -inf). Errors carry "template line N".
#include "template/jinja_eval.h"

#include <cmath>

#include "core/limits.h"
#include "template/jinja_builtins.h"

namespace qs::jinja {
namespace {

struct Scope {
  std::shared_ptr<Scope> parent;
  Dict vars;

  const Value* lookup(std::string_view name) const {
    for (const Scope* s = this; s; s = s->parent.get()) {
      if (const Value* v = s->vars.find(name)) return v;
    }
    return nullptr;
  }
};
using ScopePtr = std::shared_ptr<Scope>;

enum class Flow { kNormal, kBreak, kContinue };

constexpr const char* kLinePrefix = "template line ";

Status at_line(int line, const Status& s) {
  if (s.ok() || s.message().rfind(kLinePrefix, 0) == 0) return s;
  return Status(s.code(), kLinePrefix + std::to_string(line) + ": " + s.message());
}

Status undefined_error(const Value& v) {
  return invalid_argument(v.undefined_hint().empty() ? "value is undefined" : v.undefined_hint());
}

Status type_error(const std::string& op, const Value& a, const Value& b) {
  return invalid_argument("unsupported operand type(s) for " + op + ": '" + a.type_name() +
                          "' and '" + b.type_name() + "'");
}

Result<Value> checked_int(bool overflow, int64_t v) {
  if (overflow) return out_of_range("integer overflow in template arithmetic");
  return Value(v);
}

Result<Value> arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    QS_RETURN_IF_ERROR(check_printable(a));
    QS_RETURN_IF_ERROR(check_printable(b));
    return Value(a.str() + b.str());
  }
  if (a.is_undefined()) return undefined_error(a);
  if (b.is_undefined()) return undefined_error(b);
  if (a.is_generator() || b.is_generator()) return type_error(op, a, b);
  bool ints = (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool());
  if (a.is_number() && b.is_number()) {
    int64_t x = ints ? a.as_int() : 0, y = ints ? b.as_int() : 0, r = 0;
    double fx = a.as_double(), fy = b.as_double();
    if (op == "+" || op == "-" || op == "*") {
      if (!ints) return Value(op == "+" ? fx + fy : op == "-" ? fx - fy : fx * fy);
      bool overflow = op == "+"   ? __builtin_add_overflow(x, y, &r)
                      : op == "-" ? __builtin_sub_overflow(x, y, &r)
                                  : __builtin_mul_overflow(x, y, &r);
      return checked_int(overflow, r);
    }
    if (op == "/") {
      if (fy == 0.0) return invalid_argument("division by zero");
      return Value(fx / fy);
    }
    if (op == "//" || op == "%") {
      if (ints ? y == 0 : fy == 0.0) return invalid_argument("integer division or modulo by zero");
      if (ints) {
        // INT64_MIN / -1 overflows (UB in C++, a big int in Python): the quotient is the
        // negation, which overflows only for INT64_MIN, and the remainder is always 0.
        if (y == -1) {
          if (op == "%") return Value(int64_t{0});
          const bool overflow = __builtin_sub_overflow(int64_t{0}, x, &r);
          return checked_int(overflow, r);
        }
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          --q;
          m += y;
        }
        return op == "//" ? Value(q) : Value(m);
      }
      double m = std::fmod(fx, fy);
      if (m != 0.0 && ((m < 0) != (fy < 0))) m += fy;
      return op == "//" ? Value(std::floor(fx / fy)) : Value(m);
    }
    if (op == "**") {
      if (ints && y >= 0) {
        // Square-and-multiply: a loop of y multiplications would run 2^63 times for
        // 1 ** 9223372036854775807, which never overflows. Every squaring that happens is
        // multiplied into the result later, so its overflow is the result's overflow.
        int64_t result = 1, base = x;
        for (int64_t e = y; e > 0; e >>= 1) {
          if ((e & 1) && __builtin_mul_overflow(result, base, &result)) return checked_int(true, 0);
          if (e > 1 && __builtin_mul_overflow(base, base, &base)) return checked_int(true, 0);
        }
        return Value(result);
      }
      return Value(std::pow(fx, fy));
    }
  }
  if (op == "+" && a.is_string() && b.is_string()) {
    if (!a.is_markup() && !b.is_markup()) return Value(a.as_string() + b.as_string());
    // Markup.__add__ / __radd__ escape the plain operand.
    auto safe = [](const Value& v) {
      return v.is_markup() ? v.as_string() : html_escape(v.as_string());
    };
    return Value::markup(safe(a) + safe(b));
  }
  if (op == "+" && a.is_list() && b.is_list()) {
    std::vector<Value> out = a.as_list();
    out.insert(out.end(), b.as_list().begin(), b.as_list().end());
    return Value(std::move(out));
  }
  if (op == "*" && (a.is_string() || a.is_list()) && (b.is_int() || b.is_bool())) {
    return arithmetic(op, b, a);
  }
  if (op == "*" && (a.is_int() || a.is_bool()) && (b.is_string() || b.is_list())) {
    int64_t n = std::max<int64_t>(0, a.as_int());
    const int64_t unit = b.is_string() ? static_cast<int64_t>(b.as_string().size())
                                       : static_cast<int64_t>(b.as_list().size());
    if (n > (1 << 20) || (unit > 0 && n > limits::kMaxTemplateValueBytes / unit)) {
      return out_of_range("sequence repetition too large (limit " +
                          std::to_string(limits::kMaxTemplateValueBytes) + " bytes or items)");
    }
    if (b.is_string()) {
      std::string out;
      for (int64_t i = 0; i < n; ++i) out += b.as_string();
      return b.is_markup() ? Value::markup(std::move(out)) : Value(std::move(out));
    }
    std::vector<Value> out;
    for (int64_t i = 0; i < n; ++i) out.insert(out.end(), b.as_list().begin(), b.as_list().end());
    return Value(std::move(out));
  }
  if (op == "%" && a.is_string()) {
    return unimplemented("unsupported construct: printf-style string formatting with '%'");
  }
  return type_error(op, a, b);
}

Result<bool> less_than(const Value& a, const Value& b, const std::string& op) {
  if (a.is_undefined()) return undefined_error(a);
  if (b.is_undefined()) return undefined_error(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_list() && b.is_list() && a.seq() == b.seq() &&
      (a.seq() == Value::Seq::kList || a.seq() == Value::Seq::kTuple)) {
    const auto& x = a.as_list();
    const auto& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (x[i].equals(y[i])) continue;
      return less_than(x[i], y[i], op);
    }
    return x.size() < y.size();
  }
  return invalid_argument("'" + op + "' not supported between instances of '" + a.type_name() +
                          "' and '" + b.type_name() + "'");
}

Result<bool> contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;  // Undefined iterates as empty
    case Value::Kind::kString:
      if (!item.is_string()) {
        return invalid_argument("'in <string>' requires string as left operand, not " +
                                item.type_name());
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : container.as_list()) {
        if (v.equals(item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      if (item.is_list() || item.is_dict() || item.is_namespace()) {
        return invalid_argument("unhashable type: '" + item.type_name() + "'");
      }
      return item.is_string() && container.as_dict().find(item.as_string()) != nullptr;
    default:
      return invalid_argument("argument of type '" + container.type_name() + "' is not iterable");
  }
}

Result<bool> compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return a.equals(b);
  if (op == "!=") return !a.equals(b);
  if (op == "in") return contains(b, a);
  if (op == "not in") {
    QS_ASSIGN_OR_RETURN(bool in, contains(b, a));
    return !in;
  }
  if (op == "<") return less_than(a, b, op);
  if (op == ">") return less_than(b, a, op);
  if (op == "<=") {
    QS_ASSIGN_OR_RETURN(bool gt, less_than(b, a, op));
    return !gt;
  }
  QS_ASSIGN_OR_RETURN(bool lt, less_than(a, b, op));  // ">="
  return !lt;
}

class Evaluator {
 public:
  explicit Evaluator(const RenderLimits& limits) : limits_(limits) {}

  Result<std::string> run(const Body& body, const Dict& context) {
    auto globals = std::make_shared<Scope>();
    globals->vars = make_globals();
    auto top = std::make_shared<Scope>();
    top->parent = globals;
    top->vars = context;
    std::string out;
    Flow flow = Flow::kNormal;
    QS_RETURN_IF_ERROR(exec_body(body, top, out, flow));
    return out;
  }

 private:
  Status exec_body(const Body& body, const ScopePtr& scope, std::string& out, Flow& flow) {
    for (const NodePtr& node : body) {
      QS_RETURN_IF_ERROR(at_line(node->line, charge(1)));
      QS_RETURN_IF_ERROR(at_line(node->line, exec(*node, scope, out, flow)));
      if (static_cast<int64_t>(out.size()) > limits_.max_output_bytes) {
        return at_line(node->line,
                       out_of_range("template output exceeds the limit of " +
                                    std::to_string(limits_.max_output_bytes) + " bytes"));
      }
      if (flow != Flow::kNormal) return ok_status();
    }
    return ok_status();
  }

  // Every statement and expression costs a step, and building a string or list costs its
  // size (a step per 64 bytes or per item), so a template that loops or grows a value without
  // end stops at the budget instead of hanging or exhausting memory.
  Status charge(int64_t steps) {
    steps_ += steps;
    if (steps_ <= limits_.max_steps) return ok_status();
    return out_of_range("template exceeds the limit of " + std::to_string(limits_.max_steps) +
                        " evaluation steps");
  }

  Status check_size(const Value& v) {
    int64_t size = 0;
    if (v.is_string()) size = static_cast<int64_t>(v.as_string().size());
    if (v.is_list()) size = static_cast<int64_t>(v.as_list().size());
    if (size > limits_.max_value_bytes) {
      return out_of_range("template value of " + std::to_string(size) +
                          " bytes or items exceeds the limit of " +
                          std::to_string(limits_.max_value_bytes));
    }
    return charge(1 + (v.is_string() ? size / 64 : size));
  }

  Status exec(const Node& n, const ScopePtr& scope, std::string& out, Flow& flow) {
    switch (n.kind) {
      case Node::Kind::kText:
        out += n.text;
        return ok_status();
      case Node::Kind::kOutput: {
        QS_ASSIGN_OR_RETURN(Value v, eval(*n.expr, scope));
        QS_RETURN_IF_ERROR(check_printable(v));
        out += v.str();
        return ok_status();
      }
      case Node::Kind::kIf:
        for (const auto& [cond, body] : n.branches) {
          QS_ASSIGN_OR_RETURN(Value c, eval(*cond, scope));
          if (c.truthy()) return exec_body(body, scope, out, flow);
        }
        return exec_body(n.else_body, scope, out, flow);
      case Node::Kind::kFor:
        return exec_for(n, scope, out);
      case Node::Kind::kSet: {
        QS_ASSIGN_OR_RETURN(Value v, eval(*n.expr, scope));
        return assign(n, scope, std::move(v));
      }
      case Node::Kind::kSetBlock:
      case Node::Kind::kFilterBlock: {
        std::string captured;
        QS_RETURN_IF_ERROR(exec_body(n.body, scope, captured, flow));
        auto filter_scope = std::make_shared<Scope>();
        filter_scope->parent = scope;
        filter_scope->vars.set(kSetBlockName, Value(std::move(captured)));
        QS_ASSIGN_OR_RETURN(Value v, eval(*n.expr, filter_scope));
        if (n.kind == Node::Kind::kFilterBlock) {
          out += v.str();
        } else {
          scope->vars.set(n.targets[0], std::move(v));
        }
        return ok_status();
      }
      case Node::Kind::kMacro:
        scope->vars.set(n.text, make_macro(n, scope));
        return ok_status();
      case Node::Kind::kBreak:
        flow = Flow::kBreak;
        return ok_status();
      case Node::Kind::kContinue:
        flow = Flow::kContinue;
        return ok_status();
      case Node::Kind::kScopeless:
        return exec_body(n.body, scope, out, flow);
    }
    return internal_error("unknown node kind");
  }

  Status assign(const Node& n, const ScopePtr& scope, Value v) {
    if (!n.attr.empty()) {
      const Value* target = scope->lookup(n.targets[0]);
      if (!target || !target->is_namespace()) {
        return invalid_argument("cannot assign attribute '" + n.attr + "' on '" + n.targets[0] +
                                "': only namespace() objects take attribute assignment");
      }
      target->as_namespace().attrs.set(n.attr, std::move(v));
      return ok_status();
    }
    return bind_targets(n.targets, std::move(v), *scope);
  }

  static Status bind_targets(const std::vector<std::string>& targets, Value v, Scope& scope) {
    if (targets.size() == 1) {
      scope.vars.set(targets[0], std::move(v));
      return ok_status();
    }
    QS_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v));
    if (items.size() != targets.size()) {
      return invalid_argument("cannot unpack " + std::to_string(items.size()) + " values into " +
                              std::to_string(targets.size()) + " names");
    }
    for (size_t i = 0; i < targets.size(); ++i) scope.vars.set(targets[i], items[i]);
    return ok_status();
  }

  Status exec_for(const Node& n, const ScopePtr& scope, std::string& out) {
    QS_ASSIGN_OR_RETURN(Value seq, eval(*n.expr, scope));
    if (seq.is_none() || seq.is_number() || seq.is_callable() || seq.is_namespace()) {
      return invalid_argument("'" + seq.type_name() + "' object is not iterable");
    }
    QS_ASSIGN_OR_RETURN(std::vector<Value> all, iterate(seq));
    std::vector<Value> items;
    if (n.filter) {
      // `for x in xs if cond`: the condition sees x, and loop.* counts only what passes.
      for (Value& item : all) {
        auto probe = std::make_shared<Scope>();
        probe->parent = scope;
        QS_RETURN_IF_ERROR(bind_targets(n.targets, item, *probe));
        QS_ASSIGN_OR_RETURN(Value keep, eval(*n.filter, probe));
        if (keep.truthy()) items.push_back(std::move(item));
      }
    } else {
      items = std::move(all);
    }
    if (items.empty()) {
      Flow flow = Flow::kNormal;
      return exec_body(n.else_body, scope, out, flow);
    }
    const int64_t length = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < length; ++i) {
      auto iter_scope = std::make_shared<Scope>();
      iter_scope->parent = scope;
      Dict loop;
      loop.set("index0", Value(i));
      loop.set("index", Value(i + 1));
      loop.set("revindex0", Value(length - i - 1));
      loop.set("revindex", Value(length - i));
      loop.set("first", Value(i == 0));
      loop.set("last", Value(i == length - 1));
      loop.set("length", Value(length));
      loop.set("depth", Value(1));
      loop.set("depth0", Value(0));
      loop.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)]
                                 : Value::undefined("there is no previous item"));
      loop.set("nextitem", i + 1 < length ? items[static_cast<size_t>(i + 1)]
                                          : Value::undefined("there is no next item"));
      auto cycle = std::make_shared<Callable>();
      cycle->name = "loop.cycle";
      cycle->fn = [i](const CallArgs& args) -> Result<Value> {
        if (args.positional.empty())
          return invalid_argument("loop.cycle() needs at least one value");
        return args.positional[static_cast<size_t>(i) % args.positional.size()];
      };
      loop.set("cycle", Value(std::shared_ptr<const Callable>(std::move(cycle))));
      iter_scope->vars.set("loop", Value(std::move(loop)));
      QS_RETURN_IF_ERROR(bind_targets(n.targets, items[static_cast<size_t>(i)], *iter_scope));
      Flow flow = Flow::kNormal;
      QS_RETURN_IF_ERROR(exec_body(n.body, iter_scope, out, flow));
      if (flow == Flow::kBreak) break;
    }
    return ok_status();
  }

  Value make_macro(const Node& n, const ScopePtr& scope) {
    // The macro reads its defining scope at call time. The callable holds it weakly (the
    // scope holds the macro) and the evaluator keeps it alive until rendering ends.
    pinned_.push_back(scope);
    std::weak_ptr<Scope> weak = scope;
    const Node* node = &n;
    auto fn = std::make_shared<Callable>();
    fn->name = n.text;
    fn->fn = [this, node, weak](const CallArgs& args) -> Result<Value> {
      // A macro calling itself without end would exhaust the stack: cap the depth.
      if (macro_depth_ >= limits_.max_recursion) {
        return out_of_range("macro '" + node->text + "' recursion deeper than the limit of " +
                            std::to_string(limits_.max_recursion) + " calls");
      }
      ++macro_depth_;
      Result<Value> r = call_macro(*node, weak.lock(), args);
      --macro_depth_;
      return r;
    };
    return Value(std::shared_ptr<const Callable>(std::move(fn)));
  }

  Result<Value> call_macro(const Node& macro, const ScopePtr& defining_scope,
                           const CallArgs& args) {
    auto call_scope = std::make_shared<Scope>();
    call_scope->parent = defining_scope;
    if (args.positional.size() > macro.params.size()) {
      return invalid_argument("macro '" + macro.text + "' takes not more than " +
                              std::to_string(macro.params.size()) + " argument(s)");
    }
    for (const auto& [key, value] : args.keyword) {
      bool known = false;
      for (const auto& p : macro.params) known = known || p.first == key;
      if (!known) {
        return invalid_argument("macro '" + macro.text + "' takes no keyword argument '" + key +
                                "'");
      }
    }
    for (size_t i = 0; i < macro.params.size(); ++i) {
      const auto& [pname, pdefault] = macro.params[i];
      if (const Value* given = args.get(i, pname)) {
        call_scope->vars.set(pname, *given);
      } else if (pdefault) {
        QS_ASSIGN_OR_RETURN(Value d, eval(*pdefault, call_scope));
        call_scope->vars.set(pname, std::move(d));
      } else {
        call_scope->vars.set(pname, Value::undefined("parameter '" + pname + "' was not provided"));
      }
    }
    std::string out;
    Flow flow = Flow::kNormal;
    QS_RETURN_IF_ERROR(exec_body(macro.body, call_scope, out, flow));
    return Value(std::move(out));
  }

  Result<CallArgs> eval_args(const Expr& e, const ScopePtr& scope, size_t first) {
    CallArgs args;
    for (size_t i = first; i < e.args.size(); ++i) {
      QS_ASSIGN_OR_RETURN(Value v, eval(*e.args[i], scope));
      args.positional.push_back(std::move(v));
    }
    for (const auto& [key, expr] : e.kwargs) {
      QS_ASSIGN_OR_RETURN(Value v, eval(*expr, scope));
      args.keyword.emplace_back(key, std::move(v));
    }
    return args;
  }

  Result<Value> eval(const Expr& e, const ScopePtr& scope) {
    Result<Value> r = eval_inner(e, scope);
    if (!r.ok()) return at_line(e.line, r.status());
    if (Status s = check_size(*r); !s.ok()) return at_line(e.line, s);
    return r;
  }

  Result<Value> eval_inner(const Expr& e, const ScopePtr& scope) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.literal;
      case Expr::Kind::kName: {
        if (const Value* v = scope->lookup(e.name)) return *v;
        return Value::undefined("'" + e.name + "' is undefined");
      }
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        std::vector<Value> items;
        for (const ExprPtr& item : e.args) {
          QS_ASSIGN_OR_RETURN(Value v, eval(*item, scope));
          items.push_back(std::move(v));
        }
        if (e.kind == Expr::Kind::kTuple) return Value::tuple(std::move(items));
        return Value(std::move(items));
      }
      case Expr::Kind::kDict: {
        Dict d;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          QS_ASSIGN_OR_RETURN(Value k, eval(*e.args[i], scope));
          if (!k.is_string()) {
            return unimplemented("unsupported construct: dict literal key of type '" +
                                 k.type_name() + "' (only string keys)");
          }
          QS_ASSIGN_OR_RETURN(Value v, eval(*e.args[i + 1], scope));
          d.set(k.as_string(), std::move(v));
        }
        return Value(std::move(d));
      }
      case Expr::Kind::kAttr: {
        QS_ASSIGN_OR_RETURN(Value obj, eval(*e.args[0], scope));
        return get_attr(obj, e.name);
      }
      case Expr::Kind::kItem: {
        QS_ASSIGN_OR_RETURN(Value obj, eval(*e.args[0], scope));
        QS_ASSIGN_OR_RETURN(Value key, eval(*e.args[1], scope));
        return get_item(obj, key);
      }
      case Expr::Kind::kSlice: {
        QS_ASSIGN_OR_RETURN(Value obj, eval(*e.args[0], scope));
        Value parts[3];
        for (int i = 0; i < 3; ++i) {
          if (e.args[static_cast<size_t>(i) + 1]) {
            QS_ASSIGN_OR_RETURN(parts[i], eval(*e.args[static_cast<size_t>(i) + 1], scope));
          }
        }
        return get_slice(obj, parts[0], parts[1], parts[2]);
      }
      case Expr::Kind::kCall:
        return eval_call(e, scope);
      case Expr::Kind::kFilter: {
        QS_ASSIGN_OR_RETURN(Value input, eval(*e.args[0], scope));
        QS_ASSIGN_OR_RETURN(CallArgs args, eval_args(e, scope, 1));
        return apply_filter(e.name, input, args);
      }
      case Expr::Kind::kTest: {
        QS_ASSIGN_OR_RETURN(Value input, eval(*e.args[0], scope));
        QS_ASSIGN_OR_RETURN(CallArgs args, eval_args(e, scope, 1));
        QS_ASSIGN_OR_RETURN(bool r, apply_test(e.name, input, args));
        return Value(r != e.negated);
      }
      case Expr::Kind::kNeg:
      case Expr::Kind::kPos: {
        QS_ASSIGN_OR_RETURN(Value v, eval(*e.args[0], scope));
        if (v.is_undefined()) return undefined_error(v);
        if (!v.is_number()) {
          return invalid_argument("bad operand type for unary " +
                                  std::string(e.kind == Expr::Kind::kNeg ? "-" : "+") + ": '" +
                                  v.type_name() + "'");
        }
        if (e.kind == Expr::Kind::kPos) return v.is_bool() ? Value(v.as_int()) : v;
        if (v.is_float()) return Value(-v.as_double());
        if (v.as_int() == INT64_MIN) return checked_int(true, 0);
        return Value(-v.as_int());
      }
      case Expr::Kind::kNot: {
        QS_ASSIGN_OR_RETURN(Value v, eval(*e.args[0], scope));
        return Value(!v.truthy());
      }
      case Expr::Kind::kAnd:
      case Expr::Kind::kOr: {
        // Python's and/or return an operand, not a bool.
        QS_ASSIGN_OR_RETURN(Value left, eval(*e.args[0], scope));
        bool short_circuit = e.kind == Expr::Kind::kAnd ? !left.truthy() : left.truthy();
        if (short_circuit) return left;
        return eval(*e.args[1], scope);
      }
      case Expr::Kind::kBinary: {
        QS_ASSIGN_OR_RETURN(Value a, eval(*e.args[0], scope));
        QS_ASSIGN_OR_RETURN(Value b, eval(*e.args[1], scope));
        return arithmetic(e.name, a, b);
      }
      case Expr::Kind::kCompare: {
        QS_ASSIGN_OR_RETURN(Value left, eval(*e.args[0], scope));
        for (size_t i = 0; i < e.ops.size(); ++i) {
          QS_ASSIGN_OR_RETURN(Value right, eval(*e.args[i + 1], scope));
          QS_ASSIGN_OR_RETURN(bool ok, compare(e.ops[i], left, right));
          if (!ok) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case Expr::Kind::kCond: {
        QS_ASSIGN_OR_RETURN(Value c, eval(*e.args[0], scope));
        if (c.truthy()) return eval(*e.args[1], scope);
        if (e.args[2]) return eval(*e.args[2], scope);
        return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                                " evaluated to false and no else section was defined");
      }
    }
    return internal_error("unknown expression kind");
  }

  Result<Value> eval_call(const Expr& e, const ScopePtr& scope) {
    const Expr& callee = *e.args[0];
    if (callee.kind == Expr::Kind::kAttr) {
      QS_ASSIGN_OR_RETURN(Value obj, eval(*callee.args[0], scope));
      if (has_method(obj, callee.name)) {
        QS_ASSIGN_OR_RETURN(CallArgs args, eval_args(e, scope, 1));
        return call_method(obj, callee.name, args);
      }
      QS_ASSIGN_OR_RETURN(Value fn, get_attr(obj, callee.name));
      if (!fn.is_callable()) {
        if (obj.is_string() || obj.is_list() || obj.is_dict()) {
          return unimplemented("unsupported method " + obj.type_name() + "." + callee.name + "()");
        }
        return invalid_argument("'" + callee.name + "' of a " + obj.type_name() +
                                " is not callable");
      }
      QS_ASSIGN_OR_RETURN(CallArgs args, eval_args(e, scope, 1));
      return fn.as_callable().fn(args);
    }
    QS_ASSIGN_OR_RETURN(Value fn, eval(callee, scope));
    if (fn.is_undefined()) return undefined_error(fn);
    if (!fn.is_callable())
      return invalid_argument("'" + fn.type_name() + "' object is not callable");
    QS_ASSIGN_OR_RETURN(CallArgs args, eval_args(e, scope, 1));
    return fn.as_callable().fn(args);
  }

  RenderLimits limits_;
  int64_t steps_ = 0;
  std::vector<ScopePtr> pinned_;
  int macro_depth_ = 0;
};

}  // namespace

Result<std::string> render(const Body& body, const Dict& context, const RenderLimits& limits) {
  Evaluator ev(limits);
  return ev.run(body, context);
}

}  // namespace qs::jinja
