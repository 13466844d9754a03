// attnc mask: compile a mask expression, build its data for one problem size and print its
// form, vectors or predicate, and tile table as JSON, as text (the mask drawn with '#' for
// visible and '.' for masked) or as an SVG picture (mask_svg.hpp).
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <climits>
#include <cstdint>
#include <optional>

#include "attnjit/error.hpp"
#include "compiler/ir/predicate.hpp"
#include "dsl/intervals.hpp"
#include "dsl/mask_lang.hpp"
#include "tools/attnc/commands.hpp"
#include "tools/attnc/mask_svg.hpp"

namespace attnc {
namespace {

using attnjit::dsl::MaskData;
using attnjit::dsl::TileClass;

constexpr int kMaxDrawn = 128;  // text: larger masks are drawn as their tile table only

// NAME=v0,v1,...;w0,w1,... : one row per ';'-separated list, all of one length.
attnjit::PredicateTensor parse_tensor(const std::string& text) {
  const auto bad = [&] {
    attnjit::throw_field_error("--tensor", text,
                               "NAME=v0,v1,... of int32 values (rows separated by ';', all of "
                               "one length)");
  };
  const std::size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0) bad();
  attnjit::PredicateTensor tensor;
  tensor.name = text.substr(0, eq);
  tensor.rows = 0;
  std::string_view rest = std::string_view(text).substr(eq + 1);
  while (true) {
    const std::size_t end = std::min(rest.find(';'), rest.size());
    const std::string_view row = rest.substr(0, end);
    int length = 0;
    for (std::size_t from = 0; from <= row.size();) {
      const std::size_t comma = std::min(row.find(',', from), row.size());
      std::int32_t value = 0;
      const char* first = row.data() + from;
      const char* last = row.data() + comma;
      const auto [ptr, ec] = std::from_chars(first, last, value);
      if (ec != std::errc() || ptr != last) bad();
      tensor.values.push_back(value);
      ++length;
      from = comma + 1;
    }
    if (tensor.rows > 0 && length != tensor.length) bad();
    tensor.length = length;
    ++tensor.rows;
    if (end == rest.size()) break;
    rest = rest.substr(end + 1);
  }
  return tensor;
}

std::string_view form_of(const attnjit::MaskSpec& spec) {
  return attnjit::info_of(spec.kind).form;
}

char tile_letter(TileClass c) {
  return c == TileClass::skip ? 's' : c == TileClass::partial ? 'p' : 'f';
}

struct Tiles {
  int rows = 0;
  int cols = 0;
  std::vector<std::vector<TileClass>> per_batch;
};

// What `attnc mask` computes at most (docs/cli.md). The predicate form is evaluated element by
// element on the host, row by row, holding one row of keys (O(N) memory), so the element count
// bounds its time (by elements x operators, as its evaluator interprets them). The other forms
// change along a key column only at a few rows (the causal diagonal, the interval ends), so
// they are counted a whole row of tiles (or of picture cells) per key at once: the (key, row
// of tiles) pairs bound their time. The tile count bounds what is printed.
constexpr std::int64_t kMaxElements = std::int64_t{1} << 28;       // batch * seqlen_q * seqlen_k
constexpr std::int64_t kMaxPredicateWork = std::int64_t{1} << 29;  // ... * operators
constexpr std::int64_t kMaxColumnWork = std::int64_t{1} << 28;     // batch * rows * seqlen_k
constexpr std::int64_t kMaxTiles = std::int64_t{1} << 18;          // batch * tile rows * cols
constexpr int kMaxBatch = 65535;                                   // the kernels' grid limit

std::int64_t tile_count(std::int64_t length, std::int64_t block) {
  return (length + block - 1) / block;
}

/// Throws Error for a problem beyond the limits above, before anything is built (the options'
/// own ranges are checked as they are parsed). `operators`: the size of the predicate the
/// predicate form evaluates per element, else 0 (the other forms). `svg`: the picture of
/// batch row 0 is drawn instead of the tile table being printed.
void check_limits(int batch, int seqlen_q, int seqlen_k, int block_m, int block_n,
                  std::int64_t operators, bool svg) {
  // No overflow: batch <= 2^16, each length < 2^31, operators < 2^31.
  const __int128 elements = static_cast<__int128>(batch) * seqlen_q * seqlen_k;
  if (operators > 0 && elements > kMaxElements) {
    throw attnjit::Error(fmt::format(
        "--batch x --seqlen-q x --seqlen-k: got {} x {} x {} for the predicate form; accepted: "
        "at most 2^28 ({}) mask elements, which attnc mask evaluates one by one on the host "
        "(attnc run and the library have no such limit)",
        batch, seqlen_q, seqlen_k, kMaxElements));
  }
  if (elements * operators > kMaxPredicateWork) {
    throw attnjit::Error(fmt::format(
        "--batch x --seqlen-q x --seqlen-k: got {} x {} x {} for a predicate of {} operators; "
        "accepted: at most 2^29 ({}) operator evaluations (elements x operators), which attnc "
        "mask interprets on the host",
        batch, seqlen_q, seqlen_k, operators, kMaxPredicateWork));
  }
  const PictureGrid picture = picture_grid(seqlen_q, seqlen_k);
  if (svg && !picture.single_elements()) {  // no tiles: cells of several elements
    const std::int64_t work = std::int64_t{picture.rows} * seqlen_k;
    if (operators == 0 && work > kMaxColumnWork) {
      throw attnjit::Error(fmt::format(
          "--seqlen-k: got {} for a picture of {} rows of cells; accepted: at most 2^28 ({}) "
          "(key, row of cells) pairs, which attnc mask counts on the host",
          seqlen_k, picture.rows, kMaxColumnWork));
    }
    return;
  }
  const int batch_rows = svg ? 1 : batch;  // a picture shows batch row 0 only
  const std::int64_t tile_rows = tile_count(seqlen_q, block_m);
  const __int128 tiles =
      static_cast<__int128>(batch_rows) * tile_rows * tile_count(seqlen_k, block_n);
  if (tiles > kMaxTiles) {
    throw attnjit::Error(fmt::format(
        "--block-m/--block-n: got {}/{}, which make {} tiles over the batch; accepted: blocks "
        "that make at most 2^18 ({}) tiles to print",
        block_m, block_n, tiles, kMaxTiles));
  }
  const __int128 work = static_cast<__int128>(batch_rows) * tile_rows * seqlen_k;
  if (operators == 0 && work > kMaxColumnWork) {
    throw attnjit::Error(fmt::format(
        "--batch x --seqlen-k x rows of tiles (--seqlen-q / --block-m): got {} x {} x {}; "
        "accepted: at most 2^28 ({}) (key, row of tiles) pairs, which attnc mask counts on the "
        "host",
        batch_rows, seqlen_k, tile_rows, kMaxColumnWork));
  }
}

/// Counts the visible elements of a mask's cells: every element of the predicate form, a
/// whole key column within a row of cells at once for the other forms.
class VisibleCounter {
 public:
  explicit VisibleCounter(const MaskData& data) : data_(data) {
    if (data.spec.kind == attnjit::MaskKind::predicate) {
      attnjit::PredicateParseOptions options;
      options.allow_reserved_tensor_names = true;
      evaluator_.emplace(attnjit::parse_predicate(data.spec.predicate, options), data.bindings);
    }
  }

