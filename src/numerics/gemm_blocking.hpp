// The packed GEMM machinery shared by the fp32-accumulating and the block-scaled fp8 kernels
// (internal header): register-blocking constants and the micro-kernel, operand packing, the task
// tiles with their buffers, and the small-M (decode) column groups. The order of every fp32
// operation is the one gemm.hpp states; speed comes from register blocking (MR rows x NR columns of
// independent accumulators, vectorized across N) over packed K-major panels, never from reordering
// a sum.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "rlparity/numerics/gemm.hpp"
#include "rlparity/numerics/quantize.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/parallel.hpp"
#include "simd_lanes.hpp"

namespace rlp::num::gemm_detail {

using std::size_t;

// ---- micro-kernel: c[MR][NR] (+)= sum_k xp[k][i] * wp[k][j], one fused chain per (i, j) -------
#if defined(__AVX512F__)
using MicroLanes = simd::Lanes16;
constexpr int MR = 8;
constexpr int NV = 3;
#elif defined(__AVX2__) && defined(__FMA__)
using MicroLanes = simd::Lanes8;
constexpr int MR = 4;
constexpr int NV = 3;
#else
using MicroLanes = simd::ScalarLanes<8>;
constexpr int MR = 4;
constexpr int NV = 2;
#endif
constexpr int kVec = MicroLanes::W;
constexpr int NR = kVec * NV;
constexpr int KC = 128;      // K per packed block (== the fp8 slice, so fp8 packs one slice)
constexpr int MC = MR * 64;  // rows per task tile: a 256-token sequence's GEMM packs each W panel once
constexpr int NC = NR * 4;   // columns per task tile
constexpr int kTile = MR * NR;

// kc steps of c = fma(x, w, c) per lane; c starts at +0 when `zero`, else is loaded.
inline void micro(int kc, const float* __restrict xp, const float* __restrict wp, float* __restrict c,
                  bool zero) {
  using L = MicroLanes;
  typename L::V acc[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) acc[i][v] = zero ? L::zero() : L::load(c + i * NR + v * kVec);
  for (int k = 0; k < kc; ++k) {
    typename L::V b[NV];
    for (int v = 0; v < NV; ++v) b[v] = L::load(wp + k * NR + v * kVec);
    for (int i = 0; i < MR; ++i) {
      const typename L::V a = L::set(xp[k * MR + i]);
      for (int v = 0; v < NV; ++v) acc[i][v] = L::fma(a, b[v], acc[i][v]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) L::store(c + i * NR + v * kVec, acc[i][v]);
}

#if defined(__AVX512BF16__)
// ---- the bf16 dot-product micro-kernel (gemm.hpp: when its bits are the fma chains') ----------
// The same c[MR][NR] tile and chains over bf16 pairs: xp[q][i] and wp[q][j] hold (k, k + 1) =
// (k0 + 2q, k0 + 2q + 1) as one 32-bit word, k in the high half (vdpbf16ps's odd slot, which it
// adds first), k + 1 in the low half (0 past the segment's end: c + 0 = c, as c is never -0).
inline void micro_dot(int kp, const uint32_t* __restrict xp, const uint32_t* __restrict wp,
                      float* __restrict c, bool zero) {
  __m512 acc[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v)
      acc[i][v] = zero ? _mm512_setzero_ps() : _mm512_loadu_ps(c + i * NR + v * kVec);
  for (int q = 0; q < kp; ++q) {
    __m512bh b[NV];
    for (int v = 0; v < NV; ++v) b[v] = (__m512bh)_mm512_loadu_si512(wp + q * NR + v * kVec);
    for (int i = 0; i < MR; ++i) {
      const __m512bh a = (__m512bh)_mm512_set1_epi32(static_cast<int>(xp[q * MR + i]));
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], a, b[v]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(c + i * NR + v * kVec, acc[i][v]);
}
#else
inline void micro_dot(int, const uint32_t*, const uint32_t*, float*, bool) {
  RLP_CHECK(false, "the bf16 dot-product GEMM kernel is not in this build (no AVX-512 BF16)");
}
#endif

// The pair word of (hi, lo) bf16 patterns: k's value in the high half.
inline uint32_t bf16_pair(uint32_t hi, uint32_t lo) { return (hi << 16) | lo; }

// ---- packing: panels of P rows (MR for X, NR for W), K-major inside a panel; rows past the end
// are zero (their results are computed and discarded) -----------------------------------------
template <int P, class Get>
void pack_panels(int r0, int nrows, int kc, float* dst, Get get) {
  const int panels = (nrows + P - 1) / P;
  for (int p = 0; p < panels; ++p) {
    float* d = dst + static_cast<size_t>(p) * static_cast<size_t>(kc) * P;
    for (int i = 0; i < P; ++i) {
      const int r = p * P + i;
      if (r < nrows) {
        get(r0 + r, d + i, kc);  // writes d[k * P] for k < kc
      } else {
        for (int k = 0; k < kc; ++k) d[k * P + i] = 0.0f;
      }
    }
  }
}

// Asks for the cache lines of [p, p + bytes) ahead of use: decode steps stream every weight once, and
// a kernel that widens a slice before its fma chains would otherwise wait for each miss in turn.
// Into L2 (prefetcht1), not as non-temporal: a packed tile asks for the next K slice of up to 192
// rows (48 KiB of bf16) a whole slice ahead, which does not survive in L1 until it is read (on an
// 8B-shaped model's M = 64 GEMMs the non-temporal hint cost 25% of the paths' time).
inline void prefetch_bytes(const void* p, int bytes) {
  const char* c = static_cast<const char*>(p);
  for (int off = 0; off < bytes; off += 64) __builtin_prefetch(c + off, 0, 2);
}

// n fp8 codes -> floats, the same values (and NaN bits) as lut[code], lut = fp8_to_float of the
// kind. For e4m3 the decode is exponent arithmetic, 16 lanes at a time: the 7 magnitude bits
// shifted into a float's exponent/mantissa field read as 2^-127 * (e4m3 value), so one exact
// multiply by 2^120 rebases the exponent (subnormal codes included); the sign bit moves to bit 31
// and the two NaN codes take the table's value. A table lookup per code (what the compiler makes
// of lut[code]) cost more than the fma chains that consume the values.
struct Fp8Decoder {
  const float* lut;
  bool e4m3;
  void operator()(const uint8_t* src, int n, float* dst) const {
    int i = 0;
#if defined(__AVX512F__)
    if (e4m3) {
      const __mmask16 kAll = 0xFFFF;
      const __m512i low7 = _mm512_set1_epi32(0x7f), signbit = _mm512_set1_epi32(0x80);
      const __m512 rebase = _mm512_set1_ps(0x1p120f), nan_pos = _mm512_set1_ps(lut[0x7f]),
                   nan_neg = _mm512_set1_ps(lut[0xff]);
      for (; i + 16 <= n; i += 16) {
        // (maskz forms with a full mask: GCC 12's plain forms trip -Wmaybe-uninitialized)
        const __m512i c =
            _mm512_maskz_cvtepu8_epi32(kAll, _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
        const __m512i mag = _mm512_and_si512(c, low7);
        const __m512 v = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, mag, 20)), rebase);
        __m512 r = _mm512_castsi512_ps(_mm512_or_si512(
            _mm512_castps_si512(v), _mm512_maskz_slli_epi32(kAll, _mm512_and_si512(c, signbit), 24)));
        r = _mm512_mask_mov_ps(r, _mm512_cmpeq_epi32_mask(c, low7), nan_pos);
        r = _mm512_mask_mov_ps(r, _mm512_cmpeq_epi32_mask(c, _mm512_set1_epi32(0xff)), nan_neg);
        _mm512_storeu_ps(dst + i, r);
      }
    }
#endif
    for (; i < n; ++i) dst[i] = lut[src[i]];
  }
};

// Where the kernels read an operand's rows (row-major, K per row): floats in place, or 16-bit
// patterns or fp8 codes decoded into the caller's buffer (len <= KC). Either way the kernels see
// the same float values.
struct F32Rows {
  const float* W;
  int K;
  const float* slice(int n, int k0, int, float*) const {
    return W + static_cast<size_t>(n) * static_cast<size_t>(K) + static_cast<size_t>(k0);
  }
  void prefetch(int n, int k0, int len) const { prefetch_bytes(slice(n, k0, len, nullptr), len * 4); }
};
struct Half16Rows {
  const uint16_t* W;
  int K;
  Half16 fmt;
  const float* slice(int n, int k0, int len, float* buf) const {
    widen_half16(W + static_cast<size_t>(n) * static_cast<size_t>(K) + static_cast<size_t>(k0), len, fmt,
                 buf);
    return buf;
  }
  void prefetch(int n, int k0, int len) const {
    prefetch_bytes(W + static_cast<size_t>(n) * static_cast<size_t>(K) + static_cast<size_t>(k0), len * 2);
  }
  float widen1(const uint16_t* h) const {
    float v = 0.0f;
    widen_half16(h, 1, fmt, &v);
    return v;
  }
#if defined(__AVX512BF16__)
  // 32 bf16 patterns (k, k + 1 in each word's low, high half); bf16 weights only.
  __m512i pairs16(const uint16_t* h) const { return _mm512_loadu_si512(h); }
#endif
#if defined(__AVX512F__)
  __m512 widen16(const uint16_t* h) const {
    const __mmask16 all = 0xFFFF;
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h));
    return fmt == Half16::bf16
               ? _mm512_castsi512_ps(_mm512_maskz_slli_epi32(all, _mm512_maskz_cvtepu16_epi32(all, v), 16))
               : _mm512_maskz_cvtph_ps(all, v);
  }
#endif
};
struct Fp8Rows {
  const uint8_t* W;
  int K;
  const Fp8Decoder& decode;
  const float* slice(int n, int k0, int len, float* buf) const {
    decode(W + static_cast<size_t>(n) * static_cast<size_t>(K) + static_cast<size_t>(k0), len, buf);
    return buf;
  }
  void prefetch(int n, int k0, int len) const {
    prefetch_bytes(W + static_cast<size_t>(n) * static_cast<size_t>(K) + static_cast<size_t>(k0), len);
  }
  float widen1(const uint8_t* c) const {
    float v = 0.0f;
    decode(c, 1, &v);
    return v;
  }
#if defined(__AVX512BF16__)
  // 32 codes as bf16 patterns, pairs as Half16Rows::pairs16 gives them: every e4m3/e5m2 value is a
  // bf16 value, so the conversion of the decoded floats is exact (NaN codes: the caller's guard).
  __m512i pairs16(const uint8_t* c) const {
    alignas(64) float v[32];
    decode(c, 32, v);
    return (__m512i)_mm512_cvtne2ps_pbh(_mm512_load_ps(v + 16), _mm512_load_ps(v));
  }
#endif
#if defined(__AVX512F__)
  __m512 widen16(const uint8_t* c) const {
    alignas(64) float v[16];
    decode(c, 16, v);
    return _mm512_load_ps(v);
  }
#endif
};

