// The attention IR a user writes: AttentionSpec and MaskSpec, their canonical text form
// (one printer, one parser, round-tripping) and the names of their enum values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace attnjit {

/// Element type of the inputs. e4m3 (FP8, the sm90a forward): Q, K and V of one byte each,
/// scaled by the launch's descale factors; O in bf16.
enum class DType : std::uint8_t { fp16, bf16, e4m3 };

/// Structure of the mask. Runtime data (window sizes, interval vectors) is not part of it. Each
/// kind has a row in the table of mask kinds (mask_kinds()).
enum class MaskKind : std::uint8_t {
  none,            ///< every key visible
  causal,          ///< key j visible to query i iff j <= i + (Sk - Sq) (bottom-right aligned)
  sliding_window,  ///< i + off - window_left <= j <= i + off + window_right (runtime sizes)
  flashmask,       ///< FlashMask column intervals LTS/LTE/UTS/UTE (docs/masks.md)
  predicate,       ///< an element predicate over (b, h, q, k) (compiler/ir/predicate.hpp)
};

/// Which pass over the attention the kernels compute.
enum class Direction : std::uint8_t { forward, backward };

/// How a spec's batch is laid out: padded [B, S, H, D] tensors, or a packed batch
/// ([total, H, D] tensors and cu_seqlens boundaries at launch, FlashAttention's varlen) whose
/// keys have boundaries of their own (`separate`) or share the queries' (`shared`: self-attention
/// over one packed batch, cu_seqlens_k is cu_seqlens_q, which lets causal masks run by index).
enum class VarlenMode : std::uint8_t { off, separate, shared };

/// Whether the keys and values are a KV cache that the query rows of each sequence attend to
/// (FlashAttention's flash_attn_with_kvcache, decoding): `contiguous` caches k/v
/// [B, capacity, Hkv, D], `paged` ones [num_pages, page_size, Hkv, D] with a block table that
/// maps each sequence's logical pages to physical ones. The cached lengths, the block table and
/// the number of key splits are launch arguments (KvCacheArgs).
enum class KvCache : std::uint8_t { none, contiguous, paged };

/// Target architecture. `auto_detect` resolves to the current device when compiling.
enum class Arch : std::uint8_t { auto_detect, sm_80, sm_86, sm_89, sm_90, sm_90a };

/// The mask's structure: what changes generated code.
struct MaskSpec {
  MaskKind kind = MaskKind::none;
  bool causal = false;  ///< flashmask only: the causal part is applied by index arithmetic
  int columns = 0;      ///< flashmask only: interval vectors per key column (1, 2 or 4)
  /// predicate only: the canonical text of the lifted predicate (literals are runtime scalars
  /// `$N`), e.g. `q>=k&&doc[q]==doc[k]` or `q-k<$0`; empty for every other kind.
  std::string predicate;
  /// predicate only: the values of the literals parse_spec lifted out of the written text
  /// (`q-k<256` gives `q-k<$0` and {256}), slot $i's at index i; empty when the text had none.
  /// Launch values, not structure: canonicalize drops them (specs that differ only in them share
  /// one kernel), and a launch without scalars of its own takes these (jit::Kernel).
  std::vector<std::int32_t> scalars;

  bool operator==(const MaskSpec&) const = default;
};

/// A row of the table of mask kinds (compiler/ir/spec.cpp): what the spec text, validate, the
/// reference kernel and the tools know about a kind. How it is lowered is lower_mask's.
struct MaskKindInfo {
  MaskKind kind = MaskKind::none;
  std::string_view name;  ///< the word in the spec text, e.g. `flashmask`
  std::string_view
      syntax;  ///< its spelling there, e.g. `flashmask(causal=true|false,columns=1|2|4)`
  std::string_view example;  ///< a spelled-out use where `syntax` has a placeholder, else empty
  /// Where its runtime data comes from: `none`, `causal` (index arithmetic), `window` (the launch's
  /// window sizes), `intervals` (startend_row_indices) or `predicate` (scalars and tensors).
  std::string_view form;
  int reference_mask = 0;         ///< kMask of templates/attnjit/common/reference.cuh
  bool interval_vectors = false;  ///< takes causal/columns arguments and startend_row_indices
  bool predicate = false;         ///< takes a predicate expression
  /// Parses `text` = `name(...)`, `open` the index of its `(`; null for a kind without arguments.
  MaskSpec (*parse_arguments)(std::string_view text, std::size_t open) = nullptr;
  /// The spec text of a mask of this kind; null: `name`.
  std::string (*print)(const MaskSpec& mask) = nullptr;
};

