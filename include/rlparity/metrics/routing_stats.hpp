// Router-flip statistics of a MoE run (RecipeResult::routing, docs/metrics.md): how often the
// generation and training paths' routers choose different expert sets, per MoE layer and over
// tokens, and how much of the logprob mismatch sits on the tokens with a flip.
#pragma once
#include "rlparity/run/run_data.hpp"

namespace rlp {

// From r.routing (gen/train/oracle expert ids, ascending per token and layer) and r.tokens
// (logp_gen, logp_train): per MoE layer flip_frac (gen vs train), gen_flip_oracle_frac and
// train_flip_oracle_frac (when the oracle ran) into r.routing.layers; summary router_flip_frac (a
// flip in any MoE layer), mean_router_flip_frac (mean over layers), mean_abs_log_ratio_flipped and
// mean_abs_log_ratio_unflipped (NaN when no token is in the class). A no-op for a dense model.
void compute_routing_statistics(RecipeResult& r);

}  // namespace rlp
