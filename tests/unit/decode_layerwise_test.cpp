// Layer-wise evaluation of a decode path over known tokens (DecodeEval::layerwise, issue 20) against
// the token-by-token loop it replaces, which stays the reference: every log-prob row and every
// layer's hidden state bit for bit, over a matrix of knob settings (fp8 linears and their
// accumulation models, the fp8 KV cache, split-KV attention, decode batches with vLLM's padding,
// tensor parallelism and its all-reduces, chunked prefill), chunk boundaries anywhere in the
// steps, thread counts 1 and 2, and whole replays. And the deferred LM head (PathOutput::head: the
// CPU paths' log-prob rows computed when the metrics read them) against the head run inside the
// forward, for decode (token by token and layer-wise) and teacher-forced paths over the same knobs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "rlparity/model/checkpoint.hpp"
#include "rlparity/model/checkpoint_writer.hpp"
#include "rlparity/model/emulated_ops.hpp"
#include "rlparity/model/forward.hpp"
#include "rlparity/model/oracle_ops.hpp"
#include "rlparity/model/weights.hpp"
#include "rlparity/replay/kv_calibration.hpp"
#include "rlparity/replay/path_runner.hpp"
#include "rlparity/replay/recipe.hpp"
#include "rlparity/replay/replay.hpp"
#include "rlparity/util/parallel.hpp"

namespace rlp {
namespace {

using Knobs = std::vector<std::pair<std::string, std::string>>;

const Checkpoint& stories() {
  static const Checkpoint c =
      Checkpoint::open(std::string(RLPARITY_SOURCE_DIR) + "/fixtures/models/stories260K");
  return c;
}

// A generated checkpoint in a scratch directory, removed at exit.
class GeneratedCheckpoint {
 public:
  GeneratedCheckpoint(RandomCheckpointOptions o, const std::string& name) {
    dir_ = std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
    o.out = dir_.string();
    write_random_checkpoint(o);
    ckpt_ = std::make_unique<Checkpoint>(Checkpoint::open(dir_.string()));
  }
  ~GeneratedCheckpoint() { std::filesystem::remove_all(dir_); }
  const Checkpoint& get() const { return *ckpt_; }

