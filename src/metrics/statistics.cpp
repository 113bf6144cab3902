#include "rlparity/metrics/statistics.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>

#include "rlparity/metrics/metric_catalogue.hpp"
#include "rlparity/metrics/routing_stats.hpp"
#include "rlparity/util/error.hpp"

namespace rlp {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Neumaier-compensated sum in index order: deterministic and accurate for long arrays.
class Sum {
 public:
  void add(double x) {
    const double t = s_ + x;
    if (std::isfinite(t)) {
      if (std::fabs(s_) >= std::fabs(x))
        c_ += (s_ - t) + x;
      else
        c_ += (x - t) + s_;
    }
    s_ = t;
  }
  double value() const { return std::isfinite(s_) ? s_ + c_ : s_; }

 private:
  double s_ = 0.0, c_ = 0.0;
};

template <class F>
double mean_of(std::size_t n, F&& f) {
  if (n == 0) return kNaN;
  Sum s;
  for (std::size_t i = 0; i < n; ++i) s.add(f(i));
  return s.value() / static_cast<double>(n);
}

double mean_vec(const std::vector<double>& v) {
  return mean_of(v.size(), [&](std::size_t i) { return v[i]; });
}

const std::vector<double>* find(const std::map<std::string, std::vector<double>>& m, const char* key) {
  auto it = m.find(key);
  return it == m.end() ? nullptr : &it->second;
}

// Moves each array into `out` under its name (overwriting an entry of the same name).
void move_into(std::map<std::string, std::vector<double>>& out,
               std::initializer_list<std::pair<const char*, std::vector<double>*>> arrays) {
  for (const auto& [name, values] : arrays) out[name] = std::move(*values);
}

double distribution_value(const Distribution& d, DistributionStat s) {
  // In the order of DistributionStat.
  static constexpr std::array<double Distribution::*, 8> kMembers = {
      &Distribution::mean, &Distribution::std, &Distribution::min, &Distribution::max,
      &Distribution::p50,  &Distribution::p90, &Distribution::p99, &Distribution::p999};
  return d.*kMembers[static_cast<std::size_t>(s)];
}

// The eight summary values of one per-token array, under the catalogue's names.
void put_distribution(std::map<std::string, double>& out, const std::vector<double>& v,
                      const DistributionFamily& family) {
  const Distribution d = describe(v);
  for (DistributionStat s : kDistributionStats)
    out[distribution_statistic_name(family, s)] = distribution_value(d, s);
}

// Pearson's correlation of two equally long arrays in two passes (means, then centred sums), as
// torch.corrcoef computes it; NaN for fewer than two values or a constant array.
double pearson(const std::vector<double>& x, const std::vector<double>& y) {
  const std::size_t n = x.size();
  if (n < 2) return kNaN;
  const double mx = mean_vec(x), my = mean_vec(y);
  Sum sxy, sxx, syy;
  for (std::size_t i = 0; i < n; ++i) {
    sxy.add((x[i] - mx) * (y[i] - my));
    sxx.add((x[i] - mx) * (x[i] - mx));
    syy.add((y[i] - my) * (y[i] - my));
  }
  const double den = std::sqrt(sxx.value()) * std::sqrt(syy.value());
  return den > 0.0 ? sxy.value() / den : kNaN;
}

// Any bit of the two stored doubles differs (-0.0 against 0.0 does; two NaNs of one payload do not).
bool bits_differ(double a, double b) {
  uint64_t ua = 0, ub = 0;
  std::memcpy(&ua, &a, sizeof a);
  std::memcpy(&ub, &b, sizeof b);
  return ua != ub;
}

}  // namespace

void validate_stats_options(const StatsOptions& o) {
  if (!(o.is_cap > 1.0)) RLP_THROW_INPUT("--is-cap must be > 1 (got {})", o.is_cap);
  if (!(o.ppo_eps_low >= 0.0 && o.ppo_eps_low < 1.0) || !(o.ppo_eps_high >= 0.0) ||
      !std::isfinite(o.ppo_eps_high))
    RLP_THROW_INPUT("--ppo-eps LOW,HIGH needs 0 <= LOW < 1 and a finite HIGH >= 0 (got {},{})", o.ppo_eps_low,
                    o.ppo_eps_high);
  if (!(o.icepop_low > 0.0 && o.icepop_low < 1.0 && o.icepop_high > 1.0) || !std::isfinite(o.icepop_high))
    RLP_THROW_INPUT("--icepop-bounds LOW,HIGH needs 0 < LOW < 1 < HIGH, finite (got {},{})", o.icepop_low,
                    o.icepop_high);
}

