// Canonical printer and parser of AttentionSpec (a predicate mask's literals lifted into runtime
// scalars), and the names of the IR's enum values.
#include "attnjit/spec.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <optional>
#include <utility>
#include <vector>

#include "attnjit/error.hpp"
#include "compiler/ir/predicate.hpp"

namespace attnjit {
namespace {

template <class Enum, std::size_t N>
using NameTable = std::array<std::pair<Enum, std::string_view>, N>;

constexpr NameTable<DType, 3> kDTypeNames{
    {{DType::fp16, "fp16"}, {DType::bf16, "bf16"}, {DType::e4m3, "e4m3"}}};
// Other spellings of a dtype (PyTorch's and NumPy's): parsed to the same DType, never printed,
// so the canonical text and the cache key are those of the canonical name.
constexpr NameTable<DType, 4> kDTypeAliases{{{DType::fp16, "float16"},
                                             {DType::fp16, "half"},
                                             {DType::bf16, "bfloat16"},
                                             {DType::e4m3, "float8_e4m3fn"}}};
constexpr NameTable<Direction, 2> kDirectionNames{
    {{Direction::forward, "forward"}, {Direction::backward, "backward"}}};
constexpr NameTable<VarlenMode, 3> kVarlenNames{{{VarlenMode::off, "false"},
                                                {VarlenMode::separate, "true"},
                                                {VarlenMode::shared, "shared"}}};
constexpr NameTable<KvCache, 3> kKvCacheNames{{{KvCache::none, "none"},
                                               {KvCache::contiguous, "contiguous"},
                                               {KvCache::paged, "paged"}}};
constexpr NameTable<Arch, 6> kArchNames{{{Arch::auto_detect, "auto"},
                                         {Arch::sm_80, "sm_80"},
                                         {Arch::sm_86, "sm_86"},
                                         {Arch::sm_89, "sm_89"},
                                         {Arch::sm_90, "sm_90"},
                                         {Arch::sm_90a, "sm_90a"}}};

template <class Enum, std::size_t N>
std::string_view lookup_name(const NameTable<Enum, N>& table, Enum value) {
  for (const auto& [entry, name] : table) {
    if (entry == value) return name;
  }
  throw InternalError("enum value without a name");
}

// The row of `table` whose `Key` member is `value` (every enum value has one).
template <auto Key, class Row, std::size_t N, class Value>
const Row& row_of(const std::array<Row, N>& table, Value value) {
  for (const Row& row : table) {
    if (row.*Key == value) return row;
  }
  throw InternalError("enum value without a row");
}

template <class Enum, std::size_t N>
std::string accepted_names(const NameTable<Enum, N>& table) {
  std::string out;
  for (const auto& [entry, name] : table) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}

template <class Enum, std::size_t N>
Enum parse_enum(const NameTable<Enum, N>& table, std::string_view text, std::string_view field) {
  for (const auto& [entry, name] : table) {
    if (name == text) return entry;
  }
  throw_field_error(field, text, accepted_names(table));
}

int parse_int(std::string_view text, std::string_view field, std::string_view accepted) {
  int value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) throw_field_error(field, text, accepted);
  return value;
}

bool parse_bool(std::string_view text, std::string_view field) {
  if (text == "true") return true;
  if (text == "false") return false;
  throw_field_error(field, text, "true, false");
}

// mask=flashmask(causal=true,columns=1): the arguments inside the parentheses.
MaskSpec parse_flashmask_arguments(std::string_view args) {
  MaskSpec mask{MaskKind::flashmask, false, 0};
  bool seen_causal = false;
  bool seen_columns = false;
  for (bool more = !args.empty(); more;) {
    const std::size_t comma = args.find(',');
    const std::string_view item = args.substr(0, comma);
    more = comma != std::string_view::npos;
    args = more ? args.substr(comma + 1) : std::string_view{};
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      throw_field_error("mask=flashmask(...) argument", item, "causal=true|false, columns=1|2|4");
    }
    const std::string_view key = item.substr(0, eq);
    const std::string_view value = item.substr(eq + 1);
    if (key == "causal" && !seen_causal) {
      mask.causal = parse_bool(value, "flashmask causal");
      seen_causal = true;
    } else if (key == "columns" && !seen_columns) {
      mask.columns = parse_int(value, "flashmask columns", "1, 2, 4");
      seen_columns = true;
    } else {
      throw_field_error("mask=flashmask(...) argument", item,
                        "causal=true|false, columns=1|2|4, each once");
    }
  }
  if (!seen_causal || !seen_columns) {
    throw Error(
        "mask: flashmask needs both arguments, e.g. flashmask(causal=true,columns=1); "
        "accepted: causal=true|false, columns=1|2|4");
  }
  return mask;
}

