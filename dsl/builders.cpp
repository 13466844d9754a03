// The standard mask families: the host builder of each, and the family table
// (dsl/families.hpp) with one row per family next to them.
#include "dsl/builders.hpp"

#include <algorithm>
#include <climits>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "attnjit/error.hpp"
#include "dsl/families.hpp"
#include "dsl/param_checks.hpp"

namespace attnjit::dsl {
namespace {

/// A single sample of `n` tokens with every value set to `fill`.
IntervalVectors single_sample(bool causal, int columns, int n, std::int32_t fill) {
  IntervalVectors m;
  m.causal = causal;
  m.columns = columns;
  m.batch = 1;
  m.heads = 1;
  m.seqlen_q = n;
  m.seqlen_k = n;
  m.data.assign(static_cast<std::size_t>(n) * columns, fill);
  return m;
}

void set(IntervalVectors& m, int col, int c, std::int64_t value) {
  m.data[static_cast<std::size_t>(col) * m.columns + c] = static_cast<std::int32_t>(value);
}

/// Checks each length >= 0 and returns their sum.
std::int64_t checked_sum(std::string_view name, std::span<const int> lengths) {
  std::int64_t sum = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    check_at_least(fmt::format("{}[{}]", name, i), lengths[i], 0);
    sum += lengths[i];
  }
  return sum;
}

/// Checks the total token count of a sample: >= 1 and representable as int32.
int checked_total(std::string_view what, std::int64_t total) {
  if (total < 1 || total > INT_MAX) {
    throw_field_error(what, fmt::to_string(total), fmt::format("1 to {} tokens", INT_MAX));
  }
  return static_cast<int>(total);
}

/// [start, end) of each document, in order.
std::vector<std::pair<int, int>> segments(std::span<const int> lengths) {
  std::vector<std::pair<int, int>> result;
  result.reserve(lengths.size());
  int start = 0;
  for (const int length : lengths) {
    result.emplace_back(start, start + length);
    start += length;
  }
  return result;
}

}  // namespace

IntervalVectors sliding_window(int n, int window) {
  check_at_least("n", n, 1);
  check_at_least("window", window, 1);
  IntervalVectors m = single_sample(true, 1, n, n);
  for (int j = 0; j < n; ++j) set(m, j, 0, std::min<std::int64_t>(std::int64_t{j} + window, n));
  return m;
}

IntervalVectors causal_document(std::span<const int> doc_lengths) {
  const int n = checked_total("doc_lengths: sum", checked_sum("doc_lengths", doc_lengths));
  IntervalVectors m = single_sample(true, 1, n, n);
  for (const auto& [start, end] : segments(doc_lengths)) {
    for (int j = start; j < end; ++j) set(m, j, 0, end);
  }
  return m;
}

IntervalVectors document(std::span<const int> doc_lengths) {
  const int n = checked_total("doc_lengths: sum", checked_sum("doc_lengths", doc_lengths));
  IntervalVectors m = single_sample(false, 2, n, n);
  for (const auto& [start, end] : segments(doc_lengths)) {
    for (int j = start; j < end; ++j) {
      set(m, j, 0, end);
      set(m, j, 1, start);
    }
  }
  return m;
}

IntervalVectors share_question(int question, std::span<const int> answers) {
  check_at_least("question", question, 0);
  const int n = checked_total("question + sum(answers)",
                              std::int64_t{question} + checked_sum("answers", answers));
  IntervalVectors m = single_sample(true, 1, n, n);
  for (const auto& [start, end] : segments(answers)) {
    for (int j = question + start; j < question + end; ++j) set(m, j, 0, question + end);
  }
  return m;
}

IntervalVectors global_sliding_window(int n, int global, int left, int right) {
  check_at_least("n", n, 1);
  check_range("global", global, 0, n, "n");
  check_at_least("left", left, 0);
  check_at_least("right", right, 0);
  IntervalVectors m = single_sample(false, 4, n, n);
  for (int j = 0; j < n; ++j) {
    if (j < global) {
      set(m, j, 2, 0);
      set(m, j, 3, 0);
      continue;
    }
    set(m, j, 0, std::min<std::int64_t>(std::int64_t{j} + left + 1, n));
    set(m, j, 2, global);
    set(m, j, 3, std::max<std::int64_t>(std::int64_t{j} - right, global));
  }
  return m;
}

IntervalVectors causal_blockwise(std::span<const int> blocks, int test) {
  check_at_least("test", test, 0);
  const std::int64_t demo = checked_sum("blocks", blocks);
  const int n = checked_total("sum(blocks) + test", demo + test);
  IntervalVectors m = single_sample(true, 2, n, n);
  for (const auto& [start, end] : segments(blocks)) {
    for (int j = start; j < end; ++j) {
      set(m, j, 0, end);
      set(m, j, 1, demo);
    }
  }
  return m;
}

