#include "rlparity/metrics/token_metrics.hpp"

#include <cmath>

#include "rlparity/numerics/ops.hpp"
#include "rlparity/util/error.hpp"

namespace rlp {

FullVocabStats full_vocab_stats(const float* logp_gen, const float* logp_train, int vocab) {
  RLP_CHECK(vocab > 0 && logp_gen != nullptr && logp_train != nullptr,
            "full_vocab_stats: empty vocabulary or null input");
  FullVocabStats s;
  // The KL / entropy / JS terms: the rule shared with the CUDA kernel (num::FullVocabSums, ops.hpp),
  // added in vocabulary order.
  num::FullVocabSums sums;
  int best_g = -1, best_t = -1;
  float max_g = 0.0f, max_t = 0.0f;
  for (int v = 0; v < vocab; ++v) {
    const float fg = logp_gen[v];
    const float ft = logp_train[v];
    if (!std::isnan(fg) && (best_g < 0 || fg > max_g)) {
      best_g = v;
      max_g = fg;
    }
    if (!std::isnan(ft) && (best_t < 0 || ft > max_t)) {
      best_t = v;
      max_t = ft;
    }
    sums.add(static_cast<double>(fg), static_cast<double>(ft));
  }
  s.kl_gen_train = sums.kl_gen_train;
  s.kl_train_gen = sums.kl_train_gen;
  s.entropy_gen = sums.entropy_gen;
  s.top1_gen = best_g;
  s.top1_train = best_t;
  s.top1_agree = best_g >= 0 && best_g == best_t;
  s.js = sums.js();
  return s;
}

}  // namespace rlp
