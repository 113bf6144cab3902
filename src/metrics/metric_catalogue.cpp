// The summary-statistic catalogue. Engine names were read in each engine's source (the commits the
// review read; the quantity is the same, the estimator's details are noted where they differ):
//   NeMo RL (NVIDIA-NeMo/RL): nemo_rl/algorithms/loss/loss_functions.py (ClippedPGLossFn:
//     token_mult_prob_error, gen_kl_error, policy_kl_error, js_divergence_error, token means) and
//     nemo_rl/algorithms/grpo.py (mean_seq_mult_prob_error over valid sequences).
//   verl (volcengine/verl): verl/trainer/ppo/rollout_corr_helper.py (rollout_corr/kl, k3_kl,
//     chi2_token, chi2_seq with log ratios clamped to a safety bound, rollout_is_eff_sample_size of
//     weights truncated at the IS threshold) and verl/utils/debug/metrics.py
//     (calculate_debug_metrics: training/rollout_probs_diff_{mean,max,std}, torch.std: unbiased;
//     training/rollout_actor_probs_pearson_corr, pearson_correlation_coefficient: torch.corrcoef of
//     the two sides' token probabilities exp(logp)).
//   slime (THUDM/slime): slime/backends/megatron_utils/loss.py (train_rollout_logprob_abs_diff,
//     sum_of_sample_mean: a mean per sample, then over samples).
//   prime-rl (PrimeIntellect-ai/prime-rl): src/prime_rl/trainer/rl/loss.py
//     (compute_importance_ratio_and_mismatch_kl: r - log r - 1) logged by
//     src/prime_rl/trainer/rl/train.py as mismatch_kl/all/mean.
// A name is left empty where no engine source confirmed it: PPO's clip fraction is logged by the
// engines at the update, with the advantage's sign (verl's pg_clipfrac), not as the band fraction
// here; prime-rl's snapshot read (559b447) has no logprob_bit_mismatch, so the name is ours.
#include "rlparity/metrics/metric_catalogue.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "rlparity/metrics/engine_side.hpp"

