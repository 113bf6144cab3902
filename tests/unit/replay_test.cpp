// Replay engine: zero divergence for identical paths, no dead knob, fp8-with-all-layers-bf16 ==
// bf16, determinism across thread counts and runs, and the metrics it hands on.
#include "rlparity/replay/replay.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "rlparity/model/checkpoint.hpp"
#include "rlparity/model/checkpoint_writer.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/parallel.hpp"

namespace rlp {
namespace {

const std::string kStories = std::string(RLPARITY_SOURCE_DIR) + "/fixtures/models/stories260K";

const Checkpoint& stories() {
  static const Checkpoint c = Checkpoint::open(kStories);
  return c;
}

std::vector<InputSequence> small_inputs() {
  std::vector<InputSequence> in(3);
  in[0] = {"a", {1, 295, 369, 309}, {306, 462, 449, 362, 303, 461}, true, {}, 1, {}};
  in[1] = {"b", {1, 306, 463, 436, 448, 412, 472}, {453, 292, 295, 309, 330, 89, 164, 473, 330}, true, {}, 2,
           {}};
  // Long enough that split-KV partitions and attention blocks of a few positions both matter.
  in[2] = {"c",
           {1, 461, 390, 219, 162, 59, 69, 63, 461, 447, 303},
           {303, 444, 339, 339, 310, 316, 341},
           true,
           {},
           3,
           {}};
  return in;
}

RunData replay(ReplayOptions opt, std::vector<InputSequence> in = small_inputs()) {
  opt.oracle = false;
  return run_replay(stories(), in, opt);
}

double max_abs(const std::vector<double>& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// Every knob of the generation path set to the training path's value: the two paths are the same.
RecipeOptions identical_paths(const PathStyle& base) {
  RecipeOptions o;
  for (const auto& k : knob_table()) {
    o.gen_knobs.emplace_back(k.name, get_knob(base, k.name));
    o.train_knobs.emplace_back(k.name, get_knob(base, k.name));
  }
  return o;
}

// Sampling ends at any stop id: config.json's eos list and generation_config.json's eos ids. The
// checkpoint is stories260K with a generation_config.json naming the third token a first replay
// sampled; the second replay's response must end at that token's first occurrence.
TEST(Replay, SamplingStopsAtGenerationConfigEos) {
  const auto dir = std::filesystem::temp_directory_path() / ("rlp_stop_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::copy(kStories, dir, std::filesystem::copy_options::recursive);
  ReplayOptions opt;
  opt.recipes = {"bf16"};
  opt.max_new_tokens = 12;
  std::vector<InputSequence> in = {{"s", {1, 295, 369, 309}, {}, false, {}, 1, {}}};
  const RunData first = replay(opt, in);
  const std::vector<int32_t> resp(first.token_ids.begin() + first.prompt_lengths[0], first.token_ids.end());
  ASSERT_GE(resp.size(), 3u);
  const int32_t stop = resp[2];
  const auto until = static_cast<std::size_t>(std::find(resp.begin(), resp.end(), stop) - resp.begin()) + 1;
  {
    std::ofstream g(dir / "generation_config.json");
    g << "{\"eos_token_id\": [" << stop << "]}";
  }
  const Checkpoint c = Checkpoint::open(dir.string());
  opt.oracle = false;
  const RunData second = run_replay(c, in, opt);
  const std::vector<int32_t> resp2(second.token_ids.begin() + second.prompt_lengths[0],
                                   second.token_ids.end());
  EXPECT_EQ(resp2, std::vector<int32_t>(resp.begin(), resp.begin() + static_cast<std::ptrdiff_t>(until)));
  std::filesystem::remove_all(dir);
}

TEST(Replay, IdenticalPathsGiveZeroDivergence) {
  for (const char* recipe : {"bf16", "fp8-e2e"}) {
    PathStyle base = default_training_style();
    base.fp8_linear = std::string(recipe) == "fp8-e2e";
    ReplayOptions opt;
    opt.recipes = {recipe};
    opt.recipe = identical_paths(base);
    const RunData run = replay(opt);
    const RecipeResult& r = run.recipes[0];
    EXPECT_EQ(max_abs(r.tokens.at("log_ratio")), 0.0) << recipe;
    EXPECT_EQ(max_abs(r.tokens.at("kl_gen_train")), 0.0) << recipe;
    EXPECT_EQ(max_abs(r.layers.at("rel_l2_gen_train")), 0.0) << recipe;
    EXPECT_EQ(r.summary.at("ess"), 1.0) << recipe;
  }
}

// token_rel_l2 (tokens x layers): each response token's |h_gen - h_train| / |h_train| after every
// layer, recomputed here from the two paths run on their own; zero where the paths are identical.
TEST(Replay, TokenLayerDivergenceMatchesThePathsHiddenStates) {
  ReplayOptions opt;
  opt.recipes = {"fp8-gen"};
  std::vector<InputSequence> in = small_inputs();
  const RunData run = replay(opt, in);
  const RecipeResult& r = run.recipes[0];
  const ModelSpec& spec = stories().spec();
  const auto L = static_cast<std::size_t>(spec.layers);
  const std::size_t T = r.tokens.at("logp_gen").size();
  ASSERT_EQ(r.token_rel_l2.size(), T * L);
  const ReplayPlan plan = make_replay_plan(spec, opt);
  const Recipe& rc = plan.recipes[0];
  const PreparedWeights wg = prepare_weights(stories(), rc.gen), wt = prepare_weights(stories(), rc.train);
  std::vector<SeqTokens> group;
  for (const auto& s : in) group.push_back(seq_tokens(s));
  const EmulatedRunner gen(spec, wg, rc.gen, nullptr), train(spec, wt, rc.train, nullptr);
  const auto g = gen.run(rc.gen.mode, group, true), t = train.run(rc.train.mode, group, true);
  std::size_t at = 0, nonzero = 0;
  for (std::size_t i = 0; i < group.size(); ++i)
    for (int j = 0; j < group[i].response_len; ++j, ++at)
      for (std::size_t l = 0; l < L; ++l) {
        double d = 0, n = 0;
        for (int h = 0; h < spec.hidden; ++h) {
          const double a = g[i].hidden[l](j, h), b = t[i].hidden[l](j, h);
          d += (a - b) * (a - b);
          n += b * b;
        }
        const float want = static_cast<float>(std::sqrt(d / n));
        EXPECT_EQ(r.token_rel_l2[at * L + l], want) << "token " << at << " layer " << l;
        nonzero += want > 0 ? 1 : 0;
      }
  EXPECT_GT(nonzero, T * L / 2);
  // Identical paths: every entry is zero.
  PathStyle base = default_training_style();
  opt.recipes = {"bf16"};
  opt.recipe = identical_paths(base);
  const RunData same = replay(opt);
  ASSERT_EQ(same.recipes[0].token_rel_l2.size(), T * L);
  for (float v : same.recipes[0].token_rel_l2) ASSERT_EQ(v, 0.0f);
}

// Decode (prefill + one token at a time with a KV cache) against one teacher-forced pass, all other
// knobs equal and kernel selection independent of M: rows are computed independently, so equal.
TEST(Replay, DecodeEqualsTeacherForcedWhenKernelsMatch) {
  PathStyle base = default_training_style();
  ReplayOptions opt;
  opt.recipes = {"bf16"};
  opt.recipe = identical_paths(base);
  opt.recipe.gen_knobs.emplace_back("mode", "decode");
  const RunData run = replay(opt);
  EXPECT_EQ(max_abs(run.recipes[0].tokens.at("log_ratio")), 0.0);
}

// Each knob flipped alone on the generation path changes the result: no knob is dead. Many knobs
// change fp32 rounding only, which a bf16 output hides except near ties, so this runs on a wider
// generated model (K spans several 128-slices) with fp32 logits, where such differences surface.
TEST(Replay, EveryKnobChangesTheResult) {
  const auto dir = std::filesystem::temp_directory_path() / ("rlp_knobs_" + std::to_string(::getpid()));
  RandomCheckpointOptions co;
  co.arch = "llama";
  co.hidden = 384;
  co.intermediate = 768;
  co.layers = 2;
  co.heads = 6;
  co.kv_heads = 2;
  co.vocab = 512;
  co.seed = 11;
  co.out = dir.string();
  write_random_checkpoint(co);
  const Checkpoint ckpt = Checkpoint::open(dir.string());
  // The MoE knobs act on MoE checkpoints only: a small Qwen3-MoE one for them.
  RandomCheckpointOptions mo = co;
  mo.arch = "qwen3-moe";
  mo.hidden = 128;
  mo.heads = 4;
  mo.experts = 4;
  mo.top_k = 2;
  mo.out = (dir / "moe").string();
  write_random_checkpoint(mo);
  const Checkpoint moe_ckpt = Checkpoint::open(mo.out);
  std::vector<InputSequence> in(2);
  for (int s = 0; s < 2; ++s) {
    in[static_cast<std::size_t>(s)].id = std::to_string(s);
    for (int i = 0; i < 8; ++i) in[static_cast<std::size_t>(s)].prompt.push_back((i * 37 + s * 11 + 1) % 512);
    for (int i = 0; i < 24; ++i)
      in[static_cast<std::size_t>(s)].response.push_back((i * 53 + s * 7 + 5) % 512);
    in[static_cast<std::size_t>(s)].has_response = true;
  }
  const std::map<std::string, std::string> flip = {{"mode", "decode"},
                                                   {"batch", "64"},
                                                   {"batch-pad", "vllm"},
                                                   {"prefill-chunk", "3"},
                                                   {"act-dtype", "fp16"},
                                                   {"linear", "act"},
                                                   {"weight-quant", "vllm"},
                                                   {"act-quant", "vllm"},
                                                   {"pow2-scales", "on"},
                                                   {"fp8-promotion", "deepgemm"},
                                                   {"fp8-accum", "hopper"},
                                                   {"split-k", "3"},
                                                   {"k-chunk", "16"},
                                                   {"attention", "split-kv:8"},
                                                   {"attn-block", "4"},
                                                   {"attn-p-round", "off"},
                                                   {"kv-cache", "fp8"},
                                                   {"norm", "fused-add"},
                                                   {"residual", "fp32"},
                                                   {"rope-table", "rounded"},
                                                   {"mlp", "fused"},
                                                   {"logits", "bf16"},
                                                   {"tp", "2"},
                                                   {"tp-reduce", "custom-ar"},
                                                   {"logsoftmax", "gathered"},
                                                   {"moe-router-logits", "act"},
                                                   {"moe-combine", "rounded"}};
  for (const auto& k : knob_table()) {
    ASSERT_TRUE(flip.count(k.name)) << "no flip value for knob " << k.name;
    PathStyle base = default_training_style();
    base.logits_fp32 = true;
    // fp8 linears on, so the fp8 knobs act (`linear` flips them off), except for the knobs of the
    // bf16 GEMM, which fp8 linears would bypass.
    base.fp8_linear = k.name != "split-k" && k.name != "k-chunk";
    if (k.name == "mode" || k.name == "batch") base.split_k = 0;  // M-dependent kernel selection
    if (k.name == "batch") base.mode = SequenceMode::decode;
    // The tensor-parallel knobs: bf16 linears (a K shard of 384 / tp is not whole 128-wide fp8
    // blocks). tp-reduce and logsoftmax act with tp > 1: 6 ranks (with 2 the ring and the custom
    // all-reduce make the same single add).
    if (k.name == "tp" || knob_needs_tp(k.name)) base.fp8_linear = false;
    if (knob_needs_tp(k.name)) base.tp = 6;
    // batch-pad and prefill-chunk act in decode mode, on the M of the all-reduce message with tp 6
    // (the padded batch, each chunk's rows): padding 3 to 4 or cutting the prompt of 8 into 3 + 3 + 2
    // crosses no boundary of the auto split-K (16 and 64, both captured sizes), so the all-reduce's
    // chunking is where they show here (BatchPadIsVllmCapturedSizes checks the padded M itself).
    if (k.name == "batch-pad" || k.name == "prefill-chunk") {
      base.mode = SequenceMode::decode;
      base.fp8_linear = false;
      base.tp = 6;
    }
    if (k.name == "batch-pad") base.batch = 3;
    const bool moe_knob = k.name.rfind("moe-", 0) == 0;
    if (moe_knob) base.fp8_linear = false;
    ReplayOptions opt;
    opt.recipes = {"bf16"};
    opt.oracle = false;
    opt.recipe = identical_paths(base);
    opt.recipe.gen_knobs.emplace_back(k.name, flip.at(k.name));
    EXPECT_NE(get_knob(base, k.name), flip.at(k.name)) << k.name;
    auto inputs = in;
    const RunData run = run_replay(moe_knob ? moe_ckpt : ckpt, inputs, opt);
    EXPECT_GT(max_abs(run.recipes[0].tokens.at("log_ratio")), 0.0) << "knob " << k.name << " is dead";
  }
  std::filesystem::remove_all(dir);
}

// vLLM's captured CUDA-graph sizes and the decode M that batch-pad vllm gives kernel selection.
TEST(Replay, BatchPadIsVllmCapturedSizes) {
  const std::vector<std::pair<int, int>> want = {
      {1, 1},   {2, 2},     {3, 4},     {4, 4},     {5, 8},     {9, 16},    {16, 16},   {17, 24},    {63, 64},
      {65, 72}, {248, 248}, {249, 256}, {257, 272}, {500, 512}, {512, 512}, {513, 513}, {4096, 4096}};
  for (const auto& [b, m] : want) {
    EXPECT_EQ(vllm_cudagraph_size(b), m) << b;
    PathStyle s = default_generation_style();
    set_knob(s, "batch", std::to_string(b));
    EXPECT_EQ(s.decode_m(), m) << b;
    set_knob(s, "batch-pad", "none");
    EXPECT_EQ(s.decode_m(), b) << b;
  }
  // The auto split-K's boundaries (16, 64) are captured sizes: padding never crosses them today.
  PathStyle s = default_generation_style();
  for (int b = 1; b <= 600; ++b)
    EXPECT_EQ(s.gemm_config(b, 4096).split_k, s.gemm_config(vllm_cudagraph_size(b), 4096).split_k) << b;
  // The default (vllm) pads nothing at batch 1: not recorded in a run file, as before the knob.
  EXPECT_EQ(get_knob(default_generation_style(), "batch-pad"), "vllm");
  EXPECT_FALSE(default_generation_style().to_json().contains("batch-pad"));
  EXPECT_FALSE(default_generation_style().to_json().contains("prefill-chunk"));
  set_knob(s, "batch", "3");
  EXPECT_EQ(s.to_json().at("batch-pad"), "vllm");
  set_knob(s, "prefill-chunk", "64");
  EXPECT_EQ(s.to_json().at("prefill-chunk"), "64");
  // Neither acts on a teacher-forced path.
  PathStyle t = default_training_style();
  set_knob(t, "batch", "3");
  set_knob(t, "batch-pad", "vllm");
  set_knob(t, "prefill-chunk", "4");
  EXPECT_TRUE(knob_inert(t, "batch-pad"));
  EXPECT_TRUE(knob_inert(t, "prefill-chunk"));
  EXPECT_THROW(set_knob(t, "batch-pad", "graphs"), InputError);
  EXPECT_THROW(set_knob(t, "prefill-chunk", "-1"), InputError);
}

// Chunked prefill: a chunk at least the prompt's length is no chunking; with kernels that do not
// depend on M every chunk size gives the same bits (each row attends to the cached positions and
// itself exactly as in one call), decode steps after it included; with the auto split-K a chunk of
// 4 rows picks another split than the 40-row prompt and changes the result.
TEST(Replay, ChunkedPrefill) {
  std::vector<InputSequence> in = small_inputs();
  InputSequence longer;
  longer.id = "long";
  for (int i = 0; i < 40; ++i) longer.prompt.push_back(i == 0 ? 1 : (i * 37 + 5) % 512);
  for (int i = 0; i < 6; ++i) longer.response.push_back((i * 53 + 7) % 512);
  longer.has_response = true;
  in.push_back(longer);
  auto run_with = [&](const std::string& chunk, const std::string& split_k) {
    ReplayOptions opt;
    opt.recipes = {"bf16"};
    opt.recipe.gen_knobs = {{"prefill-chunk", chunk}, {"split-k", split_k}};
    return replay(opt, in).recipes[0].tokens.at("logp_gen");
  };
  const std::vector<double> whole = run_with("0", "auto");
  EXPECT_EQ(run_with("40", "auto"), whole);
  EXPECT_EQ(run_with("1000", "auto"), whole);
  EXPECT_NE(run_with("4", "auto"), whole);
  const std::vector<double> fixed = run_with("0", "2");
  for (const char* chunk : {"1", "3", "4", "16"}) EXPECT_EQ(run_with(chunk, "2"), fixed) << chunk;
}

TEST(Replay, Fp8WithAllLayersKeptInBf16EqualsBf16) {
  ReplayOptions opt;
  opt.recipes = {"bf16", "fp8-e2e", "fp8-gen"};
  opt.recipe.bf16_first_layers = stories().spec().layers;
  const RunData run = replay(opt);
  for (const auto& [name, values] : run.recipes[0].tokens) {
    EXPECT_EQ(values, run.recipes[1].tokens.at(name)) << name;
    EXPECT_EQ(values, run.recipes[2].tokens.at(name)) << name;
  }
  // And with fp8 layers left, it differs.
  opt.recipe.bf16_first_layers = 1;
  const RunData partial = replay(opt);
  EXPECT_NE(partial.recipes[0].tokens.at("logp_gen"), partial.recipes[1].tokens.at("logp_gen"));
}

// Teacher-forced paths reading one form: groups of one sequence per worker, blocks of one group, the
// form kept across blocks. Three thread counts give three groupings and the same bits.
TEST(Replay, TeacherForcedOneFormReplaysAreBitIdenticalAcrossGroupings) {
  ReplayOptions opt;
  opt.recipes = {"bf16"};
  opt.recipe.gen_knobs = {{"mode", "teacher-forced"}};
  opt.oracle = true;
  std::vector<RunData> runs;
  for (int threads : {1, 2, 3}) {
    opt.threads = threads;
    auto in = small_inputs();
    runs.push_back(run_replay(stories(), in, opt));
    EXPECT_EQ(runs.back().extra.at("resources").at("weight_forms_prepared"), 1) << threads;
  }
  set_thread_count(0);
  for (const RunData* run : {&runs[1], &runs[2]}) {
    EXPECT_EQ(runs[0].recipes[0].tokens, run->recipes[0].tokens);
    EXPECT_EQ(runs[0].recipes[0].layers, run->recipes[0].layers);
    EXPECT_EQ(runs[0].recipes[0].summary, run->recipes[0].summary);
  }
}

TEST(Replay, BitIdenticalAcrossThreadCountsAndRuns) {
  ReplayOptions opt;
  opt.recipes = {"bf16", "fp8-gen", "fp8-e2e-kv"};
  opt.oracle = true;
  std::vector<InputSequence> in = small_inputs();
  in[1].has_response = false;  // sampled: must be deterministic too
  in[1].response.clear();
  opt.max_new_tokens = 6;
  set_thread_count(1);
  auto in1 = in;
  const RunData a = run_replay(stories(), in1, opt);
  set_thread_count(2);
  auto in2 = in;
  const RunData b = run_replay(stories(), in2, opt);
  auto in3 = in;
  const RunData c = run_replay(stories(), in3, opt);
  set_thread_count(0);
  EXPECT_EQ(a.token_ids, b.token_ids);
  ASSERT_EQ(a.recipes.size(), b.recipes.size());
  for (std::size_t r = 0; r < a.recipes.size(); ++r) {
    for (const auto* run : {&b, &c}) {
      EXPECT_EQ(a.recipes[r].tokens, run->recipes[r].tokens);
      EXPECT_EQ(a.recipes[r].sequences, run->recipes[r].sequences);
      EXPECT_EQ(a.recipes[r].layers, run->recipes[r].layers);
      EXPECT_EQ(a.recipes[r].summary, run->recipes[r].summary);
    }
  }
}

// The oracle inside replay reproduces an independent float64 forward of the original llama2.c
// file (tests/reference/llama2c_reference.py, interleaved RoPE, numpy), run once to produce these.
TEST(Replay, OracleMatchesIndependentReference) {
  std::vector<InputSequence> in(1);
  in[0] = {"x", {1, 295, 369, 309}, {306, 462, 449, 362, 303, 461, 390, 219, 162, 59, 69, 63}, true, {}, 1,
           {}};
  ReplayOptions opt;
  opt.recipes = {"bf16"};
  const RunData run = run_replay(stories(), in, opt);
  const double want[] = {-10.31244157, -6.83746725, -10.82314505, -6.63690887, -4.98014187, -9.77711333,
                         -7.31333868,  -7.92554423, -8.44215147,  -5.96090311, -5.46119193, -6.12275657};
  const auto& got = run.recipes[0].tokens.at("logp_oracle");
  ASSERT_EQ(got.size(), std::size(want));
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-8) << i;
}

TEST(Replay, RejectsBadOptions) {
  ReplayOptions opt;
  opt.recipes = {"fp4"};
  EXPECT_THROW(replay(opt), InputError);
  opt.recipes = {"bf16"};
  opt.recipe.gen_knobs = {{"attention", "ring"}};
  EXPECT_THROW(replay(opt), InputError);
  opt.recipe.gen_knobs = {{"no-such-knob", "1"}};
  EXPECT_THROW(replay(opt), InputError);
  opt.recipe.gen_knobs.clear();
  opt.recipes = {"fp8-e2e"};
  opt.recipe.bf16_first_layers = 4;
  opt.recipe.bf16_last_layers = 4;
  EXPECT_THROW(replay(opt), InputError);
}

}  // namespace
}  // namespace rlp
