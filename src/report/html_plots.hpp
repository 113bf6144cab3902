// The plots of the HTML report (docs/report.md): per recipe, the histogram and CDF of |log ratio|
// and of the importance ratio, mean KL per response position and the per-layer divergence bars; and
// the same quantities of every recipe side by side. Inline SVG from svg.hpp.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "rlparity/report/report.hpp"
#include "rlparity/report/svg.hpp"
#include "rlparity/run/run_data.hpp"

namespace rlp::report {

// Shared plot inputs of every recipe, so per-recipe plots and the comparison use the same axes.
struct PlotData {
  std::optional<Range> abs_range;  // |log ratio|, log axis, whole decades
  std::optional<Range> r_range;    // ratio, log axis, symmetric around 1
  std::string kl_metric, kl_label;
  bool kl_log = false;
  std::vector<PositionCurve> kl_curves;  // per recipe
};
PlotData prepare_plots(const RunData& run, const ReportOptions& opt);

// The plots of recipe `ri` (a <div class="plots">).
std::string recipe_plots(const RunData& run, std::size_t ri, const PlotData& p, const ReportOptions& opt);
// The "Recipes side by side" section.
std::string comparison_plots(const RunData& run, const PlotData& p, const ReportOptions& opt);

}  // namespace rlp::report
