// Host/device portability for the shared numerics: every function in include/rlparity/numerics
// is marked RLP_HD so the CPU emulator and the CUDA kernels compile the very same code. These
// headers must compile as C++17 under nvcc (no std::bit_cast, no concepts).
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define RLP_HD __host__ __device__ __forceinline__
#else
#define RLP_HD inline
#endif

namespace rlp::num {

// The bits of a value read as another type of the same size (std::bit_cast before C++20; memcpy
// is a register move on host and device alike).
template <class To, class From>
RLP_HD To same_bits_as(From x) {
  static_assert(sizeof(To) == sizeof(From), "same_bits_as: sizes differ");
  To y;
  memcpy(&y, &x, sizeof y);
  return y;
}

RLP_HD uint32_t f32_bits(float x) { return same_bits_as<uint32_t>(x); }
RLP_HD float bits_f32(uint32_t u) { return same_bits_as<float>(u); }
RLP_HD uint64_t f64_bits(double x) { return same_bits_as<uint64_t>(x); }
RLP_HD double bits_f64(uint64_t u) { return same_bits_as<double>(u); }

}  // namespace rlp::num
