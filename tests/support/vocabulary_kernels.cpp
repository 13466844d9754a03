// The vocabulary's test kernels (vocabulary_kernels.hpp). Each reads its operands element by
// element through the fragments' coordinate functions, so a wrong coordinate or a wrong
// product shows as a mismatch with the host computation.
#include "support/vocabulary_kernels.hpp"

#include "attnjit/error.hpp"
#include "embedded.hpp"

namespace attnjit::testing {
namespace {

// mma.sync fragments: C = A B over the coordinates of A, B and C, then P reuse: O = C' B2
// with C' = C rounded to 16 bits as the A operand (to_operand_a). One warp; A [32 x 32],
// B [32 x 32] (k x n), B2 [32 x 16], all row-major 16-bit; C [32 x 32], O [32 x 16] fp32.
constexpr std::string_view kFragmentSource = R"(#include "attnjit/common/fragment.cuh"
using namespace attnjit;

template <int kSteps, int kTiles>
__device__ void load_b(OperandB<kSteps, kTiles>& b, const u16* src, int lane) {
  typedef OperandB<kSteps, kTiles> B;
  for (int kk = 0; kk < kSteps; ++kk) {
    for (int nt = 0; nt < kTiles; ++nt) {
      for (int r = 0; r < 2; ++r) {
        const int n = B::n_of(lane, nt);
        const u32 lo = src[B::k_of(lane, kk, r, 0) * (8 * kTiles) + n];
        const u32 hi = src[B::k_of(lane, kk, r, 1) * (8 * kTiles) + n];
        b.v[kk][nt][r] = lo | (hi << 16);
      }
    }
  }
}

template <int kSlabs, int kTiles>
__device__ void store_c(const WarpAccumulator<kSlabs, kTiles>& acc, float* dst, int lane) {
  typedef WarpAccumulator<kSlabs, kTiles> C;
  for (int s = 0; s < kSlabs; ++s) {
    for (int nt = 0; nt < kTiles; ++nt) {
      for (int e = 0; e < 4; ++e) dst[C::row(lane, s, e) * (8 * kTiles) + C::col(lane, nt, e)] = acc.v[s][nt][e];
    }
  }
}

template <class Element>
__device__ void fragment_test(const u16* a_in, const u16* b_in, const u16* b2_in, float* c_out,
                              float* o_out) {
  const int lane = threadIdx.x % 32;
  typedef OperandA<2, 2> A;
  A a;
  for (int s = 0; s < 2; ++s) {
    for (int kk = 0; kk < 2; ++kk) {
      for (int r = 0; r < 4; ++r) {
        const u32 lo = a_in[A::row(lane, s, r) * 32 + A::col(lane, kk, r, 0)];
        const u32 hi = a_in[A::row(lane, s, r) * 32 + A::col(lane, kk, r, 1)];
        a.v[s][kk][r] = lo | (hi << 16);
      }
    }
  }
  OperandB<2, 4> b;
  load_b(b, b_in, lane);
  WarpAccumulator<2, 4> c;
  c.fill(0.f);
  mma<Element>(c, a, b);
  store_c(c, c_out, lane);

  OperandA<2, 2> p;
  to_operand_a<Element>(c, p);
  OperandB<2, 2> b2;
  load_b(b2, b2_in, lane);
  WarpAccumulator<2, 2> o;
  o.fill(0.f);
  mma<Element>(o, p, b2);
  store_c(o, o_out, lane);
}

extern "C" __global__ void fragment_bf16(const u16* a, const u16* b, const u16* b2, float* c,
                                         float* o) {
  fragment_test<bf16>(a, b, b2, c, o);
}
extern "C" __global__ void fragment_fp16(const u16* a, const u16* b, const u16* b2, float* c,
                                         float* o) {
  fragment_test<fp16>(a, b, b2, c, o);
}
)";

// wgmma m64 accumulators (sm_90a): S = Q K^T (m64 x kN, both K-major from swizzled shared
// tiles) stored through the WarpgroupAccumulator coordinates, then O = S' V with S' = S
// rounded to 16 bits as the register A operand (to_operand_a) and V [kN x 64] MN-major.
// One warpgroup; Q [64 x 64], K and V [kN x 64] 16-bit row-major; S [64 x kN], O [64 x 64].
constexpr std::string_view kWgmmaFragmentSource = R"(#include "attnjit/common/fragment.cuh"
#include "attnjit/common/smem_tile.cuh"
#include "attnjit/sm90a/wgmma.cuh"
using namespace attnjit;

template <int kN>
__device__ void store_acc(const WarpgroupAccumulator<kN>& acc, float* dst) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  typedef WarpgroupAccumulator<kN> D;
  for (int nt = 0; nt < kN / 8; ++nt) {
    for (int e = 0; e < 4; ++e) dst[D::row(warp, lane, e) * kN + D::col(lane, nt, e)] = acc.v[0][nt][e];
  }
}

