// `rlparity replay`: replays inputs through each recipe's generation and training paths and the
// float64 oracle, writes the run file (HDF5 schema v1) and prints the per-recipe summary.
#include <fmt/core.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "cli/commands.hpp"
#include "cli/replay_args.hpp"
#include "cli/shared_options.hpp"
#include "rlparity/dist/job.hpp"
#include "rlparity/io/run_file.hpp"
#include "rlparity/metrics/summary_table.hpp"
#include "rlparity/model/checkpoint.hpp"
#include "rlparity/replay/attribution.hpp"
#include "rlparity/replay/memory_estimate.hpp"
#include "rlparity/replay/replay.hpp"
#include "rlparity/replay/replay_plan.hpp"
#include "rlparity/util/atomic_file.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/fixtures.hpp"
#include "rlparity/util/interrupt.hpp"
#include "rlparity/util/parallel.hpp"
#include "rlparity/util/strings.hpp"

#ifdef RLPARITY_HAVE_CUDA
#include "cuda_backend.hpp"
#endif

namespace rlp::cli {
namespace {
namespace fs = std::filesystem;

class ProgressBar {
 public:
  explicit ProgressBar(bool enabled) : enabled_(enabled), start_(std::chrono::steady_clock::now()) {}
  void update(int64_t done, int64_t total) {
    if (!enabled_) return;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double rate = secs > 0 ? static_cast<double>(done) / secs : 0.0;
    const double eta = rate > 0 ? static_cast<double>(total - done) / rate : 0.0;
    const int width = 30;
    const int filled = total > 0 ? static_cast<int>(width * done / total) : width;
    fmt::print(stderr, "\r[{:<{}}] {}/{} tokens  {:.0f} tok/s  ETA {:.0f}s ",
               std::string(static_cast<std::size_t>(filled), '#'), width, done, total, rate, eta);
    if (done >= total) fmt::print(stderr, "\n");
  }

