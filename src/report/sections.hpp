// Report sections drawn from tables (docs/report.md): replay attribution (/attribution/<kind> of a
// run file) and inspect results (an inspect file). Each section is built once, as data, and rendered
// by both the HTML report (bar chart + table) and the Markdown report (table with text bars), so the
// two always show the same rows in the same order.
#pragma once
#include <cstddef>
#include <limits>
#include <string>
#include <vector>

#include "rlparity/inspect/inspect.hpp"
#include "rlparity/report/svg.hpp"
#include "rlparity/run/run_data.hpp"
#include "rlparity/run/sweep_data.hpp"

namespace rlp::report {

struct TableCell {
  std::string text;  // string cells; numeric cells are printed from `value`
  double value = std::numeric_limits<double>::quiet_NaN();
  bool numeric = false;
};

struct TableSection {
  std::string id;                  // element id in HTML ("attribution-layers"), data-plot id of the chart
  std::string title;               // heading
  std::vector<std::string> notes;  // paragraphs of plain text under the heading
  std::vector<std::string> keys;   // per column: the HDF5 name of the value (data-col in HTML)
  std::vector<std::string> headers;
  std::vector<std::vector<TableCell>> rows;  // in display order (sorted by divergence / worst SNR)
  // Bar charts over the rows' categories (in row order, possibly only the first rows).
  struct Chart {
    PlotOptions plot;
    std::vector<std::string> categories;
    std::vector<BarSeries> bars;
  };
  std::vector<Chart> charts;
  std::size_t bar_column = static_cast<std::size_t>(-1);  // the column Markdown draws as text bars (none: -1)
  std::size_t markdown_rows = 0;  // rows in Markdown (0 = all); a note says how many were left out
};

TableCell num_cell(double v);
TableCell text_cell(std::string s);

// One section per attribution table present in the run (layers, layer_candidates, knobs,
// kv_scales, in that order; unknown kinds are skipped). Empty when the run has no /attribution.
std::vector<TableSection> attribution_sections(const RunData& run);
// MoE runs (/recipes/<r>/routing): router flips per MoE layer (generation vs training, and each
// against the oracle), the oracle router's margin p_k - p_(k+1) of flipped vs kept choices as a
// histogram, and the divergence of tokens with and without a flip. Empty for a dense run.
std::vector<TableSection> routing_sections(const RunData& run);
// A sweep file (sweep_data.hpp): one row per point (its knob values), per recipe the headline
// statistics, with a bar chart of each recipe's mean |log ratio| per point; and the divergence
// boundaries found on the per-position curves.
std::vector<TableSection> sweep_sections(const SweepResult& sweep);
// "Engine vs emulation": one row per recipe and side the engine was compared with (engine_side.hpp),
// the token count, the headline statistics and the RL-impact fractions of the pair. Empty when the
// run's inputs carry no engine logprobs.
std::vector<TableSection> engine_sections(const RunData& run);
// The inspect file's per-tensor table (worst SNR first) with its SNR chart per convention and scale
// mode (at most `max_chart_tensors` tensors drawn), and the per-layer table with the recommendation.
std::vector<TableSection> inspect_sections(const InspectResult& r, std::size_t max_chart_tensors = 48);

// Width of a bar chart drawing n_bars bars in all (640..1300 px).
int bar_chart_width(std::size_t n_bars);

}  // namespace rlp::report
