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
#include <cstddef>
#include <cstdint>
#include <functional>

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

// The exponents of a bf16 operand's values, what decides whether the bf16 dot-product kernel gives
// the fma chains' bits (see gemm_f32acc below): every value +-0 or a normal finite number
// (`normal`), and the range of the unbiased exponents floor(log2|v|) over the nonzero ones
// (emin > emax when every value is zero).
struct Bf16Span {
  bool normal = true;
  int emin = 1000, emax = -1000;
};
Bf16Span bf16_span(const uint16_t* bits, std::size_t n);
// The same of floats that must all hold bf16 values (low 16 bits zero; else not `normal`).
Bf16Span bf16_span(const float* v, std::size_t n);
// The span of both operands' values together.
inline Bf16Span span_union(const Bf16Span& a, const Bf16Span& b) {
  return {a.normal && b.normal, a.emin < b.emin ? a.emin : b.emin, a.emax > b.emax ? a.emax : b.emax};
}

void gemm_f32acc(const float* X, const float* W, float* Y, int M, int N, int K, const GemmConfig& cfg);

// The same GEMM, same order and bits, with W held as 16-bit bf16/fp16 bit patterns (half the
// memory traffic of floats: decode steps are bound by streaming the weights). The kernels widen
// each K slice of W exactly (widen_half16) just before its fma chains read it.
//
// With bf16 weights, bf16 values in X and AVX-512 BF16, the packed kernel (M > 16) runs the chains
// as vdpbf16ps steps instead: per fp32 lane c += a[2i+1] * b[2i+1], then c += a[2i] * b[2i], each
// a fused multiply-add rounded to nearest even with denormal inputs and outputs flushed to zero
// (Intel SDM, VDPBF16PS; checked on this CPU at startup, bf16_dot_kernel_available). Packing k into
// the odd slot and k + 1 into the even one makes that the chain's own two steps. They can differ from
// fma only through a denormal input, product or partial sum, or an overflow, so the kernel is used
// only when the spans rule those out (bf16_dot_exact): no denormal, Inf or NaN in X or W, products
// of at least 2^-112 (all partial sums are then multiples of 2^-126: zero or normal), and
// K * 2^(emax_x + emax_w + 2) <= 2^127. Otherwise the fma kernel runs. `w_span` is W's span when the
// caller knows it (a prepared weight scans itself once); null scans W.
void gemm_f32acc(const float* X, const uint16_t* W, Half16 wfmt, float* Y, int M, int N, int K,
                 const GemmConfig& cfg, const Bf16Span* w_span = nullptr);
// Whether this build and CPU run the bf16 dot-product kernel with the fma chains' bits.
bool bf16_dot_kernel_available();
// Whether operands with these spans give the fma chains' bits in it, for a K-long chain.
bool bf16_dot_exact(const Bf16Span& x, const Bf16Span& w, int K);

void gemm_fp8_blockscaled(const Fp8Tensor& X, const Fp8Tensor& W, float* Y, const GemmConfig& cfg);

// Per-token x per-channel scaled fp8 GEMM: vLLM's Fp8LinearOp for per-channel fp8 weights on sm90
// (cutlass_scaled_mm; csrc/quantization/w8a8/cutlass/c3x/scaled_mm_sm90_fp8_dispatch.cuh). X holds
// one scale per row, W one per output channel (both 1 x K blocks). Every config vLLM dispatches there
// is an FP8FastAccum kernel under a persistent scheduler: no split-K and no promotion, the whole K
// runs in one accumulator:
//   acc = the fp32 chain acc = fma(x[k], w[k], acc), k increasing from +0 (SliceAccum::fp32; the
//         products of fp8 values are exact), or the Hopper wgmma model's k = 32 steps with C carried
//         across all of K (SliceAccum::hopper);
// then the ScaledEpilogue (csrc/cutlass_extensions/epilogue/scaled_mm_epilogues_c3x.hpp):
//   t = fl(inner * acc);  y = fl(outer * t), or fma(outer, t, bias[n]) with a bias (multiply_add);
//   inner = W's channel scale, outer = X's token scale; swap_ab (vLLM swaps A and B for M <= 64,
//   passing the scales swapped) exchanges the two.
// y is rounded per `out`. GemmConfig's split_k, k_chunk and promotion have no counterpart here.
void gemm_fp8_rowscaled(const Fp8Tensor& X, const Fp8Tensor& W, float* Y, SliceAccum accum, bool swap_ab,
                        const float* bias, OutRound out);
