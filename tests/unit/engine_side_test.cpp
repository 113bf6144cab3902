// The engine as a third side (engine_side.hpp): per-token log ratios and the pairs' summary statistics
// against a float64 computation written here, the prefixed names in the gate, and a replay whose
// inputs carry engine logprobs, end to end (run file, summary, report).
#include "rlparity/metrics/engine_side.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "rlparity/gate/thresholds.hpp"
#include "rlparity/io/run_file.hpp"
#include "rlparity/metrics/metric_catalogue.hpp"
#include "unit/scratch_test_util.hpp"

namespace rlp {
namespace {

TEST(EngineSide, PairsMatchAnIndependentFloat64Computation) {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> lp(-1.5, 0.8), eps(0.0, 0.05);
  const std::vector<int64_t> offsets = {0, 40, 55, 100};  // the second sequence has no engine logprobs
  const std::size_t n = 100;
  RecipeResult r;
  r.name = "bf16";
  std::vector<double> engine(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double o = std::min(lp(rng), -1e-3);
    r.tokens["logp_oracle"].push_back(o);
    r.tokens["logp_gen"].push_back(std::min(o + eps(rng), 0.0));
    r.tokens["logp_train"].push_back(std::min(o + eps(rng), 0.0));
    engine[i] = i >= 40 && i < 55 ? std::nan("") : std::min(o + 3 * eps(rng), 0.0);
  }
  compute_engine_statistics(r, engine, offsets, StatsOptions{});

  for (const char* side : {"gen", "train", "oracle"}) {
    const std::vector<double>& l = r.tokens.at(std::string("logp_") + side);
    const std::vector<double>& ratio = r.engine.at(std::string("log_ratio_engine_") + side);
    ASSERT_EQ(ratio.size(), n);
    long double sum_abs = 0, sum_k3 = 0, sum_mult = 0, max_abs = 0;
    std::size_t m = 0, clipped = 0, bits = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (std::isnan(engine[i])) {
        EXPECT_TRUE(std::isnan(ratio[i])) << side << " " << i;
        continue;
      }
      const long double d = static_cast<long double>(l[i]) - engine[i];
      EXPECT_EQ(ratio[i], l[i] - engine[i]);
      ++m;
      sum_abs += std::fabs(d);
      sum_k3 += std::exp(d) - 1 - d;
      sum_mult += std::exp(std::fabs(d));
      max_abs = std::max(max_abs, std::fabs(d));
      clipped += std::exp(d) < 0.8L || std::exp(d) > 1.28L;
      bits += std::memcmp(&l[i], &engine[i], sizeof(double)) != 0;  // both clamped to 0.0 can agree
    }
    const std::string p = std::string("engine_") + side + "_";
    const auto& s = r.summary;
    EXPECT_EQ(s.at(p + "num_tokens"), 85.0);
    EXPECT_EQ(s.at(p + "num_sequences"), 3.0);
    EXPECT_NEAR(s.at(p + "mean_abs_log_ratio"), static_cast<double>(sum_abs / m), 1e-15);
    EXPECT_NEAR(s.at(p + "k3"), static_cast<double>(sum_k3 / m), 1e-15);
    EXPECT_NEAR(s.at(p + "token_mult_prob_error"), static_cast<double>(sum_mult / m), 1e-14);
    EXPECT_NEAR(s.at(p + "max_abs_log_ratio"), static_cast<double>(max_abs), 1e-15);
    EXPECT_EQ(s.at(p + "ppo_clip_frac"), static_cast<double>(clipped) / static_cast<double>(m));
    EXPECT_EQ(s.at(p + "logprob_bit_mismatch"), static_cast<double>(bits) / static_cast<double>(m));
  }
  // The engine is the sampling side: k1 = mean(l_engine - l_side).
  EXPECT_LT(r.summary.at("engine_gen_mean_abs_log_ratio"), 0.2);
  // Only the tokens' own statistics: none of the recipe's unprefixed attributes were written.
  EXPECT_EQ(r.summary.count("mean_abs_log_ratio"), 0u);

