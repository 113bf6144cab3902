// The emulation's expf, logf and log2f (numerics/libm_model.hpp, shared with the CUDA kernels)
// bit for bit against the host's glibc functions whose algorithms they reimplement: a dense sample
// of every function here, every float in tests/slow (exp2f: numerics_exp2 tests); special values
// and float64 accuracy of all four.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "libm_model_test_util.hpp"

namespace {

using rlp::num::bits_f32;
using rlp::num::f32_bits;

uint32_t bits(float x) { return f32_bits(x); }

TEST(NumericsLibmModel, MatchesHostOnDenseSample) {
  for (const auto& f : rlp_test::kLibmPairs) {
    SCOPED_TRACE(f.name);
    // Every 1021st pattern (all exponents, both signs), plus whole binades where the special
    // cases and the table's subintervals change: around 1 (logs), the softmax's domain [-1, 0]
    // and the under/overflow edges (exps).
    EXPECT_EQ(rlp_test::libm_mismatches(f, 0, uint64_t{1} << 32, 1021), 0u);
    EXPECT_EQ(rlp_test::libm_mismatches(f, bits(0.5f), bits(2.0f), 1), 0u);
    EXPECT_EQ(rlp_test::libm_mismatches(f, bits(-0.5f), bits(-1.0f), 1), 0u);
    EXPECT_EQ(rlp_test::libm_mismatches(f, bits(-64.0f), bits(-160.0f), 7), 0u);
    EXPECT_EQ(rlp_test::libm_mismatches(f, bits(64.0f), bits(160.0f), 7), 0u);
    EXPECT_EQ(rlp_test::libm_mismatches(f, 1, 0x00800000u, 13), 0u);  // subnormals
  }
}

TEST(NumericsLibmModel, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(bits(rlp::num::expf_model(-inf)), bits(0.0f));
  EXPECT_EQ(bits(rlp::num::expf_model(inf)), bits(inf));
  EXPECT_EQ(bits(rlp::num::expf_model(0.0f)), bits(1.0f));
  EXPECT_EQ(bits(rlp::num::expf_model(100.0f)), bits(inf));
  EXPECT_EQ(bits(rlp::num::expf_model(-110.0f)), bits(0.0f));
  EXPECT_EQ(bits(rlp::num::logf_model(1.0f)), bits(0.0f));
  EXPECT_EQ(bits(rlp::num::logf_model(0.0f)), bits(-inf));
  EXPECT_EQ(bits(rlp::num::logf_model(-0.0f)), bits(-inf));
  EXPECT_EQ(bits(rlp::num::log2f_model(inf)), bits(inf));
  EXPECT_TRUE(std::isnan(rlp::num::logf_model(-1.0f)));
  EXPECT_TRUE(std::isnan(rlp::num::log2f_model(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(bits(rlp::num::log2f_model(8.0f)), bits(3.0f));
  EXPECT_EQ(bits(rlp::num::exp2f_model(-149.0f)), bits(bits_f32(1u)));  // smallest subnormal
}

// Accuracy against float64, independent of glibc: within one ulp everywhere in the sample.
TEST(NumericsLibmModel, WithinOneUlpOfFloat64) {
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 4099) {
    const float x = bits_f32(static_cast<uint32_t>(u));
    if (!std::isfinite(x)) continue;
    const double xd = x;
    const struct {
      double want;
      float got;
    } cases[] = {{std::exp(xd), rlp::num::expf_model(x)},
                 {std::exp2(xd), rlp::num::exp2f_model(x)},
                 {x > 0 ? std::log(xd) : NAN, x > 0 ? rlp::num::logf_model(x) : NAN},
                 {x > 0 ? std::log2(xd) : NAN, x > 0 ? rlp::num::log2f_model(x) : NAN}};
    for (const auto& c : cases) {
      if (!std::isfinite(c.want) || std::fabs(c.want) > 3e38 || std::fabs(c.want) < 1e-37) continue;
      const double ulp = std::ldexp(1.0, std::ilogb(c.want) - 23);
      ASSERT_LE(std::fabs(static_cast<double>(c.got) - c.want), ulp) << std::hexfloat << x;
    }
  }
}

// expf_model_n (the lanes the SiLU gate and the log-softmax use) against the scalar model, bitwise:
// every 257th pattern in order (whole groups of one exponent), then a shuffled mix where a group of
// 16 holds a special-case input (|x| >= 87.5, inf, NaN) among tail-range ones, computed in place
// with a length that is not a multiple of 16.
TEST(NumericsLibmModel, ExpfLanesMatchScalarModel) {
  std::vector<float> x;
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 257) x.push_back(bits_f32(static_cast<uint32_t>(u)));
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> d(-20.0f, 5.0f);
  for (int i = 0; i < 100003; ++i)
    x.push_back(i % 23 == 0 ? (i % 3 == 0 ? 90.0f : -std::numeric_limits<float>::infinity()) : d(rng));
  // The two floats where computing r unfused (a product, then a subtraction) changes the result.
  for (const uint32_t u : {0x4202422fu, 0xc27c65d9u})
    for (int i = 0; i < 16; ++i) x.push_back(bits_f32(u));
  std::vector<float> y = x;
  rlp::num::expf_model_n(y.data(), y.data(), y.size());
  size_t bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = rlp::num::expf_model(x[i]);
    if (bits(y[i]) != bits(want) && !(std::isnan(y[i]) && std::isnan(want)) && ++bad <= 5)
      ADD_FAILURE() << "x=" << x[i] << " (0x" << std::hex << bits(x[i]) << ") lanes 0x" << bits(y[i])
                    << " scalar 0x" << bits(want) << std::dec;
  }
  EXPECT_EQ(bad, 0u);
}

}  // namespace