double percentile_nearest_rank(const std::vector<double>& sorted, int per_mille) {
  if (sorted.empty()) return kNaN;
  RLP_CHECK(per_mille >= 0 && per_mille <= 1000, "percentile: per_mille {} outside [0, 1000]", per_mille);
  const auto n = static_cast<int64_t>(sorted.size());
  int64_t rank = (static_cast<int64_t>(per_mille) * n + 999) / 1000;  // ceil(q n / 1000)
  rank = std::clamp<int64_t>(rank, 1, n);
  return sorted[static_cast<std::size_t>(rank - 1)];
}

Distribution describe(const std::vector<double>& values) {
  Distribution d{kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN, kNaN};
  if (values.empty()) return d;
  const double n = static_cast<double>(values.size());
  d.mean = mean_vec(values);
  Sum sq;
  for (double x : values) sq.add((x - d.mean) * (x - d.mean));
  d.std = std::sqrt(sq.value() / n);
  const bool any_nan = std::any_of(values.begin(), values.end(), [](double x) { return std::isnan(x); });
  if (any_nan) return d;
  std::vector<double> s = values;
  std::sort(s.begin(), s.end());
  d.min = s.front();
  d.max = s.back();
  d.p50 = percentile_nearest_rank(s, 500);
  d.p90 = percentile_nearest_rank(s, 900);
  d.p99 = percentile_nearest_rank(s, 990);
  d.p999 = percentile_nearest_rank(s, 999);
  return d;
}

std::vector<int64_t> response_offsets(const std::vector<int64_t>& seq_offsets,
                                      const std::vector<int32_t>& prompt_lengths) {
  RLP_CHECK(seq_offsets.size() == prompt_lengths.size() + 1,
            "response_offsets: {} sequence offsets for {} prompt lengths", seq_offsets.size(),
            prompt_lengths.size());
  std::vector<int64_t> out(seq_offsets.size(), 0);
  for (std::size_t s = 0; s < prompt_lengths.size(); ++s) {
    const int64_t resp = seq_offsets[s + 1] - seq_offsets[s] - prompt_lengths[s];
    RLP_CHECK(resp >= 0, "response_offsets: sequence {} is shorter than its prompt", s);
    out[s + 1] = out[s] + resp;
  }
  return out;
}

