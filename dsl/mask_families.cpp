// The mask families in the language: parameter checks, layouts, interval vectors per sample
// and predicate definitions over generated tensors, all read from the family table
// (dsl/families.hpp).
#include "dsl/mask_families.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>

#include "attnjit/error.hpp"
#include "dsl/families.hpp"

namespace attnjit::dsl {
namespace {

const FamilyRow& family_of(const MaskExpr& call) {
  const FamilyRow* family = find_family(call.family);
  internal_check(family != nullptr, "family_of: a family call names a family");
  return *family;
}

std::string signature(const FamilyRow& family) {
  std::string text = std::string(family.name) + "(";
  for (std::size_t i = 0; i < family.params.size(); ++i) {
    text += fmt::format("{}{}{}", i ? ", " : "", family.params[i].name,
                        family.params[i].list ? " (a list or a tensor name)" : "");
  }
  return text + ")";
}

const PredicateTensor& find_tensor(const MaskExpr& call, const FamilyParam& param,
                                   const FamilyArg& arg, std::span<const PredicateTensor> tensors) {
  for (const PredicateTensor& tensor : tensors) {
    if (tensor.name == arg.tensor) return tensor;
  }
  throw Error(
      fmt::format("{}: {}: got tensor '{}', which was not given; accepted: the name of a "
                  "given int32 tensor, or a list [a,b,...]",
                  call.family, param.name, arg.tensor));
}

// The integer parameters of a call (its lists left empty): what its predicate reads.
SampleArgs integers_of(const MaskExpr& call) {
  SampleArgs args;
  for (const FamilyArg& arg : call.args) {
    args.values.push_back(arg.kind == FamilyArg::Kind::integer ? std::vector<int>{arg.value}
                                                               : std::vector<int>{});
  }
  return args;
}

// The samples of a call: one when every list is literal, else one per batch row.
std::vector<SampleArgs> samples(const MaskExpr& call, int batch,
                                std::span<const PredicateTensor> tensors) {
  const FamilyRow& family = family_of(call);
  int rows = 1;
  for (std::size_t i = 0; i < family.params.size(); ++i) {
    if (call.args[i].kind != FamilyArg::Kind::tensor) continue;
    const PredicateTensor& tensor = find_tensor(call, family.params[i], call.args[i], tensors);
    if (tensor.rows != 1 && tensor.rows != batch) {
      throw Error(fmt::format("{}: {}: tensor '{}' has {} rows; accepted: 1 or the batch size {}",
                              call.family, family.params[i].name, tensor.name, tensor.rows, batch));
    }
    rows = std::max(rows, tensor.rows);
  }
  std::vector<SampleArgs> result(rows, integers_of(call));
  for (int r = 0; r < rows; ++r) {
    for (std::size_t i = 0; i < family.params.size(); ++i) {
      const FamilyArg& arg = call.args[i];
      std::vector<int>& values = result[r].values[i];
      if (arg.kind == FamilyArg::Kind::list) {
        values.assign(arg.values.begin(), arg.values.end());
      } else if (arg.kind == FamilyArg::Kind::tensor) {
        const PredicateTensor& tensor = find_tensor(call, family.params[i], arg, tensors);
        const auto row = static_cast<std::size_t>(tensor.rows == 1 ? 0 : r) * tensor.length;
        values.assign(tensor.values.begin() + row, tensor.values.begin() + row + tensor.length);
      }
    }
  }
  return result;
}

// Throws unless the tokens a sample's parameters describe number exactly n (the checks of the
// parameters' roles, in the language's words: `sum(lengths)`, `question + sum(answers)`).
void check_total(const MaskExpr& call, const FamilyRow& family, const SampleArgs& s, int n) {
  std::vector<std::string> terms;
  std::int64_t total = 0;
  for (std::size_t i = 0; i < family.params.size(); ++i) {
    const FamilyParam& p = family.params[i];
    std::int64_t value = 0;
    if (p.role == ParamRole::tokens) {
      for (const int v : s.values[i]) value += v;
      terms.push_back(p.list ? fmt::format("sum({})", p.name) : std::string(p.name));
    } else if (p.role == ParamRole::per_token) {
      value = static_cast<std::int64_t>(s.values[i].size());
      terms.push_back(fmt::format("the length of {}", p.name));
    } else {
      continue;
    }
    total += value;
  }
  if (!terms.empty() && total != n) {
    throw Error(fmt::format("{}: {}: got {} tokens; accepted: exactly the sequence length {}",
                            call.family, fmt::join(terms, " + "), total, n));
  }
}

// The sequence length of a family's sample: seqlen_q, equal to seqlen_k.
int family_length(const MaskExpr& call, int seqlen_q, int seqlen_k) {
  if (seqlen_q != seqlen_k) {
    throw Error(
        fmt::format("{}: seqlen_k: got {}; accepted: seqlen_q ({}), the families are "
                    "defined for equal query and key lengths",
                    call.family, seqlen_k, seqlen_q));
  }
  return seqlen_q;
}

// Runs the builder of every sample: checks the parameters (the builders name them).
std::vector<IntervalVectors> checked_samples(const MaskExpr& call,
                                             const std::vector<SampleArgs>& all, int n) {
  const FamilyRow& family = family_of(call);
  std::vector<IntervalVectors> result;
  result.reserve(all.size());
  try {
    for (const SampleArgs& s : all) {
      check_total(call, family, s, n);
      result.push_back(family.build(n, s));
    }
  } catch (const PredicateParseError&) {
    throw;
  } catch (const Error& error) {
    const std::string message = error.what();
    if (message.rfind(call.family + ":", 0) == 0) throw;
    throw Error(fmt::format("{}: {}", call.family, message));
  }
  return result;
}

// `lts`, `lte`, `uts` or `ute`: vector c of the layout, as a tensor stem.
std::string_view vector_stem(bool causal, int columns, int c) {
  constexpr std::array<std::string_view, 4> kStems{"lts", "lte", "uts", "ute"};
  const std::string_view name = vector_name(causal, columns, c);
  for (const std::string_view stem : kStems) {
    if (std::equal(stem.begin(), stem.end(), name.begin(), name.end(),
                   [](char a, char b) { return a == (b | 0x20); })) {
      return stem;
    }
  }
  throw InternalError("vector_stem: a FlashMask vector");
}

}  // namespace

std::string vector_definition(bool causal, int columns, int instance) {
  const auto v = [&](std::string_view name) { return fmt::format("_{}{}[k]", name, instance); };
  if (causal && columns == 1) return fmt::format("q>=k&&q<{}", v("lts"));
  if (causal) return fmt::format("q>=k&&(q<{}||q>={})", v("lts"), v("lte"));
  if (columns == 2) return fmt::format("q<{}&&q>={}", v("lts"), v("ute"));
  return fmt::format("(q<{}||q>={})&&(q<{}||q>={})", v("lts"), v("lte"), v("uts"), v("ute"));
}

std::vector<SampleTensor> vector_tensors(const IntervalVectors& m) {
  std::vector<SampleTensor> result;
  for (int c = 0; c < m.columns; ++c) {
    SampleTensor t;
    t.stem = vector_stem(m.causal, m.columns, c);
    for (int col = 0; col < m.seqlen_k; ++col) t.values.push_back(m.at(0, 0, col, c));
    result.push_back(std::move(t));
  }
  return result;
}

bool is_family_name(std::string_view name) {
  return find_family(name) != nullptr;
}

FamilyLayout family_layout(std::string_view name) {
  const FamilyRow* family = find_family(name);
  internal_check(family != nullptr, "family_layout: a known family");
  return {family->causal, family->columns};
}

void check_family_call(const MaskExpr& call) {
  const FamilyRow& family = family_of(call);
  const auto count = static_cast<int>(family.params.size());
  if (static_cast<int>(call.args.size()) != count) {
    throw PredicateParseError(
        call.line, call.column,
        fmt::format("expected {} parameter{} for {}, got {}", count, count == 1 ? "" : "s",
                    signature(family), call.args.size()));
  }
  for (int i = 0; i < count; ++i) {
    const FamilyArg& arg = call.args[i];
    const bool list = arg.kind != FamilyArg::Kind::integer;
    if (list != family.params[i].list) {
      throw PredicateParseError(
          arg.line, arg.column,
          fmt::format("expected {} for parameter {} of {}, got {}",
                      family.params[i].list ? "a list [a,b,...] or a tensor name" : "an integer",
                      family.params[i].name, signature(family),
                      list ? "a list or tensor name" : "an integer"));
    }
  }
}

Predicate family_predicate(const MaskExpr& call, int instance) {
  const FamilyRow& family = family_of(call);
  const std::string text = family.predicate != nullptr
                               ? family.predicate(integers_of(call), instance)
                               : vector_definition(family.causal, family.columns, instance);
  PredicateParseOptions options;
  options.allow_reserved_tensor_names = true;
  return parse_predicate(text, options);
}

std::vector<PredicateTensor> family_tensors(const MaskExpr& call, int instance, int batch,
                                            int seqlen_q, int seqlen_k,
                                            std::span<const PredicateTensor> tensors) {
  const FamilyRow& family = family_of(call);
  if (!family.has_vectors()) return {};
  const int n = family_length(call, seqlen_q, seqlen_k);
  const std::vector<SampleArgs> all = samples(call, batch, tensors);
  const std::vector<IntervalVectors> built = checked_samples(call, all, n);
  std::vector<PredicateTensor> result;
  for (std::size_t r = 0; r < all.size(); ++r) {
    const std::vector<SampleTensor> rows =
        family.predicate != nullptr
            ? (family.tensors != nullptr ? family.tensors(all[r]) : std::vector<SampleTensor>{})
            : vector_tensors(built[r]);
    if (r == 0) {
      for (const SampleTensor& row : rows) {
        PredicateTensor t;
        t.name = fmt::format("_{}{}", row.stem, instance);
        t.rows = static_cast<int>(all.size());
        t.length = static_cast<int>(row.values.size());
        t.values.reserve(all.size() * row.values.size());
        result.push_back(std::move(t));
      }
    }
    internal_check(rows.size() == result.size(), "family_tensors: the same tensors per sample");
    for (std::size_t t = 0; t < rows.size(); ++t) {
      internal_check(static_cast<int>(rows[t].values.size()) == result[t].length,
                     "family_tensors: rows of one length");
      result[t].values.insert(result[t].values.end(), rows[t].values.begin(), rows[t].values.end());
    }
  }
  return result;
}

IntervalVectors family_intervals(const MaskExpr& call, int batch, int seqlen_q, int seqlen_k,
                                 std::span<const PredicateTensor> tensors) {
  const int n = family_length(call, seqlen_q, seqlen_k);
  std::vector<IntervalVectors> per_row = checked_samples(call, samples(call, batch, tensors), n);
  if (per_row.size() == 1 && batch > 1) per_row.assign(batch, per_row.front());
  return stack(per_row);
}

}  // namespace attnjit::dsl
