// GEMM emulation with a stated accumulation order, TN layout: Y[M,N] = X[M,K] * W[N,K]^T, both
// row-major with K contiguous (how HF stores Linear weights). Every Y element is computed by one
// task in the order documented below, so results are bit-identical for any thread count.
//
// gemm_f32acc order (operands already hold bf16/fp16 values stored in float):
//   1. K is split into split_k contiguous ranges (split_k capped at K), sizes as even as
//      possible, the first (K % split_k) ranges one element longer.
//   2. Within a range, with k_chunk > 0, the range is cut into chunks of k_chunk elements (the
//      last may be shorter); each chunk is accumulated from +0 by a sequential fused chain
//      c = fma(x[k], w[k], c) in increasing k; the range partial is the first chunk's c, and every
//      later chunk is added to it with one fp32 add. k_chunk == 0 means one chunk = the range.
//   3. The range partials are summed in order: y = partial_0, then y = y + partial_r, r = 1..S-1.
//   4. y is rounded per `out` (RNE to bf16/fp16, kept in a float) or kept fp32.
//
// gemm_fp8_blockscaled order: X is quantized in 1 x B blocks (B = X.block_cols, normally 128),
// W in b x B blocks (normally 128 x 128) with the same B. K is cut into slices of B (last slice
// may be shorter). Per slice: p = sum of exact products (fp32 sequential fma from +0, or the
// `hopper` model below), then promotion with sa = X's scale_inv for (m, slice), sb = W's for
// (n, slice):
//   cublaslt  y = fma(fl(p * sa), sb, y)       (TransformerEngine's exact cuBLASLt reference:
//                                               partial times the 1D scale, fused with the 2D one)
//   deepgemm  s = fl(sa * sb); y = fma(s, p, y)
// y starts at +0 in each split range; split_k splits the SLICES into ranges (as even as possible,
// first ranges larger) whose y's are summed in order as in step 3; then rounded per `out`.
// k_chunk is ignored by the fp8 path (its chunk is the slice).
#pragma once
#include <cstdint>

#include "rlparity/numerics/formats.hpp"
#include "rlparity/numerics/host_device.hpp"
#include "rlparity/numerics/quantize.hpp"

