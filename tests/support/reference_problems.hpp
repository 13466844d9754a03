// Problems and inputs shared by the tests of the forward and backward references: tensor
// sizes, random values representable in a dtype, and the mid-sized problem both low-precision
// baselines are checked on.
#pragma once

#include <cstddef>
#include <random>
#include <vector>

#include "support/half_round.hpp"
#include "support/reference.hpp"

namespace attnjit::testing {

/// Element counts of q [B, Sq, H, D], k [B, Sk, Hkv, D], v [B, Sk, Hkv, Dv], O [B, Sq, H, Dv].
inline std::size_t q_size(const Problem& p) {
  return static_cast<std::size_t>(p.batch) * p.seqlen_q * p.heads * p.head_dim;
}
inline std::size_t k_size(const Problem& p) {
  return static_cast<std::size_t>(p.batch) * p.seqlen_k * p.kv_heads * p.head_dim;
}
inline std::size_t v_size(const Problem& p) {
  return static_cast<std::size_t>(p.batch) * p.seqlen_k * p.kv_heads * p.head_dim_v;
}
inline std::size_t o_size(const Problem& p) {
  return static_cast<std::size_t>(p.batch) * p.seqlen_q * p.heads * p.head_dim_v;
}

/// `count` values uniform in [-1, 1] drawn from `rng`, each rounded to `dtype`.
inline std::vector<float> random_values(std::mt19937& rng, std::size_t count, DType dtype) {
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<float> values(count);
  for (float& v : values) v = round_to(dtype, value(rng));
  return values;
}

/// A bf16 problem of `batch` x `seqlen_q` queries on `seqlen_k` keys, `heads` query heads on
/// `kv_heads` KV heads, head dims `head_dim` (q, k) and `head_dim_v` (v, O) and softmax scale
/// `softmax_scale`; unmasked and without score modifiers until the caller sets them.
inline Problem make_problem(int batch, int seqlen_q, int seqlen_k, int heads, int kv_heads,
                            int head_dim, int head_dim_v, float softmax_scale) {
  return {.batch = batch,
          .seqlen_q = seqlen_q,
          .seqlen_k = seqlen_k,
          .heads = heads,
          .kv_heads = kv_heads,
          .head_dim = head_dim,
          .head_dim_v = head_dim_v,
          .softmax_scale = softmax_scale};
}

/// 2 batches, 37 queries on 53 keys, 4 query heads on 2 KV heads, D = 64, Dv = 32, scale
/// 0.125, causal, in `dtype`: where the low-precision baselines are checked against float64.
inline Problem lowp_problem(DType dtype) {
  Problem p = make_problem(2, 37, 53, 4, 2, 64, 32, 0.125f);
  p.dtype = dtype;
  p.mask.kind = MaskKind::causal;
  return p;
}

}  // namespace attnjit::testing
