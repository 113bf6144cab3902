// A sweep's results in memory (`rlparity sweep`, docs/sweep.md): what run_sweep produces, what the
// sweep file holds (io/sweep_file.hpp), and what gate and report read back.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "rlparity/metrics/boundaries.hpp"
#include "rlparity/run/run_data.hpp"

namespace rlp {

struct SweepResult {
  std::vector<std::string> knobs;                      // axis names, as given
  std::vector<std::string> values;                     // points x knobs, row-major
  std::vector<std::string> recipes;                    // the recipes replayed at every point
  std::vector<std::string> statistics;                 // metric_names(): the keys of summary
  std::map<std::string, std::vector<double>> summary;  // per statistic: points x recipes (NaN: absent)
  std::size_t positions = 0;                           // longest response
  std::vector<double> position_curve;                  // points x recipes x positions
  struct PointBoundary {
    int64_t point = 0, recipe = 0;
    Boundary b;
  };
  std::vector<PointBoundary> boundaries;  // by point, then recipe, then position
  BoundaryOptions boundary_options;
  std::size_t points() const { return knobs.empty() ? 0 : values.size() / knobs.size(); }
};

// "knob=value knob=value" of point p.
std::string sweep_point_label(const SweepResult& sweep, std::size_t point);
// Point p's recipes, each named as in the sweep with the point's summary statistics (those the
// point's run had: NaN entries left out, num_tokens always kept).
std::vector<RecipeResult> sweep_point_recipes(const SweepResult& sweep, std::size_t point);

}  // namespace rlp
