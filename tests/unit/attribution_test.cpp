// Replay attribution: a generated checkpoint with one layer made hard to quantize (an outlier input
// channel) must rank that layer first; attribution is bit-identical across runs; knob attribution
// lists every knob the recipe's paths differ in; KV-scale attribution; HDF5 round trip.
#include "rlparity/replay/attribution.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "rlparity/io/run_file.hpp"
#include "rlparity/model/checkpoint_writer.hpp"
#include "rlparity/util/error.hpp"
#include "unit/outlier_checkpoint_test_util.hpp"

namespace rlp {
namespace {

namespace fs = std::filesystem;

class Attribution : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("rlp_attr_" + std::to_string(::getpid())));
    // fp8 e4m3 is a floating format: an outlier weight column only hurts its blocks once their
    // spread exceeds the format's range (448 / 2^-9); at 100x the other weights keep their relative
    // precision. And a large input column dominates the layer's output (and amplifies upstream
    // errors) unless the norm in front of it is correspondingly small, as in trained models whose
    // norm weights and projections compensate each other. So: a 10^6x column in layer 2's
    // q/k/v/gate/up, and that channel's RMSNorm weights divided by 10^6 (function unchanged
    // up to rounding, weights hard to quantize: the rest of the column's blocks flush to zero).
    RandomCheckpointOptions co = rlp_test::outlier_checkpoint_options((*dir_ / "raw").string(), 21, 1e6, 5);
    write_random_checkpoint(co);
    {
      const Checkpoint raw = Checkpoint::open(co.out);
      std::vector<TensorData> tensors;
      for (const auto& [name, t] : raw.tensors()) {
        std::vector<float> v(static_cast<std::size_t>(t.numel()));
        t.to_float(v.data());
        if (name == "model.layers.2.input_layernorm.weight" ||
            name == "model.layers.2.post_attention_layernorm.weight")
          v[5] = static_cast<float>(v[5] / co.outlier_scale);
        tensors.push_back(make_tensor(name, t.dtype, t.shape, v));
      }
      fs::create_directories(*dir_ / "ckpt");
      fs::copy_file(fs::path(co.out) / "config.json", *dir_ / "ckpt" / "config.json");
      write_safetensors((*dir_ / "ckpt" / "model.safetensors").string(), tensors);
    }
    co.outlier_layer = -1;  // an "earlier checkpoint" for stale KV scales: other weights
    co.seed = 22;
    co.out = (*dir_ / "earlier").string();
    write_random_checkpoint(co);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::vector<InputSequence> inputs() {
    std::vector<InputSequence> in(2);
    for (int s = 0; s < 2; ++s) {
      auto& q = in[static_cast<std::size_t>(s)];
      q.id = std::to_string(s);
      for (int i = 0; i < 6; ++i) q.prompt.push_back((i * 37 + s * 11 + 1) % 256);
      for (int i = 0; i < 10; ++i) q.response.push_back((i * 53 + s * 7 + 5) % 256);
      q.has_response = true;
    }
    return in;
  }
  static RunData attribute(const AttributionOptions& ao, ReplayOptions opt = {}) {
    const Checkpoint ckpt = Checkpoint::open((*dir_ / "ckpt").string());
    RunData run;
    run_attribution(ckpt, inputs(), opt, ao, run);
    return run;
  }
  static fs::path* dir_;
};
fs::path* Attribution::dir_ = nullptr;

