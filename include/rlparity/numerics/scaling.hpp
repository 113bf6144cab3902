// Per-block FP8 scaling: block amax -> fp32 scale -> fp8 code, in each engine's literal convention.
// One definition for host and device (RLP_HD): the CPU emulator and the CUDA quantize kernel call
// exactly this code. Where an engine makes a rounding choice, the comment at that line says which
// engine, where in its source, and why the choice matters for bits.
//
// Conventions (DESIGN.md section 2; names are the engines'):
//   te         TransformerEngine blockwise (Float8BlockScaling): recipe/recipe_common.cuh
//              compute_scale_from_amax; quantize kernels multiply by `scale` and cast satfinite.
//   vllm       vLLM per_token_group_quant_8bit (csrc/.../fp8/per_token_group_quant.cu): the
//              generation-side activation quantizer; divides by y_s = amax / 448, clamps, casts.
//   deepgemm   DeepGEMM / DeepSeek reference (tests: per_token_cast_to_fp8, per_block_cast_to_fp8):
//              sf = max(amax, 1e-4) / 448, x * (1 / sf), torch cast (non-saturating).
//   nemo_refit NeMo RL weight refit (cast_tensor_to_fp8_blockwise): what vLLM receives for weights;
//              scale = 448 / amax, clamp(w * scale), torch cast; edge blocks padded with the LAST
//              element's value (handled by quantize_blocks, see quantize.hpp).
#pragma once
#include <cstdint>

#include "rlparity/numerics/formats.hpp"
#include "rlparity/numerics/host_device.hpp"

