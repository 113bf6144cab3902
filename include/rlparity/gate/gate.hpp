// The CI gate: checks a run's summary statistics against absolute bounds (Thresholds) and/or the
// same recipes of a baseline run (relative regression). Pure: reads RunData, returns verdicts;
// the CLI (src/cli/cmd_gate.cpp) does file I/O and exit codes. Rules are in docs/gate.md.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "rlparity/gate/thresholds.hpp"
#include "rlparity/metrics/metric_catalogue.hpp"
#include "rlparity/run/run_data.hpp"
#include "rlparity/run/sweep_data.hpp"

namespace rlp::gate {

// Which way a statistic gets worse, for baseline comparison: the catalogue's (metric_catalogue.hpp).
using Direction = MetricDirection;
Direction direction_of(const std::string& statistic);  // the catalogue's; lower_is_better when unknown
const char* direction_name(Direction d);

// True when `value` is worse than `base` by more than `tolerance` (relative): with badness b(x)
// = x, -x, |x| or |x - 1| by direction and scale s = |b(base)| (|base| for higher_is_better),
// worse when b(value) - b(base) > tolerance * s. A zero baseline fails on any worsening.
bool regressed(Direction d, double value, double base, double tolerance);
// Signed relative change of the badness (positive = worse); NaN when the scale is 0.
double relative_worsening(Direction d, double value, double base);

// The statistics compared against a baseline when the thresholds do not name them: the catalogue's
// headline statistics (the columns of the summary table).
const std::vector<std::string>& headline_statistics();

enum class Verdict { pass, fail, missing };
const char* verdict_name(Verdict v);  // "pass", "fail", "missing"

struct Check {
  std::string recipe, statistic;
  std::optional<double> value;      // absent: the run has no such summary attribute
  std::optional<Bound> bound;       // absolute bound, if the thresholds set one
  std::optional<double> baseline;   // the baseline's value, if compared
  std::optional<double> tolerance;  // relative regression tolerance used with `baseline`
  Direction direction = Direction::lower_is_better;
  Verdict verdict = Verdict::pass;
  std::string message;  // why it failed / is missing; empty on pass
};

struct GateOptions {
  std::optional<Thresholds> thresholds;
  const RunData* baseline = nullptr;
  double max_regression = 0.10;  // default relative tolerance (per-statistic overrides in thresholds)
  bool allow_different_inputs = false;
  std::vector<std::string> recipes;  // empty: every recipe of the run
  // --bitwise: per gated recipe, a check that passes only when logp_gen and logp_train (read from
  // the tokens, not the summary attribute, so older files work too) are identical in every bit.
  bool bitwise = false;
};

struct GateResult {
  std::vector<std::string> recipes;  // gated, in run order
  std::vector<Check> checks;         // grouped by recipe, statistics sorted
  std::vector<std::string> notes;    // warnings (e.g. baseline differences accepted by the override)
  std::size_t violations() const;    // checks whose verdict is not pass
  bool passed() const { return violations() == 0; }
};

// Throws InputError when the baseline's /inputs (token ids, offsets, prompt lengths), checkpoint
// hash, or the settings of a gated recipe differ from the run's, or it lacks a gated recipe;
// with allow_different_inputs these become notes (returned) instead.
std::vector<std::string> check_baseline_compatible(const RunData& run, const RunData& baseline,
                                                   const std::vector<std::string>& recipes,
                                                   bool allow_different_inputs);

// The bitwise check of one recipe: statistic logprob_bit_mismatch, bound max 0, its value the
// fraction of tokens whose logp_gen and logp_train differ in any bit; a failure names the first such
// token (sequence id, response position, both values). `response_offsets` as in statistics.hpp.
Check bitwise_check(const RecipeResult& r, const std::vector<std::string>& seq_ids,
                    const std::vector<int64_t>& response_offsets);

// Evaluates the gate. InputError for: no thresholds, no baseline and no bitwise check, a run without recipes,
// an unknown recipe in opts.recipes or in the thresholds' [recipes.*] tables (nearest name suggested), an
// incompatible baseline (see above), a negative max_regression.
GateResult evaluate(const RunData& run, const GateOptions& opts);

// Every point of a sweep (sweep_data.hpp) against the thresholds, each point's recipes gated as a
// run's would be (per-recipe sections apply by recipe name); a check's recipe reads
// "<recipe> @ <knob=value ...>". Thresholds only: InputError for a baseline or --bitwise (a sweep
// file holds summaries, not tokens).
GateResult evaluate_sweep(const SweepResult& sweep, const GateOptions& opts);

}  // namespace rlp::gate