IntervalVectors prefix_lm_causal(int n, int prefix) {
  check_at_least("n", n, 1);
  check_range("prefix", prefix, 0, n, "n");
  IntervalVectors m = single_sample(false, 2, n, n);
  for (int j = 0; j < n; ++j) set(m, j, 1, j < prefix ? 0 : j);
  return m;
}

IntervalVectors prefix_lm_document(std::span<const int> doc_lengths,
                                   std::span<const int> prefixes) {
  const int n = checked_total("doc_lengths: sum", checked_sum("doc_lengths", doc_lengths));
  if (prefixes.size() != doc_lengths.size()) {
    throw_field_error("prefixes: count", fmt::to_string(prefixes.size()),
                      fmt::format("one prefix per document ({})", doc_lengths.size()));
  }
  const auto docs = segments(doc_lengths);
  for (std::size_t d = 0; d < docs.size(); ++d) {
    check_range(fmt::format("prefixes[{}]", d), prefixes[d], 0, doc_lengths[d],
                fmt::format("doc_lengths[{}]", d));
  }
  IntervalVectors m = single_sample(false, 2, n, n);
  for (std::size_t d = 0; d < docs.size(); ++d) {
    const auto [start, end] = docs[d];
    for (int j = start; j < end; ++j) {
      set(m, j, 0, end);
      set(m, j, 1, j < start + prefixes[d] ? start : j);
    }
  }
  return m;
}

IntervalVectors qk_sparse(int n, int offset, int length) {
  check_at_least("n", n, 1);
  check_range("offset", offset, 0, n, "n");
  check_range("length", length, 0, n - offset, "n - offset");
  IntervalVectors m = single_sample(true, 2, n, n);
  for (int j = offset; j < offset + length; ++j) {
    set(m, j, 0, j);
    set(m, j, 1, offset + length);
  }
  return m;
}

IntervalVectors random_eviction(std::span<const int> evicted_at_row) {
  const int n =
      checked_total("evicted_at_row: size", static_cast<std::int64_t>(evicted_at_row.size()));
  IntervalVectors m = single_sample(true, 1, n, n);
  for (int j = 0; j < n; ++j) {
    if (evicted_at_row[j] < 0 || evicted_at_row[j] > n) {
      check_range(fmt::format("evicted_at_row[{}]", j), evicted_at_row[j], 0, n,
                  "the number of keys");
    }
    set(m, j, 0, evicted_at_row[j]);
  }
  return m;
}

