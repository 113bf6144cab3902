// After a cuBLASLt GEMM: widen its output to float, add the bias, round to the output format; and
// the VEC128_32F layout of activation scales.
#include "device_common.cuh"
#include "rlparity/numerics/gemm.hpp"
#include "rlparity/numerics/quantize.hpp"

namespace rlp::cuda::kern {
namespace {

__global__ void epilogue_kernel(const void* in, int in_kind, int rows, int cols, int col_major_ld,
                                const float* bias, num::OutRound out, float* y) {
  const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  // Source element of y[r][c]: row-major in[i], or in[c * ld + r] when cuBLASLt wrote D transposed.
  const std::size_t src =
      col_major_ld > 0 ? (i % static_cast<std::size_t>(cols)) * static_cast<std::size_t>(col_major_ld) +
                             i / static_cast<std::size_t>(cols)
                       : i;
  float v;
  if (in_kind == 1)
    v = num::bf16_bits_to_float(static_cast<const uint16_t*>(in)[src]);
  else if (in_kind == 2)
    v = num::fp16_bits_to_float(static_cast<const uint16_t*>(in)[src]);
  else
    v = static_cast<const float*>(in)[src];
  if (bias) v = v + bias[i % static_cast<std::size_t>(cols)];
  y[i] = num::round_out(v, out);
}

__global__ void vec128_kernel(const float* s, int rows, int kb, int ldm, float* out) {
  const std::size_t n = static_cast<std::size_t>(kb) * static_cast<std::size_t>(ldm);
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  out[i] = num::vec128_scale_entry(s, rows, kb, ldm, i);
}

}  // namespace

void gemm_epilogue(const void* in, int in_kind, int rows, int cols, const float* bias, num::OutRound out,
                   float* y, int col_major_ld) {
  const std::size_t n = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
  if (n == 0) return;
  epilogue_kernel<<<blocks_for(n, 256), 256>>>(in, in_kind, rows, cols, col_major_ld, bias, out, y);
  RLP_CUDA_CHECK_LAUNCH("epilogue_kernel");
}

void scales_to_vec128(const float* scale_inv, int rows, int kb, int ldm, float* out) {
  const std::size_t n = static_cast<std::size_t>(kb) * static_cast<std::size_t>(ldm);
  if (n == 0) return;
  vec128_kernel<<<blocks_for(n, 256), 256>>>(scale_inv, rows, kb, ldm, out);
  RLP_CUDA_CHECK_LAUNCH("vec128_kernel");
}

}  // namespace rlp::cuda::kern
