// Tensor parallelism (issue 14): the all-reduce element rules of numerics/all_reduce.hpp against
// step-by-step simulations of the engines' kernels written independently here (NCCL's runRing as a
// ring of buffers passing chunks, vLLM's custom all-reduce as its 1- and 2-stage kernels), hand-worked
// cases where the rank order changes the bits, the row-parallel linear and the vocab-parallel
// log-softmax of the CPU ops against naive per-rank loops, and the errors for a tp that does not fit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "rlparity/model/checkpoint.hpp"
#include "rlparity/model/emulated_ops.hpp"
#include "rlparity/model/kernel_style.hpp"
#include "rlparity/model/weights.hpp"
#include "rlparity/numerics/all_reduce.hpp"
#include "rlparity/numerics/formats.hpp"
#include "rlparity/numerics/gemm.hpp"
#include "rlparity/numerics/libm_model.hpp"
#include "rlparity/replay/attribution.hpp"
#include "rlparity/replay/replay.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/parallel.hpp"

namespace rlp {
namespace {

using num::OutRound;
using num::ReduceAlgo;
using Bufs = std::vector<std::vector<float>>;  // [rank][element]

float rnd(float x, OutRound f) { return num::round_out(x, f); }

// NCCL's ring all-reduce as runRing (src/device/all_reduce.h) moves data: at step s rank i works on
// chunk (i - 1 - s) mod n; at step 0 it sends its own values, at steps 1..n-1 it adds its own value to
// what rank i-1 sent it the step before (rounding to the dtype), and at step n-1 the chunk it holds is
// chunk i, complete. Chunks of alignUp(ceil(count / n), 16 / elem_bytes) elements (runRing line 38).
// With reduce_scatter, NCCL's reduce-scatter (src/device/reduce_scatter.h runRing): the same steps
// over n shards of ceil(count / n) elements, shard c delivered to rank c.
std::vector<float> ring_simulation(const Bufs& in, OutRound f, int elem_bytes, bool reduce_scatter = false) {
  const int n = static_cast<int>(in.size());
  const int64_t count = static_cast<int64_t>(in[0].size());
  const int64_t align = reduce_scatter ? 1 : 16 / elem_bytes;
  const int64_t chunk = ((count + n - 1) / n + align - 1) / align * align;
  std::vector<float> result(in[0].size());
  Bufs sent(static_cast<std::size_t>(n), std::vector<float>(in[0].size()));
  for (int s = 0; s < n; ++s) {
    Bufs next = sent;
    for (int i = 0; i < n; ++i) {
      const int c = ((i - 1 - s) % n + 2 * n) % n;
      const int prev = (i + n - 1) % n;
      for (int64_t e = c * chunk; e < std::min(count, (c + 1) * chunk); ++e) {
        const auto ue = static_cast<std::size_t>(e);
        const float own = in[static_cast<std::size_t>(i)][ue];
        const float v = s == 0 ? own : rnd(sent[static_cast<std::size_t>(prev)][ue] + own, f);
        if (s == n - 1) {
          EXPECT_EQ(c, i);
          result[ue] = v;
        } else {
          next[static_cast<std::size_t>(i)][ue] = v;
        }
      }
    }
    sent = std::move(next);
  }
  return result;
}

// vLLM's cross_device_reduce_1stage: every element summed in fp32 over ranks 0..n-1, one rounding.
std::vector<float> custom_1stage_simulation(const Bufs& in, OutRound f) {
  std::vector<float> out(in[0].size());
  for (std::size_t e = 0; e < out.size(); ++e) {
    float acc = in[0][e];
    for (std::size_t r = 1; r < in.size(); ++r) acc += in[r][e];
    out[e] = rnd(acc, f);
  }
  return out;
}

// vLLM's cross_device_reduce_2stage: rank r reduces packs [r*part, (r+1)*part) (the last rank up to
// the end) with ptrs[i] = rank (r + i) % n, in fp32, one rounding; the all-gather copies.
std::vector<float> custom_2stage_simulation(const Bufs& in, OutRound f, int elem_bytes) {
  const int n = static_cast<int>(in.size());
  const int pack = 16 / elem_bytes;
  const int size = static_cast<int>(in[0].size()) / pack;
  const int part = size / n;
  std::vector<float> out(in[0].size());
  for (int rank = 0; rank < n; ++rank) {
    const int start = rank * part, end = rank == n - 1 ? size : start + part;
    for (int p = start; p < end; ++p)
      for (int j = 0; j < pack; ++j) {
        const auto e = static_cast<std::size_t>(p * pack + j);
        float acc = in[static_cast<std::size_t>(rank)][e];
        for (int i = 1; i < n; ++i) acc += in[static_cast<std::size_t>((rank + i) % n)][e];
        out[e] = rnd(acc, f);
      }
  }
  return out;
}

std::vector<float> reduce_with_rules(ReduceAlgo algo, const Bufs& in, OutRound f, int elem_bytes) {
  const int n = static_cast<int>(in.size());
  const auto count = static_cast<int64_t>(in[0].size());
  std::vector<float> out(in[0].size()), vals(in.size());
  for (int64_t e = 0; e < count; ++e) {
    for (int r = 0; r < n; ++r)
      vals[static_cast<std::size_t>(r)] = in[static_cast<std::size_t>(r)][static_cast<std::size_t>(e)];
    const int owner = num::reduce_owner(algo, e, count, n, elem_bytes);
    out[static_cast<std::size_t>(e)] = num::all_reduce_element(algo, vals.data(), n, owner, f);
  }
  return out;
}

Bufs random_partials(int n, int count, OutRound f, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  Bufs b(static_cast<std::size_t>(n), std::vector<float>(static_cast<std::size_t>(count)));
  for (auto& r : b)
    for (auto& x : r) x = rnd(d(rng) * (1.0f + static_cast<float>(rng() % 64)), f);
  return b;
}

void expect_bits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  int bad = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (num::f32_bits(a[i]) != num::f32_bits(b[i]) && bad++ < 5)
      ADD_FAILURE() << what << " element " << i << ": " << a[i] << " vs " << b[i];
}

TEST(AllReduce, ChunkOwnersHandWorked) {
  // NCCL ring, 100 bf16 over 4 ranks: ceil(100/4) = 25, aligned to 8 elements -> chunks of 32.
  EXPECT_EQ(num::reduce_owner(ReduceAlgo::nccl_ring, 31, 100, 4, 2), 0);
  EXPECT_EQ(num::reduce_owner(ReduceAlgo::nccl_ring, 32, 100, 4, 2), 1);
  EXPECT_EQ(num::reduce_owner(ReduceAlgo::nccl_ring, 95, 100, 4, 2), 2);
  EXPECT_EQ(num::reduce_owner(ReduceAlgo::nccl_ring, 96, 100, 4, 2), 3);
  // 10 bf16 over 3 ranks: chunks of 8, rank 2's chunk empty.
  EXPECT_EQ(num::reduce_owner(ReduceAlgo::nccl_ring, 7, 10, 3, 2), 0);
  EXPECT_EQ(num::reduce_owner(ReduceAlgo::nccl_ring, 9, 10, 3, 2), 1);
  // fp32: 4-element alignment; 10 over 4 ranks -> chunks of 4.
  EXPECT_EQ(num::reduce_owner(ReduceAlgo::nccl_ring, 8, 10, 4, 4), 2);
  // Custom 2-stage, 104 bf16 = 13 packs over 4 ranks: parts of 3 packs, the last rank takes 4.
  EXPECT_EQ(num::reduce_owner(ReduceAlgo::custom_2stage, 23, 104, 4, 2), 0);
  EXPECT_EQ(num::reduce_owner(ReduceAlgo::custom_2stage, 24, 104, 4, 2), 1);
  EXPECT_EQ(num::reduce_owner(ReduceAlgo::custom_2stage, 103, 104, 4, 2), 3);
  EXPECT_EQ(num::reduce_owner(ReduceAlgo::custom_2stage, 5, 16, 4, 2), 3);  // 2 packs < 4 ranks
  EXPECT_EQ(num::reduce_owner(ReduceAlgo::custom_1stage, 103, 104, 4, 2), 0);
  // Reduce-scatter, 100 over 4 ranks: shards of 25, no alignment.
  EXPECT_EQ(num::reduce_owner(ReduceAlgo::nccl_reduce_scatter, 24, 100, 4, 2), 0);
  EXPECT_EQ(num::reduce_owner(ReduceAlgo::nccl_reduce_scatter, 25, 100, 4, 2), 1);
  EXPECT_EQ(num::reduce_owner(ReduceAlgo::nccl_reduce_scatter, 99, 100, 4, 2), 3);
}

// Rank order changes the bits. Three bf16 partials {1, 2^-8, 2^-8}: the exact sum 1 + 2^-7 is a
// bf16 value. The ring rounds after every add: a chunk owned by rank 0 adds 2^-8 + 2^-8 = 2^-7
// first (exact), then 1 -> 1 + 2^-7; a chunk owned by rank 2 adds 1 + 2^-8 first, a tie that rounds
// to even (1), then 1 + 2^-8 again -> 1. The custom all-reduce adds in fp32 (exact) -> 1 + 2^-7.
TEST(AllReduce, RingOrderHandWorked) {
  const float v[3] = {1.0f, std::ldexp(1.0f, -8), std::ldexp(1.0f, -8)};
  const float hi = 1.0f + std::ldexp(1.0f, -7);
  EXPECT_EQ(num::all_reduce_element(ReduceAlgo::nccl_ring, v, 3, 0, OutRound::bf16), hi);
  EXPECT_EQ(num::all_reduce_element(ReduceAlgo::nccl_ring, v, 3, 1, OutRound::bf16), 1.0f);
  EXPECT_EQ(num::all_reduce_element(ReduceAlgo::nccl_ring, v, 3, 2, OutRound::bf16), 1.0f);
  EXPECT_EQ(num::all_reduce_element(ReduceAlgo::custom_1stage, v, 3, 0, OutRound::bf16), hi);
  // Two ranks: one add, commutative: the ring and the custom all-reduce agree.
  EXPECT_EQ(num::all_reduce_element(ReduceAlgo::nccl_ring, v, 2, 0, OutRound::bf16),
            num::all_reduce_element(ReduceAlgo::custom_1stage, v, 2, 0, OutRound::bf16));
}

// The fp32 sum's order shows through the final rounding. Four bf16 partials {2^24, 2^16, 1, 1}:
// in order 0,1,2,3 (1-stage) fp32 gives 2^24 + 2^16 (each +1 is a tie to even), exactly half a
// bf16 ulp above 2^24: a tie, rounded to 2^24. Starting at rank 2 (2-stage, rank 2's part) fp32
// gives 2^24 + 2^16 + 2 exactly, above the tie: 2^24 + 2^17.
TEST(AllReduce, CustomOrderHandWorked) {
  const float v[4] = {16777216.0f, 65536.0f, 1.0f, 1.0f};
  EXPECT_EQ(num::all_reduce_element(ReduceAlgo::custom_1stage, v, 4, 0, OutRound::bf16), 16777216.0f);
  EXPECT_EQ(num::all_reduce_element(ReduceAlgo::custom_2stage, v, 4, 2, OutRound::bf16), 16908288.0f);
  EXPECT_EQ(num::all_reduce_element(ReduceAlgo::custom_2stage, v, 4, 0, OutRound::bf16), 16777216.0f);
}

TEST(AllReduce, MatchesEngineSimulations) {
  for (OutRound f : {OutRound::bf16, OutRound::fp16, OutRound::fp32}) {
    const int eb = f == OutRound::fp32 ? 4 : 2;
    for (int n : {2, 3, 4, 6, 8, 16}) {
      for (int count : {8, 40, 96, 1000, 4104}) {
        const Bufs in = random_partials(n, count, f, static_cast<unsigned>(n * 7919 + count));
        const std::string what =
            "n=" + std::to_string(n) + " count=" + std::to_string(count) + " eb=" + std::to_string(eb);
        expect_bits(reduce_with_rules(ReduceAlgo::nccl_ring, in, f, eb), ring_simulation(in, f, eb),
                    "ring " + what);
        expect_bits(reduce_with_rules(ReduceAlgo::nccl_reduce_scatter, in, f, eb),
                    ring_simulation(in, f, eb, true), "reduce-scatter " + what);
        expect_bits(reduce_with_rules(ReduceAlgo::custom_1stage, in, f, eb), custom_1stage_simulation(in, f),
                    "1stage " + what);
        if (count % (16 / eb) == 0)
          expect_bits(reduce_with_rules(ReduceAlgo::custom_2stage, in, f, eb),
                      custom_2stage_simulation(in, f, eb), "2stage " + what);
      }
    }
  }
  // And the orders differ somewhere on random data with more than two ranks (for the fp32 orders,
  // partials of magnitudes 2^-12..2^12 and fp32 output, so that the fp32 rounding shows).
  Bufs in = random_partials(4, 4096, OutRound::bf16, 5);
  EXPECT_NE(ring_simulation(in, OutRound::bf16, 2), custom_1stage_simulation(in, OutRound::bf16));
  std::mt19937 rng(6);
  for (auto& r : in)
    for (auto& x : r) x = num::round_bf16(std::ldexp(x, static_cast<int>(rng() % 25) - 12));
  EXPECT_NE(custom_2stage_simulation(in, OutRound::fp32, 4), custom_1stage_simulation(in, OutRound::fp32));
}

TEST(AllReduce, VllmDispatch) {
  EXPECT_TRUE(num::vllm_uses_custom_ar(64 * 2, 2));
  EXPECT_FALSE(num::vllm_uses_custom_ar(8192 * 1024, 4));  // max_size is exclusive
  EXPECT_FALSE(num::vllm_uses_custom_ar(1024, 3));         // unsupported world size
  EXPECT_FALSE(num::vllm_uses_custom_ar(18, 2));           // not a multiple of 16 bytes
  EXPECT_EQ(num::custom_ar_stage(1 << 22, 2), ReduceAlgo::custom_1stage);
  EXPECT_EQ(num::custom_ar_stage(512 * 1024 - 16, 4), ReduceAlgo::custom_1stage);
  EXPECT_EQ(num::custom_ar_stage(512 * 1024, 4), ReduceAlgo::custom_2stage);
  EXPECT_EQ(num::custom_ar_stage(256 * 1024, 8), ReduceAlgo::custom_2stage);
}

// ---- the CPU ops on stories260K (8 heads, 4 KV heads, intermediate 172, hidden 64, vocab 512) ----

const Checkpoint& stories() {
  static const Checkpoint c =
      Checkpoint::open(std::string(RLPARITY_SOURCE_DIR) + "/fixtures/models/stories260K");
  return c;
}

HostMat random_act(int rows, int cols, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  HostMat m(rows, cols);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) m(r, c) = num::round_bf16(d(rng));
  return m;
}

