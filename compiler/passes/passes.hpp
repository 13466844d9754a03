// The lowering passes, in pipeline order. Each is one free function over the IR that
// returns the IR with its decision added; each lives in its own file.
#pragma once

#include "compiler/ir/lowering.hpp"

namespace attnjit {

/// Rejects specs attnjit cannot compile (head dims, mask arity, direction, a predicate that
/// does not parse or still has literals) with an Error naming the field, the value and what
/// is accepted. Returns the IR unchanged.
Lowering validate(const Lowering& in);

/// Puts the spec in its one canonical form: head_dim_v = 0 means "same as head_dim_qk";
/// return_lse is false for the backward (it reads the LSE) and deterministic is false for
/// the forward (always deterministic); a predicate is in its canonical text, without the values
/// of its lifted literals (MaskSpec::scalars: launch arguments). Two specs that generate the
/// same code print the same.
Lowering canonicalize(const Lowering& in);

/// Decides how kernels apply the mask: causal and sliding window by index arithmetic,
/// FlashMask by reading the interval vectors (which ones, in which column) and, because
/// whole tiles can then be skipped, whether the per-key-block min/max tables are built;
/// predicates by the generated element predicate, with per-block tables of visible tiles.
Lowering lower_mask(const Lowering& in);

/// Picks the kernel family and the shared-memory limit for the spec's target. The target
/// must be resolved (auto_detect is replaced by the device's arch before lowering).
Lowering select_target(const Lowering& in);

/// Picks the tile shapes per head dim, mask cost, score modifiers and arch, within the
/// target's shared memory: the forward's (block_m x block_n, warps, K/V pipeline depth, Q in
/// registers or not) or the backward kernels' (key block per CTA, query block per iteration,
/// warp layout), with room for the registers the modifiers take.
Lowering select_tiles(const Lowering& in);

/// Lists the kernels to generate in launch order, with names and launch shapes: the
/// FlashMask min/max kernel(s) when the mask needs them, then the forward kernel, or the
/// backward's preprocess, main, (deterministic) dQ, dQ conversion and GQA reduction kernels.
Lowering plan_kernels(const Lowering& in);

}  // namespace attnjit
