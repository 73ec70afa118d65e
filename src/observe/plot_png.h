// plot_png.h: a loss-curve picture for users without TensorBoard: a 900x500 RGB PNG with
// a title, axes with numeric ticks (x = step, y = loss), light grid lines, a legend, and one
// anti-aliased 2 px line per series (plus round markers when a series has few points, as
// eval series do). Text uses a built-in 5x7 bitmap font; libpng encodes the picture.
//
// What it deliberately is not: a plotting library. No log scale, no axis options, no font
// beyond ASCII letters, digits and a little punctuation (other characters draw as '?').
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace zt {

struct PlotSeries {
  std::string name;                               // legend text
  std::vector<std::pair<double, double>> points;  // (step, value); non-finite points are skipped
  uint32_t rgb = 0x1f77b4;                        // 0xRRGGBB
};

// Writes the plot to `path` atomically (path + ".tmp", then rename). Empty series, a single
// point and constant values all give a valid picture. Throws zt::Error when the file cannot
// be written.
void write_loss_plot(const std::string& path, const std::vector<PlotSeries>& series, const std::string& title);

}  // namespace zt
