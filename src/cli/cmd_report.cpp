// `rlparity report RUN.h5`: renders a run file as one self-contained HTML page (and optionally
// Markdown), with gate verdicts (--thresholds/--preset), baseline deltas (--baseline), its
// attribution tables, and an inspect file's sections (--inspect); `report INSPECT.h5` renders an
// inspect file alone.
// What the report shows: docs/report.md.
#include <fmt/core.h>

#include "cli/commands.hpp"
#include "cli/shared_options.hpp"
#include "rlparity/gate/gate.hpp"
#include "rlparity/gate/thresholds.hpp"
#include "rlparity/inspect/inspect.hpp"
#include "rlparity/io/run_file.hpp"
#include "rlparity/io/sweep_file.hpp"
#include "rlparity/report/report.hpp"
#include "rlparity/util/atomic_file.hpp"
#include "rlparity/util/error.hpp"

namespace rlp::cli {
namespace {

struct ReportArgs {
  std::string run, out = "rlparity-report.html", markdown, baseline, thresholds, preset, inspect, tokenizer;
  std::size_t worst = 50;
  double birth_threshold = 1e-2;
  bool quiet = false;
};

// Writes the rendered HTML (and Markdown, when asked) and says so unless quiet.
int write_outputs(const ReportArgs& a, const std::string& html, const std::string& md,
                  const std::string& what) {
  write_file_atomically(a.out, html, "HTML report");
  if (!a.markdown.empty()) write_file_atomically(a.markdown, md, "Markdown report");
  if (!a.quiet) {
    fmt::print("wrote {} ({} bytes, {})\n", a.out, html.size(), what);
    if (!a.markdown.empty()) fmt::print("wrote {} ({} bytes)\n", a.markdown, md.size());
  }
  return kExitOk;
}

// `report INSPECT.h5`: the inspect file alone (the file kind is told by its root attribute
// `format`); run-file options make no sense there.
int run_inspect_report(const ReportArgs& a) {
  if (!a.baseline.empty() || !a.thresholds.empty() || !a.preset.empty() || !a.inspect.empty())
    RLP_THROW_INPUT(
        "'{}' is an inspect file: --baseline, --thresholds, --preset and --inspect need a run file", a.run);
  const InspectResult r = read_inspect_file(a.run);
  report::ReportOptions opt;
  opt.inspect_path = a.run;
  const std::string html = report::render_inspect_html(r, opt);
  const std::string md = a.markdown.empty() ? std::string() : report::render_inspect_markdown(r, opt);
  return write_outputs(a, html, md, fmt::format("{} tensors", r.tensors.size()));
}

// `report SWEEP.h5`: a sweep file (io/sweep_file.hpp); run-file options make no sense there.
int run_sweep_report(const ReportArgs& a) {
  if (!a.baseline.empty() || !a.thresholds.empty() || !a.preset.empty() || !a.inspect.empty())
    RLP_THROW_INPUT(
        "'{}' is a sweep file: --baseline, --thresholds, --preset and --inspect need a run file (gate checks "
        "every point of a sweep: `rlparity gate {} --thresholds ...`)",
        a.run, a.run);
  const SweepResult sweep = read_sweep_file(a.run);
  report::ReportOptions opt;
  opt.run_path = a.run;
  const std::string html = report::render_sweep_html(sweep, opt);
  const std::string md = a.markdown.empty() ? std::string() : report::render_sweep_markdown(sweep, opt);
  return write_outputs(a, html, md, fmt::format("{} points", sweep.points()));
}

int run_report(const ReportArgs& a) {
  if (is_inspect_file(a.run)) return run_inspect_report(a);
  if (is_sweep_file(a.run)) return run_sweep_report(a);
  const RunData run = read_run_file(a.run);
  report::ReportOptions opt;
  opt.run_path = a.run;
  opt.worst_tokens = a.worst;
  opt.birth_threshold = a.birth_threshold;
  const std::optional<Tokenizer> tokenizer = run_tokenizer(run, a.tokenizer);
  if (tokenizer) opt.tokenizer = &*tokenizer;
  InspectResult inspected;
  if (!a.inspect.empty()) {
    inspected = read_inspect_file(a.inspect);
    opt.inspect = &inspected;
    opt.inspect_path = a.inspect;
  }
  RunData base;
  if (!a.baseline.empty()) {
    base = read_run_file(a.baseline);
    opt.baseline = &base;
    opt.baseline_path = a.baseline;
  }
  gate::GateResult verdicts;
  if (!a.thresholds.empty() || !a.preset.empty()) {
    gate::GateOptions go;
    go.thresholds = load_thresholds(a.preset, a.thresholds);
    // Verdicts of the absolute thresholds only; the baseline is shown as deltas, not gated.
    verdicts = gate::evaluate(run, go);
    opt.gate = &verdicts;
    opt.threshold_sources = go.thresholds->sources;
  }
  // Render everything before writing anything, so a failure leaves no partial output set.
  const std::string html = report::render_html(run, opt);
  const std::string md = a.markdown.empty() ? std::string() : report::render_markdown(run, opt);
  return write_outputs(a, html, md, fmt::format("{} recipes", run.recipes.size()));
}

}  // namespace

void setup_report(CLI::App& app, CommandRegistry& registry) {
  auto args = std::make_shared<ReportArgs>();
  auto* sub =
      app.add_subcommand("report", "Render a run file as a self-contained HTML report (and Markdown)");
  sub->add_option("run", args->run,
                  "run file (HDF5) written by replay or compare, or an inspect file (inspect --out)")
      ->required();
  sub->add_option("-o,--out", args->out, "HTML output file")->capture_default_str();
  sub->add_option("--markdown", args->markdown,
                  "also write a Markdown summary (summary table + worst tokens) here");
  sub->add_option("--baseline", args->baseline,
                  "baseline run file: show deltas of every summary statistic against it");
  sub->add_option("--thresholds", args->thresholds,
                  "TOML thresholds file (docs/gate.md): show pass/fail verdicts");
  sub->add_option("--preset", args->preset, "named thresholds (nemo-rl, verl): show pass/fail verdicts");
  sub->add_option("--inspect", args->inspect,
                  "inspect file (inspect --out): add its per-tensor and per-layer sections");
  sub->add_option("--worst", args->worst, "rows of each worst-tokens table in the HTML report")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  add_tokenizer_option(sub, args->tokenizer);
  sub->add_option("--birth-threshold", args->birth_threshold,
                  "relative hidden-state divergence |h_gen - h_train| / |h_train| at which the token x layer "
                  "heatmap marks a token's mismatch as born")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_flag("-q,--quiet", args->quiet, "print nothing on success");
  registry.add(sub, [args] { return run_report(*args); });
}

}  // namespace rlp::cli
