// Block-scaled fp8 GEMM: per-slice partials promoted into fp32 with the row's and the column's
// scales (cuBLASLt's or DeepGEMM's promotion), split-K ranges summed in order; the partials are
// plain fp32 chains (packed or small-M kernels) or the bit-level Hopper in-slice model.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <type_traits>
#include <vector>

#include "gemm_blocking.hpp"
#include "rlparity/numerics/gemm.hpp"
#include "rlparity/numerics/quantize.hpp"

namespace rlp::num {
using namespace gemm_detail;
namespace {

// No NaN or Inf code (e4m3: S.1111.111; e5m2: S.11111.xx).
bool fp8_codes_finite(const Fp8Tensor& t) {
  const uint8_t mask = t.kind == Fp8Kind::e4m3 ? 0x7F : 0x7C;
  uint8_t special = 0;
  for (const uint8_t c : t.codes) special |= static_cast<uint8_t>((c & mask) == mask);
  return special == 0;
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
                p = hopper_slice_accumulate(xf.data() + k0 + q0, wr + k0 + q0, std::min(128, len - q0), p,
                                            X.kind, W.kind);
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
    gemm_fp8_small_m<simd::Lanes8>(X, W, Y, xlut, wdec, S, deepgemm, cfg.out);
    return;
  }
#if defined(__AVX512F__)
  if (M <= 16) {
    gemm_fp8_small_m<simd::Lanes16>(X, W, Y, xlut, wdec, S, deepgemm, cfg.out);
    return;
  }
#endif
  // The slice chains as micro_dot steps where the products stay exact and normal: every product of
  // two e4m3/e5m2 values is (at least 2^-32, below 2^32), so only NaN and Inf codes rule it out.
  const bool dot = bf16_dot_kernel_available() && fp8_codes_finite(X) && fp8_codes_finite(W);
  const Fp8Rows xrows{X.codes.data(), K, xdec}, wrows{W.codes.data(), K, wdec};
  auto body = [&](const Tile& t, TileBufs& b, auto& xr) {
    constexpr bool kPairs = std::is_same_v<std::decay_t<decltype(xr)>, RowPanelsOf<uint32_t>>;
    for (int r = 0; r < S; ++r) {
      std::fill(b.racc.begin(), b.racc.begin() + static_cast<std::ptrdiff_t>(t.used), 0.0f);  // y = +0
      for (int s = split_begin(slices, S, r); s < split_begin(slices, S, r + 1); ++s) {
        const int k0 = s * B, kc = std::min(B, K - k0), kp = (kc + 1) / 2;
        auto* xp = xr.at(t.nir, k0);
        if constexpr (kPairs) {
          if (t.pack_x) pack_pairs<MR>(xrows, t.m0, t.mrows, k0, kc, xp);
          pack_pairs<NR>(wrows, t.n0, t.ncols, k0, kc, b.wpairs.data());
        } else {
          if (t.pack_x) pack_rows<MR>(xrows, t.m0, t.mrows, k0, kc, xp);
          pack_rows<NR>(wrows, t.n0, t.ncols, k0, kc, b.wp.data());
        }
        for (int i = 0; i < t.mrows; ++i)
          b.sa[static_cast<size_t>(i)] =
              X.scale_inv[static_cast<size_t>(t.m0 + i) * static_cast<size_t>(xcb) + static_cast<size_t>(s)];
        for (int j = 0; j < t.ncols; ++j)
          b.sb[static_cast<size_t>(j)] =
              W.scale_inv[static_cast<size_t>((t.n0 + j) / W.block_rows) * static_cast<size_t>(wcb) +
                          static_cast<size_t>(s)];
        for (int jr = 0; jr < t.njr; ++jr)
          for (int ir = 0; ir < t.nir; ++ir) {
            const size_t off = (static_cast<size_t>(jr) * t.nir + static_cast<size_t>(ir)) * kTile;
            if constexpr (kPairs) {
              micro_dot(kp, xp + static_cast<size_t>(ir) * kp * MR,
                        b.wpairs.data() + static_cast<size_t>(jr) * kp * NR, b.acc.data() + off, true);
            } else {
              micro(kc, xp + static_cast<size_t>(ir) * kc * MR,
                    b.wp.data() + static_cast<size_t>(jr) * kc * NR, b.acc.data() + off, true);
            }
            // Promotion of the slice partial into this range's y (padded lanes use scale 0).
            const float* p = b.acc.data() + off;
            float* y = b.racc.data() + off;
            for (int i = 0; i < MR; ++i) {
              const int gi = ir * MR + i;
              const float a = gi < t.mrows ? b.sa[static_cast<size_t>(gi)] : 0.0f;
              for (int j = 0; j < NR; ++j) {
                const int gj = jr * NR + j;
                const float bs = gj < t.ncols ? b.sb[static_cast<size_t>(gj)] : 0.0f;
                y[i * NR + j] = promote(p[i * NR + j], a, bs, y[i * NR + j]);
              }
            }
          }
      }
      copy_or_add(b.tot, b.racc, t.used, r == 0);
    }
    write_back(b.tot.data(), Y, N, t.m0, t.mrows, t.n0, t.ncols, t.nir, cfg.out);
  };
  if (dot)
    for_each_tile<uint32_t>(M, N, K, body);
  else
    for_each_tile<float>(M, N, K, body);
}

void gemm_fp8_rowscaled(const Fp8Tensor& X, const Fp8Tensor& W, float* Y, SliceAccum accum, bool swap_ab,
                        const float* bias, OutRound out) {
  RLP_CHECK(X.cols == W.cols, "gemm_fp8_rowscaled: K mismatch, X is {}x{}, W is {}x{}", X.rows, X.cols,
            W.rows, W.cols);
  RLP_CHECK(X.block_rows == 1 && X.block_cols == X.cols && W.block_rows == 1 && W.block_cols == W.cols,
            "gemm_fp8_rowscaled: X and W need one scale per row (1x{} blocks), have {}x{} and {}x{}", X.cols,
            X.block_rows, X.block_cols, W.block_rows, W.block_cols);
  const int M = X.rows, N = W.rows, K = X.cols;
  if (M == 0 || N == 0) return;
  const size_t MN = static_cast<size_t>(M) * static_cast<size_t>(N);
  std::vector<float> xf(static_cast<size_t>(M) * static_cast<size_t>(K));
  for (size_t i = 0; i < xf.size(); ++i) xf[i] = fp8_to_float(X.codes[i], X.kind);
  if (accum == SliceAccum::fp32) {
    GemmConfig one_chain;  // split_k 1, k_chunk 0: one chain over K
    one_chain.out = OutRound::fp32;
    gemm_f32acc(xf.data(), W.codes.data(), W.kind, Y, M, N, K, one_chain);
  } else {
    // Bit-level model, element by element (slow by design): C carried through every k = 32 step.
    std::vector<float> wf(static_cast<size_t>(N) * static_cast<size_t>(K));
    for (size_t i = 0; i < wf.size(); ++i) wf[i] = fp8_to_float(W.codes[i], W.kind);
    rlp::parallel_for(static_cast<size_t>(M), 1, [&](size_t r0, size_t r1) {
      for (size_t m = r0; m < r1; ++m)
        for (int n = 0; n < N; ++n) {
          float c = 0.0f;
          for (int k0 = 0; k0 < K; k0 += 128)
            c = hopper_slice_accumulate(
                xf.data() + m * static_cast<size_t>(K) + static_cast<size_t>(k0),
                wf.data() + static_cast<size_t>(n) * static_cast<size_t>(K) + static_cast<size_t>(k0),
                std::min(128, K - k0), c, X.kind, W.kind);
          Y[m * static_cast<size_t>(N) + static_cast<size_t>(n)] = c;
        }
    });
  }
  // The ScaledEpilogue, in fp32 (-ffp-contract=off keeps the two multiplies two roundings).
  rlp::parallel_for(MN, 1 << 14, [&](size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; ++i) {
      const size_t m = i / static_cast<size_t>(N), n = i % static_cast<size_t>(N);
      const float sx = X.scale_inv[m], sw = W.scale_inv[n];
      const float inner = swap_ab ? sx : sw, outer = swap_ab ? sw : sx;
      const float t = inner * Y[i];
      Y[i] = round_out(bias != nullptr ? std::fma(outer, t, bias[n]) : outer * t, out);
    }
  });
}

}  // namespace rlp::num
