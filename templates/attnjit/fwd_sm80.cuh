// The forward attention mainloop of the sm80 family (FA2 structure, mma.sync).
//
// One CTA owns kBlockM query rows of one (head, batch); each warp owns kBlockM / kWarps rows
// as 16-row slabs (split-Q: no cross-warp reduction). The CTA walks its key blocks from the
// last to the first; K, V (and FlashMask vector values) of the next block stream into shared
// memory with cp.async while the current one is computed. Per block:
//   S = Q K^T                    mma.sync m16n8k16, fp32 accumulators, ldmatrix operands
//   score modifiers              soft-capping, ALiBi (score_mod.cuh), when the spec has them
//   mask                         only when the block is partial (mask.cuh classifies)
//   online softmax               exp2 with the scale folded in, running max and sum
//   O += P V                     P re-packed from the S accumulators as the A operand
// O is divided by the row sum once, at the end; rows with no visible key give O = 0 and
// LSE = -inf.
//
// Config (bound by the generated code): Element, kHeadDimQK, kHeadDimV, kBlockM, kBlockN,
// kWarps, kStages, kQInRegisters, kReturnLse. Score: a ScoreMod (score_mod.cuh).
#pragma once

#include "attnjit/kv_block.cuh"
#include "attnjit/mask.cuh"
#include "attnjit/params.cuh"
#include "attnjit/primitives.cuh"
#include "attnjit/schedule.cuh"
#include "attnjit/score_mod.cuh"
#include "attnjit/smem_tile.cuh"

namespace attnjit {

template <class Config, class Mask, class Score = ScoreMod<false, false>>
struct ForwardSm80 {
  typedef typename Config::Element Element;
  static constexpr int kHeadDim = Config::kHeadDimQK;
  static constexpr int kBlockM = Config::kBlockM;
  static constexpr int kBlockN = Config::kBlockN;
  static constexpr int kWarps = Config::kWarps;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kStages = Config::kStages;
  static constexpr int kSlabs = kBlockM / (16 * kWarps);  // 16-row slabs per warp
  static constexpr int kWarpRows = 16 * kSlabs;
  static constexpr int kNTiles = kBlockN / 8;    // n8 tiles of S
  static constexpr int kKSteps = kHeadDim / 16;  // k16 steps of Q K^T
  static constexpr int kDTiles = kHeadDim / 8;   // n8 tiles of O
  static constexpr int kPvSteps = kBlockN / 16;  // k16 steps of P V
  static constexpr int kColumns = Mask::kColumns;
  static constexpr bool kQInRegisters = Config::kQInRegisters;
  static constexpr bool kElementBits = Mask::kElementBits;
  /// A predicate's stored bits of a thread's fragment rows, per slab (FragmentWords).
  typedef FragmentWords<(kNTiles + 3) / 4> Words;

  static_assert(Config::kHeadDimQK == Config::kHeadDimV, "head_dim_v must equal head_dim_qk");
  static_assert(kBlockM % (16 * kWarps) == 0, "each warp owns whole 16-row slabs");
  static_assert(kBlockN % 16 == 0 && kHeadDim % 16 == 0, "tiles are multiples of 16");
  static_assert(kStages >= 2, "the K/V pipeline needs at least two stages");

  typedef SmemTile<kBlockM, kHeadDim> QTile;
  typedef SmemTile<kBlockN, kHeadDim> KvTile;
  static constexpr int kStageBytes = 2 * KvTile::kBytes;  // K then V
  static constexpr int kVectorBytes = kBlockN * kColumns * 4;

  /// Dynamic shared memory: Q, then kStages x (K, V), then kStages x FlashMask values.
  static constexpr int kSmemBytes = QTile::kBytes + kStages * (kStageBytes + kVectorBytes);

  // Per-thread accumulator state.
  float acc_o[kSlabs][kDTiles][4];
  float row_max[kSlabs][2];
  float row_sum[kSlabs][2];
  u32 q_frag[kQInRegisters ? kSlabs : 1][kQInRegisters ? kKSteps : 1][4];

