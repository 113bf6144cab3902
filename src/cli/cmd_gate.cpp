// `rlparity gate RUN.h5`: checks a run's summary statistics against thresholds (TOML file and/or a
// preset) and/or a baseline run; exit 0 when every check passes, 1 on any violation, 2 on bad
// usage or input. Rules and formats: docs/gate.md.
#include <fmt/core.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/commands.hpp"
#include "rlparity/gate/gate.hpp"
#include "rlparity/gate/report_writers.hpp"
#include "rlparity/gate/thresholds.hpp"
#include "rlparity/io/run_file.hpp"
#include "rlparity/util/error.hpp"

namespace rlp::cli {
namespace {

struct GateArgs {
  std::string run, thresholds, preset, baseline, recipes, junit, markdown;
  double max_regression = 0.10;
  bool allow_different_inputs = false, json = false;
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

// Writes through a temporary file in the same directory, renamed on success.
void write_text_atomically(const std::string& path, const std::string& text, const char* what) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    RLP_THROW_INPUT("cannot write {} '{}': directory '{}' does not exist", what, path, dir.string());
  if (fs::is_directory(p, ec)) RLP_THROW_INPUT("cannot write {} '{}': it is a directory", what, path);
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) RLP_THROW_INPUT("cannot write {} '{}': {}", what, tmp, std::strerror(errno));
    out << text;
    out.flush();
    if (!out) {
      out.close();
      ::unlink(tmp.c_str());
      RLP_THROW_INPUT("cannot write {} '{}': write failed", what, tmp);
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    RLP_THROW_INPUT("cannot write {} '{}': {}", what, path, std::strerror(err));
  }
}

int run_gate(const GateArgs& a) {
  if (a.thresholds.empty() && a.preset.empty() && a.baseline.empty())
    RLP_THROW_INPUT(
        "nothing to gate on: give --thresholds FILE.toml, --preset nemo-rl|verl, and/or --baseline BASE.h5");
  const RunData run = read_run_file(a.run);
  gate::GateOptions opt;
  if (!a.preset.empty()) opt.thresholds = gate::load_preset(a.preset);
  if (!a.thresholds.empty()) {
    gate::Thresholds file = gate::load_thresholds_file(a.thresholds);
    opt.thresholds = opt.thresholds ? gate::merge_thresholds(*opt.thresholds, file) : file;
  }
  RunData base;
  if (!a.baseline.empty()) {
    base = read_run_file(a.baseline);
    opt.baseline = &base;
  }
  opt.max_regression = a.max_regression;
  opt.allow_different_inputs = a.allow_different_inputs;
  opt.recipes = split_list(a.recipes);
  const gate::GateResult res = gate::evaluate(run, opt);

  gate::ReportContext ctx;
  ctx.run_path = a.run;
  ctx.baseline_path = a.baseline;
  if (opt.thresholds) ctx.threshold_sources = opt.thresholds->sources;
  if (!a.junit.empty()) write_text_atomically(a.junit, gate::format_junit(res, ctx), "JUnit report");
  if (!a.markdown.empty())
    write_text_atomically(a.markdown, gate::format_markdown(res, ctx), "Markdown report");
  if (a.json) {
    fmt::print("{}\n", gate::to_json(res, ctx).dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
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
  sub->add_option("run", args->run, "run file (HDF5) written by replay or compare")->required();
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
  sub->add_option("--recipes", args->recipes, "comma-separated recipes to gate (default: all)");
  sub->add_option("--junit", args->junit, "write a JUnit XML report here");
  sub->add_option("--markdown", args->markdown, "write a Markdown summary here");
  sub->add_flag("--json", args->json, "print the result as JSON instead of the table");
  registry.add(sub, [args] { return run_gate(*args); });
}

}  // namespace rlp::cli
