// The emulation's exp2 against the host's std::exp2 on every one of the 2^32 float patterns,
// scalar and vector forms (label `slow`; the unit suite checks a dense sample).
#include "unit/exp2_test_util.hpp"

namespace {

TEST(NumericsExhaustive, Exp2AllFloats) { EXPECT_EQ(rlp_test::check_range(0, uint64_t{1} << 32, 1), 0u); }

}  // namespace
