#include "rlparity/replay/replay_plan.hpp"

#include <algorithm>
#include <map>
#include <utility>

#include "rlparity/model/weights.hpp"
#include "rlparity/replay/replay.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/parallel.hpp"

namespace rlp {
namespace {

// The index of `style`'s weight form in `forms`, added when new: paths whose styles have equal
// weights_key read the same prepared weights.
std::size_t form_of(const PathStyle& style, std::vector<PathStyle>& forms, std::vector<std::string>& keys) {
  const std::string key = weights_key(style);
  const auto it = std::find(keys.begin(), keys.end(), key);
  if (it != keys.end()) return static_cast<std::size_t>(it - keys.begin());
  keys.push_back(key);
  forms.push_back(style);
  return forms.size() - 1;
}

AttributionPlan plan_attribution(const ReplayPlan& plan, const AttributionOptions& a) {
  const ReplayOptions& o = plan.options;
  AttributionPlan p;
  p.layers = a.layers;
  p.knobs = a.knobs;
  p.kv_scales = a.kv_scales;
  p.routing = a.routing;
  if (p.routing && plan.spec.moe_layer_count() == 0)
    RLP_THROW_INPUT(
        "--attribute routing: the checkpoint has no MoE layers (routing replay acts on a "
        "mixture-of-experts model's routers)");
  p.max_edge = a.max_edge;
  if (a.max_edge < 0) RLP_THROW_INPUT("attribution: max_edge {} must be >= 0", a.max_edge);
  if (p.kv_scales && o.kv_scales_stale_dir.empty())
    RLP_THROW_INPUT(
        "KV-scale attribution needs --kv-scales stale:DIR (the checkpoint the stale scales come from)");
  if (!o.kv_scales_stale_dir.empty() && plan.needs_kv_scales) p.kv_scales = true;
  for (const auto& r : plan.recipes)
    if (r.needs_kv_scales()) p.kv_recipes.push_back(r.name);
  if (p.kv_recipes.empty()) p.kv_recipes.push_back("fp8-e2e-kv");
  // The attributed recipe: the one named (unknown names fail before any work), else the first
  // replayed recipe with fp8 generation linears, else fp8-gen.
  std::string name = a.recipe;
  if (name.empty()) {
    const auto it = std::find_if(plan.recipes.begin(), plan.recipes.end(),
                                 [](const Recipe& r) { return r.gen.fp8_linear; });
    name = it != plan.recipes.end() ? it->name : "fp8-gen";
  }
  p.recipe = make_recipe(name, o.recipe);
  if (p.layers && !p.recipe.gen.fp8_linear)
    RLP_THROW_INPUT(
        "--attribute layers: recipe '{}' has no fp8 generation side (use fp8-gen, fp8-e2e or fp8-e2e-kv)",
        name);
  return p;
}

}  // namespace

ReplayPlan make_replay_plan(const ModelSpec& spec, const ReplayOptions& options,
                            const AttributionOptions& attribution) {
  ReplayPlan plan;
  plan.spec = spec;
  plan.options = options;
  plan.options.recipe.fp8_checkpoint = spec.fp8.enabled;
  plan.threads = options.threads.value_or(thread_count());
  if (options.recipes.empty()) RLP_THROW_INPUT("no recipes given");
  validate_stats_options(options.stats);
  for (const auto& name : options.recipes) {
    for (const auto& r : plan.recipes)
      if (r.name == name) RLP_THROW_INPUT("recipe '{}' given twice", name);
    plan.recipes.push_back(make_recipe(name, plan.options.recipe));
  }
  for (const auto& r : plan.recipes)
    for (const PathStyle* s : {&r.gen, &r.train}) check_tensor_parallel(*s, spec);
  for (const auto& r : plan.recipes)
    for (const PathStyle* s : {&r.gen, &r.train})
      if (s->bf16_first_layers + s->bf16_last_layers > spec.layers)
        RLP_THROW_INPUT("--bf16-first-layers + --bf16-last-layers = {} exceeds the model's {} layers",
                        s->bf16_first_layers + s->bf16_last_layers, spec.layers);
  if (options.routing_replay != RoutingReplayMode::off || attribution.routing) {
    const std::string what = attribution.routing && options.routing_replay == RoutingReplayMode::off
                                 ? std::string("--attribute routing")
                                 : "--routing-replay " + routing_replay_name(options.routing_replay);
    if (spec.moe_layer_count() == 0)
      RLP_THROW_INPUT(
          "{}: the checkpoint has no MoE layers (routing replay acts on a mixture-of-experts "
          "model's routers)",
          what);
    for (const auto& r : plan.recipes)
      if (r.train.mode != SequenceMode::teacher_forced)
        RLP_THROW_INPUT(
            "{}: recipe '{}' decodes on its training path; routing replay hands the training "
            "path the generation path's routing in one teacher-forced pass (set its mode to "
            "teacher-forced)",
            what, r.name);
  }
  plan.sampler = make_recipe(options.sample_recipe, plan.options.recipe);
  plan.sampler.gen.kv_cache = KvCacheDtype::bf16;

  check_tensor_parallel(plan.sampler.gen, spec);

  std::vector<std::string> keys;
  for (const auto& r : plan.recipes) {
    plan.recipe_forms.push_back(
        {form_of(r.gen, plan.weight_forms, keys), form_of(r.train, plan.weight_forms, keys)});
    plan.needs_kv_scales = plan.needs_kv_scales || r.needs_kv_scales();
  }
  plan.sampler_form = form_of(plan.sampler.gen, plan.weight_forms, keys);
  // A form's group: the first form with its refit group key.
  std::vector<std::string> group_keys;
  for (const PathStyle& form : plan.weight_forms) group_keys.push_back(refit_group_key(form));
  for (const std::string& key : group_keys)
    plan.form_group.push_back(
        static_cast<std::size_t>(std::find(group_keys.begin(), group_keys.end(), key) - group_keys.begin()));
  plan.schedule =
      path_schedule(plan.recipe_forms, plan.form_group, options.routing_replay != RoutingReplayMode::off);
  plan.attribution = plan_attribution(plan, attribution);
  // The MoE knobs act (and are recorded) only on MoE checkpoints.
  std::vector<Recipe*> all = {&plan.sampler, &plan.attribution.recipe};
  for (auto& r : plan.recipes) all.push_back(&r);
  for (Recipe* r : all)
    for (PathStyle* s : {&r->gen, &r->train}) s->moe_model = spec.num_experts > 0;
  return plan;
}

std::vector<ReplayPlan::PathRun> path_schedule(const std::vector<ReplayPlan::PathForms>& recipe_forms,
                                               const std::vector<std::size_t>& form_group,
                                               bool routing_replay) {
  std::vector<ReplayPlan::PathRun> runs;
  for (std::size_t r = 0; r < recipe_forms.size(); ++r) {
    runs.push_back({r, false, recipe_forms[r].gen});
    runs.push_back({r, true, recipe_forms[r].train});
  }
  if (routing_replay) return runs;
  std::vector<std::size_t> first_use;  // forms in order of first use
  for (const auto& run : runs)
    if (std::find(first_use.begin(), first_use.end(), run.form) == first_use.end())
      first_use.push_back(run.form);
  auto rank = [&](std::size_t form) {
    return std::find(first_use.begin(), first_use.end(), form) - first_use.begin();
  };
  std::stable_sort(runs.begin(), runs.end(), [&](const ReplayPlan::PathRun& a, const ReplayPlan::PathRun& b) {
    return std::pair{rank(form_group[a.form]), rank(a.form)} <
           std::pair{rank(form_group[b.form]), rank(b.form)};
  });
  return runs;
}

std::size_t schedule_waiting_paths(const std::vector<ReplayPlan::PathRun>& schedule) {
  std::map<std::size_t, int> ran;  // paths run per recipe
  std::size_t waiting = 0, most = 0;
  for (const auto& run : schedule) {
    most = std::max(most, waiting);  // while this path runs
    waiting = ++ran[run.recipe] == 1 ? waiting + 1 : waiting - 1;
  }
  return most;
}

bool ReplayPlan::blocks_of_one_group() const {
  return !options.backend && !schedule.empty() &&
         std::all_of(schedule.begin(), schedule.end(), [&](const PathRun& r) {
           return form_group[r.form] == form_group[schedule.front().form];
         });
}

std::size_t ReplayPlan::group_cap(std::size_t workers) const {
  const bool decodes = std::any_of(recipes.begin(), recipes.end(), [](const Recipe& r) {
    return r.gen.mode == SequenceMode::decode || r.train.mode == SequenceMode::decode;
  });
  return decodes ? kReplayGroup : std::max<std::size_t>(1, workers);
}

std::string ReplayPlan::kv_scales_source() const {
  return options.kv_scales_stale_dir.empty() ? "recalibrated" : "stale:" + options.kv_scales_stale_dir;
}

std::string routing_replay_name(RoutingReplayMode mode) {
  switch (mode) {
    case RoutingReplayMode::off: return "off";
    case RoutingReplayMode::ids: return "ids";
    case RoutingReplayMode::ids_weights: return "ids+weights";
  }
  return "?";
}

RoutingReplayMode parse_routing_replay(const std::string& text) {
  for (auto m : {RoutingReplayMode::off, RoutingReplayMode::ids, RoutingReplayMode::ids_weights})
    if (text == routing_replay_name(m)) return m;
  RLP_THROW_INPUT("--routing-replay: expected off, ids or ids+weights, got '{}'", text);
}

std::string parse_kv_scales_source(const std::string& text) {
  if (text.rfind("stale:", 0) == 0) return text.substr(6);
  if (text != "recalibrated")
    RLP_THROW_INPUT("--kv-scales: expected 'recalibrated' or 'stale:DIR', got '{}'", text);
  return {};
}

}  // namespace rlp
