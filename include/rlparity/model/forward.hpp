// The model forward, written once. It runs any positions [pos0, pos0 + n) of one sequence whose
// earlier positions are already in `cache`: a teacher-forced pass is one call over the whole
// sequence, generation is a prefill call over the prompt followed by one call per decoded token.
// How each op rounds and orders is the Ops' business (EmulatedOps for the CPU kernel paths,
// OracleOps for float64, CudaOps on the GPU); the data flow below is the same for all of them.
// What an Ops provides is the ForwardOps concept (ops_contract.hpp).
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "rlparity/model/model_spec.hpp"
#include "rlparity/model/moe_routing.hpp"
#include "rlparity/model/ops_contract.hpp"
#include "rlparity/model/weights.hpp"

namespace rlp {

// Called after each decoder layer with the residual stream (rows = the rows of this call) and, for
// a MoE layer, what its router chose for those rows (null for a dense layer).
template <class Mat>
using LayerHook = std::function<void(int layer, const Mat& hidden, const MoeRouting* routing)>;

// What a forward call leaves in its output matrix: the log-prob rows (the LM head run), or the final
// normed hidden rows the head reads, for a caller that runs the head later (HeadAt).
enum class ForwardOut { logprobs, final_hidden };

// The layer stack over `n` rows at the given positions. `attend(layer, q, k, v, out)` writes the
// rows' keys/values to their caches and attends; it is the only part that knows which sequence a
// row belongs to. With `replay` (rows of one sequence), every MoE block takes the tape's routing at
// the rows' positions in place of its router's top-k.
template <ForwardOps Ops, class Attend>
void forward_rows(const Ops& ops, const int32_t* tokens, int n, const int* positions, bool decode_step,
                  const Attend& attend, typename Ops::Mat& out, const LayerHook<typename Ops::Mat>& hook,
                  const ReplayedRouting& replay = {}, ForwardOut what = ForwardOut::logprobs) {
  using Mat = typename Ops::Mat;
  const ModelSpec& spec = ops.spec();
  Mat h, xn, q, k, v, attn, o, gate, up, act, down, observed;
  MoeRouting routing;
  ops.embed(tokens, n, h);
  const Mat* pending = nullptr;  // the MLP output, added to the residual by the next norm (fused in vLLM)
  for (int l = 0; l < spec.layers; ++l) {
    ops.add_norm(h, pending, l, NormSlot::input, xn);
    ops.linear(xn, l, Proj::q, q, decode_step);
    ops.linear(xn, l, Proj::k, k, decode_step);
    ops.linear(xn, l, Proj::v, v, decode_step);
    if (spec.qk_norm) {
      ops.head_norm(q, l, Proj::q);
      ops.head_norm(k, l, Proj::k);
    }
    ops.rope(q, k, positions);
    attend(l, q, k, v, attn);
    ops.linear(attn, l, Proj::o, o, decode_step);
    ops.add_norm(h, &o, l, NormSlot::post, xn);
    const bool moe = spec.is_moe_layer(l);
    if (moe) {
      const MoeReplay replayed = replay ? replay.rows(l, n, positions) : MoeReplay{};
      ops.moe(xn, l, down, decode_step, hook ? &routing : nullptr, replay ? &replayed : nullptr);
    } else {
      ops.linear(xn, l, Proj::gate, gate, decode_step);
      ops.linear(xn, l, Proj::up, up, decode_step);
      ops.silu_mul(gate, up, act);
      ops.linear(act, l, Proj::down, down, decode_step);
    }
    pending = &down;
    if (hook) {
      ops.residual_sum(h, down, observed);
      hook(l, observed, moe ? &routing : nullptr);
    }
  }
  ops.add_norm(h, pending, spec.layers, NormSlot::final, xn);
  if (what == ForwardOut::final_hidden)
    out = std::move(xn);
  else
    ops.logprobs(xn, out, decode_step);
}

// Positions [pos0, pos0 + n) of one sequence whose earlier positions are in `cache`; with `replay`,
// its MoE blocks take that sequence's replayed routing.
template <ForwardOps Ops>
void forward(const Ops& ops, typename Ops::Cache& cache, const int32_t* tokens, int n, int pos0,
             typename Ops::Mat& out, const LayerHook<typename Ops::Mat>& hook = {},
             const ReplayedRouting& replay = {}, ForwardOut what = ForwardOut::logprobs) {
  using Mat = typename Ops::Mat;
  std::vector<int> positions(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) positions[static_cast<std::size_t>(i)] = pos0 + i;
  auto attend = [&](int l, const Mat& q, const Mat& k, const Mat& v, Mat& attn) {
    ops.attention(l, q, k, v, pos0, cache, attn);
  };
  forward_rows(ops, tokens, n, positions.data(), false, attend, out, hook, replay, what);
  cache.length = pos0 + n;
}

// The prefill of a generation: positions [0, n) of a sequence with an empty cache, in chunks of
// `chunk` positions (0 = one call), each a forward call whose rows attend to the cached positions
// and themselves, as vLLM's chunked prefill runs a prompt longer than the token budget
// (max_num_batched_tokens) over several scheduler steps. Kernel selection sees each chunk's rows.
// `out` holds the last chunk's rows (its last row predicts the first response token); the hook
// sees every chunk.
template <ForwardOps Ops>
void forward_prefill(const Ops& ops, typename Ops::Cache& cache, const int32_t* tokens, int n, int chunk,
                     typename Ops::Mat& out, const LayerHook<typename Ops::Mat>& hook = {},
                     ForwardOut what = ForwardOut::logprobs) {
  const int step = chunk > 0 ? chunk : n;
  for (int p0 = 0; p0 < n; p0 += step)
    forward(ops, cache, tokens + p0, std::min(step, n - p0), p0, out, hook, {}, what);
}

// One decode step for several sequences at once: row r is token tokens[r] of the sequence whose
// cache is caches[r], at position positions[r]. Rows are computed exactly as one-row calls would be
// (kernel selection never sees how rows were grouped), so grouping changes speed, not results.
template <ForwardOps Ops>
void forward_decode(const Ops& ops, const std::vector<typename Ops::Cache*>& caches, const int32_t* tokens,
                    const int* positions, typename Ops::Mat& out,
                    const LayerHook<typename Ops::Mat>& hook = {}, ForwardOut what = ForwardOut::logprobs) {
  using Mat = typename Ops::Mat;
  const int n = static_cast<int>(caches.size());
  auto attend = [&](int l, const Mat& q, const Mat& k, const Mat& v, Mat& attn) {
    // An Ops may attend all rows in one call (the CUDA backend: one launch per layer and step),
    // computing each row exactly as the one-row calls below do; false when it does not.
    if constexpr (requires { ops.attention_rows(l, q, k, v, positions, caches, attn); }) {
      if (ops.attention_rows(l, q, k, v, positions, caches, attn)) return;
    }
    attn.resize(n, ops.spec().heads * ops.spec().head_dim);
    Mat qr, kr, vr, orow;
    for (int r = 0; r < n; ++r) {
      qr = q.row(r);
      kr = k.row(r);
      vr = v.row(r);
      ops.attention(l, qr, kr, vr, positions[r], *caches[static_cast<std::size_t>(r)], orow);
      attn.row(r) = orow.row(0);
    }
  };
  forward_rows(ops, tokens, n, positions, true, attend, out, hook, {}, what);
  for (int r = 0; r < n; ++r) caches[static_cast<std::size_t>(r)]->length = positions[r] + 1;
}

// Consecutive decode steps of one sequence whose tokens are already known (a replay's response):
// positions [pos0, pos0 + n), whose earlier positions are in *cache.
template <class Cache>
struct KnownSteps {
  Cache* cache = nullptr;
  int pos0 = 0, n = 0;
};

// Decode steps with known tokens, evaluated layer by layer: the rows of every run (concatenated in
// order in `tokens`, `out` and the hook's rows) go through each layer together. Position t in
// layer l needs only layer l-1's output at t and layer l's keys/values of positions < t, which the
// same call wrote before (earlier rows of the run) or the cache holds (earlier calls). Every op is
// called as in forward_decode (decode_step: kernel selection sees the decode batch as M, never the
// row count), and a row attends to its own sequence's cache as a one-row step at its position
// would; so for an Ops whose decode rows do not depend on how many rows a call holds (EmulatedOps:
// see run_path_group) this gives forward_decode's bits, one step after another, from GEMMs over
// many rows.
template <ForwardOps Ops>
void forward_decode_known(const Ops& ops, const std::vector<KnownSteps<typename Ops::Cache>>& runs,
                          const int32_t* tokens, typename Ops::Mat& out,
                          const LayerHook<typename Ops::Mat>& hook = {},
                          ForwardOut what = ForwardOut::logprobs) {
  using Mat = typename Ops::Mat;
  std::vector<int> positions;
  for (const auto& r : runs)
    for (int i = 0; i < r.n; ++i) positions.push_back(r.pos0 + i);
  const int n = static_cast<int>(positions.size());
  auto attend = [&](int l, const Mat& q, const Mat& k, const Mat& v, Mat& attn) {
    if (runs.size() == 1) {
      ops.attention(l, q, k, v, runs[0].pos0, *runs[0].cache, attn);
      return;
    }
    attn.resize(n, ops.spec().heads * ops.spec().head_dim);
    Mat qr, kr, vr, orun;
    int off = 0;
    for (const auto& r : runs) {
      qr = q.middleRows(off, r.n);
      kr = k.middleRows(off, r.n);
      vr = v.middleRows(off, r.n);
      ops.attention(l, qr, kr, vr, r.pos0, *r.cache, orun);
      attn.middleRows(off, r.n) = orun;
      off += r.n;
    }
  };
  forward_rows(ops, tokens, n, positions.data(), true, attend, out, hook, {}, what);
  for (const auto& r : runs) r.cache->length = r.pos0 + r.n;
}

}  // namespace rlp
