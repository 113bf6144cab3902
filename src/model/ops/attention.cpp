// FlashAttention-style attention with a KV cache on the CPU; the mirror of kernels/attention.cu
// (same blocks, online-softmax order and chains; the CPU walks tiles of rows and heads through
// SIMD micro-kernels, the GPU one (row, head) per CUDA block).
#include <algorithm>
#include <cmath>
#include <limits>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

#include "numerics/simd_lanes.hpp"
#include "rlparity/model/emulated_ops.hpp"
#include "rlparity/numerics/exp2.hpp"
#include "rlparity/numerics/formats.hpp"
#include "rlparity/numerics/libm_model.hpp"
#include "rlparity/numerics/ops.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/parallel.hpp"

namespace rlp {

namespace {

// The attention micro-kernels run over the target's native lanes (one float per lane without
// AVX2/AVX-512, where the same code runs lane by lane); the scores and P.V both use them.
using Lanes = num::simd::NativeLanes;
constexpr int kVecFloats = Lanes::W;

// Query vectors ("lanes": the rows of a tile times the heads of one KV group) that share one key
// range b0..b1 go through the micro-kernels below up to kLaneChunk at a time: each K/V vector
// loaded is used by every lane of the chunk, each lane's chains keeping their own order.
constexpr int kLaneChunk = 4;

// s[j - b0] = q . K[j][col0 .. col0+hd) for keys b0..b1, each dot a sequential fp32 fma chain over
// d from +0 (the order the paths model). Kt is K transposed: the loop over keys is contiguous and
// vectorizes, each key's chain keeping its own order, so its result is unchanged.
void key_dots(const float* q, const HostMat& Kt, int col0, int hd, int b0, int b1, float* __restrict s) {
  const int nk = b1 - b0 + 1;
  std::fill(s, s + nk, 0.0f);
  for (int d = 0; d < hd; ++d) {
    const float qd = q[d];
    const float* __restrict kt = Kt.row(col0 + d).data() + b0;
    for (int j = 0; j < nk; ++j) s[j] = std::fma(qd, kt[j], s[j]);
  }
}

// The attention micro-kernel, for L lanes and NV vectors of outputs each:
//   out[l][off + i] = fma(a[l][t], b[t * ldb + i], out[l][off + i]) for t = 0..nt-1 in order,
// from +0 (FromZero) or from out's values. Every output keeps its one fma chain in a register, and
// each row of b loaded serves all L lanes. Scores: a = q, b = K^T (t = d), out = s. P.V: a = P,
// b = V (t = key), out = acc.
template <int L, int NV, bool FromZero>
void lane_fma_chains(const float* const* a, const float* b, std::ptrdiff_t ldb, int nt, float* const* out,
                     int off) {
  Lanes::V acc[L][NV];
  for (int l = 0; l < L; ++l)
    for (int v = 0; v < NV; ++v)
      acc[l][v] = FromZero ? Lanes::zero() : Lanes::load(out[l] + off + v * kVecFloats);
  for (int t = 0; t < nt; ++t) {
    const float* br = b + static_cast<std::ptrdiff_t>(t) * ldb;
    Lanes::V bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = Lanes::load(br + v * kVecFloats);
    for (int l = 0; l < L; ++l) {
      const Lanes::V at = Lanes::set(a[l][t]);
      for (int v = 0; v < NV; ++v) acc[l][v] = Lanes::fma(at, bv[v], acc[l][v]);
    }
  }
  for (int l = 0; l < L; ++l)
    for (int v = 0; v < NV; ++v) Lanes::store(out[l] + off + v * kVecFloats, acc[l][v]);
}

template <int L>
void key_dots_lanes(const float* const* q, const HostMat& Kt, int col0, int hd, int b0, int b1,
                    float* const* s) {
  const int nk = b1 - b0 + 1;
  const std::ptrdiff_t ld = Kt.cols();
  const float* kt0 = Kt.data() + static_cast<std::ptrdiff_t>(col0) * ld;
  int j = 0;
  for (; j + 4 * kVecFloats <= nk; j += 4 * kVecFloats)
    lane_fma_chains<L, 4, true>(q, kt0 + b0 + j, ld, hd, s, j);
  for (; j + kVecFloats <= nk; j += kVecFloats) lane_fma_chains<L, 1, true>(q, kt0 + b0 + j, ld, hd, s, j);
  if (j < nk)
    for (int l = 0; l < L; ++l) key_dots(q[l], Kt, col0, hd, b0 + j, b1, s[l] + j);
}

// The pair word of two floats holding bf16 values: `first`, the step the instruction takes first,
// in the high half (as gemm_blocking.hpp's bf16_pair).
inline uint32_t pair_word(float first, float second) {
  return (num::f32_bits(first) & 0xFFFF0000u) | (num::f32_bits(second) >> 16);
}

// acc[l][d] = fma(p[l][j - b0], V[j][col0 + d], acc[l][d]) for keys j = b0..b1 in order, for the
// dimensions d0 <= d < hd only (those short of a vector).
template <int L>
void accumulate_pv_dims(const float* const* p, const HostMat& V, int col0, int d0, int hd, int b0, int b1,
                        float* const* acc) {
  for (int l = 0; l < L; ++l)
    for (int j = b0; j <= b1; ++j) {
      const float pj = p[l][j - b0];
      const float* vr = V.row(j).data() + col0;
      for (int d = d0; d < hd; ++d) acc[l][d] = std::fma(pj, vr[d], acc[l][d]);
    }
}

#if defined(__AVX512BF16__)
// lane_fma_chains as vdpbf16ps steps, the bf16 GEMM's dot-product kernel (gemm.hpp, gemm_f32acc):
// out[l][off + i] for NV vectors, each chain over np pairs t, a[l][t] holding a[l]'s steps (2t,
// 2t + 1) and row t of b those of b, step 2t in the high half, which the instruction adds first.
// Two steps of lane_fma_chains<L, NV, FromZero> per instruction, the same bits wherever every
// product and partial sum is 0 or normal and nothing overflows. Scores: a = q's dimension pairs, b =
// KvCache::kt_pairs (from +0); P.V: a = P's key pairs, b = KvCache::v_pairs (from acc).
template <int L, int NV, bool FromZero>
void lane_dot_chains(const uint32_t* const* a, const uint32_t* b, std::ptrdiff_t ldb, int np,
                     float* const* out, int off) {
  __m512 acc[L][NV];
  for (int l = 0; l < L; ++l)
    for (int v = 0; v < NV; ++v)
      acc[l][v] = FromZero ? _mm512_setzero_ps() : _mm512_loadu_ps(out[l] + off + v * 16);
  for (int t = 0; t < np; ++t) {
    const uint32_t* br = b + static_cast<std::ptrdiff_t>(t) * ldb;
    __m512bh bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = (__m512bh)_mm512_loadu_si512(br + v * 16);
    for (int l = 0; l < L; ++l) {
      const __m512bh at = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[l][t]));
      for (int v = 0; v < NV; ++v) acc[l][v] = _mm512_dpbf16_ps(acc[l][v], at, bv[v]);
    }
  }
  for (int l = 0; l < L; ++l)
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(out[l] + off + v * 16, acc[l][v]);
}