namespace rlp {

namespace {

using D = MetricDirection;
using F = MetricFormat;

MetricInfo scalar(std::string name, std::string definition, D dir, F fmt, EngineNames engines = {},
                  std::string needs = {}) {
  MetricInfo m;
  m.name = std::move(name);
  m.definition = std::move(definition);
  m.direction = dir;
  m.format = fmt;
  m.engines = std::move(engines);
  m.needs = std::move(needs);
  return m;
}

// The eight statistics of one family, with the direction and format of all of them.
void add_family(std::vector<MetricInfo>& out, const DistributionFamily& f, D dir, F fmt,
                std::string needs = {}) {
  for (DistributionStat s : kDistributionStats) {
    const char* stat = distribution_stat_name(s);
    MetricInfo m = scalar(distribution_statistic_name(f, s), fmt::format("{} of {} over tokens", stat, f.of),
                          dir, fmt, {}, needs);
    if (f.stat_last) m.alias = fmt::format("{}_{}", stat, f.token_metric);
    out.push_back(std::move(m));
  }
}

MetricInfo& named(std::vector<MetricInfo>& all, const std::string& name) {
  return *std::find_if(all.begin(), all.end(), [&](const MetricInfo& m) { return m.name == name; });
}

std::vector<MetricInfo> build() {
  std::vector<MetricInfo> c;
  add_family(c, distribution::abs_log_ratio, D::lower_is_better, F::scientific);
  add_family(c, distribution::kl_gen_train, D::lower_is_better, F::scientific, "kl_gen_train");
  add_family(c, distribution::kl_train_gen, D::lower_is_better, F::scientific, "kl_train_gen");
  // Every ratio_* statistic is compared by |x - 1| (also ratio_std, as before the catalogue).
  add_family(c, distribution::ratio, D::closer_to_one, F::fixed4);
  const auto add = [&](std::string name, std::string definition, D dir, F fmt, EngineNames engines = {},
                       std::string needs = {}) {
    c.push_back(
        scalar(std::move(name), std::move(definition), dir, fmt, std::move(engines), std::move(needs)));
  };
  add("ess", "(sum r)^2 / (n sum r^2), in (0, 1]", D::higher_is_better, F::fixed4);
  add("rollout_is_eff_sample_size", "= ess (1 / mean((r / mean r)^2)); verl truncates r first",
      D::higher_is_better, F::fixed4, EngineNames{{}, "rollout_corr/rollout_is_eff_sample_size", {}, {}});
  add("tis_clip_frac", "fraction of tokens with r > C (truncated IS)", D::lower_is_better, F::fixed4);
  add("mis_mask_frac", "fraction of tokens with r outside [1/C, C] (masked IS)", D::lower_is_better,
      F::fixed4);
  add("ppo_clip_frac",
      "fraction of tokens with r outside [1 - eps_low, 1 + eps_high] (--ppo-eps, default 0.2,0.28): PPO's "
      "clip at the first update, before any advantage sign",
      D::lower_is_better, F::fixed4);
  add("ppo_clip_frac_low", "fraction of tokens with r < 1 - eps_low", D::lower_is_better, F::fixed4);
  add("ppo_clip_frac_high", "fraction of tokens with r > 1 + eps_high", D::lower_is_better, F::fixed4);
  add("icepop_mask_frac", "fraction of tokens with r outside [low, high] (--icepop-bounds, default 0.5,2)",
      D::lower_is_better, F::fixed4);
  add("logprob_bit_mismatch", "fraction of tokens whose lg and lt differ in any bit (0: bitwise identical)",
      D::lower_is_better, F::fixed4);
  add("chi2_token", "E[r^2] - 1 over tokens", D::lower_is_better, F::scientific,
      EngineNames{{}, "rollout_corr/chi2_token", {}, {}});
  add("chi2_seq",
      "E[w^2] - 1 over sequences, w = exp(sum_log_ratio); not mean-normalised, +inf for long divergent "
      "sequences",
      D::lower_is_better, F::scientific, EngineNames{{}, "rollout_corr/chi2_seq", {}, {}});
  add("k1", "mean(lg - lt) = mean(-d): estimator of KL(gen || train) with samples from gen",
      D::closer_to_zero, F::scientific);
  add("rollout_corr_kl", "= k1", D::closer_to_zero, F::scientific,
      EngineNames{{}, "rollout_corr/kl", {}, {}});
  add("k2", "mean(d^2 / 2)", D::lower_is_better, F::scientific);
  add("k3", "mean(r - 1 - d)", D::lower_is_better, F::scientific);
  add("k3_kl", "= k3", D::lower_is_better, F::scientific, EngineNames{{}, "rollout_corr/k3_kl", {}, {}});
  add("mismatch_kl", "= k3 (prime-rl's target: < 0.01)", D::lower_is_better, F::scientific,
      EngineNames{{}, {}, {}, "mismatch_kl/all/mean"});
  add("gen_kl_error", "= k3 = mean(exp(lt - lg) - 1 - (lt - lg)) (typically ~1e-3)", D::lower_is_better,
      F::scientific, EngineNames{"gen_kl_error", {}, {}, {}});
  add("policy_kl_error", "mean(exp(lg - lt) - 1 - (lg - lt))", D::lower_is_better, F::scientific,
      EngineNames{"policy_kl_error", {}, {}, {}});
  add("js_divergence_error",
      "mean per-token full-vocabulary js (NeMo RL estimates it from the sampled token)", D::lower_is_better,
      F::scientific, EngineNames{"js_divergence_error", {}, {}, {}}, "js");
  add("token_mult_prob_error", "mean exp(|d|) (NeMo RL plots it above 1.05; nightly FP8 tests: median < 1.1)",
      D::lower_is_better, F::fixed4, EngineNames{"token_mult_prob_error", {}, {}, {}});
  add("seq_mult_prob_error", "mean over sequences (with >= 1 token) of the per-sequence mean exp(|d|)",
      D::lower_is_better, F::fixed4, EngineNames{"mean_seq_mult_prob_error", {}, {}, {}});
  add("rollout_probs_diff_mean", "mean |exp(lt) - exp(lg)| (< 0.005 healthy, > 0.01 a precision problem)",
      D::lower_is_better, F::scientific, EngineNames{{}, "training/rollout_probs_diff_mean", {}, {}});
  add("rollout_probs_diff_max", "max |exp(lt) - exp(lg)|", D::lower_is_better, F::scientific,
      EngineNames{{}, "training/rollout_probs_diff_max", {}, {}});
  add("rollout_probs_diff_std", "unbiased (n - 1) std of |exp(lt) - exp(lg)|, as verl", D::lower_is_better,
      F::scientific, EngineNames{{}, "training/rollout_probs_diff_std", {}, {}});
  add("rollout_actor_probs_pearson_corr",
      "Pearson correlation of exp(lt) and exp(lg) over tokens (torch.corrcoef; NaN for < 2 tokens or a "
      "constant side)",
      D::higher_is_better, F::fixed4, EngineNames{{}, "training/rollout_actor_probs_pearson_corr", {}, {}});
  add("train_rollout_logprob_abs_diff", "= mean_abs_log_ratio (slime averages per sample first)",
      D::lower_is_better, F::scientific, EngineNames{{}, {}, "train/train_rollout_logprob_abs_diff", {}});
  add("top1_agree_frac", "mean top1_agree: fraction of tokens where both paths' argmax agree",
      D::higher_is_better, F::fixed4, {}, "top1_agree");
  add("mean_entropy_gen", "mean entropy_gen", D::lower_is_better, F::scientific, {}, "entropy_gen");
  add("mean_abs_gen_err_oracle", "mean |lg - lo|", D::lower_is_better, F::scientific, {}, "logp_oracle");
  add("mean_abs_train_err_oracle", "mean |lt - lo|", D::lower_is_better, F::scientific, {}, "logp_oracle");
  add("router_flip_frac",
      "MoE: fraction of tokens whose generation and training routers chose different expert sets in any MoE "
      "layer",
      D::lower_is_better, F::fixed4, {}, "routing");
  add("mean_router_flip_frac",
      "MoE: mean over MoE layers of the fraction of tokens with different expert sets", D::lower_is_better,
      F::fixed4, {}, "routing");
  add("mean_abs_log_ratio_flipped", "MoE: mean |d| over tokens with a router flip in any MoE layer",
      D::lower_is_better, F::scientific, {}, "routing");
  add("mean_abs_log_ratio_unflipped", "MoE: mean |d| over tokens with no router flip", D::lower_is_better,
      F::scientific, {}, "routing");
  add("mean_kl_topk_lower",
      "engine pairs with the engine's top-k: mean lower bound on KL(engine || side) (top-k + one bucket)",
      D::lower_is_better, F::scientific, {}, "kl_topk_lower");
  add("mean_kl_topk_upper", "engine pairs with the engine's top-k: mean upper bound on KL(engine || side)",
      D::lower_is_better, F::scientific, {}, "kl_topk_upper");
  add("num_tokens", "number of response tokens (stored as a double)", D::lower_is_better, F::count);
  add("num_sequences", "number of sequences (stored as a double)", D::lower_is_better, F::count);

  // The headline, in rank order, and the short headers of the summary table.
  const std::array<std::pair<const char*, const char*>, 8> headline = {{{"mean_abs_log_ratio", "mean|dlogp|"},
                                                                        {"p99_abs_log_ratio", "p99|dlogp|"},
                                                                        {"max_abs_log_ratio", "max|dlogp|"},
                                                                        {"mean_kl_gen_train", "mean KL"},
                                                                        {"token_mult_prob_error", ""},
                                                                        {"gen_kl_error", ""},
                                                                        {"ess", ""},
                                                                        {"top1_agree_frac", "top1 agree"}}};
  for (std::size_t i = 0; i < headline.size(); ++i) {
    MetricInfo& m = named(c, headline[i].first);
    m.headline = static_cast<int>(i) + 1;
    m.label = headline[i].second;
  }
  named(c, "num_tokens").label = "tokens";
  named(c, "router_flip_frac").label = "flipped tokens";
  named(c, "mean_router_flip_frac").label = "flips per layer";
  named(c, "mean_abs_log_ratio_flipped").label = "mean|dlogp| flipped";
  named(c, "mean_abs_log_ratio_unflipped").label = "mean|dlogp| unflipped";
  named(c, "mean_abs_log_ratio").engines.slime = "train/train_rollout_logprob_abs_diff";
  return c;
}

}  // namespace

const char* metric_direction_name(MetricDirection d) {
  // In the order of MetricDirection.
  static constexpr std::array<const char*, 4> kNames = {"lower is better", "higher is better",
                                                        "closer to 0 is better", "closer to 1 is better"};
  return kNames[static_cast<std::size_t>(d)];
}

const char* distribution_stat_name(DistributionStat s) {
  static constexpr std::array<const char*, 8> kNames = {"mean", "std", "min", "max",
                                                        "p50",  "p90", "p99", "p999"};
  return kNames[static_cast<std::size_t>(s)];
}

std::string distribution_statistic_name(const DistributionFamily& f, DistributionStat s) {
  return f.stat_last ? fmt::format("{}_{}", f.token_metric, distribution_stat_name(s))
                     : fmt::format("{}_{}", distribution_stat_name(s), f.token_metric);
}

const std::vector<MetricInfo>& metric_catalogue() {
  static const std::vector<MetricInfo> catalogue = build();
  return catalogue;
}

namespace {

// The engine pair's prefix `name` starts with (engine_side.hpp), or empty.
std::string engine_prefix_of(std::string_view name) {
  for (const EngineSide& side : kEngineSides) {
    std::string p = engine_prefix(side);
    if (name.substr(0, p.size()) == p) return p;
  }
  return {};
}

const MetricInfo* find_unprefixed(std::string_view name) {
  for (const auto& m : metric_catalogue())
    if (m.name == name || (!m.alias.empty() && m.alias == name)) return &m;
  return nullptr;
}

}  // namespace

const MetricInfo* find_metric(std::string_view name) {
  if (const MetricInfo* m = find_unprefixed(name)) return m;
  const std::string prefix = engine_prefix_of(name);
  return prefix.empty() ? nullptr : find_unprefixed(name.substr(prefix.size()));
}

std::string stored_metric_name(std::string_view name) {
  const MetricInfo* m = find_metric(name);
  if (!m) return {};
  if (find_unprefixed(name)) return m->name;
  return engine_prefix_of(name) + m->name;
}

const std::vector<std::string>& metric_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& m : metric_catalogue()) out.push_back(m.name);
    std::sort(out.begin(), out.end());
    return out;
  }();
  return names;
}

