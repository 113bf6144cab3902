// `rlparity sweep`: the cartesian grid of knob values (--grid KNOB=V1,V2,...), each point a replay
// of the same inputs; writes the sweep file (docs/sweep.md) and prints point x recipe x headline
// statistics. --keep-runs DIR keeps each point's full run file as DIR/point-<i>.h5.
#include <fmt/core.h>

#include <filesystem>

#include "cli/commands.hpp"
#include "cli/replay_args.hpp"
#include "rlparity/dist/job.hpp"
#include "rlparity/io/run_file.hpp"
#include "rlparity/io/sweep_file.hpp"
#include "rlparity/model/checkpoint.hpp"
#include "rlparity/replay/sweep.hpp"
#include "rlparity/util/atomic_file.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/fixtures.hpp"
#include "rlparity/util/interrupt.hpp"
#include "rlparity/util/parallel.hpp"

namespace rlp::cli {
namespace {
namespace fs = std::filesystem;

struct SweepArgs {
  ReplayArgs replay;
  std::vector<std::string> grid;
  std::string keep_runs;
};

std::string point_run_path(const std::string& dir, std::size_t point) {
  return (fs::path(dir) / fmt::format("point-{}.h5", point)).string();
}

int run(SweepArgs& s) {
  ReplayArgs& a = s.replay;
  const ReplayOptions base = replay_options(a);
  const std::vector<GridAxis> axes = parse_grid(s.grid, base);
  const std::size_t points = grid_points(axes);
  set_thread_count(a.threads);
  install_interrupt_handlers();
  check_output_path(a.out, "sweep file", a.force);
  if (!s.keep_runs.empty()) {
    std::error_code ec;
    if (!fs::is_directory(s.keep_runs, ec))
      RLP_THROW_INPUT("--keep-runs '{}': not an existing directory", s.keep_runs);
    for (std::size_t p = 0; p < points; ++p)
      check_output_path(point_run_path(s.keep_runs, p), "run file", a.force);
  }
  const std::string fixtures = (a.checkpoint.empty() || a.inputs.empty()) ? fixtures_dir() : std::string();
  if (a.checkpoint.empty()) a.checkpoint = fixtures + "/models/stories260K";
  if (a.inputs.empty()) a.inputs = fixtures + "/inputs/stories260K-prompts.jsonl";
  CheckpointOptions co;
  co.allow_nonfinite = a.allow_nonfinite;
  const Checkpoint ckpt = Checkpoint::open(a.checkpoint, co);
  std::vector<InputSequence> inputs = read_inputs_jsonl(
      a.inputs, ckpt.spec().vocab, ckpt.spec().max_positions, parse_response_format(a.inputs_format));

  // In a job of several ranks every point's sequences are sharded (replay.hpp); rank 0 alone prints
  // and writes.
  const bool root = Job::current().is_root();
  const SweepResult sweep = run_sweep(ckpt, inputs, base, axes, [&](std::size_t p, RunData& run) {
    if (!root) return;
    if (!a.quiet) fmt::print(stderr, "sweep: point {}/{} done\n", p + 1, points);
    if (s.keep_runs.empty()) return;
    run.command_line = a.command_line;
    run.extra["inputs"] = a.inputs;
    run.extra["sweep_point"] = p;
    write_run_file(point_run_path(s.keep_runs, p), run, a.force);
  });
  check_interrupted();
  if (!root) return kExitOk;
  write_sweep_file(a.out, sweep, a.command_line, ckpt.content_hash(), a.force);
  if (interrupted()) {
    std::error_code ec;
    fs::remove(a.out, ec);
    check_interrupted();
  }
  if (!a.quiet) {
    fmt::print("{}", format_sweep_table(sweep));
    fmt::print("wrote {} ({} points x {} recipes, {} response positions)\n", a.out, sweep.points(),
               sweep.recipes.size(), sweep.positions);
  }
  return kExitOk;
}

}  // namespace

void setup_sweep(CLI::App& app, CommandRegistry& registry) {
  auto args = std::make_shared<SweepArgs>();
  args->replay.out = "rlparity-sweep.h5";
  auto* sub = app.add_subcommand(
      "sweep",
      "Replay the same inputs over a grid of knob values (--grid gen-tp=1,2,4 --grid gen-batch=1,16)");
  add_replay_options(sub, args->replay, /*sweep=*/true);
  sub->add_option("--grid", args->grid,
                  "KNOB=V1,V2,...: a gen-<knob> or train-<knob> and its values; repeat for more axes "
                  "(points: the cartesian product, last axis fastest)")
      ->required()
      ->allow_extra_args(false);
  sub->add_option("--keep-runs", args->keep_runs, "keep each point's run file as DIR/point-<i>.h5");
  registry.add(
      sub,
      [args] {
        args->replay.command_line = invocation();
        return run(*args);
      },
      InJob::shares_work);
}

}  // namespace rlp::cli
