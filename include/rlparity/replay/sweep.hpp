// Sweep (`rlparity sweep`, docs/sweep.md): the cartesian grid of knob values, each point a replay
// of the same inputs with the point's knobs added to the base options. Responses are sampled once
// (with the base options' sampler, before any grid knob applies) and prepared weights are shared
// between points by weights_key, so a point is exactly a plain replay with the same knobs of the
// same (sampled) inputs: same statistics, bit for bit.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "rlparity/metrics/boundaries.hpp"
#include "rlparity/model/checkpoint.hpp"
#include "rlparity/replay/inputs.hpp"
#include "rlparity/replay/replay_plan.hpp"
#include "rlparity/run/run_data.hpp"
#include "rlparity/run/sweep_data.hpp"

namespace rlp {

// One --grid KNOB=V1,V2,...: knob "gen-<name>" or "train-<name>" (a knob of knob_table()).
struct GridAxis {
  std::string knob;  // as given: "gen-tp"
  bool gen = true;   // which path it applies to
  std::string name;  // the knob table's name: "tp"
  std::vector<std::string> values;
};

// Parses and checks every --grid. InputError for: no '=', an unknown path prefix or knob, an empty
// value list or value, a value set_knob refuses (its message), a knob or value given twice, and a
// knob also set in `base` (--gen-tp 2 with --grid gen-tp=...: ambiguous, refused).
std::vector<GridAxis> parse_grid(const std::vector<std::string>& specs, const ReplayOptions& base);

// Number of points (product of the axes' sizes) and point i's value index on each axis: the last
// axis varies fastest (points in the order the grid was given, like nested loops).
std::size_t grid_points(const std::vector<GridAxis>& axes);
std::vector<std::size_t> grid_point_indices(const std::vector<GridAxis>& axes, std::size_t point);

// The base options with point i's knobs appended to the generation / training knob lists.
ReplayOptions point_options(const ReplayOptions& base, const std::vector<GridAxis>& axes, std::size_t point);

// Mean |log ratio| at each response position 0..positions-1 over the sequences that reach it
// (summed in sequence order; NaN where none does). r must hold "abs_log_ratio".
std::vector<double> position_mean_abs_log_ratio(const RecipeResult& r,
                                                const std::vector<int64_t>& resp_offsets,
                                                std::size_t positions);

// Called after each point's replay with its index and run (for --keep-runs).
using SweepPointFn = std::function<void(std::size_t point, RunData& run)>;

// Plans every point first (InputError before any work for a point whose knobs cannot run), samples
// missing responses once with the base plan, then replays the points in order.
SweepResult run_sweep(const Checkpoint& ckpt, std::vector<InputSequence>& inputs, const ReplayOptions& base,
                      const std::vector<GridAxis>& axes, const SweepPointFn& on_point = {},
                      const BoundaryOptions& boundary_options = {});

// One row per point x recipe: the knob values, the recipe, the headline statistics, and the
// boundaries found on that curve.
std::string format_sweep_table(const SweepResult& sweep);

}  // namespace rlp
