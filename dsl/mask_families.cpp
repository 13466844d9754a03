// The twelve mask families of the language: parameter checks, layouts, interval vectors per
// sample and predicate definitions over generated tensors.
#include "dsl/mask_families.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>

#include "attnjit/error.hpp"
#include "dsl/builders.hpp"

namespace attnjit::dsl {
namespace {

struct Param {
  std::string_view name;
  bool list = false;  ///< a list `[a,b,...]` or a tensor name, else an integer
};

struct Family {
  std::string_view name;
  std::array<Param, 3> params;
  int param_count = 0;
  FamilyLayout layout;
};

constexpr std::array<Family, 12> kFamilies{{
    {"full", {}, 0, {false, 0}},
    {"causal", {}, 0, {true, 0}},
    {"sliding_window", {{{"window"}}}, 1, {true, 1}},
    {"causal_document", {{{"lengths", true}}}, 1, {true, 1}},
    {"document", {{{"lengths", true}}}, 1, {false, 2}},
    {"share_question", {{{"question"}, {"answers", true}}}, 2, {true, 1}},
    {"global_sliding_window", {{{"global"}, {"left"}, {"right"}}}, 3, {false, 4}},
    {"causal_blockwise", {{{"blocks", true}, {"test"}}}, 2, {true, 2}},
    {"prefix_lm_causal", {{{"prefix"}}}, 1, {false, 2}},
    {"prefix_lm_document", {{{"lengths", true}, {"prefixes", true}}}, 2, {false, 2}},
    {"qk_sparse", {{{"offset"}, {"length"}}}, 2, {true, 2}},
    {"random_eviction", {{{"evicted_at_row", true}}}, 1, {true, 1}},
}};

const Family* find_family(std::string_view name) {
  for (const Family& family : kFamilies) {
    if (family.name == name) return &family;
  }
  return nullptr;
}

const Family& family_of(const MaskExpr& call) {
  const Family* family = find_family(call.family);
  internal_check(family != nullptr, "family_of: a family call names a family");
  return *family;
}

std::string signature(const Family& family) {
  std::string text = std::string(family.name) + "(";
  for (int i = 0; i < family.param_count; ++i) {
    text += fmt::format("{}{}{}", i ? ", " : "", family.params[i].name,
                        family.params[i].list ? " (a list or a tensor name)" : "");
  }
  return text + ")";
}

// One sample's parameters: lists[i] holds list parameter i (empty for integers).
struct Sample {
  std::vector<std::vector<int>> lists;
};

const PredicateTensor& find_tensor(const MaskExpr& call, const Param& param, const FamilyArg& arg,
                                   std::span<const PredicateTensor> tensors) {
  for (const PredicateTensor& tensor : tensors) {
    if (tensor.name == arg.tensor) return tensor;
  }
  throw Error(
      fmt::format("{}: {}: got tensor '{}', which was not given; accepted: the name of a "
                  "given int32 tensor, or a list [a,b,...]",
                  call.family, param.name, arg.tensor));
}

// The samples of a call: one when every list is literal, else one per batch row.
std::vector<Sample> samples(const MaskExpr& call, int batch,
                            std::span<const PredicateTensor> tensors) {
  const Family& family = family_of(call);
  int rows = 1;
  for (int i = 0; i < family.param_count; ++i) {
    if (call.args[i].kind != FamilyArg::Kind::tensor) continue;
    const PredicateTensor& tensor = find_tensor(call, family.params[i], call.args[i], tensors);
    if (tensor.rows != 1 && tensor.rows != batch) {
      throw Error(fmt::format("{}: {}: tensor '{}' has {} rows; accepted: 1 or the batch size {}",
                              call.family, family.params[i].name, tensor.name, tensor.rows, batch));
    }
    rows = std::max(rows, tensor.rows);
  }
  std::vector<Sample> result(rows);
  for (int r = 0; r < rows; ++r) {
    result[r].lists.resize(family.param_count);
    for (int i = 0; i < family.param_count; ++i) {
      const FamilyArg& arg = call.args[i];
      if (arg.kind == FamilyArg::Kind::list) {
        result[r].lists[i].assign(arg.values.begin(), arg.values.end());
      } else if (arg.kind == FamilyArg::Kind::tensor) {
        const PredicateTensor& tensor = find_tensor(call, family.params[i], arg, tensors);
        const auto row = static_cast<std::size_t>(tensor.rows == 1 ? 0 : r) * tensor.length;
        result[r].lists[i].assign(tensor.values.begin() + row,
                                  tensor.values.begin() + row + tensor.length);
      }
    }
  }
  return result;
}

std::int64_t sum(const std::vector<int>& values) {
  std::int64_t total = 0;
  for (int v : values) total += v;
  return total;
}

// Throws unless the tokens a sample's parameters describe number exactly n.
void check_total(const MaskExpr& call, std::string_view what, std::int64_t total, int n) {
  if (total != n) {
    throw Error(fmt::format("{}: {}: got {} tokens; accepted: exactly the sequence length {}",
                            call.family, what, total, n));
  }
}

IntervalVectors sample_intervals(const MaskExpr& call, const Sample& s, int n) {
  const std::string_view name = call.family;
  const auto integer = [&](int i) { return call.args[i].value; };
  if (name == "sliding_window") return sliding_window(n, integer(0));
  if (name == "causal_document" || name == "document") {
    check_total(call, "sum(lengths)", sum(s.lists[0]), n);
    return name == "document" ? document(s.lists[0]) : causal_document(s.lists[0]);
  }
  if (name == "share_question") {
    check_total(call, "question + sum(answers)", integer(0) + sum(s.lists[1]), n);
    return share_question(integer(0), s.lists[1]);
  }
  if (name == "global_sliding_window") {
    return global_sliding_window(n, integer(0), integer(1), integer(2));
  }
  if (name == "causal_blockwise") {
    check_total(call, "sum(blocks) + test", sum(s.lists[0]) + integer(1), n);
    return causal_blockwise(s.lists[0], integer(1));
  }
  if (name == "prefix_lm_causal") return prefix_lm_causal(n, integer(0));
  if (name == "prefix_lm_document") {
    check_total(call, "sum(lengths)", sum(s.lists[0]), n);
    return prefix_lm_document(s.lists[0], s.lists[1]);
  }
  if (name == "qk_sparse") return qk_sparse(n, integer(0), integer(1));
  check_total(call, "the length of evicted_at_row", static_cast<std::int64_t>(s.lists[0].size()),
              n);
  return random_eviction(s.lists[0]);
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
std::vector<IntervalVectors> checked_samples(const MaskExpr& call, const std::vector<Sample>& all,
                                             int n) {
  std::vector<IntervalVectors> result;
  result.reserve(all.size());
  try {
    for (const Sample& s : all) result.push_back(sample_intervals(call, s, n));
  } catch (const PredicateParseError&) {
    throw;
  } catch (const Error& error) {
    const std::string message = error.what();
    if (message.rfind(call.family + ":", 0) == 0) throw;
    throw Error(fmt::format("{}: {}", call.family, message));
  }
  return result;
}

// Document ids from lengths: token i of document d gets d (first_id + d).
void append_ids(std::vector<std::int32_t>& ids, const std::vector<int>& lengths, int first_id) {
  for (std::size_t d = 0; d < lengths.size(); ++d) {
    ids.insert(ids.end(), static_cast<std::size_t>(lengths[d]),
               static_cast<std::int32_t>(first_id + d));
  }
}

}  // namespace

bool is_family_name(std::string_view name) {
  return find_family(name) != nullptr;
}

FamilyLayout family_layout(std::string_view name) {
  const Family* family = find_family(name);
  internal_check(family != nullptr, "family_layout: a known family");
  return family->layout;
}

void check_family_call(const MaskExpr& call) {
  const Family& family = family_of(call);
  if (static_cast<int>(call.args.size()) != family.param_count) {
    throw PredicateParseError(
        call.line, call.column,
        fmt::format("expected {} parameter{} for {}, got {}", family.param_count,
                    family.param_count == 1 ? "" : "s", signature(family), call.args.size()));
  }
  for (int i = 0; i < family.param_count; ++i) {
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
  const std::string_view name = call.family;
  const auto integer = [&](int i) { return static_cast<std::int64_t>(call.args[i].value); };
  const std::string doc = fmt::format("_doc{}", instance);
  std::string text;
  if (name == "full") {
    text = "1";
  } else if (name == "causal") {
    text = "q>=k";
  } else if (name == "sliding_window") {
    text = fmt::format("q>=k&&q-k<{}", integer(0));
  } else if (name == "causal_document") {
    text = fmt::format("q>=k&&{0}[q]=={0}[k]", doc);
  } else if (name == "document") {
    text = fmt::format("{0}[q]=={0}[k]", doc);
  } else if (name == "share_question") {
    text = fmt::format("q>=k&&(k<{0}||{1}[q]=={1}[k])", integer(0), doc);
  } else if (name == "global_sliding_window") {
    text = fmt::format("k<{0}||q<{0}||q-k<={1}&&k-q<={2}", integer(0), integer(1), integer(2));
  } else if (name == "causal_blockwise") {
    text = fmt::format("q>=k&&(_blk{0}[q]==_blk{0}[k]||q>=_tst{0}[0])", instance);
  } else if (name == "prefix_lm_causal") {
    text = fmt::format("k<{}||q>=k", integer(0));
  } else if (name == "prefix_lm_document") {
    text = fmt::format("{0}[q]=={0}[k]&&(_pre{1}[k]||q>=k)", doc, instance);
  } else if (name == "qk_sparse") {
    // o + L fits: checked against the sequence length when the data is built; the literal
    // is clamped so that the text always parses.
    const std::int64_t end = std::min<std::int64_t>(integer(0) + integer(1), INT32_MAX);
    text = fmt::format("q>=k&&(k<{0}||k>={1}||q>={1})", integer(0), end);
  } else {
    text = fmt::format("q>=k&&q<_ev{}[k]", instance);
  }
  PredicateParseOptions options;
  options.allow_reserved_tensor_names = true;
  return parse_predicate(text, options);
}

std::vector<PredicateTensor> family_tensors(const MaskExpr& call, int instance, int batch,
                                            int seqlen_q, int seqlen_k,
                                            std::span<const PredicateTensor> tensors) {
  const std::string_view name = call.family;
  if (name == "full" || name == "causal") return {};
  const int n = family_length(call, seqlen_q, seqlen_k);
  const std::vector<Sample> all = samples(call, batch, tensors);
  checked_samples(call, all, n);
  const int rows = static_cast<int>(all.size());
  const auto tensor = [&](std::string stem, int length) {
    PredicateTensor t;
    t.name = fmt::format("_{}{}", stem, instance);
    t.rows = rows;
    t.length = length;
    t.values.reserve(static_cast<std::size_t>(rows) * length);
    return t;
  };
  std::vector<PredicateTensor> result;
  if (name == "causal_document" || name == "document" || name == "share_question" ||
      name == "prefix_lm_document") {
    PredicateTensor ids = tensor("doc", n);
    PredicateTensor prefix = tensor("pre", n);
    for (const Sample& s : all) {
      if (name == "share_question") {
        ids.values.insert(ids.values.end(), static_cast<std::size_t>(call.args[0].value), 0);
        append_ids(ids.values, s.lists[1], 1);
      } else {
        append_ids(ids.values, s.lists[0], 0);
      }
      for (std::size_t d = 0; name == "prefix_lm_document" && d < s.lists[0].size(); ++d) {
        for (int i = 0; i < s.lists[0][d]; ++i) prefix.values.push_back(i < s.lists[1][d] ? 1 : 0);
      }
    }
    result.push_back(std::move(ids));
    if (name == "prefix_lm_document") result.push_back(std::move(prefix));
  } else if (name == "causal_blockwise") {
    PredicateTensor blocks = tensor("blk", n);
    PredicateTensor test = tensor("tst", 1);
    for (const Sample& s : all) {
      append_ids(blocks.values, s.lists[0], 0);
      blocks.values.insert(blocks.values.end(), static_cast<std::size_t>(call.args[1].value),
                           static_cast<std::int32_t>(s.lists[0].size()));
      test.values.push_back(static_cast<std::int32_t>(sum(s.lists[0])));
    }
    result.push_back(std::move(blocks));
    result.push_back(std::move(test));
  } else if (name == "random_eviction") {
    PredicateTensor evicted = tensor("ev", n);
    for (const Sample& s : all)
      evicted.values.insert(evicted.values.end(), s.lists[0].begin(), s.lists[0].end());
    result.push_back(std::move(evicted));
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
