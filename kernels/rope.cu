// RoPE: vLLM's rotary kernel (table and products in the act dtype) or TE's fused RoPE (fp32); the
// mirror of src/model/ops/rope.cpp (element rules: num::rope_entry, num::rope_rotate).
#include "device_common.cuh"

namespace rlp::cuda::kern {
namespace {

__global__ void rope_kernel(float* m, int cols, const int* positions, int rows, const float* inv_freq, int hd,
                            bool table_rounded, Half16 act) {
  const int half = hd / 2, heads = cols / hd;
  const std::size_t total =
      static_cast<std::size_t>(rows) * static_cast<std::size_t>(heads) * static_cast<std::size_t>(half);
  const std::size_t t = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (t >= total) return;
  const int i = static_cast<int>(t % static_cast<std::size_t>(half));
  const int h = static_cast<int>((t / static_cast<std::size_t>(half)) % static_cast<std::size_t>(heads));
  const int r = static_cast<int>(t / (static_cast<std::size_t>(half) * static_cast<std::size_t>(heads)));
  // The table as the emulator builds it: fp32 angle, cos/sin in double (the device's), rounded to
  // float.
  const num::RopeEntry e = num::rope_entry(static_cast<float>(positions[r]), inv_freq[i], table_rounded, act);
  float* x =
      m + static_cast<std::size_t>(r) * static_cast<std::size_t>(cols) + static_cast<std::size_t>(h) * hd;
  num::rope_rotate(x[i], x[i + half], e, table_rounded, act);
}

void launch(float* m, int cols, const int* positions, int rows, const float* inv_freq, int hd,
            bool table_rounded, Half16 act) {
  const std::size_t total =
      static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols / hd) * static_cast<std::size_t>(hd / 2);
  if (total == 0) return;
  rope_kernel<<<blocks_for(total, 256), 256>>>(m, cols, positions, rows, inv_freq, hd, table_rounded, act);
  RLP_CUDA_CHECK_LAUNCH("rope_kernel");
}

}  // namespace

void rope(float* q, int q_cols, float* k, int k_cols, const int* positions, int rows, const float* inv_freq,
          int hd, bool table_rounded, Half16 act) {
  launch(q, q_cols, positions, rows, inv_freq, hd, table_rounded, act);
  launch(k, k_cols, positions, rows, inv_freq, hd, table_rounded, act);
}

}  // namespace rlp::cuda::kern
