// The engine as a third side: when the inputs carry a real engine's logprobs (/inputs/engine_logprobs),
// each recipe also compares the engine with its generation path, its training path and the oracle,
// with the same per-token log ratio and the catalogue's summary statistics (docs/metrics.md).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "rlparity/metrics/statistics.hpp"

namespace rlp {

// The sides the engine is compared with: the token metric read and the name used in outputs.
struct EngineSide {
  const char* token_metric;  // logp_gen, logp_train, logp_oracle
  const char* name;          // gen, train, oracle
};
inline constexpr std::array<EngineSide, 3> kEngineSides = {
    {{"logp_gen", "gen"}, {"logp_train", "train"}, {"logp_oracle", "oracle"}}};

// "engine_<side>_": the prefix of that pair's summary attributes (engine_gen_mean_abs_log_ratio).
std::string engine_prefix(const EngineSide& side);

// For each side whose token metric r has: r.engine["log_ratio_engine_<side>"] = l_side - l_engine per
// response token (NaN where the engine gave none), and every summary statistic of the pair as
// r.summary["engine_<side>_<name>"], computed by compute_recipe_statistics with the engine as the
// sampling side (lg := l_engine, lt := l_side) over the tokens that have an engine logprob (a
// sequence without any counts as empty). Nothing when no token has one. `engine_logprobs` has one
// value per response token (NaN: none); offsets as in compute_recipe_statistics.
void compute_engine_statistics(RecipeResult& r, const std::vector<double>& engine_logprobs,
                               const std::vector<int64_t>& response_offsets, const StatsOptions& opts);

// One pseudo-recipe per recipe and side with engine statistics, named "<recipe> engine-vs-<side>",
// whose summary holds those statistics under their catalogue names (for the summary table and the
// report).
std::vector<RecipeResult> engine_comparison_rows(const std::vector<RecipeResult>& recipes);

}  // namespace rlp
