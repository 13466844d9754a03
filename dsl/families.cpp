// Look-ups in the family table and flashmask()'s path to a family's builder: its keywords and
// the checks of its parameters' roles against the sample length.
#include "dsl/families.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>

#include "attnjit/error.hpp"

namespace attnjit::dsl {
namespace {

constexpr std::array<std::pair<unsigned, std::string_view>, 11> kDeviceParamNames{{
    {kOffsets, "offsets"},
    {kPrefix, "prefix"},
    {kPrefixes, "prefixes"},
    {kTest, "test"},
    {kDroppedStart, "dropped_start"},
    {kDroppedLength, "dropped_length"},
    {kWindow, "window"},
    {kGlobalTokens, "global_tokens"},
    {kWindowLeft, "window_left"},
    {kWindowRight, "window_right"},
    {kSeed, "seed"},
}};

constexpr std::array<std::string_view, 3> kDepthNames{"an int", "a list of ints",
                                                      "a list of lists of ints"};

std::string_view keyword_of(const FamilyParam& param) {
  return param.keyword.empty() ? param.name : param.keyword;
}

const KeywordValue* find_value(const KeywordArgs& args, std::string_view name) {
  for (const auto& [keyword, value] : args) {
    if (keyword == name) return &value;
  }
  return nullptr;
}

// Exactly the family's keywords, each of its depth (flashmask()'s words).
void check_keywords(const FamilyRow& row, const std::vector<KeywordParam>& expected,
                    const KeywordArgs& args) {
  std::vector<std::string> unknown;
  for (const auto& arg : args) {
    const std::string& keyword = arg.first;
    const bool known = std::any_of(expected.begin(), expected.end(),
                                   [&](const KeywordParam& p) { return p.name == keyword; });
    if (!known) unknown.push_back(keyword);
  }
  std::vector<std::string_view> missing;
  std::vector<std::string_view> accepted;
  for (const KeywordParam& p : expected) {
    accepted.push_back(p.name);
    if (find_value(args, p.name) == nullptr) missing.push_back(p.name);
  }
  std::sort(unknown.begin(), unknown.end());
  if (!unknown.empty() || !missing.empty()) {
    const std::string problem = !unknown.empty()
                                    ? fmt::format("unknown {}", fmt::join(unknown, ", "))
                                    : fmt::format("missing {}", fmt::join(missing, ", "));
    throw Error(
        fmt::format("{} parameters: {}; accepted: {}", row.name, problem,
                    accepted.empty() ? "none" : fmt::format("{}", fmt::join(accepted, ", "))));
  }
  for (const KeywordParam& p : expected) {
    const KeywordValue& value = *find_value(args, p.name);
    const bool shaped = value.depth == 0   ? value.rows.size() == 1 && value.rows[0].size() == 1
                        : value.depth == 1 ? value.rows.size() == 1
                                           : value.depth == 2;
    if (value.depth != p.depth || !shaped) {
      throw_field_error(
          p.name, value.depth >= 0 && value.depth <= 2 ? kDepthNames[value.depth] : "another value",
          kDepthNames[p.depth]);
    }
  }
}

std::int64_t sum(std::span<const int> values) {
  std::int64_t total = 0;
  for (const int v : values) total += v;
  return total;
}

// The checks of the parameters' roles against n, in flashmask()'s words.
void check_roles(const FamilyRow& row, const SampleArgs& sample, int n, std::string_view where) {
  std::vector<std::string_view> token_names;
  std::int64_t tokens = 0;
  std::size_t items = 0;
  for (std::size_t i = 0; i < row.params.size(); ++i) {
    const FamilyParam& p = row.params[i];
    if (p.role != ParamRole::tokens) continue;
    token_names.push_back(keyword_of(p));
    tokens += sum(sample.values[i]);
    if (p.list) items = sample.values[i].size();
  }
  if (!token_names.empty() && tokens != n) {
    throw Error(fmt::format("{}: sum {}{}; accepted: seqlen ({})", fmt::join(token_names, " + "),
                            tokens, where, n));
  }
  for (std::size_t i = 0; i < row.params.size(); ++i) {
    const FamilyParam& p = row.params[i];
    const std::size_t size = sample.values[i].size();
    if (p.role == ParamRole::per_token && size != static_cast<std::size_t>(n)) {
      throw Error(
          fmt::format("{}: got {} values{}; accepted: seqlen ({})", keyword_of(p), size, where, n));
    }
    if (p.role == ParamRole::per_item && size != items) {
      throw Error(fmt::format("{}: got {}{}; accepted: one per {} ({})", keyword_of(p), size, where,
                              p.item, items));
    }
  }
}

}  // namespace

std::string device_param_names(unsigned params) {
  std::string out;
  for (const auto& [param, name] : kDeviceParamNames) {
    if ((params & param) == 0) continue;
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

const FamilyRow* find_family(std::string_view name) {
  for (const FamilyRow& row : family_table()) {
    if (row.name == name) return &row;
  }
  return nullptr;
}

const FamilyRow& vector_family(std::string_view text, std::string_view field) {
  std::string accepted;
  for (const FamilyRow& row : family_table()) {
    if (!row.has_vectors()) continue;
    if (row.name == text) return row;
    accepted += accepted.empty() ? "" : ", ";
    accepted += row.name;
  }
  throw_field_error(field, text, accepted);
}

std::vector<KeywordParam> keyword_params(const FamilyRow& row) {
  if (row.build_keywords != nullptr) return row.keywords;
  std::vector<KeywordParam> result;
  for (const FamilyParam& p : row.params) result.push_back({keyword_of(p), p.list ? 1 : 0});
  return result;
}

IntervalVectors build_from_keywords(const FamilyRow& row, int n, const KeywordArgs& args,
                                    std::string_view where) {
  internal_check(row.has_vectors(), "build_from_keywords: a family with vectors");
  check_keywords(row, keyword_params(row), args);
  if (row.build_keywords != nullptr) return row.build_keywords(n, args, where);
  SampleArgs sample;
  for (const FamilyParam& p : row.params)
    sample.values.push_back(find_value(args, keyword_of(p))->rows[0]);
  check_roles(row, sample, n, where);
  return row.build(n, sample);
}

}  // namespace attnjit::dsl
