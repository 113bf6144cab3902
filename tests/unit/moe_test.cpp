// Mixture of experts (issue 16: Qwen3-MoE, Qwen2-MoE, Mixtral): the routing rule against hand-worked
// values, the config and checkpoint validation, the float64 MoE block of each architecture against
// a naive re-implementation here that reads the tensors by their Hugging Face names, the combine
// rules where they must agree, fp8 block-scaled MoE checkpoints, a generated near-tie that a known
// precision change flips, and bit-identical results across thread counts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "report/sections.hpp"
#include "rlparity/inspect/inspect.hpp"
#include "rlparity/io/run_file.hpp"
#include "rlparity/model/checkpoint.hpp"
#include "rlparity/model/checkpoint_writer.hpp"
#include "rlparity/model/emulated_ops.hpp"
#include "rlparity/model/forward.hpp"
#include "rlparity/model/moe_routing.hpp"
#include "rlparity/model/oracle_ops.hpp"
#include "rlparity/model/weights.hpp"
#include "rlparity/numerics/formats.hpp"
#include "rlparity/replay/memory_estimate.hpp"
#include "rlparity/replay/recipe.hpp"
#include "rlparity/replay/replay.hpp"
#include "rlparity/util/parallel.hpp"
#include "unit/scratch_test_util.hpp"

