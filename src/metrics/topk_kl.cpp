#include "rlparity/metrics/topk_kl.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace rlp {

TopkKlBounds topk_kl_bounds(const int32_t* ids, const double* logprobs, std::size_t k, const float* q,
                            int vocab, std::vector<double>& scratch) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // The top-k terms, P's remaining mass and the cap m on any other token's probability: the
  // second smallest listed probability (the smallest when k = 1). Engines list the sampled token
  // beside the top-k when it is not among them (vLLM returns up to k + 1 entries), so the smallest
  // entry need not bound the rest; the second smallest always does.
  double head = 0.0, p_top = 0.0, m1 = kInf, m2 = kInf;
  for (std::size_t a = 0; a < k; ++a) {
    const double p = std::exp(logprobs[a]), lq = static_cast<double>(q[ids[a]]);
    p_top += p;
    if (p < m1) {
      m2 = m1;
      m1 = p;
    } else if (p < m2) {
      m2 = p;
    }
    if (p > 0) head += lq == -kInf ? kInf : p * (logprobs[a] - lq);
  }
  const double m = k == 1 ? m1 : m2;
  const double p_rest = std::max(0.0, 1.0 - p_top);
  TopkKlBounds b{head, head};
  if (!(p_rest > 0.0)) return b;
  // Q over the tokens outside the top-k, summed directly (1 - Q's top mass loses it to
  // cancellation); the top-k entries are set to +inf so that they sort last and are skipped.
  scratch.resize(static_cast<std::size_t>(vocab));
  for (int v = 0; v < vocab; ++v) scratch[static_cast<std::size_t>(v)] = std::exp(static_cast<double>(q[v]));
  for (std::size_t a = 0; a < k; ++a) scratch[static_cast<std::size_t>(ids[a])] = kInf;
  double q_rest = 0.0;
  for (double qv : scratch)
    if (qv != kInf) q_rest += qv;
  const std::size_t tail_tokens = static_cast<std::size_t>(vocab) - k;
  b.lower = head + (q_rest > 0.0 ? p_rest * std::log(p_rest / q_rest) : kInf);
  // Upper: m on each of the smallest q's, the remainder on the next one.
  if (!(m > 0.0) || tail_tokens == 0) {
    b.upper = kInf;
    return b;
  }
  const double full = std::floor(p_rest / m);
  const std::size_t n_full = static_cast<std::size_t>(std::min(full, static_cast<double>(tail_tokens)));
  const double rem = n_full < tail_tokens ? p_rest - static_cast<double>(n_full) * m : 0.0;
  const std::size_t need = std::min(tail_tokens, n_full + (rem > 0.0 ? 1 : 0));
  if (need == 0) return b;
  std::nth_element(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(need - 1), scratch.end());
  std::sort(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(need));
  double tail = 0.0;
  for (std::size_t i = 0; i < n_full; ++i) tail += scratch[i] > 0.0 ? m * std::log(m / scratch[i]) : kInf;
  if (rem > 0.0 && n_full < tail_tokens)
    tail += scratch[n_full] > 0.0 ? rem * std::log(rem / scratch[n_full]) : kInf;
  // P's remaining mass cannot be placed (more than m on every tail token): no consistent P.
  if (static_cast<double>(tail_tokens) * m < p_rest) tail = kInf;
  b.upper = head + tail;
  return b;
}

double topk_kl_lower(const int32_t* p_ids, const double* p_lp, std::size_t kp, const int32_t* q_ids,
                     const double* q_lp, std::size_t kq) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  double kl = 0.0, p_shared = 0.0, q_shared = 0.0, p_other = 0.0, q_other = 0.0;
  std::vector<char> q_used(kq, 0);
  for (std::size_t a = 0; a < kp; ++a) {
    const double p = std::exp(p_lp[a]);
    std::size_t b = 0;
    while (b < kq && q_ids[b] != p_ids[a]) ++b;
    if (b == kq) {
      p_other += p;
      continue;
    }
    q_used[b] = 1;
    const double q = std::exp(q_lp[b]);
    p_shared += p;
    q_shared += q;
    if (p > 0) kl += q > 0 ? p * (p_lp[a] - q_lp[b]) : kInf;
  }
  for (std::size_t b = 0; b < kq; ++b)
    if (!q_used[b]) q_other += std::exp(q_lp[b]);
  const double p_rest = std::max(1.0 - p_shared, p_other), q_rest = std::max(1.0 - q_shared, q_other);
  if (p_rest > 0) kl += q_rest > 0 ? p_rest * std::log(p_rest / q_rest) : kInf;
  return kl;
}

}  // namespace rlp