template <class Element, int kN>
__device__ void wgmma_fragment_test(const u16* q, const u16* k, const u16* v, float* s_out,
                                    float* o_out) {
  extern __shared__ __align__(1024) unsigned char smem[];
  typedef SmemTile<64, 64> QTile;
  typedef SmemTile<kN, 64> KTile;
  const u32 smem_q = (smem_address(smem) + 1023) & ~1023u;
  const u32 smem_k = smem_q + QTile::kBytes;
  const u32 smem_v = smem_k + KTile::kBytes;
  load_tile_async<64, 64, 128>(smem_q, q, 64, 64, threadIdx.x);
  load_tile_async<kN, 64, 128>(smem_k, k, 64, kN, threadIdx.x);
  load_tile_async<kN, 64, 128>(smem_v, v, 64, kN, threadIdx.x);
  cp_async_commit();
  cp_async_wait<0>();
  fence_async_shared();
  __syncthreads();

  WarpgroupAccumulator<kN> s;
  wgmma_fence();
  for (int kk = 0; kk < 4; ++kk) {
    wgmma_ss<Element, kN, 0, 0>(s.tiles(), k_major_descriptor<QTile>(smem_q, 0, kk),
                                k_major_descriptor<KTile>(smem_k, 0, kk), kk > 0);
  }
  wgmma_commit();
  wgmma_wait<0>();
  fence_accumulators(s.tiles());
  store_acc(s, s_out);

  OperandA<1, kN / 16> p;
  to_operand_a<Element>(s, p);
  WarpgroupAccumulator<64> o;
  o.fill(0.f);
  wgmma_fence();
  for (int kk = 0; kk < kN / 16; ++kk) {
    wgmma_rs<Element, 64, 1>(o.tiles(), p.v[0][kk], mn_major_descriptor<KTile>(smem_v, 0, kk), 1);
  }
  wgmma_commit();
  wgmma_wait<0>();
  fence_accumulators(o.tiles());
  store_acc(o, o_out);
}

extern "C" __global__ void wgmma_fragment_bf16_n64(const u16* q, const u16* k, const u16* v,
                                                   float* s, float* o) {
  wgmma_fragment_test<bf16, 64>(q, k, v, s, o);
}
extern "C" __global__ void wgmma_fragment_fp16_n128(const u16* q, const u16* k, const u16* v,
                                                    float* s, float* o) {
  wgmma_fragment_test<fp16, 128>(q, k, v, s, o);
}
)";

// The online softmax over kBlocks key blocks of kN scores per row, with O += P V after each
// step (P reused as the A operand, V [kBlocks kN x 32] 16-bit row-major as B operands), then
// finish() and the LSE. 64 rows: two warps of two mma slabs, or one warpgroup whose warps
// hold one m64 wgmma slab each. Scores [64 x kBlocks kN] fp32 (-inf where masked); O [64 x 32]
// fp32; LSE [64]. kSplit: the step that leaves the output's rescale to rescale().
constexpr std::string_view kSoftmaxSource = R"(#include "attnjit/common/fragment.cuh"
#include "attnjit/common/score_mod.cuh"
#include "attnjit/common/softmax.cuh"
using namespace attnjit;

struct SoftmaxParams {
  float scale_log2;
};

constexpr int kN = 32, kBlocks = 3, kCols = kN * kBlocks, kD = 32;

