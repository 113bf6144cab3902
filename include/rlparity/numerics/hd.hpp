// Host/device portability for the shared numerics: every function in include/rlparity/numerics
// is marked RLP_HD so the CPU emulator and the CUDA kernels compile the very same code.
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define RLP_HD __host__ __device__ __forceinline__
#else
#define RLP_HD inline
#endif

namespace rlp::num {

RLP_HD uint32_t f32_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

RLP_HD float bits_f32(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

RLP_HD uint64_t f64_bits(double x) {
#if defined(__CUDA_ARCH__)
  return static_cast<uint64_t>(__double_as_longlong(x));
#else
  uint64_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
#endif
}

RLP_HD double bits_f64(uint64_t u) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(u));
#else
  double x;
  std::memcpy(&x, &u, sizeof x);
  return x;
#endif
}

}  // namespace rlp::num
