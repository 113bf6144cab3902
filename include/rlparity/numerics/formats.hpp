// Number formats of the engines we emulate: bf16, fp16, fp8 e4m3fn, fp8 e5m2 and ue8m0 scales.
// One definition for host and device (RLP_HD). Casts round to nearest even exactly as NVIDIA's
// host-side conversions in cuda_bf16.h / cuda_fp16.h / cuda_fp8.h do, including their NaN
// handling (a NaN input becomes the format's canonical NaN, sign dropped), which the tests check
// over every float bit pattern.
#pragma once
#include <cstdint>

#include "rlparity/numerics/host_device.hpp"

namespace rlp::num {

// ---- the one list of number formats ------------------------------------------------------------
// Every format a tensor is stored in or an op rounds to. A parameter that allows only some of them
// (the activation format, an fp8 operand, a GEMM's output) takes a *view*: an enum whose
// enumerators are these same values, so the compiler still checks each switch over the subset and
// format_of() converts any view back without a table.
enum class Format : uint8_t { fp32, bf16, fp16, e4m3, e5m2 };

// Views, named by the role that restricts the set.
enum class Half16 : uint8_t {  // activations and non-fp8 weights
  bf16 = static_cast<uint8_t>(Format::bf16),
  fp16 = static_cast<uint8_t>(Format::fp16),
};
enum class Fp8Kind : uint8_t {  // fp8 operands and caches
  e4m3 = static_cast<uint8_t>(Format::e4m3),
  e5m2 = static_cast<uint8_t>(Format::e5m2),
};
enum class OutRound : uint8_t {  // a GEMM epilogue's output (fp32: not rounded)
  fp32 = static_cast<uint8_t>(Format::fp32),
  bf16 = static_cast<uint8_t>(Format::bf16),
  fp16 = static_cast<uint8_t>(Format::fp16),
};

RLP_HD constexpr Format format_of(Format f) { return f; }
RLP_HD constexpr Format format_of(Half16 v) { return static_cast<Format>(v); }
RLP_HD constexpr Format format_of(Fp8Kind v) { return static_cast<Format>(v); }
RLP_HD constexpr Format format_of(OutRound v) { return static_cast<Format>(v); }
// The narrowing direction, for the one place a wider set meets a narrower one (the act format as a
// GEMM output format).
RLP_HD constexpr OutRound out_round_of(Half16 v) { return static_cast<OutRound>(v); }

// The format's name as the CLI, the knob table and the run files spell it.
RLP_HD constexpr const char* format_name(Format f) {
  switch (f) {
    case Format::fp32: return "fp32";
    case Format::bf16: return "bf16";
    case Format::fp16: return "fp16";
    case Format::e4m3: return "e4m3";
    case Format::e5m2: return "e5m2";
  }
  return "?";
}

enum class Saturation : uint8_t {
  none,       // overflow becomes inf (bf16, fp16, e5m2) or NaN (e4m3fn has no inf)
  satfinite,  // overflow and inf clamp to the largest finite value, keeping the sign
};

// A small IEEE-like binary format: 1 sign bit, E exponent bits, M mantissa bits.
struct SmallFormat {
  int exp_bits;
  int man_bits;
  int bias;
  uint32_t max_finite;  // magnitude code of the largest finite value
  uint32_t inf_code;    // magnitude code of inf, or of NaN where the format has no inf
  uint32_t nan_code;    // canonical NaN produced from a NaN input (full code, sign clear)
  bool has_inf;
};

// e4m3fn: max 448, no inf, NaN = S.1111.111. e5m2: max 57344, IEEE-style inf/NaN.
// (Functions rather than variables so device code can use them without a __constant__ copy.)
RLP_HD constexpr SmallFormat kE4M3() { return {4, 3, 7, 0x7Eu, 0x7Fu, 0x7Fu, false}; }
RLP_HD constexpr SmallFormat kE5M2() { return {5, 2, 15, 0x7Bu, 0x7Cu, 0x7Fu, true}; }
RLP_HD constexpr SmallFormat kFP16() { return {5, 10, 15, 0x7BFFu, 0x7C00u, 0x7FFFu, true}; }
RLP_HD constexpr SmallFormat kBF16() { return {8, 7, 127, 0x7F7Fu, 0x7F80u, 0x7FFFu, true}; }

inline constexpr float kE4M3Max = 448.0f;
inline constexpr float kE5M2Max = 57344.0f;

// float -> small format code, round to nearest even.
RLP_HD uint32_t encode_small(float x, const SmallFormat& f, Saturation sat) {
  const uint32_t u = f32_bits(x);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return f.nan_code;
  const uint32_t sbit = (u >> 31) << (f.exp_bits + f.man_bits);
  const uint32_t overflow = sat == Saturation::satfinite ? f.max_finite : f.inf_code;
  if (a == 0x7F800000u) return sbit | overflow;

  // x = m * 2^(e - 23), m with its implicit bit (float subnormals have none).
  int e;
  uint32_t m;
  if ((a >> 23) == 0) {
    e = -126;
    m = a;
  } else {
    e = static_cast<int>(a >> 23) - 127;
    m = (a & 0x7FFFFFu) | 0x800000u;
  }
  const int emin = 1 - f.bias;
  const int shift = 23 - f.man_bits + (e < emin ? emin - e : 0);
  uint32_t q;
  if (shift > 25) {
    q = 0;  // below half the smallest subnormal: m < 2^24 <= half
  } else {
    q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
  }
  // A carry out of the mantissa moves into the exponent field by itself.
  const uint32_t code =
      e >= emin ? (static_cast<uint32_t>(e + f.bias) << f.man_bits) + q - (1u << f.man_bits) : q;
  return sbit | (code > f.max_finite ? overflow : code);
}

// small format code -> float, exact (every value of these formats is a float).
RLP_HD float decode_small(uint32_t code, const SmallFormat& f) {
  const int nbits = f.exp_bits + f.man_bits;
  const uint32_t sign = (code >> nbits) & 1u;
  const uint32_t mag = code & ((1u << nbits) - 1u);
  const uint32_t ef = mag >> f.man_bits;
  const uint32_t man = mag & ((1u << f.man_bits) - 1u);
  const uint32_t emax_field = (1u << f.exp_bits) - 1u;
  uint32_t out;
  if (f.has_inf ? ef == emax_field : mag == f.inf_code) {
    // inf, or NaN (payload kept, quiet bit set, as a hardware widening conversion does)
    out = (f.has_inf && man == 0) ? 0x7F800000u : 0x7FC00000u | (man << (23 - f.man_bits));
  } else if (ef == 0) {
    // subnormal: man * 2^(1 - bias - M); the power of two is a normal float for all formats
    // but bf16, whose subnormals are float subnormals with the same bits.
    if (f.exp_bits == 8) {
      out = man << (23 - f.man_bits);
    } else {
      const float unit = bits_f32(static_cast<uint32_t>(127 + 1 - f.bias - f.man_bits) << 23);
      return (sign ? -1.0f : 1.0f) * (static_cast<float>(man) * unit);
    }
  } else {
    out = ((ef - static_cast<uint32_t>(f.bias) + 127u) << 23) | (man << (23 - f.man_bits));
  }
  return bits_f32((sign << 31) | out);
}

// ---- bf16: the activation/storage format of both engines -------------------------------------
RLP_HD uint16_t float_to_bf16_bits(float x) {
  const uint32_t u = f32_bits(x);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FFFu;  // canonical NaN, as __float2bfloat16
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
RLP_HD float bf16_bits_to_float(uint16_t b) { return bits_f32(static_cast<uint32_t>(b) << 16); }
// Round a float to the nearest bf16 value, kept in a float (exact).
RLP_HD float round_bf16(float x) { return bf16_bits_to_float(float_to_bf16_bits(x)); }

// ---- fp16 --------------------------------------------------------------------------------------
RLP_HD uint16_t float_to_fp16_bits(float x) {
  return static_cast<uint16_t>(encode_small(x, kFP16(), Saturation::none));
}
RLP_HD float fp16_bits_to_float(uint16_t h) { return decode_small(h, kFP16()); }
RLP_HD float round_fp16(float x) { return fp16_bits_to_float(float_to_fp16_bits(x)); }

// ---- the two 16-bit formats as one parameter (activations and non-fp8 weights) ---------------
RLP_HD uint16_t float_to_half16_bits(float x, Half16 f) {
  return f == Half16::bf16 ? float_to_bf16_bits(x) : float_to_fp16_bits(x);
}
RLP_HD float half16_bits_to_float(uint16_t h, Half16 f) {
  return f == Half16::bf16 ? bf16_bits_to_float(h) : fp16_bits_to_float(h);
}
RLP_HD float round_half16(float x, Half16 f) { return f == Half16::bf16 ? round_bf16(x) : round_fp16(x); }

// ---- fp8 ---------------------------------------------------------------------------------------

RLP_HD constexpr SmallFormat fp8_format(Fp8Kind k) { return k == Fp8Kind::e4m3 ? kE4M3() : kE5M2(); }

RLP_HD uint8_t float_to_fp8(float x, Fp8Kind k, Saturation sat) {
  return static_cast<uint8_t>(encode_small(x, fp8_format(k), sat));
}
// fp8 -> fp16 bits, as __nv_cvt_fp8_to_halfraw (exact; NaN -> canonical fp16 NaN 0x7FFF).
RLP_HD uint16_t fp8_to_fp16_bits(uint8_t c, Fp8Kind k) {
  const float v = decode_small(c, fp8_format(k));
  if (v != v) return 0x7FFFu;
  return float_to_fp16_bits(v);
}
RLP_HD float fp8_to_float(uint8_t c, Fp8Kind k) { return decode_small(c, fp8_format(k)); }

// satfinite e4m3 of x, returned as its (exact) float value: the quantize step of every recipe.
RLP_HD float round_e4m3_sat(float x) {
  return fp8_to_float(float_to_fp8(x, Fp8Kind::e4m3, Saturation::satfinite), Fp8Kind::e4m3);
}

// x rounded to format f and kept in a float (exact); fp8 saturates, as the engines' quantizing
// casts do (__NV_SATFINITE).
RLP_HD float round_to(float x, Format f) {
  switch (f) {
    case Format::fp32: return x;
    case Format::bf16: return round_bf16(x);
    case Format::fp16: return round_fp16(x);
    case Format::e4m3: return round_e4m3_sat(x);
    case Format::e5m2:
      return fp8_to_float(float_to_fp8(x, Fp8Kind::e5m2, Saturation::satfinite), Fp8Kind::e5m2);
  }
  return x;
}

// ---- ue8m0: power-of-two scales (2^(c - 127), c = 255 is NaN) ----------------------------------
enum class Pow2Rounding : uint8_t { down, up };

// Positive scale -> ue8m0 code. `up` rounds to the next power of two unless x is one already
// (DeepGEMM's ceil_to_ue8m0, vLLM's ue8m0 scales); `down` truncates the mantissa (TE's
// power-of-2 scale). Zero and values below 2^-127 give code 0; NaN gives 255; above 2^127 gives
// 255 unless saturating (254).
RLP_HD uint8_t float_to_ue8m0(float x, Pow2Rounding r, Saturation sat) {
  const uint32_t u = f32_bits(x) & 0x7FFFFFFFu;
  if (u > 0x7F800000u) return 0xFFu;
  if (u == 0x7F800000u) return sat == Saturation::satfinite ? 0xFEu : 0xFFu;
  int e;
  bool exact;
  if ((u >> 23) == 0) {
    if (u == 0) return 0;
    // float subnormal: highest set bit gives the exponent
    int hb = 22;
    while (((u >> hb) & 1u) == 0) --hb;
    e = hb - 149;
    exact = (u & ((1u << hb) - 1u)) == 0;
  } else {
    e = static_cast<int>(u >> 23) - 127;
    exact = (u & 0x7FFFFFu) == 0;
  }
  if (r == Pow2Rounding::up && !exact) ++e;
  if (e < -127) return 0;
  if (e > 127) return sat == Saturation::satfinite ? 0xFEu : 0xFFu;
  return static_cast<uint8_t>(e + 127);
}

RLP_HD float ue8m0_to_float(uint8_t c) {
  if (c == 0xFFu) return bits_f32(0x7FC00000u);
  if (c == 0) return bits_f32(0x00400000u);  // 2^-127, a float subnormal
  return bits_f32(static_cast<uint32_t>(c) << 23);
}

// dst[i] = bf16_bits_to_float / fp16_bits_to_float of src[i] (vectorized; same bits, NaNs included;
// src/numerics/widen_half16.cpp). Host only.
void widen_half16(const uint16_t* src, int n, Half16 fmt, float* dst);

}  // namespace rlp::num