namespace rlp {
namespace {

// ---- routing rule --------------------------------------------------------------------------------

TEST(MoeRouting, SoftmaxTopKTiesAndRenormalisationByHand) {
  // logits 1, 3, 3, 0: experts 1 and 2 tie for the top; k = 2 takes both, lower index first.
  const double logits[4] = {1.0, 3.0, 3.0, 0.0};
  double probs[4];
  moe_softmax(
      logits, 4, [](double x) { return std::exp(x); }, probs);
  const double z = std::exp(-2.0) + 2.0 + std::exp(-3.0);
  EXPECT_NEAR(probs[0], std::exp(-2.0) / z, 1e-15);
  EXPECT_NEAR(probs[1], 1.0 / z, 1e-15);
  EXPECT_NEAR(probs[3], std::exp(-3.0) / z, 1e-15);
  int ids[2];
  double w[2];
  moe_top_k(probs, 4, 2, false, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
  EXPECT_NEAR(w[0], 1.0 / z, 1e-15);  // no renormalisation: the softmax probabilities
  moe_top_k(probs, 4, 2, true, ids, w);
  EXPECT_EQ(w[0], 0.5);  // renormalised over the two equal choices
  EXPECT_EQ(w[1], 0.5);
  // k = 3: the third choice is expert 0 (e^-2 > e^-3), weights renormalised over three.
  int ids3[3];
  double w3[3];
  moe_top_k(probs, 4, 3, true, ids3, w3);
  EXPECT_EQ(ids3[2], 0);
  EXPECT_NEAR(w3[2], std::exp(-2.0) / (2.0 + std::exp(-2.0)), 1e-15);
  // An all-equal row: ties everywhere resolve to 0, 1, ... in order.
  const float flat[5] = {0.25f, 0.25f, 0.25f, 0.25f, 0.25f};
  int idf[3];
  float wf[3];
  moe_top_k(flat, 5, 3, false, idf, wf);
  EXPECT_EQ(idf[0], 0);
  EXPECT_EQ(idf[1], 1);
  EXPECT_EQ(idf[2], 2);
}

// ---- config and checkpoint validation ----------------------------------------------------------------

nlohmann::json moe_config() {
  RandomCheckpointOptions o;
  o.arch = "qwen3-moe";
  o.layers = 4;
  return random_checkpoint_config(o);
}

class MoeCheckpoint : public rlp_test::ScratchDirTest {};

TEST_F(MoeCheckpoint, ConfigRulesAndErrors) {
  nlohmann::json c = moe_config();
  c["decoder_sparse_step"] = 2;
  c["mlp_only_layers"] = {3};
  const ModelSpec s = parse_model_spec(c, "cfg.json");
  EXPECT_EQ(s.arch, Arch::qwen3_moe);
  // transformers' rule: sparse when (l + 1) % step == 0 and l not in mlp_only_layers.
  EXPECT_FALSE(s.is_moe_layer(0));
  EXPECT_TRUE(s.is_moe_layer(1));
  EXPECT_FALSE(s.is_moe_layer(2));
  EXPECT_FALSE(s.is_moe_layer(3));
  EXPECT_EQ(s.moe_layer_count(), 1);

  c = moe_config();
  c["num_experts_per_tok"] = 9;
  EXPECT_NE(input_error([&] { parse_model_spec(c, "cfg.json"); }).find("'num_experts_per_tok' (9) exceeds"),
            std::string::npos);
  c = moe_config();
  c.erase("moe_intermediate_size");
  EXPECT_NE(input_error([&] { parse_model_spec(c, "cfg.json"); }).find("'moe_intermediate_size' is missing"),
            std::string::npos);
  // Newer configs may name the expert count num_local_experts (Qwen3MoeConfig.attribute_map).
  c = moe_config();
  c["num_local_experts"] = c["num_experts"];
  c.erase("num_experts");
  EXPECT_EQ(parse_model_spec(c, "cfg.json").num_experts, 8);
  c["num_experts"] = 4;
  EXPECT_NE(input_error([&] { parse_model_spec(c, "cfg.json"); }).find("disagree"), std::string::npos);
  c = moe_config();
  c["mlp_only_layers"] = {7};
  EXPECT_NE(input_error([&] { parse_model_spec(c, "cfg.json"); }).find("mlp_only_layers[0]"),
            std::string::npos);
}

TEST_F(MoeCheckpoint, Qwen2MoeAndMixtralConfigs) {
  RandomCheckpointOptions o;
  o.arch = "qwen2-moe";
  o.layers = 2;
  o.mlp_only_layers = {0};
  nlohmann::json c = random_checkpoint_config(o);
  ModelSpec s = parse_model_spec(c, "cfg.json");
  EXPECT_EQ(s.arch, Arch::qwen2_moe);
  EXPECT_TRUE(s.qkv_bias);
  EXPECT_FALSE(s.qk_norm);
  EXPECT_EQ(s.shared_expert_intermediate, 96);
  EXPECT_FALSE(s.is_moe_layer(0));
  EXPECT_TRUE(s.is_moe_layer(1));
  EXPECT_EQ(s.router_tensor_suffix(), "mlp.gate");
  EXPECT_EQ(s.expert_tensor_suffix(3, "down_proj"), "mlp.experts.3.down_proj");
  c["qkv_bias"] = false;  // newer Qwen2MoeConfig's key
  EXPECT_FALSE(parse_model_spec(c, "cfg.json").qkv_bias);
  c.erase("shared_expert_intermediate_size");
  EXPECT_NE(input_error([&] {
              parse_model_spec(c, "cfg.json");
            }).find("'shared_expert_intermediate_size' is missing"),
            std::string::npos);
  // Qwen3-MoE has no shared expert: the key is refused there.
  c = moe_config();
  c["shared_expert_intermediate_size"] = 64;
  EXPECT_NE(input_error([&] { parse_model_spec(c, "cfg.json"); }).find("Qwen3-MoE has no shared expert"),
            std::string::npos);

  o = RandomCheckpointOptions{};
  o.arch = "mixtral";
  o.experts = 4;
  c = random_checkpoint_config(o);
  s = parse_model_spec(c, "cfg.json");
  EXPECT_EQ(s.arch, Arch::mixtral);
  EXPECT_EQ(s.num_experts, 4);
  EXPECT_EQ(s.moe_intermediate, s.intermediate);  // Mixtral's experts are intermediate_size wide
  EXPECT_TRUE(s.norm_topk_prob);                  // always renormalised
  EXPECT_EQ(s.moe_layer_count(), s.layers);
  EXPECT_EQ(s.router_tensor_suffix(), "block_sparse_moe.gate");
  EXPECT_EQ(s.expert_tensor_suffix(2, "gate_proj"), "block_sparse_moe.experts.2.w1");
  EXPECT_EQ(s.expert_tensor_suffix(2, "up_proj"), "block_sparse_moe.experts.2.w3");
  EXPECT_EQ(s.expert_tensor_suffix(2, "down_proj"), "block_sparse_moe.experts.2.w2");
  c["router_jitter_noise"] = 0.01;
  EXPECT_NE(input_error([&] { parse_model_spec(c, "cfg.json"); }).find("'router_jitter_noise' is 0.01"),
            std::string::npos);
  c["router_jitter_noise"] = 0.0;
  c["num_local_experts"] = 100000;
  EXPECT_NE(input_error([&] { parse_model_spec(c, "cfg.json"); }).find("at most 65536 experts"),
            std::string::npos);
  c["num_local_experts"] = 4;
  c["num_experts_per_tok"] = 5;
  EXPECT_NE(input_error([&] { parse_model_spec(c, "cfg.json"); }).find("exceeds 'num_local_experts' (4)"),
            std::string::npos);
  c["num_experts_per_tok"] = 2;
  c["sliding_window"] = 4096;
  EXPECT_NE(input_error([&] { parse_model_spec(c, "cfg.json"); }).find("sliding-window attention"),
            std::string::npos);
  c.erase("sliding_window");
  c.erase("num_local_experts");
  EXPECT_NE(input_error([&] { parse_model_spec(c, "cfg.json"); }).find("'num_local_experts' is missing"),
            std::string::npos);
}

// Rewrites one key of a written checkpoint's config.json.
void set_config(const std::filesystem::path& dir, const char* key, const nlohmann::json& v) {
  nlohmann::json c;
  std::ifstream(dir / "config.json") >> c;
  c[key] = v;
  std::ofstream(dir / "config.json", std::ios::trunc) << c.dump(2);
}

TEST_F(MoeCheckpoint, OpenChecksEveryExpertByName) {
  RandomCheckpointOptions o;
  o.arch = "qwen3-moe";
  o.layers = 2;
  o.experts = 3;
  o.out = (dir_ / "ck").string();
  write_random_checkpoint(o);
  const Checkpoint ck = Checkpoint::open(o.out);
  EXPECT_EQ(ck.spec().num_experts, 3);
  EXPECT_TRUE(ck.unused_tensors().empty());
  auto open_error = [&] { return input_error([&] { Checkpoint::open(o.out); }); };
  // The router says 4 experts where 3 are stored: its shape error names it.
  set_config(o.out, "num_experts", 4);
  EXPECT_NE(
      open_error().find("'model.layers.0.mlp.gate.weight' has shape [3, 64] but the config implies [4, 64]"),
      std::string::npos);
  // A different expert width: the shape error names the first expert tensor.
  set_config(o.out, "num_experts", 3);
  set_config(o.out, "moe_intermediate_size", 32);
  EXPECT_NE(open_error().find("'model.layers.0.mlp.experts.0.gate_proj.weight' has shape [64, 64]"),
            std::string::npos);
  // One expert's tensor left out of the file: named as missing.
  set_config(o.out, "moe_intermediate_size", 64);
  std::vector<TensorData> kept;
  {
    const Checkpoint full = Checkpoint::open(o.out);
    for (const auto& [name, t] : full.tensors())
      if (name != "model.layers.1.mlp.experts.2.up_proj.weight")
        kept.push_back({name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)});
  }
  write_safetensors((std::filesystem::path(o.out) / "model.safetensors").string(), kept);
  EXPECT_NE(open_error().find("tensor 'model.layers.1.mlp.experts.2.up_proj.weight' is missing"),
            std::string::npos);
}

TEST_F(MoeCheckpoint, MixedDenseAndSparseLayersRunTheForward) {
  RandomCheckpointOptions o;
  o.arch = "qwen3-moe";
  o.layers = 3;
  o.experts = 4;
  o.mlp_only_layers = {1};
  o.out = (dir_ / "ck").string();
  write_random_checkpoint(o);
  const Checkpoint ck = Checkpoint::open(o.out);
  EXPECT_TRUE(ck.has("model.layers.1.mlp.gate_proj.weight"));
  EXPECT_FALSE(ck.has("model.layers.1.mlp.gate.weight"));
  EXPECT_TRUE(ck.unused_tensors().empty());
  EXPECT_EQ(ck.spec().moe_layer_count(), 2);
  // The float64 forward and the training path agree to bf16 level on every position's logprobs.
  const OracleWeights ow = prepare_oracle_weights(ck);
  const OracleOps oracle(ck.spec(), ow);
  const PathStyle st = default_training_style();
  const PreparedWeights w = prepare_weights(ck, st);
  const EmulatedOps ops(ck.spec(), w, st);
  const std::vector<int32_t> tokens = {1, 17, 99, 200, 5, 42, 7, 250};
  const int n = static_cast<int>(tokens.size());
  auto oc = oracle.new_cache(n);
  auto ec = ops.new_cache(n);
  OracleOps::Mat lo;
  HostMat le;
  forward(oracle, oc, tokens.data(), n, 0, lo);
  forward(ops, ec, tokens.data(), n, 0, le);
  double worst = 0;
  for (Eigen::Index i = 0; i < lo.size(); ++i)
    worst = std::max(worst, std::fabs(static_cast<double>(le.data()[i]) - lo.data()[i]));
  EXPECT_LT(worst, 0.25);
  EXPECT_GT(worst, 0.0);
}

// ---- the MoE block ---------------------------------------------------------------------------------

// Rows of N(0, 1) rounded to bf16 (activations as the paths hold them).
HostMat random_rows(int n, int h, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  HostMat x(n, h);
  for (int i = 0; i < x.size(); ++i) x.data()[i] = num::round_bf16(nd(rng));
  return x;
}

std::vector<double> tensor_f64(const Checkpoint& ck, const std::string& name) {
  const TensorView& t = ck.tensor(name);
  std::vector<double> v(static_cast<std::size_t>(t.numel()));
  t.to_double(v.data());
  return v;
}

// y = W x for W [rows x cols] row-major.
std::vector<double> matvec(const std::vector<double>& w, const std::vector<double>& x, int rows) {
  const std::size_t cols = x.size();
  std::vector<double> y(static_cast<std::size_t>(rows), 0.0);
  for (std::size_t r = 0; r < y.size(); ++r)
    for (std::size_t c = 0; c < cols; ++c) y[r] += w[r * cols + c] * x[c];
  return y;
}

// down(silu(gate x) * up x) of the MLP whose projections are named gate/up/down (+ ".weight").
std::vector<double> swiglu(const Checkpoint& ck, const std::string& gate, const std::string& up,
                           const std::string& down, const std::vector<double>& x, int inter, int hidden) {
  const auto g = matvec(tensor_f64(ck, gate + ".weight"), x, inter);
  const auto u = matvec(tensor_f64(ck, up + ".weight"), x, inter);
  std::vector<double> a(g.size());
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
  return matvec(tensor_f64(ck, down + ".weight"), a, hidden);
}

struct MoeFixture : rlp_test::ScratchDirTest {
  Checkpoint open(int experts, int top_k, bool near_tie = false, bool norm = true,
                  const std::string& arch = "qwen3-moe") {
    RandomCheckpointOptions o;
    o.arch = arch;
    o.layers = 1;
    o.experts = experts;
    o.top_k = top_k;
    o.norm_topk = norm;
    o.router_near_tie = near_tie;
    o.out = (dir_ / ("ck-" + arch)).string();
    write_random_checkpoint(o);
    return Checkpoint::open(o.out);
  }
  static void paths_track_the_oracle(const Checkpoint& ck);
};

// The naive block: router softmax, top-k by a stable sort, renormalisation where the architecture
// says (Mixtral always), each chosen expert's SiLU MLP, and Qwen2-MoE's shared expert times
// sigmoid(shared_expert_gate . x); tensors read by their Hugging Face names.
struct MoeNames {
  const char* arch;
  bool norm;
  const char* router;            // within "model.layers.0."
  const char *gate, *up, *down;  // expert projection names within "<experts>.{e}."
  const char* experts;
  bool shared;
};

TEST_F(MoeFixture, OracleBlockMatchesNaiveReference) {
  const MoeNames cases[] = {
      {"qwen3-moe", true, "mlp.gate", "gate_proj", "up_proj", "down_proj", "mlp.experts", false},
      {"qwen3-moe", false, "mlp.gate", "gate_proj", "up_proj", "down_proj", "mlp.experts", false},
      {"qwen2-moe", false, "mlp.gate", "gate_proj", "up_proj", "down_proj", "mlp.experts", true},
      {"qwen2-moe", true, "mlp.gate", "gate_proj", "up_proj", "down_proj", "mlp.experts", true},
      // Mixtral renormalises whatever norm_topk says (the option is not written to its config).
      {"mixtral", false, "block_sparse_moe.gate", "w1", "w3", "w2", "block_sparse_moe.experts", false},
  };
  for (const MoeNames& cs : cases) {
    const bool norm = cs.norm || std::string(cs.arch) == "mixtral";
    const Checkpoint ck = open(6, 2, false, cs.norm, cs.arch);
    const ModelSpec& spec = ck.spec();
    const OracleWeights ow = prepare_oracle_weights(ck);
    const OracleOps oracle(spec, ow);
    const HostMat x = random_rows(9, spec.hidden, 7);
    OracleOps::Mat xd = x.cast<double>(), out;
    MoeRouting routing;
    oracle.moe(xd, 0, out, false, &routing);
    ASSERT_EQ(routing.k, 2);
    const std::string L = "model.layers.0.";
    const auto router = tensor_f64(ck, L + cs.router + ".weight");
    for (int r = 0; r < 9; ++r) {
      std::vector<double> xr(xd.row(r).data(), xd.row(r).data() + spec.hidden);
      const auto logits = matvec(router, xr, 6);
      // softmax, then the two largest by a stable sort on (-p, index): the hand rule, not the header's.
      const double mx = *std::max_element(logits.begin(), logits.end());
      std::vector<double> p(6);
      double z = 0;
      for (int e = 0; e < 6; ++e)
        z += p[static_cast<std::size_t>(e)] = std::exp(logits[static_cast<std::size_t>(e)] - mx);
      for (double& v : p) v /= z;
      std::vector<int> order(6);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
        return p[static_cast<std::size_t>(a)] > p[static_cast<std::size_t>(b)];
      });
      // The choices and the margin p_2 - p_3 the replay records (routing/margin_oracle).
      EXPECT_EQ(routing.ids[static_cast<std::size_t>(2 * r)], order[0]) << "row " << r;
      EXPECT_EQ(routing.ids[static_cast<std::size_t>(2 * r + 1)], order[1]) << "row " << r;
      EXPECT_NEAR(routing.margin[static_cast<std::size_t>(r)],
                  p[static_cast<std::size_t>(order[1])] - p[static_cast<std::size_t>(order[2])], 1e-12)
          << "row " << r;
      double wsum =
          norm ? p[static_cast<std::size_t>(order[0])] + p[static_cast<std::size_t>(order[1])] : 1.0;
      std::vector<double> ref(static_cast<std::size_t>(spec.hidden), 0.0);
      for (int s = 0; s < 2; ++s) {
        const int e = order[static_cast<std::size_t>(s)];
        const std::string E = L + cs.experts + "." + std::to_string(e) + ".";
        const auto d =
            swiglu(ck, E + cs.gate, E + cs.up, E + cs.down, xr, spec.moe_intermediate, spec.hidden);
        for (std::size_t i = 0; i < ref.size(); ++i) ref[i] += p[static_cast<std::size_t>(e)] / wsum * d[i];
      }
      if (cs.shared) {
        const std::string S = L + "mlp.shared_expert.";
        const auto d = swiglu(ck, S + "gate_proj", S + "up_proj", S + "down_proj", xr, 96, spec.hidden);
        const double gl = matvec(tensor_f64(ck, L + "mlp.shared_expert_gate.weight"), xr, 1)[0];
        for (std::size_t i = 0; i < ref.size(); ++i) ref[i] += d[i] / (1.0 + std::exp(-gl));
      }
      for (int i = 0; i < spec.hidden; ++i)
        EXPECT_NEAR(out(r, i), ref[static_cast<std::size_t>(i)],
                    1e-12 * (1.0 + std::fabs(ref[static_cast<std::size_t>(i)])))
            << cs.arch << " row " << r << " col " << i << " norm " << norm;
    }
  }
}

