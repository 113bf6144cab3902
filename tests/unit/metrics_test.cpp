// Metric formulas (DESIGN section 5, docs/metrics.md) against hand-computed values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numbers>
#include <random>

#include "rlparity/metrics/statistics.hpp"
#include "rlparity/metrics/summary_table.hpp"
#include "rlparity/metrics/token_metrics.hpp"
#include "rlparity/util/error.hpp"

namespace rlp {
namespace {

constexpr double kLn2 = std::numbers::ln2;

TEST(FullVocabStats, TwoTokenHandComputed) {
  // p_g = (1/2, 1/2), p_t = (1/4, 3/4).
  // KL(g||t) = 1/2 ln(2) + 1/2 ln(2/3) = 1/2 ln(4/3)
  // KL(t||g) = 1/4 ln(1/2) + 3/4 ln(3/2)
  // H(g) = ln 2; m = (3/8, 5/8)
  // JS = 1/2 [1/2 ln(4/3) + 1/2 ln(4/5)] + 1/2 [1/4 ln(2/3) + 3/4 ln(6/5)]
  const float lg[2] = {std::log(0.5f), std::log(0.5f)};
  const float lt[2] = {std::log(0.25f), std::log(0.75f)};
  const FullVocabStats s = full_vocab_stats(lg, lt, 2);
  EXPECT_NEAR(s.kl_gen_train, 0.5 * std::log(4.0 / 3.0), 1e-7);
  EXPECT_NEAR(s.kl_train_gen, 0.25 * std::log(0.5) + 0.75 * std::log(1.5), 1e-7);
  EXPECT_NEAR(s.entropy_gen, kLn2, 1e-7);
  EXPECT_NEAR(s.js,
              0.5 * (0.5 * std::log(4.0 / 3.0) + 0.5 * std::log(0.8)) +
                  0.5 * (0.25 * std::log(2.0 / 3.0) + 0.75 * std::log(1.2)),
              1e-7);
  EXPECT_EQ(s.top1_gen, 0);  // tie -> lowest index
  EXPECT_EQ(s.top1_train, 1);
  EXPECT_FALSE(s.top1_agree);
}

TEST(FullVocabStats, IdenticalIsExactlyZero) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.f, 3.f);
  std::vector<float> x(512);
  double mx = -1e30;
  for (auto& v : x) {
    v = nd(rng);
    mx = std::max(mx, static_cast<double>(v));
  }
  double z = 0;
  for (auto v : x) z += std::exp(v - mx);
  for (auto& v : x) v = static_cast<float>(v - mx - std::log(z));
  const FullVocabStats s = full_vocab_stats(x.data(), x.data(), 512);
  EXPECT_EQ(s.kl_gen_train, 0.0);
  EXPECT_EQ(s.kl_train_gen, 0.0);
  EXPECT_EQ(s.js, 0.0);
  EXPECT_TRUE(s.top1_agree);
}

