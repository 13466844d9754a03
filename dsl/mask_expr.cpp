// The mask-language parser. Top level first: the text is split at single `&` and `|` outside
// parentheses and brackets (`&&` and `||` stay inside predicates); each operand is a family
// call, `predicate(...)`, a parenthesised mask expression, or predicate text handed to
// parse_predicate, whose error positions are mapped back to the whole text.
#include "dsl/mask_expr.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <climits>
#include <optional>
#include <utility>
#include <vector>

#include "dsl/mask_families.hpp"

namespace attnjit::dsl {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}
bool is_identifier_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// The functions of the predicate language (compiler/ir/predicate_parse.cpp) and its variables.
constexpr std::array<std::string_view, 3> kFunctions{"min", "max", "abs"};
constexpr std::array<std::string_view, 4> kVariables{"b", "h", "q", "k"};

// Edits (insertions, deletions, substitutions, swaps of neighbours) that turn `a` into `b`.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// "unknown function 'documnet'; did you mean 'document'? accepted: ...": every name a call
// may take, the families from the family table.
std::string unknown_function(std::string_view name) {
  std::vector<std::string_view> names(kFunctions.begin(), kFunctions.end());
  names.push_back("predicate");
  std::string families;
  for (const FamilyRow& row : family_table()) {
    names.push_back(row.name);
    families += fmt::format("{}{}", families.empty() ? "" : ", ", row.name);
  }
  const std::size_t limit = name.size() <= 4 ? 1 : 2;
  std::string_view closest;
  std::size_t best = limit + 1;
  for (std::string_view candidate : names) {
    const std::size_t distance = edit_distance(name, candidate);
    if (distance < best) {
      best = distance;
      closest = candidate;
    }
  }
  return fmt::format(
      "unknown function '{}'; {}accepted: min, max, abs, predicate, and the mask families {}",
      name.size() <= 32 ? name : name.substr(0, 32),
      closest.empty() ? "" : fmt::format("did you mean '{}'? ", closest), families);
}

class MaskParser {
 public:
  explicit MaskParser(std::string_view text) : text_(text) {}

  MaskExpr parse() { return parse_union(0, text_.size(), 0); }

 private:
  struct Position {
    int line = 1;
    int column = 1;
  };