 private:
  std::filesystem::path dir_;
  std::unique_ptr<Checkpoint> ckpt_;
};

// A Llama whose linears span whole 128-wide fp8 blocks, also when cut for tp 2 (heads x head_dim
// 256, intermediate 512), so the fp8 split-K over slices and fp8 row-parallel shards act.
const Checkpoint& wide() {
  static const GeneratedCheckpoint c(
      [] {
        RandomCheckpointOptions o;
        o.hidden = 256;
        o.intermediate = 512;
        o.layers = 2;
        o.heads = 4;
        o.kv_heads = 2;
        o.vocab = 320;
        o.seed = 20;
        return o;
      }(),
      "rlp_layerwise_wide");
  return c.get();
}

// A Qwen3-MoE with one dense and one sparse layer (8 experts, top 2): the moe op's kernel
// selection must see the decode batch, not the chunk's rows.
const Checkpoint& moe() {
  static const GeneratedCheckpoint c(
      [] {
        RandomCheckpointOptions o;
        o.arch = "qwen3-moe";
        o.layers = 2;
        o.experts = 8;
        o.top_k = 2;
        o.norm_topk = true;
        o.mlp_only_layers = {0};
        o.seed = 21;
        return o;
      }(),
      "rlp_layerwise_moe");
  return c.get();
}

// Sequences of different prompt and response lengths (so the group shrinks as responses end).
std::vector<InputSequence> inputs(int vocab, const std::vector<std::pair<int, int>>& shapes) {
  std::vector<InputSequence> in;
  for (std::size_t s = 0; s < shapes.size(); ++s) {
    InputSequence x;
    x.id = std::to_string(s);
    x.prompt.push_back(1);
    for (int i = 1; i < shapes[s].first; ++i)
      x.prompt.push_back(static_cast<int32_t>((i * 37 + static_cast<int>(s) * 11 + 3) % vocab));
    for (int i = 0; i < shapes[s].second; ++i)
      x.response.push_back(static_cast<int32_t>((i * 53 + static_cast<int>(s) * 7 + 5) % vocab));
    x.has_response = true;
    x.line = static_cast<int>(s) + 1;
    in.push_back(std::move(x));
  }
  return in;
}

std::vector<SeqTokens> seq_tokens(const std::vector<InputSequence>& in) {
  std::vector<SeqTokens> out;
  for (const auto& x : in) {
    SeqTokens s;
    s.tokens = x.prompt;
    s.tokens.insert(s.tokens.end(), x.response.begin(), x.response.end());
    s.prompt_len = static_cast<int>(x.prompt.size());
    s.response_len = static_cast<int>(x.response.size());
    out.push_back(std::move(s));
  }
  return out;
}

bool same_bits(const HostMat& a, const HostMat& b) {
  return a.rows() == b.rows() && a.cols() == b.cols() &&
         std::memcmp(a.data(), b.data(), static_cast<std::size_t>(a.size()) * sizeof(float)) == 0;
}

void expect_same(const std::vector<PathOutput<HostMat>>& want, const std::vector<PathOutput<HostMat>>& got,
                 const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(same_bits(want[i].logprobs, got[i].logprobs)) << what << ": log-probs of sequence " << i;
    ASSERT_EQ(want[i].hidden.size(), got[i].hidden.size()) << what;
    for (std::size_t l = 0; l < want[i].hidden.size(); ++l)
      EXPECT_TRUE(same_bits(want[i].hidden[l], got[i].hidden[l]))
          << what << ": hidden state of sequence " << i << " layer " << l;
    EXPECT_EQ(want[i].experts, got[i].experts) << what << ": MoE routing of sequence " << i;
  }
}

// The log-prob rows a deferred head computes when they are read, `chunk` rows at a time (a chunk may
// straddle the prefill's row and the decode steps' rows), against the rows the forward's own head
// computed; and the same hidden states.
void expect_deferred_head(const std::vector<PathOutput<HostMat>>& in_forward,
                          const std::vector<PathOutput<HostMat>>& deferred, const std::string& what) {
  ASSERT_EQ(in_forward.size(), deferred.size()) << what;
  for (std::size_t i = 0; i < deferred.size(); ++i) {
    ASSERT_FALSE(in_forward[i].head) << what;
    ASSERT_TRUE(deferred[i].head) << what << ": the CPU path defers its head";
    EXPECT_EQ(deferred[i].logprobs.size(), 0) << what << ": no [response x vocab] rows held";
    const HostMat& want = in_forward[i].logprobs;
    const auto R = static_cast<int>(want.rows());
    ASSERT_EQ(deferred[i].head_in.rows(), R) << what;
    for (const int chunk : {5, R}) {
      HostMat buf;
      for (int j0 = 0; j0 < R; j0 += chunk) {
        const int n = std::min(chunk, R - j0);
        const float* got = log_prob_rows(deferred[i], j0, n, buf);
        EXPECT_EQ(
            std::memcmp(got, want.row(j0).data(), static_cast<std::size_t>(n * want.cols()) * sizeof(float)),
            0)
            << what << ": sequence " << i << " rows " << j0 << ".." << j0 + n - 1 << " in reads of " << chunk;
      }
    }
    for (std::size_t l = 0; l < deferred[i].hidden.size(); ++l)
      EXPECT_TRUE(same_bits(in_forward[i].hidden[l], deferred[i].hidden[l])) << what << ": layer " << l;
  }
}

// EmulatedOps that records the most rows any decode-step linear saw: a layer-wise run must batch
// many steps into one GEMM (else the comparison below would hold trivially).
class RowCountingOps {
 public:
  using Mat = EmulatedOps::Mat;
  using Cache = EmulatedOps::Cache;
  explicit RowCountingOps(const EmulatedOps& ops) : ops_(ops) {}
  const ModelSpec& spec() const { return ops_.spec(); }
  Cache new_cache(int capacity) const { return ops_.new_cache(capacity); }
  void embed(const int32_t* t, int n, Mat& h) const { ops_.embed(t, n, h); }
  void add_norm(Mat& r, const Mat* d, int l, NormSlot s, Mat& o) const { ops_.add_norm(r, d, l, s, o); }
  void residual_sum(const Mat& r, const Mat& d, Mat& o) const { ops_.residual_sum(r, d, o); }
  void linear(const Mat& x, int l, Proj p, Mat& y, bool decode_step = false) const {
    if (decode_step) max_decode_rows = std::max(max_decode_rows, static_cast<int>(x.rows()));
    ops_.linear(x, l, p, y, decode_step);
  }
  void head_norm(Mat& x, int l, Proj p) const { ops_.head_norm(x, l, p); }
  void rope(Mat& q, Mat& k, const int* pos) const { ops_.rope(q, k, pos); }
  void attention(int l, const Mat& q, const Mat& k, const Mat& v, int pos0, Cache& c, Mat& o) const {
    ops_.attention(l, q, k, v, pos0, c, o);
  }
  void silu_mul(const Mat& g, const Mat& u, Mat& o) const { ops_.silu_mul(g, u, o); }
  void moe(const Mat& xn, int l, Mat& o, bool decode_step = false, MoeRouting* routing = nullptr,
           const MoeReplay* replay = nullptr) const {
    ops_.moe(xn, l, o, decode_step, routing, replay);
  }
  void logprobs(const Mat& xn, Mat& o, bool decode_step = false) const { ops_.logprobs(xn, o, decode_step); }
  mutable int max_decode_rows = 0;

