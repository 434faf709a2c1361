// template: recursive-descent parser. Precedence, lowest first, as jinja2/parser.py:
// `a if c else b` < or < and < not < comparisons/in < + - < ~ < * / // % < ** < unary - +
// < postfix (. [] ()) < filters and tests (| and is, bound to the operand on their left).
#include "template/jinja_parser.h"

#include <set>

#include "core/limits.h"

namespace qs::jinja {
namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : toks_(std::move(tokens)) {}

  Result<Body> parse_all() {
    Body body;
    std::string end;
    QS_RETURN_IF_ERROR(parse_body({}, body, end, 0, ""));
    return body;
  }

 private:
  const Token& peek(size_t ahead = 0) const {
    size_t i = pos_ + ahead;
    return i < toks_.size() ? toks_[i] : toks_.back();
  }
  const Token& next() { return toks_[pos_ < toks_.size() - 1 ? pos_++ : pos_]; }
  bool is_op(const char* op, size_t ahead = 0) const {
    return peek(ahead).type == TokenType::kOp && peek(ahead).text == op;
  }
  bool is_name(const char* name, size_t ahead = 0) const {
    return peek(ahead).type == TokenType::kName && peek(ahead).text == name;
  }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    ++pos_;
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    ++pos_;
    return true;
  }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case TokenType::kEof:
        return "end of template";
      case TokenType::kBlockEnd:
        return "end of statement block";
      case TokenType::kVarEnd:
        return "end of print statement";
      case TokenType::kString:
        return "string";
      case TokenType::kText:
        return "template data";
      default:
        return "'" + t.text + "'";
    }
  }
  Status error(const Token& t, const std::string& msg) const {
    return invalid_argument("template line " + std::to_string(t.line) + ": " + msg);
  }
  Status expect_op(const char* op) {
    if (skip_op(op)) return ok_status();
    return error(peek(), std::string("expected '") + op + "', got " + describe(peek()));
  }
  Status expect_block_end() {
    if (peek().type == TokenType::kBlockEnd) {
      ++pos_;
      return ok_status();
    }
    return error(peek(), "expected end of statement block, got " + describe(peek()));
  }
  Result<std::string> expect_name() {
    if (peek().type != TokenType::kName) {
      return error(peek(), "expected a name, got " + describe(peek()));
    }
    return next().text;
  }

  // Parses nodes into `body` until a block tag whose first word is in `ends`; that word is
  // returned in `end` with the parser just after it. `opener` names the unclosed tag.
  Status parse_body(const std::set<std::string>& ends, Body& body, std::string& end, int open_line,
                    const std::string& opener) {
    while (true) {
      const Token& t = peek();
      if (t.type == TokenType::kEof) {
        if (ends.empty()) return ok_status();
        return error(t, "unexpected end of template: '" + opener + "' opened at line " +
                            std::to_string(open_line) + " is never closed (expected " + "'end" +
                            opener + "')");
      }
      if (t.type == TokenType::kText) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kText;
        n->line = t.line;
        n->text = t.text;
        body.push_back(std::move(n));
        ++pos_;
        continue;
      }
      if (t.type == TokenType::kVarBegin) {
        ++pos_;
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kOutput;
        n->line = t.line;
        QS_ASSIGN_OR_RETURN(n->expr, parse_expression());
        if (peek().type != TokenType::kVarEnd) {
          return error(peek(), "expected end of print statement, got " + describe(peek()));
        }
        ++pos_;
        body.push_back(std::move(n));
        continue;
      }
      // A block tag.
      ++pos_;
      const Token& name_tok = peek();
      if (name_tok.type != TokenType::kName) {
        return error(name_tok, "expected a tag name after '{%', got " + describe(name_tok));
      }
      if (ends.count(name_tok.text)) {
        end = name_tok.text;
        ++pos_;
        return ok_status();
      }
      ++pos_;
      QS_RETURN_IF_ERROR(parse_statement(name_tok, body));
    }
  }

  Status parse_statement(const Token& tag, Body& body) {
    DepthGuard guard(depth_);
    if (depth_ > kMaxDepth) return error(tag, "blocks nested too deeply");
    const std::string& name = tag.text;
    auto n = std::make_unique<Node>();
    n->line = tag.line;
    if (name == "if") {
      n->kind = Node::Kind::kIf;
      QS_ASSIGN_OR_RETURN(ExprPtr cond, parse_expression());
      while (true) {
        QS_RETURN_IF_ERROR(expect_block_end());
        Body branch;
        std::string end;
        QS_RETURN_IF_ERROR(parse_body({"elif", "else", "endif"}, branch, end, tag.line, "if"));
        n->branches.emplace_back(std::move(cond), std::move(branch));
        if (end == "elif") {
          QS_ASSIGN_OR_RETURN(cond, parse_expression());
          continue;
        }
        if (end == "else") {
          QS_RETURN_IF_ERROR(expect_block_end());
          QS_RETURN_IF_ERROR(parse_body({"endif"}, n->else_body, end, tag.line, "if"));
        }
        break;
      }
    } else if (name == "for") {
      n->kind = Node::Kind::kFor;
      bool paren = skip_op("(");
      do {
        QS_ASSIGN_OR_RETURN(std::string target, expect_name());
        n->targets.push_back(std::move(target));
      } while (skip_op(","));
      if (paren) QS_RETURN_IF_ERROR(expect_op(")"));
      if (!skip_name("in"))
        return error(peek(), "expected 'in' in for loop, got " + describe(peek()));
      QS_ASSIGN_OR_RETURN(n->expr, parse_or());
      if (skip_name("if")) {
        QS_ASSIGN_OR_RETURN(n->filter, parse_or());
      }
      if (is_name("recursive")) return error(peek(), "unsupported construct: recursive for loops");
      QS_RETURN_IF_ERROR(expect_block_end());
      std::string end;
      ++loop_depth_;
      Status st = parse_body({"else", "endfor"}, n->body, end, tag.line, "for");
      --loop_depth_;
      QS_RETURN_IF_ERROR(st);
      if (end == "else") {
        QS_RETURN_IF_ERROR(expect_block_end());
        QS_RETURN_IF_ERROR(parse_body({"endfor"}, n->else_body, end, tag.line, "for"));
      }
    } else if (name == "set") {
      QS_ASSIGN_OR_RETURN(std::string target, expect_name());
      n->targets.push_back(std::move(target));
      if (skip_op(".")) {
        QS_ASSIGN_OR_RETURN(n->attr, expect_name());
      } else {
        while (skip_op(",")) {
          QS_ASSIGN_OR_RETURN(std::string more, expect_name());
          n->targets.push_back(std::move(more));
        }
      }
      if (skip_op("=")) {
        n->kind = Node::Kind::kSet;
        QS_ASSIGN_OR_RETURN(n->expr, parse_expression());
      } else {
        if (n->targets.size() != 1 || !n->attr.empty()) {
          return error(peek(), "expected '=' in set statement, got " + describe(peek()));
        }
        n->kind = Node::Kind::kSetBlock;
        // `{% set x | f %}` applies filters to the captured block: they are kept as a chain on
        // a name no template can spell, which the evaluator binds to the block's text.
        auto placeholder = std::make_unique<Expr>();
        placeholder->kind = Expr::Kind::kName;
        placeholder->name = kSetBlockName;
        placeholder->line = tag.line;
        ExprPtr chain = std::move(placeholder);
        while (skip_op("|")) {
          QS_ASSIGN_OR_RETURN(chain, parse_filter(std::move(chain)));
        }
        n->expr = std::move(chain);
        QS_RETURN_IF_ERROR(expect_block_end());
        std::string end;
        QS_RETURN_IF_ERROR(parse_body({"endset"}, n->body, end, tag.line, "set"));
        QS_RETURN_IF_ERROR(expect_block_end());
        body.push_back(std::move(n));
        return ok_status();
      }
    } else if (name == "macro") {
      n->kind = Node::Kind::kMacro;
      QS_ASSIGN_OR_RETURN(n->text, expect_name());
      QS_RETURN_IF_ERROR(expect_op("("));
      while (!skip_op(")")) {
        if (!n->params.empty()) QS_RETURN_IF_ERROR(expect_op(","));
        if (skip_op(")")) break;
        QS_ASSIGN_OR_RETURN(std::string param, expect_name());
        ExprPtr def;
        if (skip_op("=")) {
          QS_ASSIGN_OR_RETURN(def, parse_expression());
        }
        n->params.emplace_back(std::move(param), std::move(def));
      }
      QS_RETURN_IF_ERROR(expect_block_end());
      std::string end;
      int saved_depth = loop_depth_;
      loop_depth_ = 0;  // a loop around the definition does not reach into the macro
      Status st = parse_body({"endmacro"}, n->body, end, tag.line, "macro");
      loop_depth_ = saved_depth;
      QS_RETURN_IF_ERROR(st);
    } else if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) return error(tag, "'" + name + "' outside a for loop");
      n->kind = name == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
    } else if (name == "filter") {
      n->kind = Node::Kind::kFilterBlock;
      auto placeholder = std::make_unique<Expr>();
      placeholder->kind = Expr::Kind::kName;
      placeholder->name = kSetBlockName;
      placeholder->line = tag.line;
      QS_ASSIGN_OR_RETURN(ExprPtr chain, parse_filter(std::move(placeholder)));
      while (skip_op("|")) {
        QS_ASSIGN_OR_RETURN(chain, parse_filter(std::move(chain)));
      }
      n->expr = std::move(chain);
      QS_RETURN_IF_ERROR(expect_block_end());
      std::string end;
      QS_RETURN_IF_ERROR(parse_body({"endfilter"}, n->body, end, tag.line, "filter"));
    } else if (name == "generation") {
      // transformers' AssistantTracker extension: marks assistant spans, renders its body.
      n->kind = Node::Kind::kScopeless;
      QS_RETURN_IF_ERROR(expect_block_end());
      std::string end;
      QS_RETURN_IF_ERROR(parse_body({"endgeneration"}, n->body, end, tag.line, "generation"));
    } else {
      static const std::set<std::string> kKnown = {
          "raw",  "call",       "include",   "import",  "from",     "extends", "block",    "with",
          "do",   "autoescape", "trans",     "endif",   "endfor",   "endset",  "endmacro", "elif",
          "else", "endraw",     "endfilter", "endcall", "endblock", "endwith"};
      if (kKnown.count(name)) {
        if (name.rfind("end", 0) == 0 || name == "elif" || name == "else") {
          return error(tag, "unexpected '" + name + "' tag (no open block it could close)");
        }
        return error(tag, "unsupported construct: '{% " + name + " %}' tags");
      }
      return error(tag, "unknown tag '" + name + "'");
    }
    QS_RETURN_IF_ERROR(expect_block_end());
    body.push_back(std::move(n));
    return ok_status();
  }

  ExprPtr make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  Result<ExprPtr> parse_expression() {
    QS_ASSIGN_OR_RETURN(ExprPtr expr, parse_or());
    while (is_name("if")) {
      int line = next().line;
      auto cond = make(Expr::Kind::kCond, line);
      QS_ASSIGN_OR_RETURN(ExprPtr test, parse_or());
      ExprPtr otherwise;
      if (skip_name("else")) {
        QS_ASSIGN_OR_RETURN(otherwise, parse_expression());
      }
      cond->args.push_back(std::move(test));
      cond->args.push_back(std::move(expr));
      cond->args.push_back(std::move(otherwise));
      expr = std::move(cond);
    }
    return expr;
  }

  Result<ExprPtr> parse_or() {
    QS_ASSIGN_OR_RETURN(ExprPtr left, parse_and());
    while (is_name("or")) {
      auto e = make(Expr::Kind::kOr, next().line);
      QS_ASSIGN_OR_RETURN(ExprPtr right, parse_and());
      e->args.push_back(std::move(left));
      e->args.push_back(std::move(right));
      left = std::move(e);
    }
    return left;
  }

  Result<ExprPtr> parse_and() {
    QS_ASSIGN_OR_RETURN(ExprPtr left, parse_not());
    while (is_name("and")) {
      auto e = make(Expr::Kind::kAnd, next().line);
      QS_ASSIGN_OR_RETURN(ExprPtr right, parse_not());
      e->args.push_back(std::move(left));
      e->args.push_back(std::move(right));
      left = std::move(e);
    }
    return left;
  }

  Result<ExprPtr> parse_not() {
    DepthGuard guard(depth_);
    if (depth_ > kMaxDepth) return error(peek(), "expression nested too deeply");
    if (is_name("not")) {
      auto e = make(Expr::Kind::kNot, next().line);
      QS_ASSIGN_OR_RETURN(ExprPtr operand, parse_not());
      e->args.push_back(std::move(operand));
      return e;
    }
    return parse_compare();
  }

  Result<ExprPtr> parse_compare() {
    int line = peek().line;
    QS_ASSIGN_OR_RETURN(ExprPtr first, parse_math1());
    auto cmp = make(Expr::Kind::kCompare, line);
    cmp->args.push_back(std::move(first));
    while (true) {
      std::string op;
      const Token& t = peek();
      if (t.type == TokenType::kOp && (t.text == "==" || t.text == "!=" || t.text == "<" ||
                                       t.text == ">" || t.text == "<=" || t.text == ">=")) {
        op = t.text;
        ++pos_;
      } else if (is_name("in")) {
        op = "in";
        ++pos_;
      } else if (is_name("not") && is_name("in", 1)) {
        op = "not in";
        pos_ += 2;
      } else {
        break;
      }
      QS_ASSIGN_OR_RETURN(ExprPtr operand, parse_math1());
      cmp->ops.push_back(op);
      cmp->args.push_back(std::move(operand));
    }
    if (cmp->ops.empty()) return std::move(cmp->args[0]);
    return cmp;
  }

  Result<ExprPtr> binary(ExprPtr left, const std::string& op, ExprPtr right, int line) {
    auto e = make(Expr::Kind::kBinary, line);
    e->name = op;
    e->args.push_back(std::move(left));
    e->args.push_back(std::move(right));
    return e;
  }

  Result<ExprPtr> parse_math1() {
    QS_ASSIGN_OR_RETURN(ExprPtr left, parse_concat());
    while (is_op("+") || is_op("-")) {
      const Token& t = next();
      QS_ASSIGN_OR_RETURN(ExprPtr right, parse_concat());
      QS_ASSIGN_OR_RETURN(left, binary(std::move(left), t.text, std::move(right), t.line));
    }
    return left;
  }

  Result<ExprPtr> parse_concat() {
    QS_ASSIGN_OR_RETURN(ExprPtr left, parse_math2());
    while (is_op("~")) {
      const Token& t = next();
      QS_ASSIGN_OR_RETURN(ExprPtr right, parse_math2());
      QS_ASSIGN_OR_RETURN(left, binary(std::move(left), "~", std::move(right), t.line));
    }
    return left;
  }

  Result<ExprPtr> parse_math2() {
    QS_ASSIGN_OR_RETURN(ExprPtr left, parse_pow());
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = next();
      QS_ASSIGN_OR_RETURN(ExprPtr right, parse_pow());
      QS_ASSIGN_OR_RETURN(left, binary(std::move(left), t.text, std::move(right), t.line));
    }
    return left;
  }

  Result<ExprPtr> parse_pow() {
    QS_ASSIGN_OR_RETURN(ExprPtr left, parse_unary(true));
    while (is_op("**")) {
      const Token& t = next();
      QS_ASSIGN_OR_RETURN(ExprPtr right, parse_unary(true));
      QS_ASSIGN_OR_RETURN(left, binary(std::move(left), "**", std::move(right), t.line));
    }
    return left;
  }

  Result<ExprPtr> parse_unary(bool with_filter) {
    DepthGuard guard(depth_);
    if (depth_ > kMaxDepth) return error(peek(), "expression nested too deeply");
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      const Token& t = next();
      node = make(t.text == "-" ? Expr::Kind::kNeg : Expr::Kind::kPos, t.line);
      QS_ASSIGN_OR_RETURN(ExprPtr operand, parse_unary(false));
      node->args.push_back(std::move(operand));
    } else {
      QS_ASSIGN_OR_RETURN(node, parse_primary());
    }
    QS_ASSIGN_OR_RETURN(node, parse_postfix(std::move(node)));
    if (with_filter) {
      QS_ASSIGN_OR_RETURN(node, parse_filter_expr(std::move(node)));
    }
    return node;
  }

  Result<ExprPtr> parse_primary() {
    const Token& t = next();
    switch (t.type) {
      case TokenType::kName: {
        if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
          auto e = make(Expr::Kind::kLiteral, t.line);
          e->literal = Value(t.text[0] == 't' || t.text[0] == 'T');
          return e;
        }
        if (t.text == "none" || t.text == "None") {
          auto e = make(Expr::Kind::kLiteral, t.line);
          e->literal = Value(None{});
          return e;
        }
        auto e = make(Expr::Kind::kName, t.line);
        e->name = t.text;
        return e;
      }
      case TokenType::kString: {
        std::string s = t.text;
        while (peek().type == TokenType::kString) s += next().text;  // "a" "b" concatenates
        auto e = make(Expr::Kind::kLiteral, t.line);
        e->literal = Value(std::move(s));
        return e;
      }
      case TokenType::kInt: {
        auto e = make(Expr::Kind::kLiteral, t.line);
        e->literal = Value(t.int_value);
        return e;
      }
      case TokenType::kFloat: {
        auto e = make(Expr::Kind::kLiteral, t.line);
        e->literal = Value(t.float_value);
        return e;
      }
      case TokenType::kOp:
        if (t.text == "(") {
          if (skip_op(")")) return make(Expr::Kind::kTuple, t.line);
          QS_ASSIGN_OR_RETURN(ExprPtr first, parse_expression());
          if (skip_op(")")) return first;
          auto tuple = make(Expr::Kind::kTuple, t.line);
          tuple->args.push_back(std::move(first));
          while (skip_op(",")) {
            if (is_op(")")) break;
            QS_ASSIGN_OR_RETURN(ExprPtr item, parse_expression());
            tuple->args.push_back(std::move(item));
          }
          QS_RETURN_IF_ERROR(expect_op(")"));
          return tuple;
        }
        if (t.text == "[") {
          auto list = make(Expr::Kind::kList, t.line);
          while (!skip_op("]")) {
            if (!list->args.empty()) {
              QS_RETURN_IF_ERROR(expect_op(","));
              if (skip_op("]")) break;
            }
            QS_ASSIGN_OR_RETURN(ExprPtr item, parse_expression());
            list->args.push_back(std::move(item));
          }
          return list;
        }
        if (t.text == "{") {
          auto dict = make(Expr::Kind::kDict, t.line);
          while (!skip_op("}")) {
            if (!dict->args.empty()) {
              QS_RETURN_IF_ERROR(expect_op(","));
              if (skip_op("}")) break;
            }
            QS_ASSIGN_OR_RETURN(ExprPtr key, parse_expression());
            QS_RETURN_IF_ERROR(expect_op(":"));
            QS_ASSIGN_OR_RETURN(ExprPtr value, parse_expression());
            dict->args.push_back(std::move(key));
            dict->args.push_back(std::move(value));
          }
          return dict;
        }
        break;
      default:
        break;
    }
    return error(t, "unexpected " + describe(t) + " in expression");
  }

  Result<ExprPtr> parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".")) {
        int line = next().line;
        const Token& t = next();
        if (t.type == TokenType::kName) {
          auto e = make(Expr::Kind::kAttr, line);
          e->name = t.text;
          e->args.push_back(std::move(node));
          node = std::move(e);
        } else if (t.type == TokenType::kInt) {  // x.0 is x[0]
          auto e = make(Expr::Kind::kItem, line);
          auto idx = make(Expr::Kind::kLiteral, line);
          idx->literal = Value(t.int_value);
          e->args.push_back(std::move(node));
          e->args.push_back(std::move(idx));
          node = std::move(e);
        } else {
          return error(t, "expected an attribute name after '.', got " + describe(t));
        }
      } else if (is_op("[")) {
        QS_ASSIGN_OR_RETURN(node, parse_subscript(std::move(node)));
      } else if (is_op("(")) {
        QS_ASSIGN_OR_RETURN(node, parse_call(std::move(node), Expr::Kind::kCall, ""));
      } else {
        return node;
      }
    }
  }

  Result<ExprPtr> parse_subscript(ExprPtr node) {
    int line = next().line;  // '['
    ExprPtr parts[3];
    bool is_slice = false;
    for (int i = 0; i < 3; ++i) {
      if (!is_op(":") && !is_op("]")) {
        QS_ASSIGN_OR_RETURN(parts[i], parse_expression());
      }
      if (i < 2 && skip_op(":")) {
        is_slice = true;
        continue;
      }
      break;
    }
    QS_RETURN_IF_ERROR(expect_op("]"));
    if (!is_slice) {
      if (!parts[0]) return error(peek(), "empty subscript");
      auto e = make(Expr::Kind::kItem, line);
      e->args.push_back(std::move(node));
      e->args.push_back(std::move(parts[0]));
      return e;
    }
    auto e = make(Expr::Kind::kSlice, line);
    e->args.push_back(std::move(node));
    for (auto& p : parts) e->args.push_back(std::move(p));
    return e;
  }

  // Parses "(args, k=v)" after `callee`; the call node is `kind` with args[0] = callee.
  Result<ExprPtr> parse_call(ExprPtr callee, Expr::Kind kind, const std::string& name) {
    int line = next().line;  // '('
    auto e = make(kind, line);
    e->name = name;
    e->args.push_back(std::move(callee));
    bool first = true;
    while (!skip_op(")")) {
      if (!first) {
        QS_RETURN_IF_ERROR(expect_op(","));
        if (skip_op(")")) break;
      }
      first = false;
      if (is_op("*") || is_op("**")) return error(peek(), "unsupported construct: *args in calls");
      if (peek().type == TokenType::kName && is_op("=", 1)) {
        std::string key = next().text;
        ++pos_;
        QS_ASSIGN_OR_RETURN(ExprPtr value, parse_expression());
        e->kwargs.emplace_back(std::move(key), std::move(value));
      } else {
        if (!e->kwargs.empty())
          return error(peek(), "positional argument follows keyword argument");
        QS_ASSIGN_OR_RETURN(ExprPtr value, parse_expression());
        e->args.push_back(std::move(value));
      }
    }
    return e;
  }

  Result<ExprPtr> parse_filter(ExprPtr node) {
    int line = peek().line;
    QS_ASSIGN_OR_RETURN(std::string name, expect_name());
    while (skip_op(".")) {
      QS_ASSIGN_OR_RETURN(std::string part, expect_name());
      name += "." + part;
    }
    if (is_op("(")) return parse_call(std::move(node), Expr::Kind::kFilter, name);
    auto e = make(Expr::Kind::kFilter, line);
    e->name = name;
    e->args.push_back(std::move(node));
    return e;
  }

  Result<ExprPtr> parse_filter_expr(ExprPtr node) {
    while (true) {
      if (skip_op("|")) {
        QS_ASSIGN_OR_RETURN(node, parse_filter(std::move(node)));
      } else if (is_name("is")) {
        int line = next().line;
        bool negated = skip_name("not");
        QS_ASSIGN_OR_RETURN(std::string name, expect_name());
        ExprPtr test;
        if (is_op("(")) {
          QS_ASSIGN_OR_RETURN(test, parse_call(std::move(node), Expr::Kind::kTest, name));
        } else {
          test = make(Expr::Kind::kTest, line);
          test->name = name;
          test->args.push_back(std::move(node));
          // `x is divisibleby 3`: one bare argument, as jinja2 allows.
          const Token& t = peek();
          bool arg_follows = t.type == TokenType::kString || t.type == TokenType::kInt ||
                             t.type == TokenType::kFloat ||
                             (t.type == TokenType::kOp && (t.text == "[" || t.text == "{")) ||
                             (t.type == TokenType::kName && t.text != "else" && t.text != "or" &&
                              t.text != "and" && t.text != "if" && t.text != "in" &&
                              t.text != "not" && t.text != "is");
          if (arg_follows) {
            QS_ASSIGN_OR_RETURN(ExprPtr arg, parse_primary());
            QS_ASSIGN_OR_RETURN(arg, parse_postfix(std::move(arg)));
            test->args.push_back(std::move(arg));
          }
        }
        test->negated = negated;
        test->line = line;
        node = std::move(test);
      } else if (is_op("(")) {
        QS_ASSIGN_OR_RETURN(node, parse_call(std::move(node), Expr::Kind::kCall, ""));
      } else {
        return node;
      }
    }
  }

  // Recursive descent uses the C++ stack, so nesting is capped (jinja2 itself gives up near
  // 80 levels, at Python's recursion limit) and deeper input is an error, not a crash.
  static constexpr int kMaxDepth = limits::kMaxTemplateNesting;
  struct DepthGuard {
    explicit DepthGuard(int& depth) : depth_ref(++depth) {}
    ~DepthGuard() { --depth_ref; }
    int& depth_ref;
  };

  std::vector<Token> toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;  // for loops open around the tag being parsed
};

}  // namespace

Result<Body> parse_template(std::string_view source, const LexOptions& options) {
  QS_ASSIGN_OR_RETURN(std::vector<Token> tokens, tokenize(source, options));
  return Parser(std::move(tokens)).parse_all();
}

}  // namespace qs::jinja
