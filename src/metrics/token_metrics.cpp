#include "rlparity/metrics/token_metrics.hpp"

#include <cmath>

#include "rlparity/util/error.hpp"

namespace rlp {

namespace {

// p * (a - b) with the 0 * anything = 0 convention for p == 0 (so -inf - -inf never makes a NaN).
inline double weighted_diff(double p, double a, double b) { return p == 0.0 ? 0.0 : p * (a - b); }

}  // namespace

FullVocabStats full_vocab_stats(const float* logp_gen, const float* logp_train, int vocab) {
  RLP_CHECK(vocab > 0 && logp_gen != nullptr && logp_train != nullptr,
            "full_vocab_stats: empty vocabulary or null input");
  FullVocabStats s;
  double kl_gt = 0.0, kl_tg = 0.0, ent = 0.0, js_g = 0.0, js_t = 0.0;
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
    const double lg = static_cast<double>(fg);
    const double lt = static_cast<double>(ft);
    const double pg = std::exp(lg);
    const double pt = std::exp(lt);
    kl_gt += weighted_diff(pg, lg, lt);
    kl_tg += weighted_diff(pt, lt, lg);
    ent -= weighted_diff(pg, lg, 0.0);
    // log m with m = (p_g + p_t)/2; only needed (and then m > 0) when one of the weights is non-zero.
    if (pg != 0.0 || pt != 0.0) {
      const double lm = std::log(0.5 * (pg + pt));
      js_g += weighted_diff(pg, lg, lm);
      js_t += weighted_diff(pt, lt, lm);
    }
  }
  s.kl_gen_train = kl_gt;
  s.kl_train_gen = kl_tg;
  s.entropy_gen = ent;
  s.top1_gen = best_g;
  s.top1_train = best_t;
  s.top1_agree = best_g >= 0 && best_g == best_t;
  s.js = 0.5 * js_g + 0.5 * js_t;
  return s;
}

}  // namespace rlp
