// The replay plan: what a replay run will do, resolved once from the user's options before any
// work. Recipes, both paths' styles, the distinct weight forms they read, the sampler, the fp8 KV
// scale source and the attribution runs are decided here, and every error in the options is thrown
// here (InputError); run_replay, the memory estimate and attribution read the plan and never
// resolve a recipe name again.
#pragma once
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rlparity/metrics/statistics.hpp"
#include "rlparity/model/model_spec.hpp"
#include "rlparity/replay/path_runner.hpp"
#include "rlparity/replay/recipe.hpp"

namespace rlp {

enum class KvScaleMethod { nemo, vllm };

// Routing replay on a MoE checkpoint (--routing-replay): the training path takes the generation
// path's expert ids at every position (ids, as R2/R3 and Megatron's router replay do), or its ids
// and its routing weights (ids_weights, prime-rl's "ids+weights").
enum class RoutingReplayMode { off, ids, ids_weights };
// "off" | "ids" | "ids+weights", as the CLI and the run file spell them.
std::string routing_replay_name(RoutingReplayMode mode);
RoutingReplayMode parse_routing_replay(const std::string& text);  // InputError for another word

// What the user asked a replay to do (the CLI's options, or a test's).
struct ReplayOptions {
  std::vector<std::string> recipes{"bf16", "fp8-gen", "fp8-e2e"};
  RecipeOptions recipe;
  // Sampling of responses for inputs that have none: once, from this recipe's generation path.
  std::string sample_recipe = "bf16";
  int max_new_tokens = 32;
  double temperature = 1.0;
  uint64_t seed = 0;
  // fp8 KV-cache scales: recalibrated on the replayed checkpoint, or taken from another (stale).
  KvScaleMethod kv_scale_method = KvScaleMethod::nemo;
  std::string kv_scales_stale_dir;  // empty: recalibrated
  StatsOptions stats;               // --is-cap, --ppo-eps, --icepop-bounds
  bool oracle = true;
  RoutingReplayMode routing_replay = RoutingReplayMode::off;
  // Worker threads (0: all cores); unset: the process's setting (set_thread_count). Results do
  // not depend on it.
  std::optional<int> threads;
  // Backend of the generation and training paths; null = the CPU emulator. Sampling, KV-scale
  // calibration and the oracle run on the CPU whatever the backend.
  std::shared_ptr<const ReplayBackend> backend;
  // The generation and training paths run on the CPU emulation (no backend runner), whose LM heads
  // are deferred to the metrics (run_path_group); a backend's paths keep their log-prob rows.
  bool cpu_paths() const { return !(backend && backend->make_runner); }
  // How the CPU generation paths evaluate the decode of the given responses: layer by layer (the
  // default) or token by token, the reference it reproduces bit for bit (path_runner.hpp). Not a
  // CLI option: tests and bench_replay compare the two.
  DecodeEval decode_eval = DecodeEval::layerwise;
};

// Replay attribution (attribution.hpp): extra replays that tell where the divergence comes from.
struct AttributionOptions {
  bool layers = false;
  bool knobs = false;
  bool kv_scales = false;  // needs ReplayOptions::kv_scales_stale_dir
  bool routing = false;    // every recipe with routing replay off, ids and ids+weights (MoE checkpoints)
  // Recipe attributed by layers/knobs; empty: the first of ReplayOptions::recipes whose generation
  // side runs fp8 linears, else "fp8-gen".
  std::string recipe;
  int max_edge = 2;  // F and K of the bf16-layer search range over 0..max_edge
};

struct AttributionPlan {
  bool layers = false, knobs = false, kv_scales = false, routing = false;
  Recipe recipe;                        // attributed by layers/knobs
  std::vector<std::string> kv_recipes;  // replayed with recalibrated and stale scales
  int max_edge = 2;
  bool any() const { return layers || knobs || kv_scales || routing; }
};

struct ReplayPlan {
  ModelSpec spec;
  ReplayOptions options;  // as given; the fields below are resolved from it
  int threads = 0;        // worker threads for this run (0: all cores)
  std::vector<Recipe> recipes;
  // Samples missing responses; its KV cache stays bf16 (the scales are calibrated on the replayed
  // tokens, which do not exist yet).
  Recipe sampler;
  // Every distinct form of prepared weights (weights_key), and which one each path reads.
  std::vector<PathStyle> weight_forms;
  struct PathForms {
    std::size_t gen = 0, train = 0;
  };
  std::vector<PathForms> recipe_forms;  // parallel to recipes
  std::size_t sampler_form = 0;
  // form_group[f]: the first form whose prepared weights may serve form f too (refit_group_key:
  // TE's and NeMo RL's refit agree on most checkpoints), f itself when none. run_replay shares them
  // when refit_form_is_shareable confirms it on the prepared data.
  std::vector<std::size_t> form_group;
  // The order run_replay runs the recipes' paths in (path_schedule). A recipe's kept outputs wait
  // until both its paths ran; a form is prepared before its first run and released after its last.
  struct PathRun {
    std::size_t recipe = 0;
    bool train = false;
    std::size_t form = 0;
  };
  std::vector<PathRun> schedule;
  bool needs_kv_scales = false;  // some recipe runs an fp8 KV cache
  AttributionPlan attribution;

  // "recalibrated" or "stale:DIR", as the run file records it.
  std::string kv_scales_source() const;
  // Whether blocks are one group each: every path of the schedule reads one form group, which then
  // stays prepared across blocks, and runs on the CPU emulation (a backend's runner uploads its
  // weights anew for every block). And the most sequences a replay group holds: kReplayGroup when
  // a path decodes (its steps run the group's rows as vectors), else `workers` (teacher-forced
  // sequences run one per worker, and smaller groups keep fewer rows).
  bool blocks_of_one_group() const;
  std::size_t group_cap(std::size_t workers) const;
};

// Resolves and checks the options for a model of shape `spec`. InputError for: no recipes, an
// unknown or repeated recipe name, --is-cap <= 1 (or another band of validate_stats_options), more bf16 edge
// layers than the model has, an unknown sample recipe, and attribution that cannot run (kv-scales without
// stale scales, layers on a recipe without fp8 generation, routing replay or its attribution on a model
// without MoE layers or with a recipe whose training path decodes). With stale KV scales, KV-scale
// attribution of every recipe with an fp8 KV cache is always planned: it measures what skipping recalibration
// adds.
ReplayPlan make_replay_plan(const ModelSpec& spec, const ReplayOptions& options,
                            const AttributionOptions& attribution = {});

// Every recipe's generation path, then its training path, grouped by weight form (the forms in order
// of first use), so that a replay holds one prepared fp8 form at a time: an 8B model's fp8 form is
// 7 GB. Forms of one group (form_group) run next to each other, the group's first form first, so
// that a form the first one cannot serve is prepared after the first is released. With routing
// replay the order stays recipe by recipe (a training path reads its generation path's routing tape).
std::vector<ReplayPlan::PathRun> path_schedule(const std::vector<ReplayPlan::PathForms>& recipe_forms,
                                               const std::vector<std::size_t>& form_group,
                                               bool routing_replay);
// The most recipes that have one path run and wait for the other, at any point of the schedule: how
// many paths' outputs a block keeps besides the running one (1 for the default schedules).
std::size_t schedule_waiting_paths(const std::vector<ReplayPlan::PathRun>& schedule);

// --kv-scales: "recalibrated" -> "", "stale:DIR" -> DIR (the stale directory); InputError otherwise.
std::string parse_kv_scales_source(const std::string& text);

}  // namespace rlp