  __device__ __forceinline__ void run(const FwdParams& p, unsigned char* smem) {
    // The CTA order (schedule.cuh) when the mask has one; otherwise heaviest causal rows start
    // first.
    start_cta<false>(cta_order_of<Mask::kOrderedCtas>(p));
    const CtaWork work = cta_work<false>(cta_order_of<Mask::kOrderedCtas>(p));
    const int m_block = work.block;
    const int head = work.head;
    const int batch = work.batch;
    if (head >= p.heads) return;  // the missing half of the last pair (schedule.cuh)
    const int thread = threadIdx.x;
    const int warp = thread / 32;
    const int lane = thread % 32;

    MaskState ms = make_mask_state<kBlockN, Mask>(p, head, batch);
    ms.row_begin = m_block * kBlockM;
    ms.row_end = min(ms.row_begin + kBlockM, p.seqlen_q);

    const u16* q_base = static_cast<const u16*>(p.q) + batch * p.q_batch_stride +
                        head * p.q_head_stride + ms.row_begin * p.q_row_stride;

    const u32 smem_q = smem_address(smem);
    const u32 smem_kv = smem_q + QTile::kBytes;
    const u32 smem_vectors = smem_kv + kStages * kStageBytes;

    int n_begin, n_end;
    Mask::template key_block_range<kBlockN>(ms, n_begin, n_end);

    // Prologue: Q and the first kStages-1 key blocks.
    load_tile_async<kBlockM, kHeadDim, kThreads>(smem_q, q_base, p.q_row_stride,
                                                 ms.row_end - ms.row_begin, thread);
    int n_load = next_active(ms, p, n_end - 1, n_begin);
    const int n_first = n_load;
#pragma unroll
    for (int stage = 0; stage < kStages - 1; ++stage) {
      if (n_load >= n_begin) {
        load_key_value_block<kBlockN, kHeadDim, kThreads, kColumns, Mask::kOrderedCtas>(
            p, ms, n_load, smem_kv + stage * kStageBytes, smem_vectors + stage * kVectorBytes,
            thread);
        n_load = next_active(ms, p, n_load - 1, n_begin);
      }
      cp_async_commit();
    }

#pragma unroll
    for (int s = 0; s < kSlabs; ++s) {
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_o[s][dt][e] = 0.f;
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        row_max[s][r] = negative_infinity();
        row_sum[s][r] = 0.f;
      }
    }

    const int warp_row = warp * kWarpRows;
    if (kQInRegisters && n_first >= n_begin) {
      cp_async_wait<kStages - 2>();
      __syncthreads();
#pragma unroll
      for (int s = 0; s < kSlabs; ++s) {
#pragma unroll
        for (int kk = 0; kk < kKSteps; ++kk) {
          ldmatrix_x4(q_frag[s][kk],
                      QTile::matrix_address(smem_q, QTile::lane_offset(lane % 16, lane / 16),
                                            warp_row + s * 16, kk * 2));
        }
      }
    }

    int n_compute = n_first;
    // A predicate's table entry and stored bits are read one block ahead (read_tile).
    int tile_next = 0;
    Words words[kElementBits ? kSlabs : 1];
    if (kElementBits && n_compute >= n_begin) {
      tile_next = read_tile(ms, p, n_compute, warp_row, lane, words);
    }
    for (int it = 0; n_compute >= n_begin; ++it) {
      cp_async_wait<kStages - 2>();
      // Makes block n_compute visible to all warps, and frees the stage computed in the
      // previous iteration, which the load below overwrites.
      __syncthreads();
      if (n_load >= n_begin) {
        const int stage = (it + kStages - 1) % kStages;
        load_key_value_block<kBlockN, kHeadDim, kThreads, kColumns, Mask::kOrderedCtas>(
            p, ms, n_load, smem_kv + stage * kStageBytes, smem_vectors + stage * kVectorBytes,
            thread);
        n_load = next_active(ms, p, n_load - 1, n_begin);
      }
      cp_async_commit();

      const int stage = it % kStages;
      const int tile =
          kElementBits ? tile_next : Mask::template classify<kBlockN>(ms, p.minmax, n_compute);
      compute_block(p, ms, smem_q, smem_kv + stage * kStageBytes,
                    smem_vectors + stage * kVectorBytes, n_compute, tile, words, warp_row, lane);
      n_compute = next_active(ms, p, n_compute - 1, n_begin);
      if (kElementBits && n_compute >= n_begin) {
        tile_next = read_tile(ms, p, n_compute, warp_row, lane, words);
      }
    }