// Packs rows r0.. of an operand for [k0, k0 + kc) and prefetches each row's next KC-slice: a tile walks K
// slice by slice, and with a short run per row (a few cache lines) across hundreds of rows the
// hardware prefetcher does not follow, so every row's first line would be a miss.
template <int P, class Rows>
void pack_rows(const Rows& src, int r0, int nrows, int k0, int kc, float* dst) {
  float row[KC];
  const int next = std::min(KC, src.K - (k0 + kc));
  pack_panels<P>(r0, nrows, kc, dst, [&](int r, float* d, int n) {
    if (next > 0) src.prefetch(r, k0 + kc, next);
    const float* s = src.slice(r, k0, n, row);
    for (int k = 0; k < n; ++k) d[k * P] = s[k];
  });
}

#if defined(__AVX512F__)
// 16 rows of 16 floats -> 16 columns: c[j][i] = r[i][j] (unpack, 64-bit shuffle, two 128-bit
// lane shuffles).
inline void transpose16(const __m512 r[16], __m512 c[16]) {
  const __mmask16 all = 0xFFFF;  // maskz forms: GCC 12's plain ones trip -Wmaybe-uninitialized
  __m512 t[16], u[16];
  for (int m = 0; m < 8; ++m) {
    t[2 * m] = _mm512_maskz_unpacklo_ps(all, r[2 * m], r[2 * m + 1]);
    t[2 * m + 1] = _mm512_maskz_unpackhi_ps(all, r[2 * m], r[2 * m + 1]);
  }
  for (int q = 0; q < 4; ++q) {
    u[4 * q + 0] = _mm512_maskz_shuffle_ps(all, t[4 * q + 0], t[4 * q + 2], 0x44);
    u[4 * q + 1] = _mm512_maskz_shuffle_ps(all, t[4 * q + 0], t[4 * q + 2], 0xEE);
    u[4 * q + 2] = _mm512_maskz_shuffle_ps(all, t[4 * q + 1], t[4 * q + 3], 0x44);
    u[4 * q + 3] = _mm512_maskz_shuffle_ps(all, t[4 * q + 1], t[4 * q + 3], 0xEE);
  }
  // u[4q + e], 128-bit lane L: rows 4q..4q+3 of column 4L + e.
  for (int e = 0; e < 4; ++e) {
    const __m512 v0 = _mm512_maskz_shuffle_f32x4(all, u[e], u[4 + e], 0x88),
                 v1 = _mm512_maskz_shuffle_f32x4(all, u[e], u[4 + e], 0xDD);
    const __m512 v2 = _mm512_maskz_shuffle_f32x4(all, u[8 + e], u[12 + e], 0x88),
                 v3 = _mm512_maskz_shuffle_f32x4(all, u[8 + e], u[12 + e], 0xDD);
    c[0 + e] = _mm512_maskz_shuffle_f32x4(all, v0, v2, 0x88);
    c[8 + e] = _mm512_maskz_shuffle_f32x4(all, v0, v2, 0xDD);
    c[4 + e] = _mm512_maskz_shuffle_f32x4(all, v1, v3, 0x88);
    c[12 + e] = _mm512_maskz_shuffle_f32x4(all, v1, v3, 0xDD);
  }
}

