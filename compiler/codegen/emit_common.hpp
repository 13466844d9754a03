// Pieces every emitter writes: the header comment and include, the element type, the mask
// policy binding and the extern "C" entry point. Internal to compiler/codegen.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "compiler/codegen/writer.hpp"
#include "compiler/ir/lowering.hpp"

namespace attnjit::codegen {

std::string_view element_type(DType dtype);

/// The C++ type of `kernel`'s parameter block, e.g. `attnjit::FwdParams`.
std::string params_type(const Lowering& ir, const KernelDesc& kernel);

/// `// attnjit generated kernel: ...`, the spec, the tiles, `defines` (one `#define` each),
/// and the template's #include.
void emit_header(SourceWriter& w, const Lowering& ir, const KernelDesc& kernel,
                 const std::vector<std::string>& defines = {});

/// `struct Visible` with the static __device__ function visible(inputs, b, h, q, k) that
/// evaluates `predicate` (the mask of `mask`).
void emit_predicate_visible(SourceWriter& w, const MaskSpec& mask, const Predicate& predicate);

/// The trailing template arguments of a predicate's policy and block classification: a packed
/// batch's `kVarlen`, or over a KV cache `kKvCache` (rows are new tokens whose positions the
/// predicate sees, and the decode kernel reads a table); empty otherwise.
std::string predicate_flags(const Lowering& ir);

/// `typedef attnjit::MaskPolicy<...> Mask;` with the flags of the mask lowering, or for a
/// predicate its Visible struct and `typedef attnjit::PredicatePolicy<...> Mask;` reading the
/// block table of `kernel`'s tiles (block_m x block_n).
void emit_mask_policy(SourceWriter& w, const Lowering& ir, const KernelDesc& kernel);

/// With a score modifier in the spec, or sinks in a forward kernel (`role`), `typedef
/// attnjit::ScoreMod<...> Score;` binding its flags (kSinks only where true) and a blank line;
/// nothing otherwise (the kernels default to no modifiers). The backward's attention kernels
/// take no sinks: the LSE they read includes them.
void emit_score_mod(SourceWriter& w, const AttentionSpec& spec, KernelRole role);

/// The template argument that passes the bound hook: ", Score" where emit_score_mod binds one,
/// "" otherwise.
std::string_view score_mod_argument(const AttentionSpec& spec, KernelRole role);

/// The extern "C" __global__ entry taking `params_type` by value (and `extra_parameters`, a
/// declaration list, after it) and calling `body`. A min_blocks_per_sm of 1 tells ptxas that
/// all 255 registers may be used (otherwise it can cap a 256-thread kernel at 128 to fit two
/// blocks, and spill); 0 leaves it out.
void emit_entry(SourceWriter& w, const KernelDesc& kernel, std::string_view params_type,
                std::string_view body, int min_blocks_per_sm = 0,
                std::string_view extra_parameters = "");

}  // namespace attnjit::codegen
