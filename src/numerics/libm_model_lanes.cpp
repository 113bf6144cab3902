// The libm models over arrays: expf_model's double arithmetic (libm_detail::exp2_tail with expf's
// constants), exp_model's and log_model's main paths as AVX-512 lanes, each lane the scalar
// operation (fma stays fused, the table read by a gather), so the bits are the scalar model's.
#include <cstddef>
#include <cstdint>

#include "rlparity/numerics/libm_model.hpp"
#include "rlparity/numerics/libm_model_f64.hpp"

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

__m512d set1(double v) { return _mm512_set1_pd(v); }

// exp_model of 8 doubles with 2^-54 <= |x| < 512 (no special case).
__m512d exp8(__m512d x) {
  using namespace libm_detail;
  const __mmask8 all = 0xFF;
  const long long* tab = reinterpret_cast<const long long*>(kExpTab);
  __m512d kd = _mm512_fmadd_pd(x, set1(kExpInvLn2N), set1(kExpShift));
  const __m512i ki = _mm512_castpd_si512(kd);
  kd = _mm512_sub_pd(kd, set1(kExpShift));
  const __m512d r = _mm512_fmadd_pd(kd, set1(kExpNegLn2loN), _mm512_fmadd_pd(kd, set1(kExpNegLn2hiN), x));
  const __m512i idx = _mm512_maskz_slli_epi64(all, _mm512_and_si512(ki, _mm512_set1_epi64(127)), 1);
  const __m512i zero = _mm512_setzero_si512();
  const __m512d tail = _mm512_castsi512_pd(_mm512_mask_i64gather_epi64(zero, all, idx, tab, 8));
  const __m512i hbits =
      _mm512_mask_i64gather_epi64(zero, all, _mm512_add_epi64(idx, _mm512_set1_epi64(1)), tab, 8);
  const __m512d scale = _mm512_castsi512_pd(_mm512_add_epi64(hbits, _mm512_maskz_slli_epi64(all, ki, 45)));
  const __m512d r2 = _mm512_mul_pd(r, r);
  const __m512d lo =
      _mm512_fmadd_pd(_mm512_fmadd_pd(r, set1(kExpC3), set1(kExpC2)), r2, _mm512_add_pd(tail, r));
  const __m512d tmp =
      _mm512_fmadd_pd(_mm512_mul_pd(r2, r2), _mm512_fmadd_pd(r, set1(kExpC5), set1(kExpC4)), lo);
  return _mm512_fmadd_pd(scale, tmp, scale);
}

// log_model of 8 positive normal doubles outside the near-1 range (the table path).
__m512d log8(__m512d x) {
  using namespace libm_detail;
  const __mmask8 all = 0xFF;
  const __m512i ix = _mm512_castpd_si512(x);
  const __m512i tmp = _mm512_sub_epi64(ix, _mm512_set1_epi64(static_cast<long long>(kLogOff)));
  const __m512i i2 = _mm512_maskz_slli_epi64(
      all, _mm512_and_si512(_mm512_maskz_srli_epi64(all, tmp, 45), _mm512_set1_epi64(127)), 1);
  const __m512i k = _mm512_maskz_srai_epi64(all, tmp, 52);
  const __m512d kd = _mm512_maskz_cvtepi32_pd(all, _mm512_maskz_cvtepi64_epi32(all, k));
  const __m512d z = _mm512_castsi512_pd(
      _mm512_sub_epi64(ix, _mm512_and_si512(tmp, _mm512_set1_epi64(static_cast<long long>(0xfffull << 52)))));
  const __m512d zero = _mm512_setzero_pd();
  const __m512d invc = _mm512_mask_i64gather_pd(zero, all, i2, kLogTab, 8);
  const __m512d logc =
      _mm512_mask_i64gather_pd(zero, all, _mm512_add_epi64(i2, _mm512_set1_epi64(1)), kLogTab, 8);
  const __m512d r = _mm512_fmadd_pd(z, invc, set1(-1.0));
  const __m512d w = _mm512_fmadd_pd(kd, set1(kLogLn2hi), logc);
  const __m512d hi = _mm512_add_pd(w, r);
  __m512d lo = _mm512_fmadd_pd(kd, set1(kLogLn2lo), _mm512_add_pd(_mm512_sub_pd(w, hi), r));
  const __m512d r2 = _mm512_mul_pd(r, r), r3 = _mm512_mul_pd(r, r2);
  lo = _mm512_fmadd_pd(r2, set1(kLogA0), lo);
  const __m512d q = _mm512_fmadd_pd(_mm512_fmadd_pd(r, set1(kLogA4), set1(kLogA3)), r2,
                                    _mm512_fmadd_pd(r, set1(kLogA2), set1(kLogA1)));
  return _mm512_add_pd(_mm512_fmadd_pd(r3, q, lo), hi);
}

// Lanes of x whose 64-bit patterns u satisfy u - lo < span (unsigned): the main path's range.
__mmask8 in_range(__m512d x, uint64_t lo, uint64_t span) {
  const __m512i u = _mm512_sub_epi64(_mm512_castpd_si512(x), _mm512_set1_epi64(static_cast<long long>(lo)));
  return _mm512_cmplt_epu64_mask(u, _mm512_set1_epi64(static_cast<long long>(span)));
}

// y = f(x) over n, vec on the lanes that main(x) admits, scalar elsewhere.
template <class Vec, class Main, class Scalar>
void map_lanes(const double* x, double* y, std::size_t n, Vec vec, Main main, Scalar scalar) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m512d v = _mm512_loadu_pd(x + i);
    const __mmask8 ok = main(v);
    _mm512_mask_storeu_pd(y + i, ok, vec(v));
    if (ok != 0xFF)
      for (std::size_t j = 0; j < 8; ++j)
        if (!((ok >> j) & 1)) y[i + j] = scalar(x[i + j]);
  }
  for (; i < n; ++i) y[i] = scalar(x[i]);
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

void exp_model_n(const double* x, double* y, std::size_t n) {
#if defined(__AVX512F__)
  // exp_model's main path: the top 12 bits of |x| in [kExpMainTopLo, kExpMainTopHi).
  const auto main = [](__m512d v) {
    const __m512d a = _mm512_castsi512_pd(
        _mm512_and_si512(_mm512_castpd_si512(v), _mm512_set1_epi64(0x7fffffffffffffffll)));
    using namespace libm_detail;
    return in_range(a, uint64_t{kExpMainTopLo} << 52, uint64_t{kExpMainTopHi - kExpMainTopLo} << 52);
  };
  map_lanes(x, y, n, exp8, main, [](double v) { return exp_model(v); });
#else
  for (std::size_t i = 0; i < n; ++i) y[i] = exp_model(x[i]);
#endif
}

void log_model_n(const double* x, double* y, std::size_t n) {
#if defined(__AVX512F__)
  // log_model's table path: top 16 bits in [kLogMainTopLo, kLogMainTopHi), outside the near-1 range.
  const auto main = [](__m512d v) {
    using namespace libm_detail;
    return static_cast<__mmask8>(
        in_range(v, uint64_t{kLogMainTopLo} << 48, uint64_t{kLogMainTopHi - kLogMainTopLo} << 48) &
        ~in_range(v, kLogNearLo, kLogNearHi - kLogNearLo));
  };
  map_lanes(x, y, n, log8, main, [](double v) { return log_model(v); });
#else
  for (std::size_t i = 0; i < n; ++i) y[i] = log_model(x[i]);
#endif
}

}  // namespace rlp::num
