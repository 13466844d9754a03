// Packed batches for attnc run and bench (tools/attnc/varlen.hpp).
#include "tools/attnc/varlen.hpp"

#include <algorithm>
#include <optional>
#include <vector>

#include "attnjit/error.hpp"
#include "attnjit/jit.hpp"
#include "dsl/builders.hpp"
#include "dsl/pairs.hpp"

namespace attnc {
namespace {

using attnjit::runtime::DeviceBuffer;

std::vector<int> boundaries(const std::vector<int>& lengths) {
  std::vector<int> cu{0};
  for (const int length : lengths) cu.push_back(cu.back() + length);
  return cu;
}

DeviceBuffer upload_ints(const std::vector<int>& values) {
  DeviceBuffer buffer(values.size() * 4);
  buffer.upload(values.data(), values.size() * 4);
  return buffer;
}

// A contiguous view of `rows` rows of a packed activation, from row `first`, as one batch row.
attnjit::TensorView sequence_rows(const attnjit::TensorView& packed, int first, int rows) {
  void* data =
      static_cast<char*>(packed.data) + static_cast<std::int64_t>(first) * packed.stride[0] * 2;
  return attnjit::contiguous_view(data, packed.dtype, {1, rows, packed.shape[1], packed.shape[2]});
}

}  // namespace

int used_keys(const ProblemOptions& p, std::size_t s) {
  return p.used_k.empty() ? p.lengths_k[s] : p.used_k[s];
}

DeviceVarlen upload_varlen(const ProblemOptions& p, attnjit::VarlenMode mode) {
  DeviceVarlen v;
  const bool shared = mode == attnjit::VarlenMode::shared;
  if (shared && (p.lengths_k != p.lengths_q || !p.used_k.empty())) {
    throw attnjit::Error(
        "--seqlens-k/--seqused-k: given, but the spec has varlen=shared (the keys share the "
        "queries' boundaries); accepted: neither (or varlen=true in the spec)");
  }
  v.cu_seqlens_q = upload_ints(boundaries(p.lengths_q));
  if (!shared) v.cu_seqlens_k = upload_ints(boundaries(p.lengths_k));
  const auto sequences = static_cast<std::int64_t>(p.lengths_q.size());
  v.args.cu_seqlens_q =
      attnjit::contiguous_view(v.cu_seqlens_q.data(), attnjit::ScalarType::int32, {sequences + 1});
  v.args.cu_seqlens_k = shared
                            ? v.args.cu_seqlens_q
                            : attnjit::contiguous_view(v.cu_seqlens_k.data(),
                                                       attnjit::ScalarType::int32, {sequences + 1});
  if (!p.used_k.empty()) {
    v.seqused_k = upload_ints(p.used_k);
    v.args.seqused_k =
        attnjit::contiguous_view(v.seqused_k.data(), attnjit::ScalarType::int32, {sequences});
  }
  v.args.max_seqlen_q = *std::max_element(p.lengths_q.begin(), p.lengths_q.end());
  v.args.max_seqlen_k = *std::max_element(p.lengths_k.begin(), p.lengths_k.end());
  return v;
}

attnjit::dsl::IntervalVectors packed_vectors(const attnjit::MaskSpec& mask,
                                             const ProblemOptions& p) {
  namespace dsl = attnjit::dsl;
  std::vector<dsl::IntervalVectors> pieces;
  for (std::size_t s = 0; s < p.lengths_q.size(); ++s) {
    const int queries = p.lengths_q[s], keys = p.lengths_k[s];
    const std::uint64_t seed = p.seed + s;
    if (queries == 0 || keys == 0) {
      // No rows to hide: zeros for the keys of an empty sequence.
      pieces.push_back({mask.causal, mask.columns, 1, p.mask_heads, queries, keys,
                        std::vector<std::int32_t>(
                            static_cast<std::size_t>(p.mask_heads) * keys * mask.columns, 0)});
    } else if (p.mask_data == "random" || queries != keys) {
      pieces.push_back(
          dsl::random_intervals(mask.causal, mask.columns, 1, p.mask_heads, queries, keys, seed));
    } else {
      pieces.push_back(family_sample(mask, queries, seed, p.mask_heads));
    }
  }
  return dsl::concat_keys(pieces);
}

std::int64_t packed_visible_pairs(const attnjit::MaskSpec& mask, const ProblemOptions& p,
                                  const attnjit::dsl::IntervalVectors* vectors) {
  std::int64_t pairs = 0;
  int first_k = 0;
  for (std::size_t s = 0; s < p.lengths_q.size(); ++s) {
    const int keys = used_keys(p, s);
    if (p.lengths_q[s] > 0 && keys > 0) {
      std::optional<attnjit::dsl::IntervalVectors> own;
      if (vectors != nullptr)
        own = attnjit::dsl::key_range(*vectors, first_k, keys, p.lengths_q[s]);
      pairs += attnjit::dsl::visible_pairs(mask, 1, p.heads, p.lengths_q[s], keys, p.window_left,
                                           p.window_right, own ? &*own : nullptr);
    }
    first_k += p.lengths_k[s];
  }
  return pairs;
}

void reference_by_sequence(const attnjit::AttentionSpec& spec, const attnjit::ForwardArgs& args,
                           const ProblemOptions& p, const attnjit::dsl::IntervalVectors* vectors,
                           const DeviceBuffer& ref_o, const DeviceBuffer& ref_lse) {
  attnjit::AttentionSpec padded = spec;
  padded.varlen = attnjit::VarlenMode::off;
  padded.return_lse = true;
  const attnjit::jit::Kernel reference = attnjit::jit::compile_reference(padded);
  const attnjit::TensorView out = attnjit::contiguous_view(
      ref_o.data(), args.o.dtype, {args.o.shape[0], args.o.shape[1], args.o.shape[2]});
  int first_q = 0, first_k = 0;
  for (std::size_t s = 0; s < p.lengths_q.size(); ++s) {
    const int queries = p.lengths_q[s];
    if (queries > 0) {
      attnjit::ForwardArgs a;
      a.q = sequence_rows(args.q, first_q, queries);
      a.k = sequence_rows(args.k, first_k, used_keys(p, s));
      a.v = sequence_rows(args.v, first_k, used_keys(p, s));
      a.o = sequence_rows(out, first_q, queries);
      // [1, H, Sq] of the packed [H, total_q]: each head's row keeps the packed stride.
      a.lse = attnjit::contiguous_view(static_cast<float*>(ref_lse.data()) + first_q,
                                       attnjit::ScalarType::fp32, {1, p.heads, queries});
      a.lse.stride = {static_cast<std::int64_t>(p.heads) * p.seqlen_q, p.seqlen_q, 1, 0};
      a.softmax_scale = args.softmax_scale;
      a.window_left = args.window_left;
      a.window_right = args.window_right;
      a.softcap = args.softcap;
      a.sinks = args.sinks;
      DeviceBuffer own_vectors;
      if (vectors != nullptr) {
        const attnjit::dsl::IntervalVectors own =
            attnjit::dsl::key_range(*vectors, first_k, used_keys(p, s), queries);
        own_vectors = upload_vectors(own);
        a.startend_row_indices = vectors_view(own_vectors, own);
      }
      reference.forward(a, nullptr);
      // The buffer is freed at the end of the iteration: the kernel must be done with it.
      if (vectors != nullptr) {
        attnjit::runtime::check(attnjit::runtime::driver().cuCtxSynchronize(), "cuCtxSynchronize");
      }
    }
    first_q += queries;
    first_k += p.lengths_k[s];
  }
  attnjit::runtime::check(attnjit::runtime::driver().cuCtxSynchronize(), "cuCtxSynchronize");
}

}  // namespace attnc
