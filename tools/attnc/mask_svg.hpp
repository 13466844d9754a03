// The SVG picture of `attnc mask --format svg`: a mask's cells (single elements up to
// kMaxCells per side, past that groups of elements shaded by the fraction visible) with query
// and key axes, tick labels and a legend, at most about 800 pixels wide at any length.
#pragma once

#include <string>
#include <vector>

namespace attnc {

/// Cells along each side of the picture at most.
constexpr int kMaxCells = 128;

/// The cells of the picture of a seqlen_q x seqlen_k mask. Each side takes single elements up
/// to kMaxCells of them, else groups of elements (ceil(length / kMaxCells) each), so that a
/// side never has more than kMaxCells cells; the cells' pixels fit each side into about 512.
struct PictureGrid {
  int step_q = 1;  ///< queries per cell
  int step_k = 1;  ///< keys per cell
  int rows = 0;    ///< ceil(seqlen_q / step_q)
  int cols = 0;    ///< ceil(seqlen_k / step_k)
  int row_pixels = 0;
  int col_pixels = 0;

  bool single_elements() const { return step_q == 1 && step_k == 1; }
};
PictureGrid picture_grid(int seqlen_q, int seqlen_k);

/// One cell: the fraction of its elements that are visible and, in a picture of single
/// elements, whether its tile is full (the kernels skip its per-element mask).
struct PictureCell {
  double visible = 0;
  bool full_tile = false;
};

/// What the picture shows.
struct MaskPicture {
  std::string title;  ///< the first line, e.g. the expression and its form
  int seqlen_q = 0;
  int seqlen_k = 0;
  int batch = 1;  ///< the batch rows of the mask (the picture shows row 0)
  int block_m = 0;
  int block_n = 0;
  PictureGrid grid;
  std::vector<PictureCell> cells;  ///< grid.rows x grid.cols, row-major
};

/// The picture as an SVG document.
std::string to_svg(const MaskPicture& picture);

}  // namespace attnc
