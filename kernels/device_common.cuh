// Device helpers shared by the kernels: act-dtype rounding through the shared numerics, block
// reductions, launch checks.
#pragma once
#include <cuda_runtime.h>

#include "cuda_check.hpp"
#include "cuda_kernels.hpp"
#include "rlparity/numerics/formats.hpp"
#include "rlparity/numerics/libm_model.hpp"

namespace rlp::cuda::kern {

__device__ __forceinline__ float round_act(float x, Act a) {
  return a == Act::fp16 ? num::round_fp16(x) : num::round_bf16(x);
}

// Sum over the block of one value per thread (tree in shared memory; blockDim.x a power of two
// <= 1024). Every thread gets the result.
template <class T>
__device__ T block_sum(T v, T* shared) {
  const unsigned t = threadIdx.x;
  shared[t] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) shared[t] = shared[t] + shared[t + s];
    __syncthreads();
  }
  const T r = shared[0];
  __syncthreads();
  return r;
}

// Max over the block, as std::max chains it ((a < b) ? b : a).
__device__ inline float block_max(float v, float* shared) {
  const unsigned t = threadIdx.x;
  shared[t] = v;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) shared[t] = (shared[t] < shared[t + s]) ? shared[t + s] : shared[t];
    __syncthreads();
  }
  const float r = shared[0];
  __syncthreads();
  return r;
}

// The float transcendentals: the device's own (within 2 ulp), or with `exact` the emulation's
// glibc models (libm_model.hpp), the very functions the CPU emulator calls.
__device__ __forceinline__ float exp_f(float x, bool exact) { return exact ? num::expf_model(x) : expf(x); }
__device__ __forceinline__ float exp2_f(float x, bool exact) { return exact ? num::exp2f_model(x) : exp2f(x); }
__device__ __forceinline__ float log_f(float x, bool exact) { return exact ? num::logf_model(x) : logf(x); }
__device__ __forceinline__ float log2_f(float x, bool exact) { return exact ? num::log2f_model(x) : log2f(x); }

inline unsigned blocks_for(std::size_t n, unsigned threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

}  // namespace rlp::cuda::kern
