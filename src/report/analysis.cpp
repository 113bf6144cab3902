// The analysis behind the reports (report.hpp): the worst tokens of a recipe, per-position means
// and the headline statistics. Pure functions of the run data; no rendering.
#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "report/report_helpers.hpp"
#include "rlparity/metrics/statistics.hpp"
#include "rlparity/report/report.hpp"

namespace rlp::report {

MismatchBirth mismatch_birth(const RunData& run, const RecipeResult& recipe, double threshold,
                             std::size_t max_tokens) {
  MismatchBirth b;
  const auto lay = recipe.layers.find("rel_l2_gen_train");
  if (recipe.token_rel_l2.empty() || lay == recipe.layers.end() || lay->second.empty()) return b;
  const std::size_t L = lay->second.size(), T = recipe.token_rel_l2.size() / L;
  b.layers = static_cast<int>(L);
  b.threshold = threshold;
  b.born_at.assign(L, 0);
  b.first_layer.assign(T, -1);
  for (std::size_t t = 0; t < T; ++t) {
    for (std::size_t l = 0; l < L; ++l)
      if (recipe.token_rel_l2[t * L + l] >= threshold) {
        b.first_layer[t] = static_cast<int>(l);
        ++b.born_at[l];
        break;
      }
    if (b.first_layer[t] < 0) ++b.never;
  }
  const std::vector<int64_t> ro = response_offsets(run.seq_offsets, run.prompt_lengths);
  const auto seq = recipe.sequences.find("mean_abs_log_ratio");
  double worst = -1;
  for (std::size_t s = 0; s + 1 < ro.size(); ++s) {
    const double v = seq != recipe.sequences.end() && s < seq->second.size() ? seq->second[s] : 0.0;
    if (ro[s + 1] > ro[s] && v > worst) {
      worst = v;
      b.sequence = s;
    }
  }
  if (b.sequence + 1 < ro.size()) {
    b.token0 = static_cast<std::size_t>(ro[b.sequence]);
    b.tokens = std::min(max_tokens, static_cast<std::size_t>(ro[b.sequence + 1] - ro[b.sequence]));
  }
  return b;
}

std::vector<WorstToken> worst_tokens(const RunData& run, const RecipeResult& recipe, std::size_t cap,
                                     const Tokenizer* tokenizer) {
  std::vector<WorstToken> out;
  const auto* lr = token_metric(recipe, "log_ratio");
  if (!lr) return out;
  const auto* lg = token_metric(recipe, "logp_gen");
  const auto* lt = token_metric(recipe, "logp_train");
  const auto* kl = token_metric(recipe, "kl_gen_train");
  std::vector<std::size_t> idx(lr->size());
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  auto key = [&](std::size_t i) {
    const double a = std::abs((*lr)[i]);
    return std::isnan(a) ? std::numeric_limits<double>::infinity() * 2 : a;  // NaN first
  };
  auto worse = [&](std::size_t a, std::size_t b) {
    const double ka = key(a), kb = key(b);
    const bool na = std::isnan((*lr)[a]), nb = std::isnan((*lr)[b]);
    if (na != nb) return na;
    if (ka != kb) return ka > kb;
    return a < b;
  };
  const std::size_t k = std::min(cap, idx.size());
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(), worse);
  const std::vector<int64_t> ro = response_offsets(run.seq_offsets, run.prompt_lengths);
  for (std::size_t j = 0; j < k; ++j) {
    const std::size_t i = idx[j];
    WorstToken w;
    w.index = i;
    auto it = std::upper_bound(ro.begin(), ro.end(), static_cast<int64_t>(i));
    const auto s = static_cast<std::size_t>(std::max<std::ptrdiff_t>(0, (it - ro.begin()) - 1));
    w.sequence = s;
    if (s < run.seq_ids.size()) w.sequence_id = run.seq_ids[s];
    if (s < ro.size()) w.position = i - static_cast<std::size_t>(ro[s]);
    if (s < run.prompt_lengths.size() && s + 1 < run.seq_offsets.size()) {
      const auto t = static_cast<std::size_t>(run.seq_offsets[s] + run.prompt_lengths[s]) + w.position;
      if (t < run.token_ids.size()) w.token_id = run.token_ids[t];
      if (tokenizer && t < run.token_ids.size()) {
        const std::size_t from = std::max(static_cast<std::size_t>(run.seq_offsets[s]),
                                          t >= kContextTokens ? t - kContextTokens : std::size_t{0});
        w.text = tokenizer->decode(run.token_ids.data() + t, 1);
        w.context = tokenizer->decode(run.token_ids.data() + from, t - from);
      }
    }
    w.logp_gen = lg && i < lg->size() ? (*lg)[i] : kNaN;
    w.logp_train = lt && i < lt->size() ? (*lt)[i] : kNaN;
    w.log_ratio = (*lr)[i];
    w.kl = kl && i < kl->size() ? (*kl)[i] : kNaN;
    out.push_back(w);
  }
  return out;
}

PositionCurve per_position_mean(const RunData& run, const std::vector<double>& v, std::size_t max_points) {
  PositionCurve c;
  const std::vector<int64_t> ro = response_offsets(run.seq_offsets, run.prompt_lengths);
  std::size_t maxlen = 0;
  for (std::size_t s = 0; s + 1 < ro.size(); ++s)
    maxlen = std::max(maxlen, static_cast<std::size_t>(ro[s + 1] - ro[s]));
  if (maxlen == 0 || ro.empty() || static_cast<std::size_t>(ro.back()) != v.size()) return c;
  if (max_points < 1) max_points = 1;
  c.bucket = (maxlen + max_points - 1) / max_points;
  const std::size_t nb = (maxlen + c.bucket - 1) / c.bucket;
  std::vector<double> sum(nb, 0.0), cnt(nb, 0.0);
  for (std::size_t s = 0; s + 1 < ro.size(); ++s)
    for (auto i = ro[s]; i < ro[s + 1]; ++i) {
      const double x = v[static_cast<std::size_t>(i)];
      if (std::isnan(x)) continue;
      const auto b = static_cast<std::size_t>(i - ro[s]) / c.bucket;
      sum[b] += x;
      cnt[b] += 1;
    }
  for (std::size_t b = 0; b < nb; ++b) {
    c.position.push_back(static_cast<double>(b * c.bucket));
    c.mean.push_back(cnt[b] > 0 ? sum[b] / cnt[b] : kNaN);
  }
  return c;
}

std::vector<std::string> headline_statistics(const gate::GateResult* g) {
  std::vector<std::string> out = gate::headline_statistics();
  if (g) {
    std::set<std::string> extra;
    for (const auto& c : g->checks)
      if (std::find(out.begin(), out.end(), c.statistic) == out.end()) extra.insert(c.statistic);
    out.insert(out.end(), extra.begin(), extra.end());
  }
  return out;
}

}  // namespace rlp::report
