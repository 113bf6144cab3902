// Per-token, per-sequence and summary statistics of one recipe (DESIGN section 5; every name and
// its exact definition is in docs/metrics.md). Pure functions of the token arrays: deterministic,
// sequential double accumulation in token order.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "rlparity/run/run_data.hpp"

namespace rlp {

struct StatsOptions {
  double is_cap = 2.0;  // C: truncated IS clips r > C; masked IS drops r outside [1/C, C]. Must be > 1.
  // PPO's trust region at the first update (--ppo-eps LOW,HIGH): r outside [1 - low, 1 + high] is
  // clipped. Defaults are DAPO's clip-higher (0.2, 0.28). 0 <= low < 1, high >= 0.
  double ppo_eps_low = 0.2, ppo_eps_high = 0.28;
  // IcePop's mask (--icepop-bounds LOW,HIGH): tokens with r outside [low, high] are dropped.
  // 0 < low < 1 < high.
  double icepop_low = 0.5, icepop_high = 2.0;
};

// Throws InputError naming the option (--is-cap, --ppo-eps, --icepop-bounds) when a bound is out of
// its range above.
void validate_stats_options(const StatsOptions& opts);

// Nearest-rank percentile of `sorted` (ascending, no NaN): the element at 1-based rank
// ceil(per_mille * n / 1000), clamped to [1, n]; NaN for empty input. per_mille in [0, 1000]
// (500 = median, 999 = p99.9). Computed with integers, so exactly reproducible.
double percentile_nearest_rank(const std::vector<double>& sorted, int per_mille);

// Order and moment statistics of one array, as in the summary attributes. std is the population
// standard deviation (divide by n). If any value is NaN, min/max/percentiles are NaN (mean and std
// are NaN anyway). All NaN for an empty array.
struct Distribution {
  double mean, std, min, max, p50, p90, p99, p999;
};
Distribution describe(const std::vector<double>& values);

// Adds to r.tokens: log_ratio, abs_log_ratio, ratio, prob_diff, k3 (and gen_err_oracle,
// train_err_oracle when "logp_oracle" is present); to r.sequences: length, sum_log_ratio,
// geo_mean_ratio, max_abs_log_ratio, mean_abs_log_ratio, seq_mult_prob_error, ppl_gen, ppl_train
// (and mean_kl_gen_train when "kl_gen_train" is present); and every summary value to r.summary
// (existing entries of the same names are overwritten).
// `response_offsets` has S+1 entries: sequence s owns tokens [offsets[s], offsets[s+1]).
// Throws rlp::Error when logp_gen/logp_train are missing, token arrays differ in length, or the
// offsets are not 0 = o_0 <= ... <= o_S = number of tokens.
void compute_recipe_statistics(RecipeResult& r, const std::vector<int64_t>& response_offsets,
                               const StatsOptions& opts);

// Response offsets (S+1) into the per-token arrays from the /inputs layout: sequence s has
// (seq_offsets[s+1] - seq_offsets[s] - prompt_lengths[s]) response tokens.
std::vector<int64_t> response_offsets(const std::vector<int64_t>& seq_offsets,
                                      const std::vector<int32_t>& prompt_lengths);

}  // namespace rlp