// Independent float64 reference: softmax-normalised probabilities from the log-probs and a plain loop.
TEST(FullVocabStats, MatchesIndependentFloat64Loop) {
  std::mt19937 rng(1234);
  std::normal_distribution<double> nd(0.0, 2.0);
  const int V = 5000;
  for (int trial = 0; trial < 5; ++trial) {
    std::vector<double> a(V), b(V);
    for (int v = 0; v < V; ++v) {
      a[v] = nd(rng);
      b[v] = a[v] + 0.05 * nd(rng);
    }
    auto lsm = [](std::vector<double>& x) {
      double m = *std::max_element(x.begin(), x.end()), z = 0;
      for (double v : x) z += std::exp(v - m);
      for (double& v : x) v = v - m - std::log(z);
    };
    lsm(a);
    lsm(b);
    std::vector<float> fa(V), fb(V);
    for (int v = 0; v < V; ++v) {
      fa[v] = static_cast<float>(a[v]);
      fb[v] = static_cast<float>(b[v]);
    }
    long double kl = 0, klr = 0, h = 0, js = 0;
    int ag = 0, at = 0;
    for (int v = 0; v < V; ++v) {
      const long double pa = std::exp(static_cast<long double>(fa[v]));
      const long double pb = std::exp(static_cast<long double>(fb[v]));
      kl += pa * (static_cast<long double>(fa[v]) - fb[v]);
      klr += pb * (static_cast<long double>(fb[v]) - fa[v]);
      h -= pa * fa[v];
      const long double lm = std::log((pa + pb) / 2);
      js += 0.5L * pa * (fa[v] - lm) + 0.5L * pb * (fb[v] - lm);
      if (fa[v] > fa[ag]) ag = v;
      if (fb[v] > fb[at]) at = v;
    }
    const FullVocabStats s = full_vocab_stats(fa.data(), fb.data(), V);
    EXPECT_NEAR(s.kl_gen_train, static_cast<double>(kl), 1e-12 * std::max(1.0, static_cast<double>(kl)));
    EXPECT_NEAR(s.kl_train_gen, static_cast<double>(klr), 1e-12 * std::max(1.0, static_cast<double>(klr)));
    EXPECT_NEAR(s.entropy_gen, static_cast<double>(h), 1e-11);
    EXPECT_NEAR(s.js, static_cast<double>(js), 1e-12 * std::max(1.0, static_cast<double>(js)));
    EXPECT_GT(s.kl_gen_train, 0.0);
    EXPECT_GE(s.js, 0.0);
    EXPECT_LE(s.js, kLn2);
    EXPECT_EQ(s.top1_gen, ag);
    EXPECT_EQ(s.top1_train, at);
  }
}

TEST(FullVocabStats, ZeroProbabilityTermsAreZero) {
  const float ninf = -INFINITY;
  const float lg[3] = {0.0f, ninf, ninf};  // p_g = (1, 0, 0)
  const float lt[3] = {std::log(0.5f), std::log(0.5f), ninf};
  const FullVocabStats s = full_vocab_stats(lg, lt, 3);
  EXPECT_NEAR(s.kl_gen_train, kLn2, 1e-7);  // 1 * ln(1/0.5)
  EXPECT_TRUE(std::isinf(s.kl_train_gen));  // p_t(1) > 0 where p_g(1) = 0
  EXPECT_EQ(s.entropy_gen, 0.0);
  EXPECT_FALSE(std::isnan(s.js));
}

TEST(Percentiles, NearestRankOnKnownData) {
  std::vector<double> a;
  for (int i = 1; i <= 10; ++i) a.push_back(i);
  EXPECT_EQ(percentile_nearest_rank(a, 500), 5.0);   // ceil(0.5*10) = 5
  EXPECT_EQ(percentile_nearest_rank(a, 900), 9.0);   // ceil(0.9*10) = 9
  EXPECT_EQ(percentile_nearest_rank(a, 990), 10.0);  // ceil(9.9) = 10
  EXPECT_EQ(percentile_nearest_rank(a, 999), 10.0);
  EXPECT_EQ(percentile_nearest_rank(a, 0), 1.0);  // clamped to rank 1
  EXPECT_EQ(percentile_nearest_rank(a, 1000), 10.0);
  std::vector<double> b;
  for (int i = 1; i <= 1000; ++i) b.push_back(i);
  EXPECT_EQ(percentile_nearest_rank(b, 500), 500.0);
  EXPECT_EQ(percentile_nearest_rank(b, 990), 990.0);
  EXPECT_EQ(percentile_nearest_rank(b, 999), 999.0);
  EXPECT_EQ(percentile_nearest_rank(std::vector<double>{3.0}, 500), 3.0);
  EXPECT_TRUE(std::isnan(percentile_nearest_rank({}, 500)));

  // describe() sorts; population std.
  const Distribution d = describe({4.0, 1.0, 3.0, 2.0});
  EXPECT_EQ(d.mean, 2.5);
  EXPECT_NEAR(d.std, std::sqrt(1.25), 1e-15);  // (2.25+0.25+0.25+2.25)/4
  EXPECT_EQ(d.min, 1.0);
  EXPECT_EQ(d.max, 4.0);
  EXPECT_EQ(d.p50, 2.0);  // rank ceil(2) = 2
  EXPECT_EQ(d.p90, 4.0);  // rank ceil(3.6) = 4
  const Distribution n = describe({1.0, NAN});
  EXPECT_TRUE(std::isnan(n.max));
  EXPECT_TRUE(std::isnan(n.p50));
}

