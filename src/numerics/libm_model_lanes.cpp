// expf_model over arrays: the model's double arithmetic (libm_detail::exp2_tail with expf's
// constants) as AVX-512 lanes, each lane the scalar operation (fma stays fused, the table read by a
// gather), so the bits are the scalar model's.
#include <cstddef>
#include <cstdint>

#include "rlparity/numerics/libm_model.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace rlp::num {

#if defined(__AVX512F__)
namespace {

// expf of 8 floats in the tail's range (no special case), as exp_common(x, false) computes them.
__m256 exp_tail8(__m256 xf) {
  using namespace libm_detail;
  constexpr double kN = 32.0, scale = 0x1.71547652b82fep+0 * kN, shift = 0x1.8p+52;
  constexpr double c0 = kC0 / kN / kN / kN, c1 = kC1 / kN / kN, c2 = kC2 / kN;
  const __mmask8 all = 0xFF;  // maskz forms: GCC 12's plain ones trip -Wmaybe-uninitialized
  const __m512d xd = _mm512_maskz_cvtps_pd(all, xf);
  const __m512d vscale = _mm512_set1_pd(scale), vshift = _mm512_set1_pd(shift);
  const __m512d z = _mm512_mul_pd(vscale, xd);
  __m512d kd = _mm512_add_pd(z, vshift);
  const __m512i ki = _mm512_castpd_si512(kd);
  kd = _mm512_sub_pd(kd, vshift);
  const __m512d r = _mm512_fmsub_pd(vscale, xd, kd);  // fma(scale, x, -kd)
  const __m512i idx = _mm512_and_si512(ki, _mm512_set1_epi64(31));
  const __m512i tab = _mm512_mask_i64gather_epi64(_mm512_setzero_si512(), all, idx,
                                                  reinterpret_cast<const long long*>(kExp2Tab), 8);
  const __m512d s = _mm512_castsi512_pd(_mm512_add_epi64(tab, _mm512_maskz_slli_epi64(all, ki, 47)));
  const __m512d p = _mm512_fmadd_pd(_mm512_set1_pd(c0), r, _mm512_set1_pd(c1));
  const __m512d r2 = _mm512_mul_pd(r, r);
  __m512d y = _mm512_fmadd_pd(_mm512_set1_pd(c2), r, _mm512_set1_pd(1.0));
  y = _mm512_fmadd_pd(p, r2, y);
  return _mm512_maskz_cvtpd_ps(all, _mm512_mul_pd(y, s));
}

}  // namespace
#endif

void expf_model_n(const float* x, float* y, std::size_t n) {
  std::size_t i = 0;
#if defined(__AVX512F__)
  const __m512i top_mask = _mm512_set1_epi32(0x7ff), limit = _mm512_set1_epi32(0x42b);
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    // exp_common's special-case test: abstop = (bits >> 20) & 0x7ff >= 0x42b.
    const __m512i abstop =
        _mm512_and_si512(_mm512_maskz_srli_epi32(0xFFFF, _mm512_castps_si512(v), 20), top_mask);
    if (_mm512_cmpge_epi32_mask(abstop, limit) != 0) {
      for (std::size_t j = i; j < i + 16; ++j) y[j] = expf_model(x[j]);
      continue;
    }
    const __m256 lo = exp_tail8(_mm256_loadu_ps(x + i));
    const __m256 hi = exp_tail8(_mm256_loadu_ps(x + i + 8));
    _mm256_storeu_ps(y + i, lo);
    _mm256_storeu_ps(y + i + 8, hi);
  }
#endif
  for (; i < n; ++i) y[i] = expf_model(x[i]);
}

}  // namespace rlp::num
