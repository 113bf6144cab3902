// GEMM emulation kernels. The order of every fp32 operation is the one gemm.hpp states; speed
// comes from register blocking (MR rows x NR columns of independent accumulators, vectorized
// across N) over packed K-major panels, never from reordering a sum.
#include "rlparity/numerics/gemm.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "rlparity/util/error.hpp"
#include "rlparity/util/parallel.hpp"

namespace rlp::num {
namespace {

using std::size_t;

// ---- micro-kernel: c[MR][NR] (+)= sum_k xp[k][i] * wp[k][j], one fused chain per (i, j) -------
#if defined(__AVX512F__)
constexpr int kVec = 16;
constexpr int MR = 8;
constexpr int NV = 3;
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int kVec = 8;
constexpr int MR = 4;
constexpr int NV = 3;
#else
constexpr int kVec = 8;
constexpr int MR = 4;
constexpr int NV = 2;
#endif
constexpr int NR = kVec * NV;
constexpr int KC = 128;      // K per packed block (== the fp8 slice, so fp8 packs one slice)
constexpr int MC = MR * 24;  // rows per task tile
constexpr int NC = NR * 4;   // columns per task tile
constexpr int kTile = MR * NR;

// kc steps of c = fma(x, w, c) per lane; c starts at +0 when `zero`, else is loaded.
inline void micro(int kc, const float* __restrict xp, const float* __restrict wp, float* __restrict c,
                  bool zero) {
#if defined(__AVX512F__)
  __m512 acc[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v)
      acc[i][v] = zero ? _mm512_setzero_ps() : _mm512_loadu_ps(c + i * NR + v * kVec);
  for (int k = 0; k < kc; ++k) {
    __m512 b[NV];
    for (int v = 0; v < NV; ++v) b[v] = _mm512_loadu_ps(wp + k * NR + v * kVec);
    for (int i = 0; i < MR; ++i) {
      const __m512 a = _mm512_set1_ps(xp[k * MR + i]);
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(a, b[v], acc[i][v]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(c + i * NR + v * kVec, acc[i][v]);
#elif defined(__AVX2__) && defined(__FMA__)
  __m256 acc[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v)
      acc[i][v] = zero ? _mm256_setzero_ps() : _mm256_loadu_ps(c + i * NR + v * kVec);
  for (int k = 0; k < kc; ++k) {
    __m256 b[NV];
    for (int v = 0; v < NV; ++v) b[v] = _mm256_loadu_ps(wp + k * NR + v * kVec);
    for (int i = 0; i < MR; ++i) {
      const __m256 a = _mm256_set1_ps(xp[k * MR + i]);
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_fmadd_ps(a, b[v], acc[i][v]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(c + i * NR + v * kVec, acc[i][v]);
#else
  float acc[MR][NR];
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) acc[i][j] = zero ? 0.0f : c[i * NR + j];
  for (int k = 0; k < kc; ++k)
    for (int i = 0; i < MR; ++i) {
      const float a = xp[k * MR + i];
      for (int j = 0; j < NR; ++j) acc[i][j] = std::fma(a, wp[k * NR + j], acc[i][j]);
    }
  for (int i = 0; i < MR; ++i)
    for (int j = 0; j < NR; ++j) c[i * NR + j] = acc[i][j];
#endif
}

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
inline void prefetch_bytes(const void* p, int bytes) {
  const char* c = static_cast<const char*>(p);
  for (int off = 0; off < bytes; off += 64) __builtin_prefetch(c + off, 0, 0);
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

// pack_rows for 16-bit weights, 16 rows x 16 k at a time: widened and transposed in registers, so
// each k's 16 values are stored as one vector instead of 16 scattered floats. Same values, same
// layout as the generic pack_rows (rows past nrows are zero).
template <int P>
requires(P % 16 == 0) void pack_rows(const Half16Rows& src, int r0, int nrows, int k0, int kc, float* dst) {
  const __mmask16 all = 0xFFFF;
  auto widen16 = [&](const uint16_t* h) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(h));
    return src.fmt == Half16::bf16
               ? _mm512_castsi512_ps(_mm512_maskz_slli_epi32(all, _mm512_maskz_cvtepu16_epi32(all, v), 16))
               : _mm512_maskz_cvtph_ps(all, v);
  };
  const int next = std::min(KC, src.K - (k0 + kc));
  const int panels = (nrows + P - 1) / P;
  for (int p = 0; p < panels; ++p) {
    float* d = dst + static_cast<size_t>(p) * static_cast<size_t>(kc) * P;
    for (int g = 0; g < P; g += 16) {
      const uint16_t* rows[16];
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
          for (int i = 0; i < 16; ++i) r[i] = rows[i] ? widen16(rows[i] + k) : _mm512_setzero_ps();
          transpose16(r, c);
          for (int j = 0; j < 16; ++j) _mm512_storeu_ps(d + static_cast<size_t>(k + j) * P + g, c[j]);
        }
      for (; k < kc; ++k)
        for (int i = 0; i < 16; ++i) {
          float v = 0.0f;
          if (rows[i]) widen_half16(rows[i] + k, 1, src.fmt, &v);
          d[static_cast<size_t>(k) * P + static_cast<size_t>(g + i)] = v;
        }
    }
  }
}
#endif

// Even split of n items into parts: the first (n % parts) parts get one more.

struct TileGrid {
  int mt, nt;
  TileGrid(int M, int N) : mt((M + MC - 1) / MC), nt((N + NC - 1) / NC) {}
  size_t count() const { return static_cast<size_t>(mt) * static_cast<size_t>(nt); }
};

// Buffers of a task tile in micro-tile order: micro-tile (ir, jr) at ((jr * nir) + ir) * kTile.
struct TileBufs {
  std::vector<float> wp, acc, racc, tot;
  TileBufs()
      : wp(static_cast<size_t>(NC) * KC),
        acc(static_cast<size_t>(MC) * NC),
        racc(acc.size()),
        tot(acc.size()) {}
};

// X's panels for one row tile over all of K: packed by the first tile of that row tile in a task's
// range and reused by the tiles after it (a task's tiles are consecutive: same rows, next columns),
// instead of being packed again for every column tile. Segment [k0, k0 + kc) sits at nir*MR*k0.
struct RowPanels {
  std::vector<float> buf;
  int m0 = -1;
  // True when the row tile at m0 must be packed now (a new row tile, or the first of a range).
  bool begin(int row0, int nir, int K) {
    if (row0 == m0) return false;
    m0 = row0;
    const size_t need = static_cast<size_t>(nir) * MR * static_cast<size_t>(K);
    if (buf.size() < need) buf.resize(need);
    return true;
  }
  float* at(int nir, int k0) { return buf.data() + static_cast<size_t>(nir) * MR * static_cast<size_t>(k0); }
};

// Writes the tile's `src` to Y, rounding per `out`.
void write_back(const float* src, float* Y, int N, int m0, int mrows, int n0, int ncols, int nir,
                OutRound out) {
  for (int jr = 0; jr * NR < ncols; ++jr)
    for (int ir = 0; ir * MR < mrows; ++ir) {
      const float* t =
          src + (static_cast<size_t>(jr) * static_cast<size_t>(nir) + static_cast<size_t>(ir)) * kTile;
      for (int i = 0; i < MR && ir * MR + i < mrows; ++i) {
        float* y = Y + static_cast<size_t>(m0 + ir * MR + i) * static_cast<size_t>(N) +
                   static_cast<size_t>(n0 + jr * NR);
        const int nj = std::min(NR, ncols - jr * NR);
        for (int j = 0; j < nj; ++j) y[j] = round_out(t[i * NR + j], out);
      }
    }
}

void check_cfg(const GemmConfig& cfg) {
  RLP_CHECK(cfg.split_k >= 1, "GemmConfig.split_k must be >= 1, got {}", cfg.split_k);
  RLP_CHECK(cfg.k_chunk >= 0, "GemmConfig.k_chunk must be >= 0, got {}", cfg.k_chunk);
}

// The K segments of gemm_f32acc that every output walks through, each at most KC long, with the
// events at its end: split-K ranges of near-equal length, each cut into k_chunk chunks.
struct Seg {
  int k0, k1;
  bool chunk_start, chunk_end, first_chunk, range_end;
  int range;
};
std::vector<Seg> k_segments(int K, const GemmConfig& cfg) {
  std::vector<Seg> segs;
  const int S = std::min(cfg.split_k, K);  // every range non-empty
  for (int r = 0; r < S; ++r) {
    const int rb = split_begin(K, S, r), re = split_begin(K, S, r + 1);
    const int chunk = cfg.k_chunk > 0 ? cfg.k_chunk : re - rb;
    for (int c0 = rb; c0 < re; c0 += chunk) {
      const int c1 = std::min(re, c0 + chunk);
      for (int s0 = c0; s0 < c1; s0 += KC) {
        const int s1 = std::min(c1, s0 + KC);
        segs.push_back({s0, s1, s0 == c0, s1 == c1, c0 == rb, false, r});
      }
    }
    segs.back().range_end = true;
  }
  return segs;
}

// ---- small M (decode steps): no packing ---------------------------------------------------------
// With a handful of rows, packing W's panels moves more memory than the product itself. Here the
// rows of X are transposed once into L::W lanes (k-major, zero-padded; 8 lanes for M <= 8, 16 with
// AVX-512 for M <= 16) and eight columns at a time run their row-chains each as one vector: lane m
// of column j's accumulator steps c = fma(x[m][k], w[j][k], c) in the same k order and with the
// same chunk/range events as the packed kernel, so results are bit-identical to it; only the
// memory traffic differs.
constexpr int kSmallCols = 8;  // columns in flight: independent chains hide the fma latency

// Lane traits: V holds W rows' values of one column.
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
  static V fma(float w, V x, V c) {
    for (int i = 0; i < W; ++i) c.v[i] = std::fma(w, x.v[i], c.v[i]);
    return c;
  }
  static V add(V a, V b) {
    for (int i = 0; i < W; ++i) a.v[i] = a.v[i] + b.v[i];
    return a;
  }
  static V mul(V a, V b) {
    for (int i = 0; i < W; ++i) a.v[i] = a.v[i] * b.v[i];
    return a;
  }
  static V fma(V a, V b, V c) {
    for (int i = 0; i < W; ++i) c.v[i] = std::fma(a.v[i], b.v[i], c.v[i]);
    return c;
  }
  static V set(float w) {
    V r;
    std::fill(r.v, r.v + W, w);
    return r;
  }
};

#if defined(__AVX2__) && defined(__FMA__)
struct Lanes8 {
  static constexpr int W = 8;
  using V = __m256;
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V fma(float w, V x, V c) { return _mm256_fmadd_ps(_mm256_set1_ps(w), x, c); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V set(float w) { return _mm256_set1_ps(w); }
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
  static V fma(float w, V x, V c) { return _mm512_fmadd_ps(_mm512_set1_ps(w), x, c); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V set(float w) { return _mm512_set1_ps(w); }
};
#endif

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

template <class L, class Rows>
void gemm_f32acc_small_m(const float* X, const Rows& W, float* Y, int M, int N, int K,
                         const std::vector<Seg>& segs, bool direct, OutRound out) {
  using V = typename L::V;
  const std::vector<float> xt = transpose_rows<L::W>(M, K, [X](size_t i) { return X[i]; });
  for_column_groups(N, [&](int n0, int ncols, const int* cols) {
    float wbuf[kSmallCols][KC];  // widened 16-bit weights of one segment (segments are <= KC)
    const float* w[kSmallCols];
    V acc[kSmallCols]{}, racc[kSmallCols]{}, tot[kSmallCols]{};
    for (const Seg& sg : segs) {
      if (sg.chunk_start)
        for (V& a : acc) a = L::zero();
      if (&sg != &segs.back()) {
        const Seg& nx = (&sg)[1];
        for (int j = 0; j < kSmallCols; ++j) W.prefetch(cols[j], nx.k0, nx.k1 - nx.k0);
      }
      for (int j = 0; j < kSmallCols; ++j) w[j] = W.slice(cols[j], sg.k0, sg.k1 - sg.k0, wbuf[j]);
      for (int k = sg.k0; k < sg.k1; ++k) {
        const V x = L::load(xt.data() + static_cast<size_t>(k) * L::W);
        for (int j = 0; j < kSmallCols; ++j) acc[j] = L::fma(w[j][k - sg.k0], x, acc[j]);
      }
      if (direct) continue;
      if (sg.chunk_end)
        for (int j = 0; j < kSmallCols; ++j) racc[j] = sg.first_chunk ? acc[j] : L::add(racc[j], acc[j]);
      if (sg.range_end)
        for (int j = 0; j < kSmallCols; ++j) tot[j] = sg.range == 0 ? racc[j] : L::add(tot[j], racc[j]);
    }
    store_group<L>(direct ? acc : tot, Y, M, N, n0, ncols, out);
  });
}

// Block-scaled fp8 with fp32 slice accumulation, same scheme: per split-K range y starts at +0,
// every slice's partial p is a fresh chain over the slice, promoted into y with the row's and the
// column's scales exactly as the packed kernel promotes it, and the ranges' y are summed in order.
template <class L>
void gemm_fp8_small_m(const Fp8Tensor& X, const Fp8Tensor& W, float* Y, const float* xlut,
                      const Fp8Decoder& wdec, int S, bool deepgemm, OutRound out) {
  const int M = X.rows, N = W.rows, K = X.cols, B = X.block_cols, slices = (K + B - 1) / B;
  const int xcb = X.col_blocks(), wcb = W.col_blocks();
  using V = typename L::V;
  const std::vector<float> xt = transpose_rows<L::W>(M, K, [&](size_t i) { return xlut[X.codes[i]]; });
  // The rows' activation scales per slice as lanes (padded rows: scale 0, results discarded).
  std::vector<float> sat(static_cast<size_t>(slices) * L::W, 0.0f);
  for (int m = 0; m < M; ++m)
    for (int sl = 0; sl < slices; ++sl)
      sat[static_cast<size_t>(sl) * L::W + static_cast<size_t>(m)] =
          X.scale_inv[static_cast<size_t>(m) * static_cast<size_t>(xcb) + static_cast<size_t>(sl)];
  for_column_groups(N, [&](int n0, int ncols, const int* cols) {
    const uint8_t* w[kSmallCols];
    const float* wsc[kSmallCols];  // the column's row of weight-block scales
    for (int j = 0; j < kSmallCols; ++j) {
      w[j] = W.codes.data() + static_cast<size_t>(cols[j]) * static_cast<size_t>(K);
      wsc[j] = W.scale_inv.data() + static_cast<size_t>(cols[j] / W.block_rows) * static_cast<size_t>(wcb);
    }
    V tot[kSmallCols]{}, y[kSmallCols]{}, p[kSmallCols]{};
    float wd[kSmallCols][KC];  // B <= KC (checked by the caller)
    for (int r = 0; r < S; ++r) {
      for (V& v : y) v = L::zero();
      for (int sl = split_begin(slices, S, r); sl < split_begin(slices, S, r + 1); ++sl) {
        const int k0 = sl * B, len = std::min(K, k0 + B) - k0;
        // The slice's weight codes decoded first, then the fma chains read them as broadcasts.
        for (int j = 0; j < kSmallCols; ++j) wdec(w[j] + k0, len, wd[j]);
        for (V& v : p) v = L::zero();
        for (int kk = 0; kk < len; ++kk) {
          const V x = L::load(xt.data() + static_cast<size_t>(k0 + kk) * L::W);
          for (int j = 0; j < kSmallCols; ++j) p[j] = L::fma(wd[j][kk], x, p[j]);
        }
        const V sa = L::load(sat.data() + static_cast<size_t>(sl) * L::W);
        for (int j = 0; j < kSmallCols; ++j) {
          const float sb = wsc[j][sl];
          // cuBLASLt: fma(p * sa, sb, y); DeepGEMM: fma(sa * sb, p, y) (see promote()).
          y[j] = deepgemm ? L::fma(L::mul(sa, L::set(sb)), p[j], y[j]) : L::fma(sb, L::mul(p[j], sa), y[j]);
        }
      }
      for (int j = 0; j < kSmallCols; ++j) tot[j] = r == 0 ? y[j] : L::add(tot[j], y[j]);
    }
    store_group<L>(tot, Y, M, N, n0, ncols, out);
  });
}
}  // namespace

// ---- bf16/fp16 operands, fp32 accumulation ------------------------------------------------------
namespace {
template <class Rows>
void gemm_f32acc_rows(const float* X, const Rows& W, float* Y, int M, int N, int K, const GemmConfig& cfg) {
  check_cfg(cfg);
  RLP_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm_f32acc: negative shape M={} N={} K={}", M, N, K);
  if (M == 0 || N == 0) return;

  if (K == 0) {
    for (size_t i = 0; i < static_cast<size_t>(M) * static_cast<size_t>(N); ++i) Y[i] = 0.0f;
    return;
  }
  const std::vector<Seg> segs = k_segments(K, cfg);
  // With one range of one chunk, the chunk accumulator is the result: no copies.
  const bool direct = segs.back().range == 0 &&
                      std::all_of(segs.begin(), segs.end(), [](const Seg& s) { return s.first_chunk; });
  if (M <= 8) {
    gemm_f32acc_small_m<Lanes8>(X, W, Y, M, N, K, segs, direct, cfg.out);
    return;
  }
#if defined(__AVX512F__)
  if (M <= 16) {
    gemm_f32acc_small_m<Lanes16>(X, W, Y, M, N, K, segs, direct, cfg.out);
    return;
  }
#endif

  const TileGrid grid(M, N);
  rlp::parallel_for(grid.count(), 1, [&](size_t t0, size_t t1) {
    // Reused across calls on the same thread: decode runs thousands of small GEMMs.
    thread_local TileBufs b;
    thread_local RowPanels xr;
    xr.m0 = -1;  // X differs from the previous call's
    for (size_t t = t0; t < t1; ++t) {
      const int m0 = static_cast<int>(t / static_cast<size_t>(grid.nt)) * MC;
      const int n0 = static_cast<int>(t % static_cast<size_t>(grid.nt)) * NC;
      const int mrows = std::min(MC, M - m0), ncols = std::min(NC, N - n0);
      const int nir = (mrows + MR - 1) / MR, njr = (ncols + NR - 1) / NR;
      const size_t used = static_cast<size_t>(nir) * static_cast<size_t>(njr) * kTile;
      const bool pack_x = xr.begin(m0, nir, K);
      for (const Seg& sg : segs) {
        const int kc = sg.k1 - sg.k0;
        float* xp = xr.at(nir, sg.k0);
        if (pack_x) pack_rows<MR>(F32Rows{X, K}, m0, mrows, sg.k0, kc, xp);
        pack_rows<NR>(W, n0, ncols, sg.k0, kc, b.wp.data());
        for (int jr = 0; jr < njr; ++jr)
          for (int ir = 0; ir < nir; ++ir)
            micro(kc, xp + static_cast<size_t>(ir) * kc * MR, b.wp.data() + static_cast<size_t>(jr) * kc * NR,
                  b.acc.data() + (static_cast<size_t>(jr) * nir + static_cast<size_t>(ir)) * kTile,
                  sg.chunk_start);
        if (direct) continue;
        if (sg.chunk_end) {
          if (sg.first_chunk)
            std::copy(b.acc.begin(), b.acc.begin() + static_cast<std::ptrdiff_t>(used), b.racc.begin());
          else
            for (size_t i = 0; i < used; ++i) b.racc[i] = b.racc[i] + b.acc[i];
        }
        if (sg.range_end) {
          if (sg.range == 0)
            std::copy(b.racc.begin(), b.racc.begin() + static_cast<std::ptrdiff_t>(used), b.tot.begin());
          else
            for (size_t i = 0; i < used; ++i) b.tot[i] = b.tot[i] + b.racc[i];
        }
      }
      write_back(direct ? b.acc.data() : b.tot.data(), Y, N, m0, mrows, n0, ncols, nir, cfg.out);
    }
  });
}
}  // namespace

void gemm_f32acc(const float* X, const float* W, float* Y, int M, int N, int K, const GemmConfig& cfg) {
  gemm_f32acc_rows(X, F32Rows{W, K}, Y, M, N, K, cfg);
}

void gemm_f32acc(const float* X, const uint16_t* W, Half16 wfmt, float* Y, int M, int N, int K,
                 const GemmConfig& cfg) {
  gemm_f32acc_rows(X, Half16Rows{W, K, wfmt}, Y, M, N, K, cfg);
}

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
  for (; i < n; ++i) dst[i] = fmt == Half16::bf16 ? bf16_bits_to_float(src[i]) : fp16_bits_to_float(src[i]);
}

// ---- fp8 block-scaled ---------------------------------------------------------------------------
void gemm_fp8_blockscaled(const Fp8Tensor& X, const Fp8Tensor& W, float* Y, const GemmConfig& cfg) {
  check_cfg(cfg);
  RLP_CHECK(X.cols == W.cols, "gemm_fp8_blockscaled: K mismatch, X is {}x{}, W is {}x{}", X.rows, X.cols,
            W.rows, W.cols);
  RLP_CHECK(X.block_cols == W.block_cols,
            "gemm_fp8_blockscaled: X blocks {}x{} and W blocks {}x{} must share K width", X.block_rows,
            X.block_cols, W.block_rows, W.block_cols);
  RLP_CHECK(X.block_rows == 1, "gemm_fp8_blockscaled: X must be quantized per row (1x{} blocks), has {}x{}",
            X.block_cols, X.block_rows, X.block_cols);
  RLP_CHECK(X.block_cols > 0 && W.block_rows > 0, "gemm_fp8_blockscaled: bad block shape");
  const int M = X.rows, N = W.rows, K = X.cols, B = X.block_cols;
  if (M == 0 || N == 0) return;
  const int slices = (K + B - 1) / B;
  const int S = std::max(1, std::min(cfg.split_k, std::max(slices, 1)));
  const int xcb = X.col_blocks(), wcb = W.col_blocks();
  float xlut[256], wlut[256];
  for (int c = 0; c < 256; ++c) {
    xlut[c] = fp8_to_float(static_cast<uint8_t>(c), X.kind);
    wlut[c] = fp8_to_float(static_cast<uint8_t>(c), W.kind);
  }
  const bool deepgemm = cfg.promotion == Promotion::deepgemm;
  auto promote = [deepgemm](float p, float sa, float sb, float y) {
    // cuBLASLt (TE's reference): the partial is multiplied by the 1D (activation) scale and
    // rounded, then fused with the 2D (weight) scale. DeepGEMM folds both scales first.
    return deepgemm ? std::fma(sa * sb, p, y) : std::fma(p * sa, sb, y);
  };

  if (cfg.slice_accum == SliceAccum::hopper) {
    // Bit-level model, element by element (slow by design).
    std::vector<float> wf(static_cast<size_t>(N) * static_cast<size_t>(K));
    for (size_t i = 0; i < wf.size(); ++i) wf[i] = wlut[W.codes[i]];
    rlp::parallel_for(static_cast<size_t>(M), 1, [&](size_t r0, size_t r1) {
      std::vector<float> xf(static_cast<size_t>(K));
      for (size_t m = r0; m < r1; ++m) {
        for (int k = 0; k < K; ++k)
          xf[static_cast<size_t>(k)] = xlut[X.codes[m * static_cast<size_t>(K) + static_cast<size_t>(k)]];
        for (int n = 0; n < N; ++n) {
          const float* wr = wf.data() + static_cast<size_t>(n) * static_cast<size_t>(K);
          float tot = 0.0f;
          for (int r = 0; r < S; ++r) {
            float y = 0.0f;
            for (int s = split_begin(slices, S, r); s < split_begin(slices, S, r + 1); ++s) {
              const int k0 = s * B, len = std::min(B, K - k0);
              float p = 0.0f;
              for (int q0 = 0; q0 < len; q0 += 128)
                p = hopper_slice_accumulate(xf.data() + k0 + q0, wr + k0 + q0, std::min(128, len - q0), p);
              y = promote(p, X.block_scale_inv(static_cast<int>(m), k0), W.block_scale_inv(n, k0), y);
            }
            tot = r == 0 ? y : tot + y;
          }
          Y[m * static_cast<size_t>(N) + static_cast<size_t>(n)] = round_out(tot, cfg.out);
        }
      }
    });
    return;
  }

  RLP_CHECK(B <= KC, "gemm_fp8_blockscaled: fp32 slice accumulation supports K blocks up to {}, got {}", KC,
            B);
  const Fp8Decoder xdec{xlut, X.kind == Fp8Kind::e4m3}, wdec{wlut, W.kind == Fp8Kind::e4m3};
  if (M <= 8) {
    gemm_fp8_small_m<Lanes8>(X, W, Y, xlut, wdec, S, deepgemm, cfg.out);
    return;
  }
#if defined(__AVX512F__)
  if (M <= 16) {
    gemm_fp8_small_m<Lanes16>(X, W, Y, xlut, wdec, S, deepgemm, cfg.out);
    return;
  }
#endif
  const TileGrid grid(M, N);
  rlp::parallel_for(grid.count(), 1, [&](size_t t0, size_t t1) {
    // Reused across calls on the same thread: decode runs thousands of small GEMMs.
    thread_local TileBufs b;
    thread_local RowPanels xr;
    xr.m0 = -1;  // X differs from the previous call's
    std::vector<float> sa(static_cast<size_t>(MC)), sb(static_cast<size_t>(NC));
    for (size_t t = t0; t < t1; ++t) {
      const int m0 = static_cast<int>(t / static_cast<size_t>(grid.nt)) * MC;
      const int n0 = static_cast<int>(t % static_cast<size_t>(grid.nt)) * NC;
      const int mrows = std::min(MC, M - m0), ncols = std::min(NC, N - n0);
      const int nir = (mrows + MR - 1) / MR, njr = (ncols + NR - 1) / NR;
      const size_t used = static_cast<size_t>(nir) * static_cast<size_t>(njr) * kTile;
      const bool pack_x = xr.begin(m0, nir, K);
      for (int r = 0; r < S; ++r) {
        std::fill(b.racc.begin(), b.racc.begin() + static_cast<std::ptrdiff_t>(used), 0.0f);  // y = +0
        for (int s = split_begin(slices, S, r); s < split_begin(slices, S, r + 1); ++s) {
          const int k0 = s * B, kc = std::min(B, K - k0);
          float* xp = xr.at(nir, k0);
          if (pack_x) pack_rows<MR>(Fp8Rows{X.codes.data(), K, xdec}, m0, mrows, k0, kc, xp);
          pack_rows<NR>(Fp8Rows{W.codes.data(), K, wdec}, n0, ncols, k0, kc, b.wp.data());
          for (int i = 0; i < mrows; ++i)
            sa[static_cast<size_t>(i)] =
                X.scale_inv[static_cast<size_t>(m0 + i) * static_cast<size_t>(xcb) + static_cast<size_t>(s)];
          for (int j = 0; j < ncols; ++j)
            sb[static_cast<size_t>(j)] =
                W.scale_inv[static_cast<size_t>((n0 + j) / W.block_rows) * static_cast<size_t>(wcb) +
                            static_cast<size_t>(s)];
          for (int jr = 0; jr < njr; ++jr)
            for (int ir = 0; ir < nir; ++ir) {
              const size_t off = (static_cast<size_t>(jr) * nir + static_cast<size_t>(ir)) * kTile;
              micro(kc, xp + static_cast<size_t>(ir) * kc * MR,
                    b.wp.data() + static_cast<size_t>(jr) * kc * NR, b.acc.data() + off, true);
              // Promotion of the slice partial into this range's y (padded lanes use scale 0).
              const float* p = b.acc.data() + off;
              float* y = b.racc.data() + off;
              for (int i = 0; i < MR; ++i) {
                const int gi = ir * MR + i;
                const float a = gi < mrows ? sa[static_cast<size_t>(gi)] : 0.0f;
                for (int j = 0; j < NR; ++j) {
                  const int gj = jr * NR + j;
                  const float bs = gj < ncols ? sb[static_cast<size_t>(gj)] : 0.0f;
                  y[i * NR + j] = promote(p[i * NR + j], a, bs, y[i * NR + j]);
                }
              }
            }
        }
        if (r == 0)
          std::copy(b.racc.begin(), b.racc.begin() + static_cast<std::ptrdiff_t>(used), b.tot.begin());
        else
          for (size_t i = 0; i < used; ++i) b.tot[i] = b.tot[i] + b.racc[i];
      }
      write_back(b.tot.data(), Y, N, m0, mrows, n0, ncols, nir, cfg.out);
    }
  });
}

// ---- float64 oracle -----------------------------------------------------------------------------
// Each output is s = s + x[k]*w[k] in increasing k from s = +0, product and sum each rounded to
// double (-ffp-contract=off: no fusion). W is packed per panel of kF64Cols columns (k-major) and
// the panel's outputs for kF64Rows rows at a time run as vector lanes, one chain per lane: every
// output's order is unchanged, only the memory layout and the parallelism differ.
namespace {
#if defined(__AVX512F__)
constexpr int kDLanes = 8;
using DVec = __m512d;
inline DVec dvec_zero() { return _mm512_setzero_pd(); }
inline DVec dvec_load(const double* p) { return _mm512_loadu_pd(p); }
inline void dvec_store(double* p, DVec v) { _mm512_storeu_pd(p, v); }
inline DVec dvec_mul_add(DVec s, double x, DVec w) {
  return _mm512_add_pd(s, _mm512_mul_pd(_mm512_set1_pd(x), w));
}
#elif defined(__AVX2__)
constexpr int kDLanes = 4;
using DVec = __m256d;
inline DVec dvec_zero() { return _mm256_setzero_pd(); }
inline DVec dvec_load(const double* p) { return _mm256_loadu_pd(p); }
inline void dvec_store(double* p, DVec v) { _mm256_storeu_pd(p, v); }
inline DVec dvec_mul_add(DVec s, double x, DVec w) {
  return _mm256_add_pd(s, _mm256_mul_pd(_mm256_set1_pd(x), w));
}
#else
constexpr int kDLanes = 4;
struct DVec {
  double v[kDLanes];
};
inline DVec dvec_zero() { return DVec{}; }
inline DVec dvec_load(const double* p) {
  DVec r;
  std::copy(p, p + kDLanes, r.v);
  return r;
}
inline void dvec_store(double* p, DVec v) { std::copy(v.v, v.v + kDLanes, p); }
inline DVec dvec_mul_add(DVec s, double x, DVec w) {
  for (int i = 0; i < kDLanes; ++i) s.v[i] = s.v[i] + x * w.v[i];
  return s;
}
#endif
constexpr int kF64Rows = 4;
constexpr int kF64Vecs = 2;
constexpr int kF64Cols = kF64Vecs * kDLanes;
}  // namespace

void gemm_f64(const double* X, const double* W, double* Y, int M, int N, int K) {
  RLP_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm_f64: negative shape M={} N={} K={}", M, N, K);
  if (M == 0 || N == 0) return;
  const size_t panels = (static_cast<size_t>(N) + kF64Cols - 1) / kF64Cols;
  const size_t ks = static_cast<size_t>(K);
  rlp::parallel_for(panels, 1, [&](size_t p0, size_t p1) {
    std::vector<double> wp(ks * kF64Cols);
    for (size_t p = p0; p < p1; ++p) {
      const int n0 = static_cast<int>(p) * kF64Cols, nr = std::min(kF64Cols, N - n0);
      for (int j = 0; j < kF64Cols; ++j) {  // columns past N are zero; their lanes are discarded
        const double* w = j < nr ? W + static_cast<size_t>(n0 + j) * ks : nullptr;
        for (size_t k = 0; k < ks; ++k) wp[k * kF64Cols + static_cast<size_t>(j)] = w ? w[k] : 0.0;
      }
      for (int m0 = 0; m0 < M; m0 += kF64Rows) {
        const int mr = std::min(kF64Rows, M - m0);
        const double* xs[kF64Rows];
        for (int i = 0; i < kF64Rows; ++i) xs[i] = X + static_cast<size_t>(m0 + std::min(i, mr - 1)) * ks;
        DVec acc[kF64Rows][kF64Vecs];
        for (auto& row : acc)
          for (DVec& a : row) a = dvec_zero();
        for (size_t k = 0; k < ks; ++k) {
          DVec w[kF64Vecs];
          for (int v = 0; v < kF64Vecs; ++v)
            w[v] = dvec_load(wp.data() + k * kF64Cols + static_cast<size_t>(v) * kDLanes);
          for (int i = 0; i < kF64Rows; ++i)
            for (int v = 0; v < kF64Vecs; ++v) acc[i][v] = dvec_mul_add(acc[i][v], xs[i][k], w[v]);
        }
        double t[kF64Cols];
        for (int i = 0; i < mr; ++i) {
          for (int v = 0; v < kF64Vecs; ++v) dvec_store(t + v * kDLanes, acc[i][v]);
          std::copy(t, t + nr,
                    Y + static_cast<size_t>(m0 + i) * static_cast<size_t>(N) + static_cast<size_t>(n0));
        }
      }
    }
  });
}

}  // namespace rlp::num