  Position position(std::size_t offset) const {
    Position p;
    for (std::size_t i = 0; i < offset && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++p.line;
        p.column = 1;
      } else {
        ++p.column;
      }
    }
    return p;
  }

  // What stands at `offset` in a message: the next few bytes quoted, or end of input.
  std::string describe(std::size_t offset, std::size_t end) const {
    if (offset >= end) return "end of input";
    std::string out = "'";
    for (std::size_t i = offset; i < end && i < offset + 16; ++i) {
      const auto byte = static_cast<unsigned char>(text_[i]);
      out +=
          byte >= 0x20 && byte < 0x7f ? std::string(1, text_[i]) : fmt::format("\\x{:02x}", byte);
    }
    return out + (end > offset + 16 ? "...'" : "'");
  }

  [[noreturn]] void fail(std::size_t offset, const std::string& message) const {
    const Position p = position(offset);
    throw PredicateParseError(p.line, p.column, message);
  }

  std::size_t offset_of(int line, int column) const {
    std::size_t offset = 0;
    for (int l = 1; l < line && offset < text_.size(); ++offset) {
      if (text_[offset] == '\n') ++l;
    }
    return std::min(offset + static_cast<std::size_t>(column - 1), text_.size());
  }

  // The name at `offset` when a call follows it (`name (`), else nullopt.
  std::optional<std::string_view> called_name(std::size_t offset, std::size_t end) const {
    if (offset >= end || !is_identifier_start(text_[offset])) return std::nullopt;
    if (offset > 0 && (is_identifier_start(text_[offset - 1]) || is_digit(text_[offset - 1]))) {
      return std::nullopt;
    }
    std::size_t name_end = offset;
    while (name_end < end && (is_identifier_start(text_[name_end]) || is_digit(text_[name_end]))) {
      ++name_end;
    }
    const std::size_t open = skip_spaces(name_end, end);
    if (open == end || text_[open] != '(') return std::nullopt;
    return text_.substr(offset, name_end - offset);
  }

  static bool is_known_call(std::string_view name) {
    return std::find(kFunctions.begin(), kFunctions.end(), name) != kFunctions.end() ||
           std::find(kVariables.begin(), kVariables.end(), name) != kVariables.end() ||
           name == "predicate" || is_family_name(name);
  }

  std::size_t skip_spaces(std::size_t from, std::size_t end) const {
    while (from < end && is_space(text_[from])) ++from;
    return from;
  }
  std::size_t trim_end(std::size_t begin, std::size_t end) const {
    while (end > begin && is_space(text_[end - 1])) --end;
    return end;
  }

  // Offsets in [begin, end) of the single `op` characters at bracket depth 0.
  std::vector<std::size_t> split_points(std::size_t begin, std::size_t end, char op) const {
    std::vector<std::size_t> points;
    int depth = 0;
    for (std::size_t i = begin; i < end; ++i) {
      const char c = text_[i];
      if (c == '(' || c == '[') {
        ++depth;
      } else if (c == ')' || c == ']') {
        --depth;
      } else if (c == '&' || c == '|') {
        if (i + 1 < end && text_[i + 1] == c) {
          ++i;
        } else if (depth == 0 && c == op) {
          points.push_back(i);
        }
      }
    }
    return points;
  }

  // The offset of the bracket closing the one at `open`, or `end` if it is not closed.
  std::size_t matching(std::size_t open, std::size_t end) const {
    int depth = 0;
    for (std::size_t i = open; i < end; ++i) {
      if (text_[i] == '(' || text_[i] == '[') ++depth;
      if (text_[i] == ')' || text_[i] == ']') {
        if (--depth == 0) return i;
      }
    }
    return end;
  }

  void enter(std::size_t at, int depth) const {
    if (depth > kMaxPredicateDepth) {
      fail(at, fmt::format("expected a mask expression nested at most {} levels deep, got "
                           "deeper nesting at {}",
                           kMaxPredicateDepth, describe(at, text_.size())));
    }
  }

  MaskExpr combine(MaskExpr::Kind kind, std::vector<MaskExpr> parts) const {
    MaskExpr result = std::move(parts.front());
    for (std::size_t i = 1; i < parts.size(); ++i) {
      MaskExpr node;
      node.kind = kind;
      node.line = result.line;
      node.column = result.column;
      node.operands.push_back(std::move(result));
      node.operands.push_back(std::move(parts[i]));
      result = std::move(node);
    }
    return result;
  }

  MaskExpr parse_union(std::size_t begin, std::size_t end, int depth) const {
    enter(begin, depth);
    return parse_joined(
        begin, end, '|', MaskExpr::Kind::unite,
        [&](std::size_t from, std::size_t to) { return parse_intersection(from, to, end, depth); });
  }

  // [begin, end) is one operand of `|`; `limit` is where the enclosing expression ends.
  MaskExpr parse_intersection(std::size_t begin, std::size_t end, std::size_t limit,
                              int depth) const {
    return parse_joined(
        begin, end, '&', MaskExpr::Kind::intersect,
        [&](std::size_t from, std::size_t to) { return parse_operand(from, to, limit, depth); });
  }

  // The operands of [begin, end) split at the top-level `op`s, each parsed by
  // parse_part(from, to), joined into one `kind` node.
  template <class ParsePart>
  MaskExpr parse_joined(std::size_t begin, std::size_t end, char op, MaskExpr::Kind kind,
                        const ParsePart& parse_part) const {
    std::vector<MaskExpr> parts;
    std::size_t from = begin;
    for (std::size_t point : split_points(begin, end, op)) {
      parts.push_back(parse_part(from, point));
      from = point + 1;
    }
    parts.push_back(parse_part(from, end));
    return combine(kind, std::move(parts));
  }

  MaskExpr parse_operand(std::size_t begin, std::size_t end, std::size_t limit, int depth) const {
    begin = skip_spaces(begin, end);
    end = trim_end(begin, end);
    if (begin == end) {
      fail(begin, fmt::format("expected a mask operand (a family such as causal or "
                              "document([4,3,3]), a predicate or '('), got {}",
                              describe(skip_spaces(end, limit), limit)));
    }
    if (is_identifier_start(text_[begin])) {
      std::size_t name_end = begin;
      while (name_end < end &&
             (is_identifier_start(text_[name_end]) || is_digit(text_[name_end]))) {
        ++name_end;
      }
      const std::string_view name = text_.substr(begin, name_end - begin);
      if (name == "predicate" || is_family_name(name)) {
        return parse_call(name, begin, name_end, end, depth);
      }
    }
    if (text_[begin] == '(' && matching(begin, end) == end - 1) {
      return parse_union(begin + 1, end - 1, depth + 1);
    }
    return parse_predicate_text(begin, end);
  }

  MaskExpr parse_call(std::string_view name, std::size_t begin, std::size_t name_end,
                      std::size_t end, int depth) const {
    MaskExpr node;
    const Position at = position(begin);
    node.line = at.line;
    node.column = at.column;
    const std::size_t open = skip_spaces(name_end, end);
    std::size_t after = open;
    if (open < end && text_[open] == '(') {
      const std::size_t close = matching(open, end);
      if (close == end || text_[close] != ')') {
        fail(open, fmt::format("expected ')' closing the '(' of {}, got end of input", name));
      }
      after = close + 1;
      if (name == "predicate") {
        node.kind = MaskExpr::Kind::force;
        node.operands.push_back(parse_union(open + 1, close, depth + 1));
      } else {
        node.kind = MaskExpr::Kind::family;
        node.family = std::string(name);
        node.args = parse_args(open + 1, close);
      }
    } else if (name == "predicate") {
      fail(open, fmt::format("expected '(' after predicate, got {}", describe(open, end)));
    } else {
      node.kind = MaskExpr::Kind::family;
      node.family = std::string(name);
    }
    if (after != end) {
      fail(skip_spaces(after, end),
           fmt::format("expected '&', '|', ')' or end of input after {} (families combine with "
                       "& and |, predicates with && and ||), got {}",
                       name, describe(skip_spaces(after, end), end)));
    }
    return node;
  }

  std::vector<FamilyArg> parse_args(std::size_t begin, std::size_t end) const {
    std::vector<FamilyArg> args;
    if (skip_spaces(begin, end) == end) return args;
    std::size_t from = begin;
    int depth = 0;
    for (std::size_t i = begin; i <= end; ++i) {
      if (i < end && text_[i] == '[') ++depth;
      if (i < end && text_[i] == ']') --depth;
      if (i == end || (depth == 0 && text_[i] == ',')) {
        args.push_back(parse_arg(from, i));
        from = i + 1;
      }
    }
    return args;
  }

  FamilyArg parse_arg(std::size_t begin, std::size_t end) const {
    begin = skip_spaces(begin, end);
    end = trim_end(begin, end);
    FamilyArg arg;
    const Position at = position(begin);
    arg.line = at.line;
    arg.column = at.column;
    if (begin < end && text_[begin] == '[') {
      arg.kind = FamilyArg::Kind::list;
      if (text_[end - 1] != ']' || matching(begin, end) != end - 1) {
        fail(begin,
             fmt::format("expected a list [a,b,...] closed by ']', got {}", describe(begin, end)));
      }
      if (skip_spaces(begin + 1, end - 1) == end - 1) return arg;
      std::size_t from = begin + 1;
      for (std::size_t i = begin + 1; i <= end - 1; ++i) {
        if (i == end - 1 || text_[i] == ',') {
          arg.values.push_back(parse_integer(from, i));
          from = i + 1;
        }
      }
    } else if (begin < end && is_identifier_start(text_[begin])) {
      arg.kind = FamilyArg::Kind::tensor;
      std::size_t i = begin;
      while (i < end && (is_identifier_start(text_[i]) || is_digit(text_[i]))) ++i;
      if (i != end) {
        fail(i, fmt::format("expected ',' or ')' after the tensor name, got {}", describe(i, end)));
      }
      arg.tensor = std::string(text_.substr(begin, end - begin));
      if (arg.tensor.front() == '_') {
        fail(begin, fmt::format("expected a tensor name not starting with '_' (reserved for "
                                "generated tensors), got '{}'",
                                arg.tensor));
      }
    } else {
      arg.value = parse_integer(begin, end);
    }
    return arg;
  }

  std::int32_t parse_integer(std::size_t begin, std::size_t end) const {
    begin = skip_spaces(begin, end);
    end = trim_end(begin, end);
    std::size_t i = begin;
    const bool negative = i < end && text_[i] == '-';
    if (negative) ++i;
    if (i == end || !is_digit(text_[i])) {
      fail(begin, fmt::format("expected a parameter (an integer, a list [a,b,...] or a tensor "
                              "name), got {}",
                              describe(begin, end)));
    }
    std::int64_t value = 0;
    for (; i < end && is_digit(text_[i]); ++i) {
      value = std::min<std::int64_t>(value * 10 + (text_[i] - '0'), std::int64_t{1} << 32);
    }
    if (i != end) {
      fail(i, fmt::format("expected ',', ']' or ')' after the integer, got {}", describe(i, end)));
    }
    if (negative) value = -value;
    if (value < INT_MIN || value > INT_MAX) {
      fail(begin, fmt::format("expected an integer in [{}, {}], got {}", INT_MIN, INT_MAX,
                              describe(begin, end)));
    }
    return static_cast<std::int32_t>(value);
  }

  MaskExpr parse_predicate_text(std::size_t begin, std::size_t end) const {
    MaskExpr node;
    const Position at = position(begin);
    node.line = at.line;
    node.column = at.column;
    try {
      node.predicate = parse_predicate(text_.substr(begin, end - begin));
    } catch (const PredicateParseError& error) {
      // Re-anchor the position at the operand's place in the whole text.
      const std::string_view message = error.what();
      const std::size_t colon = message.find(": ");
      const std::string rest(message.substr(colon == std::string_view::npos ? 0 : colon + 2));
      const int line = at.line + error.line() - 1;
      const int column = error.line() == 1 ? at.column + error.column() - 1 : error.column();
      const std::optional<std::string_view> name = called_name(offset_of(line, column), end);
      if (name && !is_known_call(*name)) {
        throw PredicateParseError(line, column, unknown_function(*name));
      }
      if (name && is_family_name(*name)) {
        throw PredicateParseError(
            line, column,
            fmt::format("{} (the mask family {} combines with & and |; && and || join "
                        "predicates)",
                        rest, *name));
      }
      throw PredicateParseError(line, column, rest);
    }
    return node;
  }

  std::string_view text_;
};

}  // namespace

MaskExpr parse_mask_expr(std::string_view text) {
  return MaskParser(text).parse();
}

}  // namespace attnjit::dsl
