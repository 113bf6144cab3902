// Block quantization of a row-major fp32 matrix to fp8 codes + one fp32 scale_inv per block:
// 1x128 (per-token groups along K: activations), 128x128 (weights), rows x cols (per-tensor).
// Partial edge blocks are explicit blocks of their own (real dims are multiples of 128, fixtures
// need not be). The per-element numerics are scaling.hpp's, shared with the CUDA kernel.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "rlparity/numerics/formats.hpp"
#include "rlparity/numerics/scaling.hpp"

namespace rlp::num {

// Codes row-major rows x cols; one fp32 scale_inv per block.
struct Fp8Tensor {
  int rows = 0, cols = 0, block_rows = 1, block_cols = 128;
  Fp8Kind kind = Fp8Kind::e4m3;
  std::vector<uint8_t> codes;
  std::vector<float> scale_inv;  // row-major over blocks: [row_blocks()][col_blocks()]
  int row_blocks() const { return (rows + block_rows - 1) / block_rows; }
  int col_blocks() const { return (cols + block_cols - 1) / block_cols; }
  // scale_inv of the block holding element (r, c)
  float block_scale_inv(int r, int c) const {
    return scale_inv[static_cast<std::size_t>(r / block_rows) * static_cast<std::size_t>(col_blocks()) +
                     static_cast<std::size_t>(c / block_cols)];
  }
};

// Quantizes x (rows x cols, row-major) block by block in the convention of `opt`:
//   amax per block: NaN-ignoring max of |x| for te/vllm (CUDA fmaxf), NaN-propagating for
//   deepgemm/nemo_refit (torch.amax); nemo_refit additionally counts |x[rows-1][cols-1]| in every
//   partial edge block, because NeMo RL pads the weight with its last element before blocking.
//   Other conventions ignore the padding (TE masks partial blocks, DeepGEMM pads with zeros).
// Throws rlp::Error on bad shapes. Parallel over block rows; the result does not depend on the
// thread count.
Fp8Tensor quantize_blocks(const float* x, int rows, int cols, int block_rows, int block_cols,
                          const ScaleOptions& opt);
// The same into an existing tensor, reusing its buffers (no allocation or page faults when the
// shape repeats: the steady state of a refit or of per-step activation quantization).
void quantize_blocks_into(const float* x, int rows, int cols, int block_rows, int block_cols,
                          const ScaleOptions& opt, Fp8Tensor& out);
// The same bits with the matrix supplied a block row at a time: rows_of(r0, r1, dst) writes rows
// [r0, r1) (cols floats each) to dst, from any thread. Each block row is widened into a per-thread
// buffer that stays in cache for both passes, so a refit never holds a weight's whole float master
// and reads its stored bytes once.
void quantize_blocks_into(const std::function<void(int r0, int r1, float* dst)>& rows_of, int rows, int cols,
                          int block_rows, int block_cols, const ScaleOptions& opt, Fp8Tensor& out);

// vLLM's dynamic per-token quantization (scaling.hpp vllm_token_scale / vllm_token_quantize) of
// x (rows x cols) into `out`: e4m3 codes, blocks of 1 x cols, scale_inv = the row's scale.
void quantize_per_token_vllm(const float* x, int rows, int cols, Fp8Tensor& out);

// out[r][c] = decode(code) * scale_inv(block), one fp32 multiply.
void dequantize(const Fp8Tensor& t, float* out);

// ---- cuBLASLt scale layouts ---------------------------------------------------------------------
// What cuBLASLt (>= 12.9, sm_90) reads through CUBLASLT_MATMUL_DESC_{A,B}_SCALE_POINTER with
// CUBLASLT_MATMUL_DESC_{A,B}_SCALE_MODE set to:
//   VEC128_32F    one fp32 per 128 elements along K. The scale tensor is K-block-major with the
//                 outer (M or N) dimension contiguous, that dimension padded to a multiple of 4:
//                 [ceil(K/128)][roundup(M, 4)] row-major, i.e. a column-major M x ceil(K/128)
//                 matrix with leading dimension roundup(M, 4).
//   BLK128x128_32F one fp32 per 128x128 block: [ceil(M/128)][roundup(ceil(K/128), 4)] row-major,
//                 the K-block index contiguous and padded to a multiple of 4.
// Source: cuBLAS docs "Scaling factors layouts" (docs.nvidia.com/cuda/cublas, section 3.1.4 in
// 13.x) name the modes; the concrete shapes above are TransformerEngine's "GEMM_READY" format,
// the one TE hands to cuBLASLt for Float8BlockScaling
// (pytorch/csrc/quantizer.cpp Float8BlockQuantizer::get_scale_shape: 1D rowwise
// {ceildiv(K,128), roundup(M,4)} "already transposed so it's GEMM_READY"; 2D rowwise
// {ceildiv(M,128), roundup(ceildiv(K,128),4)}). We could not read the cuBLAS page's own figure
// offline; verify on a GPU with the cuBLASLt cross-backend test.
// Here M is the tensor's rows (tokens for activations, output features for weights) and K its
// cols; the tensor must hold the matching block shape (1x128, resp. 128x128).
// Padding, for both layouts: the padded dimension is rounded up to a multiple of 4 (cuBLASLt's
// minimum; a caller whose codes have more padding rows, as CudaOps' 16, passes that as ld), and
// every padding entry is 0: padding rows have zero codes and their outputs are dropped, so the
// value is never part of a result.
RLP_HD int cublaslt_scale_ld(int n) { return (n + 3) / 4 * 4; }

// Entry i of the VEC128_32F layout [kb][ld] of a [rows][kb] scale_inv (ld >= rows): host and device.
RLP_HD float vec128_scale_entry(const float* scale_inv, int rows, int kb, int ld, std::size_t i) {
  const std::size_t b = i / static_cast<std::size_t>(ld), m = i % static_cast<std::size_t>(ld);
  return m < static_cast<std::size_t>(rows) ? scale_inv[m * static_cast<std::size_t>(kb) + b] : 0.0f;
}

std::vector<float> scales_for_cublaslt_vec128(const Fp8Tensor& t);
std::vector<float> scales_for_cublaslt_blk128(const Fp8Tensor& t);

}  // namespace rlp::num
