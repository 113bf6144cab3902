// The routing rule of a softmax top-k MoE router, written once for the CPU kernel paths (T = float,
// the fp32 softmax of transformers and vLLM) and the float64 oracle (T = double).
//
// transformers' Qwen3MoeSparseMoeBlock.forward (models/qwen3_moe/modeling_qwen3_moe.py):
//   routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
//   routing_weights, selected_experts = torch.topk(routing_weights, self.top_k, dim=-1)
//   if self.norm_topk_prob: routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
//   routing_weights = routing_weights.to(hidden_states.dtype)   (the caller's business: MoeCombine)
// Ties between equal probabilities go to the lower expert index, as vLLM's topk_softmax kernel
// breaks them (csrc/moe/topk_softmax_kernels.cu); torch.topk does not promise an order.
#pragma once
#include <cstdint>
#include <vector>

namespace rlp {

// What one MoE block chose for the rows of a forward call (rows x k expert ids, in top-k slot
// order) and how close each row's k-th choice came to a tie: margin = p_k - p_(k+1) of the router's
// probabilities (softmax, before renormalisation; p_(E+1) = 0 when k = E).
struct MoeRouting {
  int k = 0;
  std::vector<int32_t> ids;
  std::vector<double> margin;
};

// probs[e] = softmax(logits)[e] in T: max subtracted, exp(l - max) by `exp_fn`, summed in index
// order, each divided by the sum (torch's softmax epilogue divides).
template <class T, class Exp>
void moe_softmax(const T* logits, int experts, const Exp& exp_fn, T* probs) {
  T m = logits[0];
  for (int e = 1; e < experts; ++e) m = logits[e] > m ? logits[e] : m;
  T sum = 0;
  for (int e = 0; e < experts; ++e) {
    probs[e] = exp_fn(logits[e] - m);
    sum += probs[e];
  }
  for (int e = 0; e < experts; ++e) probs[e] = probs[e] / sum;
}

// The k largest probabilities in descending order (ties: lower index first) into ids/weights; with
// renormalize, the weights divided by their sum (summed in slot order).
template <class T>
void moe_top_k(const T* probs, int experts, int k, bool renormalize, int* ids, T* weights) {
  std::vector<char> taken(static_cast<std::size_t>(experts), 0);
  for (int s = 0; s < k; ++s) {
    int best = -1;
    for (int e = 0; e < experts; ++e)
      if (!taken[static_cast<std::size_t>(e)] && (best < 0 || probs[e] > probs[best])) best = e;
    taken[static_cast<std::size_t>(best)] = 1;
    ids[s] = best;
    weights[s] = probs[best];
  }
  if (!renormalize) return;
  T sum = 0;
  for (int s = 0; s < k; ++s) sum += weights[s];
  for (int s = 0; s < k; ++s) weights[s] = weights[s] / sum;
}

// p_k - p_(k+1): the k-th chosen probability less the largest one not chosen (0 when all are).
template <class T>
double moe_margin(const T* probs, int experts, int k, const int* ids) {
  T next = 0;
  for (int e = 0; e < experts; ++e) {
    bool taken = false;
    for (int s = 0; s < k; ++s) taken = taken || ids[s] == e;
    if (!taken && probs[e] > next) next = probs[e];
  }
  return static_cast<double>(probs[ids[k - 1]]) - static_cast<double>(next);
}

}  // namespace rlp