// key_dots_lanes with the pair kernel: q's pair words qp, the keys' from kt_pairs (ktp0: the first
// pair row of this KV head, rows ld apart); the last keys short of a vector go to key_dots.
template <int L>
void key_dots_pairs_lanes(const uint32_t* const* qp, const float* const* q, const uint32_t* ktp0,
                          std::ptrdiff_t ld, const HostMat& Kt, int col0, int hd, int b0, int b1,
                          float* const* s) {
  const int nk = b1 - b0 + 1;
  int j = 0;
  for (; j + 64 <= nk; j += 64) lane_dot_chains<L, 4, true>(qp, ktp0 + b0 + j, ld, hd / 2, s, j);
  for (; j + 16 <= nk; j += 16) lane_dot_chains<L, 1, true>(qp, ktp0 + b0 + j, ld, hd / 2, s, j);
  if (j < nk)
    for (int l = 0; l < L; ++l) key_dots(q[l], Kt, col0, hd, b0 + j, b1, s[l] + j);
}

// accumulate_pv with the pair kernel for keys b0..b1 (b0 even, b1 odd: whole pair rows of v_pairs,
// vp0 pointing at pair row b0 / 2, column col0; rows ldv apart), pp[l] P's pair words of lane l;
// dimensions short of a vector go to the fma loop.
template <int L>
void accumulate_pv_pairs(const uint32_t* const* pp, const float* const* p, const uint32_t* vp0,
                         std::ptrdiff_t ldv, const HostMat& V, int col0, int hd, int b0, int b1,
                         float* const* acc) {
  const int np = (b1 - b0 + 1) / 2;
  int d0 = 0;
  for (; d0 + 64 <= hd; d0 += 64) lane_dot_chains<L, 4, false>(pp, vp0 + d0, ldv, np, acc, d0);
  for (; d0 + 16 <= hd; d0 += 16) lane_dot_chains<L, 1, false>(pp, vp0 + d0, ldv, np, acc, d0);
  if (d0 < hd) accumulate_pv_dims<L>(p, V, col0, d0, hd, b0, b1, acc);
}
#else
template <int L>
void accumulate_pv_pairs(const uint32_t* const*, const float* const*, const uint32_t*, std::ptrdiff_t,
                         const HostMat&, int, int, int, int, float* const*) {
  RLP_CHECK(false, "the bf16 dot-product P.V kernel is not in this build (no AVX-512 BF16)");
}
template <int L>
void key_dots_pairs_lanes(const uint32_t* const*, const float* const*, const uint32_t*, std::ptrdiff_t,
                          const HostMat&, int, int, int, int, float* const*) {
  RLP_CHECK(false, "the bf16 dot-product score kernel is not in this build (no AVX-512 BF16)");
}
#endif