 private:
  const EmulatedOps& ops_;
};
static_assert(ForwardOps<RowCountingOps>);

struct Case {
  const Checkpoint& ckpt;
  std::string recipe;
  Knobs gen_knobs;
};

// The generation path of `c` over `in`: token by token, then layer by layer in chunks of 512 rows
// (one chunk here), of 7 rows and of 1 row (chunk boundaries everywhere), on 2 threads and on 1.
void expect_layerwise_is_token_by_token(const Case& c, const std::vector<InputSequence>& in) {
  RecipeOptions ro;
  ro.gen_knobs = c.gen_knobs;
  const PathStyle style = make_recipe(c.recipe, ro).gen;
  ASSERT_EQ(style.mode, SequenceMode::decode);
  const PreparedWeights w = prepare_weights(c.ckpt, style);
  KvScales kv;
  if (style.kv_cache == KvCacheDtype::fp8) kv = calibrate_kv_scales(c.ckpt, in, KvScaleMethod::nemo);
  const EmulatedOps ops(c.ckpt.spec(), w, style, &kv);
  const std::vector<SeqTokens> seqs = seq_tokens(in);
  std::string what = c.recipe;
  for (const auto& [k, v] : c.gen_knobs) what += " " + k + "=" + v;
  const RowCountingOps counting(ops);
  auto run = [&](DecodeEval e, int rows) {
    counting.max_decode_rows = 0;
    return run_path_group(counting, SequenceMode::decode, seqs, true, true, style.prefill_chunk, e, rows);
  };
  set_thread_count(2);
  const auto ref = run(DecodeEval::token_by_token, kLayerwiseDecodeRows);
  EXPECT_EQ(counting.max_decode_rows, static_cast<int>(seqs.size())) << what;
  expect_same(ref, run(DecodeEval::layerwise, kLayerwiseDecodeRows), what);
  int steps = 0;
  for (const auto& s : seqs) steps += s.response_len - 1;
  EXPECT_EQ(counting.max_decode_rows, steps) << what << ": every step in one call";
  for (const int rows : {7, 1})
    expect_same(ref, run(DecodeEval::layerwise, rows), what + " rows=" + std::to_string(rows));
  // The same path on EmulatedOps itself defers its head; and teacher-forced, the rows of one call.
  for (const DecodeEval e : {DecodeEval::token_by_token, DecodeEval::layerwise})
    expect_deferred_head(ref,
                         run_path_group(ops, SequenceMode::decode, seqs, true, true, style.prefill_chunk, e),
                         what + " deferred head, decode");
  expect_deferred_head(run_path_group(counting, SequenceMode::teacher_forced, seqs, true),
                       run_path_group(ops, SequenceMode::teacher_forced, seqs, true),
                       what + " deferred head, teacher-forced");
  set_thread_count(1);
  expect_same(ref, run(DecodeEval::layerwise, kLayerwiseDecodeRows), what + " on 1 thread");
  set_thread_count(0);
}

const std::vector<std::pair<int, int>> kShapes = {{4, 9}, {7, 23}, {11, 17}};

TEST(DecodeLayerwise, BitIdenticalToTokenByTokenOnStories) {
  const std::vector<InputSequence> in = inputs(stories().spec().vocab, kShapes);
  const std::vector<Case> cases = {
      {stories(), "bf16", {}},
      // Several split-KV partitions and online-softmax blocks per row; decode batch 3 padded to 4.
      {stories(), "bf16", {{"attention", "split-kv:5"}, {"attn-block", "2"}, {"batch", "3"}}},
      {stories(), "bf16", {{"batch", "5"}, {"batch-pad", "none"}, {"prefill-chunk", "3"}}},
      {stories(), "fp8-gen", {{"batch", "17"}}},
      {stories(), "fp8-e2e-kv", {{"attention", "split-kv:4"}, {"attn-block", "3"}}},
      {stories(),
       "fp16",
       {{"norm", "unfused"},
        {"residual", "fp32"},
        {"mlp", "unfused"},
        {"logits", "fp32"},
        {"rope-table", "fp32"},
        {"split-k", "3"},
        {"k-chunk", "16"},
        {"attention", "flash"},
        {"attn-p-round", "off"}}},
      {stories(), "bf16", {{"tp", "2"}, {"batch", "9"}}},
      {stories(), "bf16", {{"tp", "4"}, {"tp-reduce", "custom-ar"}, {"logsoftmax", "vocab-parallel"}}},
      // A ring's owner rank, and so the order of the 4 partial sums, follows a row's index in its call.
      {stories(), "bf16", {{"tp", "4"}, {"tp-reduce", "nccl-ring"}, {"logsoftmax", "vocab-parallel"}}},
  };
  for (const Case& c : cases) expect_layerwise_is_token_by_token(c, in);
}

// Only the response tokens' log-probs of a teacher-forced path (the oracle's use): the head runs over
// the response rows alone, kHeadRows at a time; the same bits as the forward's own head over every
// position, for the float64 oracle and for a CPU path (whose GEMM sees the forward's M).
TEST(DeferredHead, TokenLogprobsOfTeacherForcedPathsAsInTheForward) {
  const std::vector<InputSequence> in = inputs(stories().spec().vocab, {{4, 300}, {30, 9}});
  const std::vector<SeqTokens> seqs = seq_tokens(in);
  ASSERT_GT(seqs[0].response_len, kHeadRows);
  auto expect_tokens_of_full_forward = [&](const auto& ops, const auto& got, const std::string& what) {
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      typename std::remove_cvref_t<decltype(ops)>::Mat all;
      auto cache = ops.new_cache(seqs[i].prompt_len + seqs[i].response_len);
      forward(ops, cache, seqs[i].tokens.data(), seqs[i].prompt_len + seqs[i].response_len - 1, 0, all);
      ASSERT_EQ(got[i].logprobs.cols(), 1) << what;
      for (int j = 0; j < seqs[i].response_len; ++j) {
        const auto token = seqs[i].tokens[static_cast<std::size_t>(seqs[i].prompt_len + j)];
        const auto want = all(seqs[i].prompt_len - 1 + j, token);
        EXPECT_EQ(std::memcmp(&want, &got[i].logprobs(j, 0), sizeof(want)), 0)
            << what << ": sequence " << i << " token " << j;
      }
    }
  };
  const OracleWeights ow = prepare_oracle_weights(stories());
  const OracleOps oracle(stories().spec(), ow);
  expect_tokens_of_full_forward(
      oracle, run_path_group(oracle, SequenceMode::teacher_forced, seqs, true, false), "oracle");
  RecipeOptions ro;
  ro.train_knobs = {{"split-k", "3"}};
  const PathStyle style = make_recipe("bf16", ro).train;
  const PreparedWeights w = prepare_weights(stories(), style);
  const EmulatedOps ops(stories().spec(), w, style);
  expect_tokens_of_full_forward(ops, run_path_group(ops, SequenceMode::teacher_forced, seqs, true, false),
                                "bf16 training path");
}