// pack_rows for 16-bit weights and fp8 codes, 16 rows x 16 k at a time: widened (decoded) and
// transposed in registers, so each k's 16 values are stored as one vector instead of 16 scattered
// floats. Same values, same layout as the generic pack_rows (rows past nrows are zero).
template <int P, class Rows>
requires(P % 16 == 0 && (std::is_same_v<Rows, Half16Rows> ||
                         std::is_same_v<Rows, Fp8Rows>)) void pack_rows(const Rows& src, int r0, int nrows,
                                                                        int k0, int kc, float* dst) {
  using Elem = std::remove_cv_t<std::remove_pointer_t<decltype(src.W)>>;
  const int next = std::min(KC, src.K - (k0 + kc));
  const int panels = (nrows + P - 1) / P;
  for (int p = 0; p < panels; ++p) {
    float* d = dst + static_cast<size_t>(p) * static_cast<size_t>(kc) * P;
    for (int g = 0; g < P; g += 16) {
      const Elem* rows[16];
      int valid = 0;
      for (int i = 0; i < 16; ++i) {
        const int r = p * P + g + i;
        rows[i] = nullptr;
        if (r < nrows) {
          rows[i] =
              src.W + static_cast<size_t>(r0 + r) * static_cast<size_t>(src.K) + static_cast<size_t>(k0);
          if (next > 0) src.prefetch(r0 + r, k0 + kc, next);
          ++valid;
        }
      }
      int k = 0;
      if (valid > 0)
        for (; k + 16 <= kc; k += 16) {
          __m512 r[16], c[16];
          for (int i = 0; i < 16; ++i) r[i] = rows[i] ? src.widen16(rows[i] + k) : _mm512_setzero_ps();
          transpose16(r, c);
          for (int j = 0; j < 16; ++j) _mm512_storeu_ps(d + static_cast<size_t>(k + j) * P + g, c[j]);
        }
      for (; k < kc; ++k)
        for (int i = 0; i < 16; ++i) {
          d[static_cast<size_t>(k) * P + static_cast<size_t>(g + i)] =
              rows[i] ? src.widen1(rows[i] + k) : 0.0f;
        }
    }
  }
}
#endif

