// Pieces every emitter writes: the header comment and include, the element type, the mask
// policy binding and the extern "C" entry point. Internal to compiler/codegen.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compiler/codegen/writer.hpp"
#include "compiler/ir/lowering.hpp"

namespace attnjit::codegen {

std::string_view element_type(DType dtype);

/// `// attnjit generated kernel: ...`, the spec, the tiles, and the template's #include.
void emit_header(SourceWriter& w, const Lowering& ir, const KernelDesc& kernel);

/// The tile shape (block_m, block_n) of an attention kernel or a predicate_blocks kernel: the
/// tiles of the block table it reads or writes.
std::pair<int, int> table_tile(const Lowering& ir, const KernelDesc& kernel);

/// `struct Visible` with the static __device__ function visible(inputs, b, h, q, k) that
/// evaluates the spec's predicate (mask=predicate).
void emit_predicate_visible(SourceWriter& w, const AttentionSpec& spec);

/// `typedef attnjit::MaskPolicy<...> Mask;` with the flags of the mask lowering, or for a
/// predicate its Visible struct and `typedef attnjit::PredicatePolicy<...> Mask;` reading the
/// block table of `kernel`'s tiles.
void emit_mask_policy(SourceWriter& w, const Lowering& ir, const KernelDesc& kernel);

/// With a score modifier in the spec, `typedef attnjit::ScoreMod<...> Score;` binding its
/// flags and a blank line; nothing otherwise (the kernels default to no modifiers).
void emit_score_mod(SourceWriter& w, const AttentionSpec& spec);

/// The template argument that passes the bound hook: ", Score" with a score modifier in the
/// spec, "" otherwise.
std::string_view score_mod_argument(const AttentionSpec& spec);

/// `static_assert(<kernel type>::kSmemBytes == <planned bytes>, ...)`.
void emit_smem_check(SourceWriter& w, std::string_view kernel_type, int smem_bytes);

/// The extern "C" __global__ entry taking `params_type` by value (and `extra_parameters`, a
/// declaration list, after it) and calling `body`. A min_blocks_per_sm of 1 tells ptxas that
/// all 255 registers may be used (otherwise it can cap a 256-thread kernel at 128 to fit two
/// blocks, and spill); 0 leaves it out.
void emit_entry(SourceWriter& w, const KernelDesc& kernel, std::string_view params_type,
                std::string_view body, int min_blocks_per_sm = 0,
                std::string_view extra_parameters = "");

/// A mainloop kernel's translation unit: the header, `struct Config` with `config_lines`,
/// the mask policy, the score modifiers, a check that `kernel_type`'s shared memory is the
/// planned kernel.dynamic_smem_bytes, and the entry calling `body`.
std::string emit_mainloop(const Lowering& ir, const KernelDesc& kernel,
                          const std::vector<std::string>& config_lines,
                          std::string_view kernel_type, std::string_view params_type,
                          std::string_view body, int min_blocks_per_sm,
                          std::string_view extra_parameters = "");

}  // namespace attnjit::codegen
