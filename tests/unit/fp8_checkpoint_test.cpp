// Pre-quantized block-scaled fp8 checkpoints (the DeepSeek-V3 / Qwen3-FP8 layout) written by our
// own writer: loading, dequantization against hand-worked blocks, the `checkpoint` weight
// convention reproducing the stored codes bit for bit, every malformed scale tensor refused by
// name, inspect's stored-vs-requantized comparison, and a replay from the CLI.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "rlparity/inspect/inspect.hpp"
#include "rlparity/model/checkpoint.hpp"
#include "rlparity/model/checkpoint_writer.hpp"
#include "rlparity/model/weights.hpp"
#include "rlparity/numerics/formats.hpp"
#include "rlparity/replay/recipe.hpp"
#include "unit/scratch_test_util.hpp"

namespace {
namespace fs = std::filesystem;
using nlohmann::json;
using rlp::Checkpoint;
using rlp::DType;
using rlp::TensorData;

const std::string kQ = "model.layers.0.self_attn.q_proj";
const std::string kO = "model.layers.0.self_attn.o_proj";

class Fp8Checkpoint : public rlp_test::ScratchDirTest {
 protected:
  // hidden 160, intermediate 200: partial edge blocks in both directions (128 + 32, 128 + 72).
  rlp::RandomCheckpointOptions options() const {
    rlp::RandomCheckpointOptions o;
    o.arch = "llama";
    o.hidden = 160;
    o.intermediate = 200;
    o.layers = 2;
    o.heads = 4;
    o.kv_heads = 2;
    o.vocab = 64;
    o.max_pos = 64;
    o.seed = 3;
    o.dtype = DType::bf16;
    o.fp8_block = true;
    o.out = (dir_ / "ckpt").string();
    return o;
  }
  std::string make() const {
    rlp::write_random_checkpoint(options());
    return options().out;
  }
  // Rewrites model.safetensors after `edit` changes its tensors (read as stored).
  static void rewrite(const std::string& ckpt, const std::function<void(std::vector<TensorData>&)>& edit) {
    std::vector<TensorData> ts;
    {
      const Checkpoint c = Checkpoint::open(ckpt);
      for (const auto& [name, v] : c.tensors())
        ts.push_back(TensorData{name, v.dtype, v.shape, std::vector<uint8_t>(v.data, v.data + v.nbytes)});
    }
    edit(ts);
    rlp::write_safetensors(ckpt + "/model.safetensors", ts);
  }
  static TensorData& find(std::vector<TensorData>& ts, const std::string& name) {
    for (auto& t : ts)
      if (t.name == name) return t;
    throw std::runtime_error("no tensor " + name);
  }
  static void set_scale(TensorData& t, std::size_t block, float v) {
    std::memcpy(t.bytes.data() + 4 * block, &v, 4);
  }
  static void edit_config(const std::string& ckpt, const std::function<void(json&)>& edit) {
    std::ifstream in(ckpt + "/config.json");
    json c = json::parse(in);
    edit(c);
    std::ofstream(ckpt + "/config.json", std::ios::trunc) << c.dump(2);
  }
  // Replays two sequences on `ckpt` from the CLI (default recipes, `extra` flags) into `out_name`
  // and, where h5py is present, runs the python `check` on the file; false when h5py is absent.
  bool replay_and_check(const std::string& ckpt, const std::string& out_name, const std::string& extra,
                        const std::string& check) {
    const std::string in = write("in.jsonl",
                                 "{\"id\": 1, \"prompt\": [1, 5, 9, 12], \"response\": [3, 7, 11]}\n"
                                 "{\"id\": 2, \"prompt\": [2, 40], \"response\": [63, 0, 8, 8]}\n");
    const std::string out = (dir_ / out_name).string();
    const auto r = rlp_test::run_command(std::string(RLPARITY_CLI_PATH) + " replay -q --checkpoint " + ckpt +
                                         " --inputs " + in + " --out " + out + extra);
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_TRUE(fs::exists(out));
    if (std::system("/usr/bin/python3 -c 'import h5py' 2>/dev/null") != 0) return false;
    const auto py = rlp_test::run_command("/usr/bin/python3 " + write("check.py", check) + " " + out);
    EXPECT_EQ(py.code, 0) << py.output;
    return true;
  }
  // Expects Checkpoint::open to refuse with a message holding every part.
  void expect_refused(const std::string& ckpt, const std::vector<std::string>& parts) {
    const std::string msg = input_error([&] { (void)Checkpoint::open(ckpt); });
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "lacks '" << p << "': " << msg;
  }
};

TEST_F(Fp8Checkpoint, WriterProducesTheRealLayoutAndItLoads) {
  const Checkpoint c = Checkpoint::open(make());
  EXPECT_TRUE(c.spec().fp8.enabled);
  EXPECT_EQ(c.spec().fp8.block_rows, 128);
  EXPECT_TRUE(c.unused_tensors().empty());
  for (const char* p : {"self_attn.q_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.down_proj"}) {
    const rlp::TensorView& w = c.tensor(rlp::layer_tensor_name(1, p) + ".weight");
    EXPECT_EQ(w.dtype, DType::e4m3) << p;
    ASSERT_NE(w.scale_inv, nullptr) << p;
    const rlp::TensorView& s = c.tensor(rlp::layer_tensor_name(1, p) + ".weight_scale_inv");
    EXPECT_EQ(s.dtype, DType::fp32);
    EXPECT_EQ(s.shape, (std::vector<int64_t>{(w.shape[0] + 127) / 128, (w.shape[1] + 127) / 128})) << p;
  }
  for (const char* n : {"model.embed_tokens.weight", "lm_head.weight", "model.norm.weight",
                        "model.layers.0.input_layernorm.weight"})
    EXPECT_EQ(c.tensor(n).dtype, DType::bf16) << n;
  const json cfg = json::parse(std::ifstream(options().out + "/config.json"));
  EXPECT_EQ(cfg["quantization_config"],
            json::parse(R"({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                            "weight_block_size": [128, 128]})"));
  EXPECT_NE(c.spec().to_json().dump().find("quantization"), std::string::npos);
}

// Hand-chosen codes and scales in o_proj (160 x 160: blocks [0,0], [0,1], [1,0], [1,1]).
TEST_F(Fp8Checkpoint, DequantizationMatchesHandWorkedBlocks) {
  const std::string ckpt = make();
  rewrite(ckpt, [](std::vector<TensorData>& ts) {
    TensorData& w = find(ts, kO + ".weight");
    TensorData& s = find(ts, kO + ".weight_scale_inv");
    set_scale(s, 0, 0.5f);
    set_scale(s, 1, 0.125f);
    set_scale(s, 2, 3.0f);
    set_scale(s, 3, 0.1f);
    w.bytes[0 * 160 + 0] = 0x38;      // 1.0 in block [0,0]
    w.bytes[0 * 160 + 130] = 0x40;    // 2.0 in block [0,1]
    w.bytes[130 * 160 + 5] = 0xC4;    // -3.0 in block [1,0]
    w.bytes[131 * 160 + 159] = 0x7E;  // 448 in block [1,1]
    w.bytes[1 * 160 + 1] = 0x01;      // 2^-9 (the smallest subnormal) in block [0,0]
  });
  const Checkpoint c = Checkpoint::open(ckpt);
  const rlp::TensorView& w = c.tensor(kO + ".weight");
  EXPECT_EQ(w.at(0), 0.5f);
  EXPECT_EQ(w.at(130), 0.25f);
  EXPECT_EQ(w.at(130 * 160 + 5), -9.0f);
  EXPECT_EQ(w.at(1 * 160 + 1), 0x1.0p-10f);
  // 448 x 0.1f: one fp32 rounding in float, exact in double (448 = 7 x 2^6: 3 bits x 24 bits).
  const double exact = 448.0 * static_cast<double>(0.1f);
  EXPECT_EQ(w.at(131 * 160 + 159), static_cast<float>(exact));
  std::vector<double> d(static_cast<std::size_t>(w.numel()));
  w.to_double(d.data());
  EXPECT_EQ(d[131 * 160 + 159], exact);
  EXPECT_NE(exact, static_cast<double>(static_cast<float>(exact)));  // the two forms really differ here
  std::vector<float> f(d.size());
  w.to_float(f.data());
  for (std::size_t i = 0; i < f.size(); ++i) ASSERT_EQ(f[i], w.at(static_cast<int64_t>(i))) << i;

  // The prepared forms: act dtype = bf16 of the fp32 master, the oracle = the exact product.
  rlp::PathStyle bf16 = rlp::default_training_style();
  const rlp::PreparedWeights pw = rlp::prepare_weights(c, bf16);
  EXPECT_EQ(pw.layers[0][rlp::Proj::o].w[131 * 160 + 159],
            rlp::num::float_to_bf16_bits(static_cast<float>(exact)));
  EXPECT_EQ(pw.layers[0][rlp::Proj::o].w[0], rlp::num::float_to_bf16_bits(0.5f));
  const rlp::OracleWeights ow = rlp::prepare_oracle_weights(c);
  // The oracle widens rows from the mapping as its GEMM packs them: the same exact products.
  std::vector<double> row(160);
  ow.layers[0][rlp::Proj::o].w->to_double(131 * 160, 160, row.data());
  EXPECT_EQ(row[159], exact);
  ow.layers[0][rlp::Proj::o].w->to_double(130 * 160, 160, row.data());
  EXPECT_EQ(row[5], -9.0);
}

TEST_F(Fp8Checkpoint, CheckpointConventionUsesTheStoredCodesVerbatim) {
  const Checkpoint c = Checkpoint::open(make());
  rlp::RecipeOptions ro;
  ro.fp8_checkpoint = true;
  const rlp::Recipe r = rlp::make_recipe("fp8-e2e", ro);
  ASSERT_TRUE(r.gen.weight_from_checkpoint);  // the generation default on an fp8 checkpoint
  ASSERT_FALSE(r.train.weight_from_checkpoint);
  EXPECT_EQ(rlp::get_knob(r.gen, "weight-quant"), "checkpoint");
  EXPECT_NE(rlp::weights_key(r.gen), rlp::weights_key(r.train));
  const rlp::PreparedWeights gen = rlp::prepare_weights(c, r.gen);
  const rlp::PreparedWeights train = rlp::prepare_weights(c, r.train);
  for (int l = 0; l < 2; ++l)
    for (int p = 0; p < rlp::kNumProj; ++p) {
      const std::string base = rlp::layer_tensor_name(l, rlp::proj_tensor_suffix(static_cast<rlp::Proj>(p)));
      const rlp::TensorView& w = c.tensor(base + ".weight");
      const rlp::TensorView& s = c.tensor(base + ".weight_scale_inv");
      const rlp::PreparedLinear& g = gen.layers[static_cast<std::size_t>(l)].proj[p];
      ASSERT_TRUE(g.fp8);
      ASSERT_EQ(g.wq.codes.size(), w.nbytes);
      EXPECT_EQ(std::memcmp(g.wq.codes.data(), w.data, w.nbytes), 0) << base;
      ASSERT_EQ(g.wq.scale_inv.size() * 4, s.nbytes);
      EXPECT_EQ(std::memcmp(g.wq.scale_inv.data(), s.data, s.nbytes), 0) << base;
      EXPECT_EQ(g.wq.block_rows, 128);
      // Training requantizes the dequantized master in TE's convention (scale 448/amax).
      const rlp::PreparedLinear& t = train.layers[static_cast<std::size_t>(l)].proj[p];
      std::vector<float> master(static_cast<std::size_t>(w.numel()));
      w.to_float(master.data());
      const rlp::num::Fp8Tensor te =
          rlp::num::quantize_blocks(master.data(), g.out, g.in, 128, 128, r.train.weight_scale_options());
      EXPECT_EQ(t.wq.codes, te.codes) << base;
      EXPECT_EQ(t.wq.scale_inv, te.scale_inv) << base;
    }
  // bf16 edge layers stay bf16 under the checkpoint convention too.
  rlp::PathStyle edge = r.gen;
  edge.bf16_first_layers = 1;
  EXPECT_FALSE(rlp::prepare_weights(c, edge).layers[0][rlp::Proj::q].fp8);
  // The knob refuses `checkpoint` on a checkpoint that is not fp8.
  rlp::RecipeOptions plain;
  plain.gen_knobs = {{"weight-quant", "checkpoint"}};
  const std::string msg = input_error([&] { (void)rlp::make_recipe("fp8-gen", plain); });
  EXPECT_NE(msg.find("not fp8"), std::string::npos) << msg;
}

TEST_F(Fp8Checkpoint, MalformedScalesAndConfigsAreRefusedByName) {
  const std::string ckpt = make();
  const std::string scale = kQ + ".weight_scale_inv";
  const fs::path st = fs::path(ckpt) / "model.safetensors", cfg = fs::path(ckpt) / "config.json";
  const fs::path st_good = dir_ / "good.safetensors", cfg_good = dir_ / "good.json";
  fs::copy_file(st, st_good);
  fs::copy_file(cfg, cfg_good);
  auto restore = [&] {
    fs::copy_file(st_good, st, fs::copy_options::overwrite_existing);
    fs::copy_file(cfg_good, cfg, fs::copy_options::overwrite_existing);
  };
  auto drop = [&](const std::string& name) {
    return [name](std::vector<TensorData>& ts) {
      std::erase_if(ts, [&](const TensorData& t) { return t.name == name; });
    };
  };
  rewrite(ckpt, drop(scale));
  expect_refused(ckpt, {"model.safetensors", kQ + ".weight", scale, "missing"});
  restore();
  rewrite(ckpt, [&](std::vector<TensorData>& ts) {
    TensorData& s = find(ts, scale);
    s.shape = {2, 1};
    s.bytes.resize(8);
  });
  expect_refused(ckpt, {scale, "[2, 1]", "[2, 2]"});
  for (const float bad : {0.0f, -0.5f, std::nanf(""), INFINITY}) {
    restore();
    rewrite(ckpt, [&](std::vector<TensorData>& ts) { set_scale(find(ts, scale), 3, bad); });
    expect_refused(ckpt, {"model.safetensors", scale, "block [1, 1]", "finite and positive"});
  }
  restore();
  rewrite(ckpt, [&](std::vector<TensorData>& ts) {
    TensorData& s = find(ts, scale);
    s = rlp::make_tensor(scale, DType::e4m3, {2, 2}, {1, 1, 1, 1});
  });
  expect_refused(ckpt, {scale, "F8_E4M3", "F32, BF16 or F16"});
  // BF16 scales (compressed-tensors keeps the model's dtype) are widened exactly.
  restore();
  rewrite(ckpt, [&](std::vector<TensorData>& ts) {
    TensorData& s = find(ts, scale);
    s = rlp::make_tensor(scale, DType::bf16, {2, 2}, {0.5f, 0.25f, 3.0f, 0.125f});
  });
  {
    const Checkpoint c = Checkpoint::open(ckpt);
    EXPECT_EQ(c.tensor(kQ + ".weight").block_scale_inv(130, 0), 3.0f);
  }
  restore();
  rewrite(ckpt, [&](std::vector<TensorData>& ts) { find(ts, kQ + ".weight").bytes[7] = 0x7F; });
  expect_refused(ckpt, {kQ + ".weight", "non-finite"});
  restore();
  rewrite(ckpt, [&](std::vector<TensorData>& ts) {
    TensorData& e = find(ts, "model.embed_tokens.weight");
    std::vector<float> v(static_cast<std::size_t>(64 * 160), 0.25f);
    e = rlp::make_tensor(e.name, DType::e4m3, e.shape, v);
  });
  expect_refused(ckpt, {"model.embed_tokens.weight", "F8_E4M3", "unquantized"});

  const std::vector<std::pair<std::function<void(json&)>, std::vector<std::string>>> configs = {
      {[](json& c) {
         c["quantization_config"]["weight_block_size"] = {64, 64};
       },
       {"config.json", "weight_block_size", "[64,64]", "[128, 128]"}},
      {[](json& c) { c["quantization_config"]["quant_method"] = "awq"; },
       {"config.json", "quant_method", "awq"}},
      {[](json& c) { c["quantization_config"]["activation_scheme"] = "static"; },
       {"activation_scheme", "static"}},
      {[](json& c) { c["quantization_config"]["fmt"] = "e5m2"; }, {"fmt", "e5m2"}},
      {[](json& c) { c["quantization_config"].erase("weight_block_size"); },
       {"weight_block_size", "missing"}},
      {[](json& c) { c["quantization_config"]["modules_to_not_convert"] = {"model.layers.0.mlp.down_proj"}; },
       {"model.layers.0.mlp.down_proj.weight", "not converted"}},
      {[](json& c) { c["quantization_config"]["ignored_layers"] = {"layers.*.self_attn.q_proj"}; },
       {"model.layers.0.self_attn.q_proj.weight", "not converted"}},
      {[](json& c) { c.erase("quantization_config"); },
       {"model.safetensors", "model.layers.0.mlp.down_proj.weight", "F8_E4M3", "quantization_config"}},
  };
  for (const auto& [edit, parts] : configs) {
    restore();
    edit_config(ckpt, edit);
    expect_refused(ckpt, parts);
  }
}

TEST_F(Fp8Checkpoint, NotConvertedLinearStaysUnquantizedAndRunsInActDtype) {
  const std::string ckpt = make();
  const std::string down = "model.layers.1.mlp.down_proj";
  rewrite(ckpt, [&](std::vector<TensorData>& ts) {
    TensorData& w = find(ts, down + ".weight");
    w = rlp::make_tensor(w.name, DType::bf16, w.shape, std::vector<float>(160 * 200, 0.5f));
    std::erase_if(ts, [&](const TensorData& t) { return t.name == down + ".weight_scale_inv"; });
  });
  edit_config(ckpt, [&](json& c) { c["quantization_config"]["modules_to_not_convert"] = {down}; });
  const Checkpoint c = Checkpoint::open(ckpt);
  rlp::RecipeOptions ro;
  ro.fp8_checkpoint = true;
  const rlp::PreparedWeights gen = rlp::prepare_weights(c, rlp::make_recipe("fp8-gen", ro).gen);
  EXPECT_FALSE(gen.layers[1][rlp::Proj::down].fp8);  // as vLLM's UnquantizedLinearMethod
  EXPECT_TRUE(gen.layers[1][rlp::Proj::up].fp8);
}

// inspect: a checkpoint quantized in nemo-refit's convention, compared with each convention's
// requantization of its dequantized master.
TEST_F(Fp8Checkpoint, InspectComparesStoredCodesWithEachConvention) {
  const Checkpoint c = Checkpoint::open(make());
  const rlp::InspectResult r = rlp::inspect_checkpoint(c);
  ASSERT_EQ(r.tensors.size(), 14u);
  for (const auto& t : r.tensors) {
    EXPECT_EQ(t.dtype, "F8_E4M3");
    ASSERT_EQ(t.stored.size(), 8u) << t.name;
    // Recomputed independently here: codes differing from te's requantization.
    const rlp::TensorView& w = c.tensor(t.name);
    std::vector<float> master(static_cast<std::size_t>(w.numel()));
    w.to_float(master.data());
    for (const auto& s : t.stored) {
      rlp::num::ScaleOptions o;
      o.convention = s.convention;
      o.pow2 = s.pow2;
      const auto q = rlp::num::quantize_blocks(master.data(), static_cast<int>(t.rows),
                                               static_cast<int>(t.cols), 128, 128, o);
      std::size_t differ = 0;
      for (std::size_t i = 0; i < q.codes.size(); ++i) differ += q.codes[i] != w.data[i];
      EXPECT_EQ(s.codes_differ_frac, static_cast<double>(differ) / static_cast<double>(q.codes.size()))
          << t.name;
      EXPECT_GT(s.scale_ratio_min, 0.0);
      EXPECT_LE(s.scale_ratio_min, s.scale_ratio_max);
    }
    // A stored scale_inv = 1/(448/amax) of the bf16 master; the dequantized master's amax is
    // 448 x scale_inv exactly, so requantizing with the same convention (fp32 scales) reproduces
    // the block's largest code 448 and its scale.
    const rlp::StoredComparison& nemo = t.stored[3];
    ASSERT_EQ(nemo.convention, rlp::num::ScaleConvention::nemo_refit);
    EXPECT_LT(nemo.codes_differ_frac, 0.01) << t.name;
  }
  EXPECT_NE(rlp::format_inspect(r).find("stored fp8 codes vs requantized"), std::string::npos);
  // The inspect file gives the comparison back as written.
  const std::string file = (dir_ / "inspect.h5").string();
  rlp::write_inspect_file(file, r, "test", false);
  const rlp::InspectResult back = rlp::read_inspect_file(file);
  ASSERT_EQ(back.tensors.size(), r.tensors.size());
  for (std::size_t i = 0; i < r.tensors.size(); ++i) {
    ASSERT_EQ(back.tensors[i].stored.size(), r.tensors[i].stored.size());
    for (std::size_t k = 0; k < r.tensors[i].stored.size(); ++k) {
      const rlp::StoredComparison &a = r.tensors[i].stored[k], &b = back.tensors[i].stored[k];
      EXPECT_EQ(a.convention, b.convention);
      EXPECT_EQ(a.pow2, b.pow2);
      EXPECT_EQ(a.codes_differ_frac, b.codes_differ_frac);
      EXPECT_EQ(a.scales_differ_frac, b.scales_differ_frac);
      EXPECT_EQ(a.scale_ratio_min, b.scale_ratio_min);
      EXPECT_EQ(a.scale_ratio_max, b.scale_ratio_max);
    }
  }
}

TEST_F(Fp8Checkpoint, ReplayFromTheCliWithTheDefaultRecipes) {
  if (!replay_and_check(make(), "run.h5", "", R"(
import h5py, json, math, sys
f = h5py.File(sys.argv[1], "r")
assert json.loads(f.attrs["model_spec"])["quantization"]["weight_block_size"] == [128, 128]
for r in ["bf16", "fp8-gen", "fp8-e2e"]:
    s = json.loads(f["/recipes/" + r].attrs["settings"])
    text = json.dumps(s)
    if r != "bf16":
        assert '"weight-quant": "checkpoint"' in text, text
    assert all(math.isfinite(x) for x in f["/recipes/" + r + "/tokens/logp_train"][:])
print("ok")
)"))
    GTEST_SKIP() << "no h5py";
}

// llm-compressor's block fp8 (quant_method compressed-tensors, `weight_scale`): vLLM runs it through
// the same W8A8BlockFp8LinearOp as the fp8 layout, so the same codes and scales replay to the same
// bits. Written from the same master, the two checkpoints store identical bytes under two names.
TEST_F(Fp8Checkpoint, CompressedTensorsBlockFp8ReplaysAsTheFp8Layout) {
  const std::string fp8 = make();
  rlp::RandomCheckpointOptions o = options();
  o.fp8_format = "compressed-tensors";
  o.out = (dir_ / "ct").string();
  rlp::write_random_checkpoint(o);
  const Checkpoint a = Checkpoint::open(fp8), b = Checkpoint::open(o.out);
  EXPECT_EQ(b.spec().fp8.method, "compressed-tensors");
  int quantized = 0;
  for (const auto& [name, t] : a.tensors()) {
    if (t.dtype != DType::e4m3) continue;
    ++quantized;
    const rlp::TensorView& u = b.tensor(name);
    ASSERT_EQ(u.dtype, DType::e4m3) << name;
    ASSERT_EQ(0, std::memcmp(t.data, u.data, t.nbytes)) << name;
    const std::string base = name.substr(0, name.size() - 7);
    ASSERT_TRUE(b.has(base + ".weight_scale")) << name;
    EXPECT_FALSE(b.has(base + ".weight_scale_inv"));
    ASSERT_EQ(u.scale_inv, &b.tensor(base + ".weight_scale"));
    EXPECT_EQ(0, std::memcmp(t.scale_inv->data, u.scale_inv->data, t.scale_inv->nbytes)) << name;
  }
  EXPECT_EQ(quantized, 14);
  // The replays agree bit for bit on every dataset (the model_spec records the method).
  const std::string in =
      write("in.jsonl", "{\"id\": 1, \"prompt\": [1, 5, 9, 12], \"response\": [3, 7, 11]}\n");
  for (const std::string& c : {fp8, o.out}) {
    fs::create_directories(dir_ / fs::path(c).filename().string().append("_run"));
    const auto r = rlp_test::run_command(std::string(RLPARITY_CLI_PATH) + " replay -q --checkpoint " + c +
                                         " --inputs " + in + " --out " + c + "_run/x.h5");
    ASSERT_EQ(r.code, 0) << r.output;
  }
  if (std::system("/usr/bin/python3 -c 'import h5py' 2>/dev/null") != 0) GTEST_SKIP() << "no h5py";
  const auto same = rlp_test::run_command("/usr/bin/python3 " + std::string(RLPARITY_SOURCE_DIR) +
                                          "/tools/same-bits.py " + fp8 + "_run " + o.out + "_run x.h5");
  EXPECT_NE(same.output.find("/@model_spec differs"), std::string::npos) << same.output;
  EXPECT_NE(same.output.find("1 differences"), std::string::npos) << same.output;
}

TEST_F(Fp8Checkpoint, CompressedTensorsConfigsOutsideBlockFp8AreRefusedByName) {
  rlp::RandomCheckpointOptions o = options();
  o.fp8_format = "compressed-tensors";
  rlp::write_random_checkpoint(o);
  const std::string ckpt = o.out;
  auto group = [](json& c) -> json& { return c["quantization_config"]["config_groups"]["group_0"]; };
  edit_config(ckpt, [&](json& c) { group(c)["weights"]["strategy"] = "tensor"; });
  expect_refused(ckpt, {"config_groups.group_0.weights", "per-tensor fp8", "strategy tensor"});
  // Channel weights need per-token activations (the block groups' strategy group is refused).
  edit_config(ckpt, [&](json& c) { group(c)["weights"]["strategy"] = "channel"; });
  expect_refused(ckpt, {"config_groups.group_0.input_activations", "strategy token"});
  edit_config(ckpt, [&](json& c) {
    group(c)["weights"]["strategy"] = "block";
    group(c)["weights"]["block_structure"] = {64, 64};
  });
  expect_refused(ckpt, {"config_groups.group_0.weights", "block_structure [128, 128]"});
  edit_config(ckpt, [&](json& c) {
    group(c)["weights"]["block_structure"] = {128, 128};
    group(c)["input_activations"]["dynamic"] = false;
  });
  expect_refused(ckpt, {"config_groups.group_0.input_activations", "only dynamic"});
  edit_config(ckpt, [&](json& c) {
    group(c)["input_activations"]["dynamic"] = true;
    c["quantization_config"]["ignore"] = {"lm_head", "re:model\\.layers\\.1\\..*q_proj$"};
  });
  expect_refused(ckpt, {"model.layers.1.self_attn.q_proj.weight", "not converted"});
  edit_config(ckpt, [&](json& c) { c["quantization_config"]["ignore"] = {"re:(["}; });
  expect_refused(ckpt, {"quantization_config.ignore[0]", "not a valid regular expression"});
  edit_config(ckpt, [&](json& c) { c["quantization_config"]["ignore"] = {"re:(a)\\1"}; });
  expect_refused(ckpt, {"quantization_config.ignore[0]", "without back-references"});
  edit_config(ckpt, [&](json& c) { c["quantization_config"]["ignore"] = {"re:" + std::string(300, 'a')}; });
  expect_refused(ckpt, {"quantization_config.ignore[0]", "at most 256 characters"});
  // A pattern a backtracking matcher takes exponential time on runs in polynomial time.
  edit_config(ckpt,
              [&](json& c) { c["quantization_config"]["ignore"] = {"re:(.*)*(.*)*(.*)*(.*)*(.*)*X$"}; });
  EXPECT_NO_THROW((void)Checkpoint::open(ckpt));
  edit_config(ckpt, [&](json& c) { c["quantization_config"]["ignore"] = {"model.layers.0.mlp.up_proj"}; });
  expect_refused(ckpt, {"model.layers.0.mlp.up_proj.weight", "not converted"});
  edit_config(ckpt, [&](json& c) {
    c["quantization_config"]["ignore"] = {"lm_head"};
    c["quantization_config"].erase("config_groups");
  });
  expect_refused(ckpt, {"quantization_config.config_groups"});
  edit_config(ckpt, [&](json& c) {
    c["quantization_config"]["config_groups"] = {
        {"g",
         {{"weights",
           {{"num_bits", 8}, {"type", "float"}, {"strategy", "block"}, {"block_structure", {128, 128}}}},
          {"input_activations", {{"dynamic", true}}}}}};
  });
  EXPECT_NO_THROW((void)Checkpoint::open(ckpt));
  // The scales are looked up under compressed-tensors' name.
  rewrite(ckpt, [&](std::vector<TensorData>& ts) {
    ts.erase(std::remove_if(ts.begin(), ts.end(),
                            [&](const TensorData& t) { return t.name == kQ + ".weight_scale"; }),
             ts.end());
  });
  expect_refused(ckpt, {kQ + ".weight_scale", "missing"});
}

// ---- compressed-tensors per-channel fp8 (llm-compressor's FP8_DYNAMIC) ----------------------------
class Fp8ChannelCheckpoint : public Fp8Checkpoint {
 protected:
  // intermediate 224: every dim a multiple of 16 (vLLM's CUTLASS condition), 112 per rank at tp 2.
  rlp::RandomCheckpointOptions channel_options() const {
    rlp::RandomCheckpointOptions o = options();
    o.intermediate = 224;
    o.fp8_channel = true;
    o.fp8_format = "compressed-tensors";
    return o;
  }
  std::string make_channel() const {
    rlp::write_random_checkpoint(channel_options());
    return channel_options().out;
  }
};

TEST_F(Fp8ChannelCheckpoint, WriterLayoutLoadsAndDequantizesPerChannel) {
  const std::string ckpt = make_channel();
  const json cfg = json::parse(std::ifstream(ckpt + "/config.json"));
  const json& g = cfg["quantization_config"]["config_groups"]["group_0"];
  EXPECT_EQ(g["weights"]["strategy"], "channel");
  EXPECT_EQ(g["input_activations"]["strategy"], "token");
  EXPECT_EQ(g["input_activations"]["dynamic"], true);
  {
    const Checkpoint c = Checkpoint::open(ckpt);
    EXPECT_TRUE(c.spec().fp8.per_channel);
    EXPECT_TRUE(c.unused_tensors().empty());
    const rlp::TensorView& w = c.tensor(kQ + ".weight");
    ASSERT_EQ(w.dtype, DType::e4m3);
    EXPECT_EQ(w.block_rows, 1);
    EXPECT_EQ(w.block_cols, 160);
    const rlp::TensorView& sc = c.tensor(kQ + ".weight_scale");
    EXPECT_EQ(sc.dtype, DType::bf16);  // the model's dtype, as llm-compressor stores it
    EXPECT_EQ(sc.shape, (std::vector<int64_t>{160, 1}));
    // The writer's minmax rule: each row's largest |code| is 448 (amax / bf16(amax / 448) rounds there).
    for (int64_t r = 0; r < 160; ++r) {
      int top = 0;
      for (int64_t k = 0; k < 160; ++k) top = std::max(top, w.data[r * 160 + k] & 0x7F);
      ASSERT_EQ(top, 0x7E) << r;
    }
    EXPECT_EQ(c.spec().to_json()["quantization"]["weight_block_size"], "per-channel");
  }
  // Hand-worked: row 2's scale 0.375 (bf16), its code 0x3C (1.5) at column 5 -> 0.5625.
  rewrite(ckpt, [](std::vector<TensorData>& ts) {
    TensorData& w = find(ts, kQ + ".weight");
    TensorData& s = find(ts, kQ + ".weight_scale");
    w.bytes[2 * 160 + 5] = 0x3C;
    w.bytes[2 * 160 + 6] = 0xFE;  // -448
    const uint16_t b = rlp::num::float_to_bf16_bits(0.375f);
    std::memcpy(s.bytes.data() + 2 * 2, &b, 2);
  });
  const Checkpoint c = Checkpoint::open(ckpt);
  const rlp::TensorView& w = c.tensor(kQ + ".weight");
  EXPECT_EQ(w.at(2 * 160 + 5), 0.5625f);
  EXPECT_EQ(w.at(2 * 160 + 6), -168.0f);
  std::vector<double> d(static_cast<std::size_t>(w.numel()));
  w.to_double(d.data());
  EXPECT_EQ(d[2 * 160 + 5], 0.5625);
}

TEST_F(Fp8ChannelCheckpoint, CheckpointConventionKeepsCodesAndChannelScales) {
  const Checkpoint c = Checkpoint::open(make_channel());
  rlp::RecipeOptions ro;
  ro.fp8_checkpoint = true;
  const rlp::Recipe r = rlp::make_recipe("fp8-e2e", ro);
  const rlp::PreparedWeights gen = rlp::prepare_weights(c, r.gen);
  const rlp::PreparedWeights train = rlp::prepare_weights(c, r.train);
  for (int l = 0; l < 2; ++l)
    for (int p = 0; p < rlp::kNumProj; ++p) {
      const std::string base = rlp::layer_tensor_name(l, rlp::proj_tensor_suffix(static_cast<rlp::Proj>(p)));
      const rlp::TensorView& w = c.tensor(base + ".weight");
      const rlp::TensorView& s = c.tensor(base + ".weight_scale");
      const rlp::PreparedLinear& g = gen.layers[static_cast<std::size_t>(l)].proj[p];
      ASSERT_TRUE(g.fp8 && g.per_channel) << base;
      EXPECT_EQ(std::memcmp(g.wq.codes.data(), w.data, w.nbytes), 0) << base;
      ASSERT_EQ(g.wq.scale_inv.size(), static_cast<std::size_t>(g.out));
      for (int n = 0; n < g.out; ++n) ASSERT_EQ(g.wq.scale_inv[static_cast<std::size_t>(n)], s.at(n)) << base;
      // Training requantizes the dequantized master in 128x128 blocks, as for any master.
      const rlp::PreparedLinear& t = train.layers[static_cast<std::size_t>(l)].proj[p];
      EXPECT_FALSE(t.per_channel);
      EXPECT_EQ(t.wq.block_rows, 128);
    }
}

TEST_F(Fp8ChannelCheckpoint, ReplayFromTheCliIncludingTensorParallelGeneration) {
  const std::string ckpt = make_channel();
  for (const std::string extra : {"", " --gen-tp 2"}) {
    SCOPED_TRACE(extra);
    if (!replay_and_check(ckpt, extra.empty() ? "run.h5" : "tp.h5", extra, R"(
import h5py, json, math, sys
f = h5py.File(sys.argv[1], "r")
assert json.loads(f.attrs["model_spec"])["quantization"]["weight_block_size"] == "per-channel"
for r in ["fp8-gen", "fp8-e2e"]:
    s = json.dumps(json.loads(f["/recipes/" + r].attrs["settings"]))
    assert '"weight-quant": "checkpoint"' in s, s
    lp = f["/recipes/" + r + "/tokens/logp_gen"][:]
    assert all(math.isfinite(x) for x in lp)
    assert any(x != y for x, y in zip(lp, f["/recipes/bf16/tokens/logp_gen"][:]))
print("ok")
)"))
      GTEST_SKIP() << "no h5py";
  }
}

TEST_F(Fp8ChannelCheckpoint, MalformedChannelScalesAndShapesAreRefusedByName) {
  const std::string ckpt = make_channel();
  const std::string scale = kQ + ".weight_scale";
  const fs::path st = fs::path(ckpt) / "model.safetensors", st_good = dir_ / "good.safetensors";
  fs::copy_file(st, st_good);
  rewrite(ckpt, [&](std::vector<TensorData>& ts) {
    TensorData& s = find(ts, scale);
    s = rlp::make_tensor(scale, DType::bf16, {160, 2}, std::vector<float>(320, 1.0f));
  });
  expect_refused(ckpt, {scale, "[160, 2]", "[160, 1]"});
  fs::copy_file(st_good, st, fs::copy_options::overwrite_existing);
  rewrite(ckpt, [&](std::vector<TensorData>& ts) {
    TensorData& s = find(ts, scale);
    std::vector<float> v(160, 0.01f);
    v[7] = -1.0f;
    s = rlp::make_tensor(scale, DType::bf16, {160, 1}, v);
  });
  expect_refused(ckpt, {scale, "block [7, 0]", "finite and positive"});
  fs::copy_file(st_good, st, fs::copy_options::overwrite_existing);
  // Mixed schemes are refused.
  edit_config(ckpt, [](json& c) {
    json g = c["quantization_config"]["config_groups"]["group_0"];
    g["weights"]["strategy"] = "block";
    g["weights"]["block_structure"] = {128, 128};
    c["quantization_config"]["config_groups"]["group_1"] = g;
  });
  expect_refused(ckpt, {"config_groups", "mixes block and channel"});
  // A linear vLLM would send to triton_scaled_mm (a dim not a multiple of 16) is refused when the
  // generation path prepares it.
  rlp::RandomCheckpointOptions o = channel_options();
  o.intermediate = 200;
  o.out = (dir_ / "odd").string();
  rlp::write_random_checkpoint(o);
  const Checkpoint c = Checkpoint::open(o.out);
  rlp::RecipeOptions ro;
  ro.fp8_checkpoint = true;
  const rlp::Recipe r = rlp::make_recipe("fp8-gen", ro);
  const std::string msg = input_error([&] { (void)rlp::prepare_weights(c, r.gen); });
  EXPECT_NE(msg.find("model.layers.0.mlp.gate_proj.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("triton_scaled_mm"), std::string::npos) << msg;
}

}  // namespace
