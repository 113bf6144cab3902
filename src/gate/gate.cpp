#include "rlparity/gate/gate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <set>

#include "rlparity/metrics/statistics.hpp"
#include "rlparity/util/error.hpp"

namespace rlp::gate {

namespace {

const RecipeResult* find_recipe(const RunData& run, const std::string& name) {
  for (const auto& r : run.recipes)
    if (r.name == name) return &r;
  return nullptr;
}

std::vector<std::string> recipe_names(const RunData& run) {
  std::vector<std::string> out;
  for (const auto& r : run.recipes) out.push_back(r.name);
  return out;
}

std::optional<double> summary_value(const RecipeResult& r, const std::string& stat) {
  auto it = r.summary.find(stat);
  if (it == r.summary.end()) return std::nullopt;
  return it->second;
}

double badness(Direction d, double x) {
  switch (d) {
    case Direction::higher_is_better: return -x;
    case Direction::closer_to_zero: return std::fabs(x);
    case Direction::closer_to_one: return std::fabs(x - 1.0);
    case Direction::lower_is_better: break;
  }
  return x;
}

double scale(Direction d, double base) {
  return d == Direction::higher_is_better ? std::fabs(base) : std::fabs(badness(d, base));
}

std::string first_input_difference(const RunData& a, const RunData& b) {
  if (a.num_sequences() != b.num_sequences())
    return fmt::format("{} sequences vs {} in the baseline", a.num_sequences(), b.num_sequences());
  for (std::size_t s = 0; s < a.num_sequences(); ++s) {
    const std::string id = s < a.seq_ids.size() ? a.seq_ids[s] : std::to_string(s);
    if (a.prompt_lengths[s] != b.prompt_lengths[s] || a.seq_offsets[s + 1] != b.seq_offsets[s + 1])
      return fmt::format("sequence {} (id '{}') has a different prompt or response length", s, id);
    for (auto i = a.seq_offsets[s]; i < a.seq_offsets[s + 1]; ++i)
      if (a.token_ids[static_cast<std::size_t>(i)] != b.token_ids[static_cast<std::size_t>(i)])
        return fmt::format("sequence {} (id '{}') has different token ids", s, id);
  }
  return {};
}

std::string settings_difference(const nlohmann::json& a, const nlohmann::json& b) {
  if (a == b) return {};
  if (!a.is_object() || !b.is_object()) return "settings differ";
  std::vector<std::string> keys;
  for (auto it = a.begin(); it != a.end(); ++it)
    if (!b.contains(it.key()) || b.at(it.key()) != it.value()) keys.push_back(it.key());
  for (auto it = b.begin(); it != b.end(); ++it)
    if (!a.contains(it.key())) keys.push_back(it.key());
  return "settings differ in: " + fmt::format("{}", fmt::join(keys, ", "));
}

std::string fmt_num(double v) { return fmt::format("{:.6g}", v); }

}  // namespace

Direction direction_of(const std::string& s) { return metric_direction(s); }

const char* direction_name(Direction d) { return metric_direction_name(d); }

bool regressed(Direction d, double value, double base, double tolerance) {
  if (std::isnan(value) && !std::isnan(base)) return true;
  const double worse = badness(d, value) - badness(d, base);
  return worse > tolerance * scale(d, base);
}

double relative_worsening(Direction d, double value, double base) {
  const double s = scale(d, base);
  if (s == 0.0) return std::nan("");
  return (badness(d, value) - badness(d, base)) / s;
}

const std::vector<std::string>& headline_statistics() { return headline_metric_names(); }

const char* verdict_name(Verdict v) {
  // In the order of Verdict.
  static constexpr std::array<const char*, 3> kNames = {"pass", "fail", "missing"};
  return kNames[static_cast<std::size_t>(v)];
}

std::size_t GateResult::violations() const {
  return static_cast<std::size_t>(
      std::count_if(checks.begin(), checks.end(), [](const Check& c) { return c.verdict != Verdict::pass; }));
}

std::vector<std::string> check_baseline_compatible(const RunData& run, const RunData& base,
                                                   const std::vector<std::string>& recipes, bool allow) {
  std::vector<std::string> problems;
  const std::string in_diff = first_input_difference(run, base);
  if (!in_diff.empty()) problems.push_back("the baseline's /inputs differ from the run's: " + in_diff);
  if (run.checkpoint_hash != base.checkpoint_hash)
    problems.push_back(fmt::format("the baseline's checkpoint hash '{}' differs from the run's '{}'",
                                   base.checkpoint_hash, run.checkpoint_hash));
  for (const auto& name : recipes) {
    const RecipeResult* r = find_recipe(run, name);
    const RecipeResult* b = find_recipe(base, name);
    if (!b) {
      problems.push_back(fmt::format("the baseline has no recipe '{}'", name));
      continue;
    }
    const std::string d = settings_difference(r->settings, b->settings);
    if (!d.empty()) problems.push_back(fmt::format("recipe '{}': the baseline's {}", name, d));
  }
  if (!problems.empty() && !allow)
    RLP_THROW_INPUT("refusing the baseline: {} (pass --allow-different-inputs to compare anyway)",
                    fmt::join(problems, "; "));
  return problems;
}

Check bitwise_check(const RecipeResult& r, const std::vector<std::string>& seq_ids,
                    const std::vector<int64_t>& offsets) {
  Check c;
  c.recipe = r.name;
  c.statistic = "logprob_bit_mismatch";
  c.direction = direction_of(c.statistic);
  c.bound = Bound{std::nullopt, 0.0};
  const auto lg = r.tokens.find("logp_gen"), lt = r.tokens.find("logp_train");
  if (lg == r.tokens.end() || lt == r.tokens.end() || lg->second.size() != lt->second.size()) {
    c.verdict = Verdict::missing;
    c.message = fmt::format("recipe '{}' lacks logp_gen or logp_train of equal length", r.name);
    return c;
  }
  const std::vector<double>& g = lg->second;
  const std::vector<double>& t = lt->second;
  std::size_t differ = 0, first = g.size();
  for (std::size_t i = 0; i < g.size(); ++i)
    if (std::memcmp(&g[i], &t[i], sizeof(double)) != 0 && differ++ == 0) first = i;
  c.value = g.empty() ? 0.0 : static_cast<double>(differ) / static_cast<double>(g.size());
  if (differ) {
    c.verdict = Verdict::fail;
    // The sequence owning token `first`: the last offset <= first.
    const auto s = static_cast<std::size_t>(
        std::upper_bound(offsets.begin(), offsets.end(), static_cast<int64_t>(first)) - offsets.begin() - 1);
    const std::string id = s < seq_ids.size() ? seq_ids[s] : std::to_string(s);
    c.message = fmt::format(
        "{} of {} tokens differ in some bit; the first: sequence '{}' response token {}: logp_gen {:.17g}, "
        "logp_train {:.17g}",
        differ, g.size(), id, static_cast<int64_t>(first) - offsets[s], g[first], t[first]);
  }
  return c;
}

GateResult evaluate(const RunData& run, const GateOptions& opts) {
  const bool have_thresholds = opts.thresholds && !opts.thresholds->empty();
  if (!have_thresholds && !opts.baseline && !opts.bitwise)
    RLP_THROW_INPUT(
        "nothing to gate on: give thresholds (--thresholds FILE.toml or --preset), --baseline and/or "
        "--bitwise");
  if (run.recipes.empty()) RLP_THROW_INPUT("the run has no recipes");
  if (!(opts.max_regression >= 0.0) || !std::isfinite(opts.max_regression))
    RLP_THROW_INPUT("max regression must be a finite number >= 0 (got {})", opts.max_regression);
  const std::vector<std::string> all = recipe_names(run);

  GateResult res;
  if (opts.recipes.empty()) {
    res.recipes = all;
  } else {
    std::set<std::string> seen;
    for (const auto& n : opts.recipes) {
      if (!find_recipe(run, n))
        RLP_THROW_INPUT("unknown recipe '{}' (the run has: {}; did you mean '{}'?)", n, fmt::join(all, ", "),
                        nearest_name(n, all));
      if (seen.insert(n).second) res.recipes.push_back(n);
    }
  }
  if (have_thresholds)
    for (const auto& [n, t] : opts.thresholds->recipes)
      if (!find_recipe(run, n))
        RLP_THROW_INPUT(
            "thresholds name recipe '{}', which the run does not have (the run has: {}; did you mean "
            "'{}'?)",
            n, fmt::join(all, ", "), nearest_name(n, all));
  if (opts.baseline)
    res.notes = check_baseline_compatible(run, *opts.baseline, res.recipes, opts.allow_different_inputs);

  const std::vector<int64_t> offsets =
      opts.bitwise ? response_offsets(run.seq_offsets, run.prompt_lengths) : std::vector<int64_t>{};
  for (const auto& name : res.recipes) {
    const RecipeResult& r = *find_recipe(run, name);
    if (opts.bitwise) res.checks.push_back(bitwise_check(r, run.seq_ids, offsets));
    const RecipeResult* b = opts.baseline ? find_recipe(*opts.baseline, name) : nullptr;
    std::map<std::string, Bound> bounds;
    std::set<std::string> stats;
    if (have_thresholds) {
      bounds = opts.thresholds->bounds_for(name);
      for (const auto& s : opts.thresholds->statistics_for(name)) stats.insert(s);
    }
    if (b)
      for (const auto& s : headline_statistics())
        if (r.summary.count(s) || b->summary.count(s)) stats.insert(s);

    for (const auto& stat : stats) {
      if (opts.bitwise && stat == "logprob_bit_mismatch") continue;  // checked bitwise above
      Check c;
      c.recipe = name;
      c.statistic = stat;
      c.direction = direction_of(stat);
      c.value = summary_value(r, stat);
      if (auto it = bounds.find(stat); it != bounds.end()) c.bound = it->second;
      if (!c.bound && !b) continue;  // a max_regression entry without a baseline checks nothing
      if (b) {
        c.baseline = summary_value(*b, stat);
        c.tolerance = opts.max_regression;
        if (have_thresholds)
          if (auto t = opts.thresholds->max_regression_for(name, stat)) c.tolerance = *t;
      }
      std::vector<std::string> why;
      if (!c.value) {
        c.verdict = Verdict::missing;
        why.push_back(fmt::format("recipe '{}' has no summary statistic '{}'", name, stat));
      } else {
        const double v = *c.value;
        if (c.bound) {
          if (std::isnan(v))
            why.push_back("value is NaN");
          else if (c.bound->min && v < *c.bound->min)
            why.push_back(fmt::format("{} is below the minimum {}", fmt_num(v), fmt_num(*c.bound->min)));
          else if (c.bound->max && v > *c.bound->max)
            why.push_back(fmt::format("{} is above the maximum {}", fmt_num(v), fmt_num(*c.bound->max)));
        }
        if (c.baseline && !std::isnan(*c.baseline) && regressed(c.direction, v, *c.baseline, *c.tolerance)) {
          const double rel = relative_worsening(c.direction, v, *c.baseline);
          why.push_back(fmt::format("{} is worse than the baseline {} by {} ({}; tolerance {:.4g}%)",
                                    fmt_num(v), fmt_num(*c.baseline),
                                    std::isnan(rel) ? std::string("more than 0 from a zero baseline")
                                                    : fmt::format("{:.4g}%", 100.0 * rel),
                                    direction_name(c.direction), 100.0 * *c.tolerance));
        }
        if (!why.empty()) c.verdict = Verdict::fail;
      }
      c.message = fmt::format("{}", fmt::join(why, "; "));
      res.checks.push_back(std::move(c));
    }
  }
  return res;
}

GateResult evaluate_sweep(const SweepResult& sweep, const GateOptions& opts) {
  if (opts.baseline || opts.bitwise)
    RLP_THROW_INPUT(
        "a sweep file is gated against thresholds only (--baseline and --bitwise need a run file)");
  GateResult all;
  for (std::size_t p = 0; p < sweep.points(); ++p) {
    RunData point;
    point.recipes = sweep_point_recipes(sweep, p);
    GateResult res = evaluate(point, opts);
    const std::string at = " @ " + sweep_point_label(sweep, p);
    for (auto& name : res.recipes) all.recipes.push_back(name + at);
    for (auto& c : res.checks) {
      c.recipe += at;
      all.checks.push_back(std::move(c));
    }
    for (auto& n : res.notes) all.notes.push_back(n + at);
  }
  return all;
}

}  // namespace rlp::gate
