// plot_png.cpp: see plot_png.h. Three parts: a tiny RGB canvas with a bitmap font, the plot
// layout (ranges, ticks, lines, legend), and the file: libpng encodes the canvas in memory,
// then it is written atomically.
#include "observe/plot_png.h"

#include <png.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <new>

#include "core/error.h"
#include "core/file_io.h"

namespace zt {
namespace {

// ---- Font: 5 columns x 9 rows; rows 0-6 hold capitals and digits, rows 7-8 descenders. ----

struct Glyph {
  char c;
  const char* rows[9];  // '#' = ink; missing trailing rows are blank
};

// clang-format off
const Glyph kGlyphs[] = {
  {' ', {}},
  {'0', {".###.", "#...#", "#..##", "#.#.#", "##..#", "#...#", ".###."}},
  {'1', {"..#..", ".##..", "..#..", "..#..", "..#..", "..#..", ".###."}},
  {'2', {".###.", "#...#", "....#", "...#.", "..#..", ".#...", "#####"}},
  {'3', {".###.", "#...#", "....#", "..##.", "....#", "#...#", ".###."}},
  {'4', {"...#.", "..##.", ".#.#.", "#..#.", "#####", "...#.", "...#."}},
  {'5', {"#####", "#....", "####.", "....#", "....#", "#...#", ".###."}},
  {'6', {"..##.", ".#...", "#....", "####.", "#...#", "#...#", ".###."}},
  {'7', {"#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#..."}},
  {'8', {".###.", "#...#", "#...#", ".###.", "#...#", "#...#", ".###."}},
  {'9', {".###.", "#...#", "#...#", ".####", "....#", "...#.", ".##.."}},
  {'A', {".###.", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"}},
  {'B', {"####.", "#...#", "#...#", "####.", "#...#", "#...#", "####."}},
  {'C', {".###.", "#...#", "#....", "#....", "#....", "#...#", ".###."}},
  {'D', {"####.", "#...#", "#...#", "#...#", "#...#", "#...#", "####."}},
  {'E', {"#####", "#....", "#....", "####.", "#....", "#....", "#####"}},
  {'F', {"#####", "#....", "#....", "####.", "#....", "#....", "#...."}},
  {'G', {".###.", "#...#", "#....", "#.###", "#...#", "#...#", ".####"}},
  {'H', {"#...#", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"}},
  {'I', {".###.", "..#..", "..#..", "..#..", "..#..", "..#..", ".###."}},
  {'J', {"..###", "...#.", "...#.", "...#.", "...#.", "#..#.", ".##.."}},
  {'K', {"#...#", "#..#.", "#.#..", "##...", "#.#..", "#..#.", "#...#"}},
  {'L', {"#....", "#....", "#....", "#....", "#....", "#....", "#####"}},
  {'M', {"#...#", "##.##", "#.#.#", "#.#.#", "#...#", "#...#", "#...#"}},
  {'N', {"#...#", "#...#", "##..#", "#.#.#", "#..##", "#...#", "#...#"}},
  {'O', {".###.", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."}},
  {'P', {"####.", "#...#", "#...#", "####.", "#....", "#....", "#...."}},
  {'Q', {".###.", "#...#", "#...#", "#...#", "#.#.#", "#..#.", ".##.#"}},
  {'R', {"####.", "#...#", "#...#", "####.", "#.#..", "#..#.", "#...#"}},
  {'S', {".####", "#....", "#....", ".###.", "....#", "....#", "####."}},
  {'T', {"#####", "..#..", "..#..", "..#..", "..#..", "..#..", "..#.."}},
  {'U', {"#...#", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."}},
  {'V', {"#...#", "#...#", "#...#", "#...#", "#...#", ".#.#.", "..#.."}},
  {'W', {"#...#", "#...#", "#...#", "#.#.#", "#.#.#", "#.#.#", ".#.#."}},
  {'X', {"#...#", "#...#", ".#.#.", "..#..", ".#.#.", "#...#", "#...#"}},
  {'Y', {"#...#", "#...#", ".#.#.", "..#..", "..#..", "..#..", "..#.."}},
  {'Z', {"#####", "....#", "...#.", "..#..", ".#...", "#....", "#####"}},
  {'a', {".....", ".....", ".###.", "....#", ".####", "#...#", ".####"}},
  {'b', {"#....", "#....", "#.##.", "##..#", "#...#", "#...#", "####."}},
  {'c', {".....", ".....", ".###.", "#....", "#....", "#...#", ".###."}},
  {'d', {"....#", "....#", ".##.#", "#..##", "#...#", "#...#", ".####"}},
  {'e', {".....", ".....", ".###.", "#...#", "#####", "#....", ".###."}},
  {'f', {"..##.", ".#..#", ".#...", "###..", ".#...", ".#...", ".#..."}},
  {'g', {".....", ".....", ".####", "#...#", "#...#", "#...#", ".####", "....#", ".###."}},
  {'h', {"#....", "#....", "#.##.", "##..#", "#...#", "#...#", "#...#"}},
  {'i', {"..#..", ".....", ".##..", "..#..", "..#..", "..#..", ".###."}},
  {'j', {"...#.", ".....", "..##.", "...#.", "...#.", "...#.", "...#.", "#..#.", ".##.."}},
  {'k', {"#....", "#....", "#..#.", "#.#..", "##...", "#.#..", "#..#."}},
  {'l', {".##..", "..#..", "..#..", "..#..", "..#..", "..#..", ".###."}},
  {'m', {".....", ".....", "##.#.", "#.#.#", "#.#.#", "#.#.#", "#.#.#"}},
  {'n', {".....", ".....", "#.##.", "##..#", "#...#", "#...#", "#...#"}},
  {'o', {".....", ".....", ".###.", "#...#", "#...#", "#...#", ".###."}},
  {'p', {".....", ".....", "####.", "#...#", "#...#", "#...#", "####.", "#....", "#...."}},
  {'q', {".....", ".....", ".####", "#...#", "#...#", "#...#", ".####", "....#", "....#"}},
  {'r', {".....", ".....", "#.##.", "##..#", "#....", "#....", "#...."}},
  {'s', {".....", ".....", ".###.", "#....", ".###.", "....#", "####."}},
  {'t', {".#...", ".#...", "###..", ".#...", ".#...", ".#..#", "..##."}},
  {'u', {".....", ".....", "#...#", "#...#", "#...#", "#..##", ".##.#"}},
  {'v', {".....", ".....", "#...#", "#...#", "#...#", ".#.#.", "..#.."}},
  {'w', {".....", ".....", "#...#", "#...#", "#.#.#", "#.#.#", ".#.#."}},
  {'x', {".....", ".....", "#...#", ".#.#.", "..#..", ".#.#.", "#...#"}},
  {'y', {".....", ".....", "#...#", "#...#", "#...#", "#...#", ".####", "....#", ".###."}},
  {'z', {".....", ".....", "#####", "...#.", "..#..", ".#...", "#####"}},
  {'.', {".....", ".....", ".....", ".....", ".....", ".##..", ".##.."}},
  {',', {".....", ".....", ".....", ".....", ".....", ".##..", ".##..", "..#..", ".#..."}},
  {'-', {".....", ".....", ".....", "#####", ".....", ".....", "....."}},
  {'_', {".....", ".....", ".....", ".....", ".....", ".....", ".....", "#####"}},
  {':', {".....", ".##..", ".##..", ".....", ".##..", ".##..", "....."}},
  {'/', {"....#", "....#", "...#.", "..#..", ".#...", "#....", "#...."}},
  {'(', {"...#.", "..#..", ".#...", ".#...", ".#...", "..#..", "...#."}},
  {')', {".#...", "..#..", "...#.", "...#.", "...#.", "..#..", ".#..."}},
  {'[', {".###.", ".#...", ".#...", ".#...", ".#...", ".#...", ".###."}},
  {']', {".###.", "...#.", "...#.", "...#.", "...#.", "...#.", ".###."}},
  {'+', {".....", "..#..", "..#..", "#####", "..#..", "..#..", "....."}},
  {'=', {".....", ".....", "#####", ".....", "#####", ".....", "....."}},
  {'%', {"##...", "##..#", "...#.", "..#..", ".#...", "#..##", "...##"}},
  {'?', {".###.", "#...#", "....#", "...#.", "..#..", ".....", "..#.."}},
};
// clang-format on

const Glyph& glyph_for(char c) {
  static const std::array<const Glyph*, 128> index = [] {
    std::array<const Glyph*, 128> ix{};
    for (const Glyph& g : kGlyphs) ix[size_t(g.c)] = &g;
    return ix;
  }();
  const unsigned u = static_cast<unsigned char>(c);
  const Glyph* g = u < 128 ? index[u] : nullptr;
  return g ? *g : *index[size_t('?')];
}

constexpr int kGlyphW = 5, kAdvance = 6, kCapH = 7;

// ---- Canvas ----

struct Rgb {
  uint8_t r, g, b;
};

Rgb rgb_of(uint32_t c) { return {uint8_t(c >> 16), uint8_t(c >> 8), uint8_t(c)}; }

struct Canvas {
  int w, h;
  std::vector<uint8_t> px;  // (h, w, 3)
  Canvas(int w_, int h_) : w(w_), h(h_), px(size_t(w_) * h_ * 3, 255) {}

  void blend(int x, int y, Rgb c, float a) {
    if (x < 0 || y < 0 || x >= w || y >= h || a <= 0) return;
    a = std::min(a, 1.f);
    uint8_t* p = &px[(size_t(y) * w + x) * 3];
    p[0] = uint8_t(std::lround(p[0] * (1 - a) + c.r * a));
    p[1] = uint8_t(std::lround(p[1] * (1 - a) + c.g * a));
    p[2] = uint8_t(std::lround(p[2] * (1 - a) + c.b * a));
  }
  void fill(int x0, int y0, int x1, int y1, Rgb c) {  // [x0, x1) x [y0, y1)
    for (int y = y0; y < y1; ++y)
      for (int x = x0; x < x1; ++x) blend(x, y, c, 1.f);
  }
};

int text_width(const std::string& s, int scale) { return s.empty() ? 0 : (int(s.size()) * kAdvance - 1) * scale; }

// (x, y) is the top-left corner of the first capital.
void draw_text(Canvas& cv, int x, int y, const std::string& s, int scale, Rgb c) {
  for (char ch : s) {
    const Glyph& g = glyph_for(ch);
    for (int r = 0; r < 9 && g.rows[r]; ++r)
      for (int col = 0; col < kGlyphW; ++col)
        if (g.rows[r][col] == '#')
          cv.fill(x + col * scale, y + r * scale, x + (col + 1) * scale, y + (r + 1) * scale, c);
    x += kAdvance * scale;
  }
}

// ---- Anti-aliased strokes: coverage in [0, 1] per pixel, max-combined within one series so
// joints and overlapping markers do not darken, then blended once in the series colour. ----

struct Coverage {
  int w, h;
  std::vector<float> a;
  Coverage(int w_, int h_) : w(w_), h(h_), a(size_t(w_) * h_, 0.f) {}

  // Capsule of radius `r` around segment p-q (a disc when p == q); pixel centres at +0.5.
  void capsule(double px, double py, double qx, double qy, double r, int cx0, int cy0, int cx1, int cy1) {
    // Clamp in double first: a far-off point must not overflow the int conversion.
    auto clip = [](double v, int lo, int hi) { return int(std::clamp(v, double(lo), double(hi))); };
    const int x0 = clip(std::floor(std::min(px, qx) - r - 1), cx0, cx1);
    const int x1 = clip(std::ceil(std::max(px, qx) + r + 1), cx0, cx1);
    const int y0 = clip(std::floor(std::min(py, qy) - r - 1), cy0, cy1);
    const int y1 = clip(std::ceil(std::max(py, qy) + r + 1), cy0, cy1);
    const double dx = qx - px, dy = qy - py, len2 = dx * dx + dy * dy;
    for (int y = y0; y < y1; ++y)
      for (int x = x0; x < x1; ++x) {
        const double cx = x + 0.5 - px, cy = y + 0.5 - py;
        const double t = len2 > 0 ? std::clamp((cx * dx + cy * dy) / len2, 0.0, 1.0) : 0.0;
        const double d = std::hypot(cx - t * dx, cy - t * dy);
        float& dst = a[size_t(y) * w + x];
        dst = std::max(dst, float(std::clamp(r + 0.5 - d, 0.0, 1.0)));
      }
  }
};

// ---- Axes ----

struct Range {
  double lo, hi;
};

// A range that is never empty: constant data gets a margin around its value.
Range padded(double lo, double hi, double frac) {
  if (!(lo <= hi)) return {0, 1};  // no finite data
  if (hi - lo <= 1e-12 * std::max(std::abs(lo), std::abs(hi))) {
    const double pad = lo != 0 ? std::abs(lo) * 0.1 : 1.0;
    return {lo - pad, hi + pad};
  }
  const double pad = (hi - lo) * frac;
  return {lo - pad, hi + pad};
}

// 1, 2 or 5 times a power of ten, giving about `target` intervals over the range.
double tick_step(Range r, int target) {
  const double raw = (r.hi - r.lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double n = raw / mag;
  return (n < 1.5 ? 1 : n < 3 ? 2 : n < 7 ? 5 : 10) * mag;
}

std::vector<double> ticks(Range r, double step) {
  std::vector<double> out;
  if (!std::isfinite(step) || step <= 0) return out;
  for (double k = std::ceil(r.lo / step); out.size() < 50; k += 1) {
    const double v = k * step;
    if (v > r.hi + step * 1e-9) break;
    out.push_back(std::abs(v) < step * 1e-9 ? 0.0 : v);  // no "-0"
  }
  return out;
}

std::string tick_label(double v, double step) {
  char b[64];
  const int decimals = std::max(0, -int(std::floor(std::log10(step) + 1e-9)));
  if (std::abs(v) >= 1e7 || decimals > 6)
    std::snprintf(b, sizeof b, "%.3g", v);
  else
    std::snprintf(b, sizeof b, "%.*f", decimals, v);
  return b;
}

// ---- PNG (libpng encodes; the file is written below) ----

// libpng's output callback: the encoded bytes go to the std::string given as io_ptr. An
// exception must not unwind through libpng's C frames, so a failed append ends in png_error.
void png_append(png_structp png, png_bytep data, size_t n) {
  bool ok = true;
  try {
    static_cast<std::string*>(png_get_io_ptr(png))->append(reinterpret_cast<const char*>(data), n);
  } catch (const std::bad_alloc&) {
    ok = false;
  }
  if (!ok) png_error(png, "out of memory");
}

// libpng's error callback: keeps the message (err_ptr, 256 bytes) and jumps back to the setjmp.
[[noreturn]] void png_fail(png_structp png, png_const_charp msg) {
  std::snprintf(static_cast<char*>(png_get_error_ptr(png)), 256, "%s", msg);
  png_longjmp(png, 1);
}
void png_quiet(png_structp, png_const_charp) {}
void png_no_flush(png_structp) {}  // NULL would make libpng fflush the io_ptr as a FILE*

// 8-bit RGB rows -> *out. libpng reports errors by longjmp to the setjmp here, so this function
// holds nothing with a destructor a jump could skip (the rows and the output belong to the caller).
// False with the message in err[256] when libpng fails.
bool png_encode_rgb(std::string* out, png_bytep* rows, int w, int h, char* err) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, err, png_fail, png_quiet);
  if (!png) return false;
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_write_struct(&png, nullptr);
    return false;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return false;
  }
  png_set_write_fn(png, out, png_append, png_no_flush);
  png_set_IHDR(png, info, png_uint_32(w), png_uint_32(h), 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  png_write_image(png, rows);
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return true;
}

std::string png_encode(const Canvas& cv) {
  std::vector<png_bytep> rows(size_t(cv.h));
  for (int y = 0; y < cv.h; ++y) rows[size_t(y)] = const_cast<png_bytep>(&cv.px[size_t(y) * cv.w * 3]);
  std::string png;
  char err[256] = "unknown error";
  ZT_CHECK(png_encode_rgb(&png, rows.data(), cv.w, cv.h, err), "cannot encode the plot as PNG (libpng): ", err);
  return png;
}

// ---- Layout ----

constexpr int kW = 900, kH = 500;
const Rgb kInk{0x20, 0x20, 0x20}, kGrid{0xe4, 0xe4, 0xe4}, kFrame{0x80, 0x80, 0x80};

struct Frame {  // the plot area in pixels and the data ranges it shows
  int x0, y0, x1, y1;
  Range xr, yr;
  double px(double x) const { return x0 + (x - xr.lo) / (xr.hi - xr.lo) * (x1 - x0); }
  double py(double y) const { return y1 - (y - yr.lo) / (yr.hi - yr.lo) * (y1 - y0); }
};

using Points = std::vector<std::pair<double, double>>;

Points finite_sorted(const Points& in) {
  Points out;
  for (const auto& p : in)
    if (std::isfinite(p.first) && std::isfinite(p.second)) out.push_back(p);
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

void draw_axes(Canvas& cv, const Frame& f, const std::string& title) {
  // Steps are whole numbers: never label the x axis at fractions of a step.
  const double xs = std::max(1.0, tick_step(f.xr, 8)), ys = tick_step(f.yr, 6);
  for (double v : ticks(f.yr, ys)) {
    const int y = int(std::lround(f.py(v)));
    cv.fill(f.x0, y, f.x1, y + 1, kGrid);
    cv.fill(f.x0 - 5, y, f.x0, y + 1, kFrame);
    const std::string s = tick_label(v, ys);
    draw_text(cv, f.x0 - 8 - text_width(s, 1), y - kCapH / 2, s, 1, kInk);
  }
  for (double v : ticks(f.xr, xs)) {
    const int x = int(std::lround(f.px(v)));
    cv.fill(x, f.y0, x + 1, f.y1, kGrid);
    cv.fill(x, f.y1, x + 1, f.y1 + 5, kFrame);
    const std::string s = tick_label(v, xs);
    draw_text(cv, x - text_width(s, 1) / 2, f.y1 + 9, s, 1, kInk);
  }
  cv.fill(f.x0 - 1, f.y0 - 1, f.x1 + 1, f.y0, kFrame);  // frame
  cv.fill(f.x0 - 1, f.y1, f.x1 + 1, f.y1 + 1, kFrame);
  cv.fill(f.x0 - 1, f.y0, f.x0, f.y1, kFrame);
  cv.fill(f.x1, f.y0, f.x1 + 1, f.y1, kFrame);
  draw_text(cv, (f.x0 + f.x1 - text_width("step", 2)) / 2, f.y1 + 24, "step", 2, kInk);
  draw_text(cv, 12, f.y0 - 20, "loss", 2, kInk);
  // A long title drops to the small font, then loses its end.
  std::string t = title;
  int scale = text_width(t, 2) <= kW - 24 ? 2 : 1;
  while (text_width(t, scale) > kW - 24) t = t.substr(0, t.size() - 4) + "...";
  draw_text(cv, (kW - text_width(t, scale)) / 2, scale == 2 ? 10 : 14, t, scale, kInk);
}

void draw_series(Canvas& cv, Coverage& cov, const Frame& f, const Points& pts, Rgb c) {
  std::fill(cov.a.begin(), cov.a.end(), 0.f);
  const bool markers = pts.size() <= 40;
  for (size_t i = 0; i < pts.size(); ++i) {
    const double x = f.px(pts[i].first), y = f.py(pts[i].second);
    if (i + 1 < pts.size())
      cov.capsule(x, y, f.px(pts[i + 1].first), f.py(pts[i + 1].second), 1.1, f.x0, f.y0, f.x1, f.y1);
    if (markers) cov.capsule(x, y, x, y, 3.5, f.x0, f.y0, f.x1, f.y1);
  }
  for (int y = f.y0; y < f.y1; ++y)
    for (int x = f.x0; x < f.x1; ++x) cv.blend(x, y, c, cov.a[size_t(y) * cov.w + x]);
}

// Top-right box: a short line in each series' colour, then its name.
void draw_legend(Canvas& cv, Coverage& cov, const Frame& f, const std::vector<PlotSeries>& series) {
  if (series.empty()) return;
  int text_w = 0;
  for (const auto& s : series) text_w = std::max(text_w, text_width(s.name, 1));
  const int row_h = 14, w = 10 + 22 + 6 + text_w + 10, h = 8 + row_h * int(series.size());
  const int x0 = f.x1 - 10 - w, y0 = f.y0 + 10;
  cv.fill(x0, y0, x0 + w, y0 + h, {255, 255, 255});
  cv.fill(x0, y0, x0 + w, y0 + 1, kFrame);
  cv.fill(x0, y0 + h - 1, x0 + w, y0 + h, kFrame);
  cv.fill(x0, y0, x0 + 1, y0 + h, kFrame);
  cv.fill(x0 + w - 1, y0, x0 + w, y0 + h, kFrame);
  for (size_t i = 0; i < series.size(); ++i) {
    const int cy = y0 + 4 + row_h * int(i) + row_h / 2;
    std::fill(cov.a.begin(), cov.a.end(), 0.f);
    cov.capsule(x0 + 10, cy, x0 + 32, cy, 1.1, 0, 0, cv.w, cv.h);
    for (int y = std::max(0, cy - 3); y <= std::min(cv.h - 1, cy + 3); ++y)
      for (int x = std::max(0, x0 + 8); x <= std::min(cv.w - 1, x0 + 34); ++x)
        cv.blend(x, y, rgb_of(series[i].rgb), cov.a[size_t(y) * cov.w + x]);
    draw_text(cv, x0 + 38, cy - kCapH / 2, series[i].name, 1, kInk);
  }
}

}  // namespace

void write_loss_plot(const std::string& path, const std::vector<PlotSeries>& series, const std::string& title) {
  std::vector<Points> pts;
  double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
  for (const auto& s : series) {
    pts.push_back(finite_sorted(s.points));
    for (const auto& [x, y] : pts.back()) {
      xlo = std::min(xlo, x), xhi = std::max(xhi, x);
      ylo = std::min(ylo, y), yhi = std::max(yhi, y);
    }
  }
  // A little x margin keeps the first and last markers whole.
  Frame f{0, 54, kW - 24, kH - 52, padded(xlo, xhi, 0.02), padded(ylo, yhi, 0.05)};
  // Extremes beyond what a double can subtract would make the scale infinite: show 0..1 then.
  if (!std::isfinite(f.xr.hi - f.xr.lo)) f.xr = {0, 1};
  if (!std::isfinite(f.yr.hi - f.yr.lo)) f.yr = {0, 1};
  int label_w = 0;  // the left margin fits the widest y tick label
  const double ys = tick_step(f.yr, 6);
  for (double v : ticks(f.yr, ys)) label_w = std::max(label_w, text_width(tick_label(v, ys), 1));
  f.x0 = std::max(56, label_w + 20);

  Canvas cv(kW, kH);
  Coverage cov(kW, kH);
  draw_axes(cv, f, title);
  for (size_t i = 0; i < series.size(); ++i) draw_series(cv, cov, f, pts[i], rgb_of(series[i].rgb));
  draw_legend(cv, cov, f, series);
  write_file_atomic(path, png_encode(cv));  // temporary name, rename: never through a planted link
}

}  // namespace zt
