// FlashMask interval vectors on the device: build_mask() fills startend_row_indices for a whole
// batch (one sample per batch row) from compact parameters that stay on the GPU, and
// validate_intervals() checks vectors a user supplies. Both run NVRTC-compiled kernels, cached
// like attention kernels (memory and disk), on the caller's stream.
//
// The families, the fields of MaskBuildArgs each reads and its vectors: the family table
// (dsl/families.hpp; its rows, with each family's device parameters and its definition on the
// host, are in dsl/builders.cpp) and the device builders
// (templates/attnjit/masks/mask_builders.cuh). For equal parameters the vectors equal those of
// the host builders (dsl/builders.hpp), element for element. N is the sample length (queries =
// keys); "segment d" of a batch row is [o_d, o_{d+1}) of its offsets row.
//
// Checked on the host, before anything runs (attnjit::Error naming the field, the value and
// what is accepted): the family's fields are present and no others, dtypes (int32), ranks,
// shapes, contiguity and alignment, N >= 1, window >= 1, global_tokens in [0, N], window_left
// and window_right >= 0, batch and mask heads in [1, 65535]. Checked on the device only with
// `validate` (or ATTNJIT_DEBUG=1), which then waits for the stream: offsets rows start at 0,
// never decrease and end at N; prefix and test in [0, N]; prefixes[d] in [0, length of segment
// d]; dropped_start in [0, N] and dropped_length in [0, N - dropped_start]. Unchecked bad
// device data gives meaningless vectors but never an out-of-bounds access.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "attnjit/jit.hpp"
#include "attnjit/spec.hpp"
#include "attnjit/tensor.hpp"

namespace attnjit {

/// The FlashMask families with a device builder, in table order: sliding_window,
/// causal_document, document, ... (every family with vectors; full and causal have none).
std::vector<std::string_view> mask_families();

/// `text` if it names a family of mask_families(); throws Error listing them otherwise.
std::string_view parse_mask_family(std::string_view text);

/// The mask structure of the family's vectors: flashmask with its causal flag and columns.
/// Allocate startend_row_indices as [B, Hm, N, columns]. Throws as parse_mask_family.
MaskSpec mask_spec_of(std::string_view family);

/// The parameters of build_mask(). Tensors are int32 device tensors, contiguous, absent when
/// empty(); ints of -1 are "not given". A family reads exactly the fields its row names; giving
/// another one is an error.
struct MaskBuildArgs {
  std::string family;  ///< a name of mask_families(), e.g. "causal_document"
  /// Output: int32 [B, Hm, N, C], contiguous; Hm = 1 except for families whose vectors differ
  /// between mask heads (random_eviction). B, Hm and N are taken from its shape.
  TensorView startend_row_indices;
  /// [B, S + 1], S >= 1: 0 = o_0 <= o_1 <= ... <= o_S = N in each row (cu_seqlens style); rows
  /// with fewer segments repeat N at the end (empty segments are allowed anywhere).
  TensorView offsets;
  TensorView prefix;          ///< prefix_lm_causal: [B], visible prefix length per sample
  TensorView prefixes;        ///< prefix_lm_document: [B, S], prefix length per segment
  TensorView test;            ///< causal_blockwise: [B], test block length per sample
  TensorView dropped_start;   ///< qk_sparse: [B], first dropped key per sample
  TensorView dropped_length;  ///< qk_sparse: [B], dropped keys per sample
  int window = -1;            ///< sliding_window: keys per row, the diagonal included
  int global_tokens = -1;     ///< global_sliding_window: the first tokens, global
  int window_left = -1;       ///< global_sliding_window: keys left of the diagonal
  int window_right = -1;      ///< global_sliding_window: keys right of the diagonal
  std::uint64_t seed = 0;     ///< random_eviction (any value); other families: 0
  /// Also check the device data (see above) and wait for the stream; on with ATTNJIT_DEBUG=1.
  bool validate = false;
};

/// The host checks of build_mask(): which fields the family reads, the tensors' dtypes, shapes
/// and layouts, and the int parameters; throws Error naming the first bad field. Reads no
/// memory behind the tensors, so views of host buffers of the same shapes check the same
/// (attnc mask-build checks its parameters so before any device work).
void check_mask_build_args(const MaskBuildArgs& args);

/// Fills args.startend_row_indices on `stream` with one launch (O(N log S) per batch row) and
/// returns the mask structure to compile the attention with. Asynchronous unless validating;
/// compiles the family's kernel for the current device at first use (memory and disk cache).
/// Throws Error for bad parameters (see above), DeviceError without a device.
MaskSpec build_mask(const MaskBuildArgs& args, jit::Stream stream = nullptr);

/// Checks FlashMask vectors on the device: int32 [B, Hm, Sk, C], contiguous, C = mask.columns
/// (checked on the host), every value in [0, seqlen_q], LTS <= LTE and UTS <= UTE where the
/// layout has those vectors (docs/masks.md). Throws Error naming the first bad element in
/// (batch, head, column, vector) order (an end LTE/UTE below its start counts as bad), its value
/// and the accepted range; dsl::validate reports the same element in the same words. Waits for
/// `stream`.
/// Kernel::forward and Kernel::backward run it with ForwardArgs/BackwardArgs::validate_mask and
/// whenever the environment has ATTNJIT_DEBUG=1.
void validate_intervals(const TensorView& startend_row_indices, const MaskSpec& mask, int seqlen_q,
                        jit::Stream stream = nullptr);

}  // namespace attnjit
