// The float transcendentals of the kernel paths, owned by the emulation and shared with the CUDA
// kernels (RLP_HD), so that their bits depend neither on the host's libm nor on the device's:
// glibc's expf, exp2f, logf and log2f (ARM optimized-routines, glibc >= 2.28) as their x86-64 FMA
// builds compute them, the algorithms of sysdeps/ieee754/flt-32/e_{expf,exp2f,logf,log2f}.c with
// the constants of e_exp2f_data.c, e_logf_data.c and e_log2f_data.c:
//   exp2f: x = k/32 + r, 2^(k/32) from a 32-entry table, degree-3 polynomial in r (double, fma);
//   expf:  the same with z = x * 32/ln2;
//   logf/log2f: x = 2^k z, z in [0x3f330000, 2 * 0x3f330000), 16 subintervals with c near their
//          centre, log1p(z/c - 1) by a polynomial in double, plus log(c) + k ln2 (k for log2f).
// Every operation, fused or not, is written out as the FMA build's machine code performs it; one
// rounding to float at the end. Tests hold each against the host's std:: function on every float
// (slow label) and a dense sample (default suite); errno and floating-point exception flags are
// not modelled.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "rlparity/numerics/host_device.hpp"

namespace rlp::num {
namespace libm_detail {

// tab[i] = bits(2^(i/32)) - (i << 47): adding k << 47 restores the exponent of 2^(k/32).
#define RLP_EXP2F_TABLE                                                                           \
  0x3ff0000000000000ull, 0x3fefd9b0d3158574ull, 0x3fefb5586cf9890full, 0x3fef9301d0125b51ull,     \
      0x3fef72b83c7d517bull, 0x3fef54873168b9aaull, 0x3fef387a6e756238ull, 0x3fef1e9df51fdee1ull, \
      0x3fef06fe0a31b715ull, 0x3feef1a7373aa9cbull, 0x3feedea64c123422ull, 0x3feece086061892dull, \
      0x3feebfdad5362a27ull, 0x3feeb42b569d4f82ull, 0x3feeab07dd485429ull, 0x3feea47eb03a5585ull, \
      0x3feea09e667f3bcdull, 0x3fee9f75e8ec5f74ull, 0x3feea11473eb0187ull, 0x3feea589994cce13ull, \
      0x3feeace5422aa0dbull, 0x3feeb737b0cdc5e5ull, 0x3feec49182a3f090ull, 0x3feed503b23e255dull, \
      0x3feee89f995ad3adull, 0x3feeff76f2fb5e47ull, 0x3fef199bdd85529cull, 0x3fef3720dcef9069ull, \
      0x3fef5818dcfba487ull, 0x3fef7c97337b9b5full, 0x3fefa4afa2a490daull, 0x3fefd0765b6e4540ull
// 1/c of each subinterval (shared by logf and log2f), then log(c) and log2(c).
#define RLP_LOGF_INVC                                                                                \
  0x1.661ec79f8f3bep+0, 0x1.571ed4aaf883dp+0, 0x1.49539f0f010bp+0, 0x1.3c995b0b80385p+0,             \
      0x1.30d190c8864a5p+0, 0x1.25e227b0b8eap+0, 0x1.1bb4a4a1a343fp+0, 0x1.12358f08ae5bap+0,         \
      0x1.0953f419900a7p+0, 0x1p+0, 0x1.e608cfd9a47acp-1, 0x1.ca4b31f026aap-1, 0x1.b2036576afce6p-1, \
      0x1.9c2d163a1aa2dp-1, 0x1.886e6037841edp-1, 0x1.767dcf5534862p-1
#define RLP_LOGF_LOGC                                                                                  \
  -0x1.57bf7808caadep-2, -0x1.2bef0a7c06ddbp-2, -0x1.01eae7f513a67p-2, -0x1.b31d8a68224e9p-3,          \
      -0x1.6574f0ac07758p-3, -0x1.1aa2bc79c81p-3, -0x1.a4e76ce8c0e5ep-4, -0x1.1973c5a611cccp-4,        \
      -0x1.252f438e10c1ep-5, 0x0p+0, 0x1.aa5aa5df25984p-5, 0x1.c5e53aa362eb4p-4, 0x1.526e57720db08p-3, \
      0x1.bc2860d22477p-3, 0x1.1058bc8a07ee1p-2, 0x1.4043057b6ee09p-2
#define RLP_LOG2F_LOGC                                                                                 \
  -0x1.efec65b963019p-2, -0x1.b0b6832d4fca4p-2, -0x1.7418b0a1fb77bp-2, -0x1.39de91a6dcf7bp-2,          \
      -0x1.01d9bf3f2b631p-2, -0x1.97c1d1b3b7afp-3, -0x1.2f9e393af3c9fp-3, -0x1.960cbbf788d5cp-4,       \
      -0x1.a6f9db6475fcep-5, 0x0p+0, 0x1.338ca9f24f53dp-4, 0x1.476a9543891bap-3, 0x1.e840b4ac4e4d2p-3, \
      0x1.40645f0c6651cp-2, 0x1.88e9c2c1b9ff8p-2, 0x1.ce0a44eb17bccp-2

// One copy for the host, one in the device's constant memory (per translation unit).
static constexpr uint64_t kExp2Tab[32] = {RLP_EXP2F_TABLE};
static constexpr double kLogInvc[16] = {RLP_LOGF_INVC};
static constexpr double kLogLogc[16] = {RLP_LOGF_LOGC};
static constexpr double kLog2Logc[16] = {RLP_LOG2F_LOGC};
#if defined(__CUDACC__)
static __constant__ uint64_t kExp2TabDev[32] = {RLP_EXP2F_TABLE};
static __constant__ double kLogInvcDev[16] = {RLP_LOGF_INVC};
static __constant__ double kLogLogcDev[16] = {RLP_LOGF_LOGC};
static __constant__ double kLog2LogcDev[16] = {RLP_LOG2F_LOGC};
#endif
#undef RLP_EXP2F_TABLE
#undef RLP_LOGF_INVC
#undef RLP_LOGF_LOGC
#undef RLP_LOG2F_LOGC

// The table of the pass being compiled: the device's copy in device code, the host's otherwise.
#if defined(__CUDA_ARCH__)
#define RLP_LIBM_TABLE(name) (name##Dev)
#else
#define RLP_LIBM_TABLE(name) (name)
#endif
RLP_HD uint64_t exp2_tab(uint64_t i) { return RLP_LIBM_TABLE(kExp2Tab)[i]; }
RLP_HD double log_invc(int i) { return RLP_LIBM_TABLE(kLogInvc)[i]; }
RLP_HD double log_logc(int i, bool base2) {
  return base2 ? RLP_LIBM_TABLE(kLog2Logc)[i] : RLP_LIBM_TABLE(kLogLogc)[i];
}
#undef RLP_LIBM_TABLE

RLP_HD double fma_d(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return ::fma(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

constexpr double kC0 = 0x1.c6af84b912394p-5, kC1 = 0x1.ebfce50fac4f3p-3, kC2 = 0x1.62e42ff0c52d6p-1;

// 2^(k/32) * (1 + c2 r + c1 r^2 + c0 r^3) for z = scale * x: adding `shift` rounds z to the grid
// of k (exp2f: scale 1, shift 1.5 * 2^47, a grid of 1/32; expf: scale 32/ln 2, shift 1.5 * 2^52,
// integers), whose low bits are then k; r = z - k on that grid, computed by the FMA build as one
// fused fma(scale, x, -k) (the product is not rounded first: the unfused form differs from glibc
// on 2 of the 2^32 floats), the coefficients scaled to match.
RLP_HD float exp2_tail(double xd, double scale, double shift, double c0, double c1, double c2) {
  const double z = scale * xd;
  double kd = z + shift;
  const uint64_t ki = f64_bits(kd);
  kd -= shift;
  const double r = fma_d(scale, xd, -kd);
  const double s = bits_f64(exp2_tab(ki % 32) + (ki << 47));
  const double p = fma_d(c0, r, c1);
  const double r2 = r * r;
  double y = fma_d(c2, r, 1.0);
  y = fma_d(p, r2, y);
  return static_cast<float>(y * s);
}

RLP_HD float inf_f() { return bits_f32(0x7f800000u); }

// log (base2 = false) or log2 of x, glibc's shared scheme; special cases first.
RLP_HD float log_common(float x, bool base2) {
  uint32_t ix = f32_bits(x);
  if (ix == 0x3f800000u) return 0.0f;
  if (ix - 0x00800000u >= 0x7f800000u - 0x00800000u) {
    if (ix * 2 == 0) return -inf_f();                   // log(+-0) = -inf
    if (ix == 0x7f800000u) return x;                    // log(inf) = inf
    if ((ix & 0x80000000u) || ix * 2 >= 0xff000000u) {  // negative or NaN
      const float d = x - x;
      return d / d;
    }
    ix = f32_bits(x * 0x1p23f);  // subnormal: normalize
    ix -= 23u << 23;
  }
  const uint32_t tmp = ix - 0x3f330000u;
  const int i = static_cast<int>((tmp >> (23 - 4)) % 16);
  const int k = static_cast<int32_t>(tmp) >> 23;  // arithmetic shift
  const uint32_t iz = ix - (tmp & 0xff800000u);
  const double invc = log_invc(i), logc = log_logc(i, base2);
  const double z = static_cast<double>(bits_f32(iz));
  const double r = fma_d(z, invc, -1.0);
  const double r2 = r * r;
  if (base2) {
    constexpr double A0 = -0x1.712b6f70a7e4dp-2, A1 = 0x1.ecabf496832ep-2, A2 = -0x1.715479ffae3dep-1,
                     A3 = 0x1.715475f35c8b8p0;
    const double y0 = logc + static_cast<double>(k);
    double y = fma_d(A1, r, A2);
    y = fma_d(A0, r2, y);
    const double p = fma_d(A3, r, y0);
    return static_cast<float>(fma_d(y, r2, p));
  }
  constexpr double A0 = -0x1.00ea348b88334p-2, A1 = 0x1.5575b0be00b6ap-2, A2 = -0x1.ffffef20a4123p-2,
                   Ln2 = 0x1.62e42fefa39efp-1;
  const double y0 = fma_d(static_cast<double>(k), Ln2, logc);
  double y = fma_d(A1, r, A2);
  y = fma_d(A0, r2, y);
  return static_cast<float>(fma_d(y, r2, y0 + r));
}

// exp2 (base2 = true) or exp of x, glibc's shared scheme; special cases first (|x| >= 128 for
// exp2f, >= 88 for expf: -inf, inf/NaN, overflow, underflow).
RLP_HD float exp_common(float x, bool base2) {
  const uint32_t ux = f32_bits(x);
  const uint32_t abstop = (ux >> 20) & 0x7ffu;
  if (abstop >= (base2 ? 0x430u : 0x42bu)) {
    if (ux == 0xff800000u) return 0.0f;
    if (abstop >= 0x7f8u) return x + x;
    if (base2 ? x > 0.0f : x > 0x1.62e42ep6f) return inf_f();
    if (base2 ? x <= -150.0f : x < -0x1.9fe368p6f) return 0.0f;
  }
  constexpr double kN = 32.0;
  if (base2) return exp2_tail(static_cast<double>(x), 1.0, 0x1.8p+52 / kN, kC0, kC1, kC2);
  return exp2_tail(static_cast<double>(x), 0x1.71547652b82fep+0 * kN, 0x1.8p+52, kC0 / kN / kN / kN,
                   kC1 / kN / kN, kC2 / kN);
}

}  // namespace libm_detail

// glibc's exp2f and expf.
RLP_HD float exp2f_model(float x) { return libm_detail::exp_common(x, true); }
RLP_HD float expf_model(float x) { return libm_detail::exp_common(x, false); }

#if !defined(__CUDACC__)
// y[i] = expf_model(x[i]) for i < n, the same bits, 8 lanes of the double arithmetic at a time
// where the host has AVX-512 (a group of 16 with a special-case input runs the scalar model).
// y may be x. For the CPU paths' hot loops: the SiLU gate and the log-softmax's sum.
void expf_model_n(const float* x, float* y, std::size_t n);
#endif

// glibc's logf and log2f.
RLP_HD float logf_model(float x) { return libm_detail::log_common(x, false); }
RLP_HD float log2f_model(float x) { return libm_detail::log_common(x, true); }

}  // namespace rlp::num
