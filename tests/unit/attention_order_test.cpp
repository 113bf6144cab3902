// EmulatedOps::attention against a naive scalar re-implementation, written here, of the order that
// docs/kernel-paths.md states for the FlashAttention-style path: per (row, head), keys in blocks of
// attn_block; each score a sequential fp32 fma chain over head_dim from +0; per block the running max,
// alpha = exp2(m_old*c - m_new*c) rescaling l and every acc[d], p = exp2(fma(s, c, -m_new*c)),
// l += p in key order, P rounded to the act dtype when attn_p_round, acc[d] = fma(p, v[d], acc[d]) in
// key order; out = round_act(acc[d] * (1/l)); split-KV partitions merged through their log-sum-exp.
// The fast kernel (transposed keys, tiles of rows and the heads of a KV group walking the key blocks
// together, register-resident scores and P.V, interleaved tiles across threads) must give the same
// bits for every head size (vector widths, tails), block size, partition, GQA group, tile shape,
// prefill, chunked prefill and decode, and thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numbers>
#include <random>
#include <vector>

#include "rlparity/model/emulated_ops.hpp"
#include "rlparity/model/kernel_style.hpp"
#include "rlparity/numerics/formats.hpp"
#include "rlparity/util/parallel.hpp"

namespace {
using rlp::EmulatedOps;
using Mat = EmulatedOps::Mat;

Mat random_bf16(int rows, int cols, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 2.0f);
  Mat m(rows, cols);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) m(i, j) = rlp::num::round_bf16(d(rng));
  return m;
}

// out rows for q rows at positions pos0.. against keys/values 0..pos0+r (bf16 KV). split_kv: each
// partition of split_kv_partition positions runs its own online softmax, and the partitions merge
// through their log-sum-exp (lse_i = m_i*c + log2(l_i), weights exp2(lse_i - lse), summed in
// partition order with fma over acc_i/l_i).
Mat naive_attention(const rlp::ModelSpec& sp, const rlp::PathStyle& st, const Mat& K, const Mat& V,
                    const Mat& q, int pos0) {
  const int hd = sp.head_dim, group = sp.heads / sp.kv_heads, block = st.attn_block;
  const int partition = st.attention == rlp::AttentionKind::split_kv ? st.split_kv_partition : 1 << 30;
  const float c = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd))) * std::numbers::log2e_v<float>;
  Mat out(q.rows(), sp.heads * hd);
  for (int r = 0; r < q.rows(); ++r)
    for (int h = 0; h < sp.heads; ++h) {
      const int g = h / group, last = pos0 + r;
      std::vector<float> ms, ls;
      std::vector<std::vector<float>> accs;
      for (int p0 = 0; p0 <= last; p0 += partition) {
        const int p1 = std::min(p0 + partition - 1, last);
        float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
        std::vector<float> acc(static_cast<size_t>(hd), 0.0f);
        for (int b0 = p0; b0 <= p1; b0 += block) {
          const int b1 = std::min(b0 + block - 1, p1);
          std::vector<float> s;
          float m_new = m;
          for (int j = b0; j <= b1; ++j) {
            float dot = 0.0f;
            for (int d = 0; d < hd; ++d) dot = std::fma(q(r, h * hd + d), K(j, g * hd + d), dot);
            s.push_back(dot);
            m_new = std::max(m_new, dot);
          }
          const float mc = m_new * c;
          const float alpha = std::exp2(m * c - mc);
          l *= alpha;
          for (float& a : acc) a *= alpha;
          for (int j = b0; j <= b1; ++j) {
            const float p = std::exp2(std::fma(s[static_cast<size_t>(j - b0)], c, -mc));
            l += p;
            const float pr = st.attn_p_round ? rlp::num::round_bf16(p) : p;
            for (int d = 0; d < hd; ++d)
              acc[static_cast<size_t>(d)] = std::fma(pr, V(j, g * hd + d), acc[static_cast<size_t>(d)]);
          }
          m = m_new;
        }
        ms.push_back(m);
        ls.push_back(l);
        accs.push_back(acc);
      }
      if (ms.size() == 1) {
        const float inv = 1.0f / ls[0];
        for (int d = 0; d < hd; ++d)
          out(r, h * hd + d) = rlp::num::round_bf16(accs[0][static_cast<size_t>(d)] * inv * 1.0f);
      } else {
        std::vector<float> lse;
        float lse_max = -std::numeric_limits<float>::infinity();
        for (size_t i = 0; i < ms.size(); ++i) {
          lse.push_back(ms[i] * c + std::log2(ls[i]));
          lse_max = std::max(lse_max, lse.back());
        }
        float sum = 0.0f;
        for (const float x : lse) sum += std::exp2(x - lse_max);
        const float lse_all = lse_max + std::log2(sum);
        for (int d = 0; d < hd; ++d) {
          float acc = 0.0f;
          for (size_t i = 0; i < ms.size(); ++i)
            acc = std::fma(std::exp2(lse[i] - lse_all), accs[i][static_cast<size_t>(d)] / ls[i], acc);
          out(r, h * hd + d) = rlp::num::round_bf16(acc * 1.0f);
        }
      }
    }
  return out;
}

