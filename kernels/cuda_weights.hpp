// One path's prepared weights on the device, uploaded once: 16-bit linears as bf16/fp16 bit
// patterns (the prepared values are exact in that format), fp8 linears as their e4m3 codes with
// the 128x128 block scales in cuBLASLt's BLK128x128_32F layout (the same codes the emulator
// multiplies: the refit is shared), norms and biases as float. Embeddings stay on the host (the
// embedding op is a row copy).
#pragma once
#include <cstdint>
#include <vector>

#include "device_buffer.hpp"
#include "rlparity/model/kernel_style.hpp"
#include "rlparity/model/model_spec.hpp"
#include "rlparity/model/weights.hpp"

namespace rlp::cuda {

// How fp8 linears go to the device: not at all (they run on the CPU emulator), for cuBLASLt's
// block-scaled GEMM (whole 128x128 blocks only), or for the exact-order kernel (any shape).
enum class Fp8Upload { none, cublaslt, exact };

struct CudaLinear {
  int out = 0, in = 0;
  bool fp8 = false;
  bool fp8_on_gpu = false;  // fp8 and uploaded in a form the GEMM of this mode takes
  DeviceBuffer<uint16_t> w16;
  DeviceBuffer<uint8_t> codes;
  DeviceBuffer<float> scales;  // cublaslt: BLK128x128_32F layout; exact: scale_inv row-major over blocks
  int block_rows = 128, block_cols = 128;
  num::Fp8Kind kind = num::Fp8Kind::e4m3;
  DeviceBuffer<float> bias;  // empty: none
};

struct CudaLayer {
  CudaLinear proj[kNumProj];
  DeviceBuffer<float> input_norm, post_norm, q_norm, k_norm;
};

class CudaWeights {
 public:
  CudaWeights(const ModelSpec& spec, const PreparedWeights& w, Fp8Upload fp8);
  const CudaLinear& linear(int layer, Proj p) const {
    return layers_[static_cast<std::size_t>(layer)].proj[static_cast<int>(p)];
  }
  const CudaLinear& lm_head() const { return lm_head_; }
  const float* norm(int layer, NormSlot slot) const;
  const float* head_norm(int layer, Proj which) const;

  // Why an fp8 linear of shape out x in cannot use the cuBLASLt path (empty: it can).
  static std::string fp8_shape_problem(const PreparedLinear& lin);

 private:
  std::vector<CudaLayer> layers_;
  CudaLinear lm_head_;
  DeviceBuffer<float> final_norm_;
};

}  // namespace rlp::cuda
