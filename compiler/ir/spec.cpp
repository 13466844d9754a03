// Canonical printer and parser of AttentionSpec, and the names of the IR's enum values.
#include "attnjit/spec.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <optional>
#include <utility>
#include <vector>

#include "attnjit/error.hpp"

namespace attnjit {
namespace {

template <class Enum, std::size_t N>
using NameTable = std::array<std::pair<Enum, std::string_view>, N>;

constexpr NameTable<DType, 2> kDTypeNames{{{DType::fp16, "fp16"}, {DType::bf16, "bf16"}}};
constexpr NameTable<MaskKind, 5> kMaskNames{{{MaskKind::none, "none"},
                                             {MaskKind::causal, "causal"},
                                             {MaskKind::sliding_window, "sliding_window"},
                                             {MaskKind::flashmask, "flashmask"},
                                             {MaskKind::predicate, "predicate"}}};
constexpr std::string_view kMaskAccepted =
    "none, causal, sliding_window, flashmask(causal=true|false,columns=1|2|4), "
    "predicate(EXPR)";
constexpr NameTable<Direction, 2> kDirectionNames{
    {{Direction::forward, "forward"}, {Direction::backward, "backward"}}};
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

// mask=predicate(EXPR), EXPR parsed by validate. Spec words are split at spaces, so a
// predicate with spaces arrives cut: its parentheses do not balance.
MaskSpec parse_predicate_mask(std::string_view text, std::size_t open) {
  if (text.back() != ')' ||
      std::count(text.begin(), text.end(), '(') != std::count(text.begin(), text.end(), ')')) {
    throw_field_error("mask", text,
                      "predicate(EXPR) with EXPR written without spaces (spec words are "
                      "separated by spaces), e.g. mask=predicate(q>=k&&doc[q]==doc[k])");
  }
  MaskSpec mask{MaskKind::predicate};
  mask.predicate = std::string(text.substr(open + 1, text.size() - open - 2));
  return mask;
}

MaskSpec parse_mask(std::string_view text) {
  const std::size_t open = text.find('(');
  if (open == std::string_view::npos) {
    const MaskKind kind = parse_enum(kMaskNames, text, "mask");
    if (kind == MaskKind::flashmask || kind == MaskKind::predicate) {
      throw Error(fmt::format("mask: got '{}' without arguments; accepted: {}", quoted_input(text),
                              kind == MaskKind::flashmask
                                  ? "flashmask(causal=true|false,columns=1|2|4)"
                                  : "predicate(EXPR), e.g. predicate(q>=k)"));
    }
    return MaskSpec{kind, false, 0};
  }
  const std::string_view name = text.substr(0, open);
  if (name == "predicate") return parse_predicate_mask(text, open);
  if (name != "flashmask" || text.back() != ')') throw_field_error("mask", text, kMaskAccepted);
  return parse_flashmask_arguments(text.substr(open + 1, text.size() - open - 2));
}

TileShape parse_tiles(std::string_view text) {
  constexpr std::string_view kAccepted =
      "auto or BMxBNxW with an optional q/s/w (forward) or g/t (backward) suffix, e.g. "
      "128x64x4";
  if (text == "auto") return {};
  TileShape tiles;
  std::string_view rest = text;
  if (!rest.empty() && (rest.back() == 'q' || rest.back() == 's' || rest.back() == 'g' ||
                        rest.back() == 'w' || rest.back() == 't')) {
    tiles.variant = rest.back();
    rest.remove_suffix(1);
  }
  int* fields[3] = {&tiles.block_m, &tiles.block_n, &tiles.warps};
  for (int i = 0; i < 3; ++i) {
    const std::size_t x = rest.find('x');
    if ((i < 2) == (x == std::string_view::npos)) throw_field_error("tiles", text, kAccepted);
    *fields[i] = parse_int(rest.substr(0, x), "tiles", kAccepted);
    if (*fields[i] <= 0) throw_field_error("tiles", text, kAccepted);
    rest = i < 2 ? rest.substr(x + 1) : std::string_view{};
  }
  return tiles;
}

}  // namespace

std::string_view name_of(DType dtype) {
  return lookup_name(kDTypeNames, dtype);
}
std::string_view name_of(MaskKind kind) {
  return lookup_name(kMaskNames, kind);
}
std::string_view name_of(Direction direction) {
  return lookup_name(kDirectionNames, direction);
}
std::string_view name_of(Arch arch) {
  return lookup_name(kArchNames, arch);
}

Arch parse_arch(std::string_view text, std::string_view field) {
  return parse_enum(kArchNames, text, field);
}

int size_of(DType) {
  return 2;
}

std::string to_string(const MaskSpec& mask) {
  if (mask.kind == MaskKind::predicate) return fmt::format("predicate({})", mask.predicate);
  if (mask.kind != MaskKind::flashmask) return std::string(name_of(mask.kind));
  return fmt::format("flashmask(causal={},columns={})", mask.causal, mask.columns);
}

std::string to_string(const TileShape& tiles) {
  if (tiles.is_auto()) return "auto";
  return fmt::format("{}x{}x{}{}", tiles.block_m, tiles.block_n, tiles.warps,
                     tiles.variant ? std::string(1, tiles.variant) : std::string());
}

std::string to_string(const AttentionSpec& spec) {
  return fmt::format(
      "dtype={} head_dim_qk={} head_dim_v={} mask={} softcap={} alibi={} return_lse={} "
      "direction={} deterministic={} target={} tiles={}",
      name_of(spec.dtype), spec.head_dim_qk, spec.head_dim_v, to_string(spec.mask), spec.softcap,
      spec.alibi, spec.return_lse, name_of(spec.direction), spec.deterministic,
      name_of(spec.target), to_string(spec.tiles));
}

AttentionSpec parse_spec(std::string_view text) {
  constexpr std::string_view kKeys =
      "dtype, head_dim, head_dim_qk, head_dim_v, mask, softcap, alibi, return_lse, direction, "
      "deterministic, target, tiles";
  constexpr std::string_view kHeadDims = "32, 64, 96, 128, 192, 256";
  AttentionSpec spec;
  std::optional<int> head_dim, head_dim_qk, head_dim_v;
  bool seen_dtype = false;
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
      throw_field_error("spec", word, fmt::format("key=value words with keys {}", kKeys));
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
    if (key == "dtype") {
      spec.dtype = parse_enum(kDTypeNames, value, "dtype");
      seen_dtype = true;
    } else if (key == "head_dim") {
      head_dim = parse_int(value, "head_dim", kHeadDims);
    } else if (key == "head_dim_qk") {
      head_dim_qk = parse_int(value, "head_dim_qk", kHeadDims);
    } else if (key == "head_dim_v") {
      head_dim_v = parse_int(value, "head_dim_v", kHeadDims);
    } else if (key == "mask") {
      spec.mask = parse_mask(value);
    } else if (key == "softcap") {
      spec.softcap = parse_bool(value, "softcap");
    } else if (key == "alibi") {
      spec.alibi = parse_bool(value, "alibi");
    } else if (key == "return_lse") {
      spec.return_lse = parse_bool(value, "return_lse");
    } else if (key == "direction") {
      spec.direction = parse_enum(kDirectionNames, value, "direction");
    } else if (key == "deterministic") {
      spec.deterministic = parse_bool(value, "deterministic");
    } else if (key == "target") {
      spec.target = parse_arch(value, "target");
    } else if (key == "tiles") {
      spec.tiles = parse_tiles(value);
    } else {
      throw_field_error("spec key", key, kKeys);
    }
  }
  if (!seen_dtype) throw Error("dtype: missing; accepted: fp16, bf16");
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
  spec.head_dim_qk = head_dim ? *head_dim : *head_dim_qk;
  spec.head_dim_v = head_dim ? *head_dim : *head_dim_v;
  return spec;
}

}  // namespace attnjit
