// exp_model (numerics/libm_model_f64.hpp) against the host's glibc exp on every float of the
// metrics' domain widened to double: every negative float, -0 to -inf and the NaNs (the default
// suite samples the rest).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>

#include "rlparity/numerics/libm_model_f64.hpp"
#include "rlparity/util/parallel.hpp"

namespace {

TEST(NumericsExhaustive, ExpModelEveryNegativeFloat) {
  std::atomic<uint64_t> bad{0};
  constexpr uint64_t kBlock = uint64_t{1} << 20, kFirst = uint64_t{1} << 31, kCount = uint64_t{1} << 31;
  rlp::parallel_for(static_cast<std::size_t>(kCount / kBlock), 1, [&](std::size_t b0, std::size_t b1) {
    for (std::size_t b = b0; b < b1; ++b)
      for (uint64_t u = kFirst + b * kBlock; u < kFirst + (b + 1) * kBlock; ++u) {
        const double x = rlp::num::bits_f32(static_cast<uint32_t>(u));
        const double want = std::exp(x), got = rlp::num::exp_model(x);
        if (rlp::num::f64_bits(want) == rlp::num::f64_bits(got) || (std::isnan(want) && std::isnan(got)))
          continue;
        if (bad.fetch_add(1) < 5)
          ADD_FAILURE() << std::hexfloat << "exp(" << x << "): host " << want << ", model " << got;
      }
  });
  EXPECT_EQ(bad.load(), 0u);
}

}  // namespace