std::string mask_accepted();

// mask=flashmask(...): the arguments between the parentheses.
MaskSpec parse_flashmask_mask(std::string_view text, std::size_t open) {
  if (text.back() != ')') throw_field_error("mask", text, mask_accepted());
  return parse_flashmask_arguments(text.substr(open + 1, text.size() - open - 2));
}

// mask=predicate(EXPR): EXPR parsed, its literals lifted into scalar slots whose values the
// MaskSpec keeps. Spec words are split at spaces, so a predicate with spaces arrives cut: its
// parentheses do not balance.
MaskSpec parse_predicate_mask(std::string_view text, std::size_t open) {
  if (text.back() != ')' ||
      std::count(text.begin(), text.end(), '(') != std::count(text.begin(), text.end(), ')')) {
    throw_field_error("mask", text,
                      "predicate(EXPR) with EXPR written without spaces (spec words are "
                      "separated by spaces), e.g. mask=predicate(q>=k&&doc[q]==doc[k])");
  }
  const std::string_view expression = text.substr(open + 1, text.size() - open - 2);
  const std::string field = fmt::format("mask=predicate({})", quoted_input(expression));
  Predicate parsed;
  try {
    // Canonical text from a spec may hold the mask language's generated tensors (`_doc0`).
    parsed = parse_predicate(expression, {.allow_reserved_tensor_names = true});
  } catch (const PredicateParseError& error) {
    throw Error(fmt::format("{}: {}", field, error.what()));
  }
  const PredicateInfo used = info(parsed);
  if (used.literal_count > 0 && used.scalar_count > 0) {
    throw_field_error(field, expression,
                      "numbers (each becomes a runtime scalar) or $N slots (the launch gives "
                      "their values), not both");
  }
  MaskSpec mask{MaskKind::predicate};
  const Predicate lifted = used.literal_count > 0 ? lift_literals(parsed, mask.scalars) : parsed;
  if (mask.scalars.size() > static_cast<std::size_t>(kPredicateScalarLimit)) {
    throw_field_error(
        field, fmt::format("{} numbers", mask.scalars.size()),
        fmt::format("at most {} numbers (each becomes a runtime scalar)", kPredicateScalarLimit));
  }
  mask.predicate = to_string(lifted);
  return mask;
}

std::string print_flashmask(const MaskSpec& mask) {
  return fmt::format("flashmask(causal={},columns={})", mask.causal, mask.columns);
}

// The lifted text with the values of MaskSpec::scalars back in their slots: the text
// parse_predicate_mask read. A text that does not parse (a MaskSpec built in code; validate
// names it) is printed as it is.
std::string print_predicate(const MaskSpec& mask) {
  if (mask.scalars.empty()) return fmt::format("predicate({})", mask.predicate);
  Predicate predicate;
  try {
    predicate = parse_predicate(mask.predicate, {.allow_reserved_tensor_names = true});
  } catch (const Error&) {
    return fmt::format("predicate({})", mask.predicate);
  }
  for (PredicateNode& node : predicate.nodes) {
    if (node.op != PredicateOp::scalar) continue;
    if (static_cast<std::size_t>(node.value) >= mask.scalars.size()) continue;
    node.op = PredicateOp::literal;
    node.value = mask.scalars[static_cast<std::size_t>(node.value)];
  }
  return fmt::format("predicate({})", to_string(predicate));
}

