// One prepared fp8 form for TE's and NeMo RL's refit (weights.hpp refit_form_is_shareable): the two
// quantizers, each run on its own, give the same codes and scales wherever the check says so, and
// differ where it refuses; a replay that shares the form gives the bits of one that does not.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "rlparity/model/checkpoint.hpp"
#include "rlparity/model/checkpoint_writer.hpp"
#include "rlparity/model/weights.hpp"
#include "rlparity/replay/recipe.hpp"
#include "rlparity/replay/replay.hpp"
#include "rlparity/replay/replay_plan.hpp"
#include "unit/scratch_test_util.hpp"

namespace rlp {
namespace {

class RefitFormSharing : public rlp_test::ScratchDirTest {
 protected:
  // Every linear whole 128x128 blocks: q 256 x 256, k/v 128 x 256, MLP 384 x 256.
  std::string make(const std::string& name, int hidden = 256) {
    RandomCheckpointOptions o;
    o.arch = "llama";
    o.hidden = hidden;
    o.intermediate = 384;
    o.layers = 2;
    o.heads = 4;
    o.kv_heads = 2;
    o.head_dim = 64;
    o.vocab = 320;
    o.seed = 3;
    o.out = (dir_ / name).string();
    write_random_checkpoint(o);
    return o.out;
  }
  // Rewrites the block rows [0, 128) x cols [0, 128) of layer 0's up_proj (float32 checkpoint) with
  // value(r, c).
  template <class Value>
  void set_block(const std::string& dir, const Value& value) {
    const std::string file = dir + "/model.safetensors";
    std::vector<TensorData> tensors;
    {
      const Checkpoint ck = Checkpoint::open(dir);
      for (const auto& [name, v] : ck.tensors()) {
        TensorData d{name, v.dtype, v.shape, std::vector<uint8_t>(v.data, v.data + v.nbytes)};
        if (name == "model.layers.0.mlp.up_proj.weight") {
          EXPECT_EQ(v.dtype, DType::fp32);
          for (int r = 0; r < 128; ++r)
            for (int c = 0; c < 128; ++c) {
              const float x = value(r, c);
              std::memcpy(d.bytes.data() + (static_cast<std::size_t>(r) * v.shape[1] + c) * 4, &x, 4);
            }
        }
        tensors.push_back(std::move(d));
      }
    }
    write_safetensors(file, tensors);
  }
};

// fp8-e2e's two sides: the generation refit (NeMo RL's) and the trainer's (TE's).
std::pair<PathStyle, PathStyle> refit_styles() {
  const Recipe r = make_recipe("fp8-e2e", {});
  EXPECT_EQ(r.gen.weight_quant, num::ScaleConvention::nemo_refit);
  EXPECT_EQ(r.train.weight_quant, num::ScaleConvention::te);
  return {r.gen, r.train};
}

// Compares every fp8 linear of two forms: the number of linears whose codes or scales differ.
int differing_linears(const PreparedWeights& a, const PreparedWeights& b) {
  int differ = 0, fp8 = 0;
  for (std::size_t l = 0; l < a.layers.size(); ++l)
    for (int p = 0; p < kNumProj; ++p) {
      const PreparedLinear& x = a.layers[l].proj[p];
      const PreparedLinear& y = b.layers[l].proj[p];
      EXPECT_TRUE(x.fp8 && y.fp8);
      ++fp8;
      if (x.wq.codes != y.wq.codes ||
          std::memcmp(x.wq.scale_inv.data(), y.wq.scale_inv.data(), x.wq.scale_inv.size() * 4) != 0)
        ++differ;
    }
  EXPECT_EQ(fp8, 2 * kNumProj);
  return differ;
}

TEST_F(RefitFormSharing, WholeFiniteBlocksGiveTheSameCodesAndScales) {
  const std::string dir = make("whole");
  // An all-zero block (scale 1 under both) beside the random ones.
  set_block(dir, [](int, int) { return 0.0f; });
  const Checkpoint ck = Checkpoint::open(dir);
  const auto [gen, train] = refit_styles();
  const PreparedWeights nemo = prepare_weights(ck, gen), te = prepare_weights(ck, train);
  EXPECT_EQ(nemo.layers[0][Proj::up].wq.scale_inv[0], 1.0f);
  EXPECT_EQ(differing_linears(nemo, te), 0);
  EXPECT_TRUE(refit_form_is_shareable(nemo, ck));
  EXPECT_TRUE(refit_form_is_shareable(te, ck));
}

// amax 1e-37 < 448/FLT_MAX: TE substitutes FLT_MAX for the overflowing scale, NeMo RL keeps inf
// (its codes saturate to 448 and its scale_inv is 0).
TEST_F(RefitFormSharing, ABlockWithATinyAmaxKeepsTheFormsApart) {
  const std::string dir = make("tiny");
  set_block(dir, [](int r, int c) { return ((r + c) % 2 ? 1e-37f : -3e-38f); });
  const Checkpoint ck = Checkpoint::open(dir);
  const auto [gen, train] = refit_styles();
  const PreparedWeights nemo = prepare_weights(ck, gen), te = prepare_weights(ck, train);
  EXPECT_EQ(nemo.layers[0][Proj::up].wq.scale_inv[0], 0.0f);
  EXPECT_EQ(te.layers[0][Proj::up].wq.scale_inv[0], 1.0f / std::numeric_limits<float>::max());
  EXPECT_EQ(nemo.layers[0][Proj::up].wq.codes[1], 0x7E);  // 448
  EXPECT_EQ(differing_linears(nemo, te), 1);
  EXPECT_FALSE(refit_form_is_shareable(nemo, ck));
  EXPECT_FALSE(refit_form_is_shareable(te, ck));
}

// A partial edge block: NeMo RL pads it with the weight's last element, TE masks it.
TEST_F(RefitFormSharing, PartialBlocksAreNotShared) {
  const std::string dir = make("partial", 192);
  const Checkpoint ck = Checkpoint::open(dir);
  const auto [gen, train] = refit_styles();
  EXPECT_FALSE(refit_form_is_shareable(prepare_weights(ck, gen), ck));
  EXPECT_FALSE(refit_form_is_shareable(prepare_weights(ck, train), ck));
}

TEST_F(RefitFormSharing, OnlyTeAndNemoRefitWithoutPow2ScalesAreGrouped) {
  const auto [gen, train] = refit_styles();
  EXPECT_NE(weights_key(gen), weights_key(train));
  EXPECT_EQ(refit_group_key(gen), refit_group_key(train));
  for (auto other : {num::ScaleConvention::vllm, num::ScaleConvention::deepgemm}) {
    PathStyle s = train;
    s.weight_quant = other;
    EXPECT_NE(refit_group_key(s), refit_group_key(gen));
  }
  PathStyle pow2 = train, pow2_gen = gen;
  pow2.pow2_scales = pow2_gen.pow2_scales = true;
  EXPECT_NE(refit_group_key(pow2), refit_group_key(pow2_gen));
  PathStyle bf16 = train;
  bf16.fp8_linear = false;
  EXPECT_EQ(refit_group_key(bf16), weights_key(bf16));
  // In the default plan the trainer's fp8 form is in the group of the generation side's.
  ModelSpec spec = Checkpoint::open(make("plan")).spec();
  ReplayOptions o;
  o.recipes = {"bf16", "fp8-gen", "fp8-e2e"};
  const ReplayPlan p = make_replay_plan(spec, o);
  EXPECT_EQ(p.form_group[p.recipe_forms[2].train], p.recipe_forms[1].gen);
  EXPECT_EQ(p.form_group[p.recipe_forms[0].gen], p.recipe_forms[0].gen);
  o.recipe.pow2_scales = true;
  const ReplayPlan q = make_replay_plan(spec, o);
  EXPECT_EQ(q.form_group[q.recipe_forms[2].train], q.recipe_forms[2].train);
}

// fp8-e2e's training log-probs when its form is shared with (or, for the tiny block, refused by) the
// generation side's, against a run whose generation side reads vLLM-convention weights, so that the
// trainer's form is prepared on its own.
TEST_F(RefitFormSharing, AReplayGivesTheBitsOfUnsharedForms) {
  for (const bool tiny : {false, true}) {
    const std::string dir = make(tiny ? "replay_tiny" : "replay");
    if (tiny) set_block(dir, [](int r, int c) { return ((r + c) % 2 ? 1e-37f : -3e-38f); });
    const Checkpoint ck = Checkpoint::open(dir);
    std::vector<InputSequence> in(2);
    in[0] = {"a", {1, 17, 250, 3, 99}, {12, 301, 5, 44, 7, 200}, true, {}, 1, {}};
    in[1] = {"b", {5, 9, 300}, {13, 88, 9, 150, 2, 77, 310, 61}, true, {}, 2, {}};
    ReplayOptions o;
    o.recipes = {"fp8-e2e"};
    o.oracle = false;
    o.threads = 2;
    std::vector<InputSequence> in1 = in, in2 = in;
    const RunData shared = run_replay(ck, in1, o);
    o.recipe.gen_knobs = {{"weight-quant", "vllm"}};
    const RunData apart = run_replay(ck, in2, o);
    EXPECT_EQ(shared.recipes[0].tokens.at("logp_train"), apart.recipes[0].tokens.at("logp_train")) << tiny;
    const auto& res = shared.extra.at("resources");
    EXPECT_EQ(res.at("weight_forms_prepared"), tiny ? 2 : 1);
    EXPECT_EQ(res.at("weight_forms_shared"), tiny ? 0 : 1);
    EXPECT_EQ(apart.extra.at("resources").at("weight_forms_prepared"), 2);  // vLLM's and TE's
    EXPECT_EQ(apart.extra.at("resources").at("weight_forms_shared"), 0);
  }
}

}  // namespace
}  // namespace rlp
