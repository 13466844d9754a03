// The rows of the decode kernels (kv_cache=contiguous|paged): the decode kernel, which packs the
// query heads of a KV head into one tile's rows and splits the keys across CTAs, and the merge
// of its splits. Both are mma.sync and cp.async code: one family for every target.
#include <algorithm>
#include <array>

#include "compiler/registry/rows.hpp"

namespace attnjit::registry {
namespace {

constexpr int kDecodeThreads = 128;   // decode.cuh: four warps
constexpr int kDecodeRows = 16;       // packed query rows per CTA (one m16 tile)
constexpr int kDecodeBlockN = 64;     // keys per stage, 16 per warp
// Over an e4m3 cache up to head dim 128: 128 keys per stage, 32 per warp. A block's bytes
// halve with e4m3, and with 64 keys each block's barrier, waits and softmax chain came twice
// as often per byte: the CTAs fell short of the copy's bandwidth.
constexpr int kFp8DecodeBlockN = 128;
constexpr int kCombineThreads = 128;  // decode_combine.cuh's kCombineThreads: a CTA per row

// Stages of K and V keep about 96 KB of keys in flight per CTA (two CTAs per SM on Hopper):
// decoding streams the cache, and HBM needs that many bytes in flight per SM. `fewer`: the
// shape after it for targets with less shared memory (sm_86, sm_89: 101376 bytes), two stages,
// or over an e4m3 cache (`fp8`: a stage of one byte an element, up to twelve in flight) as many
// as fit there beside the Q tile and its row factors.
constexpr TileCandidate decode_candidate(int d_qk, int d_v, bool fewer = false, bool fp8 = false) {
  const int block_n = fp8 && d_qk <= 128 ? kFp8DecodeBlockN : kDecodeBlockN;
  const int stage_bytes = block_n * (d_qk + d_v) * (fp8 ? 1 : 2);
  const int fewer_stages =
      fp8 ? std::clamp((101376 - kDecodeRows * d_qk * 2 - 128) / stage_bytes, 2, 12) : 2;
  const int stages = fewer ? fewer_stages : std::clamp(96 * 1024 / stage_bytes, 2, fp8 ? 12 : 6);
  TileCandidate c{d_qk, kDecodeRows, block_n, kDecodeThreads / 32, 1, stages};
  c.head_dim_v = d_v;
  c.fp8_kv = fp8;
  return c;
}

// 101376 bytes (sm_86, sm_89) take head dims up to 128 (two stages at d128), and d256 over an
// e4m3 cache; 192 and 256 need sm_80's or sm_90's shared memory otherwise.
constexpr std::array<TileCandidate, 20> kDecodeCandidates{{
    decode_candidate(32, 32),
    decode_candidate(64, 64),
    decode_candidate(64, 64, true),
    decode_candidate(96, 96),
    decode_candidate(96, 96, true),
    decode_candidate(128, 128),
    decode_candidate(128, 128, true),
    decode_candidate(192, 192),
    decode_candidate(256, 256),
    decode_candidate(64, 128),
    decode_candidate(64, 128, true),
    decode_candidate(128, 64),
    decode_candidate(128, 64, true),
    decode_candidate(192, 128),
    decode_candidate(256, 128),
    decode_candidate(64, 64, false, true),
    decode_candidate(128, 128, false, true),
    decode_candidate(128, 128, true, true),
    decode_candidate(256, 256, false, true),
    decode_candidate(256, 256, true, true),
}};

constexpr std::array<ConfigField, 5> kDecodeConfig{
    ConfigField::head_dims_qk_v, ConfigField::block_n, ConfigField::kv_stages,
    ConfigField::return_lse, ConfigField::kv_element};

// The shapes of the spec's cache: those of an e4m3 cache or of a 16-bit one.
bool decode_fits(const TileCandidate& c, const AttentionSpec& spec, const MaskLowering&) {
  return c.fp8_kv == spec.kv_dtype.has_value();
}

// Decode::kSmemBytes: the Q tile (and over an e4m3 cache its rows' score factors, 128 bytes),
// then the stages, or the merge of the warps' rows over them.
int decode_smem(const TileCandidate& c, const AttentionSpec& spec, const MaskLowering&) {
  const int q_bytes = kDecodeRows * spec.head_dim_qk * size_of(spec.dtype);
  const int factors = spec.kv_dtype ? 128 : 0;
  const int stages =
      c.kv_stages * c.block_n * (spec.head_dim_qk + spec.head_dim_v) * kv_element_size(spec);
  const int merge = 4 * 16 * (spec.head_dim_v + 4) * 4 + 4 * 16 * 4;
  return q_bytes + factors + std::max(stages, merge);
}

// A key split of every 16 packed rows (G x Sq of a sequence) of every KV head and sequence,
// unless the launch runs the prefill kernel instead.
LaunchGrid decode_grid() {
  return {LaunchExpr(Extent::splits) * (1 + LaunchExpr(Extent::prefill) * -1),
          LaunchExpr(Extent::kv_heads) * ceil_div(Extent::query_groups, kDecodeRows),
          Extent::batch};
}

// 1 when the keys are split, else 0: the partial rows and their merge exist only then.
LaunchExpr when_split() {
  return min(LaunchExpr(Extent::splits) + -1, 1);
}

// The split's rows: fp32 [splits, B, Sq, H, Dv] and LSEs [splits, B, Sq, H]; the decode kernel
// also reads the FlashMask vectors' min/max tables of its key blocks, or a predicate's block
// table of 16 new tokens x its key blocks.
std::vector<BufferNeed> decode_buffers(const KernelDesc& kernel, const Lowering& ir) {
  const LaunchExpr rows =
      when_split() * Extent::splits * Extent::batch * Extent::seqlen_q * Extent::heads;
  std::vector<BufferNeed> needs{
      {ParamField::o_partial, {"o_partial", rows * (ir.spec.head_dim_v * 4), false}},
      {ParamField::lse_partial, {"lse_partial", rows * 4, false}}};
  const int block_n = ir.tiles_of(KernelRole::decode).block_n;  // the tables' key blocks
  if (kernel.role == KernelRole::decode && ir.mask->needs_minmax) {
    needs.push_back({ParamField::minmax, minmax_table(block_n, ir)});
  }
  if (kernel.role == KernelRole::decode && ir.mask->decode_table) {
    needs.push_back(
        {ParamField::minmax, predicate_table(KernelRole::decode, kDecodeRows, block_n, ir)});
  }
  return needs;
}

RowLaunch decode_launch(const KernelDesc& kernel, const Lowering&) {
  RowLaunch launch = single_phase(kernel, decode_grid());
  launch.scalars.push_back({ParamScalar::num_splits, Extent::splits});
  return launch;
}

// One CTA per output row, launched only when the keys are split.
RowLaunch combine_launch(const KernelDesc& kernel, const Lowering&) {
  const LaunchExpr rows = LaunchExpr(Extent::batch) * Extent::seqlen_q * Extent::heads;
  RowLaunch launch = single_phase(kernel, {when_split() * rows, 1, 1});
  launch.scalars.push_back({ParamScalar::num_splits, Extent::splits});
  return launch;
}

// One thread per 16-byte chunk of every appended row of K and V (of the cache's element type),
// launched only when appending.
RowLaunch append_launch(const KernelDesc& kernel, const Lowering& ir) {
  const int chunks = (ir.spec.head_dim_qk + ir.spec.head_dim_v) * kv_element_size(ir.spec) / 16;
  const LaunchExpr threads =
      LaunchExpr(Extent::batch) * Extent::new_tokens * Extent::kv_heads * chunks;
  return single_phase(kernel, {ceil_div(threads, kernel.threads), 1, 1});
}

std::vector<BufferNeed> no_buffers(const KernelDesc&, const Lowering&) {
  return {};
}

}  // namespace

KernelRow decode() {
  KernelRow row;
  row.id = "decode.sm80";
  row.role = KernelRole::decode;
  row.family = KernelFamily::sm80;
  row.header = "attnjit/sm80/decode.cuh";
  row.kernel_struct = "DecodeSm80";
  row.body = "decode_sm80";
  row.params = ParamBlock::attention;
  row.support.targets.assign(kAllArchs.begin(), kAllArchs.end());
  row.support.unequal_head_dims = true;
  row.support.fp8_kv = true;
  row.candidates = kDecodeCandidates;
  row.fits = decode_fits;
  row.config = kDecodeConfig;
  row.smem_bytes = decode_smem;
  row.launch = decode_launch;
  row.buffers = decode_buffers;
  row.dependent_launch = true;  // after kv_append
  row.min_blocks_per_sm = 2;
  return row;
}

KernelRow decode_combine() {
  KernelRow row =
      utility("decode_combine", KernelRole::decode_combine, "attnjit/common/decode_combine.cuh",
              ParamBlock::attention, kCombineThreads, combine_launch, decode_buffers);
  row.dependent_launch = true;  // after the decode kernel
  return row;
}

KernelRow kv_append() {
  return utility("kv_append", KernelRole::kv_append, "attnjit/common/kv_append.cuh",
                 ParamBlock::attention, 256, append_launch, no_buffers);
}

}  // namespace attnjit::registry