namespace rlp::num {

enum class SliceAccum : uint8_t { fp32, hopper };  // inside an fp8 128-K slice
enum class Promotion : uint8_t { cublaslt, deepgemm };

struct GemmConfig {
  int split_k = 1;
  int k_chunk = 0;
  OutRound out = OutRound::bf16;
  SliceAccum slice_accum = SliceAccum::fp32;
  Promotion promotion = Promotion::cublaslt;
};

// First index of part r when n items are split into `parts` contiguous ranges as evenly as
// possible, the first n % parts ranges one longer (split-K ranges, fp8 slice ranges).
RLP_HD int split_begin(int n, int parts, int r) {
  const int base = n / parts, extra = n % parts;
  return r * base + (r < extra ? r : extra);
}

RLP_HD float round_out(float y, OutRound r) {
  return r == OutRound::bf16 ? round_bf16(y) : (r == OutRound::fp16 ? round_fp16(y) : y);
}

void gemm_f32acc(const float* X, const float* W, float* Y, int M, int N, int K, const GemmConfig& cfg);

// The same GEMM, same order and bits, with W held as 16-bit bf16/fp16 bit patterns (half the
// memory traffic of floats: decode steps are bound by streaming the weights). The kernels widen
// each K slice of W exactly (widen_half16) just before its fma chains read it.
void gemm_f32acc(const float* X, const uint16_t* W, Half16 wfmt, float* Y, int M, int N, int K,
                 const GemmConfig& cfg);
// dst[i] = bf16_bits_to_float / fp16_bits_to_float of src[i] (vectorized; same bits, NaNs included).
void widen_half16(const uint16_t* src, int n, Half16 fmt, float* dst);

void gemm_fp8_blockscaled(const Fp8Tensor& X, const Fp8Tensor& W, float* Y, const GemmConfig& cfg);

// The float64 oracle: y = sum over k in increasing order of x*w, no fma, only double rounding.
void gemm_f64(const double* X, const double* W, double* Y, int M, int N, int K);

// ---- Hopper FP8 wgmma accumulation model -------------------------------------------------------
// Hopper's FP8 wgmma (k = 32 per instruction) as cuBLASLt's block-scaled GEMM computes it on an
// H200, fitted bit for bit to the hardware (docs/cuda-backend.md: 32768 of 32768 fp32 outputs of an
// M=64 N=512 K=1024 GEMM); microsoft/MMA-Sim's description (DESIGN section 2) with one correction in
// step 1. One step takes the (up to) 32 exact products and the C input, and:
//   1. emax = the largest alignment exponent over the non-zero terms: for a product a*b the sum of
//      its operands' exponents floor(log2|a|) + floor(log2|b|) (the product itself may be up to
//      4 x 2^emax: its mantissa product is not renormalized before alignment), for C its own;
//   2. each term is aligned to emax and truncated toward zero to 13 fractional bits below emax's
//      leading bit, i.e. to an integer multiple of 2^(emax - 13) (sign-magnitude truncation);
//   3. the integers are summed exactly (int64);
//   4. the sum is normalized and truncated toward zero to a 14-bit significand (1 leading bit + 13
//      fraction bits), and that value (exact in fp32) is the new C.
// A 128-slice is four such steps chained, C = 0 at the start of the slice. If any term is inf or
// NaN the step returns the IEEE fp32 sum instead (NaN/inf propagate). All-zero terms return C.
// The products a[i]*b[i] must be exact in fp32, which holds for e4m3/e5m2 operand values.
RLP_HD int hopper_exponent(uint32_t abs_bits) {  // floor(log2 |t|) of a non-zero finite float
  if ((abs_bits >> 23) != 0) return static_cast<int>(abs_bits >> 23) - 127;
  int hb = 22;
  while (((abs_bits >> hb) & 1u) == 0) --hb;
  return hb - 149;
}

RLP_HD float hopper_step(const float* a, const float* b, int n, float c) {
  float terms[33];
  int nt = 0;
  for (int i = 0; i < n; ++i) terms[nt++] = a[i] * b[i];
  terms[nt++] = c;
  bool special = false;
  int emax = -1000;
  for (int i = 0; i < nt; ++i) {
    const uint32_t ab = f32_bits(terms[i]) & 0x7FFFFFFFu;
    if (ab >= 0x7F800000u)
      special = true;
    else if (ab != 0) {
      // A product aligns on the sum of its operands' exponents (its mantissa product, in [1, 4),
      // is not renormalized first); C on its own exponent.
      const int e = i < n ? hopper_exponent(f32_bits(a[i]) & 0x7FFFFFFFu) +
                                hopper_exponent(f32_bits(b[i]) & 0x7FFFFFFFu)
                          : hopper_exponent(ab);
      emax = e > emax ? e : emax;
    }
  }
  if (special) {
    float s = c;
    for (int i = 0; i < n; ++i) s = s + terms[i];
    return s;
  }
  if (emax == -1000) return c;
  int64_t sum = 0;
  for (int i = 0; i < nt; ++i) {
    const uint32_t u = f32_bits(terms[i]);
    const uint32_t ab = u & 0x7FFFFFFFu;
    if (ab == 0) continue;
    // |t| = m * 2^(e - 23) with m the 24-bit significand (float subnormals: e = -126, no
    // implicit bit). In units of 2^(emax - 13): m * 2^(e - 23 - emax + 13) = m >> (emax - e + 10).
    const int e = (ab >> 23) != 0 ? static_cast<int>(ab >> 23) - 127 : -126;
    const uint64_t m = (ab >> 23) != 0 ? ((ab & 0x7FFFFFu) | 0x800000u) : ab;
    const int shift = emax - e + 10;
    const uint64_t q = shift >= 0 ? (shift >= 64 ? 0u : (m >> shift)) : (m << (-shift));
    sum += (u >> 31) ? -static_cast<int64_t>(q) : static_cast<int64_t>(q);
  }
  if (sum == 0) return 0.0f;
  const bool neg = sum < 0;
  uint64_t mag = neg ? static_cast<uint64_t>(-sum) : static_cast<uint64_t>(sum);
  int len = 0;
  while ((mag >> len) != 0) ++len;
  if (len > 14) mag = (mag >> (len - 14)) << (len - 14);  // keep 14 significant bits, toward zero
  // mag < 2^20 is exact in double; the power of two is exact; the value has <= 14 significant
  // bits so the float conversion is exact unless it leaves the float range.
  double v = static_cast<double>(mag);
  int sc = emax - 13;
  while (sc > 0) {
    v *= 2.0;
    --sc;
  }
  while (sc < 0) {
    v *= 0.5;
    ++sc;
  }
  const float r = static_cast<float>(v);
  return neg ? -r : r;
}

// Accumulates one slice of n (<= 128) products into C, in k = 32 steps.
RLP_HD float hopper_slice_accumulate(const float* a, const float* b, int n, float c) {
  for (int k0 = 0; k0 < n; k0 += 32) c = hopper_step(a + k0, b + k0, (n - k0) < 32 ? (n - k0) : 32, c);
  return c;
}

}  // namespace rlp::num