// Hand example: lg = ln(1/4, 1/2, 1/2), lt = ln(1/2, 1/2, 1/4)
//   d = lt - lg = (ln2, 0, -ln2), r = (2, 1, 1/2), |d| = (ln2, 0, ln2) (a = ln2 below)
//   sequences: {0,1} and {2}.
RecipeResult hand_recipe() {
  RecipeResult r;
  r.name = "hand";
  r.tokens["logp_gen"] = {std::log(0.25), std::log(0.5), std::log(0.5)};
  r.tokens["logp_train"] = {std::log(0.5), std::log(0.5), std::log(0.25)};
  r.tokens["logp_oracle"] = {std::log(0.5), std::log(0.5), std::log(0.5)};
  r.tokens["kl_gen_train"] = {0.1, 0.2, 0.3};
  r.tokens["kl_train_gen"] = {0.3, 0.1, 0.2};
  r.tokens["top1_agree"] = {1, 0, 1};
  r.tokens["entropy_gen"] = {1, 2, 3};
  r.tokens["js"] = {0.01, 0.02, 0.03};
  return r;
}

TEST(FinalizeRecipe, HandComputedTokenAndSequenceValues) {
  RecipeResult r = hand_recipe();
  compute_recipe_statistics(r, {0, 2, 3}, StatsOptions{});
  const double a = kLn2, e = 1e-12;
  const auto& t = r.tokens;
  EXPECT_NEAR(t.at("log_ratio")[0], a, e);
  EXPECT_NEAR(t.at("log_ratio")[1], 0, e);
  EXPECT_NEAR(t.at("log_ratio")[2], -a, e);
  EXPECT_NEAR(t.at("abs_log_ratio")[2], a, e);
  EXPECT_NEAR(t.at("ratio")[0], 2, e);
  EXPECT_NEAR(t.at("ratio")[2], 0.5, e);
  EXPECT_NEAR(t.at("prob_diff")[0], 0.25, e);  // |1/2 - 1/4|
  EXPECT_NEAR(t.at("prob_diff")[1], 0, e);
  EXPECT_NEAR(t.at("k3")[0], 1 - a, e);           // 2 - 1 - ln2
  EXPECT_NEAR(t.at("k3")[2], a - 0.5, e);         // 1/2 - 1 + ln2
  EXPECT_NEAR(t.at("gen_err_oracle")[0], -a, e);  // ln(1/4) - ln(1/2)
  EXPECT_NEAR(t.at("train_err_oracle")[2], -a, e);
  EXPECT_NEAR(t.at("train_err_oracle")[0], 0, e);

  const auto& s = r.sequences;
  EXPECT_EQ(s.at("length"), (std::vector<double>{2, 1}));
  EXPECT_NEAR(s.at("sum_log_ratio")[0], a, e);
  EXPECT_NEAR(s.at("sum_log_ratio")[1], -a, e);
  EXPECT_NEAR(s.at("geo_mean_ratio")[0], std::sqrt(2.0), e);  // exp(ln2 / 2)
  EXPECT_NEAR(s.at("geo_mean_ratio")[1], 0.5, e);
  EXPECT_NEAR(s.at("max_abs_log_ratio")[0], a, e);
  EXPECT_NEAR(s.at("mean_abs_log_ratio")[0], a / 2, e);
  EXPECT_NEAR(s.at("mean_kl_gen_train")[0], 0.15, e);
  EXPECT_NEAR(s.at("mean_kl_gen_train")[1], 0.3, e);
  EXPECT_NEAR(s.at("seq_mult_prob_error")[0], 1.5, e);  // (e^ln2 + e^0)/2
  EXPECT_NEAR(s.at("seq_mult_prob_error")[1], 2.0, e);
  EXPECT_NEAR(s.at("ppl_gen")[0], std::sqrt(8.0), e);  // exp(-(ln 1/4 + ln 1/2)/2)
  EXPECT_NEAR(s.at("ppl_train")[0], 2.0, e);
  EXPECT_NEAR(s.at("ppl_gen")[1], 2.0, e);
  EXPECT_NEAR(s.at("ppl_train")[1], 4.0, e);
}

