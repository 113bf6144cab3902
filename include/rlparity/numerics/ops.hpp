// The element-level rules of the forward's ops, written once for the CPU ops (src/model/ops/*.cpp)
// and the CUDA kernels (kernels/*.cu) that mirror them: where each op rounds to the activation
// format and in which order it multiplies and adds. Every function is RLP_HD, and this header must
// compile as C++17 under nvcc (no C++20 library, no std:: call that has no device overload).
// The operations and their order are the contract: (a * b) * c is not a * (b * c), and an fma is
// not a multiply then an add (host: -ffp-contract=off, device: --fmad=false, so only explicit fma
// calls fuse).
#pragma once
#include <cmath>

#include "rlparity/numerics/formats.hpp"
#include "rlparity/numerics/host_device.hpp"
#include "rlparity/numerics/libm_model_f64.hpp"

namespace rlp::num {

// Rounding to the activation format, bf16 or fp16 (values held in float).
RLP_HD float round_act(float x, Half16 f) { return round_half16(x, f); }

// The residual stream as stored: the act format, or fp32 (Megatron's fp32_residual_connection).
RLP_HD float residual_store(float z, bool resid_fp32, Half16 act) {
  return resid_fp32 ? z : round_act(z, act);
}

// One output element of RMSNorm, x * r * w with r = 1/sqrt(var + eps). fused (vLLM rms_norm
// kernels): two roundings, act(act(x * r) * w), because the kernel writes
// `(scalar_t)(x * s_variance) * weight[i]` with a bf16 multiply; unfused (TransformerEngine):
// act(x * r * w) in fp32 with one rounding.
RLP_HD float rms_norm_out(float x, float r, float w, bool fused, Half16 act) {
  return fused ? round_act(round_act(x * r, act) * w, act) : round_act((x * r) * w, act);
}

// One entry of the RoPE table, cos/sin of the fp32 angle pos * inv_freq (HF/vLLM build the table
// this way) computed in double and rounded to float; rounded to the act format when the table is
// (vLLM's cos_sin_cache in scalar_t).
struct RopeEntry {
  float cos, sin;
};
RLP_HD RopeEntry rope_entry(float pos, float inv_freq, bool table_rounded, Half16 act) {
  const float angle = pos * inv_freq;
#if defined(__CUDA_ARCH__)
  float c = static_cast<float>(::cos(static_cast<double>(angle)));
  float s = static_cast<float>(::sin(static_cast<double>(angle)));
#else
  float c = static_cast<float>(std::cos(static_cast<double>(angle)));
  float s = static_cast<float>(std::sin(static_cast<double>(angle)));
#endif
  if (table_rounded) {
    c = round_act(c, act);
    s = round_act(s, act);
  }
  return {c, s};
}

// The rotation of the pair (a, b) = (x[i], x[i + half]) of one head, in place.
// table_rounded (vLLM's rotary kernel computes in scalar_t): every product and the sum round;
// else TE's fused RoPE: fp32 arithmetic, one rounding.
RLP_HD void rope_rotate(float& a, float& b, RopeEntry e, bool table_rounded, Half16 act) {
  const float x = a, y = b, c = e.cos, s = e.sin;
  if (table_rounded) {
    a = round_act(round_act(x * c, act) - round_act(y * s, act), act);
    b = round_act(round_act(y * c, act) + round_act(x * s, act), act);
  } else {
    a = round_act(x * c - y * s, act);
    b = round_act(y * c + x * s, act);
  }
}

// The SiLU-gated product act(silu(g) * u), silu(g) = g / (1 + exp(-g)); exp_neg_g is exp(-g) as
// the caller's expf computes it. fused (vLLM's silu_and_mul): one fp32 expression, one rounding;
// unfused (HF/Megatron): act_fn(gate) is a separate act tensor, then the product rounds again.
RLP_HD float silu_gate(float g, float u, float exp_neg_g, bool fused, Half16 act) {
  const float silu = g / (1.0f + exp_neg_g);
  return fused ? round_act(silu * u, act) : round_act(round_act(silu, act) * u, act);
}

// The format the softmax numerators P are rounded to before P.V: the act format (the kernel casts P
// to V's dtype for the tensor-core product), e4m3 when the KV cache is fp8 (V is e4m3), or fp32
// when the path keeps P unrounded (knob attn-p-round off).
RLP_HD Format attention_p_format(bool p_round, bool fp8_kv, Half16 act) {
  return !p_round ? Format::fp32 : (fp8_kv ? Format::e4m3 : format_of(act));
}

// The exponent scale of attention's exp2 formulation (FlashAttention-2: p = exp2(s * c - m * c)),
// c = softmax_scale * log2(e) with softmax_scale = 1/sqrt(head_dim) rounded from double; an fp8
// KV cache folds the query and key scales in (q_k_scale = q_scale * k_scale, 1 otherwise).
RLP_HD float attention_exp2_scale(int head_dim, float q_k_scale) {
#if defined(__CUDA_ARCH__)
  const float softmax_scale = static_cast<float>(1.0 / ::sqrt(static_cast<double>(head_dim)));
#else
  const float softmax_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
#endif
  constexpr float kLog2e = 1.442695040888963407359924681001892137f;  // std::numbers::log2e_v<float>
  return softmax_scale * q_k_scale * kLog2e;
}

// The full-vocabulary comparison of two log-probability rows, lg (generation) and lt (training),
// one vocabulary entry at a time in double: KL(g||t), KL(t||g), the entropy H(g) and the two halves
// of Jensen-Shannon. Sums of terms p * (a - b) with 0 * anything = 0 for p == 0 (so -inf - -inf
// never makes a NaN). The host adds entries in vocabulary order; the kernel sums the threads'
// partial sums in a block tree.
struct FullVocabSums {
  double kl_gen_train = 0.0, kl_train_gen = 0.0, entropy_gen = 0.0, js_gen = 0.0, js_train = 0.0;

  RLP_HD static double weighted_diff(double p, double a, double b) { return p == 0.0 ? 0.0 : p * (a - b); }

  // pg = exp(lg), pt = exp(lt) and lm = log(m) with m = (pg + pt)/2 (exp_model and log_model, glibc's
  // algorithms on host and device alike: libm_model_f64.hpp).
  RLP_HD static double mean_of(double pg, double pt) { return 0.5 * (pg + pt); }
  RLP_HD void add(double lg, double lt) {
    const double pg = exp_model(lg), pt = exp_model(lt);
    add_terms(lg, lt, pg, pt, pg != 0.0 || pt != 0.0 ? log_model(mean_of(pg, pt)) : 0.0);
  }
  // The same with the transcendentals given (the host computes them eight lanes at a time); lm is
  // read only when pg or pt is non-zero (then m > 0).
  RLP_HD void add_terms(double lg, double lt, double pg, double pt, double lm) {
    kl_gen_train += weighted_diff(pg, lg, lt);
    kl_train_gen += weighted_diff(pt, lt, lg);
    entropy_gen -= weighted_diff(pg, lg, 0.0);
    if (pg != 0.0 || pt != 0.0) {
      js_gen += weighted_diff(pg, lg, lm);
      js_train += weighted_diff(pt, lt, lm);
    }
  }
  RLP_HD double js() const { return 0.5 * js_gen + 0.5 * js_train; }
};

}  // namespace rlp::num
