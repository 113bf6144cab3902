// The per-recipe summary table printed by replay/summary (pure: no I/O).
#pragma once
#include <string>
#include <vector>

#include "rlparity/run/run_data.hpp"

namespace rlp {

// One row per recipe, columns: recipe, tokens, mean|dlogp|, p99|dlogp|, max|dlogp|, mean KL,
// token_mult_prob_error, gen_kl_error, ess, top1 agree. Values come from RecipeResult::summary
// (num_tokens, mean_abs_log_ratio, p99_abs_log_ratio, max_abs_log_ratio, mean_kl_gen_train,
// token_mult_prob_error, gen_kl_error, ess, top1_agree_frac); a missing value prints as "-".
// Columns are right-aligned (recipe left-aligned); every line ends with '\n'.
std::string format_summary_table(const std::vector<RecipeResult>& recipes);

}  // namespace rlp
