// The pass sequence.
#include "compiler/passes/pipeline.hpp"

#include <chrono>

#include "compiler/passes/passes.hpp"

namespace attnjit {

Lowering lower(const AttentionSpec& spec, const PipelineOptions& options) {
  Lowering ir{spec};
  auto run = [&](std::string_view name, Lowering (*pass)(const Lowering&)) {
    const auto start = std::chrono::steady_clock::now();
    ir = pass(ir);
    const std::chrono::duration<double, std::milli> elapsed =
        std::chrono::steady_clock::now() - start;
    if (options.after_pass) options.after_pass(name, ir, elapsed.count());
  };
  run("validate", validate);
  run("canonicalize", canonicalize);
  run("lower_mask", lower_mask);
  run("select_target", select_target);
  run("select_tiles", select_tiles);
  run("plan_kernels", plan_kernels);
  return ir;
}

AttentionSpec canonical_spec(const AttentionSpec& spec) {
  return canonicalize(validate(Lowering{spec})).spec;
}

}  // namespace attnjit
