// The float64 oracle on the bundled stories260K checkpoint, pinned to independently computed
// per-token log-probabilities.
//
// The expected values were produced once (not at test time) by
//   /usr/bin/python3 tests/reference/llama2c_reference.py /work/shared/models/stories260K/stories260K.bin
//   TOKENS...
// an independent numpy float64 forward of the ORIGINAL llama2.c checkpoint (its own file format,
// interleaved RoPE as in llama2.c's run.c), which shares nothing with rlparity's safetensors loader,
// HF rotate-half RoPE or forward. The numbers are its JSON output printed with 17 significant
// digits. kExpected[j] = log p(tokens[j+1] | tokens[0..j]). At the time of writing the oracle agrees
// with them to about 1e-14; the test allows 1e-9 absolute.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "rlparity/model/checkpoint.hpp"
#include "rlparity/model/forward.hpp"
#include "rlparity/model/oracle_ops.hpp"
#include "rlparity/model/weights.hpp"

namespace {

const std::string kStories = std::string(RLPARITY_SOURCE_DIR) + "/fixtures/models/stories260K";
const std::string kStoriesBf16 = kStories + "/bf16";

struct Pinned {
  std::vector<int32_t> tokens;
  std::vector<double> expected;  // tokens.size() - 1 values
};

// Sequence A: the sequence the brief names (fixture prompts story-00..02 run together).
const Pinned kSeqA = {
    {1, 295, 369, 309, 306, 462, 449, 362, 303, 461, 390, 219, 162, 59, 69, 63},
    {-2.1707971752627464, -1.7367559699831783, -4.083755958699296, -10.312441574214782, -6.8374672495778785,
     -10.823145047065854, -6.6369088719715403, -4.9801418720699271, -9.7771133284214446, -7.3133386758002654,
     -7.9255442282852746, -8.4421514655988368, -5.9609031076991226, -5.4611919287546487, -6.122756573791535}};

// Sequence B: fixtures/inputs/stories260K-prompts.jsonl story-03 followed by story-04 without its
// leading BOS (21 tokens).
const Pinned kSeqB = {
    {1, 461, 447, 303, 303, 444, 339, 339, 310, 316, 341, 341, 341, 200, 306, 420, 339, 294, 422, 310, 331},
    {-1.2556742116243771,  -2.9404545192547267, -2.422997515058023,   -0.25004293172493453,
     -0.91298612631278431, -1.4313541908757095, -0.85611791452673514, -2.7933674383892955,
     -0.1825312817707799,  -7.0853543828164973, -1.0269801791517099,  -0.73351046883846227,
     -7.0861130310951106,  -8.5412757243342821, -5.911227353306546,   -6.6145664768448587,
     -4.4874488684695466,  -1.7680511880571037, -5.7452934998824379,  -2.0656502793318992}};

std::string sci(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", x);
  return buf;
}

// The oracle's log p(tokens[j+1] | tokens[..j]) for every j, teacher-forced.
std::vector<double> oracle_token_logprobs(const std::string& dir, const std::vector<int32_t>& tokens) {
  const rlp::Checkpoint ck = rlp::Checkpoint::open(dir);
  const rlp::OracleWeights w = rlp::prepare_oracle_weights(ck);
  const rlp::OracleOps ops(ck.spec(), w);
  const int n = static_cast<int>(tokens.size());
  auto cache = ops.new_cache(n);
  rlp::OracleOps::Mat lp;
  rlp::forward(ops, cache, tokens.data(), n, 0, lp);
  std::vector<double> out;
  for (int j = 0; j + 1 < n; ++j) out.push_back(lp(j, tokens[static_cast<std::size_t>(j + 1)]));
  return out;
}

void expect_pinned(const Pinned& p) {
  ASSERT_EQ(p.expected.size() + 1, p.tokens.size());
  const std::vector<double> got = oracle_token_logprobs(kStories, p.tokens);
  ASSERT_EQ(got.size(), p.expected.size());
  double worst = 0.0;
  for (std::size_t j = 0; j < got.size(); ++j) {
    EXPECT_NEAR(got[j], p.expected[j], 1e-9)
        << "position " << j << " (predicting token " << p.tokens[j + 1] << ")";
    worst = std::max(worst, std::abs(got[j] - p.expected[j]));
  }
  ::testing::Test::RecordProperty("max_abs_err", sci(worst));
}

TEST(StoriesOracle, PinnedLogprobsSequenceA) { expect_pinned(kSeqA); }

TEST(StoriesOracle, PinnedLogprobsSequenceB) { expect_pinned(kSeqB); }

// The bf16 twin holds the f32 weights rounded to bf16: its oracle is a different model (the
// numbers must differ), but only slightly.
TEST(StoriesOracle, Bf16TwinDiffersSlightly) {
  for (const Pinned* p : {&kSeqA, &kSeqB}) {
    const std::vector<double> f32 = oracle_token_logprobs(kStories, p->tokens);
    const std::vector<double> bf16 = oracle_token_logprobs(kStoriesBf16, p->tokens);
    ASSERT_EQ(f32.size(), bf16.size());
    double worst = 0.0;
    for (std::size_t j = 0; j < f32.size(); ++j) {
      ASSERT_TRUE(std::isfinite(bf16[j]));
      EXPECT_LE(std::abs(bf16[j] - f32[j]), 1.0) << "position " << j;
      worst = std::max(worst, std::abs(bf16[j] - f32[j]));
    }
    ::testing::Test::RecordProperty(p == &kSeqA ? "max_abs_diff_bf16_A" : "max_abs_diff_bf16_B", sci(worst));
    EXPECT_GT(worst, 1e-6) << "the bf16 twin's oracle equals the f32 one: are the weights really different?";
  }
}

}  // namespace