TEST_F(MoeFixture, PathsTrackTheOracleAndCombinesAgreeAtTopOne) {
  for (const char* arch : {"qwen3-moe", "qwen2-moe", "mixtral"}) {
    SCOPED_TRACE(arch);
    paths_track_the_oracle(open(4, 1, false, true, arch));
  }
}

void MoeFixture::paths_track_the_oracle(const Checkpoint& ck) {
  const ModelSpec& spec = ck.spec();
  const OracleWeights ow = prepare_oracle_weights(ck);
  const OracleOps oracle(spec, ow);
  const HostMat x = random_rows(16, spec.hidden, 11);
  OracleOps::Mat ref;
  oracle.moe(x.cast<double>(), 0, ref);
  // With k = 1 and norm_topk_prob the weight is exactly 1: every combine rule gives the expert's
  // own act-dtype output, bit for bit.
  std::vector<HostMat> outs;
  for (MoeCombine c : {MoeCombine::vllm, MoeCombine::fp32, MoeCombine::rounded}) {
    PathStyle st = default_training_style();
    st.moe_combine = c;
    const PreparedWeights w = prepare_weights(ck, st);
    const EmulatedOps ops(spec, w, st);
    HostMat y;
    ops.moe(x, 0, y);
    outs.push_back(y);
  }
  for (std::size_t i = 1; i < outs.size(); ++i) EXPECT_EQ(outs[i], outs[0]) << "combine " << i;
  // bf16-level agreement with the oracle (same routing for these rows: no near ties here).
  double diff2 = 0, ref2 = 0;  // (loops: Eigen's AVX-512 reductions trip GCC 12's maybe-uninitialized)
  for (Eigen::Index i = 0; i < ref.size(); ++i) {
    const double dv = static_cast<double>(outs[0].data()[i]) - ref.data()[i];
    diff2 += dv * dv;
    ref2 += ref.data()[i] * ref.data()[i];
  }
  const double rel = std::sqrt(diff2 / ref2);
  EXPECT_LT(rel, 2e-2);
  EXPECT_GT(rel, 0.0);
}

