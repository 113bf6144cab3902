// How replay runs one kernel path over a group of sequences, and the small backend interface that
// lets a backend outside the core (the CUDA ops in kernels/) run the same forward: the core never
// includes a CUDA header; the CLI hands replay a ReplayBackend when the user asks for one. Data
// still flows one way: cli -> kernels (CudaOps) -> core (forward, EmulatedOps, replay).
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rlparity/model/emulated_ops.hpp"
#include "rlparity/model/forward.hpp"
#include "rlparity/util/parallel.hpp"

namespace rlp {

// Rows of the forward whose outputs predict the response tokens, and each layer's hidden state
// at those rows.
template <class Mat>
struct PathOutput {
  Mat logprobs;  // [response_len x vocab], or [response_len x 1] (the response token's) without full rows
  std::vector<Mat> hidden;  // per layer [response_len x hidden]
};

// One sequence of a group: its tokens (prompt + response) and where the response starts.
struct SeqTokens {
  std::vector<int32_t> tokens;
  int prompt_len = 0, response_len = 0;
};

// Runs one path over a group of sequences. Response token j of a sequence is predicted by the
// output at position prompt_len-1+j. Teacher-forced: one pass per sequence over positions
// [0, prompt_len+response_len-1), the sequences in parallel. Decode: a prefill per sequence, then
// decode steps that advance every unfinished sequence by one token in one call (one weight pass
// per step for the whole group; rows are computed exactly as single-sequence steps would be, so
// grouping does not change results).
// prefill_chunk: the decode prefill in chunks of that many prompt positions (forward_prefill).
// full_rows = false keeps only each response token's log-prob (the oracle's use: its full rows
// would be the group's largest buffer).
template <class Ops>
std::vector<PathOutput<typename Ops::Mat>> run_path_group(const Ops& ops, SequenceMode mode,
                                                          const std::vector<SeqTokens>& seqs,
                                                          bool want_hidden, bool full_rows = true,
                                                          int prefill_chunk = 0) {
  using Mat = typename Ops::Mat;
  const ModelSpec& spec = ops.spec();
  const std::size_t G = seqs.size();
  std::vector<PathOutput<Mat>> out(G);
  // Response token j of sequence i is predicted by output row `row` of the forward.
  auto keep = [&](std::size_t i, int j, const Mat& lp, Eigen::Index row) {
    if (full_rows)
      out[i].logprobs.row(j) = lp.row(row);
    else
      out[i].logprobs(j, 0) = lp(row, seqs[i].tokens[static_cast<std::size_t>(seqs[i].prompt_len + j)]);
  };
  for (std::size_t i = 0; i < G; ++i) {
    out[i].logprobs.resize(seqs[i].response_len, full_rows ? spec.vocab : 1);
    if (want_hidden)
      out[i].hidden.assign(static_cast<std::size_t>(spec.layers), Mat(seqs[i].response_len, spec.hidden));
  }
  if (mode == SequenceMode::teacher_forced) {
    parallel_for(G, 1, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) {
        const SeqTokens& s = seqs[i];
        auto cache = ops.new_cache(s.prompt_len + s.response_len);
        Mat lp;
        LayerHook<Mat> hook;
        if (want_hidden)
          hook = [&](int layer, const Mat& h) {
            out[i].hidden[static_cast<std::size_t>(layer)] = h.bottomRows(s.response_len);
          };
        forward(ops, cache, s.tokens.data(), s.prompt_len + s.response_len - 1, 0, lp, hook);
        for (int j = 0; j < s.response_len; ++j) keep(i, j, lp, s.prompt_len - 1 + j);
      }
    });
    return out;
  }
  std::vector<typename Ops::Cache> caches;
  caches.reserve(G);
  int max_r = 0;
  for (std::size_t i = 0; i < G; ++i) {
    const SeqTokens& s = seqs[i];
    caches.push_back(ops.new_cache(s.prompt_len + s.response_len));
    Mat lp;
    LayerHook<Mat> hook;
    if (want_hidden)
      hook = [&](int layer, const Mat& h) {
        out[i].hidden[static_cast<std::size_t>(layer)].row(0) = h.row(h.rows() - 1);
      };
    forward_prefill(ops, caches[i], s.tokens.data(), s.prompt_len, prefill_chunk, lp, hook);
    keep(i, 0, lp, lp.rows() - 1);
    max_r = std::max(max_r, s.response_len);
  }
  std::vector<std::size_t> active;
  std::vector<typename Ops::Cache*> cache_ptrs;
  std::vector<int32_t> tokens;
  std::vector<int> positions;
  Mat lp;
  for (int j = 1; j < max_r; ++j) {
    active.clear();
    cache_ptrs.clear();
    tokens.clear();
    positions.clear();
    for (std::size_t i = 0; i < G; ++i) {
      if (seqs[i].response_len <= j) continue;
      const int pos = seqs[i].prompt_len + j - 1;
      active.push_back(i);
      cache_ptrs.push_back(&caches[i]);
      tokens.push_back(seqs[i].tokens[static_cast<std::size_t>(pos)]);
      positions.push_back(pos);
    }
    LayerHook<Mat> hook;
    if (want_hidden)
      hook = [&](int layer, const Mat& h) {
        for (std::size_t a = 0; a < active.size(); ++a)
          out[active[a]].hidden[static_cast<std::size_t>(layer)].row(j) = h.row(static_cast<Eigen::Index>(a));
      };
    forward_decode(ops, cache_ptrs, tokens.data(), positions.data(), lp, hook);
    for (std::size_t a = 0; a < active.size(); ++a) keep(active[a], j, lp, static_cast<Eigen::Index>(a));
  }
  return out;
}

// One kernel path (a style over prepared weights) on some backend. Outputs are host matrices of
// EmulatedOps::Mat, whichever device computed them.
class PathRunner {
 public:
  using Mat = EmulatedOps::Mat;
  virtual ~PathRunner() = default;
  virtual std::vector<PathOutput<Mat>> run(SequenceMode mode, const std::vector<SeqTokens>& seqs,
                                           bool want_hidden) const = 0;
};

// The CPU kernel paths (the default backend).
class EmulatedRunner final : public PathRunner {
 public:
  EmulatedRunner(const ModelSpec& spec, const PreparedWeights& w, const PathStyle& style, const KvScales* kv)
      : ops_(spec, w, style, kv) {}
  std::vector<PathOutput<Mat>> run(SequenceMode mode, const std::vector<SeqTokens>& seqs,
                                   bool want_hidden) const override {
    return run_path_group(ops_, mode, seqs, want_hidden, true, ops_.style().prefill_chunk);
  }

 private:
  EmulatedOps ops_;
};

// A replay backend: its name ("cpu", "cuda"), what the run file records about it (device, driver,
// library versions), and a factory of path runners. Sampling, KV-scale calibration and the float64
// oracle always run on the CPU, so every backend replays identical tokens with identical scales.
struct ReplayBackend {
  std::string name = "cpu";
  nlohmann::json info = nlohmann::json::object();
  std::function<std::unique_ptr<PathRunner>(const ModelSpec&, const PreparedWeights&, const PathStyle&,
                                            const KvScales*)>
      make_runner;
};

}  // namespace rlp