/// Every mask kind, in MaskKind order.
std::span<const MaskKindInfo> mask_kinds();
const MaskKindInfo& info_of(MaskKind kind);

/// The kernel layout an explicit tile shape asks for; each forces one kernel row.
enum class TileLayout : std::uint8_t {
  /// A bare `BMxBNxW`: forward.sm80 with the planner's Q placement in the forward, key slabs
  /// in the backward (canonicalize spells it `slabs` there).
  automatic,
  q_registers,  ///< forward.sm80, Q fragments kept in registers
  q_shared,     ///< forward.sm80, Q re-read from shared memory
  slabs,        ///< backward_slabs.sm80 (key slabs)
  grid,         ///< backward_grid.sm80 (a 2-D warp grid)
  warpgroups,   ///< forward.sm90a or backward.sm90a (wgmma warpgroups)
};

/// A row of the table of tile layouts (compiler/ir/spec.cpp), which the spec text, its help and
/// the registry's checks and messages read.
struct TileLayoutInfo {
  TileLayout layout = TileLayout::automatic;
  std::string_view name;  ///< the word after the colon, e.g. `q_shared`; empty for automatic
  bool forward = false;   ///< the forward takes it
  bool backward = false;  ///< the backward takes it
};

/// Every tile layout, in TileLayout order.
std::span<const TileLayoutInfo> tile_layouts();
const TileLayoutInfo& info_of(TileLayout layout);

/// Whether `direction` takes `layout`.
bool takes(Direction direction, TileLayout layout);

/// The layouts `direction` takes, for messages: e.g. `q_registers, q_shared, warpgroups`.
std::string tile_layouts_of(Direction direction);

/// An explicit tile shape (tuning and benchmarking); all zero means "chosen by select_tiles".
/// Text form `BMxBNxW` with an optional `:LAYOUT`, e.g. `tiles=128x64x8:q_shared`,
/// `tiles=128x128x12:warpgroups`, `tiles=64x128x8:grid`.
struct TileShape {
  int block_m = 0;
  int block_n = 0;
  int warps = 0;
  TileLayout layout = TileLayout::automatic;

  bool is_auto() const {
    return block_m == 0 && block_n == 0 && warps == 0 && layout == TileLayout::automatic;
  }
  bool operator==(const TileShape&) const = default;
};

/// One attention problem's compile-time signature. Batch, lengths, head counts, strides,
/// pointers, the softmax scale, window sizes, interval vectors, the soft-cap value and the
/// ALiBi slopes are launch arguments.
///
/// Score modifiers, applied to s = softmax_scale * (q_i . k_j) of query row i, query head h
/// and key j before the mask and the softmax (soft-capping first, then ALiBi):
/// - softcap: s <- cap * tanh(s / cap), cap > 0 a runtime argument;
/// - alibi: s <- s + slope[h] * (j - (i + Sk - Sq)), slopes a runtime fp32 tensor [H] (the
///   bottom-right aligned distance: 0 on the causal diagonal, negative for earlier keys).
/// The LSE is that of the modified scores; the backward differentiates through both.
///
/// Learnable attention sinks (sinks=true, gpt-oss): a logit t[h] per query head h (a runtime
/// fp32 tensor [H]) joins the denominator of each row's softmax and has no value:
///   P_ij = exp(s_ij - L_i), L_i = log(sum_j exp(s_ij) + exp(t[h])), O_i = sum_j P_ij V_j,
/// with s_ij the scores after the modifiers and the mask. The returned LSE is L_i (sink
/// included); a row with no visible key has O = 0 and LSE = t[h]. The backward returns
/// d t[h] = -sum_i exp(t[h] - L_i) D_i over every row i of head h (all batches), with
/// D_i = rowsum(dO_i * O_i); dQ, dK and dV follow from L_i as without sinks.
struct AttentionSpec {
  DType dtype = DType::bf16;
  int head_dim_qk = 0;
  int head_dim_v = 0;
  MaskSpec mask;
  bool return_lse = false;
  Direction direction = Direction::forward;
  /// Backward only: gradients bitwise identical from run to run (dQ without atomics).
  bool deterministic = false;
  Arch target = Arch::auto_detect;
  TileShape tiles;
  bool softcap = false;  ///< logit soft-capping, s <- cap * tanh(s / cap)
  bool alibi = false;    ///< ALiBi, s <- s + slope[h] * (j - (i + Sk - Sq))
  bool sinks = false;    ///< a learnable sink logit per query head joins each softmax row
  /// Packed batches (spec text `varlen=true` for separate, `varlen=shared`): q [total_q, H, D],
  /// k and v [total_k, Hkv, D], o [total_q, H, Dv], lse [H, total_q], with the sequence
  /// boundaries cu_seqlens_q/k as launch arguments (VarlenArgs), so a new batch composition
  /// never recompiles. The mask applies within each sequence, in its local positions (causal
  /// bottom-right per sequence); keys of other sequences are hidden.
  VarlenMode varlen = VarlenMode::off;
  /// Attention against a KV cache (spec text `kv_cache=contiguous|paged`, printed only when
  /// set): the decode kernels, which pack the query heads of each KV head into the rows of one
  /// tile and split the keys across CTAs (Flash-Decoding) with an exact combine. Forward only.
  KvCache kv_cache = KvCache::none;
  /// The element type of a KV cache's K and V where it is not dtype (spec text `kv_dtype=e4m3`,
  /// printed last and only when set): an FP8 cache, one byte an element, whose values the
  /// launch's k_descale and v_descale (fp32, per tensor or per (sequence, KV head)) turn into
  /// keys and values as the decode kernel reads them. The queries and the output keep dtype;
  /// new keys and values to append are of the cache's type. kv_cache specs only.
  std::optional<DType> kv_dtype;