  /// Visible elements of batch row `b` per cell of cell_m queries x cell_n keys, row-major
  /// [ceil(seqlen_q / cell_m)][ceil(seqlen_k / cell_n)].
  std::vector<std::int64_t> counts(int b, int cell_m, int cell_n) const {
    const int sq = data_.seqlen_q;
    const int sk = data_.seqlen_k;
    const auto rows = static_cast<std::size_t>(tile_count(sq, cell_m));
    const auto cols = static_cast<std::size_t>(tile_count(sk, cell_n));
    std::vector<std::int64_t> counts(rows * cols);
    std::vector<std::uint8_t> row;
    for (std::size_t r = 0; r < rows; ++r) {
      const auto q_begin = static_cast<int>(static_cast<std::int64_t>(r) * cell_m);
      const auto q_end =
          static_cast<int>(std::min<std::int64_t>(sq, static_cast<std::int64_t>(r + 1) * cell_m));
      std::int64_t* cells = counts.data() + r * cols;
      if (evaluator_) {
        row.resize(static_cast<std::size_t>(sk));
        for (int q = q_begin; q < q_end; ++q) {
          for (int k = 0; k < sk; ++k) row[k] = evaluator_->visible(b, 0, q, k);
          for (int k = 0; k < sk; ++k) cells[k / cell_n] += row[k];
        }
      } else {
        for (int k = 0; k < sk; ++k) cells[k / cell_n] += visible_in_column(b, k, q_begin, q_end);
      }
    }
    return counts;
  }

