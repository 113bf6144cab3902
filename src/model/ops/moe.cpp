// The sparse MoE block on the CPU (Qwen3-MoE, Qwen2-MoE, Mixtral): router GEMM, softmax top-k routing
// (moe_routing.hpp), each expert's SiLU MLP over the rows routed to it, the combination of the k
// outputs as the path's MoeCombine says, and Qwen2-MoE's gated shared expert. The CUDA backend has
// no MoE kernels yet and refuses MoE models.
#include <algorithm>
#include <numeric>

#include "op_grain.hpp"
#include "rlparity/model/emulated_ops.hpp"
#include "rlparity/model/moe_routing.hpp"
#include "rlparity/numerics/libm_model.hpp"
#include "rlparity/util/parallel.hpp"

namespace rlp {

using ops_detail::kRowGrain;

void EmulatedOps::moe(const Mat& xn, int layer, Mat& out, bool decode_step, MoeRouting* routing,
                      const MoeReplay* replay) const {
  const PreparedLayer& L = w_.layers[static_cast<std::size_t>(layer)];
  const int n = static_cast<int>(xn.rows()), E = spec_.num_experts, k = spec_.experts_per_tok,
            H = spec_.hidden;
  const auto K = static_cast<std::size_t>(k), HS = static_cast<std::size_t>(H);
  // vLLM's fused_moe picks its kernel configuration from the block's token count M
  // (try_get_optimal_moe_config with M = hidden_states.size(0)), not from each expert's share.
  const int m_select = n;

  // Router logits: vLLM's gate linear writes the act dtype; Megatron's moe_router_dtype fp32 keeps
  // fp32 (router_gating_linear on fp32-cast input and weight).
  Mat logits;
  gemm(xn, L.router, logits, style_.router_logits_fp32, decode_step, m_select);
  std::vector<int> ids(static_cast<std::size_t>(n) * K);
  std::vector<float> weights(static_cast<std::size_t>(n) * K);
  if (routing) {
    routing->k = k;
    routing->margin.assign(static_cast<std::size_t>(n), 0.0);
  }
  parallel_for(static_cast<std::size_t>(n), kRowGrain, [&](std::size_t r0, std::size_t r1) {
    std::vector<float> probs(static_cast<std::size_t>(E));
    for (std::size_t r = r0; r < r1; ++r) {
      moe_softmax(
          logits.row(static_cast<Eigen::Index>(r)).data(), E, [](float x) { return num::expf_model(x); },
          probs.data());
      moe_route_row(probs.data(), E, k, spec_.norm_topk_prob, replay, r, ids.data() + r * K,
                    weights.data() + r * K);
      if (routing) routing->margin[r] = moe_margin(probs.data(), E, k, ids.data() + r * K);
    }
  });
  if (routing) {
    routing->ids.assign(ids.begin(), ids.end());
    routing->weights.assign(weights.begin(), weights.end());
  }

  // Each expert over the rows routed to it (ascending rows); contrib holds, per (row, slot), the
  // expert's down-projection output: fp32 accumulator values for the vllm combine (weighted in
  // the GEMM epilogue below), act-dtype values otherwise.
  const bool down_fp32 = style_.moe_combine == MoeCombine::vllm;
  std::vector<float> contrib(static_cast<std::size_t>(n) * K * HS);
  Mat xe, g, u, a, d;
  std::vector<std::size_t> slots;  // row * k + slot, for the rows expert e serves
  for (int e = 0; e < E; ++e) {
    slots.clear();
    for (std::size_t i = 0; i < ids.size(); ++i)
      if (ids[i] == e) slots.push_back(i);
    if (slots.empty()) continue;
    xe.resize(static_cast<Eigen::Index>(slots.size()), H);
    for (std::size_t j = 0; j < slots.size(); ++j)
      xe.row(static_cast<Eigen::Index>(j)) = xn.row(static_cast<Eigen::Index>(slots[j] / K));
    gemm(xe, L.expert(e, Proj::gate), g, false, decode_step, m_select);
    gemm(xe, L.expert(e, Proj::up), u, false, decode_step, m_select);
    silu_mul(g, u, a);
    gemm(a, L.expert(e, Proj::down), d, down_fp32, decode_step, m_select);
    for (std::size_t j = 0; j < slots.size(); ++j)
      std::copy_n(d.row(static_cast<Eigen::Index>(j)).data(), H,
                  contrib.begin() + static_cast<std::ptrdiff_t>(slots[j] * HS));
  }

  out.resize(n, H);
  parallel_for(static_cast<std::size_t>(n), kRowGrain, [&](std::size_t r0, std::size_t r1) {
    std::vector<std::size_t> by_expert(K);
    for (std::size_t r = r0; r < r1; ++r) {
      const float* w = weights.data() + r * K;
      const float* c = contrib.data() + r * K * HS;
      float* o = out.row(static_cast<Eigen::Index>(r)).data();
      // Slots in ascending expert order: the order an expert-by-expert loop (transformers'
      // index_add_) or Megatron's expert-sorted scatter_add_ adds them in.
      std::iota(by_expert.begin(), by_expert.end(), std::size_t{0});
      std::sort(by_expert.begin(), by_expert.end(),
                [&](std::size_t x, std::size_t y) { return ids[r * K + x] < ids[r * K + y]; });
      for (int h = 0; h < H; ++h) {
        const auto hh = static_cast<std::size_t>(h);
        float acc = 0.0f;
        switch (style_.moe_combine) {
          case MoeCombine::vllm:
            // fused_moe_kernel (MUL_ROUTED_WEIGHT): fp32 accumulator * fp32 weight, one rounding;
            // moe_sum (csrc/moe/moe_align_sum_kernels.cu): k <= 4 adds in scalar_t (each add
            // rounded) in top-k slot order, larger k falls back to at::sum_out (fp32, one rounding).
            if (k <= 4) {
              for (std::size_t s = 0; s < K; ++s) acc = round_act(acc + round_act(c[s * HS + hh] * w[s]));
            } else {
              for (std::size_t s = 0; s < K; ++s) acc += round_act(c[s * HS + hh] * w[s]);
              acc = round_act(acc);
            }
            break;
          case MoeCombine::fp32:
            // Megatron unpermute with fp32 probs: permuted_tokens * probs promotes to fp32, the
            // scatter_add_ sums in fp32, one cast back to the input dtype.
            for (std::size_t s : by_expert) acc += c[s * HS + hh] * w[s];
            acc = round_act(acc);
            break;
          case MoeCombine::rounded:
            // transformers: routing_weights.to(hidden dtype); expert_out * weight in that dtype;
            // index_add_ into an act-dtype zero tensor, expert by expert.
            for (std::size_t s : by_expert)
              acc = round_act(acc + round_act(c[s * HS + hh] * round_act(w[s])));
            break;
        }
        o[h] = acc;
      }
    }
  });
  if (spec_.shared_expert_intermediate > 0) add_shared_expert(xn, layer, out, decode_step);
}

void EmulatedOps::add_shared_expert(const Mat& xn, int layer, Mat& out, bool decode_step) const {
  // Qwen2MoeSparseMoeBlock.forward (transformers models/qwen2_moe/modeling_qwen2_moe.py):
  //   shared_expert_output = self.shared_expert(hidden_states)
  //   shared_expert_output = F.sigmoid(self.shared_expert_gate(hidden_states)) * shared_expert_output
  //   final_hidden_states = final_hidden_states + shared_expert_output
  // every tensor in the act dtype (torch's bf16 sigmoid computes 1 / (1 + exp(-x)) in fp32 and rounds
  // once). vLLM rounds alike: Qwen2MoeMLP applies `F.sigmoid(self.expert_gate(x)) * out` to the
  // shared expert's output and SharedFusedMoE's two outputs are summed in one act-dtype add
  // (vllm/model_executor/models/qwen2_moe.py). The shared MLP is the layer's gate/up/down linears
  // (weights.hpp), so it runs like a dense MLP, fp8 included.
  const PreparedLayer& L = w_.layers[static_cast<std::size_t>(layer)];
  Mat g, u, a, d, gate_logit;
  linear(xn, layer, Proj::gate, g, decode_step);
  linear(xn, layer, Proj::up, u, decode_step);
  silu_mul(g, u, a);
  linear(a, layer, Proj::down, d, decode_step);
  gemm(xn, L.shared_gate, gate_logit, false, decode_step);
  parallel_for(static_cast<std::size_t>(xn.rows()), kRowGrain, [&](std::size_t r0, std::size_t r1) {
    for (std::size_t r = r0; r < r1; ++r) {
      const auto i = static_cast<Eigen::Index>(r);
      const float sig = round_act(1.0f / (1.0f + num::expf_model(-gate_logit(i, 0))));
      for (Eigen::Index h = 0; h < out.cols(); ++h)
        out(i, h) = round_act(out(i, h) + round_act(sig * d(i, h)));
    }
  });
}

}  // namespace rlp
