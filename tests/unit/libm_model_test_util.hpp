// Shared by the libm-model tests (unit: dense sample; slow: every float): a model function
// (numerics/libm_model.hpp) against the host's std:: function of which it reimplements glibc's
// algorithm, bit for bit (any NaN matches any NaN).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>

#include "rlparity/numerics/libm_model.hpp"
#include "rlparity/util/parallel.hpp"

namespace rlp_test {

struct LibmPair {
  const char* name;
  float (*model)(float);
  float (*host)(float);
};

// exp2f_model is held against std::exp2 with its vector form (exp2_test_util.hpp).
inline const LibmPair kLibmPairs[] = {
    {"expf", rlp::num::expf_model, [](float x) { return std::exp(x); }},
    {"logf", rlp::num::logf_model, [](float x) { return std::log(x); }},
    {"log2f", rlp::num::log2f_model, [](float x) { return std::log2(x); }},
};

// Patterns lo, lo + step, ... < hi; returns the number of mismatches (the first few are reported).
inline uint64_t libm_mismatches(const LibmPair& f, uint64_t lo, uint64_t hi, uint64_t step) {
  std::atomic<uint64_t> bad{0};
  constexpr uint64_t kBlock = uint64_t{1} << 20;
  const uint64_t count = (hi - lo + step - 1) / step;
  const std::size_t blocks = static_cast<std::size_t>((count + kBlock - 1) / kBlock);
  rlp::parallel_for(blocks, 1, [&](std::size_t b0, std::size_t b1) {
    for (std::size_t blk = b0; blk < b1; ++blk) {
      const uint64_t first = blk * kBlock, last = std::min<uint64_t>(count, first + kBlock);
      for (uint64_t i = first; i < last; ++i) {
        const float x = rlp::num::bits_f32(static_cast<uint32_t>(lo + i * step));
        const float want = f.host(x), got = f.model(x);
        if (rlp::num::f32_bits(want) == rlp::num::f32_bits(got) || (std::isnan(want) && std::isnan(got)))
          continue;
        if (bad.fetch_add(1) < 5)
          ADD_FAILURE() << f.name << "(" << std::hexfloat << x << "): host " << want << ", model " << got;
      }
    }
  });
  return bad.load();
}

}  // namespace rlp_test
