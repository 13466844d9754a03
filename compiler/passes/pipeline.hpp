// The lowering pipeline: a plain sequence of passes with optional print-after-pass and
// per-pass timing.
#pragma once

#include <functional>
#include <string_view>

#include "compiler/ir/lowering.hpp"

namespace attnjit {

struct PipelineOptions {
  /// Called after every pass with its name, the IR it produced and its time in ms.
  std::function<void(std::string_view pass, const Lowering& ir, double milliseconds)> after_pass;
};

/// validate -> canonicalize -> lower_mask -> select_target -> select_tiles -> plan_kernels.
/// The spec's target must be resolved (not auto_detect).
Lowering lower(const AttentionSpec& spec, const PipelineOptions& options = {});

/// The spec in canonical form (validate + canonicalize), without the later passes. Its text
/// is the signature that enters the cache key.
AttentionSpec canonical_spec(const AttentionSpec& spec);

}  // namespace attnjit
