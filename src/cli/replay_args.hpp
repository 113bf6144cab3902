// The replay options as the CLI binds them, shared by `replay` and `sweep` (which takes any replay
// option but the attribution and memory-limit ones, and adds --grid / --keep-runs).
#pragma once
#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "rlparity/replay/replay_plan.hpp"

namespace rlp::cli {

struct ReplayArgs {
  std::string checkpoint, inputs, inputs_format = "auto", recipes = "bf16,fp8-gen,fp8-e2e",
                                  out = "rlparity-replay.h5";
  std::string kv_scales = "recalibrated", kv_scale_method = "nemo", backend = "cpu", cuda_gemm = "cublaslt",
              routing_replay = "off";
  bool force = false, quiet = false, no_oracle = false, allow_nonfinite = false;
  bool progress = false;  // the progress bar even when stderr is not a terminal (mpirun's ranks)
  int threads = 0;
  ReplayOptions opt;
  std::vector<std::string> gen_knob_values, train_knob_values;  // parallel to knob_table()
  std::string attribute, attribute_recipe;                      // --attribute layers,knobs,kv-scales
  std::string max_memory;                                       // --max-memory SIZE (empty: no limit)
  std::string command_line;
};

// Binds the replay options to `a` (sweep: without --attribute, --attribute-recipe, --max-memory).
void add_replay_options(CLI::App* sub, ReplayArgs& a, bool sweep);
// The backend named by --backend / --cuda-gemm (null: CPU); InputError when unusable.
std::shared_ptr<const ReplayBackend> select_backend(const std::string& name, const std::string& cuda_gemm);
// The replay's options as the user gave them (the policy is in make_replay_plan).
ReplayOptions replay_options(ReplayArgs& a);

}  // namespace rlp::cli
