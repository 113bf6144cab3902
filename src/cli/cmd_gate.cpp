// `rlparity gate RUN.h5`: checks a run's summary statistics against thresholds (TOML file and/or a
// preset) and/or a baseline run; exit 0 when every check passes, 1 on any violation, 2 on bad
// usage or input. Rules and formats: docs/gate.md.
#include <fmt/core.h>

#include "cli/commands.hpp"
#include "cli/shared_options.hpp"
#include "rlparity/gate/gate.hpp"
#include "rlparity/gate/report_writers.hpp"
#include "rlparity/gate/thresholds.hpp"
#include "rlparity/io/run_file.hpp"
#include "rlparity/io/sweep_file.hpp"
#include "rlparity/util/atomic_file.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/strings.hpp"

namespace rlp::cli {
namespace {

struct GateArgs {
  std::string run, thresholds, preset, baseline, recipes, junit, markdown;
  double max_regression = 0.10;
  bool allow_different_inputs = false, json = false, bitwise = false;
};

int report_gate(const GateArgs& a, const gate::GateResult& res, const gate::GateOptions& opt);

int run_gate(const GateArgs& a) {
  if (a.thresholds.empty() && a.preset.empty() && a.baseline.empty() && !a.bitwise)
    RLP_THROW_INPUT(
        "nothing to gate on: give --thresholds FILE.toml, --preset nemo-rl|verl, --baseline BASE.h5 and/or "
        "--bitwise");
  gate::GateOptions opt;
  opt.thresholds = load_thresholds(a.preset, a.thresholds);
  if (is_sweep_file(a.run)) {  // every point of a sweep against the thresholds
    opt.recipes = split_list(a.recipes);
    opt.bitwise = a.bitwise;
    const SweepResult sweep = read_sweep_file(a.run);
    if (!a.baseline.empty())
      RLP_THROW_INPUT(
          "'{}' is a sweep file: it is gated against thresholds only (--baseline needs a run file)", a.run);
    return report_gate(a, gate::evaluate_sweep(sweep, opt), opt);
  }
  const RunData run = read_run_file(a.run);
  RunData base;
  if (!a.baseline.empty()) {
    base = read_run_file(a.baseline);
    opt.baseline = &base;
  }
  opt.max_regression = a.max_regression;
  opt.allow_different_inputs = a.allow_different_inputs;
  opt.recipes = split_list(a.recipes);
  opt.bitwise = a.bitwise;
  return report_gate(a, gate::evaluate(run, opt), opt);
}

// Writes the --junit / --markdown files, prints the table (or --json), and gives the exit code.
int report_gate(const GateArgs& a, const gate::GateResult& res, const gate::GateOptions& opt) {
  gate::ReportContext ctx;
  ctx.run_path = a.run;
  ctx.baseline_path = a.baseline;
  if (opt.thresholds) ctx.threshold_sources = opt.thresholds->sources;
  if (!a.junit.empty()) write_file_atomically(a.junit, gate::format_junit(res, ctx), "JUnit report");
  if (!a.markdown.empty())
    write_file_atomically(a.markdown, gate::format_markdown(res, ctx), "Markdown report");
  if (a.json) {
    print_json(gate::to_json(res, ctx));
  } else {
    fmt::print("{}", gate::format_gate_table(res));
  }
  return res.passed() ? kExitOk : kExitViolation;
}

}  // namespace

void setup_gate(CLI::App& app, CommandRegistry& registry) {
  auto args = std::make_shared<GateArgs>();
  auto* sub = app.add_subcommand(
      "gate", "Check a run against thresholds and/or a baseline run (exit 0 pass, 1 violation, 2 error)");
  sub->add_option("run", args->run,
                  "run file (HDF5) written by replay or compare, or a sweep file (every point is gated)")
      ->required();
  sub->add_option("--thresholds", args->thresholds,
                  "TOML thresholds file (docs/gate.md); overrides a --preset per statistic");
  sub->add_option("--preset", args->preset, "named thresholds: nemo-rl or verl");
  sub->add_option("--baseline", args->baseline,
                  "baseline run file: fail when a statistic worsens by more than --max-regression");
  sub->add_option("--max-regression", args->max_regression,
                  "relative tolerance against the baseline (0.1 = 10%)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  sub->add_flag("--allow-different-inputs", args->allow_different_inputs,
                "compare with a baseline whose inputs, checkpoint hash or recipe settings differ");
  sub->add_flag("--bitwise", args->bitwise,
                "pass only when every gated recipe's generation and training logprobs are identical in every "
                "bit (a zero-mismatch certification)");
  sub->add_option("--recipes", args->recipes, "comma-separated recipes to gate (default: all)");
  sub->add_option("--junit", args->junit, "write a JUnit XML report here");
  sub->add_option("--markdown", args->markdown, "write a Markdown summary here");
  sub->add_flag("--json", args->json, "print the result as JSON instead of the table");
  registry.add(sub, [args] { return run_gate(*args); });
}

}  // namespace rlp::cli