    cp_async_wait<0>();
    __syncthreads();  // no cp.async into Q's rows may land after the epilogue reuses them
    epilogue(p, ms, smem, warp_row, lane);
  }

  /// A predicate's table entry of key block n_block and the stored bits of the thread's
  /// fragment rows in it (zeros without a slot).
  __device__ __forceinline__ static int read_tile(const MaskState& ms, const FwdParams& p,
                                                  int n_block, int warp_row, int lane,
                                                  Words (&words)[kElementBits ? kSlabs : 1]) {
    const int tile = Mask::template classify<kBlockN>(ms, p.minmax, n_block);
    if constexpr (kElementBits) {
      if (tile_kind(tile) == kTilePartial) {
#pragma unroll
        for (int s = 0; s < kSlabs; ++s) {
          words[s] = Mask::template load_fragment_words<kNTiles, false>(
              p.predicate_bits, tile, warp_row + s * 16 + lane / 4);
        }
      }
    }
    return tile;
  }

  /// The highest key block <= from that is not skipped, or n_begin - 1.
  __device__ __forceinline__ static int next_active(const MaskState& ms, const FwdParams& p,
                                                    int from, int n_begin) {
    return Mask::template last_active_key_block<kBlockN>(ms, p.minmax, from, n_begin);
  }

  /// S = Q K^T, score modifiers, mask, online softmax, O += P V for one key block.
  __device__ __forceinline__ void compute_block(const FwdParams& p, const MaskState& ms, u32 smem_q,
                                                u32 smem_k, u32 vectors, int n_block, int tile,
                                                const Words (&words)[kElementBits ? kSlabs : 1],
                                                int warp_row, int lane) {
    const int kind = tile_kind(tile);
    const u32 smem_v = smem_k + KvTile::kBytes;
    // Per-lane parts of the ldmatrix addresses (see SmemTile::matrix_address).
    const u32 q_lane = opaque(QTile::lane_offset(lane % 16, lane / 16));
    const u32 k_lane = opaque(KvTile::lane_offset(lane % 8 + 8 * (lane / 16), (lane / 8) % 2));
    const u32 v_lane = opaque(KvTile::lane_offset(lane % 16, lane / 16));
    const int g = lane / 4;
    const int t = lane % 4;
    // A predicate's partial tile is masked by one bit per element of the thread's fragment:
    // the stored bits (read during the block before), unpacked after S = Q K^T so that their
    // loads have that much longer to land, else the generated element rule, evaluated before
    // S = Q K^T while the scores hold no registers.
    const bool stored = tile_bits_slot(tile) >= 0;
    unsigned long long hidden[kElementBits ? kSlabs : 1];
    if constexpr (kElementBits) {
#pragma unroll
      for (int s = 0; s < kSlabs; ++s) {
        hidden[s] = kind == kTilePartial && !stored
                        ? Mask::template evaluate_bits<kNTiles, false>(
                              p, ms, warp_row + s * 16 + g, 2 * t, ms.row_begin, n_block * kBlockN)
                        : 0ull;
      }
    }
    float acc_s[kSlabs][kNTiles][4];
#pragma unroll
    for (int s = 0; s < kSlabs; ++s) {
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_s[s][nt][e] = 0.f;
      }
    }

#pragma unroll
    for (int kk = 0; kk < kKSteps; ++kk) {
      u32 a[kSlabs][4];
#pragma unroll
      for (int s = 0; s < kSlabs; ++s) {
        if (kQInRegisters) {
#pragma unroll
          for (int e = 0; e < 4; ++e)
            a[s][e] = q_frag[kQInRegisters ? s : 0][kQInRegisters ? kk : 0][e];
        } else {
          ldmatrix_x4(a[s], QTile::matrix_address(smem_q, q_lane, warp_row + s * 16, kk * 2));
        }
      }
#pragma unroll
      for (int np = 0; np < kNTiles / 2; ++np) {
        u32 b[4];
        ldmatrix_x4(b, KvTile::matrix_address(smem_k, k_lane, np * 16, kk * 2));
#pragma unroll
        for (int s = 0; s < kSlabs; ++s) {
          mma_m16n8k16<Element>(acc_s[s][2 * np], a[s], b[0], b[1]);
          mma_m16n8k16<Element>(acc_s[s][2 * np + 1], a[s], b[2], b[3]);
        }
      }
    }

