// EmulatedOps::attention against a naive scalar re-implementation, written here, of the order that
// docs/kernel-paths.md states for the FlashAttention-style path: per (row, head), keys in blocks of
// attn_block; each score a sequential fp32 fma chain over head_dim from +0; per block the running max,
// alpha = exp2(m_old*c - m_new*c) rescaling l and every acc[d], p = exp2(fma(s, c, -m_new*c)),
// l += p in key order, P rounded to the act dtype when attn_p_round, acc[d] = fma(p, v[d], acc[d]) in
// key order; out = round_act(acc[d] * (1/l)). The fast kernel (transposed keys, register-resident
// P.V, interleaved rows across threads) must give the same bits for every head size (vector widths,
// tails), block size, prefill and decode, and thread count.
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

// out rows for q rows at positions pos0.. against keys/values 0..pos0+r (bf16 KV, no split).
Mat naive_attention(const rlp::ModelSpec& sp, const rlp::PathStyle& st, const Mat& K, const Mat& V, const Mat& q,
                    int pos0) {
  const int hd = sp.head_dim, group = sp.heads / sp.kv_heads, block = st.attn_block;
  const float c = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd))) * std::numbers::log2e_v<float>;
  Mat out(q.rows(), sp.heads * hd);
  for (int r = 0; r < q.rows(); ++r)
    for (int h = 0; h < sp.heads; ++h) {
      const int g = h / group, last = pos0 + r;
      float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
      std::vector<float> acc(static_cast<size_t>(hd), 0.0f);
      for (int b0 = 0; b0 <= last; b0 += block) {
        const int b1 = std::min(b0 + block - 1, last);
        std::vector<float> s;
        float m_new = m;
        for (int j = b0; j <= b1; ++j) {
          float dot = 0.0f;
          for (int d = 0; d < hd; ++d) dot = std::fma(q(r, h * hd + d), K(j, g * hd + d), dot);
          s.push_back(dot);
          m_new = std::max(m_new, dot);
        }
        const float ms = m_new * c;
        const float alpha = std::exp2(m * c - ms);
        l *= alpha;
        for (float& a : acc) a *= alpha;
        for (int j = b0; j <= b1; ++j) {
          const float p = std::exp2(std::fma(s[static_cast<size_t>(j - b0)], c, -ms));
          l += p;
          const float pr = st.attn_p_round ? rlp::num::round_bf16(p) : p;
          for (int d = 0; d < hd; ++d) acc[static_cast<size_t>(d)] = std::fma(pr, V(j, g * hd + d), acc[static_cast<size_t>(d)]);
        }
        m = m_new;
      }
      const float inv = 1.0f / l;
      for (int d = 0; d < hd; ++d) out(r, h * hd + d) = rlp::num::round_bf16(acc[static_cast<size_t>(d)] * inv * 1.0f);
    }
  return out;
}

void expect_same_bits(const Mat& a, const Mat& b, const std::string& what) {
  ASSERT_EQ(a.rows(), b.rows()) << what;
  ASSERT_EQ(a.cols(), b.cols()) << what;
  for (int i = 0; i < a.rows(); ++i)
    for (int j = 0; j < a.cols(); ++j) {
      const float x = a(i, j), y = b(i, j);
      ASSERT_EQ(std::memcmp(&x, &y, sizeof x), 0) << what << " at (" << i << "," << j << "): " << x << " vs " << y;
    }
}

TEST(AttentionOrder, FastKernelMatchesNaiveStatedOrder) {
  for (const int hd : {8, 24, 64, 80, 136})  // tails, one vector, four vectors, 4 + 1 + tail
    for (const int block : {1, 5, 16, 128})
      for (const bool p_round : {false, true})
        for (const int threads : {1, 2}) {
          const std::string what = "hd=" + std::to_string(hd) + " block=" + std::to_string(block) +
                                   " p_round=" + std::to_string(p_round) + " threads=" + std::to_string(threads);
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
          rlp::PathStyle st = rlp::default_training_style();
          st.attn_block = block;
          st.attn_p_round = p_round;
          st.attention = rlp::AttentionKind::flash;
          st.kv_cache = rlp::KvCacheDtype::bf16;
          st.act = rlp::ActDtype::bf16;
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

}  // namespace