  // No engine logprob at all: nothing; no logp_oracle: no oracle pair.
  RecipeResult none = r;
  none.summary.clear();
  none.engine.clear();
  compute_engine_statistics(none, std::vector<double>(n, std::nan("")), offsets, StatsOptions{});
  EXPECT_TRUE(none.engine.empty());
  EXPECT_TRUE(none.summary.empty());
  none.tokens.erase("logp_oracle");
  compute_engine_statistics(none, engine, offsets, StatsOptions{});
  EXPECT_EQ(none.engine.count("log_ratio_engine_oracle"), 0u);
  EXPECT_EQ(none.summary.count("engine_oracle_k3"), 0u);
  EXPECT_EQ(engine_comparison_rows({none}).size(), 2u);
  EXPECT_EQ(engine_comparison_rows({none})[1].name, "bf16 engine-vs-train");
}

TEST(EngineSide, GateNamesThePairsStatistics) {
  EXPECT_EQ(stored_metric_name("engine_gen_mean_abs_log_ratio"), "engine_gen_mean_abs_log_ratio");
  EXPECT_EQ(stored_metric_name("engine_train_mean_ratio"), "engine_train_ratio_mean");  // alias resolved
  EXPECT_EQ(stored_metric_name("engine_cpu_k3"), "");
  EXPECT_EQ(metric_direction("engine_oracle_ess"), MetricDirection::higher_is_better);
  const gate::Thresholds th = gate::parse_thresholds(
      "[default]\nengine_gen_mean_abs_log_ratio = { max = 0.01 }\nengine_train_mean_ratio = { min = 0.9 }\n",
      "e.toml");
  EXPECT_EQ(th.statistics_for("bf16"),
            (std::vector<std::string>{"engine_gen_mean_abs_log_ratio", "engine_train_ratio_mean"}));
  EXPECT_THROW(gate::parse_thresholds("[default]\nengine_gen_no_such = { max = 1 }\n", "e.toml"), InputError);
}

class EngineReplay : public rlp_test::ScratchDirTest {};

std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// A replay of the bundled checkpoint whose inputs carry engine logprobs (one sequence has none):
// the run file holds the engine group and attributes, summary and report show the comparison, and the
// stored ratios are the stored logprobs' differences.
TEST_F(EngineReplay, RunFileSummaryAndReportShowEngineVsEmulation) {
  const std::string in = write(
      "in.jsonl",
      R"({"id": "a", "prompt": [1, 295, 369], "response": [309, 12, 40], "logprobs": [-2.5, -3.0, -1.0]})"
      "\n"
      R"({"id": "b", "prompt": [1, 306], "response": [462, 449]})"
      "\n");
  const std::string out = (dir_ / "run.h5").string();
  const std::string cli = RLPARITY_CLI_PATH;
  auto r = rlp_test::run_command(cli + " replay -q --recipes bf16 --inputs " + in + " --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  const RunData run = read_run_file(out);
  const RecipeResult& rec = run.recipes.at(0);
  ASSERT_EQ(rec.engine.size(), 3u);
  const auto& lg = rec.tokens.at("logp_gen");
  const auto& eg = rec.engine.at("log_ratio_engine_gen");
  ASSERT_EQ(eg.size(), 5u);
  const double engine[3] = {-2.5, -3.0, -1.0};
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(eg[static_cast<std::size_t>(i)], lg[static_cast<std::size_t>(i)] - engine[i]);
  EXPECT_TRUE(std::isnan(eg[3]) && std::isnan(eg[4]));
  EXPECT_EQ(rec.summary.at("engine_oracle_num_tokens"), 3.0);
  r = rlp_test::run_command(cli + " summary " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("engine vs emulation"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bf16 engine-vs-oracle"), std::string::npos) << r.output;
  r = rlp_test::run_command(cli + " report " + out + " --markdown " + (dir_ / "r.md").string() + " -o " +
                            (dir_ / "r.html").string());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(slurp(dir_ / "r.md").find("### Engine vs emulation"), std::string::npos);
  EXPECT_NE(slurp(dir_ / "r.html").find("bf16 engine-vs-gen"), std::string::npos);
  // The gate names the pair's statistics.
  write("t.toml", "[default]\nengine_gen_max_abs_log_ratio = { max = 1e-12 }\n");
  r = rlp_test::run_command(cli + " gate " + out + " --thresholds " + (dir_ / "t.toml").string());
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("engine_gen_max_abs_log_ratio"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace rlp
