// When the bf16 dot-product GEMM kernel (vdpbf16ps) gives the fma chains' bits: the operands'
// exponent spans, the condition on them (gemm.hpp, gemm_f32acc), and a startup check that this
// CPU's instruction does what the Intel SDM states.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "rlparity/numerics/gemm.hpp"
#include "rlparity/numerics/host_device.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace rlp::num {
namespace {

// The span from the extrema of the nonzero values' 8-bit exponent fields (bf16 and float share the
// field; lo = 0xFF when every value is zero) and whether a value was denormal, Inf/NaN or not bf16.
Bf16Span span_of_fields(uint32_t lo, uint32_t hi, bool special) {
  Bf16Span s;
  s.normal = !special && hi != 0xFFu;
  if (hi != 0) {
    s.emin = static_cast<int>(lo) - 127;
    s.emax = static_cast<int>(hi) - 127;
  }
  return s;
}

}  // namespace

// A branch-free loop the compiler vectorizes (a prepared weight is scanned once).
Bf16Span bf16_span(const uint16_t* bits, std::size_t n) {
  uint32_t lo = 0xFFu, hi = 0, denormal = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const uint32_t f = (bits[i] >> 7) & 0xFFu;
    denormal |= (f == 0 && (bits[i] & 0x7Fu) != 0) ? 1u : 0u;
    lo = std::min(lo, f == 0 ? 0xFFu : f);
    hi = std::max(hi, f);
  }
  return span_of_fields(lo, hi, denormal != 0);
}

Bf16Span bf16_span(const float* v, std::size_t n) {
  uint32_t lo = 0xFFu, hi = 0, bad = 0;
  std::size_t i = 0;
#if defined(__AVX512F__)
  // The same reductions 16 lanes at a time (every GEMM call with M > 16 scans its X).
  {
    const __mmask16 all = 0xFFFF;  // maskz forms: GCC 12's plain ones trip -Wmaybe-uninitialized
    const __m512i ff = _mm512_set1_epi32(0xFF), low16 = _mm512_set1_epi32(0xFFFF),
                  mant = _mm512_set1_epi32(0x7FFFFF), zero = _mm512_setzero_si512();
    __m512i vlo = ff, vhi = zero, vbad = zero;
    for (; i + 16 <= n; i += 16) {
      const __m512i u = _mm512_loadu_si512(v + i);
      const __m512i f = _mm512_and_si512(_mm512_maskz_srli_epi32(all, u, 23), ff);
      const __mmask16 z = _mm512_cmpeq_epi32_mask(f, zero);
      vlo = _mm512_maskz_min_epu32(all, vlo, _mm512_mask_mov_epi32(f, z, ff));
      vhi = _mm512_maskz_max_epu32(all, vhi, f);
      vbad = _mm512_or_si512(vbad, _mm512_and_si512(u, low16));
      vbad = _mm512_or_si512(vbad, _mm512_maskz_and_epi32(z, u, mant));
    }
    alignas(64) uint32_t l[16], h[16], b[16];
    _mm512_store_si512(l, vlo);
    _mm512_store_si512(h, vhi);
    _mm512_store_si512(b, vbad);
    for (int j = 0; j < 16; ++j) {
      lo = std::min(lo, l[j]);
      hi = std::max(hi, h[j]);
      bad |= b[j];
    }
  }
#endif
  for (; i < n; ++i) {
    const uint32_t u = f32_bits(v[i]), f = (u >> 23) & 0xFFu;
    bad |= (u & 0xFFFFu) | ((f == 0 && (u & 0x7FFFFFu) != 0) ? 1u : 0u);
    lo = std::min(lo, f == 0 ? 0xFFu : f);
    hi = std::max(hi, f);
  }
  return span_of_fields(lo, hi, bad != 0);
}

bool bf16_dot_exact(const Bf16Span& x, const Bf16Span& w, int K) {
  if (!x.normal || !w.normal) return false;
  if (x.emin > x.emax || w.emin > w.emax) return true;  // every product is +-0
  // Products are multiples of 2^(e_x - 7) * 2^(e_w - 7): with e_x + e_w >= -112, every partial sum
  // (a rounded sum of such multiples is one) is 0 or at least 2^-126, a normal number.
  if (x.emin + w.emin < -112) return false;
  // |partial sum| < K * 2^(emax_x + 1) * 2^(emax_w + 1) <= 2^127: nothing overflows.
  const int log2k = K <= 1 ? 0 : static_cast<int>(std::ceil(std::log2(static_cast<double>(K))));
  return log2k + x.emax + w.emax + 2 <= 127;
}

bool bf16_dot_kernel_available() {
#if defined(__AVX512BF16__)
  // vdpbf16ps against its two fma steps on values with rounding in every step (exponents spread
  // over 2^-20..2^20, random signs and mantissas): any other order, a fused sum or truncation fails
  // this in about one lane in ten (measured on 32M lanes of such data).
  static const bool ok = [] {
    uint64_t state = 0x9E3779B97F4A7C15u;
    auto next = [&state] {
      state ^= state << 13;
      state ^= state >> 7;
      state ^= state << 17;
      return state;
    };
    auto bf16_value = [&] {
      const uint32_t r = static_cast<uint32_t>(next());
      return static_cast<uint16_t>(((r & 1u) << 15) | ((107u + (r >> 1) % 40u) << 7) | ((r >> 8) & 0x7Fu));
    };
    for (int rep = 0; rep < 256; ++rep) {
      alignas(64) uint16_t a[32], b[32];
      alignas(64) float c[16], got[16];
      for (int i = 0; i < 32; ++i) {
        a[i] = bf16_value();
        b[i] = bf16_value();
      }
      for (float& x : c)
        x = std::ldexp(static_cast<float>(static_cast<int32_t>(next())) * 0x1p-31f,
                       static_cast<int>(next() % 40) - 20);
      const __m512 acc =
          _mm512_dpbf16_ps(_mm512_load_ps(c), (__m512bh)_mm512_load_si512(a), (__m512bh)_mm512_load_si512(b));
      _mm512_store_ps(got, acc);
      for (int i = 0; i < 16; ++i) {
        const auto val = [](uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); };
        const float odd = std::fma(val(a[2 * i + 1]), val(b[2 * i + 1]), c[i]);
        const float both = std::fma(val(a[2 * i]), val(b[2 * i]), odd);
        if (f32_bits(both) != f32_bits(got[i])) return false;
      }
    }
    return true;
  }();
  return ok;
#else
  return false;
#endif
}

}  // namespace rlp::num