template <class Element, class Score, bool kSplit, class Scores, int kSlabs>
__device__ void softmax_test(const SoftmaxParams& p, const float* scores, const u16* v, float* o,
                             float* lse, int row0) {
  const int lane = threadIdx.x % 32;
  OnlineSoftmax<kSlabs> softmax;
  softmax.reset();
  WarpAccumulator<kSlabs, kD / 8> out;
  out.fill(0.f);
  for (int block = 0; block < kBlocks; ++block) {
    Scores s;
    for (int slab = 0; slab < kSlabs; ++slab) {
      for (int nt = 0; nt < kN / 8; ++nt) {
        for (int e = 0; e < 4; ++e) {
          s.v[slab][nt][e] = scores[(row0 + WarpAccumulator<kSlabs, kN / 8>::row(lane, slab, e)) * kCols +
                                    block * kN + WarpAccumulator<kSlabs, kN / 8>::col(lane, nt, e)];
        }
      }
    }
    if (kSplit) {
      float correction[kSlabs][2];
      softmax.template step<Score>(p, s, s, correction);
      OnlineSoftmax<kSlabs>::rescale(out, correction);
    } else {
      softmax.template step<Score>(p, s, out);
    }
    OperandA<kSlabs, kN / 16> a;
    to_operand_a<Element>(s, a);
    OperandB<kN / 16, kD / 8> b;
    for (int kk = 0; kk < kN / 16; ++kk) {
      for (int nt = 0; nt < kD / 8; ++nt) {
        for (int r = 0; r < 2; ++r) {
          const int n = OperandB<kN / 16, kD / 8>::n_of(lane, nt);
          const u32 lo = v[(block * kN + OperandB<kN / 16, kD / 8>::k_of(lane, kk, r, 0)) * kD + n];
          const u32 hi = v[(block * kN + OperandB<kN / 16, kD / 8>::k_of(lane, kk, r, 1)) * kD + n];
          b.v[kk][nt][r] = lo | (hi << 16);
        }
      }
    }
    mma<Element>(out, a, b);
  }
  softmax.finish(out, [&](int slab, int r) {
    if (lane % 4 == 0) {
      lse[row0 + 16 * slab + lane / 4 + 8 * r] = softmax.template lse<Score>(p, slab, r);
    }
  });
  for (int slab = 0; slab < kSlabs; ++slab) {
    for (int nt = 0; nt < kD / 8; ++nt) {
      for (int e = 0; e < 4; ++e) {
        o[(row0 + WarpAccumulator<kSlabs, kD / 8>::row(lane, slab, e)) * kD +
          WarpAccumulator<kSlabs, kD / 8>::col(lane, nt, e)] = out.v[slab][nt][e];
      }
    }
  }
}

// Two warps of two slabs: warp w holds rows [32 w, 32 w + 32).
extern "C" __global__ void softmax_mma_raw(const SoftmaxParams p, const float* scores,
                                           const u16* v, float* o, float* lse) {
  softmax_test<bf16, ScoreMod<false, false>, false, WarpAccumulator<2, kN / 8>, 2>(
      p, scores, v, o, lse, 32 * (threadIdx.x / 32));
}
extern "C" __global__ void softmax_mma_modified_split(const SoftmaxParams p, const float* scores,
                                                      const u16* v, float* o, float* lse) {
  softmax_test<fp16, ScoreMod<true, false>, true, WarpAccumulator<2, kN / 8>, 2>(
      p, scores, v, o, lse, 32 * (threadIdx.x / 32));
}
// One warpgroup holding S as the m64 x kN wgmma accumulator.
extern "C" __global__ void softmax_wgmma_raw_split(const SoftmaxParams p, const float* scores,
                                                   const u16* v, float* o, float* lse) {
  softmax_test<fp16, ScoreMod<false, false>, true, WarpgroupAccumulator<kN>, 1>(
      p, scores, v, o, lse, WarpgroupAccumulator<kN>::first_row(threadIdx.x / 32));
}
extern "C" __global__ void softmax_wgmma_modified(const SoftmaxParams p, const float* scores,
                                                  const u16* v, float* o, float* lse) {
  softmax_test<bf16, ScoreMod<false, true>, false, WarpgroupAccumulator<kN>, 1>(
      p, scores, v, o, lse, WarpgroupAccumulator<kN>::first_row(threadIdx.x / 32));
}
)";

// Mask application (mask_apply.cuh): mask_by_columns on the mma slabs of one warp (32 x 32,
// rows from 100, columns from 200), mask_by_rows on the m64 x 32 wgmma fragment of a
// warpgroup (rows from 50 + first_row, columns from 300), both with the rule
// (7 row + 3 col + state) % 5 == 0, state = values[column or row] and each state_of call
// counted in calls[]; mask_by_bits on the slabs of one warp (32 x 64) with bits[lane][slab].
// read_tile: a predicate policy's table entry and stored bits for the rows of two warps of two
// slabs (64 x 64 tiles of a 200 x 300 problem), words pre-filled with 0xA5A5A5A5.
constexpr std::string_view kMaskSource = R"(#include "attnjit/common/fragment.cuh"
#include "attnjit/common/mask_apply.cuh"
using namespace attnjit;

__device__ bool hidden_by_rule(int state, int row, int col) {
  return (7 * row + 3 * col + state) % 5 == 0;
}

