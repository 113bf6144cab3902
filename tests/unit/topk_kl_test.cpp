// Top-k KL bounds (issue 17, docs/metrics.md "Top-k KL"): the construction against hand-worked
// values, the bounds bracketing the exact full-vocabulary KL on replay data where both are known
// (the generation path's own top-k against the training path's full row), and the whole flow from
// SGLang responses carrying top_logprobs to the run's engine datasets and summary attributes.
#include "rlparity/metrics/topk_kl.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "rlparity/compare/engine_dumps.hpp"
#include "rlparity/model/checkpoint.hpp"
#include "rlparity/replay/inputs.hpp"
#include "rlparity/replay/path_runner.hpp"
#include "rlparity/replay/replay.hpp"
#include "unit/scratch_test_util.hpp"

namespace rlp {
namespace {

TEST(TopkKl, BoundsByHand) {
  // Q = (0.4, 0.3, 0.2, 0.1); P's top-2: token 0 at 0.5, token 1 at 0.3; P's rest 0.2.
  const std::vector<float> q = {std::log(0.4f), std::log(0.3f), std::log(0.2f), std::log(0.1f)};
  const int32_t ids[2] = {0, 1};
  const double lp[2] = {std::log(0.5), std::log(0.3)};
  std::vector<double> scratch;
  const TopkKlBounds b = topk_kl_bounds(ids, lp, 2, q.data(), 4, scratch);
  const double q0 = std::exp(static_cast<double>(q[0])), q1 = std::exp(static_cast<double>(q[1])),
               q2 = std::exp(static_cast<double>(q[2])), q3 = std::exp(static_cast<double>(q[3]));
  const double head = 0.5 * std::log(0.5 / q0) + 0.3 * std::log(0.3 / q1);
  // Lower: the rest as one bucket. Upper: the cap is 0.5 (the second smallest listed), so all of
  // the 0.2 goes on the smallest q (token 3).
  EXPECT_NEAR(b.lower, head + 0.2 * std::log(0.2 / (q2 + q3)), 1e-12);
  EXPECT_NEAR(b.upper, head + 0.2 * std::log(0.2 / q3), 1e-12);
  // Every P consistent with the top-2 lies between: (0.2, 0), (0.1, 0.1), (0, 0.2) on tokens 2, 3.
  for (const double p2 : {0.2, 0.1, 0.0}) {
    const double p3 = 0.2 - p2;
    const double kl = head + (p2 > 0 ? p2 * std::log(p2 / q2) : 0) + (p3 > 0 ? p3 * std::log(p3 / q3) : 0);
    EXPECT_LE(b.lower, kl + 1e-12);
    EXPECT_GE(b.upper, kl - 1e-12);
  }
  // Top-1 (token 0 at 0.5): the cap is 0.5 itself; the 0.5 left fits on one token.
  const TopkKlBounds b1 = topk_kl_bounds(ids, lp, 1, q.data(), 4, scratch);
  EXPECT_NEAR(b1.upper, 0.5 * std::log(0.5 / q0) + 0.5 * std::log(0.5 / q3), 1e-12);
  // The listed mass is all of P: both bounds are the top-k terms.
  const double all[2] = {std::log(0.75), std::log(0.25)};
  const TopkKlBounds b2 = topk_kl_bounds(ids, all, 2, q.data(), 4, scratch);
  EXPECT_NEAR(b2.lower, 0.75 * std::log(0.75 / q0) + 0.25 * std::log(0.25 / q1), 1e-12);
  EXPECT_EQ(b2.lower, b2.upper);
  // Q gives a listed token zero probability: infinite.
  std::vector<float> q_zero = q;
  q_zero[1] = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(topk_kl_bounds(ids, lp, 2, q_zero.data(), 4, scratch).lower,
            std::numeric_limits<double>::infinity());
}

TEST(TopkKl, BothSidesTopKLowerBoundByHand) {
  // P: token 0 at 0.5, token 1 at 0.3; Q: token 0 at 0.4, token 2 at 0.2. Shared: token 0; the rest
  // is 0.5 of P and 0.6 of Q.
  const int32_t pid[2] = {0, 1}, qid[2] = {0, 2};
  const double plp[2] = {std::log(0.5), std::log(0.3)}, qlp[2] = {std::log(0.4), std::log(0.2)};
  EXPECT_NEAR(topk_kl_lower(pid, plp, 2, qid, qlp, 2), 0.5 * std::log(0.5 / 0.4) + 0.5 * std::log(0.5 / 0.6),
              1e-12);
  // Nothing shared: both sides are one bucket of mass 1 (1 - 0 exceeds the listed 0.8 and 0.6).
  const int32_t rid[1] = {7};
  const double rlp[1] = {std::log(0.6)};
  EXPECT_NEAR(topk_kl_lower(pid, plp, 2, rid, rlp, 1), 0.0, 1e-12);
  // compare: both sides' top-k give tokens/kl_topk_lower and its mean; one side without: NaN.
  compare::DumpSequence d;
  d.id = "s";
  d.response = {3, 4};
  d.gen_logprobs = {std::log(0.5), -1.0};
  d.train_logprobs = {std::log(0.4), -1.1};
  d.gen_top = {{{0, plp[0]}, {1, plp[1]}}, {}};
  d.train_top = {{{0, qlp[0]}, {2, qlp[1]}}, {{4, -1.1}}};
  const RunData run = compare::build_compare_run({d}, "engines", nlohmann::json::object());
  const auto& lower = run.recipes[0].tokens.at("kl_topk_lower");
  ASSERT_EQ(lower.size(), 2u);
  EXPECT_NEAR(lower[0], 0.5 * std::log(0.5 / 0.4) + 0.5 * std::log(0.5 / 0.6), 1e-12);
  EXPECT_TRUE(std::isnan(lower[1]));
  EXPECT_NEAR(run.recipes[0].summary.at("mean_kl_topk_lower"), lower[0], 1e-15);
}

const std::string kStories = std::string(RLPARITY_SOURCE_DIR) + "/fixtures/models/stories260K";

std::vector<InputSequence> inputs() {
  std::vector<InputSequence> in(3);
  in[0] = {"a", {1, 295, 369, 309}, {306, 462, 449, 362, 303, 461}, true, {}, 1, {}};
  in[1] = {"b", {1, 306, 463, 436, 448, 412, 472}, {453, 292, 295, 309, 330, 89, 164}, true, {}, 2, {}};
  in[2] = {"c", {1, 461, 390, 219, 162}, {303, 444, 339, 339, 310}, true, {}, 3, {}};
  return in;
}

// The k largest entries of a log-prob row, as (ids, logprobs).
void top_k(const float* row, int vocab, int k, std::vector<int32_t>& ids, std::vector<double>& lp) {
  std::vector<int32_t> order(static_cast<std::size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
  ids.assign(order.begin(), order.begin() + k);
  lp.clear();
  for (int32_t i : ids) lp.push_back(row[i]);
}

struct TopkKlReplay : rlp_test::ScratchDirTest {
  Checkpoint ck = Checkpoint::open(kStories);
  // The fp8-gen recipe's two paths over the inputs, full rows.
  void paths(std::vector<PathOutput<HostMat>>& gen, std::vector<PathOutput<HostMat>>& train) {
    ReplayOptions opt;
    opt.recipes = {"fp8-gen"};
    const ReplayPlan plan = make_replay_plan(ck.spec(), opt);
    const Recipe& rc = plan.recipes[0];
    wg = prepare_weights(ck, rc.gen);
    wt = prepare_weights(ck, rc.train);
    std::vector<SeqTokens> group;
    for (const auto& s : inputs()) group.push_back(seq_tokens(s));
    gen = EmulatedRunner(ck.spec(), wg, rc.gen, nullptr).run(rc.gen.mode, group, false);
    train = EmulatedRunner(ck.spec(), wt, rc.train, nullptr).run(rc.train.mode, group, false);
    // The CPU paths defer their heads: the full rows, computed as the metrics compute them.
    for (auto* outs : {&gen, &train})
      for (PathOutput<HostMat>& o : *outs) {
        HostMat rows;
        log_prob_rows(o, 0, static_cast<int>(o.head_in.rows()), rows);
        o.logprobs = std::move(rows);
      }
  }
  PreparedWeights wg, wt;
};

// The generation path's own top-k as the "engine": the bounds bracket the exact KL(gen || train)
// computed here over the whole vocabulary, for k = 1, 5 and 20.
TEST_F(TopkKlReplay, BoundsBracketTheExactKl) {
  std::vector<PathOutput<HostMat>> gen, train;
  paths(gen, train);
  const int V = ck.spec().vocab;
  std::vector<double> scratch, lp;
  std::vector<int32_t> ids;
  double width = 0;
  for (std::size_t i = 0; i < gen.size(); ++i)
    for (Eigen::Index j = 0; j < gen[i].logprobs.rows(); ++j) {
      const float* g = gen[i].logprobs.row(j).data();
      const float* t = train[i].logprobs.row(j).data();
      double exact = 0;
      for (int v = 0; v < V; ++v)
        exact +=
            std::exp(static_cast<double>(g[v])) * (static_cast<double>(g[v]) - static_cast<double>(t[v]));
      for (const int k : {1, 5, 20}) {
        top_k(g, V, k, ids, lp);
        const TopkKlBounds b = topk_kl_bounds(ids.data(), lp.data(), ids.size(), t, V, scratch);
        EXPECT_LE(b.lower, exact + 1e-9) << "sequence " << i << " token " << j << " k " << k;
        EXPECT_GE(b.upper, exact - 1e-9) << "sequence " << i << " token " << j << " k " << k;
        if (k == 20) width += b.upper - b.lower;
        // Both sides as top-k lists (compare): a lower bound still.
        std::vector<int32_t> tids;
        std::vector<double> tlp;
        top_k(t, V, k, tids, tlp);
        EXPECT_LE(topk_kl_lower(ids.data(), lp.data(), ids.size(), tids.data(), tlp.data(), tids.size()),
                  exact + 1e-9)
            << "sequence " << i << " token " << j << " k " << k;
      }
    }
  EXPECT_GT(width, 0.0);
}

// SGLang responses whose top_logprobs are the generation path's own top-5: replay stores the
// bounds per token under /recipes/<r>/engine/ and their means as engine_<side>_mean_kl_topk_*;
// against the training path they bracket the run's own kl_gen_train, against the generation path
// the lower bound is ~0.
TEST_F(TopkKlReplay, SglangTopLogprobsGiveBoundsInTheRun) {
  std::vector<PathOutput<HostMat>> gen, train;
  paths(gen, train);
  const std::vector<InputSequence> in = inputs();
  std::string lines;
  std::vector<double> lp;
  std::vector<int32_t> ids;
  for (std::size_t i = 0; i < in.size(); ++i) {
    nlohmann::json input = nlohmann::json::array(), output = nlohmann::json::array(),
                   top = nlohmann::json::array();
    for (std::size_t p = 0; p < in[i].prompt.size(); ++p)
      input.push_back({p == 0 ? nlohmann::json(nullptr) : nlohmann::json(-1.0), in[i].prompt[p], nullptr});
    for (std::size_t j = 0; j < in[i].response.size(); ++j) {
      const float* g = gen[i].logprobs.row(static_cast<Eigen::Index>(j)).data();
      output.push_back({static_cast<double>(g[in[i].response[j]]), in[i].response[j], nullptr});
      top_k(g, ck.spec().vocab, 5, ids, lp);
      nlohmann::json pos = nlohmann::json::array();
      for (std::size_t a = 0; a < ids.size(); ++a) pos.push_back({lp[a], ids[a], nullptr});
      top.push_back(pos);
    }
    nlohmann::json j = {{"text", ""},
                        {"output_ids", in[i].response},
                        {"meta_info",
                         {{"id", in[i].id},
                          {"input_token_logprobs", input},
                          {"output_token_logprobs", output},
                          {"output_top_logprobs", top}}}};
    lines += j.dump() + "\n";
  }
  const std::string path = write("sglang.jsonl", lines);
  std::vector<InputSequence> read = read_inputs_jsonl(path, ck.spec().vocab, ck.spec().max_positions);
  ASSERT_EQ(read.size(), 3u);
  ASSERT_EQ(read[1].engine_top.size(), in[1].response.size());
  ReplayOptions opt;
  opt.recipes = {"fp8-gen"};
  opt.oracle = false;
  const RunData run = run_replay(ck, read, opt);
  const RecipeResult& r = run.recipes.at(0);
  const auto& kl = r.tokens.at("kl_gen_train");
  const auto& lo = r.engine.at("kl_topk_lower_engine_train");
  const auto& hi = r.engine.at("kl_topk_upper_engine_train");
  const auto& lo_gen = r.engine.at("kl_topk_lower_engine_gen");
  ASSERT_EQ(lo.size(), kl.size());
  for (std::size_t t = 0; t < kl.size(); ++t) {
    EXPECT_LE(lo[t], kl[t] + 1e-6) << t;
    EXPECT_GE(hi[t], kl[t] - 1e-6) << t;
    EXPECT_LT(std::fabs(lo_gen[t]), 1e-5) << t;
  }
  EXPECT_LE(r.summary.at("engine_train_mean_kl_topk_lower"), r.summary.at("mean_kl_gen_train"));
  EXPECT_GE(r.summary.at("engine_train_mean_kl_topk_upper"), r.summary.at("mean_kl_gen_train"));
  // A top-k entry outside the vocabulary is refused, naming the sequence and the token.
  const std::string bad = write(
      "bad.jsonl",
      R"({"text": "", "output_ids": [5], "meta_info": {"id": "x", "input_token_logprobs": [[null, 1, null]], "output_token_logprobs": [[-0.5, 5, null]], "output_top_logprobs": [[[-0.5, 5, null], [-1.0, 99999, null]]]}})"
      "\n");
  const std::string e =
      input_error([&] { read_inputs_jsonl(bad, ck.spec().vocab, ck.spec().max_positions); });
  EXPECT_NE(e.find("top_logprobs of response token 0: token 99999 is outside the vocabulary"),
            std::string::npos)
      << e;
}

}  // namespace
}  // namespace rlp
