// Routing replay on MoE checkpoints (issue 16): the replay rule against hand-worked values, the
// routing tape a path records at every position (prefill chunks, token-by-token and layer-wise
// decode alike), a path replaying its own tape reproducing itself bit for bit, the training path
// taking exactly the generation path's ids (and weights), the run-level option and its errors,
// `--attribute routing`, and the CLI.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "rlparity/io/run_file.hpp"
#include "rlparity/model/checkpoint.hpp"
#include "rlparity/model/checkpoint_writer.hpp"
#include "rlparity/model/emulated_ops.hpp"
#include "rlparity/model/moe_routing.hpp"
#include "rlparity/replay/attribution.hpp"
#include "rlparity/replay/path_runner.hpp"
#include "rlparity/replay/replay.hpp"
#include "rlparity/util/parallel.hpp"
#include "unit/scratch_test_util.hpp"

namespace rlp {
namespace {

TEST(RoutingReplayRule, ReplayedIdsTakeTheRoutersOwnProbabilitiesOrTheReplayedWeights) {
  const double probs[4] = {0.1, 0.4, 0.3, 0.2};
  MoeReplay replay;
  replay.ids = {3, 0};  // not this router's top 2 (1, 2)
  int ids[2];
  double w[2];
  moe_route_row(probs, 4, 2, false, &replay, 0, ids, w);
  EXPECT_EQ(ids[0], 3);
  EXPECT_EQ(ids[1], 0);
  EXPECT_EQ(w[0], 0.2);  // the router's own probabilities at the replayed ids
  EXPECT_EQ(w[1], 0.1);
  moe_route_row(probs, 4, 2, true, &replay, 0, ids, w);
  EXPECT_NEAR(w[0], 2.0 / 3.0, 1e-15);  // renormalised over the replayed pair: 0.2 / 0.3
  EXPECT_NEAR(w[1], 1.0 / 3.0, 1e-15);
  // The margin of a replayed set: its smallest probability less the largest one left out.
  EXPECT_NEAR(moe_margin(probs, 4, 2, ids), 0.1 - 0.4, 1e-15);
  // ids+weights: the replayed weights verbatim, never renormalised; row 1 reads its own slots.
  replay.ids = {3, 0, 2, 1};
  replay.weights = {0.9, 0.1, 0.55, 0.45};
  moe_route_row(probs, 4, 2, true, &replay, 1, ids, w);
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], 1);
  EXPECT_EQ(w[0], 0.55);
  EXPECT_EQ(w[1], 0.45);
  // Without a replay: the top-k (and its margin p_2 - p_3).
  moe_route_row(probs, 4, 2, true, nullptr, 0, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
  EXPECT_NEAR(moe_margin(probs, 4, 2, ids), 0.3 - 0.2, 1e-15);
}

struct RoutingReplay : rlp_test::ScratchDirTest {
  Checkpoint open(bool near_tie = false) {
    RandomCheckpointOptions o;
    o.arch = "qwen3-moe";
    o.layers = 3;
    o.experts = near_tie ? 4 : 6;
    o.top_k = near_tie ? 1 : 2;
    o.router_near_tie = near_tie;
    o.out = (dir_ / "ck").string();
    write_random_checkpoint(o);
    return Checkpoint::open(o.out);
  }
  static std::vector<SeqTokens> group(int vocab) {
    std::vector<SeqTokens> g;
    for (int s = 0; s < 3; ++s) {
      SeqTokens t;
      t.prompt_len = 5 + 3 * s;
      t.response_len = 9 - 2 * s;
      for (int i = 0; i < t.prompt_len + t.response_len; ++i)
        t.tokens.push_back((s * 31 + i * 7 + 3) % vocab);
      g.push_back(t);
    }
    return g;
  }
  static std::vector<InputSequence> inputs(int vocab) {
    std::vector<InputSequence> in;
    for (int s = 0; s < 5; ++s) {
      InputSequence q;
      q.id = std::to_string(s);
      for (int t = 0; t < 30; ++t) (t < 6 + s ? q.prompt : q.response).push_back((s * 37 + t * 11) % vocab);
      q.has_response = true;
      in.push_back(q);
    }
    return in;
  }
};

// The tape holds every forward position of every MoE layer (prompt included), the same however the
// decode is evaluated, and its response rows are the choices the path reports.
TEST_F(RoutingReplay, TapeCoversEveryPositionWhateverTheDecodeEvaluation) {
  const Checkpoint ck = open();
  const ModelSpec& spec = ck.spec();
  PathStyle st = default_generation_style();
  st.moe_model = true;
  const PreparedWeights w = prepare_weights(ck, st);
  const EmulatedOps ops(spec, w, st);
  std::vector<SeqTokens> g = group(spec.vocab);
  for (auto& s : g) s.record_routing = true;
  const auto tbt = run_path_group(ops, SequenceMode::decode, g, true, true, 4, DecodeEval::token_by_token);
  const auto lw = run_path_group(ops, SequenceMode::decode, g, true, true, 0, DecodeEval::layerwise, 5);
  const auto k = static_cast<std::size_t>(spec.experts_per_tok);
  for (std::size_t i = 0; i < g.size(); ++i) {
    const RoutingTape& t = tbt[i].tape;
    ASSERT_EQ(t.k, spec.experts_per_tok);
    const auto P = static_cast<std::size_t>(g[i].prompt_len), R = static_cast<std::size_t>(g[i].response_len);
    for (std::size_t l = 0; l < static_cast<std::size_t>(spec.layers); ++l) {
      ASSERT_EQ(t.ids[l].size(), (P + R - 1) * k) << "layer " << l;
      for (int32_t e : t.ids[l]) ASSERT_TRUE(e >= 0 && e < spec.num_experts) << "a position left unrecorded";
      EXPECT_EQ(lw[i].tape.ids[l], t.ids[l]) << "sequence " << i << " layer " << l;
      EXPECT_EQ(lw[i].tape.weights[l], t.weights[l]) << "sequence " << i << " layer " << l;
      // Response row j is position P-1+j.
      const std::vector<int32_t> tail(t.ids[l].begin() + static_cast<std::ptrdiff_t>((P - 1) * k),
                                      t.ids[l].end());
      EXPECT_EQ(tail, tbt[i].experts[l]) << "sequence " << i << " layer " << l;
      for (std::size_t r = 0; r < t.weights[l].size(); r += k) {
        double sum = 0;
        for (std::size_t s = 0; s < k; ++s) sum += t.weights[l][r + s];
        ASSERT_NEAR(sum, 1.0, 1e-6);  // norm_topk_prob: the weights the combine used
      }
    }
  }
}

// A teacher-forced path replaying its own tape is itself, bit for bit (ids and ids+weights): the
// replay reads each position's own row. A tape from another path is taken verbatim.
TEST_F(RoutingReplay, OwnTapeIsTheIdentityAndAnotherPathsTapeIsTakenVerbatim) {
  const Checkpoint ck = open();
  const ModelSpec& spec = ck.spec();
  PathStyle gen = default_generation_style(), train = default_training_style();
  gen.moe_model = train.moe_model = true;
  const PreparedWeights wg = prepare_weights(ck, gen), wt = prepare_weights(ck, train);
  const EmulatedOps og(spec, wg, gen), ot(spec, wt, train);
  std::vector<SeqTokens> g = group(spec.vocab);
  for (auto& s : g) s.record_routing = true;
  const auto own = run_path_group(ot, SequenceMode::teacher_forced, g, true);
  const auto gen_out = run_path_group(og, SequenceMode::decode, g, true);
  for (bool weights : {false, true}) {
    std::vector<SeqTokens> again = g;
    for (std::size_t i = 0; i < g.size(); ++i) again[i].routing_replay = {&own[i].tape, weights};
    const auto same = run_path_group(ot, SequenceMode::teacher_forced, again, true);
    for (std::size_t i = 0; i < g.size(); ++i) {
      EXPECT_EQ(same[i].logprobs, own[i].logprobs) << "weights " << weights << " sequence " << i;
      EXPECT_EQ(same[i].tape.ids, own[i].tape.ids);
      EXPECT_EQ(same[i].tape.weights, own[i].tape.weights);
    }
    for (std::size_t i = 0; i < g.size(); ++i) again[i].routing_replay = {&gen_out[i].tape, weights};
    const auto replayed = run_path_group(ot, SequenceMode::teacher_forced, again, true);
    bool weights_differ = false, ids_differ_from_own = false;
    for (std::size_t i = 0; i < g.size(); ++i) {
      EXPECT_EQ(replayed[i].tape.ids, gen_out[i].tape.ids) << "sequence " << i;
      EXPECT_EQ(replayed[i].experts, gen_out[i].experts) << "sequence " << i;
      if (weights) {
        EXPECT_EQ(replayed[i].tape.weights, gen_out[i].tape.weights) << "sequence " << i;
      }
      weights_differ = weights_differ || replayed[i].tape.weights != gen_out[i].tape.weights;
      ids_differ_from_own = ids_differ_from_own || own[i].tape.ids != gen_out[i].tape.ids;
    }
    // ids only: the training router's fp32 probabilities weigh the experts, not the generation
    // path's bf16-logit ones.
    if (!weights) {
      EXPECT_TRUE(weights_differ);
    }
    EXPECT_TRUE(ids_differ_from_own) << "the two paths never chose differently: the test shows nothing";
  }
}

TEST_F(RoutingReplay, ReplayRemovesRouterFlipsAndIsBitIdenticalAcrossThreads) {
  const Checkpoint ck = open(/*near_tie=*/true);
  const std::vector<InputSequence> base = inputs(ck.spec().vocab);
  ReplayOptions opt;
  opt.recipes = {"bf16", "fp8-gen"};
  std::vector<InputSequence> in = base;
  const RunData off = run_replay(ck, in, opt);
  opt.routing_replay = RoutingReplayMode::ids;
  const RunData ids = run_replay(ck, in, opt);
  opt.routing_replay = RoutingReplayMode::ids_weights;
  opt.threads = 1;
  const RunData iw1 = run_replay(ck, in, opt);
  opt.threads = 2;
  const RunData iw2 = run_replay(ck, in, opt);
  for (std::size_t ri = 0; ri < 2; ++ri) {
    const RecipeResult &o = off.recipes[ri], &r = ids.recipes[ri], &w = iw1.recipes[ri];
    ASSERT_GT(o.summary.at("router_flip_frac"), 0.0) << o.name << ": no flips to remove";
    for (const RecipeResult* x : {&r, &w}) {
      EXPECT_EQ(x->routing.train_experts, x->routing.gen_experts) << x->name;
      EXPECT_EQ(x->summary.at("router_flip_frac"), 0.0) << x->name;
      EXPECT_EQ(x->settings.at("routing_replay"), x == &r ? "ids" : "ids+weights");
      // The generation path and the oracle are untouched by the replay.
      EXPECT_EQ(x->tokens.at("logp_gen"), o.tokens.at("logp_gen")) << x->name;
      EXPECT_EQ(x->routing.oracle_experts, o.routing.oracle_experts) << x->name;
      EXPECT_LT(x->summary.at("mean_abs_log_ratio"), o.summary.at("mean_abs_log_ratio")) << x->name;
    }
    EXPECT_EQ(o.settings.at("routing_replay"), "off");
    EXPECT_EQ(iw2.recipes[ri].tokens, w.tokens) << "threads 1 vs 2";
  }
}

TEST_F(RoutingReplay, RefusedWhereItCannotAct) {
  RandomCheckpointOptions o;
  o.out = (dir_ / "dense").string();
  write_random_checkpoint(o);
  const Checkpoint dense = Checkpoint::open(o.out);
  ReplayOptions opt;
  opt.routing_replay = RoutingReplayMode::ids;
  EXPECT_NE(input_error([&] { make_replay_plan(dense.spec(), opt); }).find("no MoE layers"),
            std::string::npos);
  AttributionOptions attr;
  attr.routing = true;
  EXPECT_NE(
      input_error([&] { make_replay_plan(dense.spec(), ReplayOptions{}, attr); }).find("--attribute routing"),
      std::string::npos);
  const Checkpoint moe = open();
  opt.recipes = {"bf16", "fp8-e2e"};
  opt.recipe.train_knobs = {{"mode", "decode"}};
  const std::string e = input_error([&] { make_replay_plan(moe.spec(), opt); });
  EXPECT_NE(e.find("recipe 'bf16' decodes on its training path"), std::string::npos) << e;
  EXPECT_EQ(parse_routing_replay("ids+weights"), RoutingReplayMode::ids_weights);
  EXPECT_NE(input_error([] { parse_routing_replay("weights"); }).find("expected off, ids or ids+weights"),
            std::string::npos);
}

TEST_F(RoutingReplay, AttributionReplaysEveryRecipeThreeWays) {
  const Checkpoint ck = open(/*near_tie=*/true);
  std::vector<InputSequence> in = inputs(ck.spec().vocab);
  ReplayOptions opt;
  opt.recipes = {"bf16", "fp8-e2e"};
  AttributionOptions attr;
  attr.routing = true;
  RunData run;
  run_attribution(ck, in, opt, attr, run);
  const AttributionTable& t = run.attribution.at("routing");
  ASSERT_EQ(t.labels.at("recipe"),
            (std::vector<std::string>{"bf16", "bf16", "bf16", "fp8-e2e", "fp8-e2e", "fp8-e2e"}));
  ASSERT_EQ(t.labels.at("routing_replay"),
            (std::vector<std::string>{"off", "ids", "ids+weights", "off", "ids", "ids+weights"}));
  // The "off" rows are the plain replay's divergence (without the oracle, which does not change it).
  opt.oracle = false;
  const RunData plain = run_replay(ck, in, opt);
  const auto& abs = t.values.at("mean_abs_log_ratio");
  const auto& removed = t.values.at("removed_abs_log_ratio_frac");
  for (std::size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(abs[3 * r], plain.recipes[r].summary.at("mean_abs_log_ratio"));
    EXPECT_EQ(t.values.at("router_flip_frac")[3 * r], plain.recipes[r].summary.at("router_flip_frac"));
    EXPECT_EQ(removed[3 * r], 0.0);
    for (std::size_t m = 1; m < 3; ++m) {
      EXPECT_EQ(t.values.at("router_flip_frac")[3 * r + m], 0.0);
      EXPECT_DOUBLE_EQ(removed[3 * r + m], 1.0 - abs[3 * r + m] / abs[3 * r]);
      EXPECT_GT(removed[3 * r + m], 0.0);
    }
  }
  const std::string text = format_attribution(run);
  EXPECT_NE(text.find("routing replay"), std::string::npos) << text;
  EXPECT_NE(text.find("ids+weights"), std::string::npos) << text;
}

TEST_F(RoutingReplay, CliOptionAndAttribution) {
  const Checkpoint ck = open(/*near_tie=*/true);
  std::string jsonl;
  for (const auto& s : inputs(ck.spec().vocab)) {
    nlohmann::json j = {{"id", s.id}, {"prompt", s.prompt}, {"response", s.response}};
    jsonl += j.dump() + "\n";
  }
  const std::string in = write("in.jsonl", jsonl), out = (dir_ / "run.h5").string();
  const std::string cli = std::string(RLPARITY_CLI_PATH) + " replay --checkpoint " + ck.dir() + " --inputs " +
                          in + " --recipes bf16 --no-oracle --quiet --out " + out;
  const auto r = rlp_test::run_command(cli + " --routing-replay ids --attribute routing");
  ASSERT_EQ(r.code, 0) << r.output;
  const RunData run = read_run_file(out);
  EXPECT_EQ(run.recipes.at(0).settings.at("routing_replay"), "ids");
  EXPECT_EQ(run.recipes.at(0).summary.at("router_flip_frac"), 0.0);
  ASSERT_TRUE(run.attribution.count("routing"));
  EXPECT_EQ(run.attribution.at("routing").labels.at("routing_replay").size(), 3u);
  const auto summary = rlp_test::run_command(std::string(RLPARITY_CLI_PATH) + " summary " + out);
  ASSERT_EQ(summary.code, 0) << summary.output;
  EXPECT_NE(summary.output.find("router flips (MoE, routing replay ids)"), std::string::npos)
      << summary.output;
  EXPECT_NE(summary.output.find("flipped tokens"), std::string::npos) << summary.output;
  const auto bad = rlp_test::run_command(cli + " --force --routing-replay weights");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--routing-replay"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace rlp