// Block-scaled fp8 MoE checkpoints of each architecture: experts (and Qwen2-MoE's shared expert) are
// stored F8_E4M3 with their scales, routers and the shared-expert gate unquantized; the generation
// path's `checkpoint` convention runs the stored codes verbatim, and a replay runs.
TEST_F(MoeCheckpoint, Fp8BlockScaledCheckpointsOfEveryArchitecture) {
  for (const std::string arch : {"qwen3-moe", "qwen2-moe", "mixtral"}) {
    SCOPED_TRACE(arch);
    RandomCheckpointOptions o;
    o.arch = arch;
    o.layers = 2;
    o.experts = 4;
    o.dtype = DType::bf16;
    o.fp8_block = true;
    o.out = (dir_ / arch).string();
    write_random_checkpoint(o);
    const Checkpoint ck = Checkpoint::open(o.out);
    EXPECT_TRUE(ck.unused_tensors().empty());
    const ModelSpec& spec = ck.spec();
    RecipeOptions ro;
    ro.fp8_checkpoint = true;
    const Recipe r = make_recipe("fp8-gen", ro);
    PathStyle gen = r.gen;
    gen.moe_model = true;
    const PreparedWeights w = prepare_weights(ck, gen);
    std::vector<std::pair<std::string, const PreparedLinear*>> stored = {
        {spec.expert_tensor_suffix(3, "down_proj"), &w.layers[1].expert(3, Proj::down)}};
    if (spec.shared_expert_intermediate > 0)
      stored.push_back({ModelSpec::shared_expert_tensor_suffix("up_proj"), &w.layers[1][Proj::up]});
    for (const auto& [suffix, lin] : stored) {
      const TensorView& t = ck.tensor(layer_tensor_name(1, suffix) + ".weight");
      ASSERT_EQ(t.dtype, DType::e4m3) << suffix;
      ASSERT_TRUE(lin->fp8) << suffix;
      ASSERT_EQ(lin->wq.codes.size(), t.nbytes);
      EXPECT_EQ(std::memcmp(lin->wq.codes.data(), t.data, t.nbytes), 0) << suffix;
    }
    EXPECT_EQ(ck.tensor(layer_tensor_name(1, spec.router_tensor_suffix()) + ".weight").dtype, DType::bf16);
    EXPECT_FALSE(w.layers[1].router.fp8);
    EXPECT_FALSE(w.layers[1].shared_gate.fp8);
    std::vector<InputSequence> in(2);
    for (std::size_t s = 0; s < in.size(); ++s) {
      in[s].id = std::to_string(s);
      in[s].prompt = {1, static_cast<int32_t>(5 + s), 9, 30};
      in[s].response = {11, 12, static_cast<int32_t>(40 + s)};
      in[s].has_response = true;
    }
    ReplayOptions opt;
    opt.recipes = {"bf16", "fp8-gen"};
    const RunData run = run_replay(ck, in, opt);
    for (const auto& rr : run.recipes) {
      EXPECT_EQ(rr.routing.moe_layers, 2);
      EXPECT_EQ(rr.routing.gen_experts.size(), 6u * 2u * 2u);  // tokens x MoE layers x k
      EXPECT_TRUE(std::isfinite(rr.summary.at("mean_abs_log_ratio")));
    }
  }
}