  bool operator==(const AttentionSpec&) const = default;
};

/// Canonical text form, e.g.
/// `dtype=bf16 head_dim_qk=128 head_dim_v=128 mask=causal softcap=false alibi=false
/// sinks=false return_lse=false direction=forward deterministic=false target=auto tiles=auto`,
/// with ` varlen=true` or ` varlen=shared` at the end for a packed batch (absent when false)
/// and then ` kv_cache=contiguous` or ` kv_cache=paged` (absent when none) and ` kv_dtype=e4m3`
/// (absent when unset).
/// A predicate's MaskSpec::scalars are printed in place of their slots (`q-k<256`), so
/// parse_spec(to_string(s)) == s for every spec (a predicate in canonical text, which has no
/// spaces: parse_spec and canonicalize put it so).
std::string to_string(const AttentionSpec& spec);
std::string to_string(const MaskSpec& mask);
std::string to_string(const TileShape& tiles);

/// Parses `key=value` words separated by spaces (so a predicate mask is written without spaces:
/// `mask=predicate(q>=k&&(q-k)<256)`). Accepted keys: those of spec_keys(). `dtype` also takes
/// the aliases `float16`, `half` (fp16) and `bfloat16` (bf16), which parse to the same spec (the
/// canonical text, and so the cache key, names fp16 or bf16). A predicate is parsed and stored as
/// its canonical text with its literals lifted into runtime scalar slots (MaskSpec::scalars holds
/// their values; at most 16); it is written either with numbers or with `$N` slots whose values
/// the launch gives, not both. Throws Error naming the key, the value and what is accepted (for a
/// predicate, the line and column in it). Does not check value ranges (validate does).
AttentionSpec parse_spec(std::string_view text);

/// A key of the spec text and what it accepts, from the table parse_spec reads.
struct SpecKey {
  std::string_view name;  ///< e.g. `dtype`
  std::string accepted;   ///< its values and default, e.g. `false (default), true`
};

/// Every key parse_spec accepts, in the order of the canonical text (`head_dim` before
/// `head_dim_qk` and `head_dim_v`).
std::vector<SpecKey> spec_keys();

std::string_view name_of(DType dtype);
std::string_view name_of(MaskKind kind);
std::string_view name_of(Direction direction);
std::string_view name_of(Arch arch);
std::string_view name_of(VarlenMode mode);  ///< its spec text: false, true, shared
std::string_view name_of(KvCache cache);    ///< its spec text: none, contiguous, paged
std::string_view name_of(TileLayout layout);

/// Parses an arch name (`auto`, `sm_80`, `sm_86`, `sm_89`, `sm_90`, `sm_90a`); throws Error
/// naming `field` otherwise.
Arch parse_arch(std::string_view text, std::string_view field);

/// Size in bytes of one element of `dtype`.
int size_of(DType dtype);
/// Size in bytes of one element of the spec's K and V: kv_dtype's where set, else dtype's.
int kv_element_size(const AttentionSpec& spec);

}  // namespace attnjit
