// Parallel chunks of the CPU ops (internal to src/model/ops).
#pragma once
#include <cstddef>

namespace rlp::ops_detail {

// Row-wise and element-wise ops: small enough that a long teacher-forced sequence spreads over the
// threads, large enough that a decode step (a few rows) stays on one.
inline constexpr std::size_t kRowGrain = 32;
inline constexpr std::size_t kElemGrain = std::size_t{1} << 15;

}  // namespace rlp::ops_detail
