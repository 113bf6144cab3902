// The emulation's expf, logf and log2f against the host's glibc functions on every one of
// the 2^32 float patterns (label `slow`; the unit suite checks a dense sample).
#include "unit/libm_model_test_util.hpp"

namespace {

TEST(NumericsExhaustive, LibmModelsAllFloats) {
  for (const auto& f : rlp_test::kLibmPairs) {
    SCOPED_TRACE(f.name);
    EXPECT_EQ(rlp_test::libm_mismatches(f, 0, uint64_t{1} << 32, 1), 0u);
  }
}

}  // namespace