TEST(FinalizeRecipe, HandComputedSummary) {
  RecipeResult r = hand_recipe();
  compute_recipe_statistics(r, {0, 2, 3}, StatsOptions{});
  const auto& m = r.summary;
  const double a = kLn2, e = 1e-12;
  EXPECT_NEAR(m.at("mean_abs_log_ratio"), 2 * a / 3, e);
  EXPECT_NEAR(m.at("std_abs_log_ratio"), a * std::sqrt(2.0) / 3, e);  // var = 2a^2/9
  EXPECT_EQ(m.at("min_abs_log_ratio"), 0.0);
  EXPECT_NEAR(m.at("max_abs_log_ratio"), a, e);
  EXPECT_NEAR(m.at("p50_abs_log_ratio"), a, e);  // sorted (0, a, a), rank ceil(1.5) = 2
  EXPECT_NEAR(m.at("p99_abs_log_ratio"), a, e);
  EXPECT_NEAR(m.at("p999_abs_log_ratio"), a, e);
  EXPECT_NEAR(m.at("mean_kl_gen_train"), 0.2, e);
  EXPECT_NEAR(m.at("max_kl_gen_train"), 0.3, e);
  EXPECT_NEAR(m.at("p50_kl_gen_train"), 0.2, e);
  EXPECT_NEAR(m.at("min_kl_train_gen"), 0.1, e);
  EXPECT_NEAR(m.at("mean_kl_train_gen"), 0.2, e);
  EXPECT_NEAR(m.at("ratio_mean"), 7.0 / 6, e);
  EXPECT_NEAR(m.at("ratio_std"), std::sqrt(14.0) / 6, e);  // devs 5/6, -1/6, -2/3
  EXPECT_NEAR(m.at("ratio_min"), 0.5, e);
  EXPECT_NEAR(m.at("ratio_max"), 2.0, e);
  EXPECT_NEAR(m.at("ratio_p50"), 1.0, e);
  EXPECT_NEAR(m.at("ess"), 7.0 / 9, e);      // 3.5^2 / (3 * 5.25)
  EXPECT_EQ(m.at("tis_clip_frac"), 0.0);     // r > 2: none (2 is not > 2)
  EXPECT_EQ(m.at("mis_mask_frac"), 0.0);     // all inside [1/2, 2]
  EXPECT_NEAR(m.at("chi2_token"), 0.75, e);  // (4 + 1 + 1/4)/3 - 1
  EXPECT_NEAR(m.at("chi2_seq"), 1.125, e);   // w = (2, 1/2): (4 + 1/4)/2 - 1
  EXPECT_NEAR(m.at("k1"), 0.0, e);
  EXPECT_NEAR(m.at("k2"), a * a / 3, e);                   // mean(0.5 d^2) = 0.5 * 2a^2 / 3
  EXPECT_NEAR(m.at("k3"), 1.0 / 6, e);                     // (1 - a + 0 + a - 1/2)/3
  EXPECT_NEAR(m.at("token_mult_prob_error"), 5.0 / 3, e);  // (2 + 1 + 2)/3
  EXPECT_NEAR(m.at("gen_kl_error"), 1.0 / 6, e);
  EXPECT_NEAR(m.at("policy_kl_error"), 1.0 / 6, e);  // symmetric example
  EXPECT_NEAR(m.at("js_divergence_error"), 0.02, e);
  EXPECT_NEAR(m.at("seq_mult_prob_error"), 1.75, e);  // (1.5 + 2)/2
  EXPECT_EQ(m.at("rollout_corr_kl"), m.at("k1"));
  EXPECT_EQ(m.at("k3_kl"), m.at("k3"));
  EXPECT_EQ(m.at("mismatch_kl"), m.at("k3"));
  EXPECT_EQ(m.at("rollout_is_eff_sample_size"), m.at("ess"));
  EXPECT_EQ(m.at("train_rollout_logprob_abs_diff"), m.at("mean_abs_log_ratio"));
  EXPECT_NEAR(m.at("rollout_probs_diff_mean"), 1.0 / 6, e);  // (1/4 + 0 + 1/4)/3
  EXPECT_NEAR(m.at("rollout_probs_diff_max"), 0.25, e);
  EXPECT_NEAR(m.at("rollout_probs_diff_std"), std::sqrt(1.0 / 48), e);  // unbiased: (1/24)/2
  EXPECT_NEAR(m.at("top1_agree_frac"), 2.0 / 3, e);
  EXPECT_NEAR(m.at("mean_entropy_gen"), 2.0, e);
  EXPECT_EQ(m.at("num_tokens"), 3.0);
  EXPECT_EQ(m.at("num_sequences"), 2.0);
  EXPECT_NEAR(m.at("mean_abs_gen_err_oracle"), a / 3, e);
  EXPECT_NEAR(m.at("mean_abs_train_err_oracle"), a / 3, e);
}