 private:
  bool visible(int b, int q, int k) const {
    if (data_.intervals) return !attnjit::dsl::is_masked(*data_.intervals, b, 0, q, k);
    if (data_.spec.kind == attnjit::MaskKind::causal) {
      return k <= std::int64_t{q} + data_.seqlen_k - data_.seqlen_q;  // bottom-right aligned
    }
    return true;
  }

  // Key column k over rows [q_begin, q_end): its visibility changes only where the causal
  // diagonal crosses it and at its interval ends, so one row of each piece between those
  // rows decides the piece.
  std::int64_t visible_in_column(int b, int k, int q_begin, int q_end) const {
    std::array<std::int64_t, 7> cuts;  // unused entries stay at q_end: empty pieces
    cuts.fill(q_end);
    cuts[0] = q_begin;
    cuts[1] = std::int64_t{k} - data_.seqlen_k + data_.seqlen_q;  // the first row that sees k
    if (data_.intervals) {
      for (int c = 0; c < data_.intervals->columns; ++c) {
        cuts[2 + static_cast<std::size_t>(c)] = data_.intervals->at(b, 0, k, c);
      }
    }
    for (std::int64_t& cut : cuts) cut = std::clamp<std::int64_t>(cut, q_begin, q_end);
    std::sort(cuts.begin(), cuts.end());
    std::int64_t count = 0;
    for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
      if (cuts[i] < cuts[i + 1] && visible(b, static_cast<int>(cuts[i]), k)) {
        count += cuts[i + 1] - cuts[i];
      }
    }
    return count;
  }

  const MaskData& data_;
  std::optional<attnjit::PredicateEvaluator> evaluator_;
};

/// The tiles of batch row `b`: skip, partial or full by their visible elements.
std::vector<TileClass> classify(const VisibleCounter& counter, const MaskData& data, int b,
                                int block_m, int block_n) {
  const std::vector<std::int64_t> counts = counter.counts(b, block_m, block_n);
  const std::int64_t cols = tile_count(data.seqlen_k, block_n);
  std::vector<TileClass> tiles;
  tiles.reserve(counts.size());
  for (std::size_t i = 0; i < counts.size(); ++i) {
    const std::int64_t r = static_cast<std::int64_t>(i) / cols;
    const std::int64_t c = static_cast<std::int64_t>(i) % cols;
    const std::int64_t total =
        (std::min<std::int64_t>(data.seqlen_q, (r + 1) * block_m) - r * block_m) *
        (std::min<std::int64_t>(data.seqlen_k, (c + 1) * block_n) - c * block_n);
    tiles.push_back(counts[i] == 0       ? TileClass::skip
                    : counts[i] == total ? TileClass::full
                                         : TileClass::partial);
  }
  return tiles;
}

/// The tile table of every batch row.
Tiles tiles_of(const MaskData& data, int block_m, int block_n) {
  Tiles t;
  t.rows = static_cast<int>(tile_count(data.seqlen_q, block_m));
  t.cols = static_cast<int>(tile_count(data.seqlen_k, block_n));
  const VisibleCounter counter(data);
  for (int b = 0; b < data.batch; ++b) {
    t.per_batch.push_back(classify(counter, data, b, block_m, block_n));
  }
  return t;
}

std::vector<std::string> tile_lines(const Tiles& t, int b) {
  std::vector<std::string> lines;
  for (int r = 0; r < t.rows; ++r) {
    std::string line;
    for (int c = 0; c < t.cols; ++c) line += tile_letter(t.per_batch[b][r * t.cols + c]);
    lines.push_back(line);
  }
  return lines;
}