// down_proj with tp ranks: each rank's GEMM over its contiguous K range written here from the
// prepared weights, then the ring or the custom all-reduce simulated as above.
TEST(TensorParallel, RowParallelLinearMatchesNaiveRanks) {
  const Checkpoint& ck = stories();
  const int K = ck.spec().intermediate, N = ck.spec().hidden, rows = 5;
  const HostMat x = random_act(rows, K, 3);
  for (int tp : {2, 4}) {
    for (const char* reduce : {"nccl-ring", "custom-ar", "nccl-rs"}) {
      PathStyle style = default_training_style();
      style.tp = tp;
      set_knob(style, "tp-reduce", reduce);
      const PreparedWeights pw = prepare_weights(ck, style);
      const EmulatedOps ops(ck.spec(), pw, style);
      HostMat y;
      ops.linear(x, 1, Proj::down, y);
      const PreparedLinear& lin = pw.layers[1][Proj::down];
      const int kr = K / tp;
      Bufs parts(static_cast<std::size_t>(tp));
      for (int r = 0; r < tp; ++r) {
        std::vector<float> xs, ws;
        for (int i = 0; i < rows; ++i)
          for (int k = 0; k < kr; ++k) xs.push_back(x(i, r * kr + k));
        for (int o = 0; o < N; ++o)
          for (int k = 0; k < kr; ++k)
            ws.push_back(num::half16_bits_to_float(lin.w[static_cast<std::size_t>(o * K + r * kr + k)],
                                                   num::Half16::bf16));
        parts[static_cast<std::size_t>(r)].resize(static_cast<std::size_t>(rows * N));
        num::gemm_f32acc(xs.data(), ws.data(), parts[static_cast<std::size_t>(r)].data(), rows, N, kr,
                         style.gemm_config(rows, kr));
      }
      const std::string rd = reduce;
      const std::vector<float> want = rd == "custom-ar"
                                          ? custom_1stage_simulation(parts, OutRound::bf16)
                                          : ring_simulation(parts, OutRound::bf16, 2, rd == "nccl-rs");
      const std::vector<float> got(y.data(), y.data() + y.size());
      expect_bits(got, want, "tp " + std::to_string(tp) + " " + reduce);
    }
  }
}

