// Per-position full-vocabulary statistics between the generation-style and the training-style
// distributions of one response token (DESIGN section 5). Inputs are log-probabilities (already
// log-softmaxed) over the whole vocabulary; everything is accumulated in double, in index order,
// so the result is deterministic and independent of threading.
#pragma once

namespace rlp {

struct FullVocabStats {
  double kl_gen_train = 0.0;  // KL(p_gen || p_train) = sum_v p_g(v) (lg(v) - lt(v))
  double kl_train_gen = 0.0;  // KL(p_train || p_gen) = sum_v p_t(v) (lt(v) - lg(v))
  double entropy_gen = 0.0;   // H(p_gen) = -sum_v p_g(v) lg(v)
  bool top1_agree = false;    // top1_gen == top1_train
  int top1_gen = -1;          // argmax of logp_gen (ties -> lowest index)
  int top1_train = -1;        // argmax of logp_train (ties -> lowest index)
  double js = 0.0;            // Jensen-Shannon: 0.5 KL(g||m) + 0.5 KL(t||m), m = (p_g + p_t)/2, nats
};

// p = exp(l) computed in double from the float log-probs. Terms with p = 0 contribute 0 (0 log 0 = 0);
// a term with p_g > 0 and p_t = 0 makes KL(g||t) +inf. NaN inputs propagate to the sums; NaN entries
// are never chosen as top-1. vocab must be > 0.
FullVocabStats full_vocab_stats(const float* logp_gen, const float* logp_train, int vocab);

}  // namespace rlp