TEST(FinalizeRecipe, IsCapFractionsAndAsymmetricKlErrors) {
  RecipeResult r = hand_recipe();
  compute_recipe_statistics(r, {0, 3}, StatsOptions{1.5});
  EXPECT_NEAR(r.summary.at("tis_clip_frac"), 1.0 / 3, 1e-15);  // r = 2 > 1.5
  EXPECT_NEAR(r.summary.at("mis_mask_frac"), 2.0 / 3, 1e-15);  // 2 and 1/2 outside [2/3, 3/2]

  // One token, d = lt - lg = ln2: gen_kl_error = 2 - 1 - ln2; policy_kl_error = 1/2 - 1 + ln2.
  RecipeResult one;
  one.tokens["logp_gen"] = {std::log(0.25)};
  one.tokens["logp_train"] = {std::log(0.5)};
  compute_recipe_statistics(one, {0, 1}, StatsOptions{});
  EXPECT_NEAR(one.summary.at("gen_kl_error"), 1 - kLn2, 1e-12);
  EXPECT_NEAR(one.summary.at("policy_kl_error"), kLn2 - 0.5, 1e-12);
  EXPECT_NEAR(one.summary.at("k1"), -kLn2, 1e-12);
  EXPECT_EQ(one.summary.count("mean_kl_gen_train"), 0u);  // no KL token metric -> omitted
  EXPECT_EQ(one.summary.count("js_divergence_error"), 0u);
  EXPECT_EQ(one.summary.count("mean_abs_gen_err_oracle"), 0u);
  EXPECT_EQ(one.tokens.count("gen_err_oracle"), 0u);
  EXPECT_TRUE(std::isnan(one.summary.at("rollout_probs_diff_std")));  // n - 1 = 0
}

