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
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace rlp {

// What one MoE block chose for the rows of a forward call (rows x k expert ids in top-k slot order,
// and the routing weights the combination used, before any act-dtype rounding) and how close each
// row's choice came to a tie: margin = the smallest chosen probability less the largest one not
// chosen (p_k - p_(k+1) for a top-k choice; negative when a replayed set is not this router's top
// k; 0 when k = E), of the router's softmax before renormalisation.
struct MoeRouting {
  int k = 0;
  std::vector<int32_t> ids;
  std::vector<double> weights;
  std::vector<double> margin;
};

// Routing replay (R2/R3; slime --use-rollout-routing-replay, Megatron moe_enable_routing_replay):
// the rows' expert ids as another path chose them (rows x k, slot order) and, for ids+weights, its
// routing weights too. With ids only the router's own probabilities at those ids are used,
// renormalised where the config says: Megatron's RouterReplay.get_replay_topk
// (megatron/core/transformer/moe/router_replay.py) gathers `probs = scores.gather(1, top_indices)`
// in place of torch.topk and the usual normalisation follows.
struct MoeReplay {
  std::vector<int32_t> ids;
  std::vector<double> weights;  // empty: ids only
};

// One sequence's routing at every position a forward ran over (0 .. prompt+response-2), per
// decoder layer (empty for dense layers): positions x k ids and weights. A generation path records
// it; routing replay hands it to the training path.
struct RoutingTape {
  int k = 0;
  std::vector<std::vector<int32_t>> ids;
  std::vector<std::vector<double>> weights;
};

// A tape a path replays in place of its own routing, with its weights (ids+weights) or without.
struct ReplayedRouting {
  const RoutingTape* tape = nullptr;
  bool weights = false;
  explicit operator bool() const { return tape != nullptr; }
  // The replay of layer `layer` for rows at `positions`.
  MoeReplay rows(int layer, int n, const int* positions) const {
    MoeReplay r;
    const auto l = static_cast<std::size_t>(layer), k = static_cast<std::size_t>(tape->k);
    r.ids.resize(static_cast<std::size_t>(n) * k);
    if (weights) r.weights.resize(r.ids.size());
    for (int i = 0; i < n; ++i) {
      const auto src = static_cast<std::size_t>(positions[i]) * k, dst = static_cast<std::size_t>(i) * k;
      std::copy_n(tape->ids[l].begin() + static_cast<std::ptrdiff_t>(src), k,
                  r.ids.begin() + static_cast<std::ptrdiff_t>(dst));
      if (weights)
        std::copy_n(tape->weights[l].begin() + static_cast<std::ptrdiff_t>(src), k,
                    r.weights.begin() + static_cast<std::ptrdiff_t>(dst));
    }
    return r;
  }
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

// weights[0..k) divided by their sum (summed in slot order): norm_topk_prob.
template <class T>
void moe_renormalize(int k, T* weights) {
  T sum = 0;
  for (int s = 0; s < k; ++s) sum += weights[s];
  for (int s = 0; s < k; ++s) weights[s] = weights[s] / sum;
}

// The k largest probabilities in descending order (ties: lower index first) into ids/weights; with
// renormalize, the weights divided by their sum.
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
  if (renormalize) moe_renormalize(k, weights);
}

// Row `row`'s routing: the router's top-k, or with a replay its replayed ids (MoeReplay) and either
// its replayed weights or this router's probabilities at those ids, renormalised as top-k's are.
template <class T>
void moe_route_row(const T* probs, int experts, int k, bool renormalize, const MoeReplay* replay,
                   std::size_t row, int* ids, T* weights) {
  if (!replay) {
    moe_top_k(probs, experts, k, renormalize, ids, weights);
    return;
  }
  const std::size_t at = row * static_cast<std::size_t>(k);
  for (int s = 0; s < k; ++s) {
    ids[s] = replay->ids[at + static_cast<std::size_t>(s)];
    weights[s] = replay->weights.empty() ? probs[ids[s]]
                                         : static_cast<T>(replay->weights[at + static_cast<std::size_t>(s)]);
  }
  if (replay->weights.empty() && renormalize) moe_renormalize(k, weights);
}

// The smallest chosen probability less the largest one not chosen (0 when all are chosen): p_k -
// p_(k+1) for a top-k choice.
template <class T>
double moe_margin(const T* probs, int experts, int k, const int* ids) {
  T next = 0, last = probs[ids[0]];
  for (int s = 1; s < k; ++s) last = probs[ids[s]] < last ? probs[ids[s]] : last;
  for (int e = 0; e < experts; ++e) {
    bool taken = false;
    for (int s = 0; s < k; ++s) taken = taken || ids[s] == e;
    if (!taken && probs[e] > next) next = probs[e];
  }
  return static_cast<double>(last) - static_cast<double>(next);
}

}  // namespace rlp
