// RMSNorm kernels: fused add+norm (vLLM), unfused (TE), per-head norm, residual sum; the mirror of
// src/model/ops/norm.cpp (element rules: num::rms_norm_out, num::residual_store).
#include "device_common.cuh"

namespace rlp::cuda::kern {
namespace {

constexpr int kThreads = 256;

// 1/sqrt(v): the device's rsqrtf (<= 2 ulp), or with `exact` the correctly rounded quotient of
// the correctly rounded square root, as the emulator computes it.
__device__ __forceinline__ float inv_sqrt(float v, bool exact) { return exact ? 1.0f / sqrtf(v) : rsqrtf(v); }

__global__ void add_rms_norm_kernel(float* resid, const float* delta, const float* w, int n, float eps,
                                    bool fused, bool resid_fp32, Half16 act, float* out, bool exact) {
  __shared__ float red[kThreads];
  const std::size_t base = static_cast<std::size_t>(blockIdx.x) * static_cast<std::size_t>(n);
  float* res = resid + base;
  float sum = 0.0f;
  const RowWalk walk = row_walk(n, exact);
  for (int i = walk.first; i < n; i += walk.step) {
    const float z = delta ? res[i] + delta[base + i] : res[i];
    const float stored = num::residual_store(z, resid_fp32, act);
    res[i] = stored;
    // vLLM's fused kernel takes the variance from the fp32 sum; an unfused norm sees the stored one.
    const float v = fused ? z : stored;
    sum = fmaf(v, v, sum);
  }
  sum = row_sum(sum, exact, red);
  const float var = sum / static_cast<float>(n);
  const float r = inv_sqrt(var + eps, exact);
  for (int i = static_cast<int>(threadIdx.x); i < n; i += blockDim.x) {
    out[base + i] = num::rms_norm_out(res[i], r, w[i], fused, act);
  }
}

__global__ void head_rms_norm_kernel(float* x, const float* w, int cols, int hd, float eps, bool fused,
                                     Half16 act, bool exact) {
  __shared__ float red[128];
  const int heads = cols / hd;
  const int row = static_cast<int>(blockIdx.x) / heads, h = static_cast<int>(blockIdx.x) % heads;
  float* seg =
      x + static_cast<std::size_t>(row) * static_cast<std::size_t>(cols) + static_cast<std::size_t>(h) * hd;
  float sum = 0.0f;
  const RowWalk walk = row_walk(hd, exact);
  for (int i = walk.first; i < hd; i += walk.step) sum = fmaf(seg[i], seg[i], sum);
  sum = row_sum(sum, exact, red);
  const float r = inv_sqrt(sum / static_cast<float>(hd) + eps, exact);
  for (int i = static_cast<int>(threadIdx.x); i < hd; i += blockDim.x) {
    seg[i] = num::rms_norm_out(seg[i], r, w[i], fused, act);
  }
}

__global__ void residual_sum_kernel(const float* a, const float* b, float* out, std::size_t n,
                                    bool resid_fp32, Half16 act) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) {
    const float z = a[i] + b[i];
    out[i] = num::residual_store(z, resid_fp32, act);
  }
}

}  // namespace

void add_rms_norm(float* resid, const float* delta, const float* w, int rows, int n, float eps, bool fused,
                  bool resid_fp32, Half16 act, float* out, bool exact) {
  if (rows <= 0) return;
  add_rms_norm_kernel<<<static_cast<unsigned>(rows), kThreads>>>(resid, delta, w, n, eps, fused, resid_fp32,
                                                                 act, out, exact);
  RLP_CUDA_CHECK_LAUNCH("add_rms_norm_kernel");
}

void head_rms_norm(float* x, const float* w, int rows, int cols, int hd, float eps, bool fused, Half16 act,
                   bool exact) {
  if (rows <= 0) return;
  head_rms_norm_kernel<<<static_cast<unsigned>(rows * (cols / hd)), 128>>>(x, w, cols, hd, eps, fused, act,
                                                                           exact);
  RLP_CUDA_CHECK_LAUNCH("head_rms_norm_kernel");
}

void residual_sum(const float* a, const float* b, float* out, std::size_t n, bool resid_fp32, Half16 act) {
  if (n == 0) return;
  residual_sum_kernel<<<blocks_for(n, 256), 256>>>(a, b, out, n, resid_fp32, act);
  RLP_CUDA_CHECK_LAUNCH("residual_sum_kernel");
}

}  // namespace rlp::cuda::kern