TEST_F(Attribution, OutlierLayerRanksFirstAndRunsAreBitIdentical) {
  AttributionOptions ao;
  ao.layers = true;
  ao.knobs = true;
  ao.recipe = "fp8-gen";
  const RunData a = attribute(ao);
  const AttributionTable& layers = a.attribution.at("layers");
  ASSERT_EQ(layers.values.at("layer").size(), 4u);
  EXPECT_EQ(layers.info.at("ranking").at(0).get<int>(), 2) << format_attribution(a);
  EXPECT_EQ(layers.values.at("rank")[2], 1.0);
  // The outlier layer dominates: at least twice the next layer's excess divergence.
  const auto& x = layers.values.at("excess_mean_abs_log_ratio");
  for (int l : {0, 1, 3}) EXPECT_GT(x[2], 2.0 * x[static_cast<std::size_t>(l)]) << "layer " << l;

  // The recommendation keeps the outlier layer in bf16 and its measured divergence is recorded.
  const AttributionTable& cand = a.attribution.at("layer_candidates");
  const auto& rec = cand.info.at("recommended");
  const int F = rec.at("bf16_first_layers").get<int>(), K = rec.at("bf16_last_layers").get<int>();
  EXPECT_TRUE(2 < F || 2 >= 4 - K) << F << " " << K;
  EXPECT_LT(rec.at("mean_abs_log_ratio").get<double>(),
            cand.info.at("full_recipe").at("mean_abs_log_ratio").get<double>());

  const RunData b = attribute(ao);
  EXPECT_EQ(a.attribution, b.attribution);  // bit for bit, including the JSON info
}

TEST_F(Attribution, KnobsListEveryDifferingKnob) {
  AttributionOptions ao;
  ao.knobs = true;
  ao.recipe = "fp8-e2e";
  const RunData run = attribute(ao);
  const AttributionTable& t = run.attribution.at("knobs");
  const Recipe rc = make_recipe("fp8-e2e", RecipeOptions{});
  std::vector<std::string> want;
  // tp-reduce and logsoftmax differ between the default paths but act only with tp > 1, batch-pad
  // only where it pads the batch.
  for (const auto& k : knob_table())
    if (get_knob(rc.gen, k.name) != get_knob(rc.train, k.name) &&
        !(knob_inert(rc.gen, k.name) && knob_inert(rc.train, k.name)))
      want.push_back(k.name);
  EXPECT_FALSE(want.empty());
  EXPECT_EQ(t.labels.at("knob"), want);
  // batch-pad differs (vllm vs none) but pads nothing at batch 1: no row.
  EXPECT_NE(get_knob(rc.gen, "batch-pad"), get_knob(rc.train, "batch-pad"));
  EXPECT_EQ(std::count(want.begin(), want.end(), "batch-pad"), 0);
  EXPECT_EQ(t.info.at("aligned").at("mean_abs_log_ratio").get<double>(), 0.0);
  EXPECT_GT(t.info.at("all_knobs").at("mean_abs_log_ratio").get<double>(), 0.0);
  // At least the fp8 weight-scale convention matters alone in fp8 e2e.
  double best = 0;
  for (double v : t.values.at("mean_abs_log_ratio")) best = std::max(best, v);
  EXPECT_GT(best, 0.0);
}

TEST_F(Attribution, StaleKvScalesAndRunFileRoundTrip) {
  AttributionOptions ao;
  ao.kv_scales = true;
  ReplayOptions opt;
  opt.recipes = {"fp8-e2e-kv"};
  opt.kv_scales_stale_dir = (*dir_ / "earlier").string();
  const Checkpoint ckpt = Checkpoint::open((*dir_ / "ckpt").string());
  auto in = inputs();
  ReplayOptions main = opt;
  main.oracle = false;
  RunData run = run_replay(ckpt, in, main);
  run_attribution(ckpt, in, opt, ao, run);
  const AttributionTable& t = run.attribution.at("kv_scales");
  EXPECT_EQ(t.labels.at("recipe"), std::vector<std::string>{"fp8-e2e-kv"});
  EXPECT_NE(t.values.at("mean_abs_log_ratio_added")[0], 0.0);
  EXPECT_EQ(t.values.at("mean_abs_log_ratio_stale")[0], run.recipes[0].summary.at("mean_abs_log_ratio"));

  const std::string path = (*dir_ / "run.h5").string();
  write_run_file(path, run, true);
  const RunData back = read_run_file(path);
  EXPECT_EQ(back.attribution, run.attribution);

  ao.kv_scales = true;
  opt.kv_scales_stale_dir.clear();
  RunData none;
  EXPECT_THROW(run_attribution(ckpt, in, opt, ao, none), InputError);
}

TEST_F(Attribution, RejectsRecipeWithoutFp8Generation) {
  AttributionOptions ao;
  ao.layers = true;
  ao.recipe = "bf16";
  EXPECT_THROW(attribute(ao), InputError);
}

}  // namespace
}  // namespace rlp