// The train path's vocab-parallel log-softmax (Megatron's vocab_parallel_cross_entropy): bits against a
// naive per-rank loop (shard max, global max, shard sums of exp, the ring over the shard sums), and
// closeness to a float64 log-softmax of the same logits.
TEST(TensorParallel, VocabParallelLogSoftmax) {
  const Checkpoint& ck = stories();
  const int H = ck.spec().hidden, V = ck.spec().vocab, rows = 6;
  const HostMat xn = random_act(rows, H, 9);
  for (int tp : {1, 2, 4}) {
    PathStyle style = default_training_style();
    style.tp = tp;
    style.logits_fp32 = true;
    const PreparedWeights pw = prepare_weights(ck, style);
    const EmulatedOps ops(ck.spec(), pw, style);
    HostMat lp;
    ops.logprobs(xn, lp);
    // The logits as the lm_head GEMM writes them (fp32 output).
    std::vector<float> w;
    for (uint16_t b : pw.lm_head.w) w.push_back(num::half16_bits_to_float(b, num::Half16::bf16));
    num::GemmConfig cfg = style.gemm_config(rows, H);
    cfg.out = OutRound::fp32;
    std::vector<float> logits(static_cast<std::size_t>(rows * V));
    num::gemm_f32acc(xn.data(), w.data(), logits.data(), rows, V, H, cfg);
    const int shard = V / tp;
    Bufs sums(static_cast<std::size_t>(tp), std::vector<float>(static_cast<std::size_t>(rows)));
    std::vector<float> gmax(static_cast<std::size_t>(rows), -std::numeric_limits<float>::infinity());
    for (int r = 0; r < rows; ++r) {
      const float* row = logits.data() + r * V;
      for (int i = 0; i < V; ++i)
        gmax[static_cast<std::size_t>(r)] = std::max(gmax[static_cast<std::size_t>(r)], row[i]);
      for (int q = 0; q < tp; ++q) {
        float s = 0.0f;
        for (int i = q * shard; i < (q + 1) * shard; ++i)
          s += num::expf_model(row[i] - gmax[static_cast<std::size_t>(r)]);
        sums[static_cast<std::size_t>(q)][static_cast<std::size_t>(r)] = s;
      }
    }
    const std::vector<float> total = tp == 1 ? sums[0] : ring_simulation(sums, OutRound::fp32, 4);
    double worst = 0.0;
    for (int r = 0; r < rows; ++r) {
      const float lse =
          gmax[static_cast<std::size_t>(r)] + num::logf_model(total[static_cast<std::size_t>(r)]);
      double m = -1e300, s = 0.0;
      for (int i = 0; i < V; ++i)
        m = std::max(m, static_cast<double>(logits[static_cast<std::size_t>(r * V + i)]));
      for (int i = 0; i < V; ++i)
        s += std::exp(static_cast<double>(logits[static_cast<std::size_t>(r * V + i)]) - m);
      for (int i = 0; i < V; ++i) {
        const float want = logits[static_cast<std::size_t>(r * V + i)] - lse;
        ASSERT_EQ(num::f32_bits(lp(r, i)), num::f32_bits(want))
            << "tp " << tp << " row " << r << " token " << i;
        const double ref =
            static_cast<double>(logits[static_cast<std::size_t>(r * V + i)]) - (m + std::log(s));
        worst = std::max(worst, std::abs(static_cast<double>(lp(r, i)) - ref));
      }
    }
    EXPECT_LT(worst, 1e-5) << "tp " << tp;
  }
}

