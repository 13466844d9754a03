// The lexer and recursive-descent parser of predicate text. Tokens are read on demand, so an
// error names what the grammar expected at that point; nesting is bounded, so no input can
// exhaust the stack.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>

#include "compiler/ir/predicate.hpp"

namespace attnjit {

PredicateParseError::PredicateParseError(int line, int column, const std::string& message)
    : Error(fmt::format("mask expression, line {} column {}: {}", line, column, message)),
      line_(line),
      column_(column) {}

namespace {

enum class TokenKind { end, number, slot, identifier, punct, invalid };

struct Token {
  TokenKind kind = TokenKind::end;
  std::string_view text;
  int line = 1;
  int column = 1;
  std::uint64_t number = 0;  ///< number and slot: the value, capped at 2^32
};

bool is_identifier_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// The operators and punctuation, two-character ones first.
constexpr std::array<std::string_view, 21> kPunctuation{"<=", ">=", "==", "!=", "&&", "||", "(",
                                                        ")",  "[",  "]",  ",",  "+",  "-",  "*",
                                                        "/",  "%",  "<",  ">",  "!",  "$",  "="};

class Lexer {
 public:
  explicit Lexer(std::string_view text) : text_(text) {}

  /// The token at the cursor, without consuming it.
  const Token& peek() {
    if (!peeked_) peeked_ = scan();
    return *peeked_;
  }

  Token next() {
    Token token = peek();
    peeked_.reset();
    return token;
  }

 private:
  Token scan() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      advance(1);
    }
    Token token;
    token.line = line_;
    token.column = column_;
    if (pos_ == text_.size()) return token;
    const std::size_t start = pos_;
    const char c = text_[pos_];
    if (is_digit(c)) {
      token.kind = TokenKind::number;
      token.number = digits_value(start);
    } else if (c == '$' && pos_ + 1 < text_.size() && is_digit(text_[pos_ + 1])) {
      token.kind = TokenKind::slot;
      token.number = digits_value(start + 1);
    } else if (is_identifier_start(c)) {
      token.kind = TokenKind::identifier;
      std::size_t end = start;
      while (end < text_.size() && (is_identifier_start(text_[end]) || is_digit(text_[end]))) {
        ++end;
      }
      advance(end - start);
    } else {
      token.kind = TokenKind::invalid;
      advance(1);
      for (std::string_view punct : kPunctuation) {
        if (text_.substr(start, punct.size()) == punct) {
          token.kind = TokenKind::punct;
          advance(punct.size() - 1);
          break;
        }
      }
    }
    token.text = text_.substr(start, pos_ - start);
    return token;
  }

  // Consumes the digits from `from` and returns their value, capped at 2^32 (out of range).
  std::uint64_t digits_value(std::size_t from) {
    std::uint64_t value = 0;
    std::size_t end = from;
    while (end < text_.size() && is_digit(text_[end])) {
      value = std::min<std::uint64_t>(value * 10 + (text_[end] - '0'), std::uint64_t{1} << 32);
      ++end;
    }
    advance(end - pos_);
    return value;
  }

  void advance(std::size_t count) {
    for (std::size_t i = 0; i < count; ++i, ++pos_) {
      if (text_[pos_] == '\n') {
        ++line_;
        column_ = 1;
      } else {
        ++column_;
      }
    }
  }

  std::string_view text_;
  std::size_t pos_ = 0;
  int line_ = 1;
  int column_ = 1;
  std::optional<Token> peeked_;
};

// How a token is quoted in a message: printable ASCII as is (long ones shortened), other bytes
// as \xNN.
std::string describe(const Token& token) {
  if (token.kind == TokenKind::end) return "end of input";
  std::string out = "'";
  const std::string_view text = token.text.substr(0, 32);
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    out += byte >= 0x20 && byte < 0x7f ? std::string(1, c) : fmt::format("\\x{:02x}", byte);
  }
  if (text.size() < token.text.size()) out += "...";
  return out + "'";
}

struct BinaryOperator {
  std::string_view text;
  PredicateOp op;
};

// Binary operators by precedence level, loosest first.
constexpr std::array<std::array<BinaryOperator, 4>, 6> kLevels{{
    {{{"||", PredicateOp::logical_or}}},
    {{{"&&", PredicateOp::logical_and}}},
    {{{"==", PredicateOp::equal}, {"!=", PredicateOp::not_equal}}},
    {{{"<", PredicateOp::less},
      {"<=", PredicateOp::less_equal},
      {">", PredicateOp::greater},
      {">=", PredicateOp::greater_equal}}},
    {{{"+", PredicateOp::add}, {"-", PredicateOp::sub}}},
    {{{"*", PredicateOp::mul}, {"/", PredicateOp::div}, {"%", PredicateOp::mod}}},
}};

