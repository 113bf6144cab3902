#include "rlparity/metrics/token_metrics.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "rlparity/numerics/libm_model_f64.hpp"
#include "rlparity/numerics/ops.hpp"
#include "rlparity/util/error.hpp"

namespace rlp {

FullVocabStats full_vocab_stats(const float* logp_gen, const float* logp_train, int vocab) {
  RLP_CHECK(vocab > 0 && logp_gen != nullptr && logp_train != nullptr,
            "full_vocab_stats: empty vocabulary or null input");
  FullVocabStats s;
  // The KL / entropy / JS terms: the rule shared with the CUDA kernel (num::FullVocabSums, ops.hpp),
  // added in vocabulary order; the exps and logs of a block of entries first, eight lanes at a time.
  num::FullVocabSums sums;
  int best_g = -1, best_t = -1;
  float max_g = 0.0f, max_t = 0.0f;
  constexpr int kBlock = 256;
  double lg[kBlock], lt[kBlock], pg[kBlock], pt[kBlock], lm[kBlock];
  for (int v0 = 0; v0 < vocab; v0 += kBlock) {
    const int n = std::min(kBlock, vocab - v0);
    for (int j = 0; j < n; ++j) {
      const float fg = logp_gen[v0 + j];
      const float ft = logp_train[v0 + j];
      if (!std::isnan(fg) && (best_g < 0 || fg > max_g)) {
        best_g = v0 + j;
        max_g = fg;
      }
      if (!std::isnan(ft) && (best_t < 0 || ft > max_t)) {
        best_t = v0 + j;
        max_t = ft;
      }
      lg[j] = static_cast<double>(fg);
      lt[j] = static_cast<double>(ft);
    }
    const auto un = static_cast<std::size_t>(n);
    num::exp_model_n(lg, pg, un);
    num::exp_model_n(lt, pt, un);
    for (int j = 0; j < n; ++j) lm[j] = num::FullVocabSums::mean_of(pg[j], pt[j]);
    num::log_model_n(lm, lm, un);
    for (int j = 0; j < n; ++j) sums.add_terms(lg[j], lt[j], pg[j], pt[j], lm[j]);
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