extern "C" __global__ void mask_columns_test(const float* in, const int* values, float* out,
                                             int* calls) {
  const int lane = threadIdx.x % 32;
  typedef WarpAccumulator<2, 4> Acc;
  Acc acc;
  for (int s = 0; s < 2; ++s)
    for (int nt = 0; nt < 4; ++nt)
      for (int e = 0; e < 4; ++e) acc.v[s][nt][e] = in[Acc::row(lane, s, e) * 32 + Acc::col(lane, nt, e)];
  mask_by_columns(
      acc, lane, 100, 200,
      [values, calls](int col) {
        atomicAdd(&calls[col - 200], 1);
        return values[col - 200];
      },
      [](int state, int row, int col) { return hidden_by_rule(state, row, col); });
  for (int s = 0; s < 2; ++s)
    for (int nt = 0; nt < 4; ++nt)
      for (int e = 0; e < 4; ++e) out[Acc::row(lane, s, e) * 32 + Acc::col(lane, nt, e)] = acc.v[s][nt][e];
}

extern "C" __global__ void mask_rows_test(const float* in, const int* values, float* out,
                                          int* calls) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  typedef WarpgroupAccumulator<32> Acc;
  Acc acc;
  for (int nt = 0; nt < 4; ++nt)
    for (int e = 0; e < 4; ++e) acc.v[0][nt][e] = in[Acc::row(warp, lane, e) * 32 + Acc::col(lane, nt, e)];
  mask_by_rows(
      acc, lane, 50 + Acc::first_row(warp), 300,
      [values, calls](int row) {
        atomicAdd(&calls[row - 50], 1);
        return values[row - 50];
      },
      [](int state, int row, int col) { return hidden_by_rule(state, row, col); });
  for (int nt = 0; nt < 4; ++nt)
    for (int e = 0; e < 4; ++e) out[Acc::row(warp, lane, e) * 32 + Acc::col(lane, nt, e)] = acc.v[0][nt][e];
}

extern "C" __global__ void mask_bits_test(const float* in, const unsigned long long* bits,
                                          float* out) {
  const int lane = threadIdx.x % 32;
  typedef WarpAccumulator<2, 8> Acc;
  Acc acc;
  for (int s = 0; s < 2; ++s)
    for (int nt = 0; nt < 8; ++nt)
      for (int e = 0; e < 4; ++e) acc.v[s][nt][e] = in[Acc::row(lane, s, e) * 64 + Acc::col(lane, nt, e)];
  for (int s = 0; s < 2; ++s) mask_by_bits(acc, s, bits[lane * 2 + s]);
  for (int s = 0; s < 2; ++s)
    for (int nt = 0; nt < 8; ++nt)
      for (int e = 0; e < 4; ++e) out[Acc::row(lane, s, e) * 64 + Acc::col(lane, nt, e)] = acc.v[s][nt][e];
}

struct AllVisible {
  __device__ static bool visible(const PredicateInputs&, int, int, int, int) { return true; }
};
struct TileParams {
  const int* minmax;
  const unsigned* predicate_bits;
};
typedef PredicatePolicy<AllVisible, 64, 64, false, false> TilePolicy;

// out_tiles[n]: read_tile's value for key block n; out_words[((n * 64 + thread) * 2 + s) * 4
// + i]: the words of slab s (rows r = i / 2, word i % 2); out_bits[(n * 64 + thread) * 2 + s]:
// fragment_bits of them for a partial tile.
extern "C" __global__ void read_tile_test(const TileParams p, int row_begin, int* out_tiles,
                                          unsigned* out_words, unsigned long long* out_bits) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  MaskState ms;
  ms.seqlen_q = 200;
  ms.seqlen_k = 300;
  ms.diagonal = 100;
  ms.row_begin = row_begin;
  ms.row_end = min(row_begin + 64, 200);
  ms.window_left = ms.window_right = -1;
  ms.vector_row = 0;
  ms.num_key_blocks = 5;
  for (int n = 0; n < 5; ++n) {
    FragmentWords<2> words[2];
    for (int s = 0; s < 2; ++s)
      for (int r = 0; r < 2; ++r)
        for (int w = 0; w < 2; ++w) words[s].words[r][w] = 0xA5A5A5A5u;
    const int warp_row = 32 * warp;
    const int tile = read_tile<TilePolicy, 64, 8, false>(
        p, ms, &TileParams::minmax, &TileParams::predicate_bits, n,
        [warp_row, lane](int s) { return warp_row + 16 * s + lane / 4; }, words);
    if (threadIdx.x == 0) out_tiles[n] = tile;
    for (int s = 0; s < 2; ++s) {
      const int at = (n * 64 + threadIdx.x) * 2 + s;
      for (int i = 0; i < 4; ++i) out_words[at * 4 + i] = words[s].words[i / 2][i % 2];
      out_bits[at] = tile_kind(tile) == kTilePartial
                         ? TilePolicy::fragment_bits<8>(words[s], 2 * (lane % 4))
                         : 0ull;
    }
  }
}
)";