void print_json(const std::string& expr, const MaskData& data, const Tiles& tiles, int block_m,
                int block_n) {
  nlohmann::ordered_json out;
  out["expr"] = expr;
  out["form"] = form_of(data.spec);
  out["mask"] = attnjit::to_string(data.spec);
  out["batch"] = data.batch;
  out["seqlen_q"] = data.seqlen_q;
  out["seqlen_k"] = data.seqlen_k;
  if (data.spec.kind == attnjit::MaskKind::causal) out["causal"] = true;
  if (data.intervals) {
    const attnjit::dsl::IntervalVectors& m = *data.intervals;
    out["causal"] = m.causal;
    out["columns"] = m.columns;
    for (int c = 0; c < m.columns; ++c) {
      nlohmann::json rows = nlohmann::json::array();
      for (int b = 0; b < m.batch; ++b) {
        std::vector<std::int32_t> row;
        for (int col = 0; col < m.seqlen_k; ++col) row.push_back(m.at(b, 0, col, c));
        rows.push_back(row);
      }
      out[std::string(attnjit::dsl::vector_name(m.causal, m.columns, c))] = rows;
    }
  }
  if (data.spec.kind == attnjit::MaskKind::predicate) {
    out["predicate"] = data.spec.predicate;
    out["scalars"] = data.bindings.scalars;
    nlohmann::json tensors = nlohmann::json::array();
    for (const auto& t : data.bindings.tensors) tensors.push_back(t.name);
    out["tensors"] = tensors;
  }
  nlohmann::ordered_json table;
  table["block_m"] = block_m;
  table["block_n"] = block_n;
  table["legend"] = "s = skip, p = partial, f = full; one string per row of tiles";
  nlohmann::json per_batch = nlohmann::json::array();
  for (int b = 0; b < data.batch; ++b) per_batch.push_back(tile_lines(tiles, b));
  table["tiles"] = per_batch;
  out["block_table"] = table;
  fmt::print("{}\n", out.dump());
}

void print_text(const std::string& expr, const MaskData& data, const Tiles& tiles, int block_m,
                int block_n) {
  fmt::print("mask {}\nform {}: {}\n", expr, form_of(data.spec), attnjit::to_string(data.spec));
  for (int b = 0; b < data.batch; ++b) {
    fmt::print("batch {}\n", b);
    if (data.seqlen_q <= kMaxDrawn && data.seqlen_k <= kMaxDrawn) {
      const std::vector<std::uint8_t> visible = attnjit::dsl::dense_visible(data, b);
      for (int q = 0; q < data.seqlen_q; ++q) {
        std::string line;
        for (int k = 0; k < data.seqlen_k; ++k) {
          line += visible[static_cast<std::size_t>(q) * data.seqlen_k + k] ? '#' : '.';
        }
        fmt::print("{}\n", line);
      }
    }
    fmt::print("tiles {}x{} (s = skip, p = partial, f = full)\n", block_m, block_n);
    for (const std::string& line : tile_lines(tiles, b)) fmt::print("{}\n", line);
  }
}

/// The picture of batch row 0: its elements (colored by their tile's class) up to kMaxCells
/// per side, else cells of several elements shaded by the fraction visible.
void print_svg(const std::string& expr, const MaskData& data, int block_m, int block_n) {
  MaskPicture picture;
  picture.title =
      fmt::format("{} (form {}: {})", expr, form_of(data.spec), attnjit::to_string(data.spec));
  picture.seqlen_q = data.seqlen_q;
  picture.seqlen_k = data.seqlen_k;
  picture.batch = data.batch;
  picture.block_m = block_m;
  picture.block_n = block_n;
  picture.grid = picture_grid(data.seqlen_q, data.seqlen_k);
  const PictureGrid& g = picture.grid;
  const VisibleCounter counter(data);
  if (g.single_elements()) {
    const std::vector<std::uint8_t> visible = attnjit::dsl::dense_visible(data, 0);
    const std::vector<TileClass> tiles = classify(counter, data, 0, block_m, block_n);
    const std::int64_t tile_cols = tile_count(data.seqlen_k, block_n);
    for (int q = 0; q < g.rows; ++q) {
      for (int k = 0; k < g.cols; ++k) {
        const TileClass tile =
            tiles[static_cast<std::size_t>(q / block_m * tile_cols + k / block_n)];
        picture.cells.push_back({visible[static_cast<std::size_t>(q) * g.cols + k] ? 1.0 : 0.0,
                                 tile == TileClass::full});
      }
    }
  } else {
    const std::vector<std::int64_t> counts = counter.counts(0, g.step_q, g.step_k);
    for (int r = 0; r < g.rows; ++r) {
      const std::int64_t rows =
          std::min<std::int64_t>(data.seqlen_q, std::int64_t{r + 1} * g.step_q) -
          std::int64_t{r} * g.step_q;
      for (int c = 0; c < g.cols; ++c) {
        const std::int64_t cols =
            std::min<std::int64_t>(data.seqlen_k, std::int64_t{c + 1} * g.step_k) -
            std::int64_t{c} * g.step_k;
        const std::int64_t count = counts[static_cast<std::size_t>(r) * g.cols + c];
        picture.cells.push_back(
            {static_cast<double>(count) / static_cast<double>(rows * cols), false});
      }
    }
  }
  fmt::print("{}", to_svg(picture));
}

