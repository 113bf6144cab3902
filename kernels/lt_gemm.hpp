// GEMMs through cuBLASLt, TN layout as the engines call it: Y[M x N] = X[M x K] * W[N x K]^T with
// X and W row-major (K contiguous). cuBLASLt sees A = W (transposed, K x N column-major, ld K),
// B = X (K x M column-major, ld K) and writes D = N x M column-major, i.e. Y row-major.
//   * 16-bit: bf16 (or fp16) operands, fp32 accumulation (CUBLAS_COMPUTE_32F); D in the output
//     format (cuBLASLt's own round-to-nearest) or fp32 when there is a bias (added and rounded in
//     our epilogue, as the emulator does).
//   * FP8 e4m3 block-scaled (cuBLAS >= 12.9, sm_90): A = weight codes with
//     CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, B = activation codes with
//     CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F, scales passed through
//     CUBLASLT_MATMUL_DESC_{A,B}_SCALE_POINTER, D bf16/fp16 (fp32 with a bias).
// The accumulation order is cuBLASLt's (its heuristic picks tiles and split-K): the emulator's
// split-k / k-chunk / fp8-promotion / fp8-accum knobs model it and are not applied here.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "rlparity/numerics/gemm.hpp"

namespace rlp::cuda {

// Which operand of the block-scaled FP8 call is the weight: A (2D-scaled A, 1D-scaled B, as
// TransformerEngine pairs them) or B (NVIDIA's LtBlk128x128Fp8Matmul sample). The first that
// cuBLASLt accepts is used for the rest of the process.
enum class Fp8Pairing { unknown, weights_a, activations_a };

// GEMM time measured with CUDA events around each GEMM kernel (cublasLtMatmul or the exact-order
// kernels), when RLPARITY_CUDA_GEMM_TIMING=1; split by M (decode-sized M <= 64, larger).
struct GemmStats {
  long long calls = 0;
  double flops = 0;    // 2 M N K of the real problems
  double seconds = 0;  // device time inside the GEMM kernels
};
struct GemmTiming {
  GemmStats small_m, large_m;  // M <= 64, M > 64
};

class LtGemm {
 public:
  LtGemm();
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // X, W: device bf16 (fp16 when `fp16`) bit patterns; bias: device float [N] or null; Y: device
  // float [M x N], rounded per `out`.
  void gemm16(const uint16_t* X, const uint16_t* W, int M, int N, int K, bool fp16, const float* bias,
              num::OutRound out, float* Y);

  // Xq: device e4m3 codes [Mp x K] (Mp >= M, rows past M are padding), xs: its VEC128_32F scales
  // ([ceil(K/128)][Mp]); Wq: [N x K] codes, ws: BLK128x128_32F scales. False when cuBLASLt offers
  // no algorithm for this problem (the caller falls back and says why); throws on errors.
  bool gemm_fp8(const uint8_t* Xq, const float* xs, const uint8_t* Wq, const float* ws, int M, int Mp, int N,
                int K, const float* bias, num::OutRound out, float* Y);

  // The timing statistics, or null when RLPARITY_CUDA_GEMM_TIMING is not 1.
  const GemmTiming* stats() const;
  // Brackets another GEMM kernel (the exact-order ones) for the same statistics; no-ops unless
  // timing is on.
  void timing_begin();
  void timing_end(int M, double flops);
  // The FP8 operand pairing in use (unknown before the first FP8 GEMM).
  Fp8Pairing fp8_pairing() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rlp::cuda
