// attnc mask: compile a mask expression, build its data for one problem size and print its
// form, vectors or predicate, and tile table as JSON, as text (the mask drawn with '#' for
// visible and '.' for masked) or as SVG.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstdint>
#include <optional>

#include "attnjit/error.hpp"
#include "compiler/ir/predicate.hpp"
#include "dsl/intervals.hpp"
#include "dsl/mask_lang.hpp"
#include "tools/attnc/commands.hpp"

namespace attnc {
namespace {

using attnjit::dsl::MaskData;
using attnjit::dsl::TileClass;

constexpr int kMaxDrawn = 128;  // larger masks are drawn as their tile table only

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

// What `attnc mask` computes at most (README: attnc). Every mask element is evaluated once on
// the host, row by row, holding one row of keys and one row of tiles (O(N) memory), so the
// element count bounds its time (the predicate form's by elements x operators, as its
// evaluator interprets them), and the tile count bounds what it prints.
constexpr std::int64_t kMaxElements = std::int64_t{1} << 28;       // batch * seqlen_q * seqlen_k
constexpr std::int64_t kMaxPredicateWork = std::int64_t{1} << 29;  // ... * operators
constexpr std::int64_t kMaxTiles = std::int64_t{1} << 18;          // batch * tile rows * cols
constexpr int kMaxBatch = 65535;                                   // the kernels' grid limit

std::int64_t tile_count(int seqlen, int block) {
  return (static_cast<std::int64_t>(seqlen) + block - 1) / block;
}

/// Throws Error for a problem beyond the limits above, before anything is built (the options'
/// own ranges are checked as they are parsed). `operators`: the size of the predicate the
/// predicate form evaluates per element, else 0.
void check_limits(int batch, int seqlen_q, int seqlen_k, int block_m, int block_n,
                  std::int64_t operators) {
  // No overflow: batch <= 2^16, each length < 2^31, operators < 2^31.
  const __int128 elements = static_cast<__int128>(batch) * seqlen_q * seqlen_k;
  if (elements > kMaxElements) {
    throw attnjit::Error(fmt::format(
        "--batch x --seqlen-q x --seqlen-k: got {} x {} x {}; accepted: at most 2^28 "
        "({}) mask elements, which attnc mask evaluates one by one on the host (attnc run and "
        "the library have no such limit)",
        batch, seqlen_q, seqlen_k, kMaxElements));
  }
  if (elements * operators > kMaxPredicateWork) {
    throw attnjit::Error(fmt::format(
        "--batch x --seqlen-q x --seqlen-k: got {} x {} x {} for a predicate of {} operators; "
        "accepted: at most 2^29 ({}) operator evaluations (elements x operators), which attnc "
        "mask interprets on the host",
        batch, seqlen_q, seqlen_k, operators, kMaxPredicateWork));
  }
  const std::int64_t tiles =
      std::int64_t{batch} * tile_count(seqlen_q, block_m) * tile_count(seqlen_k, block_n);
  if (tiles > kMaxTiles) {
    throw attnjit::Error(fmt::format(
        "--block-m/--block-n: got {}/{}, which make {} tiles over the batch; accepted: blocks "
        "that make at most 2^18 ({}) tiles to print",
        block_m, block_n, tiles, kMaxTiles));
  }
}

/// The visibility of query row `q` of batch row `b` (1 = visible), written into `row`.
class RowEvaluator {
 public:
  explicit RowEvaluator(const MaskData& data) : data_(data) {
    if (data.spec.kind == attnjit::MaskKind::predicate) {
      attnjit::PredicateParseOptions options;
      options.allow_reserved_tensor_names = true;
      evaluator_.emplace(attnjit::parse_predicate(data.spec.predicate, options), data.bindings);
    }
  }

  void fill(int b, int q, std::vector<std::uint8_t>& row) const {
    const int sk = data_.seqlen_k;
    row.resize(static_cast<std::size_t>(sk));
    if (data_.intervals) {
      for (int k = 0; k < sk; ++k) row[k] = !attnjit::dsl::is_masked(*data_.intervals, b, 0, q, k);
    } else if (data_.spec.kind == attnjit::MaskKind::causal) {
      const std::int64_t last = std::int64_t{q} + sk - data_.seqlen_q;  // bottom-right aligned
      for (int k = 0; k < sk; ++k) row[k] = k <= last;
    } else if (evaluator_) {
      for (int k = 0; k < sk; ++k) row[k] = evaluator_->visible(b, 0, q, k);
    } else {
      std::fill(row.begin(), row.end(), 1);
    }
  }

