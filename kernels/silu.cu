// SiLU-gated MLP: vLLM's silu_and_mul (fp32, one rounding) or HF/Megatron (silu rounded first); the
// mirror of src/model/ops/silu.cpp (element rule: num::silu_gate).
#include "device_common.cuh"

namespace rlp::cuda::kern {
namespace {

__global__ void silu_mul_kernel(const float* gate, const float* up, float* out, std::size_t n, bool fused,
                                Half16 act, bool exact) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float g = gate[i];
  out[i] = num::silu_gate(g, up[i], exp_f(-g, exact), fused, act);
}

}  // namespace

void silu_mul(const float* gate, const float* up, float* out, std::size_t n, bool fused, Half16 act,
              bool exact) {
  if (n == 0) return;
  silu_mul_kernel<<<blocks_for(n, 256), 256>>>(gate, up, out, n, fused, act, exact);
  RLP_CUDA_CHECK_LAUNCH("silu_mul_kernel");
}

}  // namespace rlp::cuda::kern
