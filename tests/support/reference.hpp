// The CPU reference attention forward the GPU tests check kernels against, and the comparison
// that decides pass or fail. Written plainly and independently of any kernel code.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "attnjit/spec.hpp"
#include "compiler/ir/predicate.hpp"
#include "dsl/intervals.hpp"

namespace attnjit::testing {

/// The mask of a reference problem, with off = seqlen_k - seqlen_q (bottom-right alignment):
/// - none: every key visible;
/// - causal: key j visible to query i iff j <= i + off;
/// - sliding_window: visible iff (window_left < 0 || j >= i + off - window_left) &&
///   (window_right < 0 || j <= i + off + window_right); a negative size is unbounded;
/// - flashmask: visible iff !dsl::is_masked(*intervals, b, h_mask, i, j) with
///   h_mask = h / (heads / intervals->heads);
/// - predicate: visible iff predicate->visible(b, h, i, j) (no diagonal offset: q and k are
///   the query row and key column).
struct MaskRef {
  MaskKind kind = MaskKind::none;
  int window_left = -1;
  int window_right = 0;
  const dsl::IntervalVectors* intervals = nullptr;
  const PredicateEvaluator* predicate = nullptr;
  /// predicate: >= 0 gives the b the predicate sees (a packed batch's sequence, whose problem
  /// is a batch of one); -1: the problem's batch index.
  int predicate_batch = -1;
};

/// Score modifiers of a reference problem, applied in this order to s = softmax_scale *
/// (q_i . k_j) of query head h before the mask (AttentionSpec::softcap / alibi):
/// - softcap > 0: s <- softcap * tanh(s / softcap) (0: off);
/// - alibi_slopes non-empty ([heads]): s <- s + alibi_slopes[h] * (j - (i + Sk - Sq)).
struct ScoreModRef {
  float softcap = 0;
  std::vector<float> alibi_slopes;
};

/// Shapes and parameters of one attention forward. The KV head of query head h is
/// h / (heads / kv_heads).
struct Problem {
  int batch = 1;
  int seqlen_q = 0;
  int seqlen_k = 0;
  int heads = 1;
  int kv_heads = 1;
  int head_dim = 0;
  int head_dim_v = 0;
  float softmax_scale = 1.0f;
  DType dtype = DType::bf16;
  MaskRef mask;
  ScoreModRef score_mod;
  /// Sink logits (AttentionSpec::sinks), [heads] or empty for none: t[h] joins each row's
  /// softmax denominator with no value, L = log(sum_j exp(s_j) + exp(t[h])); a row with no
  /// visible key has O = 0 and LSE = t[h].
  std::vector<float> sinks;
};

/// What the reference computes.
struct Reference {
  std::vector<double> out;  ///< [B, Sq, H, Dv], exact float64 attention
  /// [B, H, Sq], natural log; -inf for rows with no visible key (the sink's logit with sinks)
  std::vector<double> lse;
  /// [B, Sq, H, Dv]: a plain low-precision implementation (fp32 scores and softmax, P rounded to
  /// the dtype, fp32 P·V, result rounded to the dtype); its error sets the tolerance.
  std::vector<float> out_lowp;
};

/// Attention forward of `p` on contiguous q [B, Sq, H, D], k [B, Sk, Hkv, D],
/// v [B, Sk, Hkv, Dv] (values already representable in p.dtype). Rows with no visible key give
/// O = 0 and LSE = -inf (with sinks, the head's sink logit). Runs (batch, head) pairs on all
/// hardware threads. Throws attnjit::Error for inconsistent shapes, sizes or mask.
Reference reference_forward(const Problem& p, std::span<const float> q, std::span<const float> k,
                            std::span<const float> v);

/// Throws attnjit::Error("<function>: <name> size: ...") unless `got` equals `expected`, the
/// element count of a tensor of shape `shape` (for example "B*Sq*H*D").
void check_size(std::string_view function, std::string_view name, std::size_t got,
                std::size_t expected, std::string_view shape);

/// Throws attnjit::Error unless `p` is consistent (positive sizes, kv_heads dividing heads, a
/// finite scale, valid flashmask vectors of the problem's shape, a finite softcap >= 0, none
/// or `heads` finite ALiBi slopes, none or `heads` sink logits, finite or -inf) and q, k, v have
/// its sizes; size errors name `function`.
void check_problem(std::string_view function, const Problem& p, std::span<const float> q,
                   std::span<const float> k, std::span<const float> v);

/// Whether query `i` sees key `j` in (batch `b`, query head `h`) under p.mask: MaskRef's
/// definition. Expects a problem that passed check_problem().
bool key_visible(const Problem& p, int b, int h, int i, int j);

/// The score s of (query head h, query i, key j) after p.score_mod (ScoreModRef's
/// definition), in float64; `derivative`, when given, receives d(modified score) / ds.
double modified_score(const Problem& p, int h, int i, int j, double s,
                      double* derivative = nullptr);

/// The keys query `i` of (batch `b`, query head `h`) sees: visible[j] for every key j, and the
/// span [first, last] of the visible ones (first = Sk, last = -1 when there are none).
struct VisibleKeys {
  int first = 0;
  int last = -1;
};
VisibleKeys visible_keys(const Problem& p, int b, int h, int i, std::span<std::uint8_t> visible);

/// One row's softmax numerators in float64 and in fp32: over the visible keys of [first, last],
/// s[j] <- exp(s[j] - m) and s_low[j] <- exp(s_low[j] - m_low) (masked keys untouched), m and
/// m_low the maxima of the scores and `sink` (a sink logit, -inf for none). Returns the float64
/// maximum m, both sums (the sink's term exp(sink - m) included) and the sink's terms.
struct RowExp {
  double max = 0;
  double sum = 0;
  float sum_low = 0;
  double sink = 0;     ///< exp(sink - m), 0 without a sink
  float sink_low = 0;  ///< exp(sink - m_low) in fp32
};
RowExp exponentiate_row(std::span<const std::uint8_t> visible, VisibleKeys keys,
                        std::span<double> s, std::span<float> s_low,
                        double sink = -std::numeric_limits<double>::infinity());

/// The sink logit of query head `h` of `p`: p.sinks[h], or -inf without sinks.
double sink_of(const Problem& p, int h);

/// Calls task(b, h) once for every (batch, query head) pair of `p`, spread over all hardware
/// threads; returns when all calls have returned. Calls for different pairs run concurrently.
void for_each_head(const Problem& p, const std::function<void(int b, int h)>& task);

/// Result of comparing a kernel's output with the reference.
struct Comparison {
  double max_abs_err = 0;           ///< over finite values
  double baseline_max_abs_err = 0;  ///< the low-precision emulation's error (output only)
  double rel_l2_err = 0;            ///< ||got - ref||_2 / ||ref||_2 over finite values
  std::int64_t nonfinite = 0;       ///< NaN or infinite values where the reference is finite
  std::int64_t count = 0;           ///< number of values compared
  bool passed = false;
  std::string summary;  ///< one line with every number and the limits
};

/// FlashAttention's criterion for an output [B, Sq, H, Dv]: passes iff every value is finite,
/// max|got - out| <= 2 * max|out_lowp - out| + atol and rel_l2_err <= 2e-2 (bf16) or 5e-3
/// (fp16). Throws Error when the sizes differ.
Comparison compare_output(std::span<const float> got, const Reference& ref, DType dtype);

/// LSE [B, H, Sq]: -inf must be -inf exactly where the reference is -inf (and only there);
/// finite values need |got - ref| <= 1e-3 + 1e-4 * |ref|. Throws Error when the sizes differ.
Comparison compare_lse(std::span<const float> got, const Reference& ref);

}  // namespace attnjit::testing