// The RL-impact statistics against a float64 computation written here from their definitions
// (docs/metrics.md): counts by direct comparison of r = exp(lt - lg) with each band, Pearson's r by
// the one-pass textbook formula in long double, bit mismatches by comparing the doubles' bytes.
TEST(FinalizeRecipe, RlImpactStatisticsMatchAnIndependentFloat64Computation) {
  std::mt19937_64 rng(17);
  std::normal_distribution<double> logp(-2.0, 1.0), noise(0.0, 0.25);
  const std::size_t n = 4000;
  RecipeResult r;
  std::vector<double>& lg = r.tokens["logp_gen"];
  std::vector<double>& lt = r.tokens["logp_train"];
  for (std::size_t i = 0; i < n; ++i) {
    const double g = std::min(logp(rng), -1e-3);
    lg.push_back(g);
    // A third of the tokens bitwise equal, a tenth one ulp apart, the rest noisy.
    lt.push_back(i % 3 == 0 ? g : i % 10 == 1 ? std::nextafter(g, 0.0) : std::min(g + noise(rng), -1e-4));
  }
  const std::vector<double> g = lg, t = lt;
  StatsOptions o;
  o.ppo_eps_low = 0.15;
  o.ppo_eps_high = 0.3;
  o.icepop_low = 0.7;
  o.icepop_high = 1.6;
  compute_recipe_statistics(r, {0, 1000, n}, o);

  std::size_t low = 0, high = 0, ice = 0, bits = 0;
  long double sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double ratio = std::exp(t[i] - g[i]);
    low += ratio < 0.85;
    high += ratio > 1.3;
    ice += ratio < 0.7 || ratio > 1.6;
    bits += std::memcmp(&g[i], &t[i], sizeof(double)) != 0;
    const long double x = std::exp(static_cast<long double>(t[i]));
    const long double y = std::exp(static_cast<long double>(g[i]));
    sx += x;
    sy += y;
    sxx += x * x;
    syy += y * y;
    sxy += x * y;
  }
  const long double N = n;
  const double corr = static_cast<double>((N * sxy - sx * sy) /
                                          (std::sqrt(N * sxx - sx * sx) * std::sqrt(N * syy - sy * sy)));
  const auto& m = r.summary;
  ASSERT_GT(low, 50u);  // the data exercise both tails
  ASSERT_GT(high, 50u);
  EXPECT_EQ(m.at("ppo_clip_frac_low"), static_cast<double>(low) / n);
  EXPECT_EQ(m.at("ppo_clip_frac_high"), static_cast<double>(high) / n);
  EXPECT_EQ(m.at("ppo_clip_frac"), static_cast<double>(low + high) / n);
  EXPECT_EQ(m.at("icepop_mask_frac"), static_cast<double>(ice) / n);
  EXPECT_EQ(m.at("logprob_bit_mismatch"), static_cast<double>(bits) / n);
  EXPECT_LT(m.at("logprob_bit_mismatch"), 0.7);  // the bitwise-equal third is not counted
  EXPECT_NEAR(m.at("rollout_actor_probs_pearson_corr"), corr, 1e-12);
  EXPECT_LT(corr, 0.999);

  // The default bands: DAPO's 0.2/0.28 and IcePop's [0.5, 2], by hand on four ratios.
  RecipeResult h;
  h.tokens["logp_gen"] = {0.0, 0.0, 0.0, 0.0};
  h.tokens["logp_train"] = {std::log(0.79), std::log(1.27), std::log(1.29), std::log(2.5)};
  compute_recipe_statistics(h, {0, 4}, StatsOptions{});
  EXPECT_EQ(h.summary.at("ppo_clip_frac_low"), 0.25);  // 0.79 < 0.8
  EXPECT_EQ(h.summary.at("ppo_clip_frac_high"), 0.5);  // 1.29 and 2.5 > 1.28
  EXPECT_EQ(h.summary.at("ppo_clip_frac"), 0.75);
  EXPECT_EQ(h.summary.at("icepop_mask_frac"), 0.25);  // 2.5 > 2
  EXPECT_EQ(h.summary.at("logprob_bit_mismatch"), 1.0);
}

