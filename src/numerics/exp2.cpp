#include "rlparity/numerics/exp2.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "rlparity/numerics/libm_model.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace rlp::num {
namespace {

#if defined(__AVX512F__)
// The vector form of exp2f_model (libm_model.hpp): the same table, shift and coefficients.
const uint64_t* const kTab = libm_detail::kExp2Tab;
constexpr double kShift = 0x1.8p+52 / 32;
constexpr double kC0 = libm_detail::kC0, kC1 = libm_detail::kC1, kC2 = libm_detail::kC2;
constexpr uint32_t kTop128 = 0x430;  // top 12 bits of 128.0f
#endif

}  // namespace

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
    const __m512i t =
        _mm512_add_epi64(_mm512_mask_mov_epi64(t_lo, upper, t_hi), _mm512_maskz_slli_epi64(all8, ki, 47));
    const __m512d s = _mm512_castsi512_pd(t);
    const __m512d z = _mm512_fmadd_pd(c0, r, c1);
    const __m512d r2 = _mm512_mul_pd(r, r);
    __m512d y = _mm512_fmadd_pd(c2, r, one);
    y = _mm512_fmadd_pd(z, r2, y);
    return _mm512_maskz_cvtpd_ps(all8, _mm512_mul_pd(y, s));
  };
  const __m512i top_mask = _mm512_set1_epi32(0x7ff00000),
                top128 = _mm512_set1_epi32(static_cast<int>(kTop128 << 20));
  for (; i + 16 <= n; i += 16) {
    float in[16];
    std::memcpy(in, x + i, sizeof in);
    const __m512 v = _mm512_loadu_ps(in);
    // Lanes with |x| >= 128, inf or NaN take the scalar path (its special cases).
    const __mmask16 special =
        _mm512_cmpge_epu32_mask(_mm512_and_si512(_mm512_castps_si512(v), top_mask), top128);
    _mm256_storeu_ps(x + i, half(_mm256_loadu_ps(in)));
    _mm256_storeu_ps(x + i + 8, half(_mm256_loadu_ps(in + 8)));
    if (special)
      for (int j = 0; j < 16; ++j)
        if (special & (1u << j)) x[i + j] = exp2f_model(in[j]);
  }
#endif
  for (; i < n; ++i) x[i] = exp2f_model(x[i]);
}

}  // namespace rlp::num