// The memory estimate counts a MoE checkpoint's parameters as stored: every expert, the shared
// expert, routers and gates, not a dense MLP per layer. One bf16 form holds every matrix at 2 B (none
// when the checkpoint stores bf16: the form is a view of the mapping) and every vector as a float;
// the oracle holds only the vectors, as doubles.
TEST_F(MoeCheckpoint, MemoryEstimateCountsEveryExpert) {
  for (const std::string arch : {"qwen3-moe", "qwen2-moe", "mixtral"})
    for (const DType dtype : {DType::fp32, DType::bf16}) {
      RandomCheckpointOptions o;
      o.arch = arch;
      o.layers = 3;
      o.experts = 5;
      o.dtype = dtype;
      o.intermediate = 40;  // the dense width differs from the experts' (64) and the shared one (96)
      o.mlp_only_layers = arch == "mixtral" ? std::vector<int>{} : std::vector<int>{1};
      o.out = (dir_ / (arch + dtype_name(dtype))).string();
      write_random_checkpoint(o);
      const Checkpoint ck = Checkpoint::open(o.out);
      uint64_t matrices = 0, vectors = 0;
      for (const auto& [name, t] : ck.tensors())
        (t.shape.size() == 2 ? matrices : vectors) += static_cast<uint64_t>(t.numel());
      std::vector<InputSequence> in(1);
      in[0].prompt = {1, 2, 3};
      in[0].response = {4, 5};
      in[0].has_response = true;
      ReplayOptions opt;
      opt.recipes = {"bf16"};
      const MemoryEstimate est =
          estimate_replay_memory(make_replay_plan(ck.spec(), opt), in, checkpoint_storage(ck));
      uint64_t oracle = 0, prepared = 0;
      for (const auto& [what, bytes] : est.parts) {
        if (what.rfind("oracle", 0) == 0) oracle = bytes;
        if (what.rfind("prepared weights", 0) == 0) prepared = bytes;
      }
      EXPECT_EQ(oracle, 8 * vectors) << arch;
      EXPECT_EQ(prepared, (dtype == DType::bf16 ? 0 : 2 * matrices) + 4 * vectors)
          << arch << " " << dtype_name(dtype);
    }
}