 private:
  bool enabled_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

// The backend of the generation and training paths; null = the CPU emulator. Checked before any
// work: no usable GPU is one clear error (exit 2).
std::shared_ptr<const ReplayBackend> select_backend(const std::string& name, const std::string& cuda_gemm) {
  if (cuda_gemm != "cublaslt" && cuda_gemm != "exact")
    RLP_THROW_INPUT("--cuda-gemm {}: expected cublaslt or exact", cuda_gemm);
  if (name == "cpu") return nullptr;
  if (name != "cuda") RLP_THROW_INPUT("--backend {}: expected cpu or cuda", name);
#ifdef RLPARITY_HAVE_CUDA
  try {
    auto backend = cuda::make_replay_backend(cuda_gemm);
    if (const Job& job = Job::current(); job.distributed())
      fmt::print(stderr, "rlparity: rank {} of {} (rank {} on its node): CUDA device {} ({})\n", job.rank(),
                 job.size(), job.local_rank(), backend->info.value("cuda_device", 0),
                 backend->info.value("cuda_device_name", std::string("?")));
    return backend;
  } catch (const Error& e) {
    RLP_THROW_INPUT("--backend cuda: {}", e.what());
  }
#else
  RLP_THROW_INPUT(
      "--backend cuda: this build has no CUDA backend (the CUDA toolkit was not found at build time)");
#endif
}

// The replay's options as the user gave them (parsed here; the policy is in make_replay_plan).
ReplayOptions replay_options(ReplayArgs& a) {
  ReplayOptions opt = a.opt;
  opt.backend = select_backend(a.backend, a.cuda_gemm);
  opt.threads = a.threads;
  opt.recipes = split_list(a.recipes);
  opt.kv_scales_stale_dir = parse_kv_scales_source(a.kv_scales);
  opt.kv_scale_method = a.kv_scale_method == "vllm" ? KvScaleMethod::vllm : KvScaleMethod::nemo;
  opt.oracle = !a.no_oracle;
  opt.routing_replay = parse_routing_replay(a.routing_replay);
  const auto& knobs = knob_table();
  for (std::size_t i = 0; i < knobs.size(); ++i) {
    if (!a.gen_knob_values[i].empty()) opt.recipe.gen_knobs.emplace_back(knobs[i].name, a.gen_knob_values[i]);
    if (!a.train_knob_values[i].empty())
      opt.recipe.train_knobs.emplace_back(knobs[i].name, a.train_knob_values[i]);
  }
  return opt;
}

namespace {

AttributionOptions attribution_options(const ReplayArgs& a) {
  AttributionOptions attr;
  attr.recipe = a.attribute_recipe;
  for (const auto& what : split_list(a.attribute)) {
    if (what == "layers")
      attr.layers = true;
    else if (what == "knobs")
      attr.knobs = true;
    else if (what == "kv-scales")
      attr.kv_scales = true;
    else if (what == "routing")
      attr.routing = true;
    else
      RLP_THROW_INPUT("--attribute: expected layers, knobs, kv-scales or routing, got '{}'", what);
  }
  return attr;
}

int run(ReplayArgs& a) {
  const ReplayOptions opt = replay_options(a);
  set_thread_count(a.threads);  // for the checkpoint's hashing too; the replay takes it from the plan
  install_interrupt_handlers();
  check_output_path(a.out, "run file", a.force);
  const uint64_t memory_limit = a.max_memory.empty() ? 0 : parse_memory_size(a.max_memory);
  const AttributionOptions attr = attribution_options(a);
  const std::string fixtures = (a.checkpoint.empty() || a.inputs.empty()) ? fixtures_dir() : std::string();
  if (a.checkpoint.empty()) a.checkpoint = fixtures + "/models/stories260K";
  if (a.inputs.empty()) a.inputs = fixtures + "/inputs/stories260K-prompts.jsonl";

  CheckpointOptions co;
  co.allow_nonfinite = a.allow_nonfinite;
  const Checkpoint ckpt = Checkpoint::open(a.checkpoint, co);
  if (!ckpt.unused_tensors().empty()) {
    std::string names;
    for (const auto& n : ckpt.unused_tensors()) names += " " + n;
    fmt::print(stderr, "rlparity: note: {} tensor(s) in {} are not used by {}:{}\n",
               ckpt.unused_tensors().size(), a.checkpoint, ckpt.spec().arch_name, names);
  }
  std::vector<InputSequence> inputs = read_inputs_jsonl(
      a.inputs, ckpt.spec().vocab, ckpt.spec().max_positions, parse_response_format(a.inputs_format));
  const ReplayPlan plan = make_replay_plan(ckpt.spec(), opt, attr);
  if (memory_limit != 0) {
    MemoryEstimate estimate = estimate_replay_memory(plan, inputs, checkpoint_storage(ckpt));
    estimate.ranks_on_node = Job::current().local_size();
    check_memory_limit(estimate, memory_limit, a.max_memory);
  }

  // In a job of several ranks, each replays its shard and every rank holds the gathered results;
  // rank 0 alone shows the job's progress, prints and writes the run file.
  const bool root = Job::current().is_root();
  ProgressBar bar(root && !a.quiet && (a.progress || isatty(STDERR_FILENO)));
  RunData run = run_replay(ckpt, inputs, plan, [&](int64_t d, int64_t t) { bar.update(d, t); });
  run.command_line = a.command_line;
  run.extra["inputs"] = a.inputs;
  if (plan.attribution.any()) {
    const bool show = root && !a.quiet;
    run_attribution(ckpt, inputs, plan, run, [show](const std::string& line) {
      if (show) fmt::print(stderr, "{}\n", line);
    });
  }
  check_interrupted();
  if (!root) return kExitOk;
  write_run_file(a.out, run, a.force);
  if (interrupted()) {
    // The signal came during the write: do not leave a file behind that looks like a finished run.
    std::error_code ec;
    fs::remove(a.out, ec);
    check_interrupted();
  }
  if (!a.quiet) {
    fmt::print("{}", format_summary_table(run.recipes));
    if (const std::string routing = format_routing_table(run.recipes); !routing.empty())
      fmt::print("\n{}", routing);
    if (const std::string engine = format_engine_table(run.recipes); !engine.empty())
      fmt::print("\n{}", engine);
    if (!run.attribution.empty()) fmt::print("{}", format_attribution(run));
    fmt::print("wrote {} ({} sequences, {} response tokens, {} recipes)\n", a.out, run.num_sequences(),
               run.recipes.empty() ? 0 : run.recipes[0].tokens.at("logp_gen").size(), run.recipes.size());
  }
  return kExitOk;
}

}  // namespace

void add_replay_options(CLI::App* sub, ReplayArgs& a, bool sweep) {
  sub->add_option("--checkpoint", a.checkpoint,
                  "Hugging Face checkpoint directory (default: bundled stories260K)");
  sub->add_option("--inputs", a.inputs,
                  "JSONL inputs: {\"id\", \"prompt\": [ids], \"response\": [ids]?, \"logprobs\": [..]?}, or "
                  "vLLM/SGLang responses (docs/compare.md)");
  add_inputs_format_option(sub, a.inputs_format);
  sub->add_option("--recipes", a.recipes, "comma-separated: bf16, fp8-gen, fp8-e2e, fp8-e2e-kv, fp16")
      ->capture_default_str();
  sub->add_option("--out,-o", a.out, sweep ? "output HDF5 sweep file" : "output HDF5 run file")
      ->capture_default_str();
  sub->add_flag("--force", a.force, "overwrite an existing output file");
  sub->add_option("--threads", a.threads, "worker threads (0 = all cores); results do not depend on it");
  sub->add_option("--seed", a.opt.seed, "seed for sampled responses")->capture_default_str();
  sub->add_option("--sample-recipe", a.opt.sample_recipe,
                  "recipe whose generation path samples missing responses")
      ->capture_default_str();
  sub->add_option("--max-new-tokens", a.opt.max_new_tokens, "tokens sampled per missing response")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--temperature", a.opt.temperature, "sampling temperature (0 = greedy)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 100.0));
  sub->add_option("--bf16-first-layers", a.opt.recipe.bf16_first_layers,
                  "keep the first N decoder layers in bf16 on fp8 paths")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--bf16-last-layers", a.opt.recipe.bf16_last_layers,
                  "keep the last N decoder layers in bf16 on fp8 paths")
      ->check(CLI::NonNegativeNumber);
  sub->add_flag("--pow2-scales", a.opt.recipe.pow2_scales, "power-of-2 fp8 scales on fp8 paths");
  sub->add_option("--kv-scales", a.kv_scales,
                  "fp8 KV-cache scales: recalibrated, or stale:DIR (calibrated on an earlier checkpoint)")
      ->capture_default_str();
  sub->add_option("--kv-scale-method", a.kv_scale_method,
                  "nemo (p99.9 amax x 1.05 / 448) or vllm (amax/200, amax/100)")
      ->check(CLI::IsMember({"nemo", "vllm"}))
      ->capture_default_str();
  sub->add_option("--routing-replay", a.routing_replay,
                  "MoE checkpoints: off, ids (the training path takes the generation path's expert ids at "
                  "every position, weighted by its own router) or ids+weights (its ids and routing weights)")
      ->check(CLI::IsMember({"off", "ids", "ids+weights"}))
      ->capture_default_str();
  add_stats_options(sub, a.opt.stats);
  sub->add_flag("--no-oracle", a.no_oracle, "skip the float64 oracle");
  if (!sweep) {
    sub->add_option(
        "--attribute", a.attribute,
        "comma-separated: layers (per-layer fp8 divergence + measured --bf16-first/last-layers "
        "recommendation), knobs (per-knob divergence), kv-scales (stale vs recalibrated; automatic with "
        "--kv-scales stale:DIR), routing (MoE: every recipe with routing replay off, ids, ids+weights)");
    sub->add_option(
        "--attribute-recipe", a.attribute_recipe,
        "recipe that layers/knobs attribute (default: the first of --recipes with fp8 generation, "
        "else fp8-gen)");
    sub->add_option(
        "--max-memory", a.max_memory,
        "refuse to start when the estimated peak memory exceeds SIZE (e.g. 8G, 512M); the estimate is "
        "conservative and printed when refused (docs/robustness.md)");
  }
  sub->add_flag("--allow-nonfinite", a.allow_nonfinite, "accept NaN/inf in weights");
  sub->add_option("--backend", a.backend, "cpu (default) or cuda")->capture_default_str();
  sub->add_option(
         "--cuda-gemm", a.cuda_gemm,
         "with --backend cuda: cublaslt (the library's own accumulation order, as the engines run it) or "
         "exact (the emulator's stated order in CUDA kernels: the same bits as --backend cpu; "
         "docs/cuda-backend.md)")
      ->capture_default_str();
  sub->add_flag("--quiet,-q", a.quiet, "no progress bar or summary");
  if (!sweep)
    sub->add_flag("--progress", a.progress,
                  "show the progress bar even when stderr is not a terminal (as under mpirun or srun, "
                  "whose ranks write to pipes: rank 0 shows the whole job's)");
  const auto& knobs = knob_table();
  a.gen_knob_values.resize(knobs.size());
  a.train_knob_values.resize(knobs.size());
  for (std::size_t i = 0; i < knobs.size(); ++i) {
    sub->add_option("--gen-" + knobs[i].name, a.gen_knob_values[i],
                    "generation path: " + knobs[i].help + " (" + knobs[i].values + ")")
        ->group("Generation-path knobs");
    sub->add_option("--train-" + knobs[i].name, a.train_knob_values[i],
                    "training path: " + knobs[i].help + " (" + knobs[i].values + ")")
        ->group("Training-path knobs");
  }
}

void setup_replay(CLI::App& app, CommandRegistry& registry) {
  auto args = std::make_shared<ReplayArgs>();
  auto* sub =
      app.add_subcommand("replay", "Replay inputs through generation- and training-style kernel paths");
  add_replay_options(sub, *args, /*sweep=*/false);
  registry.add(
      sub,
      [args] {
        args->command_line = invocation();
        return run(*args);
      },
      InJob::shares_work);
}

}  // namespace rlp::cli