// gemm_f32acc's contract and bits with W held as fp8 codes, decoded exactly as its slices are read.
void gemm_f32acc(const float* X, const uint8_t* W, Fp8Kind wkind, float* Y, int M, int N, int K,
                 const GemmConfig& cfg);

// The float64 oracle: y = sum over k in increasing order of x*w, no fma, only double rounding.
void gemm_f64(const double* X, const double* W, double* Y, int M, int N, int K);
// The same GEMM, same bits, with W's rows supplied by w_row(n, out): row n's K values as doubles
// (exact). The oracle widens each row from the mapped checkpoint as it packs it, so it never holds
// 8 bytes per parameter. w_row may be called from several threads at once, each row once.
void gemm_f64(const double* X, const std::function<void(int n, double* out)>& w_row, double* Y, int M, int N,
              int K);

// ---- Hopper FP8 wgmma accumulation model -------------------------------------------------------
// Hopper's FP8 wgmma (wgmma.mma_async.m64nNk32.f32.{e4m3,e5m2}.{e4m3,e5m2}) bit for bit as
// microsoft/MMA-Sim simulates it (its authors tested the simulator bitwise against the hardware);
// read at commit c785138 (2026-01-29):
//   mmasim/simulator/nv_ptx.py  class wgmma (l. 147-183): FP8 operands get n_accum_fractional_bits
//       = 13 and output_type "f32_e8m13" (l. 153-159); one nv_fused_dot_add over the whole k = 32
//       row/column with C = the fp32 accumulator (l. 173-182). mmasim/isa/nv_ptx/nv_wgmma.py: k = 32
//       exactly for e4m3/e5m2 (either type for A and for B).
//   mmasim/simulator/arithmetic.py (before that commit mmasim/simulator/functions.py):
//       extract_significand_exponent (l. 76-95), fused_sum (l. 115-129), fused_dot_add
//       (l. 132-156), nv_fused_dot_add (l. 159-193), dtype_min_exponent (l. 54-64).
// One step takes up to 32 fp8 operand pairs and the fp32 C and:
//   0. if the float64 sum of the exact products and C is NaN (a NaN operand or C, inf * 0,
//      inf - inf) it returns the NaN 0x7FFFFFFF; if it is +-inf, +-inf (fused_dot_add l. 140-144,
//      nv_fused_dot_add l. 172-180);
//   1. every operand gets an exponent as its own format defines it (extract_significand_exponent):
//      floor(log2|x|) for normal values, the format's minimum exponent for subnormals (e4m3 -6,
//      e5m2 -14; fp32 C -126), and -126 for zero (any format; functions.py had -999 until its
//      rename on 2026-01-22, which differs only where every product is zero and C < 2^-111). A product a*b
//      has exponent e_a + e_b (its significand s_a * s_b lies in [0, 4): it is not renormalized), C its own;
//   2. emax = the largest of these exponents over ALL terms (zero ones and C included), and each
//      term is truncated toward zero (sign-magnitude) to an integer multiple of 2^(emax - 13)
//      (fused_sum: trunc(s * 2^(13 + e - emax)) * 2^-13);
//   3. the truncated terms are summed exactly (here in int64 units of 2^(emax - 13));
//   4. the sum is converted to "f32_e8m13": exponent as an fp32 value (clamped to -126 below the
//      normal range), significand truncated toward zero to 13 fraction bits; a zero sum gives +0;
//      a value >= 2^128 becomes +-inf (the float64 -> float32 conversion of nv_fused_dot_add l. 193).
// A 128-slice is four such steps chained, C = 0 at the start of the slice. a[i], b[i] must hold
// values of the fp8 formats ka, kb (as floats, e.g. from fp8_to_float), n <= 32.
// The emulator's first reading of MMA-Sim (each product aligned on its own exponent
// floor(log2|a*b|)) was wrong; the H200 fit of docs/cuda-backend.md (products aligned on e_a + e_b)
// agrees with MMA-Sim, but its data never had a subnormal operand set the alignment.
RLP_HD int hopper_operand_exponent(float x, Fp8Kind k) {
  const uint32_t ab = f32_bits(x) & 0x7FFFFFFFu;
  if (ab == 0) return -126;
  const int e = static_cast<int>(ab >> 23) - 127;  // every e4m3/e5m2 value is a normal float
  const int emin = 1 - fp8_format(k).bias;         // the format's subnormals sit at its emin
  return e < emin ? emin : e;
}