class Parser {
 public:
  Parser(std::string_view text, const PredicateParseOptions& options)
      : lexer_(text), options_(options) {}

  Predicate parse() {
    parse_binary(0);
    const Token& trailing = lexer_.peek();
    if (trailing.kind != TokenKind::end) {
      fail(trailing, fmt::format("expected an operator or end of input, got {}{}",
                                 describe(trailing), hint(trailing)));
    }
    return Predicate{std::move(nodes_)};
  }

 private:
  // The nesting of parentheses, indices, calls and unary operators (the parser's recursion).
  class Nesting {
   public:
    Nesting(Parser& parser, const Token& at) : parser_(parser) {
      if (++parser_.nesting_ > kMaxPredicateDepth) parser_.fail_depth(at);
    }
    ~Nesting() { --parser_.nesting_; }
    Nesting(const Nesting&) = delete;
    Nesting& operator=(const Nesting&) = delete;

   private:
    Parser& parser_;
  };

  [[noreturn]] void fail(const Token& at, const std::string& message) {
    throw PredicateParseError(at.line, at.column, message);
  }

  [[noreturn]] void fail_depth(const Token& at) {
    fail(at, fmt::format("expected an expression at most {} levels deep (every parenthesis, "
                         "index, call and operator adds one, so a chain like a + b + c ... "
                         "adds one per operator; group long chains, e.g. (a + b) + (c + d)), "
                         "got a deeper one at {}",
                         kMaxPredicateDepth, describe(at)));
  }

  static std::string hint(const Token& token) {
    if (token.text == "=") return " (did you mean '=='?)";
    if (token.text == "&") return " (did you mean '&&'?)";
    if (token.text == "|") return " (did you mean '||'?)";
    if (token.text == "[") return " (a tensor is indexed once, and only a tensor is indexed)";
    return "";
  }

  static std::string position(const Token& open, const Token& here) {
    if (open.line == here.line) return fmt::format("column {}", open.column);
    return fmt::format("line {} column {}", open.line, open.column);
  }

  // Appends a node whose operands are the last nodes appended; returns its index.
  int add(const Token& at, PredicateOp op, int lhs = -1, int rhs = -1, std::int32_t value = 0,
          std::string_view tensor = {}) {
    int depth = 1;
    if (lhs >= 0) depth = std::max(depth, depths_[lhs] + 1);
    if (rhs >= 0) depth = std::max(depth, depths_[rhs] + 1);
    if (depth > kMaxPredicateDepth) fail_depth(at);
    nodes_.push_back(PredicateNode{op, value, std::string(tensor), lhs, rhs});
    depths_.push_back(depth);
    return static_cast<int>(nodes_.size()) - 1;
  }

  bool accept(std::string_view punct) {
    const Token& token = lexer_.peek();
    if (token.kind != TokenKind::punct || token.text != punct) return false;
    lexer_.next();
    return true;
  }

  void expect_close(std::string_view close, const Token& open, std::string_view opened) {
    const Token& token = lexer_.peek();
    if (token.kind == TokenKind::punct && token.text == close) {
      lexer_.next();
      return;
    }
    fail(token, fmt::format("expected '{}' to close '{}' at {}, got {}{}", close, opened,
                            position(open, token), describe(token), hint(token)));
  }

  int parse_binary(std::size_t level) {
    if (level == kLevels.size()) return parse_unary();
    int lhs = parse_binary(level + 1);
    for (;;) {
      const Token token = lexer_.peek();
      const BinaryOperator* match = nullptr;
      if (token.kind == TokenKind::punct) {
        for (const BinaryOperator& candidate : kLevels[level]) {
          if (!candidate.text.empty() && candidate.text == token.text) match = &candidate;
        }
      }
      if (match == nullptr) return lhs;
      lexer_.next();
      const int rhs = parse_binary(level + 1);
      lhs = add(token, match->op, lhs, rhs);
    }
  }

  int parse_unary() {
    const Token token = lexer_.peek();
    if (token.kind == TokenKind::punct && (token.text == "-" || token.text == "!")) {
      lexer_.next();
      if (token.text == "-" && lexer_.peek().kind == TokenKind::number) {
        return parse_literal(lexer_.next(), true);
      }
      const Nesting nesting(*this, token);
      const int operand = parse_unary();
      return add(token, token.text == "-" ? PredicateOp::negate : PredicateOp::logical_not,
                 operand);
    }
    return parse_primary();
  }

