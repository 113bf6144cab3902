// fp32-accumulating GEMM over fp32 or 16-bit (bf16/fp16) weights: the split-K ranges and k_chunk
// chunks of gemm.hpp's contract, run by the packed kernel or, for a few rows, the small-M kernel.
#include <algorithm>
#include <cstddef>
#include <type_traits>
#include <vector>

#include "gemm_blocking.hpp"
#include "rlparity/numerics/gemm.hpp"

namespace rlp::num {
using namespace gemm_detail;
namespace {

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

// The packed kernel's task tiles: run(tile, segment, bufs, row_panels) accumulates one K segment
// into bufs.acc (the chunk's chain, from +0 at a chunk start); the chunk and range sums and the
// write-back follow the contract.
template <class Panel, class Run>
void packed_tiles(float* Y, int M, int N, int K, const std::vector<Seg>& segs, bool direct, OutRound out,
                  const Run& run) {
  for_each_tile<Panel>(M, N, K, [&](const Tile& t, TileBufs& b, RowPanelsOf<Panel>& xr) {
    for (const Seg& sg : segs) {
      run(t, sg, b, xr);
      if (direct) continue;
      if (sg.chunk_end) copy_or_add(b.racc, b.acc, t.used, sg.first_chunk);
      if (sg.range_end) copy_or_add(b.tot, b.racc, t.used, sg.range == 0);
    }
    write_back(direct ? b.acc.data() : b.tot.data(), Y, N, t.m0, t.mrows, t.n0, t.ncols, t.nir, out);
  });
}

#if defined(__AVX512F__)
constexpr int kSmallM = 16;  // the small-M kernel's rows (16 lanes)
#else
constexpr int kSmallM = 8;
#endif

// `dot`: run the chains as micro_dot steps (W bf16, X bf16 values, bf16_dot_exact holds).
template <class Rows>
void gemm_f32acc_rows(const float* X, const Rows& W, float* Y, int M, int N, int K, const GemmConfig& cfg,
                      bool dot = false) {
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
    gemm_f32acc_small_m<simd::Lanes8>(X, W, Y, M, N, K, segs, direct, cfg.out);
    return;
  }
#if defined(__AVX512F__)
  if (M <= 16) {
    gemm_f32acc_small_m<simd::Lanes16>(X, W, Y, M, N, K, segs, direct, cfg.out);
    return;
  }
#endif

  // One K segment of a tile: X's panels (first tile of a row tile) and W's, then the micro-tiles'
  // chains, as fma steps (float panels) or bf16 dot-product steps (pair panels).
  auto run = [&](const Tile& t, const Seg& sg, TileBufs& b, auto& xr) {
    constexpr bool kPairs = std::is_same_v<std::decay_t<decltype(xr)>, RowPanelsOf<uint32_t>>;
    const int kc = sg.k1 - sg.k0, kp = (kc + 1) / 2;
    auto* xp = xr.at(t.nir, sg.k0);
    if constexpr (kPairs) {
      if (t.pack_x) pack_pairs<MR>(F32Rows{X, K}, t.m0, t.mrows, sg.k0, kc, xp);
      pack_pairs<NR>(W, t.n0, t.ncols, sg.k0, kc, b.wpairs.data());
    } else {
      if (t.pack_x) pack_rows<MR>(F32Rows{X, K}, t.m0, t.mrows, sg.k0, kc, xp);
      pack_rows<NR>(W, t.n0, t.ncols, sg.k0, kc, b.wp.data());
    }
    for (int jr = 0; jr < t.njr; ++jr)
      for (int ir = 0; ir < t.nir; ++ir) {
        float* c = b.acc.data() + (static_cast<size_t>(jr) * t.nir + static_cast<size_t>(ir)) * kTile;
        if constexpr (kPairs)
          micro_dot(kp, xp + static_cast<size_t>(ir) * kp * MR,
                    b.wpairs.data() + static_cast<size_t>(jr) * kp * NR, c, sg.chunk_start);
        else
          micro(kc, xp + static_cast<size_t>(ir) * kc * MR, b.wp.data() + static_cast<size_t>(jr) * kc * NR,
                c, sg.chunk_start);
      }
  };
  if (dot)
    packed_tiles<uint32_t>(Y, M, N, K, segs, direct, cfg.out, run);
  else
    packed_tiles<float>(Y, M, N, K, segs, direct, cfg.out, run);
}
}  // namespace

void gemm_f32acc(const float* X, const float* W, float* Y, int M, int N, int K, const GemmConfig& cfg) {
  gemm_f32acc_rows(X, F32Rows{W, K}, Y, M, N, K, cfg);
}

void gemm_f32acc(const float* X, const uint16_t* W, Half16 wfmt, float* Y, int M, int N, int K,
                 const GemmConfig& cfg, const Bf16Span* w_span) {
  bool dot = false;
  if (wfmt == Half16::bf16 && M > kSmallM && N > 0 && K > 0 && bf16_dot_kernel_available()) {
    const Bf16Span ws = w_span ? *w_span : bf16_span(W, static_cast<size_t>(N) * static_cast<size_t>(K));
    dot = bf16_dot_exact(bf16_span(X, static_cast<size_t>(M) * static_cast<size_t>(K)), ws, K);
  }
  gemm_f32acc_rows(X, Half16Rows{W, K, wfmt}, Y, M, N, K, cfg, dot);
}

void gemm_f32acc(const float* X, const uint8_t* W, Fp8Kind wkind, float* Y, int M, int N, int K,
                 const GemmConfig& cfg) {
  float lut[256];
  for (int c = 0; c < 256; ++c) lut[c] = fp8_to_float(static_cast<uint8_t>(c), wkind);
  const Fp8Decoder dec{lut, wkind == Fp8Kind::e4m3};
  gemm_f32acc_rows(X, Fp8Rows{W, K, dec}, Y, M, N, K, cfg);
}

}  // namespace rlp::num
