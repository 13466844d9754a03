// attnc run's and bench's packed batches (a spec with varlen=true): the sequence boundaries on
// the device, the visible pairs counted sequence by sequence, and run --check's reference
// computed sequence by sequence (the reference kernel takes padded batches only).
#pragma once

#include <cstdint>

#include "attnjit/spec.hpp"
#include "attnjit/tensor.hpp"
#include "dsl/intervals.hpp"
#include "runtime/jit/driver.hpp"
#include "tools/attnc/problem.hpp"

namespace attnc {

/// A packed batch's cu_seqlens_q/k (and seqused_k) on the device and the VarlenArgs naming
/// them, with max_seqlen_q/k the longest sequences. Under varlen=shared cu_seqlens_k is
/// cu_seqlens_q (Error when --seqlens-k or --seqused-k differ from the queries').
struct DeviceVarlen {
  attnjit::runtime::DeviceBuffer cu_seqlens_q, cu_seqlens_k, seqused_k;
  attnjit::VarlenArgs args;
};
DeviceVarlen upload_varlen(const ProblemOptions& p, attnjit::VarlenMode mode);

/// A packed batch's FlashMask vectors, [1, mask_heads, total_k, columns] with rows local to
/// each sequence: each sequence's own (family_sample when --mask-data documents and its
/// lengths are equal, else arbitrary valid intervals; zeros for an empty sequence) one after
/// another along the keys. seqlen_q is the longest sequence's.
attnjit::dsl::IntervalVectors packed_vectors(const attnjit::MaskSpec& mask, const ProblemOptions& p);

/// The keys sequence `s` attends: its --seqused-k where given, else its --seqlens-k.
int used_keys(const ProblemOptions& p, std::size_t s);

/// (head, query, key) triples visible within the packed batch's sequences: for each, the mask's
/// pairs over its queries and its used keys (bottom-right aligned, as the kernels take them),
/// with its part of `vectors` (packed_vectors) for a FlashMask.
std::int64_t packed_visible_pairs(const attnjit::MaskSpec& mask, const ProblemOptions& p,
                                  const attnjit::dsl::IntervalVectors* vectors);

/// Writes into `ref_o` and `ref_lse` (the packed layouts of args.o and args.lse) what attnjit's
/// fp32 reference kernel of `spec` (without varlen) gives for each sequence alone: its queries
/// on its used keys, the slices of args.q, args.k and args.v, and of `vectors` for a FlashMask.
/// Returns when the kernels are done.
void reference_by_sequence(const attnjit::AttentionSpec& spec, const attnjit::ForwardArgs& args,
                           const ProblemOptions& p, const attnjit::dsl::IntervalVectors* vectors,
                           const attnjit::runtime::DeviceBuffer& ref_o,
                           const attnjit::runtime::DeviceBuffer& ref_lse);

}  // namespace attnc
