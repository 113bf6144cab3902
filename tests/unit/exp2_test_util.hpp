// Shared by the exp2 tests (unit: dense sample; slow: every float).
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "rlparity/numerics/exp2.hpp"
#include "rlparity/numerics/libm_model.hpp"
#include "rlparity/util/parallel.hpp"

namespace rlp_test {

using rlp::num::exp2_model_inplace;
using rlp::num::exp2f_model;

inline float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Checks patterns lo, lo + step, ... < hi: scalar and vector forms against std::exp2; returns
// the number of mismatches (and prints the first few).
inline uint64_t check_range(uint64_t lo, uint64_t hi, uint64_t step) {
  std::atomic<uint64_t> bad{0};
  constexpr std::size_t kBlock = std::size_t{1} << 16;  // patterns per buffer
  const uint64_t count = (hi - lo + step - 1) / step;
  const std::size_t blocks = static_cast<std::size_t>((count + kBlock - 1) / kBlock);
  rlp::parallel_for(blocks, 1, [&](std::size_t b0, std::size_t b1) {
    std::vector<float> v, vec;
    for (std::size_t blk = b0; blk < b1; ++blk) {
      const uint64_t first = blk * kBlock, last = std::min<uint64_t>(count, first + kBlock);
      v.clear();
      for (uint64_t i = first; i < last; ++i) v.push_back(from_bits(static_cast<uint32_t>(lo + i * step)));
      vec = v;
      exp2_model_inplace(vec.data(), static_cast<int>(vec.size()));
      for (std::size_t i = 0; i < v.size(); ++i) {
        const float want = std::exp2(v[i]);
        const float s = exp2f_model(v[i]);
        if (bits(s) != bits(want) || bits(vec[i]) != bits(want)) {
          if (bad.fetch_add(1) < 5)
            ADD_FAILURE() << "x=" << v[i] << " (0x" << std::hex << bits(v[i]) << ") std::exp2 0x"
                          << bits(want) << " scalar 0x" << bits(s) << " vector 0x" << bits(vec[i]);
        }
      }
    }
  });
  return bad.load();
}

}  // namespace rlp_test