struct MaskOptions {
  std::string expr;
  int seqlen_q = 0;
  std::optional<int> seqlen_k;
  int batch = 1;
  std::vector<std::string> tensors;
  std::string format = "json";
  int block_m = 128;
  int block_n = 128;
};

void run_mask(const MaskOptions& o) {
  const attnjit::dsl::MaskProgram program = attnjit::dsl::compile_mask(o.expr);
  std::vector<attnjit::PredicateTensor> tensors;
  for (std::size_t i = 0; i < o.tensors.size(); ++i) {
    tensors.push_back(parse_tensor(o.tensors[i]));
    for (std::size_t j = 0; j < i; ++j) {
      if (tensors[j].name == tensors[i].name) {
        attnjit::throw_field_error(
            "--tensor", fmt::format("{}' and '{}", o.tensors[j], o.tensors[i]),
            fmt::format("one --tensor per name ({} is given twice)", tensors[i].name));
      }
    }
  }
  const int seqlen_k = o.seqlen_k.value_or(o.seqlen_q);
  const bool predicate_form = program.spec.kind == attnjit::MaskKind::predicate;
  check_limits(o.batch, o.seqlen_q, seqlen_k, o.block_m, o.block_n,
               predicate_form ? static_cast<std::int64_t>(program.predicate.nodes.size()) : 0,
               o.format == "svg");
  const MaskData data = attnjit::dsl::build_mask(program, o.batch, o.seqlen_q, seqlen_k, tensors);
  if (o.format == "svg") {
    print_svg(o.expr, data, o.block_m, o.block_n);
    return;
  }
  const Tiles tiles = tiles_of(data, o.block_m, o.block_n);
  if (o.format == "json") {
    print_json(o.expr, data, tiles, o.block_m, o.block_n);
  } else {
    print_text(o.expr, data, tiles, o.block_m, o.block_n);
  }
}

}  // namespace

void add_mask(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "mask", "Compile a mask expression and print its form, vectors or predicate, and tiles");
  static MaskOptions o;
  cmd->add_option("--expr", o.expr,
                  "Mask expression, e.g. \"q >= k && doc[q] == doc[k]\" or \"document([4,3,3])\"")
      ->required();
  cmd->add_option("--seqlen-q", o.seqlen_q, "Queries per sample")
      ->required()
      ->check(integer_in(1, INT32_MAX));
  cmd->add_option("--seqlen-k", o.seqlen_k, "Keys per sample (default: --seqlen-q)")
      ->check(integer_in(1, INT32_MAX));
  cmd->add_option("--batch", o.batch, "Samples (default 1)")->check(integer_in(1, kMaxBatch));
  cmd->add_option("--tensor", o.tensors,
                  "A tensor the mask reads: NAME=v0,v1,... (rows separated by ';'); repeatable");
  cmd->add_option("--format", o.format, "Output: json, text or svg (default json)")
      ->check(CLI::IsMember({"json", "text", "svg"}));
  cmd->add_option("--block-m", o.block_m, "Tile rows of the block table (default 128)")
      ->check(integer_in(1, INT32_MAX));
  cmd->add_option("--block-n", o.block_n, "Tile columns of the block table (default 128)")
      ->check(integer_in(1, INT32_MAX));
  cmd->callback([] { run_mask(o); });
}

}  // namespace attnc