// inspect covers every quantizable linear of a MoE layer (each expert, the shared expert), never
// the router or the shared-expert gate, labelled by their module path.
TEST_F(MoeCheckpoint, InspectCoversEveryExpert) {
  for (const std::string arch : {"qwen2-moe", "mixtral"}) {
    RandomCheckpointOptions o;
    o.arch = arch;
    o.layers = 2;
    o.experts = 3;
    o.mlp_only_layers = arch == "mixtral" ? std::vector<int>{} : std::vector<int>{0};
    o.out = (dir_ / arch).string();
    write_random_checkpoint(o);
    const Checkpoint ck = Checkpoint::open(o.out);
    const InspectResult r = inspect_checkpoint(ck);
    std::set<std::string> names;
    for (const auto& t : r.tensors) names.insert(t.name);
    // Attention 4 per layer; then a dense MLP (3) or experts (3 each) and the shared expert (3).
    const std::size_t want = arch == "mixtral" ? 2 * (4 + 3 * 3) : (4 + 3) + (4 + 3 * 3 + 3);
    EXPECT_EQ(names.size(), want) << arch;
    if (arch == "mixtral") {
      EXPECT_TRUE(names.count("model.layers.1.block_sparse_moe.experts.2.w2.weight"));
      EXPECT_FALSE(names.count("model.layers.1.block_sparse_moe.gate.weight"));
    } else {
      EXPECT_TRUE(names.count("model.layers.1.mlp.shared_expert.down_proj.weight"));
      EXPECT_TRUE(names.count("model.layers.0.mlp.gate_proj.weight"));  // the dense layer
      EXPECT_FALSE(names.count("model.layers.1.mlp.shared_expert_gate.weight"));
      EXPECT_FALSE(names.count("model.layers.1.mlp.gate.weight"));
    }
    for (const auto& t : r.tensors)
      if (t.name == "model.layers.1.mlp.experts.2.up_proj.weight") {
        EXPECT_EQ(t.layer, 1);
        EXPECT_EQ(t.proj, "experts.2.up_proj");
      }
  }
}

