// 16-lane vector arithmetic for the inspect block kernel (src/inspect/block_stats.cpp): the lane
// types, exact float -> double widening, and the e4m3 quantization of 16 elements in each scale
// convention. GCC/Clang vector extensions, lowered to AVX-512, AVX2 or SSE2 by the target: each lane
// does exactly the scalar operation, so results do not depend on -march. Internal to src/inspect.
// Not src/numerics/simd_lanes.hpp: the lane count is fixed at 16 on every target (lane j's partial
// sums are part of the output) and the kernel needs integer and double lanes with whole-vector
// compares and selects, none of which those float-only, target-width traits provide.
#pragma once
#include <bit>
#include <cstdint>
#include <cstring>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "rlparity/numerics/scaling.hpp"

// The vector helpers below are internal and always inlined: the ABI GCC warns about (passing wide
// vectors by value when the target lacks AVX / AVX-512) never applies to them.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace rlp::inspect_lanes {

using num::BlockScale;
using num::ScaleConvention;

constexpr int kLanes = 16;
constexpr float kSatThreshold = 448.0f;   // e4m3 max
constexpr float kClipThreshold = 464.0f;  // midpoint 448..480: beyond it RNE would leave the range

// Lane j of a block accumulates elements j, j+16, ... of the block's padded rows, in
// order: the sums are fixed by the data, not by the thread count or the instruction set.
using FloatLanes = float __attribute__((vector_size(64)));
using BitLanes = uint32_t __attribute__((vector_size(64)));
using IntLanes = int32_t __attribute__((vector_size(64)));
using DoubleLanes8 = double __attribute__((vector_size(64)));

#define RLP_LANES_INLINE inline __attribute__((always_inline))

RLP_LANES_INLINE FloatLanes load_lanes(const float* p) {
  FloatLanes v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
RLP_LANES_INLINE FloatLanes splat(float v) { return FloatLanes{} + v; }
// Same-size vector casts reinterpret the bits (GCC/Clang vector extension semantics).
RLP_LANES_INLINE BitLanes to_bits(FloatLanes v) { return (BitLanes)v; }
RLP_LANES_INLINE FloatLanes from_bits(BitLanes v) { return (FloatLanes)v; }
RLP_LANES_INLINE BitLanes to_unsigned(IntLanes v) { return (BitLanes)v; }

// 16 float64 lanes as two 8-lane halves (a 128-byte vector type would live in memory: its sums
// would go through a store and a load every iteration).
struct DoubleLanes16 {
  DoubleLanes8 lo = {}, hi = {};
  double operator[](int j) const { return j < 8 ? lo[j] : hi[j - 8]; }
};
// Exact float -> double widening of lanes 0-7 and 8-15. With AVX-512 one vcvtps2pd each (GCC
// splits the generic form into 128-bit pieces); the conversion is exact either way.
#if defined(__AVX512F__)
// (maskz with an all-ones mask: the unmasked intrinsic's undefined pass-through operand trips
// -Wmaybe-uninitialized in GCC's header.)
RLP_LANES_INLINE DoubleLanes8 widen_lo(FloatLanes v) {
  return (DoubleLanes8)_mm512_maskz_cvtps_pd((__mmask8)0xFF,
                                             (__m256)__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7));
}
RLP_LANES_INLINE DoubleLanes8 widen_hi(FloatLanes v) {
  return (DoubleLanes8)_mm512_maskz_cvtps_pd(
      (__mmask8)0xFF, (__m256)__builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15));
}
#else
RLP_LANES_INLINE DoubleLanes8 widen_lo(FloatLanes v) {
  return __builtin_convertvector(__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7), DoubleLanes8);
}
RLP_LANES_INLINE DoubleLanes8 widen_hi(FloatLanes v) {
  return __builtin_convertvector(__builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15), DoubleLanes8);
}
#endif