// The table of mask kinds, in MaskKind order (ReferenceMask codes of reference.cuh).
constexpr std::array<MaskKindInfo, 5> kMaskKinds{{
    {.kind = MaskKind::none, .name = "none", .syntax = "none", .form = "none", .reference_mask = 0},
    {.kind = MaskKind::causal,
     .name = "causal",
     .syntax = "causal",
     .form = "causal",
     .reference_mask = 1},
    {.kind = MaskKind::sliding_window,
     .name = "sliding_window",
     .syntax = "sliding_window",
     .form = "window",
     .reference_mask = 2},
    {.kind = MaskKind::flashmask,
     .name = "flashmask",
     .syntax = "flashmask(causal=true|false,columns=1|2|4)",
     .form = "intervals",
     .reference_mask = 3,
     .interval_vectors = true,
     .parse_arguments = parse_flashmask_mask,
     .print = print_flashmask},
    {.kind = MaskKind::predicate,
     .name = "predicate",
     .syntax = "predicate(EXPR)",
     .example = "predicate(q>=k)",
     .form = "predicate",
     .reference_mask = 4,
     .predicate = true,
     .parse_arguments = parse_predicate_mask,
     .print = print_predicate},
}};

// Every kind's syntax: what the mask key accepts.
std::string mask_accepted() {
  std::string out;
  for (const MaskKindInfo& info : kMaskKinds) {
    out += out.empty() ? "" : ", ";
    out += info.syntax;
  }
  return out;
}

MaskSpec parse_mask(std::string_view text) {
  const std::size_t open = text.find('(');
  const std::string_view name = text.substr(0, open);
  const auto info = std::find_if(kMaskKinds.begin(), kMaskKinds.end(),
                                 [&](const MaskKindInfo& k) { return k.name == name; });
  if (open == std::string_view::npos) {
    if (info == kMaskKinds.end()) {
      std::string names;
      for (const MaskKindInfo& k : kMaskKinds)
        names += fmt::format("{}{}", names.empty() ? "" : ", ", k.name);
      throw_field_error("mask", text, names);
    }
    if (info->parse_arguments != nullptr) {
      throw Error(fmt::format("mask: got '{}' without arguments; accepted: {}{}{}",
                              quoted_input(text), info->syntax,
                              info->example.empty() ? "" : ", e.g. ", info->example));
    }
    return MaskSpec{info->kind, false, 0};
  }
  if (info == kMaskKinds.end() || info->parse_arguments == nullptr) {
    throw_field_error("mask", text, mask_accepted());
  }
  return info->parse_arguments(text, open);
}

// The word after `tiles=BMxBNxW:` and the directions that take it; TileLayout order.
constexpr std::array<TileLayoutInfo, 6> kTileLayouts{{
    {TileLayout::automatic, "", true, true},
    {TileLayout::q_registers, "q_registers", true, false},
    {TileLayout::q_shared, "q_shared", true, false},
    {TileLayout::slabs, "slabs", false, true},
    {TileLayout::grid, "grid", false, true},
    {TileLayout::warpgroups, "warpgroups", true, true},
}};

// The one-letter suffixes that named layouts replaced: refused with the new spelling.
constexpr std::array<std::pair<char, TileLayout>, 5> kRetiredTileSuffixes{{
    {'q', TileLayout::q_registers},
    {'s', TileLayout::q_shared},
    {'w', TileLayout::warpgroups},
    {'g', TileLayout::grid},
    {'t', TileLayout::warpgroups},
}};

std::string tiles_accepted() {
  return fmt::format(
      "auto or BMxBNxW[:LAYOUT], LAYOUT one of {} (forward) or {} (backward), e.g. "
      "128x64x4:q_shared",
      tile_layouts_of(Direction::forward), tile_layouts_of(Direction::backward));
}

TileLayout parse_tile_layout(std::string_view text, std::string_view name) {
  for (const TileLayoutInfo& info : kTileLayouts) {
    if (!info.name.empty() && info.name == name) return info.layout;
  }
  throw_field_error("tiles", text, tiles_accepted());
}

