// The emulation's exp2 (numerics/exp2.hpp): bit for bit against the host's std::exp2 (glibc's
// exp2f, whose algorithm it reimplements) on a dense sample (every float: tests/slow), the vector
// form against the scalar one, and accuracy against a float64 exp2.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "exp2_test_util.hpp"

namespace rlp::num {
namespace {

using rlp_test::bits;
using rlp_test::check_range;
using rlp_test::from_bits;

TEST(NumericsExp2, MatchesHostExp2OnDenseSample) {
  // Every 1021st pattern (all exponents, both signs), every pattern of one binade of the
  // softmax's domain (x <= 0) and of the underflow edge, where the special cases change.
  EXPECT_EQ(check_range(0, uint64_t{1} << 32, 1021), 0u);
  EXPECT_EQ(check_range(bits(-0.125f), bits(-0.25f), 1), 0u);
  EXPECT_EQ(check_range(bits(-127.5f), bits(-151.0f), 1), 0u);
  for (float x : {0.0f, -0.0f, 1.0f, -1.0f, 127.99999f, 128.0f, -128.0f, -149.0f, -149.5f, -150.0f, 1e30f,
                  -1e30f, INFINITY, -INFINITY, NAN, -NAN}) {
    float v = x;
    exp2_model_inplace(&v, 1);
    EXPECT_EQ(bits(exp2f_model(x)), bits(std::exp2(x))) << x;
    EXPECT_EQ(bits(v), bits(std::exp2(x))) << x;
  }
}

TEST(NumericsExp2, WithinOneUlpOfFloat64) {
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 4099) {
    const float x = from_bits(static_cast<uint32_t>(u));
    if (!std::isfinite(x) || std::fabs(x) > 127.0f) continue;
    const double want = std::exp2(static_cast<double>(x));
    const float got = exp2f_model(x);
    const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);
    ASSERT_LE(std::fabs(static_cast<double>(got) - want), std::max(ulp, 0x1p-149)) << x;
  }
}

}  // namespace
}  // namespace rlp::num
