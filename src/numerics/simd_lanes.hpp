// Vector lanes for the CPU kernels (internal header): one trait struct per width with the few
// operations the kernels use. Every lane does exactly the scalar IEEE operation (an fma stays one
// fused rounding, nothing is reassociated), so a kernel written over a trait gives the same bits at
// any width the target allows, the scalar fallbacks included.
//   ScalarLanes<W>  W floats in a plain array (targets without AVX2/FMA; also a reference)
//   Lanes8          __m256 with AVX2+FMA, else ScalarLanes<8>
//   Lanes16         __m512, only with AVX-512
//   NativeLanes     the widest of them the target has (ScalarLanes<1> without AVX2): for kernels
//                   that take whatever width there is, as the attention micro-kernels' pv_* do
//   DoubleLanes     float64 lanes for the oracle: s + x * w as a multiply then an add, never fused
// Users: the GEMM kernels (gemm_*.cpp). The attention helpers (pv_* in src/model) map one to one
// onto NativeLanes (load, store, set, zero, fma); inspect's 16-lane block kernel uses GCC vector
// extensions instead (whole-vector compares and selects), which these traits do not replace.
#pragma once
#include <algorithm>
#include <cmath>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace rlp::num::simd {

template <int Width>
struct ScalarLanes {
  static constexpr int W = Width;
  struct V {
    float v[Width];
  };
  static V zero() { return V{}; }
  static V load(const float* p) {
    V r;
    std::copy(p, p + W, r.v);
    return r;
  }
  static void store(float* p, V v) { std::copy(v.v, v.v + W, p); }
  static V set(float w) {
    V r;
    std::fill(r.v, r.v + W, w);
    return r;
  }
  static V add(V a, V b) {
    for (int i = 0; i < W; ++i) a.v[i] = a.v[i] + b.v[i];
    return a;
  }
  static V mul(V a, V b) {
    for (int i = 0; i < W; ++i) a.v[i] = a.v[i] * b.v[i];
    return a;
  }
  static V fma(V a, V b, V c) {  // a * b + c, one rounding per lane
    for (int i = 0; i < W; ++i) c.v[i] = std::fma(a.v[i], b.v[i], c.v[i]);
    return c;
  }
  static V fma(float a, V b, V c) {
    for (int i = 0; i < W; ++i) c.v[i] = std::fma(a, b.v[i], c.v[i]);
    return c;
  }
};

#if defined(__AVX2__) && defined(__FMA__)
struct Lanes8 {
  static constexpr int W = 8;
  using V = __m256;
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V set(float w) { return _mm256_set1_ps(w); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V fma(float a, V b, V c) { return _mm256_fmadd_ps(_mm256_set1_ps(a), b, c); }
};
#else
using Lanes8 = ScalarLanes<8>;
#endif

#if defined(__AVX512F__)
struct Lanes16 {
  static constexpr int W = 16;
  using V = __m512;
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V set(float w) { return _mm512_set1_ps(w); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V fma(float a, V b, V c) { return _mm512_fmadd_ps(_mm512_set1_ps(a), b, c); }
};
using NativeLanes = Lanes16;
#elif defined(__AVX2__) && defined(__FMA__)
using NativeLanes = Lanes8;
#else
using NativeLanes = ScalarLanes<1>;
#endif

// float64: mul_add(s, x, w) = s + x * w, rounded twice (the oracle's order; -ffp-contract=off keeps
// the scalar form unfused too).
#if defined(__AVX512F__)
struct DoubleLanes {
  static constexpr int W = 8;
  using V = __m512d;
  static V zero() { return _mm512_setzero_pd(); }
  static V load(const double* p) { return _mm512_loadu_pd(p); }
  static void store(double* p, V v) { _mm512_storeu_pd(p, v); }
  static V mul_add(V s, double x, V w) { return _mm512_add_pd(s, _mm512_mul_pd(_mm512_set1_pd(x), w)); }
};
#elif defined(__AVX2__)
struct DoubleLanes {
  static constexpr int W = 4;
  using V = __m256d;
  static V zero() { return _mm256_setzero_pd(); }
  static V load(const double* p) { return _mm256_loadu_pd(p); }
  static void store(double* p, V v) { _mm256_storeu_pd(p, v); }
  static V mul_add(V s, double x, V w) { return _mm256_add_pd(s, _mm256_mul_pd(_mm256_set1_pd(x), w)); }
};
#else
struct DoubleLanes {
  static constexpr int W = 4;
  struct V {
    double v[W];
  };
  static V zero() { return V{}; }
  static V load(const double* p) {
    V r;
    std::copy(p, p + W, r.v);
    return r;
  }
  static void store(double* p, V v) { std::copy(v.v, v.v + W, p); }
  static V mul_add(V s, double x, V w) {
    for (int i = 0; i < W; ++i) s.v[i] = s.v[i] + x * w.v[i];
    return s;
  }
};
#endif

}  // namespace rlp::num::simd
