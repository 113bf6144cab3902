// Block quantize/dequantize: partial edge blocks, NeMo's last-element padding, the dequant error
// bound, thread-count independence and the cuBLASLt scale layouts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "rlparity/numerics/quantize.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/parallel.hpp"

namespace rlp::num {
namespace {

std::vector<float> random_matrix(int rows, int cols, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows) * static_cast<size_t>(cols));
  for (float& v : x) v = d(rng) * (rng() % 7 == 0 ? 30.0f : 1.0f);
  return x;
}

// Element-by-element reference: amax of the block region, then the scaling.hpp functions.
void check_against_reference(const std::vector<float>& x, int rows, int cols, int br, int bc,
                             const ScaleOptions& o) {
  const Fp8Tensor t = quantize_blocks(x.data(), rows, cols, br, bc, o);
  ASSERT_EQ(t.row_blocks(), (rows + br - 1) / br);
  ASSERT_EQ(t.col_blocks(), (cols + bc - 1) / bc);
  for (int b0 = 0; b0 < t.row_blocks(); ++b0)
    for (int b1 = 0; b1 < t.col_blocks(); ++b1) {
      float amax = 0.0f;
      const int r1 = std::min(rows, (b0 + 1) * br), c1 = std::min(cols, (b1 + 1) * bc);
      for (int r = b0 * br; r < r1; ++r)
        for (int c = b1 * bc; c < c1; ++c)
          amax = std::fmax(amax, std::fabs(x[static_cast<size_t>(r * cols + c)]));
      const bool partial = (r1 - b0 * br) < br || (c1 - b1 * bc) < bc;
      if (o.convention == ScaleConvention::nemo_refit && partial) amax = std::fmax(amax, std::fabs(x.back()));
      const BlockScale s = compute_block_scale(amax, o);
      ASSERT_EQ(t.scale_inv[static_cast<size_t>(b0 * t.col_blocks() + b1)], s.scale_inv) << b0 << "," << b1;
      for (int r = b0 * br; r < r1; ++r)
        for (int c = b1 * bc; c < c1; ++c) {
          ASSERT_EQ(t.codes[static_cast<size_t>(r * cols + c)],
                    quantize_with(x[static_cast<size_t>(r * cols + c)], s, o))
              << r << "," << c;
          ASSERT_EQ(t.block_scale_inv(r, c), s.scale_inv);
        }
    }
}

TEST(NumericsQuantize, PartialEdgeBlocksAllConventions) {
  for (ScaleConvention c :
       {ScaleConvention::te, ScaleConvention::vllm, ScaleConvention::deepgemm, ScaleConvention::nemo_refit})
    for (bool pow2 : {false, true}) {
      ScaleOptions o;
      o.convention = c;
      o.pow2 = pow2;
      const auto w = random_matrix(130, 200, 1);
      check_against_reference(w, 130, 200, 128, 128, o);
      const auto a = random_matrix(3, 172, 2);
      check_against_reference(a, 3, 172, 1, 128, o);
      check_against_reference(a, 3, 172, 3, 172, o);  // per-tensor
    }
}

TEST(NumericsQuantize, NemoPadsEdgeBlocksWithLastElement) {
  std::vector<float> w(130 * 200, 0.5f);
  w.back() = 100.0f;  // in the bottom-right block; its value pads every partial block
  ScaleOptions o;
  o.convention = ScaleConvention::nemo_refit;
  const Fp8Tensor t = quantize_blocks(w.data(), 130, 200, 128, 128, o);
  EXPECT_EQ(t.scale_inv[0], 1.0f / (448.0f / 0.5f));    // full block: its own amax
  EXPECT_EQ(t.scale_inv[1], 1.0f / (448.0f / 100.0f));  // partial: padded with 100
  EXPECT_EQ(t.scale_inv[2], 1.0f / (448.0f / 100.0f));
  o.convention = ScaleConvention::te;  // TE ignores padding
  const Fp8Tensor u = quantize_blocks(w.data(), 130, 200, 128, 128, o);
  EXPECT_EQ(u.scale_inv[1], 1.0f / (448.0f / 0.5f));
}