TileShape parse_tiles(std::string_view text) {
  if (text == "auto") return {};
  TileShape tiles;
  std::string_view rest = text;
  std::optional<TileLayout> retired;
  if (const std::size_t colon = text.find(':'); colon != std::string_view::npos) {
    tiles.layout = parse_tile_layout(text, text.substr(colon + 1));
    rest = text.substr(0, colon);
  } else {
    for (const auto& [letter, layout] : kRetiredTileSuffixes) {
      if (!rest.empty() && rest.back() == letter) retired = layout;
    }
    if (retired) rest.remove_suffix(1);
  }
  const std::string_view shape = rest;
  int* fields[3] = {&tiles.block_m, &tiles.block_n, &tiles.warps};
  for (int i = 0; i < 3; ++i) {
    const std::size_t x = rest.find('x');
    if ((i < 2) == (x == std::string_view::npos)) {
      throw_field_error("tiles", text, tiles_accepted());
    }
    *fields[i] = parse_int(rest.substr(0, x), "tiles", tiles_accepted());
    if (*fields[i] <= 0) throw_field_error("tiles", text, tiles_accepted());
    rest = i < 2 ? rest.substr(x + 1) : std::string_view{};
  }
  if (retired) {
    throw Error(
        fmt::format("tiles: got '{}'; the one-letter suffixes are gone: write {}:{} (accepted: {})",
                    quoted_input(text), shape, name_of(*retired), tiles_accepted()));
  }
  return tiles;
}

constexpr std::string_view kHeadDims = "32, 64, 96, 128, 192, 256";

// What parse_spec has read so far: the head dims are resolved once every word is read.
struct SpecDraft {
  AttentionSpec spec;
  std::optional<int> head_dim, head_dim_qk, head_dim_v;
  bool seen_dtype = false;
};

DType parse_dtype(std::string_view text) {
  for (const auto& [dtype, alias] : kDTypeAliases) {
    if (alias == text) return dtype;
  }
  return parse_enum(kDTypeNames, text, "dtype");
}

std::string dtype_accepted() {
  return fmt::format("{} (required; also {})", accepted_names(kDTypeNames),
                     accepted_names(kDTypeAliases));
}

std::string bool_accepted() {
  return "false (default), true";
}

// One key of the spec text: its name, what it accepts (for help texts) and how its value is
// read. parse_spec and spec_keys() read this table only.
struct KeyRow {
  std::string_view name;
  std::string (*accepted)();
  void (*parse)(std::string_view value, SpecDraft& draft);
};

