// The SVG picture of a mask: cells in runs of one color per row, the key axis on top and the
// query axis on the left (row 0 at the top, as the mask is indexed), tick labels in tokens, and
// a legend to the right.
#include "tools/attnc/mask_svg.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <string_view>

namespace attnc {
namespace {

constexpr int kPlotPixels = 512;  // each side of the cells at most (up to kMaxCells cells)
constexpr int kMinCellPixels = 4;
constexpr int kMaxCellPixels = 32;
constexpr int kLeft = 64;  // the plot's left edge: the query axis title and its tick labels
constexpr int kTop = 64;   // the plot's top edge: the title, the key axis title and its labels
constexpr int kLegendGap = 20;
constexpr int kLegendWidth = 204;
constexpr int kBottom = 24;
constexpr int kLegendLine = 20;
constexpr int kShades = 32;            // shades of a partly visible cell
constexpr double kKeyLabelGap = 48;    // pixels between key labels (up to ten digits)
constexpr double kQueryLabelGap = 16;  // pixels between query labels (one line each)

constexpr std::array<int, 3> kVisible{0x1f, 0x5f, 0xbf};
constexpr std::array<int, 3> kMasked{0xf2, 0xf2, 0xf2};
constexpr std::string_view kPartialTile = "#e08a1e";

std::string hex(const std::array<int, 3>& rgb) {
  return fmt::format("#{:02x}{:02x}{:02x}", rgb[0], rgb[1], rgb[2]);
}

// The color of a cell with this fraction visible: kMasked to kVisible in kShades steps, a cell
// with some but not all elements visible never shown as either end.
std::string shade(double visible) {
  const int level =
      visible <= 0   ? 0
      : visible >= 1 ? kShades
                     : std::clamp(static_cast<int>(std::lround(visible * kShades)), 1, kShades - 1);
  std::array<int, 3> rgb{};
  for (int i = 0; i < 3; ++i) rgb[i] = kMasked[i] + (kVisible[i] - kMasked[i]) * level / kShades;
  return hex(rgb);
}

std::string escaped(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// The tick spacing along `length` tokens: 1, 2 or 5 times a power of ten, about five ticks
// and labels at least `gap` pixels apart.
std::int64_t tick_spacing(std::int64_t length, double pixels_per_token, double gap) {
  const auto wanted = std::max<std::int64_t>(
      {1, (length + 4) / 5, static_cast<std::int64_t>(std::ceil(gap / pixels_per_token))});
  for (std::int64_t power = 1;; power *= 10) {
    for (std::int64_t m : {1, 2, 5}) {
      if (m * power >= wanted) return m * power;
    }
  }
}

// The token positions labelled along an axis of `length` tokens: multiples of the spacing,
// and the end where it is far enough from the last multiple.
std::vector<std::int64_t> ticks(std::int64_t length, double pixels_per_token, double gap) {
  const std::int64_t spacing = tick_spacing(length, pixels_per_token, gap);
  std::vector<std::int64_t> out;
  for (std::int64_t t = 0; t <= length; t += spacing) out.push_back(t);
  if (out.back() != length && (length - out.back()) * pixels_per_token >= gap) {
    out.push_back(length);
  }
  return out;
}

double tenths(double pixels) {
  return std::round(pixels * 10) / 10;
}

struct LegendEntry {
  std::string color;  ///< empty: a line of text only
  std::string text;
};

std::vector<LegendEntry> legend(const MaskPicture& p) {
  std::vector<LegendEntry> entries;
  if (p.grid.single_elements()) {
    entries.push_back({hex(kVisible), "visible, full tile"});
    entries.push_back({std::string(kPartialTile), "visible, partial tile"});
    entries.push_back({hex(kMasked), "masked"});
    entries.push_back({"", fmt::format("tiles of {} x {}", p.block_m, p.block_n)});
    entries.push_back({"", "cell: 1 query x 1 key"});
  } else {
    entries.push_back({hex(kVisible), "all visible"});
    entries.push_back({shade(0.5), "half visible"});
    entries.push_back({hex(kMasked), "masked"});
    entries.push_back({"", fmt::format("cell: {} {} x {} {},", p.grid.step_q,
                                       p.grid.step_q == 1 ? "query" : "queries", p.grid.step_k,
                                       p.grid.step_k == 1 ? "key" : "keys")});
    entries.push_back({"", "shaded by the fraction visible"});
  }
  entries.push_back({"", fmt::format("{} queries x {} keys", p.seqlen_q, p.seqlen_k)});
  if (p.batch > 1) entries.push_back({"", fmt::format("batch row 0 of {}", p.batch)});
  return entries;
}

}  // namespace

PictureGrid picture_grid(int seqlen_q, int seqlen_k) {
  PictureGrid g;
  g.step_q = static_cast<int>((std::int64_t{seqlen_q} + kMaxCells - 1) / kMaxCells);
  g.step_k = static_cast<int>((std::int64_t{seqlen_k} + kMaxCells - 1) / kMaxCells);
  g.rows = static_cast<int>((std::int64_t{seqlen_q} + g.step_q - 1) / g.step_q);
  g.cols = static_cast<int>((std::int64_t{seqlen_k} + g.step_k - 1) / g.step_k);
  g.row_pixels = std::clamp(kPlotPixels / g.rows, kMinCellPixels, kMaxCellPixels);
  g.col_pixels = std::clamp(kPlotPixels / g.cols, kMinCellPixels, kMaxCellPixels);
  return g;
}

std::string to_svg(const MaskPicture& p) {
  const PictureGrid& g = p.grid;
  const int plot_width = g.cols * g.col_pixels;
  const int plot_height = g.rows * g.row_pixels;
  const std::vector<LegendEntry> entries = legend(p);
  const int legend_height = static_cast<int>(entries.size()) * kLegendLine;
  const int width = kLeft + plot_width + kLegendGap + kLegendWidth;
  const int height = kTop + std::max(plot_height, legend_height) + kBottom;
  const double pixels_per_key = static_cast<double>(g.col_pixels) / g.step_k;
  const double pixels_per_query = static_cast<double>(g.row_pixels) / g.step_q;

  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} "
      "{1}\" font-family=\"sans-serif\" font-size=\"11\">\n",
      width, height);
  out += fmt::format("<rect width=\"{}\" height=\"{}\" fill=\"#ffffff\"/>\n", width, height);
  const std::string title = p.title.size() <= 96 ? p.title : p.title.substr(0, 93) + "...";
  out += fmt::format("<text x=\"8\" y=\"16\" font-size=\"12\">{}</text>\n", escaped(title));