// The pair panels of micro_dot: rows r0.. of an operand (whose values the caller has checked are
// bf16 values: bf16 patterns, fp8 codes, or floats holding bf16 values) for [k0, k0 + kc), panel
// p's word (q, i) at dst[p * kp * P + q * P + i], kp = ceil(kc / 2), rows past the end zero.
template <int P, class Rows>
void pack_pairs(const Rows& src, int r0, int nrows, int k0, int kc, uint32_t* dst) {
  const int kp = (kc + 1) / 2, panels = (nrows + P - 1) / P;
  float row[KC];
  for (int p = 0; p < panels; ++p) {
    uint32_t* d = dst + static_cast<size_t>(p) * static_cast<size_t>(kp) * P;
    for (int i = 0; i < P; ++i) {
      const int r = p * P + i;
      const float* x = r < nrows ? src.slice(r0 + r, k0, kc, row) : nullptr;
      for (int q = 0; q < kp; ++q) {
        const int k = 2 * q;
        d[q * P + i] = x ? bf16_pair(f32_bits(x[k]) >> 16, k + 1 < kc ? f32_bits(x[k + 1]) >> 16 : 0u) : 0u;
      }
    }
  }
}

#if defined(__AVX512BF16__)
// The same of bf16 weights or fp8 codes, 16 rows x 16 pairs at a time: each row's 32 values as 16
// words in memory order (Rows::pairs16: k in the low half), halves swapped, then transposed in
// registers (transpose16).
template <int P, class Rows>
requires(P % 16 == 0 && (std::is_same_v<Rows, Half16Rows> ||
                         std::is_same_v<Rows, Fp8Rows>)) void pack_pairs(const Rows& src, int r0, int nrows,
                                                                         int k0, int kc, uint32_t* dst) {
  using Elem = std::remove_cv_t<std::remove_pointer_t<decltype(src.W)>>;
  const int kp = (kc + 1) / 2, full = kc / 2, panels = (nrows + P - 1) / P;
  const int next = std::min(KC, src.K - (k0 + kc));
  const __mmask16 all = 0xFFFF;  // maskz form: GCC 12's plain one trips -Wmaybe-uninitialized
  for (int p = 0; p < panels; ++p) {
    uint32_t* d = dst + static_cast<size_t>(p) * static_cast<size_t>(kp) * P;
    for (int g = 0; g < P; g += 16) {
      const Elem* rows[16];
      for (int i = 0; i < 16; ++i) {
        const int r = p * P + g + i;
        rows[i] = r < nrows ? src.W + static_cast<size_t>(r0 + r) * static_cast<size_t>(src.K) + k0 : nullptr;
        if (rows[i] && next > 0) src.prefetch(r0 + r, k0 + kc, next);
      }
      int q = 0;
      for (; q + 16 <= full; q += 16) {
        __m512 r[16], c[16];
        for (int i = 0; i < 16; ++i)
          r[i] = rows[i] ? _mm512_castsi512_ps(_mm512_maskz_rol_epi32(all, src.pairs16(rows[i] + 2 * q), 16))
                         : _mm512_setzero_ps();
        transpose16(r, c);
        for (int j = 0; j < 16; ++j)
          _mm512_storeu_ps(reinterpret_cast<float*>(d + static_cast<size_t>(q + j) * P + g), c[j]);
      }
      for (; q < kp; ++q)
        for (int i = 0; i < 16; ++i) {
          const int k = 2 * q;
          const auto hi16 = [&](int kk) { return f32_bits(src.widen1(rows[i] + kk)) >> 16; };
          d[static_cast<size_t>(q) * P + static_cast<size_t>(g + i)] =
              rows[i] ? bf16_pair(hi16(k), k + 1 < kc ? hi16(k + 1) : 0u) : 0u;
        }
    }
  }
}
#endif