TEST(DecodeLayerwise, BitIdenticalToTokenByTokenWithWholeFp8Blocks) {
  const std::vector<InputSequence> in = inputs(wide().spec().vocab, kShapes);
  const std::vector<Case> cases = {
      {wide(), "fp8-e2e", {{"fp8-accum", "hopper"}, {"batch", "6"}}},
      {wide(), "fp8-gen", {{"fp8-promotion", "cublaslt"}, {"act-quant", "deepgemm"}, {"pow2-scales", "on"}}},
      {wide(), "fp8-e2e-kv", {{"tp", "2"}, {"attention", "split-kv:6"}, {"prefill-chunk", "4"}}},
      {wide(), "fp8-gen", {{"tp", "2"}, {"tp-reduce", "nccl-ring"}, {"batch", "40"}}},
  };
  for (const Case& c : cases) expect_layerwise_is_token_by_token(c, in);
}

TEST(DecodeLayerwise, BitIdenticalToTokenByTokenOnMoe) {
  const std::vector<InputSequence> in = inputs(moe().spec().vocab, kShapes);
  const std::vector<Case> cases = {
      {moe(), "bf16", {{"batch", "3"}}},
      {moe(), "bf16", {{"moe-combine", "rounded"}, {"moe-router-logits", "fp32"}, {"split-k", "3"}}},
      {moe(), "fp8-gen", {{"moe-combine", "fp32"}, {"batch", "6"}}},
  };
  for (const Case& c : cases) expect_layerwise_is_token_by_token(c, in);
}