TEST_F(MoeFixture, NearTieFlipsWithRouterLogitPrecision) {
  const Checkpoint ck = open(4, 1, true);
  const ModelSpec& spec = ck.spec();
  PathStyle gen = default_generation_style(), train = default_training_style();
  ASSERT_FALSE(gen.router_logits_fp32);
  ASSERT_TRUE(train.router_logits_fp32);
  const PreparedWeights wg = prepare_weights(ck, gen), wt = prepare_weights(ck, train);
  const EmulatedOps og(spec, wg, gen), ot(spec, wt, train);
  MoeRouting rg, rt;
  const int n = 256;
  const HostMat x = random_rows(n, spec.hidden, 3);
  HostMat y;
  og.moe(x, 0, y, false, &rg);
  ot.moe(x, 0, y, false, &rt);
  // Router rows 0 and 1 differ only in element 0 (row 1's is one bf16 ulp larger in magnitude, both
  // positive): logit1 - logit0 = x[0] * ulp. With fp32 logits the larger wins; with bf16 logits they
  // often round equal and the lower index (0) wins. So the only flips are gen 0 -> train 1, x[0] > 0.
  int flips = 0;
  for (int r = 0; r < n; ++r) {
    const int g = rg.ids[static_cast<std::size_t>(r)], t = rt.ids[static_cast<std::size_t>(r)];
    if (g == t) continue;
    ++flips;
    EXPECT_EQ(g, 0) << "row " << r;
    EXPECT_EQ(t, 1) << "row " << r;
    EXPECT_GT(x(r, 0), 0.0f) << "row " << r;
  }
  EXPECT_GT(flips, 5);
  // The same knob on both paths: no flips.
  PathStyle gen32 = gen;
  gen32.router_logits_fp32 = true;
  const EmulatedOps og32(spec, wg, gen32);
  og32.moe(x, 0, y, false, &rg);
  EXPECT_EQ(rg.ids, rt.ids);
}