 private:
  const MaskData& data_;
  std::optional<attnjit::PredicateEvaluator> evaluator_;
};

/// The tile table of every batch row, streamed: one row of visibility at a time.
Tiles tiles_of(const MaskData& data, int block_m, int block_n) {
  Tiles t;
  const int sq = data.seqlen_q;
  const int sk = data.seqlen_k;
  t.rows = static_cast<int>(tile_count(sq, block_m));
  t.cols = static_cast<int>(tile_count(sk, block_n));
  const RowEvaluator rows(data);
  std::vector<std::uint8_t> row;
  std::vector<std::int64_t> seen(static_cast<std::size_t>(t.cols));
  for (int b = 0; b < data.batch; ++b) {
    std::vector<TileClass>& tiles = t.per_batch.emplace_back();
    tiles.reserve(static_cast<std::size_t>(t.rows) * t.cols);
    for (int r = 0; r < t.rows; ++r) {
      std::fill(seen.begin(), seen.end(), 0);
      const auto q_begin = static_cast<int>(std::int64_t{r} * block_m);
      const auto q_end =
          static_cast<int>(std::min<std::int64_t>(sq, std::int64_t{r + 1} * block_m));
      for (int q = q_begin; q < q_end; ++q) {
        rows.fill(b, q, row);
        for (int c = 0; c < t.cols; ++c) {
          const auto k_begin = static_cast<std::size_t>(std::int64_t{c} * block_n);
          const auto k_end =
              static_cast<std::size_t>(std::min<std::int64_t>(sk, std::int64_t{c + 1} * block_n));
          std::int64_t count = 0;
          for (std::size_t k = k_begin; k < k_end; ++k) count += row[k];
          seen[static_cast<std::size_t>(c)] += count;
        }
      }
      for (int c = 0; c < t.cols; ++c) {
        const std::int64_t k_begin = std::int64_t{c} * block_n;
        const std::int64_t total = std::int64_t{q_end - q_begin} *
                                   (std::min<std::int64_t>(sk, k_begin + block_n) - k_begin);
        const std::int64_t count = seen[static_cast<std::size_t>(c)];
        tiles.push_back(count == 0       ? TileClass::skip
                        : count == total ? TileClass::full
                                         : TileClass::partial);
      }
    }
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

void print_svg(const MaskData& data, const Tiles& tiles, int block_m, int block_n) {
  const bool elements = data.seqlen_q <= kMaxDrawn && data.seqlen_k <= kMaxDrawn;
  const int cell = elements ? 8 : 16;
  const int rows = elements ? data.seqlen_q : tiles.rows;
  const int cols = elements ? data.seqlen_k : tiles.cols;
  fmt::print("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\">\n", cols * cell,
             rows * cell);
  const std::vector<std::uint8_t> visible =
      elements ? attnjit::dsl::dense_visible(data, 0) : std::vector<std::uint8_t>{};
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      std::string_view fill;
      if (elements) {
        const TileClass t = tiles.per_batch[0][(r / block_m) * tiles.cols + c / block_n];
        const bool on = visible[static_cast<std::size_t>(r) * cols + c];
        fill = on ? (t == TileClass::full ? "#1f5fbf" : "#e08a1e") : "#f2f2f2";
      } else {
        const TileClass t = tiles.per_batch[0][r * cols + c];
        fill = t == TileClass::skip ? "#f2f2f2" : t == TileClass::partial ? "#e08a1e" : "#1f5fbf";
      }
      fmt::print("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>\n", c * cell,
                 r * cell, cell, cell, fill);
    }
  }
  fmt::print("</svg>\n");
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
               predicate_form ? static_cast<std::int64_t>(program.predicate.nodes.size()) : 0);
  const MaskData data = attnjit::dsl::build_mask(program, o.batch, o.seqlen_q, seqlen_k, tensors);
  const Tiles tiles = tiles_of(data, o.block_m, o.block_n);
  if (o.format == "json") {
    print_json(o.expr, data, tiles, o.block_m, o.block_n);
  } else if (o.format == "text") {
    print_text(o.expr, data, tiles, o.block_m, o.block_n);
  } else {
    print_svg(data, tiles, o.block_m, o.block_n);
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
