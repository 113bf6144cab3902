#include "rlparity/replay/sweep.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "rlparity/metrics/metric_catalogue.hpp"
#include "rlparity/metrics/statistics.hpp"
#include "rlparity/metrics/summary_table.hpp"
#include "rlparity/replay/replay.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/interrupt.hpp"
#include "rlparity/util/strings.hpp"

namespace rlp {

std::vector<GridAxis> parse_grid(const std::vector<std::string>& specs, const ReplayOptions& base) {
  std::vector<GridAxis> axes;
  for (const auto& spec : specs) {
    const auto eq = spec.find('=');
    if (eq == std::string::npos)
      RLP_THROW_INPUT("--grid '{}': expected KNOB=V1,V2,... (e.g. gen-tp=1,2,4)", spec);
    GridAxis a;
    a.knob = spec.substr(0, eq);
    if (a.knob.rfind("gen-", 0) == 0) {
      a.gen = true;
      a.name = a.knob.substr(4);
    } else if (a.knob.rfind("train-", 0) == 0) {
      a.gen = false;
      a.name = a.knob.substr(6);
    } else {
      RLP_THROW_INPUT("--grid '{}': the knob must be gen-<knob> or train-<knob>, got '{}'", spec, a.knob);
    }
    const auto& table = knob_table();
    if (std::none_of(table.begin(), table.end(), [&](const KnobInfo& k) { return k.name == a.name; })) {
      std::string known;
      for (const auto& k : table) known += (known.empty() ? "" : ", ") + k.name;
      RLP_THROW_INPUT("--grid '{}': unknown knob '{}' (knobs: {})", spec, a.name, known);
    }
    for (const auto& other : axes)
      if (other.knob == a.knob) RLP_THROW_INPUT("--grid: knob '{}' given twice", a.knob);
    const auto& plain = a.gen ? base.recipe.gen_knobs : base.recipe.train_knobs;
    for (const auto& [name, value] : plain)
      if (name == a.name)
        RLP_THROW_INPUT("--grid {}: the knob is also set by --{} {} (give it in one place)", a.knob, a.knob,
                        value);
    const std::string list = spec.substr(eq + 1);
    if (list.empty()) RLP_THROW_INPUT("--grid '{}': no values", spec);
    std::size_t start = 0;
    while (true) {
      const auto comma = list.find(',', start);
      a.values.push_back(list.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    for (std::size_t i = 0; i < a.values.size(); ++i) {
      const std::string& v = a.values[i];
      if (v.empty()) RLP_THROW_INPUT("--grid '{}': empty value", spec);
      for (std::size_t j = 0; j < i; ++j)
        if (a.values[j] == v) RLP_THROW_INPUT("--grid '{}': value '{}' given twice", spec, v);
      PathStyle probe;
      set_knob(probe, a.name, v);  // InputError naming the knob and its accepted values
    }
    axes.push_back(std::move(a));
  }
  if (axes.empty()) RLP_THROW_INPUT("sweep: no --grid given");
  return axes;
}

std::size_t grid_points(const std::vector<GridAxis>& axes) {
  std::size_t n = 1;
  for (const auto& a : axes) n *= a.values.size();
  return n;
}

std::vector<std::size_t> grid_point_indices(const std::vector<GridAxis>& axes, std::size_t point) {
  std::vector<std::size_t> idx(axes.size());
  for (std::size_t k = axes.size(); k-- > 0;) {
    idx[k] = point % axes[k].values.size();
    point /= axes[k].values.size();
  }
  return idx;
}

ReplayOptions point_options(const ReplayOptions& base, const std::vector<GridAxis>& axes, std::size_t point) {
  ReplayOptions o = base;
  const auto idx = grid_point_indices(axes, point);
  for (std::size_t k = 0; k < axes.size(); ++k)
    (axes[k].gen ? o.recipe.gen_knobs : o.recipe.train_knobs)
        .emplace_back(axes[k].name, axes[k].values[idx[k]]);
  return o;
}

std::vector<double> position_mean_abs_log_ratio(const RecipeResult& r,
                                                const std::vector<int64_t>& resp_offsets,
                                                std::size_t positions) {
  const auto it = r.tokens.find("abs_log_ratio");
  if (it == r.tokens.end()) RLP_THROW("recipe '{}' has no abs_log_ratio", r.name);
  const std::vector<double>& v = it->second;
  std::vector<double> sum(positions, 0.0), count(positions, 0.0);
  for (std::size_t s = 0; s + 1 < resp_offsets.size(); ++s)
    for (int64_t t = resp_offsets[s]; t < resp_offsets[s + 1]; ++t) {
      const auto j = static_cast<std::size_t>(t - resp_offsets[s]);
      if (j >= positions) break;
      sum[j] += v[static_cast<std::size_t>(t)];
      count[j] += 1.0;
    }
  for (std::size_t j = 0; j < positions; ++j)
    sum[j] = count[j] > 0 ? sum[j] / count[j] : std::numeric_limits<double>::quiet_NaN();
  return sum;
}

SweepResult run_sweep(const Checkpoint& ckpt, std::vector<InputSequence>& inputs, const ReplayOptions& base,
                      const std::vector<GridAxis>& axes, const SweepPointFn& on_point,
                      const BoundaryOptions& boundary_options) {
  if (inputs.empty()) RLP_THROW_INPUT("no input sequences to replay");
  const std::size_t P = grid_points(axes);
  // Every point planned before any work: a knob value one point cannot run fails now.
  const ReplayPlan base_plan = make_replay_plan(ckpt.spec(), base);
  std::vector<ReplayPlan> plans;
  for (std::size_t p = 0; p < P; ++p) {
    try {
      plans.push_back(make_replay_plan(ckpt.spec(), point_options(base, axes, p)));
    } catch (const InputError& e) {
      std::string knobs;
      const auto idx = grid_point_indices(axes, p);
      for (std::size_t k = 0; k < axes.size(); ++k)
        knobs += fmt::format("{}{}={}", k ? " " : "", axes[k].knob, axes[k].values[idx[k]]);
      RLP_THROW_INPUT("sweep point {} ({}): {}", p, knobs, e.what());
    }
  }

  PreparedWeightsCache cache;
  sample_missing_responses(ckpt, inputs, base_plan, &cache);

  SweepResult out;
  out.boundary_options = boundary_options;
  for (const auto& a : axes) out.knobs.push_back(a.knob);
  for (std::size_t p = 0; p < P; ++p) {
    const auto idx = grid_point_indices(axes, p);
    for (std::size_t k = 0; k < axes.size(); ++k) out.values.push_back(axes[k].values[idx[k]]);
  }
  out.recipes = base.recipes;
  out.statistics = metric_names();
  const std::size_t R = out.recipes.size();
  for (const auto& s : out.statistics) out.summary[s].assign(P * R, std::numeric_limits<double>::quiet_NaN());
  for (const auto& in : inputs) out.positions = std::max(out.positions, in.response.size());
  out.position_curve.assign(P * R * out.positions, std::numeric_limits<double>::quiet_NaN());

  for (std::size_t p = 0; p < P; ++p) {
    check_interrupted();
    RunData run = run_replay(ckpt, inputs, plans[p], {}, &cache);
    const std::vector<int64_t> offs = response_offsets(run.seq_offsets, run.prompt_lengths);
    for (std::size_t r = 0; r < R; ++r) {
      const RecipeResult& rr = run.recipes[r];
      for (const auto& [name, value] : rr.summary) {
        const auto it = out.summary.find(name);
        if (it != out.summary.end()) it->second[p * R + r] = value;
      }
      const std::vector<double> curve = position_mean_abs_log_ratio(rr, offs, out.positions);
      std::copy(curve.begin(), curve.end(),
                out.position_curve.begin() + static_cast<std::ptrdiff_t>((p * R + r) * out.positions));
      for (const Boundary& b : find_boundaries(curve, boundary_options))
        out.boundaries.push_back({static_cast<int64_t>(p), static_cast<int64_t>(r), b});
    }
    if (on_point) on_point(p, run);
  }
  return out;
}

std::string format_sweep_table(const SweepResult& sweep) {
  std::vector<RecipeResult> rows;
  for (std::size_t p = 0; p < sweep.points(); ++p)
    for (RecipeResult& row : sweep_point_recipes(sweep, p)) {
      row.name = fmt::format("{:>3}  {}  {}", p, sweep_point_label(sweep, p), row.name);
      rows.push_back(std::move(row));
    }
  std::string out = format_summary_table(rows);
  // The first column holds point, knobs and recipe: say so in its header when it is wide enough.
  const std::string head = "  #  knobs  recipe";
  if (out.rfind("recipe", 0) == 0 && out.size() > head.size() && out.find_first_not_of(' ', 6) >= head.size())
    out.replace(0, head.size(), head);
  if (sweep.boundaries.empty()) {
    out += "boundaries: none (per-position mean |log ratio|; docs/sweep.md)\n";
  } else {
    out += "boundaries (per-position mean |log ratio| jumps; docs/sweep.md):\n";
    for (const auto& b : sweep.boundaries)
      out += fmt::format("  point {} ({}) {}: position {}  jump {:+.3e}  z {:.1f}\n", b.point,
                         sweep_point_label(sweep, static_cast<std::size_t>(b.point)),
                         sweep.recipes[static_cast<std::size_t>(b.recipe)], b.b.position, b.b.jump, b.b.z);
  }
  return out;
}

}  // namespace rlp
