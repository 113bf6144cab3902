// The metric catalogue against what reads and writes the names: compute_recipe_statistics (the stored
// attributes), the gate (accepted keys, aliases, directions), and docs/metrics.md (the generated table).
#include "rlparity/metrics/metric_catalogue.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "rlparity/gate/thresholds.hpp"
#include "rlparity/metrics/statistics.hpp"

namespace {

using namespace rlp;

// Two sequences of two tokens; with `optional`, every optional token metric compute_recipe_statistics reads.
std::set<std::string> summary_names(bool optional) {
  RecipeResult r;
  r.name = "synthetic";
  r.tokens["logp_gen"] = {-0.5, -1.0, -0.25, -2.0};
  r.tokens["logp_train"] = {-0.4, -1.1, -0.3, -1.9};
  if (optional) {
    r.tokens["logp_oracle"] = {-0.45, -1.05, -0.27, -1.95};
    r.tokens["kl_gen_train"] = {0.01, 0.02, 0.01, 0.03};
    r.tokens["kl_train_gen"] = {0.01, 0.02, 0.01, 0.03};
    r.tokens["js"] = {0.005, 0.01, 0.005, 0.015};
    r.tokens["top1_agree"] = {1, 1, 0, 1};
    r.tokens["entropy_gen"] = {1.0, 2.0, 1.5, 0.5};
    r.tokens["kl_topk_lower"] = {0.005, 0.01, 0.005, 0.02};
    r.tokens["kl_topk_upper"] = {0.02, 0.05, 0.02, 0.1};
    r.routing.moe_layers = 1;  // a MoE run: one MoE layer, top-1
    r.routing.k = 1;
    r.routing.gen_experts = {0, 1, 2, 3};
    r.routing.train_experts = {0, 1, 3, 3};
  }
  compute_recipe_statistics(r, {0, 2, 4}, StatsOptions{});
  std::set<std::string> names;
  for (const auto& [k, v] : r.summary) names.insert(k);
  return names;
}

TEST(MetricCatalogue, NamesAreExactlyWhatFinalizeRecipeWrites) {
  std::set<std::string> all, always;
  for (const auto& m : metric_catalogue()) {
    EXPECT_TRUE(all.insert(m.name).second) << "duplicate " << m.name;
    if (m.needs.empty()) always.insert(m.name);
  }
  EXPECT_EQ(summary_names(true), all);
  EXPECT_EQ(summary_names(false), always);  // `needs` names the optional token metric exactly
  EXPECT_EQ(std::vector<std::string>(all.begin(), all.end()), metric_names());
}

TEST(MetricCatalogue, StoredNamesAndAliasesResolve) {
  ASSERT_NE(find_metric("ratio_mean"), nullptr);
  EXPECT_EQ(find_metric("mean_ratio"), find_metric("ratio_mean"));
  EXPECT_EQ(find_metric("p999_ratio")->name, "ratio_p999");
  EXPECT_EQ(find_metric("mean_abs_log_ratio")->name, "mean_abs_log_ratio");
  EXPECT_EQ(find_metric("no_such_statistic"), nullptr);
  std::set<std::string> every;
  for (const auto& m : metric_catalogue()) {
    EXPECT_TRUE(every.insert(m.name).second) << m.name;
    if (!m.alias.empty()) {
      EXPECT_TRUE(every.insert(m.alias).second) << "alias " << m.alias << " is taken";
    }
  }
}

TEST(MetricCatalogue, HeadlineInRankOrder) {
  EXPECT_EQ(headline_metric_names(),
            (std::vector<std::string>{"mean_abs_log_ratio", "p99_abs_log_ratio", "max_abs_log_ratio",
                                      "mean_kl_gen_train", "token_mult_prob_error", "gen_kl_error", "ess",
                                      "top1_agree_frac"}));
}

TEST(MetricCatalogue, DirectionsAsTheGateRuleBeforeTheCatalogue) {
  for (const auto& m : metric_catalogue()) {
    const std::string& s = m.name;
    MetricDirection old = MetricDirection::lower_is_better;
    if (s == "ess" || s == "rollout_is_eff_sample_size" || s == "top1_agree_frac" ||
        s == "rollout_actor_probs_pearson_corr")  // a correlation: 1 is identical
      old = MetricDirection::higher_is_better;
    else if (s == "k1" || s == "rollout_corr_kl")
      old = MetricDirection::closer_to_zero;
    else if (s.rfind("ratio_", 0) == 0)
      old = MetricDirection::closer_to_one;
    EXPECT_EQ(m.direction, old) << s;
    EXPECT_EQ(metric_direction(s), old) << s;
  }
  EXPECT_EQ(metric_direction("not_in_the_catalogue"), MetricDirection::lower_is_better);
}

TEST(MetricCatalogue, GateReadsAnAliasAsTheStoredName) {
  const gate::Thresholds th = gate::parse_thresholds(R"(
[default]
mean_ratio = { min = 0.9, max = 1.1 }
[max_regression]
p99_ratio = 0.2
)",
                                                     "alias.toml");
  EXPECT_EQ(th.defaults.bounds.count("ratio_mean"), 1u);
  EXPECT_EQ(th.defaults.max_regression.count("ratio_p99"), 1u);
  EXPECT_EQ(th.statistics_for("any"), (std::vector<std::string>{"ratio_mean", "ratio_p99"}));
}

// docs/metrics.md holds the generated table between its markers, byte for byte; on a mismatch the
// expected table is printed, to paste there.
TEST(MetricCatalogue, DocsHoldTheGeneratedTable) {
  std::ifstream in(std::string(RLPARITY_SOURCE_DIR) + "/docs/metrics.md");
  ASSERT_TRUE(in) << "cannot read docs/metrics.md";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  const std::string begin = "<!-- metric-catalogue:begin (generated: metric_catalogue_markdown()) -->\n";
  const std::string end = "<!-- metric-catalogue:end -->";
  const auto b = doc.find(begin), e = doc.find(end);
  ASSERT_NE(b, std::string::npos) << "docs/metrics.md lacks the line " << begin;
  ASSERT_NE(e, std::string::npos) << "docs/metrics.md lacks the line " << end;
  const std::string table = doc.substr(b + begin.size(), e - b - begin.size());
  EXPECT_EQ(table, metric_catalogue_markdown()) << "expected table:\n" << metric_catalogue_markdown();
  for (const auto& m : metric_catalogue())
    EXPECT_NE(table.find("`" + m.name + "`"), std::string::npos) << m.name << " is missing";
}

}  // namespace