constexpr std::array<KeyRow, 16> kKeyRows{{
    {"dtype", dtype_accepted,
     [](std::string_view value, SpecDraft& d) {
       d.spec.dtype = parse_dtype(value);
       d.seen_dtype = true;
     }},
    {"head_dim", [] { return fmt::format("{} (sets head_dim_qk and head_dim_v)", kHeadDims); },
     [](std::string_view value, SpecDraft& d) {
       d.head_dim = parse_int(value, "head_dim", kHeadDims);
     }},
    {"head_dim_qk",
     [] { return fmt::format("{} (with head_dim_v, instead of head_dim)", kHeadDims); },
     [](std::string_view value, SpecDraft& d) {
       d.head_dim_qk = parse_int(value, "head_dim_qk", kHeadDims);
     }},
    {"head_dim_v",
     [] { return fmt::format("{} (with head_dim_qk, instead of head_dim)", kHeadDims); },
     [](std::string_view value, SpecDraft& d) {
       d.head_dim_v = parse_int(value, "head_dim_v", kHeadDims);
     }},
    {"mask", [] { return fmt::format("{} (default none)", mask_accepted()); },
     [](std::string_view value, SpecDraft& d) { d.spec.mask = parse_mask(value); }},
    {"softcap", bool_accepted,
     [](std::string_view value, SpecDraft& d) { d.spec.softcap = parse_bool(value, "softcap"); }},
    {"alibi", bool_accepted,
     [](std::string_view value, SpecDraft& d) { d.spec.alibi = parse_bool(value, "alibi"); }},
    {"sinks", bool_accepted,
     [](std::string_view value, SpecDraft& d) { d.spec.sinks = parse_bool(value, "sinks"); }},
    {"return_lse", bool_accepted,
     [](std::string_view value, SpecDraft& d) {
       d.spec.return_lse = parse_bool(value, "return_lse");
     }},
    {"direction", [] { return std::string("forward (default), backward"); },
     [](std::string_view value, SpecDraft& d) {
       d.spec.direction = parse_enum(kDirectionNames, value, "direction");
     }},
    {"deterministic", bool_accepted,
     [](std::string_view value, SpecDraft& d) {
       d.spec.deterministic = parse_bool(value, "deterministic");
     }},
    {"target",
     [] { return fmt::format("{} (default auto: the current GPU)", accepted_names(kArchNames)); },
     [](std::string_view value, SpecDraft& d) { d.spec.target = parse_arch(value, "target"); }},
    {"tiles", [] { return fmt::format("{} (default auto)", tiles_accepted()); },
     [](std::string_view value, SpecDraft& d) { d.spec.tiles = parse_tiles(value); }},
    {"varlen",
     [] {
       return std::string(
           "false (default), true (packed [total, heads, dim] tensors with cu_seqlens_q/k), "
           "shared (the same, cu_seqlens_k is cu_seqlens_q); printed only when not false");
     },
     [](std::string_view value, SpecDraft& d) {
       d.spec.varlen = parse_enum(kVarlenNames, value, "varlen");
     }},
    {"kv_cache",
     [] {
       return std::string(
           "none (default), contiguous (k/v [B, capacity, Hkv, D] caches), paged (k/v "
           "[num_pages, page_size, Hkv, D] pools and a block table); printed only when set");
     },
     [](std::string_view value, SpecDraft& d) {
       d.spec.kv_cache = parse_enum(kKvCacheNames, value, "kv_cache");
     }},
    {"kv_dtype",
     [] {
       return std::string(
           "e4m3 (an FP8 KV cache, with kv_cache=contiguous|paged); printed only when set");
     },
     [](std::string_view value, SpecDraft& d) { d.spec.kv_dtype = parse_dtype(value); }},
}};

std::string key_names() {
  std::string out;
  for (const KeyRow& row : kKeyRows) {
    out += out.empty() ? "" : ", ";
    out += row.name;
  }
  return out;
}

}  // namespace

std::string_view name_of(DType dtype) {
  return lookup_name(kDTypeNames, dtype);
}
std::string_view name_of(MaskKind kind) {
  return info_of(kind).name;
}

std::span<const MaskKindInfo> mask_kinds() {
  return kMaskKinds;
}

const MaskKindInfo& info_of(MaskKind kind) {
  return row_of<&MaskKindInfo::kind>(kMaskKinds, kind);
}
std::string_view name_of(Direction direction) {
  return lookup_name(kDirectionNames, direction);
}
std::string_view name_of(VarlenMode mode) {
  return lookup_name(kVarlenNames, mode);
}
std::string_view name_of(KvCache cache) {
  return lookup_name(kKvCacheNames, cache);
}
std::string_view name_of(Arch arch) {
  return lookup_name(kArchNames, arch);
}

std::span<const TileLayoutInfo> tile_layouts() {
  return kTileLayouts;
}

const TileLayoutInfo& info_of(TileLayout layout) {
  return row_of<&TileLayoutInfo::layout>(kTileLayouts, layout);
}

std::string_view name_of(TileLayout layout) {
  return info_of(layout).name;
}

bool takes(Direction direction, TileLayout layout) {
  const TileLayoutInfo& info = info_of(layout);
  return direction == Direction::forward ? info.forward : info.backward;
}

std::string tile_layouts_of(Direction direction) {
  std::string out;
  for (const TileLayoutInfo& info : kTileLayouts) {
    if (info.name.empty() || !takes(direction, info.layout)) continue;
    out += fmt::format("{}{}", out.empty() ? "" : ", ", info.name);
  }
  return out;
}

Arch parse_arch(std::string_view text, std::string_view field) {
  return parse_enum(kArchNames, text, field);
}

int size_of(DType dtype) {
  return dtype == DType::e4m3 ? 1 : 2;
}

int kv_element_size(const AttentionSpec& spec) {
  return size_of(spec.kv_dtype.value_or(spec.dtype));
}