std::string replay_error(const std::string& tp) {
  std::vector<InputSequence> in(1);
  in[0] = {"a", {1, 295, 369, 309}, {306, 462}, true, {}, 1, {}};
  ReplayOptions opt;
  opt.oracle = false;
  opt.recipes = {"bf16"};
  opt.recipe.gen_knobs.emplace_back("tp", tp);
  try {
    run_replay(stories(), in, opt);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(TensorParallel, ErrorNamesTheDimension) {
  EXPECT_NE(replay_error("3").find("attention heads (8)"), std::string::npos) << replay_error("3");
  EXPECT_NE(replay_error("8").find("intermediate size (172)"), std::string::npos) << replay_error("8");
  EXPECT_NE(replay_error("16").find("attention heads"), std::string::npos);
  EXPECT_EQ(replay_error("4"), "");
}

std::vector<InputSequence> two_inputs() {
  std::vector<InputSequence> in(2);
  in[0] = {"a", {1, 295, 369, 309}, {306, 462, 449, 362, 303, 461}, true, {}, 1, {}};
  in[1] = {"b", {1, 306, 463, 436, 448, 412, 472}, {453, 292, 295, 309, 330}, true, {}, 2, {}};
  return in;
}

RunData replay_with(const std::vector<std::pair<std::string, std::string>>& gen,
                    const std::vector<std::pair<std::string, std::string>>& train = {}) {
  ReplayOptions opt;
  opt.oracle = false;
  opt.recipes = {"bf16"};
  opt.recipe.gen_knobs = gen;
  opt.recipe.train_knobs = train;
  auto in = two_inputs();
  return run_replay(stories(), in, opt);
}

// At tp 1 the tp-only knobs change nothing; at tp 4 each changes the result, and so does tp alone.
TEST(TensorParallel, KnobsActOnlyWithRanks) {
  const RunData base = replay_with({});
  const RunData inert = replay_with({{"tp-reduce", "nccl-ring"}, {"logsoftmax", "vocab-parallel"}},
                                    {{"tp-reduce", "custom-ar"}, {"logsoftmax", "gathered"}});
  EXPECT_EQ(base.recipes[0].tokens, inert.recipes[0].tokens);
  const RunData tp4 = replay_with({{"tp", "4"}});
  EXPECT_NE(base.recipes[0].tokens.at("logp_gen"), tp4.recipes[0].tokens.at("logp_gen"));
  EXPECT_EQ(base.recipes[0].tokens.at("logp_train"), tp4.recipes[0].tokens.at("logp_train"));
  const RunData ring = replay_with({{"tp", "4"}, {"tp-reduce", "nccl-ring"}});
  EXPECT_NE(tp4.recipes[0].tokens.at("logp_gen"), ring.recipes[0].tokens.at("logp_gen"));
  const RunData train4 = replay_with({}, {{"tp", "4"}});
  const RunData train4g = replay_with({}, {{"tp", "4"}, {"logsoftmax", "gathered"}});
  EXPECT_NE(base.recipes[0].tokens.at("logp_train"), train4.recipes[0].tokens.at("logp_train"));
  EXPECT_NE(train4.recipes[0].tokens.at("logp_train"), train4g.recipes[0].tokens.at("logp_train"));
}

// Knob attribution lists tp-reduce and logsoftmax when a path runs tp > 1, and tp-reduce alone
// moves the result (custom all-reduce vs ring at 4 ranks).
TEST(TensorParallel, KnobAttributionFlipsTpReduce) {
  ReplayOptions opt;
  opt.recipes = {"bf16"};
  opt.recipe.gen_knobs = {{"tp", "4"}};
  opt.recipe.train_knobs = {{"tp", "4"}};
  AttributionOptions ao;
  ao.knobs = true;
  ao.recipe = "bf16";
  RunData run;
  run_attribution(stories(), two_inputs(), opt, ao, run);
  const AttributionTable& t = run.attribution.at("knobs");
  const auto& names = t.labels.at("knob");
  const auto it = std::find(names.begin(), names.end(), "tp-reduce");
  ASSERT_NE(it, names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "logsoftmax"), names.end());
  EXPECT_GT(t.values.at("mean_abs_log_ratio")[static_cast<std::size_t>(it - names.begin())], 0.0);
}

// Decode steps with tp: the result does not depend on the thread count (rows grouped differently).
TEST(TensorParallel, DecodeIndependentOfThreads) {
  set_thread_count(1);
  const RunData a = replay_with({{"tp", "4"}, {"batch", "8"}}, {{"tp", "2"}});
  set_thread_count(2);
  const RunData b = replay_with({{"tp", "4"}, {"batch", "8"}}, {{"tp", "2"}});
  set_thread_count(0);
  EXPECT_EQ(a.recipes[0].tokens, b.recipes[0].tokens);
}

}  // namespace
}  // namespace rlp
