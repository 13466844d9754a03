// One forward problem run on the GPU and checked: fresh random inputs (rounded to the dtype),
// optional padded strides, poisoned outputs, the CPU float64 reference, and the
// FlashAttention criterion on O and LSE.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "attnjit/jit.hpp"
#include "attnjit/spec.hpp"
#include "attnjit/tensor.hpp"
#include "compiler/ir/lowering.hpp"
#include "compiler/ir/predicate.hpp"
#include "dsl/intervals.hpp"
#include "support/pairwise_sample.hpp"
#include "support/reference.hpp"
#include "support/reference_backward.hpp"

namespace attnjit::gpu_test {

/// The run's seed (ATTNJIT_TEST_SEED): 0, the default, keeps every case's fixed seed, so a
/// run repeats the last one's data; a number, or `random` (a fresh number, printed by the test
/// runner), mixes into every seed of the cases' inputs and FlashMask vectors, so the run takes
/// fresh data and masks; the same number repeats it. Throws on any other value.
std::uint64_t run_seed();

/// The seed that random data fixed at `fixed` take in this run: `fixed` itself when the run
/// seed is 0, else a mix of the two.
std::uint64_t data_seed(std::uint64_t fixed);

struct Case {
  AttentionSpec spec;  ///< return_lse is forced on so LSE is always checked
  int batch = 1, heads = 1, kv_heads = 1, seqlen_q = 1, seqlen_k = 1;
  int window_left = -1, window_right = 0;
  std::optional<dsl::IntervalVectors> intervals;  ///< flashmask only
  /// The vectors' tensor starts this many int32 past a 16-byte boundary (the forward's
  /// 16-byte copies of the values then give way to 4-byte ones).
  int intervals_offset = 0;
  /// predicate only: the scalar slots' values and the tensors, uploaded as the launch's
  /// PredicateArgs and evaluated by the CPU reference.
  PredicateBindings predicate;
  bool padded_strides = false;  ///< q/k/v/o rows and batches padded (and poisoned)
  std::uint64_t seed = 1;
  /// The score modifiers' runtime arguments; their flags in `spec` must match (softcap > 0
  /// iff spec.softcap, slopes given iff spec.alibi).
  testing::ScoreModRef score_mod;
  /// The sink logits, one per query head, given iff spec.sinks (testing::Problem::sinks).
  std::vector<float> sinks;
  /// The kernel-registry row the case must run (its forward kernel, or the backward main kernel
  /// in run_backward_on_gpu), e.g. "backward.sm90a"; empty: select_tiles' choice.
  std::string expect_row;

