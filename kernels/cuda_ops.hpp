// The ops contract of include/rlparity/model/forward.hpp (ForwardOps) on the GPU: the same Mat
// (HostMat) as EmulatedOps and a Cache that extends the host KvCache with a device copy,
// so the forward templates and replay's run_path_group run it unchanged. Weights are uploaded once
// (CudaWeights); each op uploads its input rows, computes on the GPU and downloads its result (the
// KV cache stays on the device). That round trip costs speed, and buys one forward shared by every
// backend: the backends differ only inside the ops.
//
// Where a style asks for something the GPU path cannot do exactly, that op runs on the CPU
// emulator (EmulatedOps) instead and a note says so once on stderr:
//   * fp8 linears (--cuda-gemm cublaslt) when cuBLAS < 12.9 or the device is not sm_90, when a
//     weight is not made of whole 128x128 blocks, or when cuBLASLt offers no algorithm;
//   * attention with attn-block > 2048 or head_dim > 1024.
// The embedding (a row copy) always runs on the host. With --cuda-gemm cublaslt the GEMM
// accumulation order is cuBLASLt's: the emulator's models of it (split-k, k-chunk, fp8-promotion,
// fp8-accum, decode batch as M) are not applied and a note says so; with exact they all are.
#pragma once
#include <memory>
#include <utility>
#include <vector>

#include "cuda_context.hpp"
#include "cuda_kernels.hpp"
#include "cuda_weights.hpp"
#include "rlparity/model/emulated_ops.hpp"
#include "rlparity/model/host_tensors.hpp"
#include "rlparity/model/ops_contract.hpp"

namespace rlp::cuda {

class CudaOps {
 public:
  using Mat = HostMat;
  // The host cache (which the emulator's fallback attention uses) plus the device copy of every
  // layer's K and V that the GPU attention reads and appends to, so that a decode step uploads
  // nothing but its new rows' q, k, v.
  struct DeviceKv {
    std::vector<DeviceBuffer<float>> k, v;  // per layer [capacity x kv_heads*head_dim]
  };
  struct Cache : KvCache {
    std::shared_ptr<DeviceKv> dev;  // null when attention runs on the CPU emulator
  };

  CudaOps(std::shared_ptr<CudaContext> ctx, const ModelSpec& spec, const PreparedWeights& weights,
          const PathStyle& style, const KvScales* kv_scales = nullptr);

  const ModelSpec& spec() const { return spec_; }
  const PathStyle& style() const { return style_; }
  // The ops contract (ops_contract.hpp) on the GPU.
  RLP_FORWARD_OPS_MEMBERS
  // A decode step's rows, row r of sequence caches[r] at positions[r], in one launch; each row is
  // computed exactly as attention() computes it alone. False (nothing done) when attention runs on
  // the CPU emulator: forward_decode then calls attention() row by row.
  bool attention_rows(int layer, const Mat& q, const Mat& k, const Mat& v, const int* positions,
                      const std::vector<Cache*>& caches, Mat& out) const;

  // Which ops of this path run on the GPU (for notes and tests).
  bool attention_on_gpu() const { return attention_gpu_; }
  bool linear_on_gpu(int layer, Proj p) const;

 private:
  // y = x W^T on the GPU; false when the op must fall back to the emulator.
  // decode_step: kernel selection sees the decode batch (the emulator's rule; exact mode only).
  bool gemm(const Mat& x, const CudaLinear& lin, const PreparedLinear& host, bool out_fp32, bool decode_step,
            float* d_y) const;
  bool gemm_exact(const Mat& x, const CudaLinear& lin, bool out_fp32, bool decode_step, float* d_y) const;
  void quantize_activations(const float* d_x, int M, int Mp, int K, uint8_t*& d_codes, float*& d_sinv) const;
  kern::AttentionParams attention_params(int layer, int n, int pos0, float& k_scale) const;
  std::pair<float*, float*> device_kv(Cache& cache, int layer) const;
  float eps() const { return static_cast<float>(spec_.rms_eps); }

  std::shared_ptr<CudaContext> ctx_;
  const ModelSpec& spec_;
  const PreparedWeights& host_w_;
  PathStyle style_;
  EmulatedOps emu_;  // the fallback for ops the GPU path cannot do exactly
  KvScales kv_scales_;
  std::unique_ptr<CudaWeights> w_;
  DeviceBuffer<float> inv_freq_;
  bool attention_gpu_ = true;
  mutable std::vector<uint16_t> bits_;  // host staging (under the context mutex)
};
static_assert(ForwardOps<CudaOps>);

}  // namespace rlp::cuda