// A whole replay of the near-tie checkpoint: the bf16 recipe's generation path computes router
// logits in bf16, its training path in fp32 (Megatron's moe_router_dtype), so tokens whose two tied
// experts round equal flip; the run records each path's choices, the oracle's margins, per-layer
// flip fractions and the summary. With the generation path's router knob on the training path, no
// token flips.
TEST_F(MoeFixture, ReplayRecordsRouterFlipsAndTheirMargins) {
  const Checkpoint ck = open(4, 1, true);
  std::vector<InputSequence> in;
  for (int s = 0; s < 6; ++s) {
    InputSequence q;
    q.id = std::to_string(s);
    for (int t = 0; t < 40; ++t)
      (t < 8 ? q.prompt : q.response).push_back((s * 37 + t * 11) % ck.spec().vocab);
    q.has_response = true;
    in.push_back(q);
  }
  ReplayOptions opt;
  opt.recipes = {"bf16"};
  const RunData run = run_replay(ck, in, opt);
  const RecipeResult& r = run.recipes.at(0);
  const RoutingResult& rt = r.routing;
  ASSERT_EQ(rt.moe_layers, 1);
  ASSERT_EQ(rt.k, 1);
  const std::size_t T = r.tokens.at("logp_gen").size();
  ASSERT_EQ(rt.gen_experts.size(), T);
  ASSERT_EQ(rt.oracle_experts.size(), T);
  int flips = 0;
  double flipped_margin = 0.0, kept_margin = 0.0;
  for (std::size_t t = 0; t < T; ++t) {
    if (rt.gen_experts[t] == rt.train_experts[t]) {
      kept_margin += rt.margin_oracle[t];
      continue;
    }
    ++flips;
    flipped_margin += rt.margin_oracle[t];
    EXPECT_EQ(rt.gen_experts[t], 0) << "token " << t;  // the lower index wins a bf16 tie
    EXPECT_EQ(rt.train_experts[t], 1) << "token " << t;
    EXPECT_LT(rt.margin_oracle[t], 1e-2) << "token " << t << ": a flip far from a tie";
  }
  ASSERT_GT(flips, 0);
  ASSERT_LT(flips, static_cast<int>(T));
  // Flips sit near ties: their mean oracle margin is far below the kept tokens'.
  EXPECT_LT(flipped_margin / flips, 0.1 * kept_margin / static_cast<double>(static_cast<int>(T) - flips));
  EXPECT_DOUBLE_EQ(rt.layers.at("flip_frac").at(0), flips / static_cast<double>(T));
  EXPECT_DOUBLE_EQ(r.summary.at("router_flip_frac"), flips / static_cast<double>(T));
  EXPECT_DOUBLE_EQ(r.summary.at("mean_router_flip_frac"), flips / static_cast<double>(T));
  EXPECT_GT(r.summary.at("mean_abs_log_ratio_flipped"), r.summary.at("mean_abs_log_ratio_unflipped"));
  // The run file holds the routing and reads it back as written.
  const std::string path = (dir_ / "run.h5").string();
  write_run_file(path, run, false);
  const RoutingResult back = read_run_file(path).recipes.at(0).routing;
  EXPECT_EQ(back.moe_layer_index, rt.moe_layer_index);
  EXPECT_EQ(back.k, rt.k);
  EXPECT_EQ(back.gen_experts, rt.gen_experts);
  EXPECT_EQ(back.train_experts, rt.train_experts);
  EXPECT_EQ(back.oracle_experts, rt.oracle_experts);
  EXPECT_EQ(back.margin_oracle, rt.margin_oracle);
  EXPECT_EQ(back.layers, rt.layers);
  // The report's router-flip sections: per-layer flips, the margin histogram (each column a
  // distribution over the bins, the flipped count in its header), flipped vs unflipped divergence.
  const auto sections = report::routing_sections(run);
  ASSERT_EQ(sections.size(), 3u);
  EXPECT_DOUBLE_EQ(sections[0].rows.at(0).at(1).value, flips / static_cast<double>(T));
  const auto& hist = sections[1];
  EXPECT_EQ(hist.headers.at(1), "bf16: flipped (" + std::to_string(flips) + ")");
  for (std::size_t c = 1; c < hist.keys.size(); ++c) {
    double sum = 0;
    for (const auto& row : hist.rows) sum += row.at(c).value;
    EXPECT_NEAR(sum, 1.0, 1e-12) << hist.keys[c];
  }
  // Flips sit in the lowest margin bins: none at margins >= 0.01.
  EXPECT_EQ(hist.rows.at(4).at(1).value + hist.rows.at(5).at(1).value, 0.0);

  opt.recipe.train_knobs = {{"moe-router-logits", "act"}};
  const RunData same = run_replay(ck, in, opt);
  EXPECT_EQ(same.recipes.at(0).routing.gen_experts, same.recipes.at(0).routing.train_experts);
  EXPECT_EQ(same.recipes.at(0).summary.at("router_flip_frac"), 0.0);
}

TEST_F(MoeFixture, BitIdenticalAcrossThreadCounts) {
  const Checkpoint ck = open(6, 4);
  PathStyle st = default_generation_style();
  const PreparedWeights w = prepare_weights(ck, st);
  const EmulatedOps ops(ck.spec(), w, st);
  const HostMat x = random_rows(70, ck.spec().hidden, 5);
  const int before = thread_count();
  set_thread_count(1);
  HostMat y1, y4;
  ops.moe(x, 0, y1);
  set_thread_count(4);
  ops.moe(x, 0, y4);
  set_thread_count(before);
  EXPECT_EQ(y1, y4);
}

}  // namespace
}  // namespace rlp