// ---- task tiles ---------------------------------------------------------------------------------
// Buffers of a task tile in micro-tile order: micro-tile (ir, jr) at ((jr * nir) + ir) * kTile;
// sa/sb: the fp8 kernel's row and column scales of one slice.
struct TileBufs {
  std::vector<float> wp, acc, racc, tot, sa, sb;
  std::vector<uint32_t> wpairs;  // micro_dot's W panels
  TileBufs()
      : wp(static_cast<size_t>(NC) * KC),
        acc(static_cast<size_t>(MC) * NC),
        racc(acc.size()),
        tot(acc.size()),
        sa(static_cast<size_t>(MC)),
        sb(static_cast<size_t>(NC)),
        wpairs(static_cast<size_t>(NC) * KC / 2) {}
};

// X's panels for one row tile over all of K: packed by the first tile of that row tile in a task's
// range and reused by the tiles after it (a task's tiles are consecutive: same rows, next columns),
// instead of being packed again for every column tile. Segment [k0, k0 + kc) sits at nir*MR*k0
// (floats; micro_dot's pair words use the first half of that room).
template <class T>
struct RowPanelsOf {
  std::vector<T> buf;
  int m0 = -1;
  // True when the row tile at m0 must be packed now (a new row tile, or the first of a range).
  bool begin(int row0, int nir, int K) {
    if (row0 == m0) return false;
    m0 = row0;
    const size_t need = static_cast<size_t>(nir) * MR * static_cast<size_t>(K);
    if (buf.size() < need) buf.resize(need);
    return true;
  }
  T* at(int nir, int k0) { return buf.data() + static_cast<size_t>(nir) * MR * static_cast<size_t>(k0); }
};

