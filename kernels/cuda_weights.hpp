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

struct CudaLinear {
  int out = 0, in = 0;
  bool fp8 = false;
  bool fp8_on_gpu = false;  // fp8 and shaped as the cuBLASLt block-scaled GEMM takes it
  DeviceBuffer<uint16_t> w16;
  DeviceBuffer<uint8_t> codes;
  DeviceBuffer<float> scales;  // BLK128x128_32F layout
  DeviceBuffer<float> bias;    // empty: none
};

struct CudaLayer {
  CudaLinear proj[kNumProj];
  DeviceBuffer<float> input_norm, post_norm, q_norm, k_norm;
};

class CudaWeights {
 public:
  // fp8: upload fp8 linears' codes and scales (only when the device can run the fp8 GEMM).
  CudaWeights(const ModelSpec& spec, const PreparedWeights& w, bool fp8);
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