TEST(NumericsQuantize, DequantErrorBound) {
  const auto x = random_matrix(256, 384, 3);
  for (ScaleConvention c :
       {ScaleConvention::te, ScaleConvention::vllm, ScaleConvention::deepgemm, ScaleConvention::nemo_refit}) {
    ScaleOptions o;
    o.convention = c;
    const Fp8Tensor t = quantize_blocks(x.data(), 256, 384, 128, 128, o);
    std::vector<float> d(x.size());
    dequantize(t, d.data());
    for (size_t i = 0; i < x.size(); ++i) {
      const float si = t.block_scale_inv(static_cast<int>(i / 384), static_cast<int>(i % 384));
      // e4m3 RNE: relative error <= 2^-4 in the normal range, absolute <= half the subnormal
      // unit (2^-10) in scaled units below it; plus the fp32 scale multiply/divide and dequant.
      const double bound = std::fabs(x[i]) * (0x1p-4 + 0x1p-21) + si * 0x1p-10;
      ASSERT_LE(std::fabs(static_cast<double>(d[i]) - x[i]), bound) << i;
    }
  }
}

TEST(NumericsQuantize, ThreadCountDoesNotChangeBits) {
  const auto x = random_matrix(300, 500, 4);
  ScaleOptions o;
  rlp::set_thread_count(1);
  const Fp8Tensor a = quantize_blocks(x.data(), 300, 500, 1, 128, o);
  rlp::set_thread_count(2);
  const Fp8Tensor b = quantize_blocks(x.data(), 300, 500, 1, 128, o);
  rlp::set_thread_count(0);
  EXPECT_EQ(a.codes, b.codes);
  EXPECT_EQ(a.scale_inv, b.scale_inv);
}

TEST(NumericsQuantize, NanAndInfInBlock) {
  std::vector<float> x(128, 1.0f);
  x[5] = std::numeric_limits<float>::quiet_NaN();
  ScaleOptions o;  // te: NaN ignored by the fmaxf amax, NaN element -> NaN code
  Fp8Tensor t = quantize_blocks(x.data(), 1, 128, 1, 128, o);
  EXPECT_EQ(t.scale_inv[0], 1.0f / 448.0f);
  EXPECT_EQ(t.codes[5], 0x7F);
  EXPECT_EQ(t.codes[0], 0x7E);
  o.convention = ScaleConvention::deepgemm;  // torch.amax propagates NaN: everything NaN
  t = quantize_blocks(x.data(), 1, 128, 1, 128, o);
  EXPECT_TRUE(std::isnan(t.scale_inv[0]));
  EXPECT_EQ(t.codes[0], 0x7F);
  x[5] = std::numeric_limits<float>::infinity();
  o.convention = ScaleConvention::te;  // amax inf -> scale 1
  t = quantize_blocks(x.data(), 1, 128, 1, 128, o);
  EXPECT_EQ(t.scale_inv[0], 1.0f);
  EXPECT_EQ(t.codes[5], 0x7E);      // satfinite
  EXPECT_EQ(t.codes[0], 0x38);      // 1.0
  std::vector<float> z(128, 0.0f);  // all-zero block: scale 1, zero codes
  t = quantize_blocks(z.data(), 1, 128, 1, 128, o);
  EXPECT_EQ(t.scale_inv[0], 1.0f);
  EXPECT_EQ(t.codes[3], 0);
}

TEST(NumericsQuantize, CublasLtLayouts) {
  const auto x = random_matrix(6, 300, 5);  // 1x128: 3 K blocks, M = 6 padded to 8
  ScaleOptions o;
  const Fp8Tensor a = quantize_blocks(x.data(), 6, 300, 1, 128, o);
  const auto v = scales_for_cublaslt_vec128(a);
  ASSERT_EQ(v.size(), 3u * 8u);
  for (int m = 0; m < 6; ++m)
    for (int kb = 0; kb < 3; ++kb)
      EXPECT_EQ(v[static_cast<size_t>(kb * 8 + m)], a.scale_inv[static_cast<size_t>(m * 3 + kb)]);
  EXPECT_EQ(v[6], 0.0f);
  EXPECT_EQ(v[7], 0.0f);
  const auto w = random_matrix(260, 700, 6);  // 128x128: 3 x 6 blocks, K blocks padded to 8
  const Fp8Tensor b = quantize_blocks(w.data(), 260, 700, 128, 128, o);
  const auto s = scales_for_cublaslt_blk128(b);
  ASSERT_EQ(s.size(), 3u * 8u);
  for (int r = 0; r < 3; ++r)
    for (int kb = 0; kb < 6; ++kb)
      EXPECT_EQ(s[static_cast<size_t>(r * 8 + kb)], b.scale_inv[static_cast<size_t>(r * 6 + kb)]);
  EXPECT_THROW(scales_for_cublaslt_blk128(a), rlp::Error);
  EXPECT_THROW(quantize_blocks(x.data(), 6, 300, 0, 128, o), rlp::Error);
}

}  // namespace
}  // namespace rlp::num