// Whether every value is 0 or a finite multiple of 2^-126 (|a| >= 2^-103 is one: its ulp is at
// least 2^-126): P.V's accumulators before its dot-product steps. With products that are multiples
// of 2^-126 too (bf16_dot_exact), every partial sum then is, so it is 0 or normal, and the
// instruction's flush of denormal inputs and results never applies.
inline bool sums_stay_normal(const float* a, int n) {
  // Over |a|'s bit patterns u: the smallest nonzero (as u - 1, 0 wrapping to the top) and the
  // largest, as min/max reductions (branch-free: the loop vectorizes).
  uint32_t lo = 0xFFFFFFFFu, hi = 0;
  for (int i = 0; i < n; ++i) {
    const uint32_t u = num::f32_bits(a[i]) & 0x7FFFFFFFu;
    lo = std::min(lo, u - 1u);
    hi = std::max(hi, u);
  }
  return lo >= (24u << 23) - 1u && hi < 0x7F800000u;  // nonzero ones: exponent field 24..254
}

// The span of a block's rounded P values (bf16, e4m3 or e5m2 values, so bf16 values by
// construction; non-negative unless NaN): the smallest nonzero bit pattern is the smallest value.
// emax is left at 0, above every p: the overflow bound counts earlier blocks' p <= 1 too.
inline num::Bf16Span p_span_of(const float* p, int n) {
  uint32_t lo = 0xFFFFFFFFu, hi = 0;  // lo: the smallest pattern minus 1, +0 wrapping to the top
  for (int j = 0; j < n; ++j) {       // (branch-free: the loop vectorizes)
    const uint32_t u = num::f32_bits(p[j]);
    lo = std::min(lo, u - 1u);
    hi = std::max(hi, u);
  }
  num::Bf16Span sp;
  sp.emax = 0;
  if (lo == 0xFFFFFFFFu) return sp;  // all +0
  sp.normal = hi < 0x7F800000u && ((lo + 1u) >> 23) != 0;
  sp.emin = static_cast<int>((lo + 1u) >> 23) - 127;
  return sp;
}

// acc[d] = fma(p[j], V[j][col0 + d], acc[d]) for keys j = b0..b1 in order, for every d and each of
// L lanes; up to four vectors of dimensions per lane in registers (lane_fma_chains), the rest scalar.
template <int L>
void accumulate_pv(const float* const* p, const HostMat& V, int col0, int hd, int b0, int b1,
                   float* const* acc) {
  const std::ptrdiff_t ldv = V.cols();
  const float* v0 = V.data() + static_cast<std::ptrdiff_t>(b0) * ldv + col0;
  const int nk = b1 - b0 + 1;
  int d0 = 0;
  for (; d0 + 4 * kVecFloats <= hd; d0 += 4 * kVecFloats)
    lane_fma_chains<L, 4, false>(p, v0 + d0, ldv, nk, acc, d0);
  for (; d0 + kVecFloats <= hd; d0 += kVecFloats) lane_fma_chains<L, 1, false>(p, v0 + d0, ldv, nk, acc, d0);
  if (d0 < hd) accumulate_pv_dims<L>(p, V, col0, d0, hd, b0, b1, acc);
}

// Dispatch a chunk of 1..kLaneChunk lanes to the templates.
template <template <int> class F, typename... A>
void call_with_lane_count(int nl, A&&... a) {
  switch (nl) {
    case 1: F<1>::run(a...); break;
    case 2: F<2>::run(a...); break;
    case 3: F<3>::run(a...); break;
    default: F<4>::run(a...); break;
  }
}
template <int L>
struct KeyDotsOfLanes {
  static void run(const float* const* q, const HostMat& Kt, int col0, int hd, int b0, int b1,
                  float* const* s) {
    key_dots_lanes<L>(q, Kt, col0, hd, b0, b1, s);
  }
};
template <int L>
struct KeyDotPairsOfLanes {
  static void run(const uint32_t* const* qp, const float* const* q, const uint32_t* ktp0, std::ptrdiff_t ld,
                  const HostMat& Kt, int col0, int hd, int b0, int b1, float* const* s) {
    key_dots_pairs_lanes<L>(qp, q, ktp0, ld, Kt, col0, hd, b0, b1, s);
  }
};
template <int L>
struct AccumulatePvPairsOfLanes {
  static void run(const uint32_t* const* pp, const float* const* p, const uint32_t* vp0, std::ptrdiff_t ldv,
                  const HostMat& V, int col0, int hd, int b0, int b1, float* const* acc) {
    accumulate_pv_pairs<L>(pp, p, vp0, ldv, V, col0, hd, b0, b1, acc);
  }
};
template <int L>
struct AccumulatePvOfLanes {
  static void run(const float* const* p, const HostMat& V, int col0, int hd, int b0, int b1,
                  float* const* acc) {
    accumulate_pv<L>(p, V, col0, hd, b0, b1, acc);
  }
};
static_assert(kLaneChunk == 4, "call_with_lane_count dispatches 1..4 lanes");

