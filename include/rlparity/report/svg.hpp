// A small SVG plot writer for the HTML report (docs/report.md): line/step plots, binned
// histograms (optionally on a log-x axis), grouped bar charts and CDF curves, with labelled axes,
// ticks, units and a legend. Output is XML-well-formed inline SVG (no namespace declaration, no
// external references); every text is XML-escaped and every number is formatted with
// locale-independent, deterministic formatting, so the same data always gives the same bytes.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rlp::report {

// XML text/attribute escaping (&, <, >, ", '); control characters XML 1.0 forbids become '?',
// invalid UTF-8 bytes become '?'.
std::string xml_escape(const std::string& s);

// Shortest decimal text that reads back to exactly `v` (std::to_chars); "nan", "inf", "-inf".
std::string format_exact(double v);
// `sig` significant digits, %g-style but without trailing zeros ("0.00123", "1.5e-07", "42").
std::string format_sig(double v, int sig = 4);

// The fixed colour palette (colour-blind friendly, Okabe-Ito order); index wraps around.
const std::string& palette_color(std::size_t index);

struct Axis {
  std::string label;               // e.g. "|log ratio|"
  std::string unit;                // e.g. "nats"; shown as "label (unit)"; empty for none
  bool log = false;                // log10 scale; non-positive values are not drawn
  std::optional<double> min, max;  // data range when unset (log: widened to whole decades)
};

struct PlotOptions {
  std::string id;     // data-plot attribute (stable name used by tests and CSS)
  std::string title;  // drawn above the plot area
  Axis x, y;
  int width = 640, height = 340;
  std::string note;  // optional small text under the title (e.g. "12 zeros not shown")
};

// One curve: points (x[i], y[i]); `step` draws a staircase (y[i] holds from x[i] to x[i+1]).
// Points with non-finite coordinates (or non-positive ones on a log axis) break the curve.
struct Series {
  std::string label;  // legend text; also written as data-series on the drawn element
  std::size_t color = 0;
  std::vector<double> x, y;
  bool step = false;
};

// Fixed-count binning of values. `edges` has counts.size()+1 entries (log-spaced when binned with
// log = true). Values outside [edges.front(), edges.back()] are counted in below/above, NaN in
// nan, and (log binning) values <= 0 in nonpositive; the last bin is closed on the right.
struct Bins {
  std::vector<double> edges;
  std::vector<double> counts;
  std::uint64_t below = 0, above = 0, nan = 0, nonpositive = 0;
  std::uint64_t total() const;  // values binned (sum of counts)
};
Bins bin_values(const std::vector<double>& values, double lo, double hi, int nbins, bool log);

// A range [lo, hi] covering the finite values (positive values only when `log`), padded so lo < hi;
// for log, widened to whole decades. Returns nullopt when there is no such value.
struct Range {
  double lo, hi;
};
std::optional<Range> data_range(const std::vector<const std::vector<double>*>& arrays, bool log);

struct HistSeries {
  std::string label;
  std::size_t color = 0;
  Bins bins;
};

// The empirical CDF of `values` (NaN dropped; non-positive dropped when log_x) reduced to at most
// `max_points` points: the sorted values at evenly spaced ranks (always including the smallest and
// the largest), y = rank / n. Returned as a step-free Series (label/color set by the caller).
Series cdf_series(const std::vector<double>& values, std::size_t max_points, bool log_x);

// Line/step plot of several series sharing the axes.
std::string line_plot(const PlotOptions& opt, const std::vector<Series>& series);
// Histogram(s): one series draws filled bars (one <rect> per non-empty bin); several series draw
// overlaid step outlines (one <path> each). All series must share the same edges.
std::string histogram_plot(const PlotOptions& opt, const std::vector<HistSeries>& series);

// Grouped bar chart: one group per category (x), one bar per series within the group.
struct BarSeries {
  std::string label;
  std::size_t color = 0;
  std::vector<double> values;  // one per category; NaN = no bar
};
std::string bar_chart(const PlotOptions& opt, const std::vector<std::string>& categories,
                      const std::vector<BarSeries>& series);

// A heatmap of `rows` x `cols` cells (values row-major, row 0 drawn at the bottom), coloured on a
// sequential scale over [lo, hi] (log10 when `log_scale`), values outside clamped, NaN
// (or non-positive on a log scale) left blank; a colour bar is drawn at the right. Cells of equal
// colour next to each other in a row are drawn as one rectangle, so the output stays small.
// marks[c] >= 0 outlines cell (marks[c], c). Axes: x the column index, y the row index.
std::string heatmap_plot(const PlotOptions& opt, int rows, int cols, const std::vector<double>& values,
                         double lo, double hi, bool log_scale, const std::vector<int>& marks);

// Tick positions for an axis range (exposed for tests): "nice" 1/2/5 steps on a linear axis,
// decades (or 1/2/5 within a decade for short log ranges) on a log axis.
std::vector<double> axis_ticks(double lo, double hi, bool log);

}  // namespace rlp::report