namespace {

// ---- Row adapters: the device builders' parameters and the language's predicate definitions.

std::vector<int> lengths_of(std::span<const int> offsets) {
  std::vector<int> lengths;
  for (std::size_t d = 0; d + 1 < offsets.size(); ++d)
    lengths.push_back(offsets[d + 1] - offsets[d]);
  return lengths;
}

std::uint64_t splitmix64(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// random_eviction on the device: key j of (batch row b, mask head h) stays visible to rows
/// j <= i < j + 1 + splitmix64(seed + 0x9E3779B97F4A7C15 * (1 + (b * Hm + h) * N + j)) % (N - j).
std::vector<int> eviction_rows(const DeviceSample& s) {
  std::vector<int> rows(static_cast<std::size_t>(s.n));
  const auto row = static_cast<std::uint64_t>(s.batch_row) * s.mask_heads + s.mask_head;
  for (int j = 0; j < s.n; ++j) {
    const std::uint64_t index = row * static_cast<std::uint64_t>(s.n) + j;
    rows[j] = static_cast<int>(j + 1 +
                               splitmix64(s.seed + 0x9E3779B97F4A7C15ull * (1 + index)) %
                                   static_cast<std::uint64_t>(s.n - j));
  }
  return rows;
}

/// Ids from lengths: the tokens of element d get first_id + d.
void append_ids(std::vector<std::int32_t>& ids, std::span<const int> lengths, int first_id) {
  for (std::size_t d = 0; d < lengths.size(); ++d) {
    ids.insert(ids.end(), static_cast<std::size_t>(lengths[d]),
               static_cast<std::int32_t>(first_id + d));
  }
}

std::vector<std::int32_t> ids_of(std::span<const int> lengths) {
  std::vector<std::int32_t> ids;
  append_ids(ids, lengths, 0);
  return ids;
}

std::int64_t literal(const SampleArgs& a, int i) {
  return a.integer(i);
}

/// share_question from flashmask()'s packed samples: `documents`, one [question, answer, ...]
/// list per sample packed along the sequence.
IntervalVectors share_question_documents(int n, const KeywordArgs& args, std::string_view where) {
  const std::vector<std::vector<int>>& documents = args.front().second.rows;
  std::vector<IntervalVectors> pieces;
  std::int64_t total = 0;
  for (std::size_t d = 0; d < documents.size(); ++d) {
    const std::vector<int>& document = documents[d];
    if (document.empty()) {
      throw Error(
          fmt::format("documents[{}]: got an empty list{}; accepted: [question, answer, "
                      "...] lengths",
                      d, where));
    }
    pieces.push_back(share_question(document.front(), std::span(document).subspan(1)));
    for (const int length : document) total += length;
  }
  if (total != n) {
    throw Error(fmt::format("documents: sum {}{}; accepted: seqlen ({})", total, where, n));
  }
  return pack(pieces);
}

constexpr FamilyParam kDocLengths{"lengths", true, ParamRole::tokens, "doc_lengths"};

}  // namespace

std::span<const FamilyRow> family_table() {
  static const std::vector<FamilyRow> rows{
      {
          .name = "full",
          .predicate = [](const SampleArgs&, int) -> std::string { return "1"; },
      },
      {
          .name = "causal",
          .causal = true,
          .predicate = [](const SampleArgs&, int) -> std::string { return "q>=k"; },
      },
      {
          .name = "sliding_window",
          .causal = true,
          .columns = 1,
          .params = {{"window"}},
          .build = [](int n, const SampleArgs& a) { return sliding_window(n, a.integer(0)); },
          .device_params = kWindow,
          .device_reference = [](const DeviceSample& s) { return sliding_window(s.n, s.window); },
          .predicate = [](const SampleArgs& a,
                          int) { return fmt::format("q>=k&&q-k<{}", literal(a, 0)); },
      },
      {
          .name = "causal_document",
          .causal = true,
          .columns = 1,
          .params = {kDocLengths},
          .build = [](int, const SampleArgs& a) { return causal_document(a.list(0)); },
          .device_params = kOffsets,
          .device_reference =
              [](const DeviceSample& s) { return causal_document(lengths_of(s.offsets)); },
          .predicate = [](const SampleArgs&,
                          int i) { return fmt::format("q>=k&&_doc{0}[q]==_doc{0}[k]", i); },
          .tensors =
              [](const SampleArgs& a) {
                return std::vector<SampleTensor>{{"doc", ids_of(a.list(0))}};
              },
      },
      {
          .name = "document",
          .columns = 2,
          .params = {kDocLengths},
          .build = [](int, const SampleArgs& a) { return document(a.list(0)); },
          .device_params = kOffsets,
          .device_reference = [](const DeviceSample& s) { return document(lengths_of(s.offsets)); },
          .predicate = [](const SampleArgs&,
                          int i) { return fmt::format("_doc{0}[q]==_doc{0}[k]", i); },
          .tensors =
              [](const SampleArgs& a) {
                return std::vector<SampleTensor>{{"doc", ids_of(a.list(0))}};
              },
      },
      {
          .name = "share_question",
          .causal = true,
          .columns = 1,
          .params = {{"question", false, ParamRole::tokens}, {"answers", true, ParamRole::tokens}},
          .build = [](int, const SampleArgs& a) { return share_question(a.integer(0), a.list(1)); },
          .device_params = kOffsets,
          .device_reference =
              [](const DeviceSample& s) {
                const std::vector<int> lengths = lengths_of(s.offsets);
                return share_question(lengths.front(), std::span(lengths).subspan(1));
              },
          .predicate =
              [](const SampleArgs& a, int i) {
                return fmt::format("q>=k&&(k<{0}||_doc{1}[q]==_doc{1}[k])", literal(a, 0), i);
              },
          .tensors =
              [](const SampleArgs& a) {
                std::vector<std::int32_t> ids(static_cast<std::size_t>(a.integer(0)), 0);
                append_ids(ids, a.list(1), 1);
                return std::vector<SampleTensor>{{"doc", std::move(ids)}};
              },
          .keywords = {{"documents", 2}},
          .build_keywords = share_question_documents,
      },
      {
          .name = "global_sliding_window",
          .columns = 4,
          .params = {{"global", false, ParamRole::plain, "global_tokens"}, {"left"}, {"right"}},
          .build =
              [](int n, const SampleArgs& a) {
                return global_sliding_window(n, a.integer(0), a.integer(1), a.integer(2));
              },
          .device_params = kGlobalTokens | kWindowLeft | kWindowRight,
          .device_reference =
              [](const DeviceSample& s) {
                return global_sliding_window(s.n, s.global_tokens, s.window_left, s.window_right);
              },
          .predicate =
              [](const SampleArgs& a, int) {
                return fmt::format("k<{0}||q<{0}||q-k<={1}&&k-q<={2}", literal(a, 0), literal(a, 1),
                                   literal(a, 2));
              },
      },
      {
          .name = "causal_blockwise",
          .causal = true,
          .columns = 2,
          .params = {{"blocks", true, ParamRole::tokens}, {"test", false, ParamRole::tokens}},
          .build = [](int,
                      const SampleArgs& a) { return causal_blockwise(a.list(0), a.integer(1)); },
          .device_params = kOffsets | kTest,
          // The demonstration blocks are the segments cut at N - test.
          .device_reference =
              [](const DeviceSample& s) {
                std::vector<int> clipped;
                for (const int o : s.offsets) clipped.push_back(std::min(o, s.n - s.test));
                return causal_blockwise(lengths_of(clipped), s.test);
              },
          .predicate =
              [](const SampleArgs&, int i) {
                return fmt::format("q>=k&&(_blk{0}[q]==_blk{0}[k]||q>=_tst{0}[0])", i);
              },
          .tensors =
              [](const SampleArgs& a) {
                std::vector<std::int32_t> blocks = ids_of(a.list(0));
                blocks.insert(blocks.end(), static_cast<std::size_t>(a.integer(1)),
                              static_cast<std::int32_t>(a.list(0).size()));
                std::int64_t demo = 0;
                for (const int length : a.list(0)) demo += length;
                return std::vector<SampleTensor>{{"blk", std::move(blocks)},
                                                 {"tst", {static_cast<std::int32_t>(demo)}}};
              },
      },
      {
          .name = "prefix_lm_causal",
          .columns = 2,
          .params = {{"prefix"}},
          .build = [](int n, const SampleArgs& a) { return prefix_lm_causal(n, a.integer(0)); },
          .device_params = kPrefix,
          .device_reference = [](const DeviceSample& s) { return prefix_lm_causal(s.n, s.prefix); },
          .predicate = [](const SampleArgs& a,
                          int) { return fmt::format("k<{}||q>=k", literal(a, 0)); },
      },
      {
          .name = "prefix_lm_document",
          .columns = 2,
          .params = {kDocLengths, {"prefixes", true, ParamRole::per_item, {}, "document"}},
          .build = [](int,
                      const SampleArgs& a) { return prefix_lm_document(a.list(0), a.list(1)); },
          .device_params = kOffsets | kPrefixes,
          .device_reference =
              [](const DeviceSample& s) {
                return prefix_lm_document(lengths_of(s.offsets), s.prefixes);
              },
          .predicate =
              [](const SampleArgs&, int i) {
                return fmt::format("_doc{0}[q]==_doc{0}[k]&&(_pre{0}[k]||q>=k)", i);
              },
          .tensors =
              [](const SampleArgs& a) {
                std::vector<std::int32_t> prefix;
                for (std::size_t d = 0; d < a.list(0).size(); ++d) {
                  for (int i = 0; i < a.list(0)[d]; ++i) prefix.push_back(i < a.list(1)[d] ? 1 : 0);
                }
                return std::vector<SampleTensor>{{"doc", ids_of(a.list(0))},
                                                 {"pre", std::move(prefix)}};
              },
      },
      {
          .name = "qk_sparse",
          .causal = true,
          .columns = 2,
          .params = {{"offset"}, {"length"}},
          .build = [](int n,
                      const SampleArgs& a) { return qk_sparse(n, a.integer(0), a.integer(1)); },
          .device_params = kDroppedStart | kDroppedLength,
          .device_reference =
              [](const DeviceSample& s) {
                return qk_sparse(s.n, s.dropped_start, s.dropped_length);
              },
          .predicate =
              [](const SampleArgs& a, int) {
                // o + L fits: checked against the sequence length when the data is built; the
                // literal is clamped so that the text always parses.
                const std::int64_t end =
                    std::min<std::int64_t>(literal(a, 0) + literal(a, 1), INT32_MAX);
                return fmt::format("q>=k&&(k<{0}||k>={1}||q>={1})", literal(a, 0), end);
              },
      },
      {
          .name = "random_eviction",
          .causal = true,
          .columns = 1,
          .params = {{"evicted_at_row", true, ParamRole::per_token}},
          .build = [](int, const SampleArgs& a) { return random_eviction(a.list(0)); },
          .device_params = kSeed,
          .per_head = true,
          .device_reference =
              [](const DeviceSample& s) { return random_eviction(eviction_rows(s)); },
          .predicate = [](const SampleArgs&, int i) { return fmt::format("q>=k&&q<_ev{}[k]", i); },
          .tensors =
              [](const SampleArgs& a) {
                return std::vector<SampleTensor>{{"ev", {a.list(0).begin(), a.list(0).end()}}};
              },
      },
  };
  return rows;
}

}  // namespace attnjit::dsl