void compute_recipe_statistics(RecipeResult& r, const std::vector<int64_t>& offsets,
                               const StatsOptions& opts) {
  const std::vector<double>* lg_p = find(r.tokens, "logp_gen");
  const std::vector<double>* lt_p = find(r.tokens, "logp_train");
  RLP_CHECK(lg_p && lt_p, "recipe '{}': token metrics logp_gen and logp_train are required", r.name);
  validate_stats_options(opts);
  const std::size_t n = lg_p->size();
  for (const auto& [key, v] : r.tokens)
    RLP_CHECK(v.size() == n, "recipe '{}': token metric '{}' has {} values, logp_gen has {}", r.name, key,
              v.size(), n);
  RLP_CHECK(!offsets.empty() && offsets.front() == 0 && offsets.back() == static_cast<int64_t>(n),
            "recipe '{}': response offsets must run from 0 to {} tokens", r.name, n);
  for (std::size_t s = 0; s + 1 < offsets.size(); ++s)
    RLP_CHECK(offsets[s] <= offsets[s + 1], "recipe '{}': response offsets decrease at {}", r.name, s);

  // Copies: inserting into r.tokens may not invalidate map references, but keep it obvious.
  const std::vector<double> lg = *lg_p;
  const std::vector<double> lt = *lt_p;
  const std::vector<double>* lo = find(r.tokens, "logp_oracle");
  const std::vector<double> oracle = lo ? *lo : std::vector<double>{};

  std::vector<double> log_ratio(n), abs_lr(n), ratio(n), prob_diff(n), k3(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double d = lt[i] - lg[i];
    log_ratio[i] = d;
    abs_lr[i] = std::fabs(d);
    ratio[i] = std::exp(d);
    prob_diff[i] = std::fabs(std::exp(lt[i]) - std::exp(lg[i]));
    k3[i] = ratio[i] - 1.0 - d;
  }
  auto& sm = r.summary;
  if (lo) {
    std::vector<double> ge(n), te(n);
    for (std::size_t i = 0; i < n; ++i) {
      ge[i] = lg[i] - oracle[i];
      te[i] = lt[i] - oracle[i];
    }
    sm["mean_abs_gen_err_oracle"] = mean_of(n, [&](std::size_t i) { return std::fabs(ge[i]); });
    sm["mean_abs_train_err_oracle"] = mean_of(n, [&](std::size_t i) { return std::fabs(te[i]); });
    r.tokens["gen_err_oracle"] = std::move(ge);
    r.tokens["train_err_oracle"] = std::move(te);
  }

  // Per sequence.
  const std::size_t S = offsets.size() - 1;
  const std::vector<double>* kl_p = find(r.tokens, "kl_gen_train");
  std::vector<double> len(S), sum_lr(S), geo(S), max_abs(S), mean_abs(S), smpe(S), ppl_g(S), ppl_t(S), mkl;
  if (kl_p) mkl.assign(S, kNaN);
  for (std::size_t s = 0; s < S; ++s) {
    const auto b = static_cast<std::size_t>(offsets[s]);
    const auto e = static_cast<std::size_t>(offsets[s + 1]);
    const std::size_t m = e - b;
    Sum slr, sabs, smul, sg, st, skl;
    double mx = 0.0;
    for (std::size_t i = b; i < e; ++i) {
      slr.add(log_ratio[i]);
      sabs.add(abs_lr[i]);
      smul.add(std::exp(abs_lr[i]));
      sg.add(lg[i]);
      st.add(lt[i]);
      if (kl_p) skl.add((*kl_p)[i]);
      if (!std::isnan(mx) && (std::isnan(abs_lr[i]) || abs_lr[i] > mx)) mx = abs_lr[i];  // NaN sticks
    }
    const double dm = static_cast<double>(m);
    len[s] = dm;
    sum_lr[s] = slr.value();
    max_abs[s] = m ? mx : kNaN;
    geo[s] = m ? std::exp(slr.value() / dm) : kNaN;
    mean_abs[s] = m ? sabs.value() / dm : kNaN;
    smpe[s] = m ? smul.value() / dm : kNaN;
    ppl_g[s] = m ? std::exp(-sg.value() / dm) : kNaN;
    ppl_t[s] = m ? std::exp(-st.value() / dm) : kNaN;
    if (kl_p) mkl[s] = m ? skl.value() / dm : kNaN;
  }

  // Summary over tokens.
  const double C = opts.is_cap;
  put_distribution(sm, abs_lr, distribution::abs_log_ratio);
  if (kl_p) put_distribution(sm, *kl_p, distribution::kl_gen_train);
  if (const auto* v = find(r.tokens, "kl_train_gen")) put_distribution(sm, *v, distribution::kl_train_gen);
  // Bounds on the full-vocabulary KL(gen || train) from the sampling side's top-k (the engine pairs
  // of a replay, topk_kl.hpp): means over the tokens that have them (+inf when any bound is).
  for (const char* bound : {"lower", "upper"})
    if (const auto* v = find(r.tokens, (std::string("kl_topk_") + bound).c_str())) {
      Sum s;
      std::size_t m = 0;
      for (double x : *v)
        if (!std::isnan(x)) {
          s.add(x);
          ++m;
        }
      sm[std::string("mean_kl_topk_") + bound] = m ? s.value() / static_cast<double>(m) : kNaN;
    }
  put_distribution(sm, ratio, distribution::ratio);
  Sum sr, sr2;
  std::size_t clip = 0, masked = 0, ppo_low = 0, ppo_high = 0, ppo_out = 0, icepop = 0, bits = 0;
  const double ppo_lo = 1.0 - opts.ppo_eps_low, ppo_hi = 1.0 + opts.ppo_eps_high;
  for (std::size_t i = 0; i < n; ++i) {
    sr.add(ratio[i]);
    sr2.add(ratio[i] * ratio[i]);
    if (ratio[i] > C) ++clip;
    if (!(ratio[i] >= 1.0 / C && ratio[i] <= C)) ++masked;
    // A NaN ratio is outside every band (counted in the total, in neither direction).
    if (ratio[i] < ppo_lo) ++ppo_low;
    if (ratio[i] > ppo_hi) ++ppo_high;
    if (!(ratio[i] >= ppo_lo && ratio[i] <= ppo_hi)) ++ppo_out;
    if (!(ratio[i] >= opts.icepop_low && ratio[i] <= opts.icepop_high)) ++icepop;
    if (bits_differ(lg[i], lt[i])) ++bits;
  }
  const double dn = static_cast<double>(n);
  const auto frac = [&](std::size_t k) { return n ? static_cast<double>(k) / dn : kNaN; };
  sm["ess"] = n ? sr.value() * sr.value() / (dn * sr2.value()) : kNaN;
  sm["tis_clip_frac"] = frac(clip);
  sm["mis_mask_frac"] = frac(masked);
  sm["ppo_clip_frac"] = frac(ppo_out);
  sm["ppo_clip_frac_low"] = frac(ppo_low);
  sm["ppo_clip_frac_high"] = frac(ppo_high);
  sm["icepop_mask_frac"] = frac(icepop);
  sm["logprob_bit_mismatch"] = frac(bits);
  sm["chi2_token"] = n ? sr2.value() / dn - 1.0 : kNaN;
  sm["chi2_seq"] = mean_of(S, [&](std::size_t s) { return std::exp(2.0 * sum_lr[s]); }) - 1.0;
  const double k1 = mean_of(n, [&](std::size_t i) { return -log_ratio[i]; });
  const double k2 = mean_of(n, [&](std::size_t i) { return 0.5 * log_ratio[i] * log_ratio[i]; });
  const double k3m = mean_vec(k3);
  sm["k1"] = k1;
  sm["k2"] = k2;
  sm["k3"] = k3m;
  sm["token_mult_prob_error"] = mean_of(n, [&](std::size_t i) { return std::exp(abs_lr[i]); });
  sm["gen_kl_error"] = k3m;
  sm["policy_kl_error"] = mean_of(n, [&](std::size_t i) {
    const double d = lg[i] - lt[i];
    return std::exp(d) - 1.0 - d;
  });
  if (const auto* js = find(r.tokens, "js")) sm["js_divergence_error"] = mean_vec(*js);
  {
    Sum s;
    std::size_t cnt = 0;
    for (std::size_t q = 0; q < S; ++q)
      if (len[q] > 0) {
        s.add(smpe[q]);
        ++cnt;
      }
    sm["seq_mult_prob_error"] = cnt ? s.value() / static_cast<double>(cnt) : kNaN;
  }
  sm["rollout_corr_kl"] = k1;
  sm["k3_kl"] = k3m;
  sm["rollout_is_eff_sample_size"] = sm["ess"];
  {
    const double pm = mean_vec(prob_diff);
    sm["rollout_probs_diff_mean"] = pm;
    double mx = n ? prob_diff[0] : kNaN;
    Sum sq;
    for (std::size_t i = 0; i < n; ++i) {
      if (!std::isnan(mx) && (std::isnan(prob_diff[i]) || prob_diff[i] > mx)) mx = prob_diff[i];
      sq.add((prob_diff[i] - pm) * (prob_diff[i] - pm));
    }
    sm["rollout_probs_diff_max"] = mx;
    sm["rollout_probs_diff_std"] = n > 1 ? std::sqrt(sq.value() / (dn - 1.0)) : kNaN;  // unbiased, as verl
    std::vector<double> pg(n), pt(n);
    for (std::size_t i = 0; i < n; ++i) {
      pg[i] = std::exp(lg[i]);
      pt[i] = std::exp(lt[i]);
    }
    sm["rollout_actor_probs_pearson_corr"] = pearson(pt, pg);
  }
  sm["train_rollout_logprob_abs_diff"] = sm["mean_abs_log_ratio"];
  sm["mismatch_kl"] = k3m;
  if (const auto* v = find(r.tokens, "top1_agree")) sm["top1_agree_frac"] = mean_vec(*v);
  if (const auto* v = find(r.tokens, "entropy_gen")) sm["mean_entropy_gen"] = mean_vec(*v);
  sm["num_tokens"] = dn;
  sm["num_sequences"] = static_cast<double>(S);

  move_into(r.tokens, {{"log_ratio", &log_ratio},
                       {"abs_log_ratio", &abs_lr},
                       {"ratio", &ratio},
                       {"prob_diff", &prob_diff},
                       {"k3", &k3}});
  move_into(r.sequences, {{"length", &len},
                          {"sum_log_ratio", &sum_lr},
                          {"geo_mean_ratio", &geo},
                          {"max_abs_log_ratio", &max_abs},
                          {"mean_abs_log_ratio", &mean_abs},
                          {"seq_mult_prob_error", &smpe},
                          {"ppl_gen", &ppl_g},
                          {"ppl_train", &ppl_t}});
  if (kl_p) r.sequences["mean_kl_gen_train"] = std::move(mkl);
  compute_routing_statistics(r);
}

}  // namespace rlp