RLP_HD int hopper_c_exponent(float c) {  // fp32: zero and subnormals -> -126
  const int f = static_cast<int>((f32_bits(c) >> 23) & 0xFFu);
  return f == 0 ? -126 : f - 127;
}

// A finite float t truncated toward zero to an integer multiple of 2^(emax - 13), in those units.
RLP_HD int64_t hopper_align(float t, int emax) {
  const uint32_t u = f32_bits(t), ab = u & 0x7FFFFFFFu;
  if (ab == 0) return 0;
  // |t| = m * 2^(e - 23), m the 24-bit significand (float subnormals: e = -126, no implicit bit);
  // in units of 2^(emax - 13): m * 2^(e - 23 - emax + 13) = m >> (emax - e + 10).
  const int e = (ab >> 23) != 0 ? static_cast<int>(ab >> 23) - 127 : -126;
  const uint64_t m = (ab >> 23) != 0 ? ((ab & 0x7FFFFFu) | 0x800000u) : ab;
  const int shift = emax - e + 10;  // >= 9: every term is below 2^(emax + 2)
  const uint64_t q = shift >= 64 ? 0u : (shift >= 0 ? (m >> shift) : (m << (-shift)));
  return (u >> 31) ? -static_cast<int64_t>(q) : static_cast<int64_t>(q);
}

// sum * 2^(emax - 13) as "f32_e8m13" (step 4 above); emax >= -126.
RLP_HD float hopper_to_f32_e8m13(int64_t sum, int emax) {
  if (sum == 0) return 0.0f;
  const bool neg = sum < 0;
  uint64_t mag = neg ? static_cast<uint64_t>(-sum) : static_cast<uint64_t>(sum);
  int len = 0;
  while ((mag >> len) != 0) ++len;
  const int E = emax - 14 + len;                    // the value's exponent, floor(log2)
  const int keep_lsb = (E < -126 ? -126 : E) - 13;  // 13 fraction bits below the (clamped) exponent
  const int drop = keep_lsb - (emax - 13);
  if (drop > 0) mag = (mag >> drop) << drop;  // toward zero
  const uint32_t sign = neg ? 0x80000000u : 0u;
  if (E > 127) return bits_f32(sign | 0x7F800000u);  // >= 2^128: the float conversion overflows
  uint32_t bits;
  if (E >= -126) {
    const uint64_t m24 = len <= 24 ? (mag << (24 - len)) : (mag >> (len - 24));
    bits = (static_cast<uint32_t>(E + 127) << 23) | (static_cast<uint32_t>(m24) & 0x7FFFFFu);
  } else {  // subnormal: in units of 2^-149 (emax >= -126, so the shift is >= 10)
    bits = static_cast<uint32_t>(mag << (emax - 13 + 149));
  }
  return bits_f32(sign | bits);
}

// 1 for NaN, 2 for +inf, 4 for -inf, 0 for finite values.
RLP_HD unsigned hopper_special(float v) {
  const uint32_t u = f32_bits(v);
  return (u & 0x7FFFFFFFu) > 0x7F800000u ? 1u : (u == 0x7F800000u ? 2u : (u == 0xFF800000u ? 4u : 0u));
}

RLP_HD float hopper_step(const float* a, const float* b, int n, float c, Fp8Kind ka, Fp8Kind kb) {
  float t[32];
  unsigned special = hopper_special(c);
  int emax = hopper_c_exponent(c);
  for (int i = 0; i < n; ++i) {
    t[i] = a[i] * b[i];  // exact for fp8 operands; inf * 0 -> NaN
    special |= hopper_special(t[i]);
    const int e = hopper_operand_exponent(a[i], ka) + hopper_operand_exponent(b[i], kb);
    emax = e > emax ? e : emax;
  }
  if ((special & 1u) != 0 || special == 6u) return bits_f32(0x7FFFFFFFu);  // NaN, or inf - inf
  if (special != 0) return bits_f32(special == 2u ? 0x7F800000u : 0xFF800000u);
  int64_t sum = hopper_align(c, emax);
  for (int i = 0; i < n; ++i) sum += hopper_align(t[i], emax);
  return hopper_to_f32_e8m13(sum, emax);
}

// Accumulates one slice of n (<= 128) products into C, in k = 32 steps.
RLP_HD float hopper_slice_accumulate(const float* a, const float* b, int n, float c, Fp8Kind ka, Fp8Kind kb) {
  for (int k0 = 0; k0 < n; k0 += 32)
    c = hopper_step(a + k0, b + k0, (n - k0) < 32 ? (n - k0) : 32, c, ka, kb);
  return c;
}

}  // namespace rlp::num