void expect_same_bits(const Mat& a, const Mat& b, const std::string& what) {
  ASSERT_EQ(a.rows(), b.rows()) << what;
  ASSERT_EQ(a.cols(), b.cols()) << what;
  for (int i = 0; i < a.rows(); ++i)
    for (int j = 0; j < a.cols(); ++j) {
      const float x = a(i, j), y = b(i, j);
      ASSERT_EQ(std::memcmp(&x, &y, sizeof x), 0)
          << what << " at (" << i << "," << j << "): " << x << " vs " << y;
    }
}

// One layer, one head of 64 dimensions (the dot-product cases below).
rlp::ModelSpec one_head_spec() {
  rlp::ModelSpec sp;
  sp.hidden = 64;
  sp.intermediate = 8;
  sp.layers = 1;
  sp.heads = 1;
  sp.kv_heads = 1;
  sp.head_dim = 64;
  sp.vocab = 8;
  sp.max_positions = 32;
  return sp;
}

// The training style's attention with bf16 activations and KV cache, blocks of `block` keys.
rlp::PathStyle bf16_flash_style(int block, bool p_round) {
  rlp::PathStyle st = rlp::default_training_style();
  st.attn_block = block;
  st.attn_p_round = p_round;
  st.attention = rlp::AttentionKind::flash;
  st.kv_cache = rlp::KvCacheDtype::bf16;
  st.act = rlp::num::Half16::bf16;
  return st;
}

TEST(AttentionOrder, FastKernelMatchesNaiveStatedOrder) {
  for (const int hd : {8, 24, 64, 80, 136})  // tails, one vector, four vectors, 4 + 1 + tail
    for (const int block : {1, 5, 16, 128})
      for (const bool p_round : {false, true})
        for (const int threads : {1, 2}) {
          const std::string what = "hd=" + std::to_string(hd) + " block=" + std::to_string(block) +
                                   " p_round=" + std::to_string(p_round) +
                                   " threads=" + std::to_string(threads);
          rlp::set_thread_count(threads);
          rlp::ModelSpec sp;
          sp.hidden = 4 * hd;
          sp.intermediate = 8;
          sp.layers = 1;
          sp.heads = 4;
          sp.kv_heads = 2;
          sp.head_dim = hd;
          sp.vocab = 8;
          sp.max_positions = 64;
          const rlp::PreparedWeights w;  // attention reads no weights
          const rlp::PathStyle st = bf16_flash_style(block, p_round);
          const EmulatedOps ops(sp, w, st);
          const int T = 37, P = 29, width = sp.kv_heads * hd;
          const Mat q = random_bf16(T, sp.heads * hd, 1u + static_cast<unsigned>(hd));
          const Mat k = random_bf16(T, width, 2u + static_cast<unsigned>(hd));
          const Mat v = random_bf16(T, width, 3u + static_cast<unsigned>(hd));
          // Teacher-forced: all T rows in one call.
          auto cache = ops.new_cache(T);
          Mat out;
          ops.attention(0, q, k, v, 0, cache, out);
          expect_same_bits(out, naive_attention(sp, st, k, v, q, 0), what + " teacher-forced");
          // Prefill P rows, then decode the rest one row at a time.
          auto cache2 = ops.new_cache(T);
          Mat o1;
          ops.attention(0, q.topRows(P), k.topRows(P), v.topRows(P), 0, cache2, o1);
          for (int r = P; r < T; ++r) {
            Mat orow;
            ops.attention(0, q.middleRows(r, 1), k.middleRows(r, 1), v.middleRows(r, 1), r, cache2, orow);
            expect_same_bits(orow, naive_attention(sp, st, k, v, q.middleRows(r, 1), r), what + " decode");
          }
        }
  rlp::set_thread_count(0);
}