  std::string describe() const;
};

/// A case of `mask` with LSE in `dtype` at head dim `head_dim` (q/k and v): `batch` batches,
/// `heads` query heads on `kv_heads` KV heads, `seqlen_q` queries on `seqlen_k` keys, inputs
/// drawn from `seed`.
Case make_case(MaskSpec mask, DType dtype, int head_dim, int batch, int heads, int kv_heads,
               int seqlen_q, int seqlen_k, std::uint64_t seed);

/// Non-causal FlashMask vectors with 4 columns, one batch and one mask head over `seqlen`
/// queries and keys: key column j holds `per_key(j)`, its (LTS, LTE, UTS, UTE).
dsl::IntervalVectors four_column_intervals(
    int seqlen, const std::function<std::array<std::int32_t, 4>(int)>& per_key);

/// The backward arguments a forward launch's `fwd` fixes: q, k, v, o and lse, the mask
/// arguments, the softmax scale, the score modifiers' arguments, the sinks, validate_mask and a
/// packed batch's boundaries (varlen); the caller binds d_o, d_q, d_k, d_v (and d_sinks).
BackwardArgs backward_args_of(const ForwardArgs& fwd);

/// A predicate mask case with LSE: the literals of `text` lifted into scalar slots (the spec
/// holds the lifted structure, the literals become the scalar values), as the user API does.
Case predicate_case(const std::string& text, std::vector<PredicateTensor> tensors, DType dtype,
                    int head_dim, int batch, int heads, int kv_heads, int seqlen_q, int seqlen_k,
                    std::uint64_t seed);

/// What the GPU produced, converted to float.
struct Outputs {
  std::vector<float> out;      ///< [B, Sq, H, Dv]
  std::vector<float> lse;      ///< [B, H, Sq]
  bool padding_intact = true;  ///< no byte of o's padding was written
};

/// Host inputs of a case: contiguous float arrays already rounded to the dtype.
struct Inputs {
  std::vector<float> q, k, v;
};

Inputs make_inputs(const Case& c);

/// The spec run_on_gpu compiles for the case (LSE on).
AttentionSpec forward_spec(const Case& c);

/// The specs run_backward_on_gpu compiles for the case: its forward's (without the case's
/// tiles, which are the backward's) and its backward's in the given mode.
std::vector<AttentionSpec> backward_specs(const Case& c, bool deterministic);

/// backward_specs of every case in each of `modes` (deterministic or not).
std::vector<AttentionSpec> backward_specs(const std::vector<Case>& cases,
                                          std::initializer_list<bool> modes);

/// Runs the case's compiled kernel (or, with `reference_kernel`, attnjit's fp32 reference
/// kernel) on the GPU.
Outputs run_on_gpu(const Case& c, const Inputs& inputs, bool reference_kernel = false);

/// Gradients from the GPU, converted to float, and whether o's and the gradients' padding
/// stayed untouched.
struct BackwardOutputs {
  std::vector<float> dq, dk, dv;
  std::vector<float> d_sinks;  ///< [H] with sinks (written over a poisoned buffer), else empty
  bool padding_intact = true;
};

/// Random dO [B, Sq, H, Dv] for the case (rounded to the dtype).
std::vector<float> make_d_o(const Case& c);

/// Runs attnjit's forward (for O and LSE) and then its backward (deterministic or not).
BackwardOutputs run_backward_on_gpu(const Case& c, const Inputs& inputs,
                                    const std::vector<float>& d_o, bool deterministic);

/// The CPU reference gradients of the case.
testing::Gradients reference_gradients_of(const Case& c, const Inputs& inputs,
                                          const std::vector<float>& d_o);

/// The CPU reference of the case.
testing::Reference reference_of(const Case& c, const Inputs& inputs);

/// The forward cases of the sweep: every dtype, head dim and mask kind, with GQA ratios,
/// mask heads, lengths that are not tile multiples, Sq != Sk and padded strides rotating.
std::vector<Case> sweep_cases();

/// The standard ALiBi slopes of `heads` heads, 2^(-8 i / H) for i = 1 .. H.
std::vector<float> alibi_slopes(int heads);

/// The score modifier cases: softcap, alibi and both x masks none, causal, sliding_window
/// and a FlashMask document mask x bf16/fp16 x head dims 64/128, with GQA, lengths that are
/// not tile multiples and Sq != Sk rotating, some with negative slopes.
std::vector<Case> score_mod_cases();

/// The large problems the forwards are checked on against the GPU reference kernel: bf16 at
/// d128, 4 query heads on 1 KV head, 2000 to 4099 queries on as many keys, without a mask,
/// causal and under FlashMask documents (causal with one column, non-causal with two).
std::vector<Case> large_cases();

/// Whether the run takes every case of the sweeps (ATTNJIT_GPU_EXHAUSTIVE=1) or, by default
/// (unset or 0), a pairwise sample of each (sample()). Throws on any other value.
bool exhaustive();

/// What a sample of a sweep keeps covered, pair by pair: the case's dtype, head dims, mask
/// (with its window), score modifiers, target, tiles, shape and padding.
testing::Features features(const Case& c);

/// The indices of the items a run takes from a sweep, given each item's features: all of them
/// with ATTNJIT_GPU_EXHAUSTIVE=1, else testing::pairwise_sample with the run seed (so that
/// ATTNJIT_TEST_SEED repeats a run's samples along with its data).
std::vector<std::size_t> sample(const std::vector<testing::Features>& items);

/// The cases a run takes from a sweep: sample() by their features.
std::vector<Case> sampled(const std::vector<Case>& cases);

/// Tallies the registry rows of `kernel`'s attention kernels for rows_run(); the kernel of
/// `role` must be of `expect_row` when one is given (a failed REQUIRE otherwise).
void note_rows(const jit::Kernel& kernel, KernelRole role, const std::string& expect_row);

/// Every registry row whose attention kernels ran so far, with how many cases ran it, in row
/// order (main.cpp prints it after the tests, so the log says which kernels were tested).
std::vector<std::pair<std::string, int>> rows_run();

}  // namespace attnjit::gpu_test
