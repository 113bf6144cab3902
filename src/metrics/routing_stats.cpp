#include "rlparity/metrics/routing_stats.hpp"

#include <cmath>
#include <limits>

#include "rlparity/util/error.hpp"

namespace rlp {
namespace {

// Whether two paths chose different expert sets for token t at MoE layer m (ids ascending).
bool differs(const std::vector<int32_t>& a, const std::vector<int32_t>& b, std::size_t t, std::size_t m,
             std::size_t layers, std::size_t k) {
  const std::size_t at = (t * layers + m) * k;
  for (std::size_t s = 0; s < k; ++s)
    if (a[at + s] != b[at + s]) return true;
  return false;
}

}  // namespace

void compute_routing_statistics(RecipeResult& r) {
  RoutingResult& rt = r.routing;
  if (rt.empty()) return;
  const std::vector<double>& lg = r.tokens.at("logp_gen");
  const std::vector<double>& lt = r.tokens.at("logp_train");
  const std::size_t T = lg.size(), M = static_cast<std::size_t>(rt.moe_layers),
                    K = static_cast<std::size_t>(rt.k);
  RLP_CHECK(rt.gen_experts.size() == T * M * K && rt.train_experts.size() == T * M * K,
            "recipe '{}': routing arrays hold {} and {} ids for {} tokens x {} MoE layers x {}", r.name,
            rt.gen_experts.size(), rt.train_experts.size(), T, M, K);
  const bool oracle = !rt.oracle_experts.empty();
  std::vector<double> flip(M, 0.0), gen_oracle(M, 0.0), train_oracle(M, 0.0);
  double any = 0.0, sum_flipped = 0.0, sum_kept = 0.0, n_flipped = 0.0, n_kept = 0.0;
  for (std::size_t t = 0; t < T; ++t) {
    bool flipped = false;
    for (std::size_t m = 0; m < M; ++m) {
      const bool f = differs(rt.gen_experts, rt.train_experts, t, m, M, K);
      flip[m] += f ? 1.0 : 0.0;
      flipped = flipped || f;
      if (oracle) {
        gen_oracle[m] += differs(rt.gen_experts, rt.oracle_experts, t, m, M, K) ? 1.0 : 0.0;
        train_oracle[m] += differs(rt.train_experts, rt.oracle_experts, t, m, M, K) ? 1.0 : 0.0;
      }
    }
    const double abs_lr = std::fabs(lt[t] - lg[t]);
    (flipped ? sum_flipped : sum_kept) += abs_lr;
    (flipped ? n_flipped : n_kept) += 1.0;
    any += flipped ? 1.0 : 0.0;
  }
  const double nan = std::numeric_limits<double>::quiet_NaN(), dn = static_cast<double>(T);
  double mean_flip = 0.0;
  for (std::size_t m = 0; m < M; ++m) {
    flip[m] = T ? flip[m] / dn : nan;
    gen_oracle[m] = T ? gen_oracle[m] / dn : nan;
    train_oracle[m] = T ? train_oracle[m] / dn : nan;
    mean_flip += flip[m];
  }
  rt.layers["flip_frac"] = flip;
  if (oracle) {
    rt.layers["gen_flip_oracle_frac"] = gen_oracle;
    rt.layers["train_flip_oracle_frac"] = train_oracle;
  }
  r.summary["router_flip_frac"] = T ? any / dn : nan;
  r.summary["mean_router_flip_frac"] = M ? mean_flip / static_cast<double>(M) : nan;
  r.summary["mean_abs_log_ratio_flipped"] = n_flipped > 0 ? sum_flipped / n_flipped : nan;
  r.summary["mean_abs_log_ratio_unflipped"] = n_kept > 0 ? sum_kept / n_kept : nan;
}

}  // namespace rlp