// e4m3 rounding of the lanes, as the float value the fp8 code decodes to (num::fp8_to_float of
// num::fp8_encode_fast_impl<3, 7, 0x7E, 0x7F>), with the sign of q. For |q| in the e4m3 range the
// FPU's own round-to-nearest-even does the rounding: adding c = 2^(e + 20), e = max(exponent of
// |q|, -6), puts |q| in c's binade, whose ulp 2^(e - 3) is the e4m3 step at |q| (2^-9, the
// subnormal unit, below 2^-6), and (|q| + c) - c is exact. That is the integer RNE on the float
// bits of the normal range and the magic-number add of the subnormal range in one formula (a
// rounding up to the next binade lands on its power of two). General false: the caller guarantees
// |q| <= 464 and not NaN (then the value never overflows: 464 is the tie between 448 and 480 and
// goes to 448). General true: |q| > 464 (inf included) gives 448 (Sat) or NaN with q's sign
// (code sign | 0x7F); a NaN q gives the canonical NaN (code 0x7F) when CheckNaN.
// The code itself is not needed by the block kernel: decode is one-to-one on codes, so two codes
// differ exactly when the values' bits differ (fp8_code_of recovers it for inspect_quantize).
template <bool General, bool Sat, bool CheckNaN>
RLP_LANES_INLINE BitLanes round_e4m3(FloatLanes q) {
  constexpr uint32_t kMinNormBits = 121u << 23;  // 2^-6, the smallest e4m3 normal
  const BitLanes u = to_bits(q);
  const BitLanes a = u & 0x7FFFFFFFu;
  BitLanes eb = a & 0x7F800000u;
  eb = eb > kMinNormBits ? eb : BitLanes{} + kMinNormBits;
  const FloatLanes c = from_bits(eb + (20u << 23));
  BitLanes mag = to_bits((from_bits(a) + c) - c);
  if constexpr (General) {
    const IntLanes over = a > 0x43E80000u;  // |q| > 464, inf and NaN included
    mag = over ? BitLanes{} + (Sat ? 0x43E00000u /* 448 */ : 0x7FC00000u) : mag;
  }
  BitLanes val = mag | (u & 0x80000000u);
  if constexpr (General && CheckNaN) {
    const IntLanes nan = a > 0x7F800000u;
    val = nan ? BitLanes{} + 0x7FC00000u : val;
  }
  return val;
}

// One convention's scaled value v (what saturation is judged on) and the e4m3 value's bits of 16
// elements; the dequantized value is from_bits(val) * scale_inv (one fp32 multiply, as
// num::dequantize). General false: the caller guarantees a finite scale and |v| <= 464 for every
// lane (then the clamps and the overflow and NaN handling are the identity and are left out).
template <ScaleConvention C, bool General = true>
RLP_LANES_INLINE void quantize_lanes(FloatLanes x, const BlockScale& s, FloatLanes& v, BitLanes& val) {
  constexpr float m = kSatThreshold;
  if constexpr (C == ScaleConvention::te) {
    v = x * s.scale;  // satfinite(x * scale)
    val = round_e4m3<General, true, true>(v);
  } else if constexpr (C == ScaleConvention::vllm) {
    v = x / s.scale_inv;  // fminf(fmaxf(x / y_s, -448), 448): NaN -> -448
    FloatLanes q = v;
    if constexpr (General) {
      q = v > -m ? v : splat(-m);
      q = q < m ? q : splat(m);
    }
    val = round_e4m3<General, false, false>(q);  // q is never NaN
  } else if constexpr (C == ScaleConvention::deepgemm) {
    v = x * s.scale;  // non-saturating cast
    val = round_e4m3<General, false, true>(v);
  } else {
    v = x * s.scale;  // torch.clamp(w * scale, -448, 448): NaN propagates
    FloatLanes q = v;
    if constexpr (General) {
      q = v > m ? splat(m) : v;
      q = q < -m ? splat(-m) : q;
    }
    val = round_e4m3<General, false, true>(q);
  }
}

// The fp8 e4m3 code whose decoded value has the bits `val` (the inverse of num::fp8_to_float on the
// values round_e4m3 returns).
inline uint8_t fp8_code_of(uint32_t val) {
  const uint32_t sign = (val >> 24) & 0x80u;
  const uint32_t a = val & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint8_t>(sign | 0x7Fu);
  if (a >= (121u << 23)) return static_cast<uint8_t>(sign | ((a >> 20) - (120u << 3)));
  return static_cast<uint8_t>(sign | static_cast<uint32_t>(std::bit_cast<float>(a) * 512.0f));  // k * 2^-9
}

}  // namespace rlp::inspect_lanes
