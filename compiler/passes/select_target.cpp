// select_target: the kernel family and the shared-memory budget of the target arch.
#include "attnjit/error.hpp"
#include "compiler/passes/passes.hpp"

namespace attnjit {

Lowering select_target(const Lowering& in) {
  TargetInfo target;
  target.arch = in.spec.target;
  // The FA2-structured mma.sync family runs on every supported arch (sm_80 .. sm_90a); on
  // sm_90a select_tiles may give the backward main kernel the warpgroup (wgmma) layout.
  target.family = KernelFamily::sm80;
  switch (in.spec.target) {
    case Arch::auto_detect:
      throw Error(
          "target: got 'auto' with no device to resolve it; accepted: sm_80, sm_86, sm_89, "
          "sm_90, sm_90a (or run where a CUDA device is present)");
    case Arch::sm_80:
      target.max_dynamic_smem_bytes = 166912;
      break;
    case Arch::sm_86:
    case Arch::sm_89:
      target.max_dynamic_smem_bytes = 101376;
      break;
    case Arch::sm_90:
    case Arch::sm_90a:
      target.max_dynamic_smem_bytes = 232448;
      break;
  }
  Lowering out = in;
  out.target = target;
  return out;
}

}  // namespace attnjit
