// Device helpers shared by the kernels: the element-level rules of the ops (numerics/ops.hpp, shared
// with the CPU ops), block reductions, launch checks.
#pragma once
#include <cuda_runtime.h>

#include "cuda_check.hpp"
#include "cuda_kernels.hpp"
#include "rlparity/numerics/formats.hpp"
#include "rlparity/numerics/libm_model.hpp"
#include "rlparity/numerics/ops.hpp"

namespace rlp::cuda::kern {

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

// How a block walks a row of n for a reduction: with `exact` thread 0 takes every element in order
// (the emulator's sequential chain) and the others none; else each thread takes a stride.
struct RowWalk {
  int first, step;
};
__device__ __forceinline__ RowWalk row_walk(int n, bool exact) {
  if (exact) return {threadIdx.x == 0 ? 0 : n, 1};
  return {static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x)};
}
// Thread 0's value, to every thread of the block.
__device__ inline float from_thread0(float v, float* shared) {
  if (threadIdx.x == 0) shared[0] = v;
  __syncthreads();
  const float r = shared[0];
  __syncthreads();
  return r;
}
// The row's sum / maximum after row_walk, in every thread: thread 0's sequential chain (exact), or
// the block tree reduction of the threads' partials.
__device__ inline float row_sum(float partial, bool exact, float* shared) {
  return exact ? from_thread0(partial, shared) : block_sum(partial, shared);
}
__device__ inline float row_max(float partial, bool exact, float* shared) {
  return exact ? from_thread0(partial, shared) : block_max(partial, shared);
}

// The float transcendentals: the device's own (within 2 ulp), or with `exact` the emulation's
// glibc models (libm_model.hpp), the very functions the CPU emulator calls.
__device__ __forceinline__ float exp_f(float x, bool exact) { return exact ? num::expf_model(x) : expf(x); }
__device__ __forceinline__ float exp2_f(float x, bool exact) {
  return exact ? num::exp2f_model(x) : exp2f(x);
}
__device__ __forceinline__ float log_f(float x, bool exact) { return exact ? num::logf_model(x) : logf(x); }
__device__ __forceinline__ float log2_f(float x, bool exact) {
  return exact ? num::log2f_model(x) : log2f(x);
}

inline unsigned blocks_for(std::size_t n, unsigned threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

}  // namespace rlp::cuda::kern