  int parse_literal(const Token& token, bool negative) {
    const std::uint64_t limit = negative ? std::uint64_t{1} << 31 : (std::uint64_t{1} << 31) - 1;
    if (token.number > limit) {
      fail(token, fmt::format("expected an integer literal in int32 range [-2147483648, "
                              "2147483647], got {}{}",
                              negative ? "'-" : "", describe(token).substr(negative ? 1 : 0)));
    }
    const auto magnitude = static_cast<std::int64_t>(token.number);
    return add(token, PredicateOp::literal, -1, -1,
               static_cast<std::int32_t>(negative ? -magnitude : magnitude));
  }

  int parse_primary() {
    const Token token = lexer_.next();
    switch (token.kind) {
      case TokenKind::number:
        return parse_literal(token, false);
      case TokenKind::slot:
        if (token.number >= static_cast<std::uint64_t>(kMaxPredicateSlots)) {
          fail(token, fmt::format("expected a scalar slot $0 .. ${}, got {}",
                                  kMaxPredicateSlots - 1, describe(token)));
        }
        return add(token, PredicateOp::scalar, -1, -1, static_cast<std::int32_t>(token.number));
      case TokenKind::identifier:
        return parse_name(token);
      case TokenKind::punct:
        if (token.text == "(") {
          const Nesting nesting(*this, token);
          const int inner = parse_binary(0);
          expect_close(")", token, "(");
          return inner;
        }
        break;
      case TokenKind::end:
      case TokenKind::invalid:
        break;
    }
    fail(token, fmt::format("expected an operand (a number, b, h, q, k, $N, name[index], "
                            "min, max, abs or '('), got {}{}",
                            describe(token),
                            token.text == "$" ? " (a slot is $ and a number)" : hint(token)));
  }

  int parse_name(const Token& token) {
    constexpr std::array<std::pair<std::string_view, PredicateOp>, 4> kVariables{
        {{"b", PredicateOp::batch},
         {"h", PredicateOp::head},
         {"q", PredicateOp::query},
         {"k", PredicateOp::key}}};
    for (const auto& [name, op] : kVariables) {
      if (token.text == name) return add(token, op);
    }
    if (token.text == "min" || token.text == "max" || token.text == "abs") {
      return parse_call(token);
    }
    const Token& open = lexer_.peek();
    if (open.kind == TokenKind::punct && open.text == "(") {
      fail(token, fmt::format("expected a function min, max or abs, got {}", describe(token)));
    }
    if (open.kind != TokenKind::punct || open.text != "[") {
      fail(open, fmt::format("expected '[' after tensor {} (a tensor is read as {}[index]), "
                             "got {}",
                             describe(token), token.text.size() <= 32 ? token.text : "name",
                             describe(open)));
    }
    if (token.text.starts_with("_") && !options_.allow_reserved_tensor_names) {
      fail(token, fmt::format("expected a tensor name not starting with '_' (reserved for "
                              "generated tensors), got {}",
                              describe(token)));
    }
    const Token bracket = lexer_.next();
    const Nesting nesting(*this, bracket);
    const int index = parse_binary(0);
    expect_close("]", bracket, "[");
    return add(token, PredicateOp::tensor_read, index, -1, 0, token.text);
  }

  int parse_call(const Token& name) {
    const Token open = lexer_.peek();
    if (open.kind != TokenKind::punct || open.text != "(") {
      fail(open, fmt::format("expected '(' after '{}', got {}", name.text, describe(open)));
    }
    lexer_.next();
    const Nesting nesting(*this, open);
    const std::string opened = fmt::format("{}(", name.text);
    const int first = parse_binary(0);
    if (name.text == "abs") {
      expect_close(")", name, opened);
      return add(name, PredicateOp::abs, first);
    }
    const Token comma = lexer_.peek();
    if (!accept(",")) {
      fail(comma, fmt::format("expected ',' between the two arguments of '{}', got {}", name.text,
                              describe(comma)));
    }
    const int second = parse_binary(0);
    expect_close(")", name, opened);
    return add(name, name.text == "min" ? PredicateOp::min : PredicateOp::max, first, second);
  }

  Lexer lexer_;
  PredicateParseOptions options_;
  std::vector<PredicateNode> nodes_;
  std::vector<int> depths_;
  int nesting_ = 0;
};

}  // namespace

Predicate parse_predicate(std::string_view text, const PredicateParseOptions& options) {
  return Parser(text, options).parse();
}

}  // namespace attnjit