// One task tile: rows [m0, m0 + mrows) x columns [n0, n0 + ncols), nir x njr micro-tiles filling
// the first `used` floats of each buffer; pack_x when X's panels of these rows must be packed.
struct Tile {
  int m0, n0, mrows, ncols, nir, njr;
  size_t used;
  bool pack_x;
};

// body(tile, bufs, row_panels) (X's panels of Panel: float, or micro_dot's pair words) for every MC x NC task
// tile of an M x N product, in parallel; a task's tiles are consecutive (same rows, next columns), so X's
// panels are reused along a row.
template <class Panel = float, class Body>
void for_each_tile(int M, int N, int K, const Body& body) {
  const int nt = (N + NC - 1) / NC;
  const size_t count = static_cast<size_t>((M + MC - 1) / MC) * static_cast<size_t>(nt);
  rlp::parallel_for(count, 1, [&](size_t t0, size_t t1) {
    // Reused across calls on the same thread: decode runs thousands of small GEMMs.
    thread_local TileBufs b;
    thread_local RowPanelsOf<Panel> xr;
    xr.m0 = -1;  // X differs from the previous call's
    for (size_t t = t0; t < t1; ++t) {
      Tile tl{};
      tl.m0 = static_cast<int>(t / static_cast<size_t>(nt)) * MC;
      tl.n0 = static_cast<int>(t % static_cast<size_t>(nt)) * NC;
      tl.mrows = std::min(MC, M - tl.m0);
      tl.ncols = std::min(NC, N - tl.n0);
      tl.nir = (tl.mrows + MR - 1) / MR;
      tl.njr = (tl.ncols + NR - 1) / NR;
      tl.used = static_cast<size_t>(tl.nir) * static_cast<size_t>(tl.njr) * kTile;
      tl.pack_x = xr.begin(tl.m0, tl.nir, K);
      body(tl, b, xr);
    }
  });
}

// The in-order sums of chunk and split-K partials: dst = src for the first, else dst + src.
inline void copy_or_add(std::vector<float>& dst, const std::vector<float>& src, size_t n, bool first) {
  if (first)
    std::copy(src.begin(), src.begin() + static_cast<std::ptrdiff_t>(n), dst.begin());
  else
    for (size_t i = 0; i < n; ++i) dst[i] = dst[i] + src[i];
}

