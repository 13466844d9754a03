// attnc run's and bench's masks: a predicate (`--predicate EXPR` or the spec's, literals lifted
// into runtime scalars) with `--tensor NAME=...` for the tensors it reads; the device copies of
// a problem's mask inputs and the count of visible pairs on the host.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "attnjit/spec.hpp"
#include "attnjit/tensor.hpp"
#include "compiler/ir/predicate.hpp"
#include "dsl/intervals.hpp"
#include "runtime/jit/driver.hpp"
#include "tools/attnc/kv_cache.hpp"
#include "tools/attnc/problem.hpp"
#include "tools/attnc/varlen.hpp"

namespace attnc {

/// A predicate from the command line: its lifted structure (the spec's mask) and the runtime
/// values of its scalars and tensors.
struct HostPredicate {
  attnjit::Predicate lifted;
  attnjit::PredicateBindings bindings;
};

/// Parses `expression`, lifts its literals and builds its tensors from `tensors`, each
/// `NAME=v0,v1,...` (those values), `NAME=iota` (0, 1, ..., length-1) or
/// `NAME=doc:LEN1,LEN2,...` (the document id of each position: LEN1 positions of 0, LEN2 of 1,
/// ...; positions past the last document get the next id); `length` is the length of iota and
/// doc tensors. Every tensor has one row (shared by the batch). Throws attnjit::Error naming
/// the option, the value and what is accepted.
HostPredicate parse_host_predicate(const std::string& expression,
                                   const std::vector<std::string>& tensors, int length);

/// The predicate's tensors in device memory and the launch arguments that name them.
struct DevicePredicate {
  std::vector<attnjit::runtime::DeviceBuffer> buffers;
  attnjit::PredicateArgs args;
};
DevicePredicate upload(const HostPredicate& predicate);

/// (b, h, q, k) quadruples the predicate leaves visible, over the batch and the query heads,
/// counted on all hardware threads (once per batch / head only where the predicate reads b or
/// a tensor / h).
std::int64_t visible_pairs(const HostPredicate& predicate, int batch, int heads, int seqlen_q,
                           int seqlen_k);

/// The same over a KV cache: new token t of sequence b, of cache_lengths[b] keys, is the
/// predicate's q at its position cache_lengths[b] - seqlen_q + t (as the kernels see it).
std::int64_t cached_visible_pairs(const HostPredicate& predicate, const ProblemOptions& p);

/// The same over a packed batch: sequence s is the predicate's b, its queries and used keys
/// its q and k counted from the sequence's first (as the kernels see them).
std::int64_t packed_visible_pairs(const HostPredicate& predicate, const ProblemOptions& p);

/// A problem's mask inputs on the device (make_vectors' FlashMask vectors, the predicate's
/// tensors, a packed batch's boundaries, a KV cache's lengths and block table) and the visible
/// (b, h, q, k) quadruples they leave.
struct DeviceMask {
  std::optional<attnjit::dsl::IntervalVectors> vectors;  ///< mask=flashmask only
  attnjit::runtime::DeviceBuffer vector_buffer;
  std::optional<DevicePredicate> predicate;
  std::optional<DeviceVarlen> varlen;     ///< varlen=true only
  std::optional<DeviceKvCache> kv_cache;  ///< kv_cache=contiguous|paged only
  std::int64_t pairs = 0;
  double cache_bytes = 0;  ///< kv_cache only: kv_cache_bytes
};

/// The mask inputs of kernel spec `s` on problem `p` (`predicate` for mask=predicate, the
/// boundaries for varlen=true, the cache's lengths, block table and splits for kv_cache), bound
/// with the window into `args`.
DeviceMask bind_mask(const attnjit::AttentionSpec& s, const ProblemOptions& p,
                     const std::optional<HostPredicate>& predicate, attnjit::ForwardArgs& args);

}  // namespace attnc
