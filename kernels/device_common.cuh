// Device helpers shared by the kernels: act-dtype rounding through the shared numerics, block
// reductions, launch checks.
#pragma once
#include <cuda_runtime.h>

#include "cuda_check.hpp"
#include "cuda_kernels.hpp"
#include "rlparity/numerics/formats.hpp"

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

inline unsigned blocks_for(std::size_t n, unsigned threads) { return static_cast<unsigned>((n + threads - 1) / threads); }

}  // namespace rlp::cuda::kern
