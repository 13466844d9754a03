// The mask language from C++ (docs/masks.md, what `attnc mask` reads): a mask expression that
// combines the FlashMask families (`document([4,3,3])`), element predicates
// (`q>=k&&doc[q]==doc[k]`) and their intersections `&` and unions `|`, compiled to the
// structure an AttentionSpec takes and built, for one problem size, into the data its launches
// take, on the host and ready to copy to the device.
//
//   const attnjit::HostMask mask =
//       attnjit::build_host_mask("document([4,3,3]) | sliding_window(2)", 1, 10, 10);
//   spec.mask = mask.spec;  // predicate(_doc0[q]==_doc0[k]||q>=k&&q-k<$0), scalars {2}
//   // copy mask.tensors to the device and pass them in ForwardArgs::predicate.tensors
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "attnjit/spec.hpp"

namespace attnjit {

/// An int32 tensor on the host, [rows, length] row-major. A mask expression reads it by name:
/// as a predicate's tensor (`doc[q]`) or as a family's list parameter, one zero-padded sample
/// per row (`causal_document(len)`); rows 1 (every sample) or the batch size (row b, sample b).
struct HostTensor {
  std::string name;
  int rows = 1;
  int length = 0;
  std::vector<std::int32_t> values;  ///< rows * length
};

/// FlashMask interval vectors on the host: the data of ForwardArgs::startend_row_indices,
/// int32 [batch, heads, seqlen_k, columns] with columns fastest (docs/masks.md names the
/// columns of each layout).
struct HostIntervals {
  bool causal = false;  ///< the causal part is applied by index arithmetic
  int columns = 0;      ///< 1, 2 or 4
  int batch = 0;
  int heads = 0;  ///< mask heads
  int seqlen_q = 0;
  int seqlen_k = 0;
  std::vector<std::int32_t> data;
};

/// A mask expression built for one problem size: the structure for AttentionSpec::mask and the
/// data of its launches.
struct HostMask {
  /// none, causal, flashmask(...) or predicate(...). For a predicate, spec.scalars holds the
  /// values of its lifted literals: a Kernel compiled from it passes them by itself.
  MaskSpec spec;
  /// flashmask: the vectors, to copy to the device as startend_row_indices.
  std::optional<HostIntervals> intervals;
  /// predicate: the tensors it reads, those the expression named and those its families
  /// generated (`_doc0`, ...), each to copy to the device and pass by name in
  /// ForwardArgs::predicate.tensors.
  std::vector<HostTensor> tensors;
};

/// The structure of a mask expression, decided from its text alone: a family alone takes its
/// builder's form (none, causal or flashmask); a predicate or a combination takes the interval
/// form when its visible rows provably fit FlashMask, else the predicate form (its literals
/// lifted, their values in MaskSpec::scalars); `predicate(...)` forces the predicate form.
/// Throws Error for bad text, naming the line and column, or a family's bad parameters.
MaskSpec parse_mask(std::string_view expression);

/// Compiles a mask expression and builds its data for `batch` samples of `seqlen_q` queries and
/// `seqlen_k` keys from the named tensors (families other than full and causal need
/// seqlen_q == seqlen_k). O(batch * sequence length) on the host. Throws Error as parse_mask,
/// and for a non-positive size, a tensor that is missing or of a bad shape, family parameters
/// that do not match the sizes, or data that does not fit the derived interval form (naming
/// the tensor and its first offending index).
HostMask build_host_mask(std::string_view expression, int batch, int seqlen_q, int seqlen_k,
                         std::span<const HostTensor> tensors = {});

}  // namespace attnjit
