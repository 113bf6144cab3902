// The per-recipe summary table printed by replay/summary (pure: no I/O).
#pragma once
#include <string>
#include <vector>

#include "rlparity/run/run_data.hpp"

namespace rlp {

// One row per recipe, columns: recipe, then num_tokens and the catalogue's headline statistics
// (metric_catalogue.hpp), headed by their labels (tokens, mean|dlogp|, p99|dlogp|, max|dlogp|,
// mean KL, token_mult_prob_error, gen_kl_error, ess, top1 agree) and printed in their formats.
// Values come from RecipeResult::summary; a missing value prints as "-".
// Columns are right-aligned (recipe left-aligned); every line ends with '\n'.
std::string format_summary_table(const std::vector<RecipeResult>& recipes);

// MoE runs: "router flips (MoE, routing replay <mode>)" and one row per recipe with router_flip_frac,
// mean_router_flip_frac and the mean |log ratio| of flipped and unflipped tokens; empty for a dense run.
std::string format_routing_table(const std::vector<RecipeResult>& recipes);

// "engine vs emulation" and the same table over engine_comparison_rows (engine_side.hpp): one row
// "<recipe> engine-vs-<side>" per recipe and side the engine was compared with; empty when none.
std::string format_engine_table(const std::vector<RecipeResult>& recipes);

}  // namespace rlp