    if (Score::kActive) {
      // Before the mask, which then sets -inf (a modifier would turn -inf into a number).
      // Element e of tile (s, nt) is row g + s * 16 + 8 (e / 2), key nt * 8 + 2 t + e % 2.
      const Score score = Score::template make<Mask::kOrderedCtas>(p);
      const int distance0 = n_block * kBlockN + 2 * t - (ms.row_begin + warp_row + g + ms.diagonal);
#pragma unroll
      for (int s = 0; s < kSlabs; ++s) {
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            acc_s[s][nt][e] =
                score.apply(acc_s[s][nt][e], distance0 + nt * 8 + e % 2 - s * 16 - (e / 2) * 8);
          }
        }
      }
    }
    if constexpr (kElementBits) {
      if (kind == kTilePartial) {
#pragma unroll
        for (int s = 0; s < kSlabs; ++s) {
          if (stored) hidden[s] = Mask::template fragment_bits<kNTiles>(words[s], 2 * t);
#pragma unroll
          for (int e = 0; e < kNTiles * 4; ++e) {
            if ((hidden[s] >> e) & 1) acc_s[s][e / 4][e % 4] = negative_infinity();
          }
        }
      }
    } else if (kind == kTilePartial) {
      const int row0 = ms.row_begin + warp_row + g;
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const int local_col = nt * 8 + 2 * t + c;
          const typename Mask::Column column =
              Mask::load_column(ms, vectors + local_col * kColumns * 4);
#pragma unroll
          for (int s = 0; s < kSlabs; ++s) {
#pragma unroll
            for (int r = 0; r < 2; ++r) {
              if (Mask::masked(p, ms, row0 + s * 16 + r * 8, n_block * kBlockN + local_col,
                               column)) {
                acc_s[s][nt][2 * r + c] = negative_infinity();
              }
            }
          }
        }
      }
    }

    // Online softmax: new running max, rescale what was accumulated, P = 2^(S*c - max*c)
    // (c = 1 for modified scores, already in log2 units).
#pragma unroll
    for (int s = 0; s < kSlabs; ++s) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float block_max = row_max[s][r];
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
          block_max = fmaxf(block_max, fmaxf(acc_s[s][nt][2 * r], acc_s[s][nt][2 * r + 1]));
        }
        block_max = quad_max(block_max);
        // A row with nothing visible yet keeps max = -inf; subtracting 0 keeps P = 0, not NaN.
        const float max_scaled =
            block_max == negative_infinity() ? 0.f : block_max * Score::exponent_scale(p);
        const float correction = exp2_approx(row_max[s][r] * Score::exponent_scale(p) - max_scaled);
        row_max[s][r] = block_max;
        row_sum[s][r] *= correction;
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt) {
          acc_o[s][dt][2 * r] *= correction;
          acc_o[s][dt][2 * r + 1] *= correction;
        }
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kNTiles; ++nt) {
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const float p_value =
                exp2_approx(fmaf(acc_s[s][nt][2 * r + c], Score::exponent_scale(p), -max_scaled));
            acc_s[s][nt][2 * r + c] = p_value;
            sum += p_value;
          }
        }
        row_sum[s][r] += sum;
      }
    }

    // P as 16-bit pairs: the A fragment of P V for k-step kk is {p[2kk][0], p[2kk][1],
    // p[2kk+1][0], p[2kk+1][1]} (no shared memory). Packing now frees the fp32 scores.
    u32 p_packed[kSlabs][kNTiles][2];
#pragma unroll
    for (int s = 0; s < kSlabs; ++s) {
#pragma unroll
      for (int nt = 0; nt < kNTiles; ++nt) {
        p_packed[s][nt][0] = pack2<Element>(acc_s[s][nt][0], acc_s[s][nt][1]);
        p_packed[s][nt][1] = pack2<Element>(acc_s[s][nt][2], acc_s[s][nt][3]);
      }
    }

    // O += P V.