// max(m, s[0], ..., s[nk-1]) folded in order with std::max, as the single-vector kernel does: a NaN
// score never enters (std::max keeps its first argument unless the second is greater), so the
// result is the largest non-NaN value, the same in any order unless that value is zero (then
// which of +0 and -0 comes first decides its sign): the vector fold is used only when it is
// nonzero.
inline float max_scores(const float* s, int nk, float m) {
  int j = 0;
  float mv = -std::numeric_limits<float>::infinity();
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
  if (nk >= kVecFloats) {
#if defined(__AVX512F__)
    __m512 a = _mm512_set1_ps(mv);
    // (s > a) ? s : a per lane (the mask form: GCC 12 warns on the plain one's undefined passthrough)
    for (; j + kVecFloats <= nk; j += kVecFloats)
      a = _mm512_mask_max_ps(a, static_cast<__mmask16>(0xFFFF), _mm512_loadu_ps(s + j), a);
#else
    __m256 a = _mm256_set1_ps(mv);
    for (; j + kVecFloats <= nk; j += kVecFloats) a = _mm256_max_ps(_mm256_loadu_ps(s + j), a);
#endif
    alignas(64) float lanes[kVecFloats];
    Lanes::store(lanes, a);
    for (const float x : lanes) mv = std::max(mv, x);
  }
#endif
  for (; j < nk; ++j) mv = std::max(mv, s[j]);
  mv = std::max(m, mv);
  if (mv != 0.0f) return mv;
  for (j = 0; j < nk; ++j) m = std::max(m, s[j]);
  return m;
}

// Query rows per attention task. Each task takes a tile of this many rows and all heads of one KV
// group, and walks the key blocks once for all of them, so a block of K/V is read from memory once
// per tile rather than once per (row, head).
constexpr int kAttnTileRows = 16;
// Floats of per-partition state a task may hold (tiles get fewer rows beyond it).
constexpr long long kAttnStateBudget = 1LL << 20;
// Scores are computed for up to this many keys at a time (a whole number of key blocks), however
// small the blocks: each score is its own chain, so when it is computed does not matter, and long
// runs of keys stream K^T rows better than short ones.
constexpr int kScoreChunk = 128;
// Rows per task of the cache write (a decode step's one row is written on the caller).
constexpr std::size_t kCacheWriteRows = 64;

// Rows pos0.. of layer li's cache from this call's k and v (as e4m3 values over their scales for an
// fp8 cache), then K^T and, where the cache keeps them, the pair words of K^T and V and the spans.
// Rows in parallel, then K^T by column blocks (each of its rows written in order): a prefill of
// thousands of positions writes (and first touches) megabytes here; a decode row runs on the caller.
void write_kv_rows(KvCache& cache, std::size_t li, const HostMat& k, const HostMat& v, int pos0, bool fp8_kv,
                   float ks, float vs) {
  HostMat& K = cache.k[li];
  HostMat& V = cache.v[li];
  const int n = static_cast<int>(k.rows());
  const auto grain = [&](int count) {
    return static_cast<std::size_t>(n) >= kCacheWriteRows ? std::size_t{1} : static_cast<std::size_t>(count);
  };
  const int width = static_cast<int>(K.cols());
  parallel_for(static_cast<std::size_t>(n), kCacheWriteRows, [&](std::size_t r0, std::size_t r1) {
    for (int r = static_cast<int>(r0); r < static_cast<int>(r1); ++r)
      for (int c = 0; c < width; ++c) {
        K(pos0 + r, c) = fp8_kv ? num::round_e4m3_sat(k(r, c) / ks) : k(r, c);
        V(pos0 + r, c) = fp8_kv ? num::round_e4m3_sat(v(r, c) / vs) : v(r, c);
      }
  });
  HostMat& Kt_w = cache.kt[li];
  const int col_blocks = (width + kVecFloats - 1) / kVecFloats;
  parallel_for(static_cast<std::size_t>(col_blocks), grain(col_blocks), [&](std::size_t b0, std::size_t b1) {
    const int c0 = static_cast<int>(b0) * kVecFloats, c1 = std::min(width, static_cast<int>(b1) * kVecFloats);
    for (int r = 0; r < n; ++r)
      for (int c = c0; c < c1; ++c) Kt_w(c, pos0 + r) = K(pos0 + r, c);
  });
  if (!cache.kt_pairs.empty()) {
    // The pair words of the dot-product score kernel, and the span of the keys written so far.
    PairMat& pairs = cache.kt_pairs[li];
    const auto cap = static_cast<std::size_t>(K.rows());
    parallel_for(static_cast<std::size_t>(width / 2), grain(width / 2), [&](std::size_t p0, std::size_t p1) {
      for (std::size_t p = p0; p < p1; ++p) {
        uint32_t* row = pairs.data() + p * cap + static_cast<std::size_t>(pos0);
        const int c = static_cast<int>(2 * p);
        for (int r = 0; r < n; ++r) row[r] = pair_word(K(pos0 + r, c), K(pos0 + r, c + 1));
      }
    });
    cache.k_span[li] = num::span_union(
        cache.k_span[li],
        num::bf16_span(K.row(pos0).data(), static_cast<std::size_t>(n) * static_cast<std::size_t>(width)));
    // V's pair rows t = pos0 / 2 .. (pos0 + n - 1) / 2, from the cache's rows (position 2t may be an
    // earlier call's); a position not written yet is 0 until the call that writes it.
    PairMat& vp = cache.v_pairs[li];
    const int t0 = pos0 / 2, t1 = (pos0 + n - 1) / 2;
    parallel_for(
        static_cast<std::size_t>(t1 - t0 + 1), kCacheWriteRows / 2, [&](std::size_t a, std::size_t b) {
          for (int t = t0 + static_cast<int>(a); t < t0 + static_cast<int>(b); ++t) {
            uint32_t* row = vp.data() + static_cast<std::size_t>(t) * static_cast<std::size_t>(width);
            const bool second = 2 * t + 1 < pos0 + n;
            for (int c = 0; c < width; ++c) row[c] = pair_word(V(2 * t, c), second ? V(2 * t + 1, c) : 0.0f);
          }
        });
    cache.v_span[li] = num::span_union(
        cache.v_span[li],
        num::bf16_span(V.row(pos0).data(), static_cast<std::size_t>(n) * static_cast<std::size_t>(width)));
  }
}

}  // namespace

