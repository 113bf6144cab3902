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
#include <type_traits>
#include <vector>

#include "rlparity/model/emulated_ops.hpp"
#include "rlparity/model/forward.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/parallel.hpp"

namespace rlp {

// How a decode path evaluates the decode steps of responses it is given (a replay's tokens are
// known before the path runs; sampling stays step by step in any case):
//   token_by_token: one forward_decode call per step for the group's unfinished sequences (the
//     reference, as an engine runs);
//   layerwise: forward_decode_known over chunks of steps, each layer over all the chunk's rows at
//     once. The same bits wherever the Ops computes a decode row whatever the call's row count:
//     EmulatedOps does for every knob (GEMM order from the decode batch's M, fp8 activation scales
//     per row and 128-group, the all-reduce message of one decode step, attention per row over its
//     own prefix with partitions and blocks counted from position 0, the fp8 KV cache written
//     before it is read). The CUDA backend with cuBLASLt GEMMs does not (cuBLASLt picks its
//     algorithm from the real M), so it stays token by token.
enum class DecodeEval { token_by_token, layerwise };

// Rows per forward_decode_known call in a layer-wise decode: enough that the GEMMs run at their
// many-row rate, few enough that the call's log-prob rows (rows x vocab floats) stay small beside
// the group's kept rows.
inline constexpr int kLayerwiseDecodeRows = 512;

// Rows of the forward whose outputs predict the response tokens, and each layer's hidden state
// at those rows.
template <class Mat>
struct PathOutput {
  // [response_len x vocab], or [response_len x 1] (the response token's) without full rows. Empty
  // when the head is deferred: then log_prob_rows computes the rows from head_in when they are read.
  Mat logprobs;
  // A deferred LM head: the final normed hidden state of each response row [response_len x hidden],
  // where its forward call had it, and the head (one that owns what it reads: EmulatedHead).
  Mat head_in;
  std::vector<HeadAt> head_at;
  std::function<void(const Mat& xn, Mat& out, HeadAt at)> head;
  std::vector<Mat> hidden;  // per layer [response_len x hidden]
  // Per layer, MoE layers only (empty for dense ones): the router's choices at the same rows,
  // [response_len x k] expert ids in top-k slot order, and [response_len] margins (moe_routing.hpp).
  std::vector<std::vector<int32_t>> experts;
  std::vector<std::vector<double>> margin;
  // The routing at every forward position, when the sequence asked for it (SeqTokens::record_routing).
  RoutingTape tape;
};

// Full log-prob rows [j0, j0 + n) of a path's output, row-major: in o.logprobs, or computed into
// `buf` by its deferred head, each run of rows that came from one forward call (a decode step's rows
// are alike whatever their step) in one head call.
template <class Mat>
const typename Mat::Scalar* log_prob_rows(const PathOutput<Mat>& o, int j0, int n, Mat& buf) {
  if (!o.head) return o.logprobs.row(j0).data();
  auto same_call = [](const HeadAt& a, const HeadAt& b) {
    return a.decode_step == b.decode_step && (a.decode_step || (a.m == b.m && a.row0 + 1 == b.row0));
  };
  Mat part;
  for (int a = j0; a < j0 + n;) {
    int b = a + 1;
    while (b < j0 + n &&
           same_call(o.head_at[static_cast<std::size_t>(b - 1)], o.head_at[static_cast<std::size_t>(b)]))
      ++b;
    if (a == j0 && b == j0 + n) {
      o.head(o.head_in.middleRows(j0, n), buf, o.head_at[static_cast<std::size_t>(a)]);
      break;
    }
    o.head(o.head_in.middleRows(a, b - a), part, o.head_at[static_cast<std::size_t>(a)]);
    buf.resize(n, part.cols());
    buf.middleRows(a - j0, b - a) = part;
    a = b;
  }
  return buf.data();
}

// Response rows per call of a deferred LM head: when the metrics read full rows (log_prob_rows in
// kHeadRows reads), and for a teacher-forced path's token log-probs (the oracle's).
inline constexpr int kHeadRows = 64;

// An Ops whose LM head can run after the forward (ForwardOut::final_hidden): head() computes rows
// as the forward call they came from would (EmulatedOps; OracleOps, whose rows never depend on
// the call).
template <class Ops>
concept DeferrableHead = requires(const Ops& ops, const typename Ops::Mat& x, typename Ops::Mat& y) {
  ops.head().logprobs(x, y, HeadAt{});
};

// Rows [src, src + n) of one forward call's layer output (and its MoE routing) kept as response rows
// [dst, dst + n).
template <class Mat>
void keep_layer_rows(PathOutput<Mat>& o, int layer, const Mat& h, const MoeRouting* routing, Eigen::Index src,
                     int dst, int n) {
  const auto l = static_cast<std::size_t>(layer);
  o.hidden[l].middleRows(dst, n) = h.middleRows(src, n);
  if (!routing) return;
  const auto k = static_cast<std::ptrdiff_t>(routing->k), from = static_cast<std::ptrdiff_t>(src);
  std::copy_n(routing->ids.begin() + from * k, n * k, o.experts[l].begin() + dst * k);
  std::copy_n(routing->margin.begin() + from, n, o.margin[l].begin() + dst);
}

// Rows [src, src + n) of one forward call's MoE routing recorded at positions [pos0, pos0 + n) of
// o.tape (nothing when the tape was not asked for or the layer is dense).
template <class Mat>
void record_tape_rows(PathOutput<Mat>& o, int layer, const MoeRouting* routing, Eigen::Index src, int pos0,
                      int n) {
  if (!routing || o.tape.k == 0) return;
  const auto l = static_cast<std::size_t>(layer);
  const auto k = static_cast<std::ptrdiff_t>(routing->k), from = static_cast<std::ptrdiff_t>(src) * k,
             to = static_cast<std::ptrdiff_t>(pos0) * k;
  std::copy_n(routing->ids.begin() + from, n * k, o.tape.ids[l].begin() + to);
  std::copy_n(routing->weights.begin() + from, n * k, o.tape.weights[l].begin() + to);
}

// One sequence of a group: its tokens (prompt + response) and where the response starts. For a MoE
// model: record_routing keeps the path's routing at every position (PathOutput::tape), and
// routing_replay makes a teacher-forced path take another path's tape (routing replay).
struct SeqTokens {
  std::vector<int32_t> tokens;
  int prompt_len = 0, response_len = 0;
  bool record_routing = false;
  ReplayedRouting routing_replay;
};

// Runs one path over a group of sequences. Response token j of a sequence is predicted by the
// output at position prompt_len-1+j. Teacher-forced: one pass per sequence over positions
// [0, prompt_len+response_len-1), the sequences in parallel. Decode: a prefill per sequence, then
// decode steps that advance every unfinished sequence by one token in one call (one weight pass
// per step for the whole group; rows are computed exactly as single-sequence steps would be, so
// grouping does not change results), or with DecodeEval::layerwise the same steps layer by layer
// over chunks of steps of the whole group.
// prefill_chunk: the decode prefill in chunks of that many prompt positions (forward_prefill).
// full_rows = false keeps only each response token's log-prob (the oracle's use: its full rows
// would be the group's largest buffer). Full rows of an Ops with a DeferrableHead are left to the
// metrics (PathOutput::head): the forward keeps the response rows' final hidden states, and no path
// holds [response x vocab] floats while another runs.
// decode: how the decode steps after the prefills are evaluated (DecodeEval); layerwise only for an
// Ops whose decode rows do not depend on how many rows a call holds, in calls of about
// layerwise_rows rows (at least one step of every sequence).
template <class Ops>
std::vector<PathOutput<typename Ops::Mat>> run_path_group(const Ops& ops, SequenceMode mode,
                                                          const std::vector<SeqTokens>& seqs,
                                                          bool want_hidden, bool full_rows = true,
                                                          int prefill_chunk = 0,
                                                          DecodeEval decode = DecodeEval::token_by_token,
                                                          int layerwise_rows = kLayerwiseDecodeRows) {
  using Mat = typename Ops::Mat;
  const ModelSpec& spec = ops.spec();
  const std::size_t G = seqs.size();
  std::vector<PathOutput<Mat>> out(G);
  constexpr bool deferrable = DeferrableHead<Ops>;
  // Full rows: left to the metrics. Only the tokens' log-probs of a teacher-forced path: its head
  // runs over the response rows alone, kHeadRows at a time (never over the prompt's rows, never
  // [positions x vocab] at once).
  const bool defer = deferrable && full_rows;
  const bool head_after = deferrable && !full_rows && mode == SequenceMode::teacher_forced;
  const ForwardOut what = defer || head_after ? ForwardOut::final_hidden : ForwardOut::logprobs;
  // Response token j of sequence i is predicted by output row `row` of the forward, a call that
  // had it where `at` says.
  auto keep = [&](std::size_t i, int j, const Mat& lp, Eigen::Index row, HeadAt at) {
    if (defer) {
      out[i].head_in.row(j) = lp.row(row);
      out[i].head_at[static_cast<std::size_t>(j)] = at;
    } else if (full_rows) {
      out[i].logprobs.row(j) = lp.row(row);
    } else {
      out[i].logprobs(j, 0) = lp(row, seqs[i].tokens[static_cast<std::size_t>(seqs[i].prompt_len + j)]);
    }
  };
  const HeadAt decode_row{true, 0, 0};
  std::function<void(const Mat&, Mat&, HeadAt)> head;  // one copy of the head for the group's outputs
  if constexpr (deferrable) {
    if (defer)
      head = [h = std::make_shared<const std::remove_cvref_t<decltype(ops.head())>>(ops.head())](
                 const Mat& xn, Mat& lp, HeadAt at) { h->logprobs(xn, lp, at); };
  }
  bool any_tape = false;
  for (std::size_t i = 0; i < G; ++i) {
    if (defer) {
      out[i].head = head;
      out[i].head_at.resize(static_cast<std::size_t>(seqs[i].response_len));
      // (teacher-forced: the forward's own rows become head_in)
      if (mode != SequenceMode::teacher_forced) out[i].head_in.resize(seqs[i].response_len, spec.hidden);
    }
    if (!defer && !(full_rows && mode == SequenceMode::teacher_forced))  // (those become the forward's rows)
      out[i].logprobs.resize(seqs[i].response_len, full_rows ? spec.vocab : 1);
    const auto R = static_cast<std::size_t>(seqs[i].response_len), L = static_cast<std::size_t>(spec.layers);
    if (seqs[i].record_routing && spec.moe_layer_count() > 0) {
      any_tape = true;
      RoutingTape& tape = out[i].tape;
      tape.k = spec.experts_per_tok;
      tape.ids.resize(L);
      tape.weights.resize(L);
      const auto rows = static_cast<std::size_t>(seqs[i].prompt_len + seqs[i].response_len - 1) *
                        static_cast<std::size_t>(tape.k);
      for (std::size_t l = 0; l < L; ++l) {
        if (!spec.is_moe_layer(static_cast<int>(l))) continue;
        tape.ids[l].assign(rows, -1);
        tape.weights[l].assign(rows, 0.0);
      }
    }
    if (seqs[i].routing_replay && mode != SequenceMode::teacher_forced)
      RLP_THROW("run_path_group: routing replay needs a teacher-forced path");
    if (!want_hidden) continue;
    out[i].hidden = sized_mats<Mat>(L, seqs[i].response_len, spec.hidden);
    out[i].experts.resize(L);
    out[i].margin.resize(L);
    for (std::size_t l = 0; l < L; ++l) {
      if (!spec.is_moe_layer(static_cast<int>(l))) continue;
      out[i].experts[l].assign(R * static_cast<std::size_t>(spec.experts_per_tok), -1);
      out[i].margin[l].assign(R, 0.0);
    }
  }
  if (mode == SequenceMode::teacher_forced) {
    parallel_for(G, 1, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i) {
        const SeqTokens& s = seqs[i];
        auto cache = ops.new_cache(s.prompt_len + s.response_len);
        Mat lp;
        LayerHook<Mat> hook;
        if (want_hidden || s.record_routing)
          hook = [&](int layer, const Mat& h, const MoeRouting* routing) {
            if (want_hidden)
              keep_layer_rows(out[i], layer, h, routing, h.rows() - s.response_len, 0, s.response_len);
            record_tape_rows(out[i], layer, routing, 0, 0, static_cast<int>(h.rows()));
          };
        const int n = s.prompt_len + s.response_len - 1;
        forward(ops, cache, s.tokens.data(), n, 0, lp, hook, s.routing_replay, what);
        if (full_rows) {
          // The response rows moved to the top of the forward's own rows (log-probs, or the final
          // hidden states of a deferred head), which then become the output: no second matrix.
          for (int j = 0; j < s.response_len; ++j) lp.row(j) = lp.row(s.prompt_len - 1 + j);
          lp.conservativeResize(s.response_len, Eigen::NoChange);
          if (defer) {
            out[i].head_in = std::move(lp);
            for (int j = 0; j < s.response_len; ++j)
              out[i].head_at[static_cast<std::size_t>(j)] = HeadAt{false, n, s.prompt_len - 1 + j};
          } else {
            out[i].logprobs = std::move(lp);
          }
        } else if (head_after) {
          if constexpr (deferrable) {
            Mat part;
            for (int j0 = 0; j0 < s.response_len; j0 += kHeadRows) {
              const int rows = std::min(kHeadRows, s.response_len - j0), row0 = s.prompt_len - 1 + j0;
              ops.head().logprobs(lp.middleRows(row0, rows), part, HeadAt{false, n, row0});
              for (int t = 0; t < rows; ++t) keep(i, j0 + t, part, t, {});
            }
          }
        } else {
          for (int j = 0; j < s.response_len; ++j) keep(i, j, lp, s.prompt_len - 1 + j, {});
        }
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
    std::vector<int> chunk_pos(static_cast<std::size_t>(spec.layers),
                               0);  // where each layer's next chunk starts
    if (want_hidden || s.record_routing)
      hook = [&](int layer, const Mat& h, const MoeRouting* routing) {
        if (want_hidden) keep_layer_rows(out[i], layer, h, routing, h.rows() - 1, 0, 1);
        int& p0 = chunk_pos[static_cast<std::size_t>(layer)];
        record_tape_rows(out[i], layer, routing, 0, p0, static_cast<int>(h.rows()));
        p0 += static_cast<int>(h.rows());
      };
    forward_prefill(ops, caches[i], s.tokens.data(), s.prompt_len, prefill_chunk, lp, hook, what);
    const int last = static_cast<int>(lp.rows()) - 1;
    keep(i, 0, lp, last, HeadAt{false, last + 1, last});
    max_r = std::max(max_r, s.response_len);
  }
  if (decode == DecodeEval::layerwise) {
    // Steps j0..j1-1 of every sequence that has them, one chunk at a time: a chunk's rows need the
    // caches of every earlier step at every layer, which the earlier chunks completed.
    const int steps = std::max(1, layerwise_rows / static_cast<int>(G));
    std::vector<KnownSteps<typename Ops::Cache>> runs;
    std::vector<std::size_t> owner;  // sequence of each run
    std::vector<int32_t> tokens;
    Mat lp;
    for (int j0 = 1; j0 < max_r; j0 += steps) {
      const int j1 = std::min(max_r, j0 + steps);
      runs.clear();
      owner.clear();
      tokens.clear();
      for (std::size_t i = 0; i < G; ++i) {
        const SeqTokens& s = seqs[i];
        if (s.response_len <= j0) continue;
        const int pos0 = s.prompt_len + j0 - 1, n = std::min(j1, s.response_len) - j0;
        runs.push_back({&caches[i], pos0, n});
        owner.push_back(i);
        tokens.insert(tokens.end(), s.tokens.begin() + pos0, s.tokens.begin() + pos0 + n);
      }
      LayerHook<Mat> hook;
      if (want_hidden || any_tape)
        hook = [&](int layer, const Mat& h, const MoeRouting* routing) {
          for (std::size_t a = 0, off = 0; a < runs.size(); off += static_cast<std::size_t>(runs[a].n), ++a) {
            const auto src = static_cast<Eigen::Index>(off);
            if (want_hidden) keep_layer_rows(out[owner[a]], layer, h, routing, src, j0, runs[a].n);
            record_tape_rows(out[owner[a]], layer, routing, src, runs[a].pos0, runs[a].n);
          }
        };
      forward_decode_known(ops, runs, tokens.data(), lp, hook, what);
      for (std::size_t a = 0, off = 0; a < runs.size(); off += static_cast<std::size_t>(runs[a].n), ++a)
        for (int t = 0; t < runs[a].n; ++t)
          keep(owner[a], j0 + t, lp, static_cast<Eigen::Index>(off) + t, decode_row);
    }
    return out;
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
    if (want_hidden || any_tape)
      hook = [&](int layer, const Mat& h, const MoeRouting* routing) {
        for (std::size_t a = 0; a < active.size(); ++a) {
          const auto src = static_cast<Eigen::Index>(a);
          if (want_hidden) keep_layer_rows(out[active[a]], layer, h, routing, src, j, 1);
          record_tape_rows(out[active[a]], layer, routing, src, positions[a], 1);
        }
      };
    forward_decode(ops, cache_ptrs, tokens.data(), positions.data(), lp, hook, what);
    for (std::size_t a = 0; a < active.size(); ++a)
      keep(active[a], j, lp, static_cast<Eigen::Index>(a), decode_row);
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
  EmulatedRunner(const ModelSpec& spec, const PreparedWeights& w, const PathStyle& style, const KvScales* kv,
                 DecodeEval decode = DecodeEval::layerwise)
      : ops_(spec, w, style, kv), decode_(decode) {}
  std::vector<PathOutput<Mat>> run(SequenceMode mode, const std::vector<SeqTokens>& seqs,
                                   bool want_hidden) const override {
    return run_path_group(ops_, mode, seqs, want_hidden, true, ops_.style().prefill_chunk, decode_);
  }

 private:
  EmulatedOps ops_;
  DecodeEval decode_;
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
