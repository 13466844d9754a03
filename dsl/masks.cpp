// The public face of the mask language (include/attnjit/masks.hpp) over compile_mask and
// build_mask (dsl/mask_lang.hpp).
#include "attnjit/masks.hpp"

#include <utility>

#include "dsl/mask_lang.hpp"

namespace attnjit {

MaskSpec parse_mask(std::string_view expression) {
  const dsl::MaskProgram program = dsl::compile_mask(expression);
  MaskSpec spec = program.spec;
  spec.scalars = program.scalars;
  return spec;
}

HostMask build_host_mask(std::string_view expression, int batch, int seqlen_q, int seqlen_k,
                         std::span<const HostTensor> tensors) {
  const dsl::MaskProgram program = dsl::compile_mask(expression);
  std::vector<PredicateTensor> inputs;
  inputs.reserve(tensors.size());
  for (const HostTensor& t : tensors) inputs.push_back({t.name, t.rows, t.length, t.values});
  dsl::MaskData data = dsl::build_mask(program, batch, seqlen_q, seqlen_k, inputs);
  HostMask mask;
  mask.spec = data.spec;
  if (data.intervals) {
    dsl::IntervalVectors& v = *data.intervals;
    mask.intervals = HostIntervals{.causal = v.causal,
                                   .columns = v.columns,
                                   .batch = v.batch,
                                   .heads = v.heads,
                                   .seqlen_q = v.seqlen_q,
                                   .seqlen_k = v.seqlen_k,
                                   .data = std::move(v.data)};
  }
  if (mask.spec.kind == MaskKind::predicate) {
    mask.spec.scalars = std::move(data.bindings.scalars);
    for (PredicateTensor& t : data.bindings.tensors) {
      mask.tensors.push_back({std::move(t.name), t.rows, t.length, std::move(t.values)});
    }
  }
  return mask;
}

}  // namespace attnjit