// FlashAttention-style attention for the rows of this call against every cached position <= its
// own. Scores are fp32 dot products (sequential fma over head_dim); the softmax runs online over
// KV blocks of `attn_block` positions with FA2's exp2 formulation p = exp2(s*c - m*c),
// c = softmax_scale*log2(e); P is rounded to the act dtype before P.V when attn_p_round (tensor
// cores take bf16 P). split_kv runs independent partitions of `split_kv_partition` positions and
// merges them through their log-sum-exp in fp32, as FlashAttention's split-KV combine does.
void EmulatedOps::attention(int layer, const Mat& q, const Mat& k, const Mat& v, int pos0, Cache& cache,
                            Mat& out) const {
  const int n = static_cast<int>(q.rows()), hd = spec_.head_dim;
  const int group = spec_.heads / spec_.kv_heads;
  const std::size_t li = static_cast<std::size_t>(layer);
  if (observer_) observer_->observe(layer, q, k, v);
  Mat& K = cache.k[li];
  Mat& V = cache.v[li];
  if (pos0 + n > K.rows()) RLP_THROW("KV cache capacity {} exceeded at position {}", K.rows(), pos0 + n);
  RLP_CHECK(li < cache.kt.size() && cache.kt[li].cols() == K.rows(), "KV cache was not made by new_cache()");
  const bool fp8_kv = style_.kv_cache == KvCacheDtype::fp8;
  const float ks = fp8_kv ? kv_scales_.k[li] : 1.0f, vs = fp8_kv ? kv_scales_.v[li] : 1.0f;
  const float qs = fp8_kv ? kv_scales_.q[li] : 1.0f;
  // Cache write. fp8: vLLM stores satfinite_e4m3(x / scale); reads fp8 -> f16 -> f32 (exact) and the
  // kernel folds the scale into the softmax scale (K) and the output (V).
  write_kv_rows(cache, li, k, v, pos0, fp8_kv, ks, vs);
  const std::ptrdiff_t width = K.cols();
  const float c_log2 = num::attention_exp2_scale(hd, fp8_kv ? qs * ks : 1.0f);
  const int block = std::max(1, style_.attn_block);
  const int partition = style_.attention == AttentionKind::split_kv ? std::max(1, style_.split_kv_partition)
                                                                    : std::numeric_limits<int>::max();
  out.resize(n, spec_.heads * hd);
  const Mat& Kt = cache.kt[li];
  // A task is a tile of up to kAttnTileRows consecutive rows and the `group` heads of one KV group:
  // its lanes (row-major: lane = (r - r0) * group + head-in-group) walk the partitions and key
  // blocks together, and each lane's operations are exactly those of the single-vector kernel: the
  // same blocks (cut at the partition ends and at the lane's own causal end pos0 + r), the same
  // online-softmax update order, the same chains (the scores of a lane are computed a chunk of
  // whole blocks ahead of the softmax). Each output is computed by one task in a fixed
  // order: thread-count independent. Tasks visit tiles from both ends alternately (0, last, 1,
  // last-1, ...; KV groups innermost): causal tiles cost in proportion to their position, and the
  // pool's contiguous split would give the last thread the longest tiles.
  // Per lane the task keeps (m, l, acc[hd]) for each split-KV partition until the combine: tiles
  // shrink when there are many partitions (the tiling does not change any lane's operations).
  const long long parts_max = static_cast<long long>(pos0 + n - 1) / partition + 1;
  const long long state_per_row = parts_max * group * (hd + 2);
  const int tile_rows = static_cast<int>(
      std::max(1LL, std::min<long long>({n, kAttnTileRows, kAttnStateBudget / state_per_row})));
  const int chunk = block >= kScoreChunk ? block : (kScoreChunk / block) * block;
  const num::Format p_format = num::attention_p_format(style_.attn_p_round, fp8_kv, style_.act);
  const int tiles = (n + tile_rows - 1) / tile_rows;
  const int kvh = spec_.kv_heads;
  const std::size_t ntasks = static_cast<std::size_t>(tiles) * static_cast<std::size_t>(kvh);
  const std::size_t grain = static_cast<std::size_t>(std::max(1, 4 / (tile_rows * group)));
  // The pair kernel for the scores where the cache keeps pair words and this layer's keys could
  // pass bf16_dot_exact (each lane chunk's q decides).
  const bool key_pairs = !cache.kt_pairs.empty() && cache.k_span[li].normal;
  const std::ptrdiff_t key_ld = K.rows();
  // And for P.V where the cache keeps V's pair words and P holds bf16 values (rounded to bf16, e4m3
  // or e5m2), each block of a lane chunk checked before it runs.
  const bool value_pairs =
      !cache.v_pairs.empty() && cache.v_span[li].normal &&
      (p_format == num::Format::bf16 || p_format == num::Format::e4m3 || p_format == num::Format::e5m2);
  auto ktp_of = [&](int g) {
    return key_pairs ? cache.kt_pairs[li].data() + static_cast<std::ptrdiff_t>(g * hd / 2) * key_ld : nullptr;
  };
  parallel_for(ntasks, grain, [&](std::size_t t0, std::size_t t1) {
    const int max_lanes = tile_rows * group;
    std::vector<float> qv(static_cast<std::size_t>(max_lanes) * static_cast<std::size_t>(hd));
    // With the pair kernel: q's pair words and each lane's span.
    std::vector<uint32_t> qpv(key_pairs ? qv.size() / 2 : 0);
    std::vector<num::Bf16Span> qspan(key_pairs ? static_cast<std::size_t>(max_lanes) : 0);
    // With the P.V pair kernel: a lane chunk's P pair words.
    std::vector<num::Bf16Span> pspan(value_pairs ? static_cast<std::size_t>(max_lanes) : 0);
    std::vector<uint32_t> ppw(
        value_pairs ? static_cast<std::size_t>(kLaneChunk) * static_cast<std::size_t>(chunk / 2 + 1) : 0);
    std::vector<float> s(static_cast<std::size_t>(max_lanes) * static_cast<std::size_t>(chunk));
    std::vector<float> pr(static_cast<std::size_t>(max_lanes) * static_cast<std::size_t>(chunk));
    std::vector<float> m_st, l_st, acc_st, lse;  // per (lane, partition)
    for (std::size_t task = t0; task < t1; ++task) {
      const int ti = static_cast<int>(task / static_cast<std::size_t>(kvh));
      const int tile = ti % 2 == 0 ? ti / 2 : tiles - 1 - ti / 2;
      const int g = static_cast<int>(task % static_cast<std::size_t>(kvh));
      const uint32_t* ktp0 = ktp_of(g);
      const int r0 = tile * tile_rows, r1 = std::min(n, r0 + tile_rows) - 1;
      const int lanes = (r1 - r0 + 1) * group;
      const int last_max = pos0 + r1;
      const int nparts = last_max / partition + 1;  // partitions of the tile's last row
      auto lane_row = [&](int lane) { return r0 + lane / group; };
      auto lane_head = [&](int lane) { return g * group + lane % group; };
      for (int lane = 0; lane < lanes; ++lane) {
        const int r = lane_row(lane), h = lane_head(lane);
        float* qd = qv.data() + static_cast<std::size_t>(lane) * static_cast<std::size_t>(hd);
        for (int d = 0; d < hd; ++d)
          qd[d] = fp8_kv ? num::round_e4m3_sat(q(r, h * hd + d) / qs) : q(r, h * hd + d);
        if (key_pairs) {
          uint32_t* qp = qpv.data() + static_cast<std::size_t>(lane) * static_cast<std::size_t>(hd / 2);
          for (int t = 0; t < hd / 2; ++t) qp[t] = pair_word(qd[2 * t], qd[2 * t + 1]);
          qspan[static_cast<std::size_t>(lane)] = num::bf16_span(qd, static_cast<std::size_t>(hd));
        }
      }
      const std::size_t nst = static_cast<std::size_t>(lanes) * static_cast<std::size_t>(nparts);
      m_st.assign(nst, -std::numeric_limits<float>::infinity());
      l_st.assign(nst, 0.0f);
      acc_st.assign(nst * static_cast<std::size_t>(hd), 0.0f);
      auto st_index = [&](int lane, int pi) {
        return static_cast<std::size_t>(lane) * static_cast<std::size_t>(nparts) +
               static_cast<std::size_t>(pi);
      };
      auto acc_ptr = [&](int lane, int pi) {
        return acc_st.data() + st_index(lane, pi) * static_cast<std::size_t>(hd);
      };
      // Scores of lanes [la, lb) for keys c0..e, into s[lane][j - c0].
      auto scores = [&](int la, int lb, int c0, int e) {
        const float* qp[kLaneChunk];
        float* sp[kLaneChunk];
        for (int c = la; c < lb; c += kLaneChunk) {
          const int nl = std::min(kLaneChunk, lb - c);
          for (int i = 0; i < nl; ++i) {
            qp[i] = qv.data() + static_cast<std::size_t>(c + i) * static_cast<std::size_t>(hd);
            sp[i] = s.data() + static_cast<std::size_t>(c + i) * static_cast<std::size_t>(chunk);
          }
          if (key_pairs) {
            num::Bf16Span span = qspan[static_cast<std::size_t>(c)];
            const uint32_t* qpp[kLaneChunk];
            for (int i = 0; i < nl; ++i) {
              span = num::span_union(span, qspan[static_cast<std::size_t>(c + i)]);
              qpp[i] = qpv.data() + static_cast<std::size_t>(c + i) * static_cast<std::size_t>(hd / 2);
            }
            if (num::bf16_dot_exact(span, cache.k_span[li], hd)) {
              call_with_lane_count<KeyDotPairsOfLanes>(nl, qpp, qp, ktp0, key_ld, Kt, g * hd, hd, c0, e, sp);
              continue;
            }
          }
          call_with_lane_count<KeyDotsOfLanes>(nl, qp, Kt, g * hd, hd, c0, e, sp);
        }
      };
      // Online-softmax update and P.V of lanes [la, lb) for the block b0..b1 of partition pi (scores
      // from s at b0 - c0).
      auto softmax_pv = [&](int la, int lb, int pi, int c0, int b0, int b1) {
        const int nk = b1 - b0 + 1;
        auto p_of = [&](int lane) {
          return pr.data() + static_cast<std::size_t>(lane) * static_cast<std::size_t>(chunk);
        };
        for (int lane = la; lane < lb; ++lane) {
          const float* sl =
              s.data() + static_cast<std::size_t>(lane) * static_cast<std::size_t>(chunk) + (b0 - c0);
          float* pl = p_of(lane);
          const std::size_t si = st_index(lane, pi);
          float* acc = acc_ptr(lane, pi);
          const float m_old = m_st[si];
          const float m_new = max_scores(sl, nk, m_old);
          const float m_scaled = m_new * c_log2;
          const float alpha = num::exp2f_model(m_old * c_log2 - m_scaled);  // 0 on the first block
          l_st[si] *= alpha;
          m_st[si] = m_new;
          for (int d = 0; d < hd; ++d) acc[d] *= alpha;
          for (int j = 0; j < nk; ++j) pl[j] = std::fma(sl[j], c_log2, -m_scaled);
          num::exp2_model_inplace(pl, nk);
        }
        // l += p in key order, each lane's own chain; four lanes' chains side by side (a lone fp32
        // add chain waits on each add's latency).
        int lane = la;
        for (; lane + 4 <= lb; lane += 4) {
          float& l0 = l_st[st_index(lane, pi)];
          float& l1 = l_st[st_index(lane + 1, pi)];
          float& l2 = l_st[st_index(lane + 2, pi)];
          float& l3 = l_st[st_index(lane + 3, pi)];
          const float *p0 = p_of(lane), *p1 = p_of(lane + 1), *p2 = p_of(lane + 2), *p3 = p_of(lane + 3);
          float a0 = l0, a1 = l1, a2 = l2, a3 = l3;
          for (int j = 0; j < nk; ++j) {
            a0 += p0[j];
            a1 += p1[j];
            a2 += p2[j];
            a3 += p3[j];
          }
          l0 = a0;
          l1 = a1;
          l2 = a2;
          l3 = a3;
        }
        for (; lane < lb; ++lane) {
          float& l = l_st[st_index(lane, pi)];
          const float* pl = p_of(lane);
          for (int j = 0; j < nk; ++j) l += pl[j];
        }
        for (lane = la; lane < lb; ++lane) {
          float* pl = p_of(lane);
          // One switch per block, not per element: the loops stay vectorizable.
          switch (p_format) {
            case num::Format::fp32: break;
            case num::Format::bf16:
              for (int j = 0; j < nk; ++j) pl[j] = num::round_bf16(pl[j]);
              break;
            case num::Format::fp16:
              for (int j = 0; j < nk; ++j) pl[j] = num::round_fp16(pl[j]);
              break;
            case num::Format::e4m3:
            case num::Format::e5m2:
              for (int j = 0; j < nk; ++j) pl[j] = num::round_to(pl[j], p_format);
              break;
          }
          if (value_pairs) pspan[static_cast<std::size_t>(lane)] = p_span_of(pl, nk);
        }
        const float* pp[kLaneChunk];
        float* ap[kLaneChunk];
        for (int c = la; c < lb; c += kLaneChunk) {
          const int nl = std::min(kLaneChunk, lb - c);
          for (int i = 0; i < nl; ++i) {
            pp[i] = pr.data() + static_cast<std::size_t>(c + i) * static_cast<std::size_t>(chunk);
            ap[i] = acc_ptr(c + i, pi);
          }
          int k0 = b0;  // the first key not yet accumulated
          if (value_pairs && b1 - b0 >= 2) {
            // A leading key of odd position by itself, then whole pair rows if this block allows.
            if (b0 % 2 == 1) {
              call_with_lane_count<AccumulatePvOfLanes>(nl, pp, V, g * hd, hd, b0, b0, ap);
              ++k0;
            }
            const int k1 = k0 + (b1 - k0 + 1) / 2 * 2 - 1;  // the last key of a whole pair
            num::Bf16Span p_span{true, 1000, 0};            // emax 0: the bound counts every p <= 1
            bool acc_ok = true;
            const float* pk[kLaneChunk];
            const uint32_t* pw[kLaneChunk];
            for (int i = 0; i < nl; ++i) {
              pk[i] = pp[i] + (k0 - b0);
              p_span = num::span_union(p_span, pspan[static_cast<std::size_t>(c + i)]);  // of b0..b1
              acc_ok = acc_ok && sums_stay_normal(ap[i], hd);
              uint32_t* w =
                  ppw.data() + static_cast<std::size_t>(i) * static_cast<std::size_t>(chunk / 2 + 1);
              for (int t = 0; 2 * t < k1 - k0; ++t) w[t] = pair_word(pk[i][2 * t], pk[i][2 * t + 1]);
              pw[i] = w;
            }
            if (acc_ok && num::bf16_dot_exact(p_span, cache.v_span[li], k1 + 1)) {
              const uint32_t* vp0 =
                  cache.v_pairs[li].data() + static_cast<std::ptrdiff_t>(k0 / 2) * width + g * hd;
              call_with_lane_count<AccumulatePvPairsOfLanes>(nl, pw, pk, vp0, width, V, g * hd, hd, k0, k1,
                                                             ap);
              k0 = k1 + 1;
              for (int i = 0; i < nl; ++i) pp[i] += k0 - b0;
            } else {
              for (int i = 0; i < nl; ++i) pp[i] += k0 - b0;
            }
          }
          if (k0 <= b1) call_with_lane_count<AccumulatePvOfLanes>(nl, pp, V, g * hd, hd, k0, b1, ap);
        }
      };
      // Partitions, then chunks of whole blocks, then blocks. Active rows: pos0 + r >= the first key.
      // Rows whose causal end falls inside the range have their own end (one row's lanes at a time);
      // the rest share it.
      auto for_rows = [&](int k0, int kend, auto&& fn) {
        for (int r = std::max(r0, k0 - pos0); r <= r1; ++r) {
          const int last = pos0 + r;
          if (last >= kend) {
            fn((r - r0) * group, lanes, kend);
            break;
          }
          fn((r - r0) * group, (r - r0 + 1) * group, last);
        }
      };
      int pi = 0;
      for (int p0 = 0;; ++pi) {
        const int p1 =
            static_cast<int>(std::min<long long>(static_cast<long long>(p0) + partition - 1, last_max));
        for (int c0 = p0; c0 <= p1; c0 += chunk) {
          const int cend = static_cast<int>(std::min<long long>(static_cast<long long>(c0) + chunk - 1, p1));
          for_rows(c0, cend, [&](int la, int lb, int e) { scores(la, lb, c0, e); });
          for (int b0 = c0; b0 <= cend; b0 += block) {
            const int bfull =
                static_cast<int>(std::min<long long>(static_cast<long long>(b0) + block - 1, cend));
            for_rows(b0, bfull, [&](int la, int lb, int e) { softmax_pv(la, lb, pi, c0, b0, e); });
          }
        }
        if (partition > last_max - p0) break;
        p0 += partition;
      }
      for (int lane = 0; lane < lanes; ++lane) {
        const int r = lane_row(lane), h = lane_head(lane);
        const int last = pos0 + r;
        const int np = last / partition + 1;
        float* o = out.row(r).data() + h * hd;
        if (np == 1) {
          const std::size_t si = st_index(lane, 0);
          const float* acc = acc_ptr(lane, 0);
          const float inv = 1.0f / l_st[si];
          for (int d = 0; d < hd; ++d) o[d] = round_act(acc[d] * inv * vs);
        } else {
          // Split-KV combine: o_i = acc_i / l_i, lse_i = m_i*c + log2(l_i) (log2 domain), weights
          // exp2(lse_i - lse) in fp32, outputs summed in partition order.
          float lse_max = -std::numeric_limits<float>::infinity();
          lse.resize(static_cast<std::size_t>(np));
          for (int i = 0; i < np; ++i) {
            const std::size_t si = st_index(lane, i);
            lse[static_cast<std::size_t>(i)] = m_st[si] * c_log2 + num::log2f_model(l_st[si]);
            lse_max = std::max(lse_max, lse[static_cast<std::size_t>(i)]);
          }
          float sum = 0.0f;
          for (float x : lse) sum += num::exp2f_model(x - lse_max);
          const float lse_all = lse_max + num::log2f_model(sum);
          for (float& x : lse) x = num::exp2f_model(x - lse_all);  // now each partition's weight
          for (int d = 0; d < hd; ++d) {
            float acc = 0.0f;
            for (int i = 0; i < np; ++i)
              acc = std::fma(lse[static_cast<std::size_t>(i)], acc_ptr(lane, i)[d] / l_st[st_index(lane, i)],
                             acc);
            o[d] = round_act(acc * vs);
          }
        }
      }
    }
  });
}

}  // namespace rlp
