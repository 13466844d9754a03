// attnc run's predicate masks: parsing --predicate and --tensor, uploads, visible pairs.
#include "tools/attnc/run_predicate.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <future>
#include <thread>

#include "attnjit/error.hpp"
#include "dsl/pairs.hpp"

namespace attnc {
namespace {

// A comma-separated list of int32 values; `field` names the option in errors.
std::vector<std::int32_t> parse_values(const std::string& text, const std::string& field) {
  std::vector<std::int32_t> values;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t end = std::min(text.find(',', begin), text.size());
    std::int32_t value = 0;
    const char* first = text.data() + begin;
    const char* last = text.data() + end;
    const auto [ptr, error] = std::from_chars(first, last, value);
    if (first == last || error != std::errc() || ptr != last) {
      attnjit::throw_field_error(field, text, "comma-separated int32 values, e.g. 3,0,-7");
    }
    values.push_back(value);
    begin = end + 1;
  }
  return values;
}

attnjit::PredicateTensor parse_tensor(const std::string& option, int length) {
  const std::string field = "--tensor";
  const std::size_t equals = option.find('=');
  if (equals == std::string::npos || equals == 0) {
    attnjit::throw_field_error(field, option,
                               "NAME=v0,v1,..., NAME=iota or NAME=doc:LEN1,LEN2,...");
  }
  attnjit::PredicateTensor t;
  t.name = option.substr(0, equals);
  const std::string value = option.substr(equals + 1);
  if (value == "iota") {
    for (int i = 0; i < length; ++i) t.values.push_back(i);
  } else if (value.rfind("doc:", 0) == 0) {
    const std::vector<std::int32_t> lengths = parse_values(value.substr(4), field + " " + t.name);
    std::int32_t id = 0;
    for (std::int32_t size : lengths) {
      if (size < 1)
        attnjit::throw_field_error(field + " " + t.name, value, "document lengths >= 1");
      for (std::int32_t i = 0; i < size && static_cast<int>(t.values.size()) < length; ++i) {
        t.values.push_back(id);
      }
      ++id;
    }
    while (static_cast<int>(t.values.size()) < length) t.values.push_back(id);
  } else {
    t.values = parse_values(value, field + " " + t.name);
  }
  t.length = static_cast<int>(t.values.size());
  return t;
}

}  // namespace

HostPredicate parse_host_predicate(const std::string& expression,
                                   const std::vector<std::string>& tensors, int length) {
  HostPredicate out;
  attnjit::Predicate parsed;
  try {
    parsed = attnjit::parse_predicate(expression);
  } catch (const attnjit::PredicateParseError& error) {
    throw attnjit::Error(fmt::format("--predicate: {}", error.what()));
  }
  out.lifted = attnjit::lift_literals(parsed, out.bindings.scalars);
  const attnjit::PredicateInfo used = attnjit::info(out.lifted);
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    out.bindings.tensors.push_back(parse_tensor(tensors[i], length));
    const std::string& name = out.bindings.tensors.back().name;
    for (std::size_t j = 0; j < i; ++j) {
      if (out.bindings.tensors[j].name == name) {
        attnjit::throw_field_error("--tensor", fmt::format("{}' and '{}", tensors[j], tensors[i]),
                                   fmt::format("one --tensor per name ({} is given twice)", name));
      }
    }
    if (std::find(used.tensors.begin(), used.tensors.end(), name) == used.tensors.end()) {
      attnjit::throw_field_error(
          "--tensor", name,
          fmt::format(
              "a tensor the predicate reads ({})",
              used.tensors.empty() ? "none" : fmt::format("{}", fmt::join(used.tensors, ", "))));
    }
  }
  // The evaluator checks that every tensor the predicate reads is bound.
  attnjit::PredicateEvaluator check(out.lifted, out.bindings);
  return out;
}

DevicePredicate upload(const HostPredicate& predicate) {
  DevicePredicate out;
  out.args.scalars = predicate.bindings.scalars;
  out.buffers.reserve(predicate.bindings.tensors.size());
  for (const attnjit::PredicateTensor& t : predicate.bindings.tensors) {
    out.buffers.emplace_back(std::max<std::size_t>(t.values.size(), 1) * 4);
    out.buffers.back().upload(t.values.data(), t.values.size() * 4);
    out.args.tensors.push_back(
        {t.name, attnjit::contiguous_view(out.buffers.back().data(), attnjit::ScalarType::int32,
                                          {t.rows, t.length})});
  }
  return out;
}

