// inspect's per-tensor kernel: the FP8 block quantization statistics of one matrix in each scale
// convention (te, vllm, deepgemm, nemo-refit) with fp32 and power-of-2 scales, in one pass over its
// 128x128 blocks (src/inspect/block_stats.cpp). Every number is defined in docs/inspect.md.
//
// The weights are read from the checkpoint mapping once: each 128x128 block is converted to fp32
// in a per-thread buffer, its amax and Σx² taken once, and every convention x scale mode runs on it
// while it is in cache (conventions whose scale makes them quantize the block identically, compared
// bit for bit per block, share one run). Parallel over block rows; results do not depend on the
// thread count, and are bit-identical to one pass per convention (docs/inspect.md).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "rlparity/model/checkpoint.hpp"
#include "rlparity/numerics/scaling.hpp"

namespace rlp {

// One convention x scale mode over one tensor.
struct QuantStats {
  num::ScaleConvention convention = num::ScaleConvention::te;
  bool pow2 = false;
  double sum_sq_x = 0.0;      // sum of x^2 (float64, block-row order)
  double sum_sq_err = 0.0;    // sum of (x - dequant(x))^2, the difference taken in float64
  double snr_db = 0.0;        // 10 log10(sum_sq_x / sum_sq_err); +inf when the error is 0
  double rel_fro_err = 0.0;   // sqrt(sum_sq_err / sum_sq_x); 0 when both are 0
  int64_t saturated = 0;      // |v| > 448, v = the scaled value before clamp/cast (see below)
  int64_t clipped = 0;        // |v| > 464: the clamp lost more than rounding would (v rounds past 448)
  int64_t flushed = 0;        // x != 0 but the fp8 code is +-0
  int64_t nonfinite = 0;      // x is NaN or inf (excluded from the sums and counts above)
  int64_t blocks_differ = 0;  // blocks whose codes differ from te's with the same scale mode
  double blocks_differ_frac = 0.0;
};
// v is computed exactly as the convention's kernel computes it: fl(x * scale) for te, deepgemm and
// nemo-refit, fl(x / scale_inv) for vllm.

// Statistics of one row-major matrix whose elements are `dtype` at `data` (little-endian), for the
// given conventions in order; pow2 false and true each. When `conventions` starts with te, the
// others' blocks_differ are counted against it (otherwise blocks_differ stays 0). Also returns the
// block amax distribution through the out-parameters when non-null.
std::vector<QuantStats> inspect_matrix(const uint8_t* data, DType dtype, int64_t rows, int64_t cols,
                                       int block, const std::vector<num::ScaleConvention>& conventions,
                                       double* amax_min = nullptr, double* amax_median = nullptr,
                                       double* amax_max = nullptr);
// The per-element step of inspect_matrix's vectorized kernel, exposed for tests: the fp8 e4m3 codes
// of x[0..n) (n a multiple of 16) in convention c with block scale s, and the dequantized values
// decode(code) * s.scale_inv. Bit-identical to num::quantize_with and num::fp8_to_float. Each group
// of 16 goes through the kernel's fast-path formula when it qualifies (finite x and scale, every
// |v| <= 464), through the general one otherwise, so both are checked.
void inspect_quantize(const float* x, std::size_t n, num::ScaleConvention c, const num::BlockScale& s,
                      uint8_t* codes, float* deq);
// Convenience for fp32 data.
std::vector<QuantStats> inspect_matrix(const float* x, int64_t rows, int64_t cols, int block,
                                       const std::vector<num::ScaleConvention>& conventions);

}  // namespace rlp
