// 16-bit float bit patterns widened to float, vectorized where the machine has AVX-512: what the
// GEMMs' weight slices, the embedding lookups and the fp8 refit's block rows read.
#include <cstdint>

#include "rlparity/numerics/formats.hpp"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace rlp::num {

void widen_half16(const uint16_t* src, int n, Half16 fmt, float* dst) {
  int i = 0;
#if defined(__AVX512F__)
  const __mmask16 all = 0xFFFF;  // maskz forms: GCC 12's plain ones trip -Wmaybe-uninitialized
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    // fp16: the F16C conversion is exact and quiets NaNs as fp16_bits_to_float does (a test
    // checks all 65536 patterns).
    const __m512 v =
        fmt == Half16::bf16
            ? _mm512_castsi512_ps(_mm512_maskz_slli_epi32(all, _mm512_maskz_cvtepu16_epi32(all, h), 16))
            : _mm512_maskz_cvtph_ps(all, h);
    _mm512_storeu_ps(dst + i, v);
  }
#endif
  for (; i < n; ++i) dst[i] = half16_bits_to_float(src[i], fmt);
}

}  // namespace rlp::num