std::string to_string(const MaskSpec& mask) {
  const MaskKindInfo& info = info_of(mask.kind);
  return info.print != nullptr ? info.print(mask) : std::string(info.name);
}

std::string to_string(const TileShape& tiles) {
  if (tiles.is_auto()) return "auto";
  const std::string shape = fmt::format("{}x{}x{}", tiles.block_m, tiles.block_n, tiles.warps);
  if (tiles.layout == TileLayout::automatic) return shape;
  return fmt::format("{}:{}", shape, name_of(tiles.layout));
}

std::string to_string(const AttentionSpec& spec) {
  return fmt::format(
      "dtype={} head_dim_qk={} head_dim_v={} mask={} softcap={} alibi={} sinks={} return_lse={} "
      "direction={} deterministic={} target={} tiles={}{}{}{}",
      name_of(spec.dtype), spec.head_dim_qk, spec.head_dim_v, to_string(spec.mask), spec.softcap,
      spec.alibi, spec.sinks, spec.return_lse, name_of(spec.direction), spec.deterministic,
      name_of(spec.target), to_string(spec.tiles),
      spec.varlen == VarlenMode::off ? "" : fmt::format(" varlen={}", name_of(spec.varlen)),
      spec.kv_cache == KvCache::none ? "" : fmt::format(" kv_cache={}", name_of(spec.kv_cache)),
      spec.kv_dtype ? fmt::format(" kv_dtype={}", name_of(*spec.kv_dtype)) : "");
}

std::vector<SpecKey> spec_keys() {
  std::vector<SpecKey> keys;
  for (const KeyRow& row : kKeyRows) keys.push_back({row.name, row.accepted()});
  return keys;
}

AttentionSpec parse_spec(std::string_view text) {
  SpecDraft draft;
  std::vector<std::string_view> seen;
  std::size_t pos = 0;
  while (pos < text.size()) {
    if (text[pos] == ' ' || text[pos] == '\t' || text[pos] == '\n') {
      ++pos;
      continue;
    }
    const std::size_t end = std::min(text.find_first_of(" \t\n", pos), text.size());
    const std::string_view word = text.substr(pos, end - pos);
    pos = end;
    const std::size_t eq = word.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      throw_field_error("spec", word, fmt::format("key=value words with keys {}", key_names()));
    }
    const std::string_view key = word.substr(0, eq);
    const std::string_view value = word.substr(eq + 1);
    for (std::string_view previous : seen) {
      if (previous == key) {
        throw Error(fmt::format("spec: key '{}' is given twice; accepted: each key once",
                                quoted_input(key)));
      }
    }
    seen.push_back(key);
    const auto row = std::find_if(kKeyRows.begin(), kKeyRows.end(),
                                  [&](const KeyRow& r) { return r.name == key; });
    if (row == kKeyRows.end()) throw_field_error("spec key", key, key_names());
    row->parse(value, draft);
  }
  if (!draft.seen_dtype) {
    throw Error(fmt::format("dtype: missing; accepted: {}", accepted_names(kDTypeNames)));
  }
  const std::optional<int>& head_dim = draft.head_dim;
  const std::optional<int>& head_dim_qk = draft.head_dim_qk;
  const std::optional<int>& head_dim_v = draft.head_dim_v;
  if (head_dim && (head_dim_qk || head_dim_v)) {
    throw Error(
        "head_dim: given together with head_dim_qk/head_dim_v; give one or the other; accepted: "
        "head_dim alone, or head_dim_qk and head_dim_v");
  }
  if (!head_dim && !head_dim_qk && !head_dim_v) {
    throw Error(fmt::format("head_dim: missing; accepted: {}", kHeadDims));
  }
  if (!head_dim && (!head_dim_qk || !head_dim_v)) {
    throw Error(fmt::format(
        "head_dim_{}: missing (both head_dim_qk and head_dim_v are needed); accepted: {}",
        head_dim_qk ? "v" : "qk", kHeadDims));
  }
  AttentionSpec spec = draft.spec;
  spec.head_dim_qk = head_dim ? *head_dim : *head_dim_qk;
  spec.head_dim_v = head_dim ? *head_dim : *head_dim_v;
  return spec;
}

}  // namespace attnjit
