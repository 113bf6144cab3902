// The float64 oracle GEMM.
#include <algorithm>
#include <cstddef>
#include <vector>

#include "rlparity/numerics/gemm.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/parallel.hpp"
#include "simd_lanes.hpp"

namespace rlp::num {

// Each output is s = s + x[k]*w[k] in increasing k from s = +0, product and sum each rounded to
// double (-ffp-contract=off: no fusion). W is packed per panel of kF64Cols columns (k-major) and
// the panel's outputs for kF64Rows rows at a time run as vector lanes, one chain per lane: every
// output's order is unchanged, only the memory layout and the parallelism differ.
namespace {
using DL = simd::DoubleLanes;
constexpr int kDLanes = DL::W;
constexpr int kF64Rows = 8;
constexpr int kF64Vecs = 2;
constexpr int kF64Cols = kF64Vecs * kDLanes;
}  // namespace

void gemm_f64(const double* X, const double* W, double* Y, int M, int N, int K) {
  const auto ks = static_cast<size_t>(K);
  gemm_f64(
      X, [&](int n, double* out) { std::copy_n(W + static_cast<size_t>(n) * ks, ks, out); }, Y, M, N, K);
}

void gemm_f64(const double* X, const std::function<void(int n, double* out)>& w_row, double* Y, int M, int N,
              int K) {
  RLP_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm_f64: negative shape M={} N={} K={}", M, N, K);
  if (M == 0 || N == 0) return;
  const size_t panels = (static_cast<size_t>(N) + kF64Cols - 1) / kF64Cols;
  const size_t ks = static_cast<size_t>(K);
  rlp::parallel_for(panels, 1, [&](size_t p0, size_t p1) {
    std::vector<double> wp(ks * kF64Cols), w_n(ks);
    for (size_t p = p0; p < p1; ++p) {
      const int n0 = static_cast<int>(p) * kF64Cols, nr = std::min(kF64Cols, N - n0);
      for (int j = 0; j < kF64Cols; ++j) {  // columns past N are zero; their lanes are discarded
        if (j < nr) w_row(n0 + j, w_n.data());
        for (size_t k = 0; k < ks; ++k) wp[k * kF64Cols + static_cast<size_t>(j)] = j < nr ? w_n[k] : 0.0;
      }
      for (int m0 = 0; m0 < M; m0 += kF64Rows) {
        const int mr = std::min(kF64Rows, M - m0);
        const double* xs[kF64Rows];
        for (int i = 0; i < kF64Rows; ++i) xs[i] = X + static_cast<size_t>(m0 + std::min(i, mr - 1)) * ks;
        DL::V acc[kF64Rows][kF64Vecs];
        for (auto& row : acc)
          for (DL::V& a : row) a = DL::zero();
        for (size_t k = 0; k < ks; ++k) {
          DL::V w[kF64Vecs];
          for (int v = 0; v < kF64Vecs; ++v)
            w[v] = DL::load(wp.data() + k * kF64Cols + static_cast<size_t>(v) * kDLanes);
          for (int i = 0; i < kF64Rows; ++i)
            for (int v = 0; v < kF64Vecs; ++v) acc[i][v] = DL::mul_add(acc[i][v], xs[i][k], w[v]);
        }
        double t[kF64Cols];
        for (int i = 0; i < mr; ++i) {
          for (int v = 0; v < kF64Vecs; ++v) DL::store(t + v * kDLanes, acc[i][v]);
          std::copy(t, t + nr,
                    Y + static_cast<size_t>(m0 + i) * static_cast<size_t>(N) + static_cast<size_t>(n0));
        }
      }
    }
  });
}

}  // namespace rlp::num
