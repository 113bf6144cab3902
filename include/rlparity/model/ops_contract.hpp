// The ops contract of the forward (include/rlparity/model/forward.hpp), as a concept: what every
// backend provides (EmulatedOps for the CPU kernel paths, OracleOps in float64, CudaOps on the GPU),
// in the manner of ggml's ggml-backend-impl.h. A new op of the forward (MoE routing, a
// tensor-parallel reduction) is added here once, and every backend must then provide it.
#pragma once
#include <concepts>
#include <cstdint>

#include "rlparity/model/model_spec.hpp"
#include "rlparity/model/moe_routing.hpp"
#include "rlparity/model/weights.hpp"  // Proj, NormSlot

namespace rlp {

// Where the forward call that computed a row of final hidden states had it: the LM head's kernel
// selection and its vocab-parallel reduction are configured from that call (a decode step, or a
// call of m rows with this row at row0; m = 0: the rows of the head's own call). A head that takes
// HeadAt computes a row in any company as that call did (EmulatedHead: a path's log-prob rows are
// computed when the metrics read them).
struct HeadAt {
  bool decode_step = false;
  int m = 0, row0 = 0;
};

// Mat: a row-major matrix (rows = tokens). Cache: one sequence's KV cache with `length`, the
// positions filled. Every op writes its output matrix (resizing it); none keeps a reference.
template <class Ops>
concept ForwardOps = requires(const Ops& ops, typename Ops::Mat& m, const typename Ops::Mat& cm,
                              typename Ops::Cache& cache, const int32_t* tokens, const int* positions, int i,
                              NormSlot slot, Proj proj, bool decode_step) {
  { ops.spec() } -> std::convertible_to<const ModelSpec&>;
  { ops.new_cache(i) } -> std::same_as<typename Ops::Cache>;
  { cache.length } -> std::convertible_to<int>;
  // Rows of the embedding table for n tokens.
  ops.embed(tokens, i, m);
  // resid += delta (if any) in the residual format, out = RMSNorm(resid) * weight (layer ==
  // spec.layers with slot final is the model's last norm).
  ops.add_norm(m, &cm, i, slot, m);
  // out = resid + delta as the next add_norm would store it (for layer hooks).
  ops.residual_sum(cm, cm, m);
  // y = x W^T (+ bias) of one projection; decode_step: the rows are one decode step (kernel
  // selection sees the decode batch as M).
  ops.linear(cm, i, proj, m, decode_step);
  // Per-head RMSNorm of q or k in place (Qwen3).
  ops.head_norm(m, i, proj);
  // Rotary embedding of q and k in place, positions[r] of row r.
  ops.rope(m, m, positions);
  // Causal attention of rows at positions pos0.. against the cache, which takes their k and v.
  ops.attention(i, cm, cm, cm, i, cache, m);
  // act(silu(gate) * up).
  ops.silu_mul(cm, cm, m);
  // A sparse MoE block (ModelSpec::is_moe_layer) on the normed rows: router, softmax top-k
  // routing (moe_routing.hpp), the chosen experts' MLPs and their weighted combination; with a
  // MoeRouting, also what it chose per row; with a MoeReplay, the replayed routing in place of the
  // router's top-k.
  ops.moe(cm, i, m, decode_step, static_cast<MoeRouting*>(nullptr), static_cast<const MoeReplay*>(nullptr));
  // Log-probabilities over the vocabulary from the final normed hidden states.
  ops.logprobs(cm, m, decode_step);
};

}  // namespace rlp

// The ops of ForwardOps as member declarations, for a backend class that has Mat and Cache (each
// backend defines them; the concept checks the result). Written here once so that an op added to
// the contract is declared alike in every backend.
#define RLP_FORWARD_OPS_MEMBERS                                                                         \
  Cache new_cache(int capacity) const;                                                                  \
  void embed(const int32_t* tokens, int n, Mat& h) const;                                               \
  void add_norm(Mat& resid, const Mat* delta, int layer, NormSlot slot, Mat& out) const;                \
  void residual_sum(const Mat& resid, const Mat& delta, Mat& out) const;                                \
  void linear(const Mat& x, int layer, Proj p, Mat& y, bool decode_step = false) const;                 \
  void head_norm(Mat& x, int layer, Proj which) const;                                                  \
  void rope(Mat& q, Mat& k, const int* positions) const;                                                \
  void attention(int layer, const Mat& q, const Mat& k, const Mat& v, int pos0, Cache& cache, Mat& out) \
      const;                                                                                            \
  void silu_mul(const Mat& gate, const Mat& up, Mat& out) const;                                        \
  void moe(const Mat& xn, int layer, Mat& out, bool decode_step = false, MoeRouting* routing = nullptr, \
           const MoeReplay* replay = nullptr) const;                                                    \
  void logprobs(const Mat& xn, Mat& out, bool decode_step = false) const;