TEST(FinalizeRecipe, BitMismatchSeesSignedZeroAndRefusesBadBands) {
  RecipeResult r;
  r.tokens["logp_gen"] = {-0.0, -1.0};
  r.tokens["logp_train"] = {0.0, -1.0};
  compute_recipe_statistics(r, {0, 2}, StatsOptions{});
  EXPECT_EQ(r.summary.at("logprob_bit_mismatch"), 0.5);  // -0.0 and 0.0 are equal, not bitwise
  EXPECT_EQ(r.summary.at("ppo_clip_frac"), 0.0);
  for (auto bad : {StatsOptions{2.0, 1.0, 0.28}, StatsOptions{2.0, 0.2, -0.1},
                   StatsOptions{2.0, 0.2, 0.28, 0.0, 2.0}, StatsOptions{2.0, 0.2, 0.28, 0.5, 1.0}}) {
    try {
      compute_recipe_statistics(r, {0, 2}, bad);
      ADD_FAILURE() << "accepted a bad band";
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_TRUE(what.find("--ppo-eps") != std::string::npos ||
                  what.find("--icepop-bounds") != std::string::npos)
          << what;
    }
  }
}

// Router flips by hand: 3 tokens, 2 MoE layers, top-2 (ids ascending per token and layer).
//   token 0: layer 0 {0,1} vs {0,1}, layer 1 {2,3} vs {2,3}  -> no flip      |d| = 0.1
//   token 1: layer 0 {0,1} vs {0,2}, layer 1 {2,3} vs {2,3}  -> flip (l0)    |d| = 0.5
//   token 2: layer 0 {1,2} vs {1,2}, layer 1 {0,3} vs {1,3}  -> flip (l1)    |d| = 0.3
// The oracle agrees with training everywhere but token 2 layer 0 ({1,3}).
TEST(FinalizeRecipe, RouterFlipStatisticsByHand) {
  RecipeResult r;
  r.name = "moe";
  r.tokens["logp_gen"] = {-1.0, -1.0, -1.0};
  r.tokens["logp_train"] = {-0.9, -1.5, -1.3};
  RoutingResult& rt = r.routing;
  rt.moe_layers = 2;
  rt.k = 2;
  rt.gen_experts = {0, 1, 2, 3, /**/ 0, 1, 2, 3, /**/ 1, 2, 0, 3};
  rt.train_experts = {0, 1, 2, 3, /**/ 0, 2, 2, 3, /**/ 1, 2, 1, 3};
  rt.oracle_experts = {0, 1, 2, 3, /**/ 0, 2, 2, 3, /**/ 1, 3, 1, 3};
  compute_recipe_statistics(r, {0, 3}, StatsOptions{});
  const auto& layers = rt.layers;
  EXPECT_EQ(layers.at("flip_frac"), (std::vector<double>{1.0 / 3, 1.0 / 3}));
  EXPECT_EQ(layers.at("gen_flip_oracle_frac"), (std::vector<double>{2.0 / 3, 1.0 / 3}));
  EXPECT_EQ(layers.at("train_flip_oracle_frac"), (std::vector<double>{1.0 / 3, 0.0}));
  EXPECT_DOUBLE_EQ(r.summary.at("router_flip_frac"), 2.0 / 3);
  EXPECT_DOUBLE_EQ(r.summary.at("mean_router_flip_frac"), 1.0 / 3);
  EXPECT_NEAR(r.summary.at("mean_abs_log_ratio_flipped"), 0.4, 1e-12);
  EXPECT_NEAR(r.summary.at("mean_abs_log_ratio_unflipped"), 0.1, 1e-12);
  // A dense run has no routing statistics at all.
  RecipeResult dense;
  dense.tokens = {{"logp_gen", {-1.0}}, {"logp_train", {-1.0}}};
  compute_recipe_statistics(dense, {0, 1}, StatsOptions{});
  EXPECT_EQ(dense.summary.count("router_flip_frac"), 0u);
}