// KeyBlockWalk (block_walk.cuh) over the key blocks of one query block: FlashMask lower-band
// columns (LTS, LTE) whose min/max tables skip some blocks, kStages = 3, Sk not a multiple of
// the block. Per iteration: the block (blocks[it], -1 after the last), the stage's K and V
// un-swizzled (kv_seen[it][2][32][32] 16-bit) and its FlashMask values (vectors_seen[it][64]).
constexpr std::string_view kKeyWalkSource = R"(#include "attnjit/common/block_walk.cuh"
using namespace attnjit;

typedef MaskPolicy<false, false, 0, 1, -1, -1> Mask;
constexpr int kBlockN = 32, kHeadDim = 32, kThreads = 128, kStages = 3;
typedef KeyBlockWalk<Mask, kBlockN, kHeadDim, kHeadDim, kThreads, kStages> Walk;

extern "C" __global__ void key_walk_test(const FwdParams p, int* blocks, u16* kv_seen,
                                         int* vectors_seen) {
  extern __shared__ __align__(128) unsigned char smem[];
  const CtaWork work = cta_work<false>(cta_order_of<Mask::kOrderedCtas>(p));
  if (work.head >= p.heads) return;
  MaskState ms = make_mask_state<kBlockN, Mask>(p, work.head, work.batch);
  ms.row_begin = 0;
  ms.row_end = min(64, p.seqlen_q);
  const u32 smem_kv = smem_address(smem);
  const u32 smem_vectors = smem_kv + kStages * Walk::kStageBytes;
  Walk walk;
  walk.find_range(ms);
  walk.prefetch(p, ms, &FwdParams::minmax, smem_kv, smem_vectors, threadIdx.x);
  int it = 0;
  for (; walk.more(); ++it) {
    const int stage = walk.stage(p, ms, &FwdParams::minmax, smem_kv, smem_vectors, it, threadIdx.x);
    if (threadIdx.x == 0) blocks[it] = walk.block;
    const unsigned char* kv = smem + (Walk::kv_stage(smem_kv, stage) - smem_kv);
    for (int i = threadIdx.x; i < 2 * kBlockN * kHeadDim; i += kThreads) {
      const int tile = i / (kBlockN * kHeadDim), row = i / kHeadDim % kBlockN, col = i % kHeadDim;
      kv_seen[it * 2 * kBlockN * kHeadDim + i] = *reinterpret_cast<const u16*>(
          kv + tile * Walk::KTile::kBytes + Walk::KTile::element_offset(row, col));
    }
    for (int i = threadIdx.x; i < kBlockN * Mask::kColumns; i += kThreads) {
      vectors_seen[it * kBlockN * Mask::kColumns + i] =
          load_shared_s32(Walk::vector_stage(smem_vectors, stage) + 4 * i);
    }
    walk.advance(p, ms, &FwdParams::minmax);
  }
  if (threadIdx.x == 0) blocks[it] = -1;
  cp_async_wait<0>();
}
)";

const VocabularyKernel kKernels[] = {
    {"fragment_test.cu", kFragmentSource, {"fragment_bf16", "fragment_fp16"}, false},
    {"wgmma_fragment_test.cu",
     kWgmmaFragmentSource,
     {"wgmma_fragment_bf16_n64", "wgmma_fragment_fp16_n128"},
     true},
    {"softmax_test.cu",
     kSoftmaxSource,
     {"softmax_mma_raw", "softmax_mma_modified_split", "softmax_wgmma_raw_split",
      "softmax_wgmma_modified"},
     false},
    {"mask_test.cu",
     kMaskSource,
     {"mask_columns_test", "mask_rows_test", "mask_bits_test", "read_tile_test"},
     false},
    {"key_walk_test.cu", kKeyWalkSource, {"key_walk_test"}, false},
};

}  // namespace

std::span<const VocabularyKernel> vocabulary_kernels() {
  return kKernels;
}

const VocabularyKernel& vocabulary_kernel(std::string_view program) {
  for (const VocabularyKernel& kernel : kKernels) {
    if (kernel.program == program) return kernel;
  }
  throw InternalError("no vocabulary test program " + std::string(program));
}

std::vector<runtime::NvrtcHeader> template_headers() {
  std::vector<runtime::NvrtcHeader> headers;
  for (const auto& file : templates::all()) headers.push_back({file.name, file.source});
  return headers;
}

}  // namespace attnjit::testing