const std::vector<std::string>& headline_metric_names() {
  static const std::vector<std::string> names = [] {
    std::vector<const MetricInfo*> h;
    for (const auto& m : metric_catalogue())
      if (m.headline > 0) h.push_back(&m);
    std::sort(h.begin(), h.end(),
              [](const MetricInfo* a, const MetricInfo* b) { return a->headline < b->headline; });
    std::vector<std::string> out;
    for (const auto* m : h) out.push_back(m->name);
    return out;
  }();
  return names;
}

MetricDirection metric_direction(std::string_view name) {
  const MetricInfo* m = find_metric(name);
  return m ? m->direction : MetricDirection::lower_is_better;
}

std::string metric_catalogue_markdown() {
  auto code = [](const std::string& s) { return s.empty() ? std::string("—") : fmt::format("`{}`", s); };
  std::string o =
      "| name | definition | worse when | format | headline | needs | NeMo RL | verl | slime | prime-rl |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& m : metric_catalogue()) {
    std::string name = code(m.name);
    if (!m.alias.empty()) name += fmt::format(" (alias `{}`)", m.alias);
    const char* worse = m.direction == MetricDirection::higher_is_better ? "lower"
                        : m.direction == MetricDirection::closer_to_zero ? "further from 0"
                        : m.direction == MetricDirection::closer_to_one  ? "further from 1"
                                                                         : "higher";
    const char* fmt_name = m.format == MetricFormat::count    ? "count"
                           : m.format == MetricFormat::fixed4 ? "fixed4"
                                                              : "sci";
    std::string definition;
    for (char ch : m.definition) definition += ch == '|' ? std::string("\\|") : std::string(1, ch);
    o += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", name, definition, worse,
                     fmt_name, m.headline ? std::to_string(m.headline) : std::string("—"), code(m.needs),
                     code(m.engines.nemo_rl), code(m.engines.verl), code(m.engines.slime),
                     code(m.engines.prime_rl));
  }
  return o;
}

}  // namespace rlp
