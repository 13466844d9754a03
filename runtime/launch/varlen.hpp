// Packed batches (varlen=true) on the padded launch: the checks of the packed tensors and the
// sequence boundaries, the [1, total, H, D] views the padded checks and launch take, and the
// device check of the boundaries' values.
#pragma once

#include <cuda.h>

#include <optional>

#include "attnjit/common/params.cuh"
#include "attnjit/spec.hpp"
#include "attnjit/tensor.hpp"
#include "runtime/masks/mask_kernels.hpp"

namespace attnjit::jit::detail {

/// For a spec with varlen=true: checks the packed tensors of `args` (ForwardArgs or
/// BackwardArgs; q [total_q, H, D], k and v [total_k, Hkv, D|Dv], o [total_q, H, Dv], lse
/// [H, total_q], gradients like their tensors) and args.varlen, and returns `args` with those
/// tensors viewed as one batch row ([1, total, H, D], lse [1, H, total_q]), which the padded
/// checks and launch take. Throws Error naming the first bad field. For varlen=false: throws
/// when args.varlen is not empty, else returns nullopt (launch `args` as they are).
template <class Args>
std::optional<Args> packed_as_batch(const AttentionSpec& spec, const Args& args);

/// p.varlen of a launch: the boundaries' pointers, the sequence count, the length bounds and
/// the user's FlashMask vectors (zero for varlen=false).
void fill_varlen(VarlenInputs& p, const VarlenArgs& args, const TensorView& startend_row_indices);

/// The sequences of a packed batch's boundaries (0 without).
inline int sequences(const VarlenArgs& args) {
  return args.cu_seqlens_q.empty() ? 0 : static_cast<int>(args.cu_seqlens_q.shape[0] - 1);
}

/// The rows a FlashMask vector's values count (validate_intervals' seqlen_q): a packed batch's
/// are local to each sequence, so at most max_seqlen_q.
template <class Args>
int vector_rows(const Args& args, bool packed, int seqlen_q) {
  return packed ? args.varlen.max_seqlen_q : seqlen_q;
}

/// The device check of a packed batch's boundaries, when requested (validate_mask or
/// ATTNJIT_DEBUG=1): varlen_intervals reports the first bad entry into its slot, and finish()
/// waits for the stream and throws Error naming it, its value and what is accepted.
class VarlenCheck {
 public:
  VarlenCheck(bool requested, CUstream stream);
  unsigned long long* device() const { return slot_ ? slot_->device() : nullptr; }
  void finish(const VarlenArgs& args, int total_q, int total_k) const;

 private:
  std::optional<runtime::FirstErrorSlot> slot_;
};

}  // namespace attnjit::jit::detail
