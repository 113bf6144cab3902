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
// Users: the GEMM kernels (gemm_*.cpp) and the attention micro-kernels (src/model/ops/attention.cpp,
// NativeLanes); inspect's 16-lane block kernel uses GCC vector extensions instead (fixed width,
// whole-vector compares and selects), which these traits do not replace.
#pragma once
#include <algorithm>
#include <cmath>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace rlp::num::simd {

template <int Width, class T = float>
struct ScalarLanes {
  static constexpr int W = Width;
  struct V {
    T v[Width];
  };
  static V zero() { return V{}; }
  static V load(const T* p) {
    V r;
    std::copy(p, p + W, r.v);
    return r;
  }
  static void store(T* p, V v) { std::copy(v.v, v.v + W, p); }
  static V set(T w) {
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
  static V fma(T a, V b, V c) {
    for (int i = 0; i < W; ++i) c.v[i] = std::fma(a, b.v[i], c.v[i]);
    return c;
  }
  static V mul_add(V s, T x, V w) {  // s + x * w, two roundings
    for (int i = 0; i < W; ++i) s.v[i] = s.v[i] + x * w.v[i];
    return s;
  }
};

// One x86 width: P is the intrinsics' prefix (_mm256, _mm512), the same operations at each.
#define RLP_X86_FLOAT_LANES(Name, Width, Vec, P)                                   \
  struct Name {                                                                    \
    static constexpr int W = Width;                                                \
    using V = Vec;                                                                 \
    static V zero() { return P##_setzero_ps(); }                                   \
    static V load(const float* p) { return P##_loadu_ps(p); }                      \
    static void store(float* p, V v) { P##_storeu_ps(p, v); }                      \
    static V set(float w) { return P##_set1_ps(w); }                               \
    static V add(V a, V b) { return P##_add_ps(a, b); }                            \
    static V mul(V a, V b) { return P##_mul_ps(a, b); }                            \
    static V fma(V a, V b, V c) { return P##_fmadd_ps(a, b, c); }                  \
    static V fma(float a, V b, V c) { return P##_fmadd_ps(P##_set1_ps(a), b, c); } \
  }

#if defined(__AVX2__) && defined(__FMA__)
RLP_X86_FLOAT_LANES(Lanes8, 8, __m256, _mm256);
#else
using Lanes8 = ScalarLanes<8>;
#endif

#if defined(__AVX512F__)
RLP_X86_FLOAT_LANES(Lanes16, 16, __m512, _mm512);
using NativeLanes = Lanes16;
#elif defined(__AVX2__) && defined(__FMA__)
using NativeLanes = Lanes8;
#else
using NativeLanes = ScalarLanes<1>;
#endif
#undef RLP_X86_FLOAT_LANES

// float64: mul_add(s, x, w) = s + x * w, rounded twice (the oracle's order; -ffp-contract=off keeps
// the scalar form unfused too).
#define RLP_X86_DOUBLE_LANES(Width, Vec, P)                                                       \
  struct DoubleLanes {                                                                            \
    static constexpr int W = Width;                                                               \
    using V = Vec;                                                                                \
    static V zero() { return P##_setzero_pd(); }                                                  \
    static V load(const double* p) { return P##_loadu_pd(p); }                                    \
    static void store(double* p, V v) { P##_storeu_pd(p, v); }                                    \
    static V mul_add(V s, double x, V w) { return P##_add_pd(s, P##_mul_pd(P##_set1_pd(x), w)); } \
  }
#if defined(__AVX512F__)
RLP_X86_DOUBLE_LANES(8, __m512d, _mm512);
#elif defined(__AVX2__)
RLP_X86_DOUBLE_LANES(4, __m256d, _mm256);
#else
using DoubleLanes = ScalarLanes<4, double>;
#endif
#undef RLP_X86_DOUBLE_LANES

}  // namespace rlp::num::simd