  // The axes: keys along the top, queries down the left.
  out += fmt::format("<text x=\"{}\" y=\"36\" text-anchor=\"middle\">key column k</text>\n",
                     kLeft + plot_width / 2);
  out += fmt::format(
      "<text transform=\"translate(16 {}) rotate(-90)\" text-anchor=\"middle\">query row "
      "q</text>\n",
      kTop + plot_height / 2);
  for (std::int64_t t : ticks(p.seqlen_k, pixels_per_key, kKeyLabelGap)) {
    const double x = tenths(kLeft + t * pixels_per_key);
    out += fmt::format(
        "<line x1=\"{0:g}\" y1=\"{1}\" x2=\"{0:g}\" y2=\"{2}\" stroke=\"#555555\"/><text "
        "x=\"{0:g}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
        x, kTop - 6, kTop, kTop - 10, t);
  }
  for (std::int64_t t : ticks(p.seqlen_q, pixels_per_query, kQueryLabelGap)) {
    const double y = tenths(kTop + t * pixels_per_query);
    out += fmt::format(
        "<line x1=\"{0}\" y1=\"{2:g}\" x2=\"{1}\" y2=\"{2:g}\" stroke=\"#555555\"/><text "
        "x=\"{3}\" y=\"{4:g}\" text-anchor=\"end\">{5}</text>\n",
        kLeft - 6, kLeft, y, kLeft - 9, y + 4, t);
  }

  // The cells: masked is the plot's background; the others in runs of one color per row.
  out += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" stroke=\"#999999\"/>\n",
      kLeft, kTop, plot_width, plot_height, hex(kMasked));
  const std::string masked = hex(kMasked);
  const auto color_of = [&](int r, int c) {
    const PictureCell& cell = p.cells[static_cast<std::size_t>(r) * g.cols + c];
    if (g.single_elements() && cell.visible > 0 && !cell.full_tile) {
      return std::string(kPartialTile);
    }
    return shade(cell.visible);
  };
  for (int r = 0; r < g.rows; ++r) {
    for (int c = 0; c < g.cols;) {
      const std::string color = color_of(r, c);
      int end = c + 1;
      while (end < g.cols && color_of(r, end) == color) ++end;
      if (color != masked) {
        out += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>\n",
                           kLeft + c * g.col_pixels, kTop + r * g.row_pixels,
                           (end - c) * g.col_pixels, g.row_pixels, color);
      }
      c = end;
    }
  }

  // The legend.
  const int x = kLeft + plot_width + kLegendGap;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const int y = kTop + static_cast<int>(i) * kLegendLine;
    const LegendEntry& entry = entries[i];
    if (!entry.color.empty()) {
      out += fmt::format(
          "<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\" stroke=\"#999999\"/>\n",
          x, y, entry.color);
    }
    out += fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", entry.color.empty() ? x : x + 18,
                       y + 10, escaped(entry.text));
  }
  out += "</svg>\n";
  return out;
}

}  // namespace attnc