// The kernel walks tiles of consecutive rows and the heads of one KV group together: tiles that do
// not divide the rows, rows of a tile ending in different key blocks and partitions, split-KV
// partitions that cut blocks, chunked prefill after a cached prefix (pos0 > 0, several rows), and
// KV groups of 1, 2 and 4 heads must all keep each row's own order.
TEST(AttentionOrder, TiledRowsSplitKvAndGroupsMatchNaive) {
  struct Case {
    int hd, heads, kv_heads, block, partition;  // partition 0: flash
  };
  const Case cases[] = {{16, 4, 4, 5, 0},   {24, 4, 2, 16, 0}, {64, 8, 2, 7, 0},   {16, 4, 1, 16, 24},
                        {8, 4, 2, 5, 13},   {40, 4, 2, 1, 3},  {64, 4, 2, 16, 64}, {136, 2, 1, 32, 50},
                        {24, 6, 2, 128, 0}, {16, 4, 2, 3, 1}};
  for (const Case& cs : cases)
    for (const bool p_round : {false, true})
      for (const int threads : {1, 2}) {
        const std::string what = "hd=" + std::to_string(cs.hd) + " heads=" + std::to_string(cs.heads) + "/" +
                                 std::to_string(cs.kv_heads) + " block=" + std::to_string(cs.block) +
                                 " partition=" + std::to_string(cs.partition) +
                                 " p_round=" + std::to_string(p_round) +
                                 " threads=" + std::to_string(threads);
        rlp::set_thread_count(threads);
        rlp::ModelSpec sp;
        sp.hidden = cs.heads * cs.hd;
        sp.intermediate = 8;
        sp.layers = 1;
        sp.heads = cs.heads;
        sp.kv_heads = cs.kv_heads;
        sp.head_dim = cs.hd;
        sp.vocab = 8;
        sp.max_positions = 256;
        const rlp::PreparedWeights w;
        rlp::PathStyle st = bf16_flash_style(cs.block, p_round);
        if (cs.partition > 0) st.attention = rlp::AttentionKind::split_kv;
        st.split_kv_partition = cs.partition > 0 ? cs.partition : 512;
        const EmulatedOps ops(sp, w, st);
        const int T = 93, width = sp.kv_heads * cs.hd;
        const unsigned seed = 7u * static_cast<unsigned>(cs.hd + cs.block + cs.partition);
        const Mat q = random_bf16(T, sp.heads * cs.hd, seed + 1);
        const Mat k = random_bf16(T, width, seed + 2);
        const Mat v = random_bf16(T, width, seed + 3);
        const Mat ref = naive_attention(sp, st, k, v, q, 0);
        auto cache = ops.new_cache(T);
        Mat out;
        ops.attention(0, q, k, v, 0, cache, out);
        expect_same_bits(out, ref, what + " one call");
        // Chunks of several rows after a cached prefix, then decode rows.
        auto cache2 = ops.new_cache(T);
        int r0 = 0;
        for (const int len : {11, 37, 19, 1, 22, 1, 1, 1}) {
          Mat o;
          ops.attention(0, q.middleRows(r0, len), k.middleRows(r0, len), v.middleRows(r0, len), r0, cache2,
                        o);
          expect_same_bits(o, ref.middleRows(r0, len), what + " chunk at " + std::to_string(r0));
          r0 += len;
        }
        ASSERT_EQ(r0, T);
      }
  rlp::set_thread_count(0);
}

// Scores run as bf16 dot-product steps (vdpbf16ps, which flushes denormal inputs) only where
// bf16_dot_exact holds for each lane chunk's q and the layer's keys. The last of 20 rows has a q of
// zeros but for one denormal bf16 value, 2^-127, and key 0 has 2^126 in that component: the fma
// chain keeps their product, 0.5, the flush would make every score of the row 0 (as q = 0 does).
// The keys alone pass the check (the other rows' |q| < 2^-7 keep the products' bound), so the
// row's own q must decline it.
TEST(AttentionOrder, DotStepsDeclineADenormalQuery) {
  const rlp::ModelSpec sp = one_head_spec();
  const rlp::PathStyle st = bf16_flash_style(16, true);
  const rlp::PreparedWeights w;  // attention reads no weights
  const EmulatedOps ops(sp, w, st);
  const int T = 20, last = T - 1;
  Mat q = random_bf16(T, 64, 41u), k = random_bf16(T, 64, 42u);
  const Mat v = random_bf16(T, 64, 43u);
  for (int r = 0; r < T; ++r)
    for (int d = 0; d < 64; ++d) q(r, d) = r == last ? 0.0f : q(r, d) * 0.0078125f;  // 2^-7: exact
  for (int j = 0; j < T; ++j) k(j, 0) = j == 0 ? std::ldexp(1.0f, 126) : 1.0f;
  Mat q_flushed = q;
  q(last, 0) = rlp::num::bits_f32(0x00200000u);  // bf16 0x0020: 2^-127
  auto cache = ops.new_cache(T);
  Mat out;
  ops.attention(0, q, k, v, 0, cache, out);
  const Mat ref = naive_attention(sp, st, k, v, q, 0);
  const Mat flushed = naive_attention(sp, st, k, v, q_flushed, 0);
  bool differs = false;  // the case this test is about
  for (int d = 0; d < 64; ++d) differs = differs || ref(last, d) != flushed(last, d);
  EXPECT_TRUE(differs);
  expect_same_bits(out, ref, "denormal query");
}

