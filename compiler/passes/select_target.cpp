// select_target: the shared-memory budget of the target arch and, from the kernel registry,
// the family of each attention kernel of the spec.
#include <fmt/format.h>

#include "attnjit/error.hpp"
#include "compiler/passes/passes.hpp"
#include "compiler/registry/kernel_registry.hpp"

namespace attnjit {
namespace {

int max_dynamic_smem(Arch arch) {
  switch (arch) {
    case Arch::auto_detect:
      throw Error(
          "target: got 'auto' with no device to resolve it; accepted: sm_80, sm_86, sm_89, "
          "sm_90, sm_90a (or run where a CUDA device is present)");
    case Arch::sm_80:
      return 166912;
    case Arch::sm_86:
    case Arch::sm_89:
      return 101376;
    case Arch::sm_90:
    case Arch::sm_90a:
      return 232448;
  }
  throw InternalError("unknown Arch");
}

// The most specialised family with a row that supports the spec here and has a tile shape
// that fits: sm90a on sm_90a targets where a row exists, else sm80.
KernelFamily automatic_family(KernelRole role, const Lowering& in, const TargetInfo& target) {
  std::vector<KernelFamily> preference{KernelFamily::sm80};
  if (target.arch == Arch::sm_90a) preference.insert(preference.begin(), KernelFamily::sm90a);
  for (KernelFamily family : preference) {
    if (automatic_row(role, family, in.spec, *in.mask, target.arch,
                      target.max_dynamic_smem_bytes) != nullptr) {
      return family;
    }
  }
  if (role == KernelRole::decode) {
    throw_field_error("(head_dim_qk, head_dim_v)",
                      fmt::format("({}, {}) with kv_cache={} on {}", in.spec.head_dim_qk,
                                  in.spec.head_dim_v, name_of(in.spec.kv_cache),
                                  name_of(target.arch)),
                      fmt::format("head dims whose decode stages fit {} bytes of shared memory "
                                  "(up to 128 here; sm_80 and sm_90 take every head dim)",
                                  target.max_dynamic_smem_bytes));
  }
  throw InternalError(fmt::format("select_target: no {} kernel for head_dim {} within {} bytes",
                                  name_of(role), in.spec.head_dim_qk,
                                  target.max_dynamic_smem_bytes));
}

}  // namespace

Lowering select_target(const Lowering& in) {
  internal_check(in.mask.has_value(), "select_target runs after lower_mask");
  TargetInfo target;
  target.arch = in.spec.target;
  target.max_dynamic_smem_bytes = max_dynamic_smem(in.spec.target);
  if (in.spec.dtype == DType::e4m3 && target.arch != Arch::sm_90a) {
    throw_field_error("target", fmt::format("{} with dtype=e4m3", name_of(target.arch)),
                      "sm_90a (FP8 products are Hopper's wgmma forms)");
  }
  if (in.spec.kv_dtype && target.arch != Arch::sm_89 && target.arch != Arch::sm_90 &&
      target.arch != Arch::sm_90a) {
    throw_field_error("target", fmt::format("{} with kv_dtype=e4m3", name_of(target.arch)),
                      "sm_89, sm_90 or sm_90a (the decode kernel widens e4m3 to fp16 with "
                      "cvt.f16x2.e4m3x2, which needs sm_89)");
  }
  // The main attention kernel; an explicit `tiles=` shape is its own.
  const KernelRole main = in.spec.kv_cache != KvCache::none ? KernelRole::decode
                          : in.spec.direction == Direction::forward ? KernelRole::forward
                                                                    : KernelRole::backward;
  const bool forced = !in.spec.tiles.is_auto();
  const KernelRow& row = forced
                             ? explicit_row(main, in.spec, *in.mask, target.arch)
                             : *automatic_row(main, automatic_family(main, in, target), in.spec,
                                              *in.mask, target.arch, target.max_dynamic_smem_bytes);
  target.families.push_back({main, row.family});
  // Over a KV cache on sm_90a, the forward's family for calls with many new tokens (chunked
  // prefill; the launch chooses), under every mask: the prefill kernel reads positions as the
  // decode kernel does (FlashMask vectors' rows, a predicate's q).
  if (main == KernelRole::decode && target.arch == Arch::sm_90a &&
      automatic_row(KernelRole::prefill, KernelFamily::sm90a, in.spec, *in.mask, target.arch,
                    target.max_dynamic_smem_bytes) != nullptr) {
    target.families.push_back({KernelRole::prefill, KernelFamily::sm90a});
  }
  // The deterministic backward computes dQ in a kernel of its own, unless the main kernel
  // orders its dQ reductions.
  if (main == KernelRole::backward && in.spec.deterministic && !row.support.ordered_dq) {
    target.families.push_back(
        {KernelRole::backward_dq, automatic_family(KernelRole::backward_dq, in, target)});
  }
  Lowering out = in;
  out.target = target;
  return out;
}

}  // namespace attnjit