// d[j] = round_out(s[j], out) for j < n; bf16 (float_to_bf16_bits's RNE and canonical NaN) and fp32
// 16 lanes at a time: every output of a GEMM passes here once.
inline void round_out_row(const float* s, float* d, int n, OutRound out) {
  int j = 0;
#if defined(__AVX512F__)
  if (out != OutRound::fp16) {
    const __mmask16 all = 0xFFFF;  // maskz forms: GCC 12's plain ones trip -Wmaybe-uninitialized
    const __m512i one = _mm512_set1_epi32(1), half_minus = _mm512_set1_epi32(0x7FFF),
                  high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u)),
                  abs = _mm512_set1_epi32(0x7FFFFFFF), inf = _mm512_set1_epi32(0x7F800000),
                  nan = _mm512_set1_epi32(0x7FFF0000);
    for (; j < n; j += 16) {
      const __mmask16 m = n - j >= 16 ? all : static_cast<__mmask16>((1u << (n - j)) - 1u);
      __m512i u = _mm512_maskz_loadu_epi32(m, s + j);
      if (out == OutRound::bf16) {
        const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs), inf);
        const __m512i odd = _mm512_and_si512(_mm512_maskz_srli_epi32(all, u, 16), one);
        u = _mm512_and_si512(_mm512_add_epi32(u, _mm512_add_epi32(half_minus, odd)), high);
        u = _mm512_mask_mov_epi32(u, is_nan, nan);
      }
      _mm512_mask_storeu_epi32(d + j, m, u);
    }
    return;
  }
#endif
  for (; j < n; ++j) d[j] = round_out(s[j], out);
}

// Writes the tile's `src` to Y, rounding per `out`.
inline void write_back(const float* src, float* Y, int N, int m0, int mrows, int n0, int ncols, int nir,
                       OutRound out) {
  for (int jr = 0; jr * NR < ncols; ++jr)
    for (int ir = 0; ir * MR < mrows; ++ir) {
      const float* t =
          src + (static_cast<size_t>(jr) * static_cast<size_t>(nir) + static_cast<size_t>(ir)) * kTile;
      for (int i = 0; i < MR && ir * MR + i < mrows; ++i) {
        float* y = Y + static_cast<size_t>(m0 + ir * MR + i) * static_cast<size_t>(N) +
                   static_cast<size_t>(n0 + jr * NR);
        round_out_row(t + i * NR, y, std::min(NR, ncols - jr * NR), out);
      }
    }
}

inline void check_cfg(const GemmConfig& cfg) {
  RLP_CHECK(cfg.split_k >= 1, "GemmConfig.split_k must be >= 1, got {}", cfg.split_k);
  RLP_CHECK(cfg.k_chunk >= 0, "GemmConfig.k_chunk must be >= 0, got {}", cfg.k_chunk);
}
// ---- small M (decode steps): no packing (see gemm_f32acc.cpp) ----------------------------------
constexpr int kSmallCols = 8;  // columns in flight: independent chains hide the fma latency

// X (M x K, M <= W; element (m, k) = x(m * K + k)) as k-major lanes: xt[k * W + m], rows past M
// are zero.
template <int W, class Get>
std::vector<float> transpose_rows(int M, int K, Get x) {
  std::vector<float> xt(static_cast<size_t>(K) * W, 0.0f);
  for (int m = 0; m < M; ++m)
    for (int k = 0; k < K; ++k) {
      const size_t i = static_cast<size_t>(m) * static_cast<size_t>(K) + static_cast<size_t>(k);
      xt[static_cast<size_t>(k) * W + static_cast<size_t>(m)] = x(i);
    }
  return xt;
}

// Column groups of kSmallCols over N for parallel_for; the last group may be short (its missing
// columns repeat the last column and are not written).
template <class Body>
void for_column_groups(int N, const Body& body) {
  const size_t groups = static_cast<size_t>((N + kSmallCols - 1) / kSmallCols);
  rlp::parallel_for(groups, 16, [&](size_t g0, size_t g1) {
    for (size_t g = g0; g < g1; ++g) {
      const int n0 = static_cast<int>(g) * kSmallCols;
      int cols[kSmallCols];
      for (int j = 0; j < kSmallCols; ++j) cols[j] = std::min(n0 + j, N - 1);
      body(n0, std::min(kSmallCols, N - n0), cols);
    }
  });
}

// Y[m][n0 + j] = round(acc[j] lane m) for the group's real columns and rows.
template <class L>
void store_group(const typename L::V* acc, float* Y, int M, int N, int n0, int ncols, OutRound out) {
  float t[L::W];
  for (int j = 0; j < ncols; ++j) {
    L::store(t, acc[j]);
    for (int m = 0; m < M; ++m)
      Y[static_cast<size_t>(m) * static_cast<size_t>(N) + static_cast<size_t>(n0 + j)] = round_out(t[m], out);
  }
}

}  // namespace rlp::num::gemm_detail