namespace {

// The sum of count(w, workers) over `workers` = the hardware threads, each running its own.
template <class Count>
std::int64_t on_every_thread(Count&& count) {
  const int workers = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::future<std::int64_t>> parts;
  for (int w = 0; w < workers; ++w) {
    parts.push_back(std::async(std::launch::async, [&, w] { return count(w, workers); }));
  }
  std::int64_t total = 0;
  for (auto& part : parts) total += part.get();
  return total;
}

// One sequence of a count_visible: its query rows, the first one's q, and its keys.
struct SequenceRows {
  int queries = 0;
  int first = 0;
  int keys = 0;
};

// The (b, h, q, k) quadruples `predicate` leaves visible over sequences b < `sequences` of
// rows_of(b) rows and the query heads, counted on every hardware thread (once per head only
// where the predicate reads h).
template <class RowsOf>
std::int64_t count_visible(const HostPredicate& predicate, int sequences, int heads,
                           RowsOf&& rows_of) {
  const attnjit::PredicateEvaluator evaluator(predicate.lifted, predicate.bindings);
  const int head_rows = attnjit::info(predicate.lifted).uses_head ? heads : 1;
  const std::int64_t total = on_every_thread([&](int w, int workers) {
    std::int64_t count = 0;
    for (int b = 0; b < sequences; ++b) {
      const SequenceRows rows = rows_of(b);
      for (int h = 0; h < head_rows; ++h) {
        for (int t = w; t < rows.queries; t += workers) {
          for (int k = 0; k < rows.keys; ++k) count += evaluator.visible(b, h, rows.first + t, k);
        }
      }
    }
    return count;
  });
  return total * (heads / head_rows);
}

}  // namespace

std::int64_t visible_pairs(const HostPredicate& predicate, int batch, int heads, int seqlen_q,
                           int seqlen_k) {
  const attnjit::PredicateInfo used = attnjit::info(predicate.lifted);
  const int batches = used.uses_batch || !used.tensors.empty() ? batch : 1;
  return count_visible(predicate, batches, heads,
                       [&](int) {
                         return SequenceRows{seqlen_q, 0, seqlen_k};
                       }) *
         (batch / batches);
}

std::int64_t cached_visible_pairs(const HostPredicate& predicate, const ProblemOptions& p) {
  return count_visible(predicate, p.batch, p.heads, [&](int b) {
    const int keys = p.cache_lengths[b];
    return SequenceRows{p.seqlen_q, keys - p.seqlen_q, keys};
  });
}

std::int64_t packed_visible_pairs(const HostPredicate& predicate, const ProblemOptions& p) {
  return count_visible(predicate, static_cast<int>(p.lengths_q.size()), p.heads, [&](int s) {
    return SequenceRows{p.lengths_q[s], 0, used_keys(p, s)};
  });
}

DeviceMask bind_mask(const attnjit::AttentionSpec& s, const ProblemOptions& p,
                     const std::optional<HostPredicate>& predicate, attnjit::ForwardArgs& args) {
  DeviceMask mask;
  args.window_left = p.window_left;
  args.window_right = p.window_right;
  if (s.mask.kind == attnjit::MaskKind::flashmask) {
    mask.vectors = make_vectors(s.mask, p);
    mask.vector_buffer = upload_vectors(*mask.vectors);
    args.startend_row_indices = vectors_view(mask.vector_buffer, *mask.vectors);
  }
  if (predicate) {
    mask.predicate = upload(*predicate);
    args.predicate = mask.predicate->args;
  }
  if (s.kv_cache != attnjit::KvCache::none) {
    mask.kv_cache = upload_kv_cache(p);
    args.kv_cache = mask.kv_cache->args;
    const attnjit::dsl::IntervalVectors* vectors = mask.vectors ? &*mask.vectors : nullptr;
    mask.pairs =
        predicate ? cached_visible_pairs(*predicate, p) : cached_visible_pairs(s.mask, p, vectors);
    mask.cache_bytes = kv_cache_bytes(s, p, vectors);
    return mask;
  }
  if (s.varlen != attnjit::VarlenMode::off) {
    mask.varlen = upload_varlen(p, s.varlen);
    args.varlen = mask.varlen->args;
    mask.pairs = predicate
                     ? packed_visible_pairs(*predicate, p)
                     : packed_visible_pairs(s.mask, p, mask.vectors ? &*mask.vectors : nullptr);
    return mask;
  }
  mask.pairs = predicate ? visible_pairs(*predicate, p.batch, p.heads, p.seqlen_q, p.seqlen_k)
                         : attnjit::dsl::visible_pairs(
                               s.mask, p.batch, p.heads, p.seqlen_q, p.seqlen_k, p.window_left,
                               p.window_right, mask.vectors ? &*mask.vectors : nullptr);
  return mask;
}

}  // namespace attnc