// P.V runs as bf16 dot-product steps only where P's and V's spans rule out a denormal partial sum
// (bf16_dot_exact) and the accumulators are multiples of 2^-126. Here every row's weights are 1 for
// key 0 (score 55.5, V zero) and about 2^-10 for the others (score 0), whose V values are
// +-2^-118..2^-114: the outputs are sums of products near 2^-127, whose first partial sums are
// denormal. The fma chain keeps them; the instruction would flush them (seen failing with the P
// check forced to pass).
TEST(AttentionOrder, DotStepsDeclineDenormalProductsInPv) {
  const rlp::ModelSpec sp = one_head_spec();
  const rlp::PathStyle st = bf16_flash_style(32, true);
  const rlp::PreparedWeights w;
  const EmulatedOps ops(sp, w, st);
  const int T = 20;
  Mat q = Mat::Zero(T, 64), k = Mat::Zero(T, 64), v = random_bf16(T, 64, 44u);
  for (int r = 0; r < T; ++r) {
    q(r, 0) = 1.0f;
    for (int d = 0; d < 64; ++d)  // +-[1, 8) * 2^-118: bf16 values, none denormal
      v(r, d) = std::ldexp(std::copysign(rlp::num::round_bf16(1.0f + std::fabs(v(r, d))), v(r, d)), -118);
  }
  k(0, 0) = 55.5f;
  v.row(0).setZero();
  auto cache = ops.new_cache(T);
  Mat out;
  ops.attention(0, q, k, v, 0, cache, out);
  expect_same_bits(out, naive_attention(sp, st, k, v, q, 0), "denormal P.V products");
}

// The accumulator condition of P.V's dot-product steps: each lane's acc must be 0 or at least
// 2^-103 (a multiple of 2^-126). Block 0 (keys 0..3, scores 0) leaves acc = 2^(k-110) + 2^(k-130);
// block 1's keys score S with float(S * c) = k exactly, so alpha = 2^-k and block 1 starts from
// acc = 2^-110 + 2^-130. Its first product, 1 * -2^-110, passes the span check (e_p + e_v = -110),
// and the partial sum 2^-130 is denormal: the fma chain keeps it (the last row's output is about
// 2^-132), the instruction would flush it to 0.
TEST(AttentionOrder, DotStepsDeclineASmallAccumulator) {
  const rlp::ModelSpec sp = one_head_spec();
  const rlp::PathStyle st = bf16_flash_style(4, true);
  const rlp::PreparedWeights w;
  const EmulatedOps ops(sp, w, st);
  const float c = rlp::num::attention_exp2_scale(64, 1.0f);
  // A score S (a float: three bf16 pieces summed by the score chain of q = (1, 1, 1, 0, ...)) with
  // float(S * c) an integer k.
  float S = 0.0f, piece[3] = {};
  int k = 0;
  for (int kk = 60; kk < 120 && k == 0; ++kk) {
    const float target = static_cast<float>(kk) / c;
    float cand = std::nextafter(target, 0.0f);
    for (int step = 0; step < 3 && k == 0; ++step, cand = std::nextafter(cand, 1e9f)) {
      if (cand * c != static_cast<float>(kk)) continue;
      const float p0 = rlp::num::round_bf16(cand), r = cand - p0, p1 = rlp::num::round_bf16(r), p2 = r - p1;
      if (rlp::num::round_bf16(p2) != p2 || (p0 + p1) + p2 != cand) continue;
      S = cand;
      piece[0] = p0;
      piece[1] = p1;
      piece[2] = p2;
      k = kk;
    }
  }
  ASSERT_GT(k, 0) << "no score with an integer scaled value";
  const int T = 8;
  Mat q = Mat::Zero(T, 64), kk = Mat::Zero(T, 64), v = Mat::Zero(T, 64);
  for (int r = 0; r < T; ++r)
    for (int d = 0; d < 3; ++d) q(r, d) = 1.0f;
  for (int j = 4; j < T; ++j)
    for (int d = 0; d < 3; ++d) kk(j, d) = piece[d];
  for (int d = 0; d < 64; ++d) {
    v(0, d) = std::ldexp(1.0f, k - 110);
    v(1, d) = std::ldexp(1.0f, k - 130);
    v(4, d) = -std::ldexp(1.0f, -110);
  }
  auto cache = ops.new_cache(T);
  Mat out;
  ops.attention(0, q, kk, v, 0, cache, out);
  const Mat ref = naive_attention(sp, st, kk, v, q, 0);
  EXPECT_NE(ref(T - 1, 0), 0.0f) << "S=" << S << " k=" << k;  // the case this test is about
  expect_same_bits(out, ref, "small accumulator");
}

}  // namespace
