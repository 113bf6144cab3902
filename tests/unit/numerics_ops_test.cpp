// The ops' element rules of numerics/ops.hpp: each rounding point where the engines put it (the
// fused and unfused variants differ on real inputs), and the constants they use.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <random>

#include "rlparity/model/kernel_style.hpp"
#include "rlparity/numerics/formats.hpp"
#include "rlparity/numerics/ops.hpp"

namespace rlp::num {
namespace {

TEST(NumericsOps, RoundActFollowsTheFormat) {
  const float x = 1.0f + 0x1p-9f;  // representable in fp16 (10 mantissa bits), not in bf16 (7)
  EXPECT_EQ(round_act(x, num::Half16::fp16), x);
  EXPECT_EQ(round_act(x, num::Half16::bf16), round_bf16(x));
  EXPECT_NE(round_act(x, num::Half16::bf16), x);
  EXPECT_EQ(residual_store(x, true, num::Half16::bf16), x);
  EXPECT_EQ(residual_store(x, false, num::Half16::bf16), round_bf16(x));
}

// The rules write out each rounding: fused norm rounds x * r before the weight, unfused once.
TEST(NumericsOps, RoundingPointsOfEachRule) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> d(-2.0f, 2.0f);
  int norm_differs = 0, silu_differs = 0, rope_differs = 0;
  for (int i = 0; i < 2000; ++i) {
    const float x = round_bf16(d(rng)), r = d(rng), w = round_bf16(d(rng));
    const float fused = rms_norm_out(x, r, w, true, num::Half16::bf16);
    const float unfused = rms_norm_out(x, r, w, false, num::Half16::bf16);
    EXPECT_EQ(fused, round_bf16(round_bf16(x * r) * w));
    EXPECT_EQ(unfused, round_bf16((x * r) * w));
    norm_differs += fused != unfused;

    const float g = round_bf16(d(rng)), u = round_bf16(d(rng)), e = std::exp(-g);
    const float silu = g / (1.0f + e);
    EXPECT_EQ(silu_gate(g, u, e, true, num::Half16::bf16), round_bf16(silu * u));
    EXPECT_EQ(silu_gate(g, u, e, false, num::Half16::bf16), round_bf16(round_bf16(silu) * u));
    silu_differs +=
        silu_gate(g, u, e, true, num::Half16::bf16) != silu_gate(g, u, e, false, num::Half16::bf16);

    const RopeEntry t = rope_entry(static_cast<float>(i), 0.01f * d(rng), true, num::Half16::bf16);
    EXPECT_EQ(t.cos, round_bf16(t.cos));
    float a1 = x, b1 = u, a2 = x, b2 = u;
    rope_rotate(a1, b1, t, true, num::Half16::bf16);
    rope_rotate(a2, b2, t, false, num::Half16::bf16);
    EXPECT_EQ(a1, round_bf16(round_bf16(x * t.cos) - round_bf16(u * t.sin)));
    EXPECT_EQ(b2, round_bf16(u * t.cos + x * t.sin));
    rope_differs += a1 != a2 || b1 != b2;
  }
  EXPECT_GT(norm_differs, 0);
  EXPECT_GT(silu_differs, 0);
  EXPECT_GT(rope_differs, 0);
}

TEST(NumericsOps, RopeEntryIsTheFloatAngle) {
  const RopeEntry e = rope_entry(3.0f, 0.1f, false, num::Half16::bf16);
  const float angle = 3.0f * 0.1f;
  EXPECT_EQ(e.cos, static_cast<float>(std::cos(static_cast<double>(angle))));
  EXPECT_EQ(e.sin, static_cast<float>(std::sin(static_cast<double>(angle))));
}

TEST(NumericsOps, AttentionScaleUsesLog2e) {
  const float s = static_cast<float>(1.0 / std::sqrt(128.0));
  EXPECT_EQ(attention_exp2_scale(128, 1.0f), s * 1.0f * std::numbers::log2e_v<float>);
  EXPECT_EQ(attention_exp2_scale(64, 0.5f),
            static_cast<float>(1.0 / 8.0) * 0.5f * std::numbers::log2e_v<float>);
}

TEST(NumericsOps, FullVocabSums) {
  const double inf = std::numeric_limits<double>::infinity();
  FullVocabSums s;
  s.add(std::log(0.5), std::log(0.25));
  s.add(std::log(0.5), std::log(0.75));
  s.add(-inf, -inf);  // zero weight on both sides: no NaN
  const double kl = 0.5 * std::log(0.5 / 0.25) + 0.5 * std::log(0.5 / 0.75);
  EXPECT_NEAR(s.kl_gen_train, kl, 1e-15);
  EXPECT_NEAR(s.entropy_gen, std::log(2.0), 1e-15);
  EXPECT_GT(s.kl_train_gen, 0.0);
  EXPECT_GT(s.js(), 0.0);
  EXPECT_LT(s.js(), std::log(2.0));
  EXPECT_FALSE(std::isnan(s.kl_gen_train + s.kl_train_gen + s.entropy_gen + s.js()));
}

}  // namespace
}  // namespace rlp::num