#pragma unroll
    for (int kk = 0; kk < kPvSteps; ++kk) {
#pragma unroll
      for (int dp = 0; dp < kDTiles / 2; ++dp) {
        u32 b[4];
        ldmatrix_x4_trans(b, KvTile::matrix_address(smem_v, v_lane, kk * 16, dp * 2));
#pragma unroll
        for (int s = 0; s < kSlabs; ++s) {
          const u32 a[4] = {p_packed[s][2 * kk][0], p_packed[s][2 * kk][1],
                            p_packed[s][2 * kk + 1][0], p_packed[s][2 * kk + 1][1]};
          mma_m16n8k16<Element>(acc_o[s][2 * dp], a, b[0], b[1]);
          mma_m16n8k16<Element>(acc_o[s][2 * dp + 1], a, b[2], b[3]);
        }
      }
    }
  }

  /// O = acc / rowsum (0 for rows with nothing visible), LSE, and 16-byte stores of O
  /// staged through the warp's own rows of the Q tile. The (head, batch) is decoded again
  /// from the block indices rather than held in registers across the key loop.
  __device__ __forceinline__ void epilogue(const FwdParams& p, const MaskState& ms,
                                           unsigned char* smem, int warp_row, int lane) {
    const CtaWork work = cta_work<false>(cta_order_of<Mask::kOrderedCtas>(p));
    const int head = work.head;
    const int batch = work.batch;
    const int g = lane / 4;
    const int t = lane % 4;
#pragma unroll
    for (int s = 0; s < kSlabs; ++s) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float sum = quad_sum(row_sum[s][r]);
        const float inverse = sum > 0.f ? 1.f / sum : 0.f;
#pragma unroll
        for (int dt = 0; dt < kDTiles; ++dt) {
          acc_o[s][dt][2 * r] *= inverse;
          acc_o[s][dt][2 * r + 1] *= inverse;
        }
        if (Config::kReturnLse && t == 0) {
          const int row = ms.row_begin + warp_row + s * 16 + r * 8 + g;
          if (row < ms.seqlen_q) {
            const float lse =
                sum > 0.f
                    ? (row_max[s][r] * Score::exponent_scale(p) + log2_approx(sum)) * 0.69314718056f
                    : negative_infinity();
            p.lse[batch * p.lse_batch_stride + head * p.lse_head_stride + row] = lse;
          }
        }
      }
    }

#pragma unroll
    for (int s = 0; s < kSlabs; ++s) {
#pragma unroll
      for (int dt = 0; dt < kDTiles; ++dt) {
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const int row = warp_row + s * 16 + r * 8 + g;
          const int col = dt * 8 + 2 * t;
          *reinterpret_cast<u32*>(smem + QTile::element_offset(row, col)) =
              pack2<Element>(acc_o[s][dt][2 * r], acc_o[s][dt][2 * r + 1]);
        }
      }
    }
    __syncwarp();

    u16* o_base = static_cast<u16*>(p.o) + batch * p.o_batch_stride + head * p.o_head_stride;
    constexpr int kChunks = QTile::kChunks;
#pragma unroll
    for (int i = lane; i < kWarpRows * kChunks; i += 32) {
      const int row = warp_row + i / kChunks;
      const int chunk = i % kChunks;
      const int global_row = ms.row_begin + row;
      if (global_row < ms.seqlen_q) {
        const uint4 value = *reinterpret_cast<const uint4*>(smem + QTile::offset(row, chunk));
        *reinterpret_cast<uint4*>(o_base + global_row * p.o_row_stride + chunk * 8) = value;
      }
    }
  }
};

/// The body of a generated forward kernel.
template <class Config, class Mask, class Score = ScoreMod<false, false>>
__device__ __forceinline__ void forward_sm80(const FwdParams& params) {
  extern __shared__ __align__(128) unsigned char smem[];
  ForwardSm80<Config, Mask, Score> kernel;
  kernel.run(params, smem);
}

}  // namespace attnjit
