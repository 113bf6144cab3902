// The model forward, written once. It runs any positions [pos0, pos0 + n) of one sequence whose
// earlier positions are already in `cache`: a teacher-forced pass is one call over the whole
// sequence, generation is a prefill call over the prompt followed by one call per decoded token.
// How each op rounds and orders is the Ops' business (EmulatedOps for the CPU kernel paths,
// OracleOps for float64, a CUDA Ops later); the data flow below is the same for all of them.
//
// Ops provides: Mat (row-major matrix), Cache, spec(), embed, add_norm, residual_sum, linear,
// head_norm, rope, attention, silu_mul, logprobs (see emulated_ops.hpp for the contract).
#pragma once
#include <cstdint>
#include <functional>

#include "rlparity/model/model_spec.hpp"
#include "rlparity/model/weights.hpp"

namespace rlp {

// Called after each decoder layer with the residual stream (rows = the positions of this call).
template <class Mat>
using LayerHook = std::function<void(int layer, const Mat& hidden)>;

template <class Ops>
void forward(const Ops& ops, typename Ops::Cache& cache, const int32_t* tokens, int n, int pos0,
             typename Ops::Mat& logprobs, const LayerHook<typename Ops::Mat>& hook = {}) {
  using Mat = typename Ops::Mat;
  const ModelSpec& spec = ops.spec();
  Mat h, xn, q, k, v, attn, o, gate, up, act, down, observed;
  ops.embed(tokens, n, h);
  const Mat* pending = nullptr;  // the MLP output, added to the residual by the next norm (fused in vLLM)
  for (int l = 0; l < spec.layers; ++l) {
    ops.add_norm(h, pending, l, NormSlot::input, xn);
    ops.linear(xn, l, Proj::q, q);
    ops.linear(xn, l, Proj::k, k);
    ops.linear(xn, l, Proj::v, v);
    if (spec.qk_norm) {
      ops.head_norm(q, l, Proj::q);
      ops.head_norm(k, l, Proj::k);
    }
    ops.rope(q, k, pos0);
    ops.attention(l, q, k, v, pos0, cache, attn);
    ops.linear(attn, l, Proj::o, o);
    ops.add_norm(h, &o, l, NormSlot::post, xn);
    ops.linear(xn, l, Proj::gate, gate);
    ops.linear(xn, l, Proj::up, up);
    ops.silu_mul(gate, up, act);
    ops.linear(act, l, Proj::down, down);
    pending = &down;
    if (hook) {
      ops.residual_sum(h, down, observed);
      hook(l, observed);
    }
  }
  ops.add_norm(h, pending, spec.layers, NormSlot::final, xn);
  ops.logprobs(xn, logprobs);
  cache.length = pos0 + n;
}

}  // namespace rlp
