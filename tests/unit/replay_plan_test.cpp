// The replay plan: the options resolved once (recipes, weight forms, sampler, attribution) and
// every error in them thrown before any work.
#include "rlparity/replay/replay_plan.hpp"

#include <gtest/gtest.h>

#include <tuple>

#include "rlparity/replay/memory_estimate.hpp"
#include "unit/scratch_test_util.hpp"

namespace rlp {
namespace {

ModelSpec small_spec() {
  ModelSpec s;
  s.hidden = 64, s.intermediate = 128, s.layers = 4, s.heads = 4, s.kv_heads = 2, s.head_dim = 16;
  s.vocab = 256, s.max_positions = 512;
  return s;
}

class Plan : public rlp_test::ScratchDirTest {};

TEST_F(Plan, PathsReadingTheSameWeightsShareOneForm) {
  ReplayOptions o;
  o.recipes = {"bf16", "fp8-gen", "fp8-e2e"};
  const ReplayPlan p = make_replay_plan(small_spec(), o);
  ASSERT_EQ(p.recipes.size(), 3u);
  EXPECT_EQ(p.recipes[1].name, "fp8-gen");
  // bf16 weights (every bf16 path and the sampler), the generation side's fp8 form (shared by
  // fp8-gen and fp8-e2e) and the trainer's (its own weight-scale convention).
  EXPECT_EQ(p.weight_forms.size(), 3u);
  EXPECT_EQ(p.recipe_forms[0].gen, p.recipe_forms[0].train);
  EXPECT_EQ(p.recipe_forms[1].train, p.recipe_forms[0].gen);
  EXPECT_NE(p.recipe_forms[1].gen, p.recipe_forms[1].train);
  EXPECT_EQ(p.recipe_forms[2].gen, p.recipe_forms[1].gen);
  EXPECT_NE(p.recipe_forms[2].train, p.recipe_forms[2].gen);
  EXPECT_EQ(p.sampler_form, p.recipe_forms[0].gen);
  EXPECT_FALSE(p.needs_kv_scales);
  EXPECT_EQ(p.kv_scales_source(), "recalibrated");
  // Layers and knobs attribute the first recipe with fp8 generation.
  EXPECT_EQ(p.attribution.recipe.name, "fp8-gen");
  EXPECT_FALSE(p.attribution.any());
}

// The paths run grouped by weight form, forms in order of first use: one fp8 form is prepared at a
// time, and at most one recipe waits for its other path. Routing replay keeps recipe order.
TEST_F(Plan, TheScheduleRunsOneFormAtATime) {
  ReplayOptions o;
  o.recipes = {"bf16", "fp8-gen", "fp8-e2e"};
  const ReplayPlan p = make_replay_plan(small_spec(), o);
  const std::size_t act = p.recipe_forms[0].gen, vllm = p.recipe_forms[1].gen, te = p.recipe_forms[2].train;
  using Run = std::tuple<std::size_t, bool, std::size_t>;
  std::vector<Run> got;
  for (const auto& r : p.schedule) got.emplace_back(r.recipe, r.train, r.form);
  const std::vector<Run> want = {{0, false, act},  {0, true, act},   {1, true, act},
                                 {1, false, vllm}, {2, false, vllm}, {2, true, te}};
  EXPECT_EQ(got, want);
  EXPECT_EQ(schedule_waiting_paths(p.schedule), 1u);
  const auto natural = path_schedule(p.recipe_forms, p.form_group, /*routing_replay=*/true);
  ASSERT_EQ(natural.size(), 6u);
  for (std::size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(natural[i].recipe, i / 2);
    EXPECT_EQ(natural[i].train, i % 2 == 1);
  }
  // Recipes whose generation form comes first everywhere (two forms, each its own group): gen paths
  // of three recipes before any training path leaves three waiting.
  const std::vector<ReplayPlan::PathForms> forms = {{0, 1}, {0, 1}, {0, 1}};
  EXPECT_EQ(schedule_waiting_paths(path_schedule(forms, {0, 1}, false)), 3u);
}

TEST_F(Plan, TheSamplerKeepsABf16KvCache) {
  ReplayOptions o;
  o.recipes = {"fp8-e2e-kv"};
  o.sample_recipe = "fp8-e2e-kv";
  const ReplayPlan p = make_replay_plan(small_spec(), o);
  EXPECT_TRUE(p.needs_kv_scales);
  EXPECT_EQ(p.sampler.gen.kv_cache, KvCacheDtype::bf16);
  EXPECT_EQ(p.recipes[0].gen.kv_cache, KvCacheDtype::fp8);
  EXPECT_EQ(p.sampler_form, p.recipe_forms[0].gen);  // the KV cache does not change the weights
}

TEST_F(Plan, StaleScalesAlwaysPlanKvScaleAttribution) {
  ReplayOptions o;
  o.recipes = {"bf16", "fp8-e2e-kv"};
  o.kv_scales_stale_dir = parse_kv_scales_source("stale:/earlier");
  EXPECT_EQ(o.kv_scales_stale_dir, "/earlier");
  const ReplayPlan p = make_replay_plan(small_spec(), o);
  EXPECT_TRUE(p.attribution.kv_scales);
  EXPECT_EQ(p.attribution.kv_recipes, std::vector<std::string>{"fp8-e2e-kv"});
  EXPECT_EQ(p.kv_scales_source(), "stale:/earlier");
  // Without a recipe that uses the scales, nothing to attribute.
  o.recipes = {"bf16"};
  EXPECT_FALSE(make_replay_plan(small_spec(), o).attribution.any());
  EXPECT_EQ(parse_kv_scales_source("recalibrated"), "");
  EXPECT_NE(input_error([] { parse_kv_scales_source("stale"); }).find("'recalibrated' or 'stale:DIR'"),
            std::string::npos);
}

TEST_F(Plan, ErrorsInTheOptionsAreThrownNotSwallowed) {
  const ModelSpec s = small_spec();
  auto plan_error = [&](ReplayOptions o, AttributionOptions a = {}) {
    return input_error([&] { (void)make_replay_plan(s, o, a); });
  };
  ReplayOptions o;
  o.recipes = {"bf16", "fp4"};
  EXPECT_NE(plan_error(o).find("unknown recipe 'fp4'"), std::string::npos);
  o.recipes = {"bf16", "bf16"};
  EXPECT_NE(plan_error(o).find("given twice"), std::string::npos);
  o.recipes = {};
  EXPECT_NE(plan_error(o).find("no recipes"), std::string::npos);
  o.recipes = {"fp8-gen"};
  o.sample_recipe = "nope";
  EXPECT_NE(plan_error(o).find("'nope'"), std::string::npos);
  o.sample_recipe = "bf16";
  o.recipe.bf16_first_layers = 3;
  o.recipe.bf16_last_layers = 2;
  EXPECT_NE(plan_error(o).find("exceeds the model's 4 layers"), std::string::npos);
  o.recipe = {};
  o.stats.is_cap = 1.0;
  EXPECT_NE(plan_error(o).find("--is-cap"), std::string::npos);
  o.stats.is_cap = 2.0;
  AttributionOptions a;
  a.kv_scales = true;
  EXPECT_NE(plan_error(o, a).find("needs --kv-scales stale:DIR"), std::string::npos);
  a = {};
  a.layers = true;
  a.recipe = "bf16";
  EXPECT_NE(plan_error(o, a).find("no fp8 generation side"), std::string::npos);
  a.recipe = "fp9";
  EXPECT_NE(plan_error(o, a).find("unknown recipe 'fp9'"), std::string::npos);
  // The estimate reads the plan, so it sees the same errors: none swallowed there.
  o.recipes = {"bf16", "fp4"};
  EXPECT_THROW((void)estimate_replay_memory(make_replay_plan(s, o), {}), InputError);
}

TEST_F(Plan, MemoryLimitRefusesWithTheEstimate) {
  ReplayOptions o;
  o.threads = 1;
  const MemoryEstimate e = estimate_replay_memory(make_replay_plan(small_spec(), o), {});
  EXPECT_NO_THROW(check_memory_limit(e, 0, ""));
  EXPECT_NO_THROW(check_memory_limit(e, e.total, "exact"));
  const std::string msg = input_error([&] { check_memory_limit(e, e.total - 1, "tiny"); });
  EXPECT_NE(msg.find("exceeds --max-memory tiny"), std::string::npos) << msg;
  EXPECT_NE(msg.find("total"), std::string::npos) << msg;
}

}  // namespace
}  // namespace rlp
