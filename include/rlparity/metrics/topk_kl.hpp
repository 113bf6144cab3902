// Bounds on the full-vocabulary KL(P || Q) when P is known only by its top-k (an engine's
// top_logprobs) and Q completely (an emulated path's log-prob row): docs/metrics.md, "Top-k KL".
//   lower: the KL of the coarsened pair that keeps P's top-k tokens and lumps the rest of the
//          vocabulary into one bucket (each side's remaining mass): by the data-processing
//          inequality it never exceeds the full KL, and it equals it when P's tail is proportional to
//          Q's. This is the "top-k KL with the remaining mass as one bucket".
//   upper: the top-k terms plus the largest tail term any distribution consistent with the top-k
//          allows: P's remaining mass spread over the tokens outside the top-k, none above a cap m
//          (they were not in the top-k: m = the second smallest listed probability, which stays a
//          valid cap when the engine appended the sampled token), placed on the smallest q first (a
//          convex sum is largest at a vertex: m on the smallest q's, the remainder on the next).
// Everything in float64; +inf where Q gives a token P needs zero probability.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace rlp {

struct TopkKlBounds {
  double lower = 0.0, upper = 0.0;
};

// `ids` / `logprobs`: P's top-k (k >= 1, distinct ids in [0, vocab)); `q`: Q's log-probabilities over
// the whole vocabulary. `scratch` is reused between calls (no allocation per token).
TopkKlBounds topk_kl_bounds(const int32_t* ids, const double* logprobs, std::size_t k, const float* q,
                            int vocab, std::vector<double>& scratch);

// Both sides known only by their top-k (two engines' top_logprobs, `compare`): the KL of the pair
// coarsened to the tokens both list and one bucket for the rest, a lower bound on the full KL
// (data processing); each side's rest is max(1 - its listed mass on the shared tokens, its listed
// mass on the others). No upper bound exists: either side's unlisted tokens may be arbitrarily
// unlikely. 0 when no token is shared and the buckets agree.
double topk_kl_lower(const int32_t* p_ids, const double* p_logprobs, std::size_t kp, const int32_t* q_ids,
                     const double* q_logprobs, std::size_t kq);

}  // namespace rlp
