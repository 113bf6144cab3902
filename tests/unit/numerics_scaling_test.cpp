// Scale conventions of scaling.hpp: hand-worked values per engine, and a search for real inputs
// where multiply-by-scale (TE) and divide-by-scale_inv (vLLM) give different fp8 codes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "rlparity/numerics/scaling.hpp"

namespace rlp::num {
namespace {

ScaleOptions opts(ScaleConvention c, bool pow2 = false, float eps = -1.0f) {
  ScaleOptions o;
  o.convention = c;
  o.pow2 = pow2;
  o.eps = eps;
  return o;
}

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

TEST(NumericsScaling, TransformerEngine) {
  const auto o = opts(ScaleConvention::te);
  BlockScale s = compute_block_scale(448.0f, o);
  EXPECT_EQ(s.scale, 1.0f);
  EXPECT_EQ(s.scale_inv, 1.0f);
  EXPECT_FALSE(s.divide);
  s = compute_block_scale(1.0f, o);
  EXPECT_EQ(s.scale, 448.0f);
  EXPECT_EQ(s.scale_inv, 1.0f / 448.0f);
  s = compute_block_scale(3.0f, o);
  EXPECT_EQ(s.scale, 448.0f / 3.0f);    // correctly rounded 149.333..
  for (float a : {0.0f, kInf, kNaN}) {  // amax 0 / inf / NaN -> scale 1
    s = compute_block_scale(a, o);
    EXPECT_EQ(s.scale, 1.0f) << a;
    EXPECT_EQ(s.scale_inv, 1.0f) << a;
  }
  // 448 / smallest subnormal overflows: FLT_MAX
  s = compute_block_scale(bits_f32(1u), o);
  EXPECT_EQ(s.scale, std::numeric_limits<float>::max());
  // eps floor: amax 0.5 with eps 1 acts as amax 1
  EXPECT_EQ(compute_block_scale(0.5f, opts(ScaleConvention::te, false, 1.0f)).scale, 448.0f);
  // pow2 rounds the SCALE down: 448/3 = 149.3 -> 128, scale_inv 2^-7
  s = compute_block_scale(3.0f, opts(ScaleConvention::te, true));
  EXPECT_EQ(s.scale, 128.0f);
  EXPECT_EQ(s.scale_inv, 0x1p-7f);
  // satfinite multiply: x * scale above 448 saturates
  EXPECT_EQ(quantize_with(1e30f, compute_block_scale(1.0f, o), o), 0x7E);
  EXPECT_EQ(quantize_with(-1.0f, compute_block_scale(1.0f, o), o), 0xFE);
}

TEST(NumericsScaling, Vllm) {
  const auto o = opts(ScaleConvention::vllm);
  BlockScale s = compute_block_scale(448.0f, o);
  EXPECT_EQ(s.scale_inv, 1.0f);
  EXPECT_TRUE(s.divide);
  s = compute_block_scale(0.0f, o);  // eps 1e-10 floor
  EXPECT_EQ(s.scale_inv, 1e-10f / 448.0f);
  s = compute_block_scale(kNaN, o);  // fmaxf(NaN, eps) = eps
  EXPECT_EQ(s.scale_inv, 1e-10f / 448.0f);
  // ue8m0: 3/448 = 0.0067 -> up to 2^-7
  s = compute_block_scale(3.0f, opts(ScaleConvention::vllm, true));
  EXPECT_EQ(s.scale_inv, 0x1p-7f);
  // exact powers of two stay
  EXPECT_EQ(compute_block_scale(448.0f, opts(ScaleConvention::vllm, true)).scale_inv, 1.0f);
  // clamp then round; NaN goes through fmaxf/fminf to -448
  s = compute_block_scale(1.0f, o);
  EXPECT_EQ(quantize_with(kNaN, s, o), 0xFE);
  EXPECT_EQ(quantize_with(1e30f, s, o), 0x7E);
}

TEST(NumericsScaling, DeepGemm) {
  const auto o = opts(ScaleConvention::deepgemm);
  BlockScale s = compute_block_scale(0.0f, o);  // clamp(1e-4)
  EXPECT_EQ(s.scale_inv, 1e-4f / 448.0f);
  EXPECT_EQ(s.scale, 1.0f / (1e-4f / 448.0f));
  s = compute_block_scale(448.0f, opts(ScaleConvention::deepgemm, true));
  EXPECT_EQ(s.scale_inv, 1.0f);  // already a power of two: not bumped
  s = compute_block_scale(449.0f, opts(ScaleConvention::deepgemm, true));
  EXPECT_EQ(s.scale_inv, 2.0f);  // rounded UP
  s = compute_block_scale(3.0f, opts(ScaleConvention::deepgemm, true));
  EXPECT_EQ(s.scale_inv, 0x1p-7f);
  s = compute_block_scale(kNaN, o);  // torch.clamp keeps NaN
  EXPECT_TRUE(std::isnan(s.scale_inv));
  // x * (1/sf) differs from x * (448/amax): the scale itself is rounded differently
  s = compute_block_scale(3.0f, o);
  EXPECT_EQ(s.scale_inv, 3.0f / 448.0f);
  EXPECT_EQ(s.scale, 1.0f / (3.0f / 448.0f));
}

TEST(NumericsScaling, NemoRefit) {
  const auto o = opts(ScaleConvention::nemo_refit);
  EXPECT_EQ(compute_block_scale(0.0f, o).scale, 1.0f);
  EXPECT_EQ(compute_block_scale(kInf, o).scale, 1.0f);
  EXPECT_EQ(compute_block_scale(2.0f, o).scale, 224.0f);
  EXPECT_EQ(compute_block_scale(2.0f, o).scale_inv, 1.0f / 224.0f);
  const auto p = opts(ScaleConvention::nemo_refit, true);
  BlockScale s = compute_block_scale(3.0f, p);  // 2^ceil(log2(3/448)) = 2^-7
  EXPECT_EQ(s.scale, 128.0f);
  EXPECT_EQ(s.scale_inv, 0x1p-7f);
  EXPECT_EQ(compute_block_scale(0.0f, p).scale, 1.0f);  // exponent 0 -> scale 1
  // clamp keeps NaN (torch.clamp)
  EXPECT_EQ(quantize_with(kNaN, compute_block_scale(1.0f, o), o), 0x7F);
  EXPECT_EQ(quantize_with(1e30f, compute_block_scale(1.0f, o), o), 0x7E);
}

TEST(NumericsScaling, NemoPow2Activation) {
  BlockScale s = nemo_pow2_activation_scale(3.0f);  // floor(log2(149.3)) = 7
  EXPECT_EQ(s.scale, 128.0f);
  EXPECT_EQ(s.scale_inv, 0x1p-7f);
  EXPECT_EQ(nemo_pow2_activation_scale(0.0f).scale, 0x1p126f);
}

// TE rounds the scale down (floor(log2(448/amax))), DeepGEMM rounds sf up
// (ceil(log2(amax/448))): the same power except where the rounded quotients land on opposite
// sides of a power of two. Hand-worked: both give 2^-7 for amax 3, 1 for 448.
TEST(NumericsScaling, Pow2DownVersusUp) {
  for (float a : {3.0f, 448.0f, 1.0f, 56.0f, 1000.0f}) {
    const float te = compute_block_scale(a, opts(ScaleConvention::te, true)).scale_inv;
    const float dg = compute_block_scale(a, opts(ScaleConvention::deepgemm, true)).scale_inv;
    EXPECT_EQ(te, dg) << a;
  }
}

// Search for real inputs where TE (x * fl(448/amax), satfinite) and vLLM (clamp(x / fl(amax/448)),
// rne) give different codes. The two scaled values differ by an fp32 ulp or so, so they can only
// straddle an e4m3 rounding boundary (a midpoint between neighbouring codes): the search puts a
// block's elements a few ulps around midpoint * amax / 448 for random amax. With power-of-2
// scales both are exact shifts and must agree wherever they chose the same power.
TEST(NumericsScaling, MultiplyVersusDivideFoundAndPow2Agrees) {
  std::mt19937 rng(7u);
  std::lognormal_distribution<float> mag(0.0f, 3.0f);
  const auto te = opts(ScaleConvention::te), vl = opts(ScaleConvention::vllm);
  const auto te2 = opts(ScaleConvention::te, true), vl2 = opts(ScaleConvention::vllm, true);
  long differ = 0, pow2_differ = 0, pow2_same_scale_blocks = 0, elements = 0;
  const long blocks = 4000;
  float ex_x = 0, ex_amax = 0;
  uint8_t ex_te = 0, ex_vl = 0;
  std::vector<float> blk(128);
  for (long b = 0; b < blocks; ++b) {
    const float amax = mag(rng);
    blk[0] = amax;
    for (size_t i = 1; i < blk.size(); ++i) {
      // midpoint between e4m3 codes c and c+1 (c < 0x7E), as a fraction of the block's range
      const auto c = static_cast<uint8_t>(rng() % 0x7E);
      const float mid =
          0.5f * (fp8_to_float(c, Fp8Kind::e4m3) + fp8_to_float(static_cast<uint8_t>(c + 1), Fp8Kind::e4m3));
      float v = mid * (amax / 448.0f);
      const int steps = static_cast<int>(rng() % 9) - 4;
      for (int s = 0; s < std::abs(steps); ++s) v = std::nextafter(v, steps > 0 ? 1e30f : 0.0f);
      blk[i] = std::fmin(v, amax) * ((rng() & 1) ? -1.0f : 1.0f);
    }
    const BlockScale st = compute_block_scale(amax, te), sv = compute_block_scale(amax, vl);
    const BlockScale st2 = compute_block_scale(amax, te2), sv2 = compute_block_scale(amax, vl2);
    const bool same_pow2 = st2.scale_inv == sv2.scale_inv;
    pow2_same_scale_blocks += same_pow2;
    for (float v : blk) {
      ++elements;
      const uint8_t a = quantize_with(v, st, te), c = quantize_with(v, sv, vl);
      if (a != c && differ++ == 0) {
        ex_x = v;
        ex_amax = amax;
        ex_te = a;
        ex_vl = c;
      }
      if (same_pow2 && quantize_with(v, st2, te2) != quantize_with(v, sv2, vl2)) ++pow2_differ;
    }
  }
  std::printf(
      "te vs vllm: %ld of %ld elements get different codes; e.g. x=%a amax=%a te=0x%02x vllm=0x%02x\n",
      differ, elements, static_cast<double>(ex_x), static_cast<double>(ex_amax), ex_te, ex_vl);
  std::printf("pow2: %ld of %ld blocks chose the same power; %ld differing codes there\n",
              pow2_same_scale_blocks, blocks, pow2_differ);
  ASSERT_GT(differ, 0) << "expected multiply-by-reciprocal and divide to disagree somewhere";
  EXPECT_GT(pow2_same_scale_blocks, blocks * 9 / 10);
  EXPECT_EQ(pow2_differ, 0);
  // The found example, replayed in isolation: a real (x, amax) pair, codes one RNE step apart.
  const uint8_t a = quantize_with(ex_x, compute_block_scale(ex_amax, te), te);
  const uint8_t c = quantize_with(ex_x, compute_block_scale(ex_amax, vl), vl);
  EXPECT_NE(a, c);
  EXPECT_EQ(std::abs(static_cast<int>(a & 0x7F) - static_cast<int>(c & 0x7F)), 1);
}

TEST(NumericsScaling, FastEncoderMatchesGenericOnRandomFloats) {
  std::mt19937 rng(3u);
  for (int i = 0; i < 1000000; ++i) {
    const float x = bits_f32(static_cast<uint32_t>(rng()));
    for (Fp8Kind k : {Fp8Kind::e4m3, Fp8Kind::e5m2})
      for (Saturation s : {Saturation::none, Saturation::satfinite})
        ASSERT_EQ(fp8_encode_fast(x, k, s), float_to_fp8(x, k, s)) << std::hexfloat << x;
  }
}

// NeMo RL's edge padding: the tensor's last element joins the amax of partial blocks in
// nemo_refit only; a NaN there makes the torch amax NaN, and full blocks never see it.
TEST(NumericsScaling, BlockAmaxEdgePadding) {
  const uint32_t two = f32_bits(2.0f);
  EXPECT_EQ(block_amax(two, false, true, -5.0f, ScaleConvention::nemo_refit), 5.0f);
  EXPECT_EQ(block_amax(two, false, false, -5.0f, ScaleConvention::nemo_refit), 2.0f);
  EXPECT_EQ(block_amax(two, false, true, -5.0f, ScaleConvention::te), 2.0f);
  EXPECT_EQ(block_amax(two, false, true, -1.0f, ScaleConvention::nemo_refit), 2.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(block_amax(two, false, true, nan, ScaleConvention::nemo_refit)));
  EXPECT_EQ(block_amax(two, false, true, nan, ScaleConvention::deepgemm), 2.0f);  // no padding
  EXPECT_TRUE(std::isnan(block_amax(two, true, false, 0.0f, ScaleConvention::deepgemm)));
  EXPECT_EQ(block_amax(two, true, false, 0.0f, ScaleConvention::vllm), 2.0f);  // fmaxf: NaN loses
}

}  // namespace
}  // namespace rlp::num
