// `rlparity inspect`: per-tensor FP8 quantization diagnostics of a checkpoint (docs/inspect.md):
// the terminal table sorted by worst SNR, the per-layer recommendation, and optionally the same
// numbers in HDF5.
#include <fmt/core.h>

#include <chrono>

#include "cli/commands.hpp"
#include "rlparity/dist/job.hpp"
#include "rlparity/inspect/inspect.hpp"
#include "rlparity/model/checkpoint.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/fixtures.hpp"
#include "rlparity/util/parallel.hpp"

namespace rlp::cli {
namespace {

struct InspectArgs {
  std::string checkpoint, out;
  bool force = false, quiet = false, allow_nonfinite = false;
  int threads = 0;
  std::size_t rows = 40;
  InspectOptions opt;
};

int run_inspect(InspectArgs& a) {
  set_thread_count(a.threads);
  if (a.checkpoint.empty()) a.checkpoint = fixtures_dir() + "/models/stories260K";
  CheckpointOptions co;
  co.allow_nonfinite = a.allow_nonfinite;
  const Checkpoint ckpt = Checkpoint::open(a.checkpoint, co);
  const auto t0 = std::chrono::steady_clock::now();
  const InspectResult r = inspect_checkpoint(ckpt, a.opt);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!Job::current().is_root()) return kExitOk;  // a job's ranks share the tensors; rank 0 reports
  if (!a.out.empty()) write_inspect_file(a.out, r, invocation(), a.force);
  if (!a.quiet) {
    fmt::print("{}", format_inspect(r, a.rows));
    fmt::print("inspected {} tensors ({:.1f} MB read once, {} scale conventions) in {:.2f} s{}\n",
               r.tensors.size(), static_cast<double>(r.bytes_per_pass) / 1e6, inspect_conventions().size(),
               secs, a.out.empty() ? "" : "; wrote " + a.out);
  }
  return kExitOk;
}

}  // namespace

void setup_inspect(CLI::App& app, CommandRegistry& registry) {
  auto args = std::make_shared<InspectArgs>();
  auto* sub = app.add_subcommand("inspect", "Per-tensor FP8 quantization diagnostics of a checkpoint");
  sub->add_option("--checkpoint", args->checkpoint,
                  "Hugging Face checkpoint directory (default: bundled stories260K)");
  sub->add_option("--out,-o", args->out, "also write the numbers to this HDF5 file");
  sub->add_flag("--force", args->force, "overwrite an existing output file");
  sub->add_option("--rows", args->rows, "tensors shown in the table, worst first (0 = all)")
      ->capture_default_str();
  sub->add_option("--flag-margin-db", args->opt.flag_margin_db,
                  "flag layers whose worst SNR is this many dB below the median layer's")
      ->capture_default_str();
  sub->add_option("--flag-amax-spread", args->opt.flag_amax_spread,
                  "flag layers with a tensor whose block amax max/median exceeds this (outlier blocks)")
      ->capture_default_str();
  sub->add_option("--threads", args->threads, "worker threads (0 = all cores); results do not depend on it");
  sub->add_flag("--allow-nonfinite", args->allow_nonfinite, "accept NaN/inf in weights");
  sub->add_flag("--quiet,-q", args->quiet, "print nothing");
  registry.add(
      sub, [args] { return run_inspect(*args); }, InJob::shares_work);
}

}  // namespace rlp::cli
