#include "rlparity/numerics/exp2.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace rlp::num {
namespace {

// tab[i] = bits(2^(i/32), correctly rounded) - (i << 47): adding ki << 47 restores the exponent.
constexpr uint64_t kTab[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
    0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
    0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540,
};
constexpr double kShift = 0x1.8p+52 / 32;  // adding it leaves k = round(32 x) in the low bits
constexpr double kC0 = 0x1.c6af84b912394p-5, kC1 = 0x1.ebfce50fac4f3p-3, kC2 = 0x1.62e42ff0c52d6p-1;
constexpr uint32_t kTop128 = 0x430;  // top 12 bits of 128.0f
constexpr uint32_t kTopInf = 0x7f8;

uint64_t bits64(double d) {
  uint64_t u;
  std::memcpy(&u, &d, sizeof u);
  return u;
}
double from_bits64(uint64_t u) {
  double d;
  std::memcpy(&d, &u, sizeof d);
  return d;
}
uint32_t bits32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

}  // namespace

float exp2_model(float x) {
  const uint32_t ux = bits32(x);
  const uint32_t abstop = (ux >> 20) & 0x7ffu;
  if (abstop >= kTop128) {  // |x| >= 128, inf or NaN
    if (ux == 0xff800000u) return 0.0f;
    if (abstop >= kTopInf) return x + x;
    if (x > 0.0f) return std::numeric_limits<float>::infinity();
    if (x <= -150.0f) return 0.0f;
  }
  const double xd = x;
  double kd = xd + kShift;
  const uint64_t ki = bits64(kd);
  kd -= kShift;
  const double r = xd - kd;
  const double s = from_bits64(kTab[ki % 32] + (ki << 47));
  const double z = std::fma(kC0, r, kC1);
  const double r2 = r * r;
  double y = std::fma(kC2, r, 1.0);
  y = std::fma(z, r2, y);
  return static_cast<float>(y * s);
}

void exp2_model_inplace(float* x, int n) {
  int i = 0;
#if defined(__AVX512F__)
  const __m512i lo = _mm512_loadu_si512(kTab), hi = _mm512_loadu_si512(kTab + 16);
  const __m512i lo2 = _mm512_loadu_si512(kTab + 8), hi2 = _mm512_loadu_si512(kTab + 24);
  const __m512d shift = _mm512_set1_pd(kShift), c0 = _mm512_set1_pd(kC0), c1 = _mm512_set1_pd(kC1),
                c2 = _mm512_set1_pd(kC2), one = _mm512_set1_pd(1.0);
  const __mmask8 all8 = 0xFF;
  // 8 lanes in double: the table entry by a two-register permute on the low 4 index bits (entries
  // 0-15 or 16-31 picked by bit 4), exactly the scalar formula otherwise.
  auto half = [&](__m256 xf) {
    const __m512d xd = _mm512_maskz_cvtps_pd(all8, xf);
    __m512d kd = _mm512_add_pd(xd, shift);
    const __m512i ki = _mm512_castpd_si512(kd);
    kd = _mm512_sub_pd(kd, shift);
    const __m512d r = _mm512_sub_pd(xd, kd);
    const __m512i idx = _mm512_and_si512(ki, _mm512_set1_epi64(15));
    const __m512i t_lo = _mm512_permutex2var_epi64(lo, idx, lo2);  // entries 0..15
    const __m512i t_hi = _mm512_permutex2var_epi64(hi, idx, hi2);  // entries 16..31
    const __mmask8 upper = _mm512_test_epi64_mask(ki, _mm512_set1_epi64(16));
    const __m512i t = _mm512_add_epi64(_mm512_mask_mov_epi64(t_lo, upper, t_hi), _mm512_maskz_slli_epi64(all8, ki, 47));
    const __m512d s = _mm512_castsi512_pd(t);
    const __m512d z = _mm512_fmadd_pd(c0, r, c1);
    const __m512d r2 = _mm512_mul_pd(r, r);
    __m512d y = _mm512_fmadd_pd(c2, r, one);
    y = _mm512_fmadd_pd(z, r2, y);
    return _mm512_maskz_cvtpd_ps(all8, _mm512_mul_pd(y, s));
  };
  const __m512i top_mask = _mm512_set1_epi32(0x7ff00000), top128 = _mm512_set1_epi32(static_cast<int>(kTop128 << 20));
  for (; i + 16 <= n; i += 16) {
    float in[16];
    std::memcpy(in, x + i, sizeof in);
    const __m512 v = _mm512_loadu_ps(in);
    // Lanes with |x| >= 128, inf or NaN take the scalar path (its special cases).
    const __mmask16 special = _mm512_cmpge_epu32_mask(_mm512_and_si512(_mm512_castps_si512(v), top_mask), top128);
    _mm256_storeu_ps(x + i, half(_mm256_loadu_ps(in)));
    _mm256_storeu_ps(x + i + 8, half(_mm256_loadu_ps(in + 8)));
    if (special)
      for (int j = 0; j < 16; ++j)
        if (special & (1u << j)) x[i + j] = exp2_model(in[j]);
  }
#endif
  for (; i < n; ++i) x[i] = exp2_model(x[i]);
}

}  // namespace rlp::num