namespace rlp::num {

enum class ScaleConvention : uint8_t { te, vllm, deepgemm, nemo_refit };

struct ScaleOptions {
  ScaleConvention convention = ScaleConvention::te;
  bool pow2 = false;  // power-of-two scales: te rounds the scale down, the others round scale_inv up
  float eps = -1.0f;  // amax floor; < 0 selects the convention's default (te 0, vllm 1e-10,
                      // deepgemm 1e-4, nemo_refit 0 = none)
  Fp8Kind kind = Fp8Kind::e4m3;
};

// What one block's amax turns into. `scale_inv` is what dequantization multiplies by (and what
// cuBLASLt / the GEMM receive). `divide`: vllm quantizes as x / scale_inv, the others as x * scale.
struct BlockScale {
  float scale;
  float scale_inv;
  bool divide;
};

// ---- small helpers (host/device) ---------------------------------------------------------------
RLP_HD constexpr float fp8_max_value(Fp8Kind k) { return k == Fp8Kind::e4m3 ? kE4M3Max : kE5M2Max; }

RLP_HD float default_eps(ScaleConvention c) {
  switch (c) {
    case ScaleConvention::vllm: return 1e-10f;
    case ScaleConvention::deepgemm: return 1e-4f;
    case ScaleConvention::te:
    case ScaleConvention::nemo_refit: break;
  }
  return 0.0f;
}

RLP_HD bool is_nan_f(float x) { return (f32_bits(x) & 0x7FFFFFFFu) > 0x7F800000u; }
RLP_HD bool is_inf_f(float x) { return (f32_bits(x) & 0x7FFFFFFFu) == 0x7F800000u; }
RLP_HD float pow2_f(int e) {  // 2^e for -149 <= e <= 127, exact
  return e >= -126 ? bits_f32(static_cast<uint32_t>(e + 127) << 23)
                   : bits_f32(1u << static_cast<uint32_t>(e + 149));
}
// fmaxf/fminf semantics (a NaN operand loses), the same on host and device.
RLP_HD float fmax_nan_loses(float a, float b) {
  return is_nan_f(a) ? b : (is_nan_f(b) ? a : (a > b ? a : b));
}
RLP_HD float fmin_nan_loses(float a, float b) {
  return is_nan_f(a) ? b : (is_nan_f(b) ? a : (a < b ? a : b));
}

// Block amax as each engine reduces it. The caller reduces |x| with `a > m ? a : m` (NaN never
// wins, like CUDA's fmaxf in the TE and vLLM kernels) and records whether it saw a NaN; the
// torch-based conventions (deepgemm, nemo_refit) use torch.amax, which propagates NaN.
RLP_HD float finish_amax(float amax_nan_ignored, bool saw_nan, ScaleConvention c) {
  const bool torch_amax = c == ScaleConvention::deepgemm || c == ScaleConvention::nemo_refit;
  return (torch_amax && saw_nan) ? bits_f32(0x7FC00000u) : amax_nan_ignored;
}

// The amax of one quantization block from its elements' reduction: amax_bits, the largest |x| of
// the block's non-NaN elements as float bits (for non-NaN values the unsigned order of |x|'s bits
// is the float order, so any reduction order gives it), and saw_nan. NeMo RL's refit pads the
// weight with its last element data_hp[-1, -1] before blocking, so in nemo_refit that element
// (`last`) joins the amax of every partial edge block; the other conventions ignore the padding
// (TE masks partial blocks, DeepGEMM pads with zeros). Shared by the host quantizer, the CUDA
// kernel and inspect.
RLP_HD float block_amax(uint32_t amax_bits, bool saw_nan, bool partial_block, float last, ScaleConvention c) {
  if (c == ScaleConvention::nemo_refit && partial_block) {
    const uint32_t a = f32_bits(last) & 0x7FFFFFFFu;
    if (a > 0x7F800000u)
      saw_nan = true;
    else
      amax_bits = a > amax_bits ? a : amax_bits;
  }
  return finish_amax(bits_f32(amax_bits), saw_nan, c);
}

// ---- branch-free fp8 encoder -------------------------------------------------------------------
// Bit-identical to float_to_fp8 (formats.hpp) and to NVIDIA's __nv_cvt_float_to_fp8 for every
// float (the slow test checks all 2^32), but written without data-dependent branches so the host
// quantize loop vectorizes. Normal range: integer round-to-nearest-even on the float bits.
// Subnormal range: adding 2^(unit + 23) makes the FPU's own RNE round |x| to a multiple of the
// fp8 subnormal unit (requires no flush-to-zero; neither host nor nvcc without fast-math flush).
template <int M, int Bias, uint32_t MaxFinite, uint32_t InfCode>
RLP_HD uint32_t fp8_encode_fast_impl(float x, bool satfinite) {
  constexpr uint32_t kShift = 23 - M;
  constexpr uint32_t kMinNormBits = static_cast<uint32_t>(127 + 1 - Bias) << 23;
  constexpr uint32_t kMagicBits = static_cast<uint32_t>(127 + (1 - Bias - M) + 23) << 23;
  const uint32_t u = f32_bits(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7FFFFFFFu;
  const uint32_t rn = a + ((1u << (kShift - 1)) - 1u) + ((a >> kShift) & 1u);
  const uint32_t cn = (rn >> kShift) - (static_cast<uint32_t>(127 - Bias) << M);  // wraps if a small
  const uint32_t cs = f32_bits(bits_f32(a) + bits_f32(kMagicBits)) - kMagicBits;
  uint32_t code = a < kMinNormBits ? cs : cn;
  const uint32_t overflow = satfinite ? MaxFinite : InfCode;
  code = code > MaxFinite ? overflow : code;
  return a > 0x7F800000u ? 0x7Fu : (sign | code);  // NaN: canonical, sign dropped (as NVIDIA)
}

RLP_HD uint8_t fp8_encode_fast(float x, Fp8Kind k, Saturation sat) {
  const bool s = sat == Saturation::satfinite;
  return static_cast<uint8_t>(k == Fp8Kind::e4m3 ? fp8_encode_fast_impl<3, 7, 0x7Eu, 0x7Fu>(x, s)
                                                 : fp8_encode_fast_impl<2, 15, 0x7Bu, 0x7Cu>(x, s));
}

// ---- scale from amax ---------------------------------------------------------------------------
RLP_HD BlockScale compute_block_scale(float amax, const ScaleOptions& o) {
  const float fmax = fp8_max_value(o.kind);
  const float eps = o.eps < 0.0f ? default_eps(o.convention) : o.eps;
  BlockScale r{1.0f, 1.0f, false};
  switch (o.convention) {
    case ScaleConvention::te: {
      // TE compute_scale_from_amax: `if (amax < epsilon) amax = epsilon;` (a NaN amax stays NaN).
      if (amax < eps) amax = eps;
      float scale = 1.0f;
      // amax inf or 0 -> scale 1 (TE returns early; an all-zero block quantizes to zeros).
      if (!(is_inf_f(amax) || amax == 0.0f)) {
        // TE uses __fdiv_rn(max_fp8, amax): a correctly rounded division, so --use_fast_math
        // cannot change it. Host `/` is the same IEEE division.
        scale = fmax / amax;
        // amax so small that 448/amax overflows: TE substitutes FLT_MAX.
        if (is_inf_f(scale)) scale = bits_f32(0x7F7FFFFFu);
        // NaN amax gives NaN scale: TE replaces it by 1.
        if (is_nan_f(scale)) scale = 1.0f;
      }
      // Power-of-2: TE masks the mantissa away (bits & 0xFF800000), i.e. rounds the SCALE down,
      // so scale_inv = 2^ceil(log2(amax/448)) in the usual case.
      if (o.pow2) scale = bits_f32(f32_bits(scale) & 0xFF800000u);
      r.scale = scale;
      // TE stores scale_inv = 1 / scale (correctly rounded reciprocal; exact for pow2 scales).
      r.scale_inv = 1.0f / scale;
      r.divide = false;
      return r;
    }
    case ScaleConvention::vllm: {
      // vLLM's reduction starts from eps (`local_absmax = eps` then fmaxf), so amax = max(amax,
      // eps) with a NaN element ignored; then y_s = amax / max_8bit, correctly rounded.
      const float a = fmax_nan_loses(amax, eps);
      float ys = a / fmax;
      // ue8m0 option: y_s = exp2f(ceilf(log2f(y_s))), the next power of two up. vLLM evaluates
      // it with log2f/exp2f; we take the exact ceiling (log2f is exact at powers of two, and the
      // ue8m0 cast's round-up is what it approximates).
      if (o.pow2) ys = ue8m0_to_float(float_to_ue8m0(ys, Pow2Rounding::up, Saturation::satfinite));
      r.scale_inv = ys;
      r.scale = 1.0f / ys;  // informational only: vLLM never multiplies by it
      r.divide = true;
      return r;
    }
    case ScaleConvention::deepgemm: {
      // x_amax.clamp(1e-4): torch.clamp propagates NaN. sf = x_amax / 448.
      const float a = is_nan_f(amax) ? amax : (amax < eps ? eps : amax);
      float sf = a / fmax;
      // ceil_to_ue8m0: 2^ceil(log2(sf)): exponent + 1 unless sf is already a power of two.
      if (o.pow2) sf = ue8m0_to_float(float_to_ue8m0(sf, Pow2Rounding::up, Saturation::satfinite));
      r.scale_inv = sf;
      // The reference multiplies by the reciprocal, (1.0 / sf), rounded once: not a division.
      r.scale = 1.0f / sf;
      r.divide = false;
      return r;
    }
    case ScaleConvention::nemo_refit: {
      // No epsilon in NeMo RL's refit; an explicit eps option still floors amax (knob).
      float a = amax;
      if (eps > 0.0f && a < eps) a = eps;
      float scale;
      if (o.pow2) {
        // exponent = clamp(ceil(log2(amax / 448)), -127, 127) + 127 as uint8; exponent 0 (amax 0,
        // or tiny) -> scale 1; else scale = 2^(127 - exponent), descale = 1 / scale.
        const float descale = a / fmax;
        int e;
        if (descale == 0.0f) {
          e = -127;
        } else if (is_inf_f(descale)) {
          e = 127;
        } else {
          const uint8_t c = float_to_ue8m0(descale, Pow2Rounding::up, Saturation::none);
          e = c == 0xFFu ? 127 : static_cast<int>(c) - 127;
          // float_to_ue8m0 maps everything below 2^-127 to code 0 (= 2^-127): same clamp.
        }
        scale = (e + 127 == 0) ? 1.0f : pow2_f(-e);
      } else {
        // scale = 448 / amax, then torch.where(amax == 0, 1, .) and torch.where(amax == inf, 1, .)
        scale = fmax / a;
        if (a == 0.0f || is_inf_f(a)) scale = 1.0f;
      }
      r.scale = scale;
      r.scale_inv = 1.0f / scale;  // torch.reciprocal(scale_fp)
      r.divide = false;
      return r;
    }
  }
  return r;
}

// NeMo RL's power-of-2 activation scale (its FP8 activation kernel):
// exp = min(floor(log2(448 / absmax)), 126); x is multiplied by 2^exp, dequantized by 2^-exp.
// absmax 0 gives 448/0 = inf and hence exp = 126.
RLP_HD BlockScale nemo_pow2_activation_scale(float absmax, Fp8Kind kind = Fp8Kind::e4m3) {
  const float ratio = fp8_max_value(kind) / absmax;
  int e = 126;
  if (!is_inf_f(ratio) && !is_nan_f(ratio)) {
    const uint8_t c = float_to_ue8m0(ratio, Pow2Rounding::down, Saturation::satfinite);
    e = static_cast<int>(c) - 127;  // floor(log2(ratio)); ratio >= 1 for absmax <= 448
    if (e > 126) e = 126;
  }
  return BlockScale{pow2_f(e), pow2_f(-e), false};
}

// ---- vLLM per-token dynamic quantization --------------------------------------------------------
// The input quantizer of vLLM's Fp8LinearOp for per-channel fp8 weights (compressed-tensors
// strategy channel, input_activations strategy token): dynamic_per_token_scaled_fp8_quant, the CUDA
// kernel of csrc/quantization/w8a8/fp8/common.cu (dynamic_per_token_scaled_fp8_quant_kernel_strided;
// earlier csrc/quantization/fp8/common.cu). One fp32 scale per row, no scale_ub (Fp8LinearOp passes
// none):
//   amax  = fmaxf over the row of fabsf(x) (NaN ignored; the block reduction is exact);
//   scale = fmaxf(amax / 448, min_scaling_factor), min_scaling_factor = 1 / (448 * 512)
//           (csrc/quantization/utils.cuh), an IEEE fp32 division;
//   q     = fmaxf(-448, fminf(x / scale, 448)), a true division ("we don't use inverted scales so
//           we can match FBGemm impl", scaled_fp8_conversion<false>), then the RNE satfinite cast.
//           A NaN x gives +448 (fminf drops the NaN).
// Under torch.compile with the quant_fp8 custom op disabled vLLM runs QuantFP8.forward_native
// instead, which Inductor lowers to reciprocal multiplications (not IEEE-exact in Triton): not
// modelled (docs/kernel-paths.md).
RLP_HD float vllm_token_scale(float amax) {
  const float min_scaling_factor = 1.0f / (kE4M3Max * 512.0f);
  return fmax_nan_loses(amax / kE4M3Max, min_scaling_factor);
}
RLP_HD uint8_t vllm_token_quantize(float x, float scale) {
  const float q = fmax_nan_loses(-kE4M3Max, fmin_nan_loses(x / scale, kE4M3Max));
  return fp8_encode_fast(q, Fp8Kind::e4m3, Saturation::satfinite);
}

// ---- quantize one element ------------------------------------------------------------------
RLP_HD uint8_t quantize_with(float x, const BlockScale& s, const ScaleOptions& o) {
  const float fmax = fp8_max_value(o.kind);
  switch (o.convention) {
    case ScaleConvention::te:
      // TE: q = satfinite(x * scale): one fp32 multiply, then the saturating cast.
      return fp8_encode_fast(x * s.scale, o.kind, Saturation::satfinite);
    case ScaleConvention::vllm: {
      // vLLM: fminf(fmaxf(x / y_s, -max), max), then the RNE cast. A true division: it rounds
      // differently from multiplying by a rounded reciprocal. fmaxf/fminf map NaN to -max.
      const float q = fmin_nan_loses(fmax_nan_loses(x / s.scale_inv, -fmax), fmax);
      return fp8_encode_fast(q, o.kind, Saturation::none);
    }
    case ScaleConvention::deepgemm:
      // DeepGEMM reference: (x * (1 / sf)).to(float8): non-saturating cast (|q| <= max anyway
      // unless the block held inf/NaN).
      return fp8_encode_fast(x * s.scale, o.kind, Saturation::none);
    case ScaleConvention::nemo_refit: {
      // NeMo RL: torch.clamp(w * scale, -max, max) (NaN propagates), then the cast.
      float q = x * s.scale;
      q = q > fmax ? fmax : q;
      q = q < -fmax ? -fmax : q;
      return fp8_encode_fast(q, o.kind, Saturation::none);
    }
  }
  return 0;
}

}  // namespace rlp::num
