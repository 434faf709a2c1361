// template: the lexer. Whitespace handling mirrors jinja2/lexer.py (tokeniter):
// `{%-` strips all whitespace before a tag, `-%}` all after; lstrip_blocks strips spaces
// before `{%`/`{#` when only whitespace separates them from the line start; trim_blocks eats
// one newline after `%}`/`#}`; `+` opts out of either.
#include "template/jinja_lexer.h"

#include <cctype>

#include "template/jinja_strings.h"

namespace qs::jinja {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

Status error_at(int line, const std::string& msg) {
  return invalid_argument("template line " + std::to_string(line) + ": " + msg);
}

std::string rstrip_ws(std::string_view s) {
  size_t n = s.size();
  while (n > 0 && is_space(s[n - 1])) --n;
  return std::string(s.substr(0, n));
}

// Decodes a string literal body the way jinja2 does (Python's "unicode-escape"); an
// unknown escape keeps its backslash, as Python does.
Result<std::string> decode_string(std::string_view body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out += c;
      continue;
    }
    char e = body[++i];
    switch (e) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'v':
        out += '\v';
        break;
      case '\n':
        break;  // a backslash-newline continues the line
      case 'x':
      case 'u':
      case 'U': {
        size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        if (i + n >= body.size()) {
          return error_at(line, "truncated \\" + std::string(1, e) + " escape in string literal");
        }
        uint32_t cp = 0;
        for (size_t k = 1; k <= n; ++k) {
          char h = body[i + k];
          if (!std::isxdigit(static_cast<unsigned char>(h))) {
            return error_at(line, "bad \\" + std::string(1, e) + " escape in string literal");
          }
          cp = cp * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h))
                                                   ? h - '0'
                                                   : std::tolower(h) - 'a' + 10);
        }
        if (cp > 0x10ffff) return error_at(line, "escape beyond U+10FFFF in string literal");
        append_utf8(cp, out);
        i += n;
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = 0;
          size_t k = 0;
          while (k < 3 && i + k < body.size() && body[i + k] >= '0' && body[i + k] <= '7') {
            cp = cp * 8 + static_cast<uint32_t>(body[i + k] - '0');
            ++k;
          }
          append_utf8(cp, out);
          i += k - 1;
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(std::string source, const LexOptions& options) : src_(std::move(source)), opt_(options) {}

  Result<std::vector<Token>> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      size_t at = find_tag_start(pos_);
      std::string_view text(src_.data() + pos_,
                            (at == std::string::npos ? src_.size() : at) - pos_);
      if (at == std::string::npos) {
        emit_text(std::string(text));
        break;
      }
      char kind = src_[at + 1];
      char sign =
          at + 2 < src_.size() && (src_[at + 2] == '-' || src_[at + 2] == '+') ? src_[at + 2] : 0;
      std::string kept(text);
      if (sign == '-') {
        kept = rstrip_ws(text);
      } else if (sign != '+' && opt_.lstrip_blocks && kind != '{') {
        size_t nl = text.rfind('\n');
        size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
        if (l_pos > 0 || line_starting) {
          std::string_view tail = text.substr(l_pos);
          bool all_ws = !tail.empty();
          for (char c : tail) all_ws = all_ws && is_space(c);
          if (all_ws) kept = std::string(text.substr(0, l_pos));
        }
      }
      int text_line = line_;
      for (char c : text) line_ += c == '\n';
      emit_text(std::move(kept), text_line);
      pos_ = at + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        QS_RETURN_IF_ERROR(skip_comment());
      } else {
        QS_RETURN_IF_ERROR(lex_tag(kind == '{'));
      }
      line_starting = pos_ > 0 && src_[pos_ - 1] == '\n';
    }
    tokens_.push_back({TokenType::kEof, "", line_});
    return std::move(tokens_);
  }

 private:
  size_t find_tag_start(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    }
    return std::string::npos;
  }

  void emit_text(std::string text, int line = -1) {
    if (text.empty()) return;
    tokens_.push_back({TokenType::kText, std::move(text), line < 0 ? line_ : line});
  }

  // After a closing delimiter: `-` eats all whitespace, `+` nothing, else trim_blocks may eat
  // one newline (block and comment tags only, never after `}}`).
  void after_close(char sign, bool is_block) {
    if (sign == '-') {
      while (pos_ < src_.size() && is_space(src_[pos_])) line_ += src_[pos_++] == '\n';
    } else if (sign != '+' && is_block && opt_.trim_blocks && pos_ < src_.size() &&
               src_[pos_] == '\n') {
      ++pos_;
      ++line_;
    }
  }

  Status skip_comment() {
    int start_line = line_;
    size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) return error_at(start_line, "missing end of comment tag");
    char sign = end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : 0;
    for (size_t i = pos_; i < end; ++i) line_ += src_[i] == '\n';
    pos_ = end + 2;
    after_close(sign, true);
    return ok_status();
  }

  Status lex_tag(bool is_var) {
    tokens_.push_back({is_var ? TokenType::kVarBegin : TokenType::kBlockBegin, "", line_});
    int start_line = line_;
    std::vector<char> balance;
    while (true) {
      while (pos_ < src_.size() && is_space(src_[pos_])) line_ += src_[pos_++] == '\n';
      if (pos_ >= src_.size()) {
        return error_at(start_line, std::string("unclosed tag: missing '") +
                                        (is_var ? "}}" : "%}") +
                                        "' before the end of the template");
      }
      if (balance.empty()) {
        std::string_view rest(src_.data() + pos_, src_.size() - pos_);
        const char* close = is_var ? "}}" : "%}";
        char sign = 0;
        size_t len = 0;
        if ((rest.size() >= 3 && (rest[0] == '-' || (rest[0] == '+' && !is_var)) &&
             rest.substr(1, 2) == close)) {
          sign = rest[0];
          len = 3;
        } else if (rest.substr(0, 2) == close) {
          len = 2;
        }
        if (len) {
          tokens_.push_back({is_var ? TokenType::kVarEnd : TokenType::kBlockEnd, "", line_});
          pos_ += len;
          after_close(sign, !is_var);
          return ok_status();
        }
      }
      QS_RETURN_IF_ERROR(lex_one(balance));
    }
  }

  Status lex_one(std::vector<char>& balance) {
    char c = src_[pos_];
    if (std::isdigit(static_cast<unsigned char>(c))) return lex_number();
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t start = pos_;
      while (pos_ < src_.size() &&
             (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_'))
        ++pos_;
      tokens_.push_back({TokenType::kName, src_.substr(start, pos_ - start), line_});
      return ok_status();
    }
    if (c == '\'' || c == '"') {
      int start_line = line_;
      size_t i = pos_ + 1;
      while (i < src_.size() && src_[i] != c) {
        if (src_[i] == '\\') ++i;
        ++i;
      }
      if (i >= src_.size()) return error_at(start_line, "unterminated string literal");
      std::string_view body(src_.data() + pos_ + 1, i - pos_ - 1);
      for (char b : body) line_ += b == '\n';
      QS_ASSIGN_OR_RETURN(std::string value, decode_string(body, start_line));
      tokens_.push_back({TokenType::kString, std::move(value), start_line});
      pos_ = i + 1;
      return ok_status();
    }
    static const char* kTwoCharOps[] = {"**", "//", "==", "!=", "<=", ">="};
    for (const char* op : kTwoCharOps) {
      if (src_.compare(pos_, 2, op) == 0) {
        tokens_.push_back({TokenType::kOp, op, line_});
        pos_ += 2;
        return ok_status();
      }
    }
    static const std::string kOneCharOps = "+-*/%~[](){}<>=.:|,;";
    if (kOneCharOps.find(c) == std::string::npos) {
      return error_at(line_, std::string("unexpected character '") + c + "' in tag");
    }
    if (c == '(' || c == '[' || c == '{') {
      balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) return error_at(line_, std::string("unexpected '") + c + "'");
      if (balance.back() != c) {
        return error_at(line_,
                        std::string("unexpected '") + c + "', expected '" + balance.back() + "'");
      }
      balance.pop_back();
    }
    tokens_.push_back({TokenType::kOp, std::string(1, c), line_});
    ++pos_;
    return ok_status();
  }

  Status lex_number() {
    size_t start = pos_;
    auto digits = [&] {
      while (pos_ < src_.size() &&
             (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_'))
        ++pos_;
    };
    digits();
    bool is_float = false;
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
      is_float = true;
      ++pos_;
      digits();
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t save = pos_;
      ++pos_;
      if (pos_ < src_.size() && (src_[pos_] == '+' || src_[pos_] == '-')) ++pos_;
      if (pos_ < src_.size() && std::isdigit(static_cast<unsigned char>(src_[pos_]))) {
        is_float = true;
        digits();
      } else {
        pos_ = save;
      }
    }
    std::string text;
    for (size_t i = start; i < pos_; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    Token t{is_float ? TokenType::kFloat : TokenType::kInt, text, line_};
    try {
      if (is_float) {
        t.float_value = std::stod(text);
      } else {
        t.int_value = std::stoll(text);
      }
    } catch (const std::exception&) {  // std::out_of_range: too many digits
      return error_at(line_, "number literal out of range: " + text);
    }
    tokens_.push_back(std::move(t));
    return ok_status();
  }

  std::string src_;
  LexOptions opt_;
  size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

// jinja2 splits the source on \r\n, \r and \n, rejoins with \n, and (keep_trailing_newline
// being off) drops one final newline.
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

Result<std::vector<Token>> tokenize(std::string_view source, const LexOptions& options) {
  return Lexer(normalize_newlines(source), options).run();
}

}  // namespace qs::jinja