TEST(FinalizeRecipe, IdenticalPathsGiveZeroDivergence) {
  RecipeResult r;
  r.tokens["logp_gen"] = {-0.1, -2.0, -5.5, -0.01};
  r.tokens["logp_train"] = r.tokens["logp_gen"];
  compute_recipe_statistics(r, {0, 1, 4}, StatsOptions{});
  for (const char* k :
       {"mean_abs_log_ratio", "max_abs_log_ratio", "k1", "k2", "k3", "gen_kl_error", "policy_kl_error",
        "chi2_token", "chi2_seq", "tis_clip_frac", "mis_mask_frac", "rollout_probs_diff_max", "ppo_clip_frac",
        "icepop_mask_frac", "logprob_bit_mismatch"})
    EXPECT_EQ(r.summary.at(k), 0.0) << k;
  EXPECT_EQ(r.summary.at("ess"), 1.0);
  EXPECT_EQ(r.summary.at("token_mult_prob_error"), 1.0);
  EXPECT_EQ(r.summary.at("ratio_std"), 0.0);
}

TEST(FinalizeRecipe, EmptySequencesAndBadInputs) {
  RecipeResult r;
  r.tokens["logp_gen"] = {-1.0};
  r.tokens["logp_train"] = {-1.5};
  compute_recipe_statistics(r, {0, 0, 1}, StatsOptions{});  // first sequence has no response tokens
  EXPECT_EQ(r.sequences.at("length")[0], 0.0);
  EXPECT_EQ(r.sequences.at("sum_log_ratio")[0], 0.0);
  EXPECT_TRUE(std::isnan(r.sequences.at("mean_abs_log_ratio")[0]));
  EXPECT_NEAR(r.summary.at("seq_mult_prob_error"), std::exp(0.5), 1e-12);  // empty sequences skipped

  RecipeResult bad;
  bad.tokens["logp_gen"] = {-1.0, -2.0};
  EXPECT_THROW(compute_recipe_statistics(bad, {0, 2}, StatsOptions{}), Error);  // no logp_train
  bad.tokens["logp_train"] = {-1.0};
  EXPECT_THROW(compute_recipe_statistics(bad, {0, 2}, StatsOptions{}), Error);  // length mismatch
  bad.tokens["logp_train"] = {-1.0, -2.0};
  EXPECT_THROW(compute_recipe_statistics(bad, {0, 3}, StatsOptions{}), Error);     // offsets past the end
  EXPECT_THROW(compute_recipe_statistics(bad, {0, 2}, StatsOptions{1.0}), Error);  // cap must exceed 1
  EXPECT_NO_THROW(compute_recipe_statistics(bad, {0, 2}, StatsOptions{}));
}

TEST(ResponseOffsets, FromInputsLayout) {
  // Sequences of 5 and 3 tokens with prompts of 2 and 3 -> 3 and 0 response tokens.
  EXPECT_EQ(response_offsets({0, 5, 8}, {2, 3}), (std::vector<int64_t>{0, 3, 3}));
  EXPECT_THROW(response_offsets({0, 1}, {2}), Error);
}

TEST(SummaryTable, RowsAndMissingValues) {
  RecipeResult a = hand_recipe();
  compute_recipe_statistics(a, {0, 2, 3}, StatsOptions{});
  RecipeResult b;
  b.name = "fp8-gen";
  b.summary["num_tokens"] = 12;
  const std::string t = format_summary_table({a, b});
  EXPECT_NE(t.find("recipe"), std::string::npos);
  EXPECT_NE(t.find("token_mult_prob_error"), std::string::npos);
  EXPECT_NE(t.find("top1 agree"), std::string::npos);
  EXPECT_NE(t.find("hand"), std::string::npos);
  EXPECT_NE(t.find("1.6667"), std::string::npos);  // token_mult_prob_error 5/3
  EXPECT_NE(t.find("7.7778e-01") == std::string::npos ? t.find("0.7778") : 0, std::string::npos);  // ess 7/9
  EXPECT_NE(t.find("fp8-gen"), std::string::npos);
  EXPECT_NE(t.find(" -"), std::string::npos);
  EXPECT_EQ(std::count(t.begin(), t.end(), '\n'), 4);  // header, rule, 2 rows
}

}  // namespace
}  // namespace rlp