// The whole replay with ReplayOptions::decode_eval either way (responses given and one sampled, the
// default recipes plus the fp8 KV cache, the oracle): identical run data.
TEST(DecodeLayerwise, WholeReplaysIdentical) {
  std::vector<InputSequence> in = inputs(stories().spec().vocab, kShapes);
  in[1].response.clear();
  in[1].has_response = false;
  ReplayOptions opt;
  opt.recipes = {"bf16", "fp8-gen", "fp8-e2e-kv"};
  opt.max_new_tokens = 12;
  auto replay = [&](DecodeEval e) {
    opt.decode_eval = e;
    auto x = in;
    return run_replay(stories(), x, opt);
  };
  const RunData ref = replay(DecodeEval::token_by_token);
  const RunData got = replay(DecodeEval::layerwise);
  EXPECT_EQ(ref.token_ids, got.token_ids);
  ASSERT_EQ(ref.recipes.size(), got.recipes.size());
  for (std::size_t r = 0; r < ref.recipes.size(); ++r) {
    EXPECT_EQ(ref.recipes[r].tokens, got.recipes[r].tokens) << ref.recipes[r].name;
    EXPECT_EQ(ref.recipes[r].layers, got.recipes[r].layers) << ref.recipes[r].name;
    EXPECT_EQ(ref.recipes[r].summary, got.recipes[r].summary) << ref.recipes[r].name;
  }
}

}  // namespace
}  // namespace rlp
