// GEMMs in the emulator's stated accumulation order (include/rlparity/numerics/gemm.hpp), for
// --cuda-gemm exact: the same bits as num::gemm_f32acc / num::gemm_fp8_blockscaled, on CUDA cores.
// The order is a property of each output element (its own fma chain over K, cut into split-K
// ranges and k-chunks), so any tiling that keeps every element's chain in increasing k gives the
// same bits; no tensor cores (their accumulation order is the hardware's).
#include <algorithm>

#include "device_common.cuh"
#include "rlparity/numerics/gemm.hpp"

namespace rlp::cuda::kern {
namespace {

constexpr int kTile = 64;       // outputs per block along M and N
constexpr int kThreadTile = 4;  // outputs per thread along M and N (16 x 16 threads)
constexpr int kKTile = 16;      // K elements staged in shared memory per step

__device__ __forceinline__ float widen16(uint16_t b, bool fp16) {
  return fp16 ? num::fp16_bits_to_float(b) : num::bf16_bits_to_float(b);
}

// Y[M x N] = X[M x K] W[N x K]^T; X floats (act-dtype values), W 16-bit patterns.
__global__ void __launch_bounds__(256)
    f32acc_kernel(const float* __restrict__ X, const uint16_t* __restrict__ W, bool fp16, int M, int N, int K,
                  int split_k, int k_chunk, num::OutRound out, float* __restrict__ Y) {
  __shared__ float xs[kKTile][kTile + 1];
  __shared__ float ws[kKTile][kTile + 1];
  const int tx = static_cast<int>(threadIdx.x) % 16, ty = static_cast<int>(threadIdx.x) / 16;
  const int m0 = static_cast<int>(blockIdx.y) * kTile, n0 = static_cast<int>(blockIdx.x) * kTile;
  float acc[kThreadTile][kThreadTile], part[kThreadTile][kThreadTile], tot[kThreadTile][kThreadTile];
  for (int r = 0; r < split_k; ++r) {
    const int rb = num::split_begin(K, split_k, r), re = num::split_begin(K, split_k, r + 1);
    const int chunk = k_chunk > 0 ? k_chunk : re - rb;
    for (int c0 = rb; c0 < re; c0 += chunk) {
      const int c1 = c0 + chunk < re ? c0 + chunk : re;
      for (int i = 0; i < kThreadTile; ++i)
        for (int j = 0; j < kThreadTile; ++j) acc[i][j] = 0.0f;
      for (int k0 = c0; k0 < c1; k0 += kKTile) {
        const int kn = c1 - k0 < kKTile ? c1 - k0 : kKTile;
        for (int e = static_cast<int>(threadIdx.x); e < kKTile * kTile; e += 256) {
          const int row = e / kKTile, kk = e % kKTile;
          const bool kin = kk < kn;
          xs[kk][row] = kin && m0 + row < M ? X[static_cast<std::size_t>(m0 + row) * K + k0 + kk] : 0.0f;
          ws[kk][row] =
              kin && n0 + row < N ? widen16(W[static_cast<std::size_t>(n0 + row) * K + k0 + kk], fp16) : 0.0f;
        }
        __syncthreads();
        for (int kk = 0; kk < kn; ++kk)
          for (int i = 0; i < kThreadTile; ++i) {
            const float x = xs[kk][ty + 16 * i];
            for (int j = 0; j < kThreadTile; ++j) acc[i][j] = fmaf(x, ws[kk][tx + 16 * j], acc[i][j]);
          }
        __syncthreads();
      }
      for (int i = 0; i < kThreadTile; ++i)
        for (int j = 0; j < kThreadTile; ++j) part[i][j] = c0 == rb ? acc[i][j] : part[i][j] + acc[i][j];
    }
    for (int i = 0; i < kThreadTile; ++i)
      for (int j = 0; j < kThreadTile; ++j) tot[i][j] = r == 0 ? part[i][j] : tot[i][j] + part[i][j];
  }
  for (int i = 0; i < kThreadTile; ++i)
    for (int j = 0; j < kThreadTile; ++j) {
      const int m = m0 + ty + 16 * i, n = n0 + tx + 16 * j;
      if (m < M && n < N)
        Y[static_cast<std::size_t>(m) * N + n] = num::round_out(K > 0 ? tot[i][j] : 0.0f, out);
    }
}

// One output per thread: the block-scaled fp8 order of num::gemm_fp8_blockscaled.
__global__ void fp8_kernel(const uint8_t* __restrict__ Xc, const float* __restrict__ Xs,
                           const uint8_t* __restrict__ Wc, const float* __restrict__ Wsc, Fp8GemmShape s,
                           num::GemmConfig cfg, float* __restrict__ Y) {
  __shared__ float xlut[256], wlut[256];
  for (int c = static_cast<int>(threadIdx.x); c < 256; c += blockDim.x) {
    xlut[c] = num::fp8_to_float(static_cast<uint8_t>(c), s.x_kind);
    wlut[c] = num::fp8_to_float(static_cast<uint8_t>(c), s.w_kind);
  }
  __syncthreads();
  const std::size_t idx = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (idx >= static_cast<std::size_t>(s.M) * static_cast<std::size_t>(s.N)) return;
  const int m = static_cast<int>(idx / static_cast<std::size_t>(s.N)),
            n = static_cast<int>(idx % static_cast<std::size_t>(s.N));
  const int K = s.K, B = s.block_cols;
  const int slices = (K + B - 1) / B;
  const int S = max(1, min(cfg.split_k, max(slices, 1)));
  const uint8_t* xr = Xc + static_cast<std::size_t>(m) * K;
  const uint8_t* wr = Wc + static_cast<std::size_t>(n) * K;
  const bool deepgemm = cfg.promotion == num::Promotion::deepgemm;
  float tot = 0.0f;
  for (int r = 0; r < S; ++r) {
    float y = 0.0f;
    for (int sl = num::split_begin(slices, S, r); sl < num::split_begin(slices, S, r + 1); ++sl) {
      const int k0 = sl * B, len = K - k0 < B ? K - k0 : B;
      float p = 0.0f;
      if (cfg.slice_accum == num::SliceAccum::hopper) {
        float a[32], b[32];
        for (int q0 = 0; q0 < len; q0 += 32) {
          const int q = len - q0 < 32 ? len - q0 : 32;
          for (int i = 0; i < q; ++i) {
            a[i] = xlut[xr[k0 + q0 + i]];
            b[i] = wlut[wr[k0 + q0 + i]];
          }
          p = num::hopper_step(a, b, q, p, s.x_kind, s.w_kind);
        }
      } else {
        for (int k = k0; k < k0 + len; ++k) p = fmaf(xlut[xr[k]], wlut[wr[k]], p);
      }
      const float sa = Xs[static_cast<std::size_t>(m) * slices + sl];
      const float sb = Wsc[static_cast<std::size_t>(n / s.w_block_rows) * slices + sl];
      y = deepgemm ? fmaf(sa * sb, p, y) : fmaf(p * sa, sb, y);
    }
    tot = r == 0 ? y : tot + y;
  }
  Y[idx] = num::round_out(tot, cfg.out);
}

}  // namespace

void gemm_exact_f32acc(const float* X, const uint16_t* W, bool fp16, int M, int N, int K,
                       const num::GemmConfig& cfg, float* Y) {
  if (M <= 0 || N <= 0) return;
  const int S =
      std::max(1, std::min(cfg.split_k, K));  // the emulator's range count (k_segments); 1 when K = 0
  const dim3 grid(static_cast<unsigned>((N + kTile - 1) / kTile),
                  static_cast<unsigned>((M + kTile - 1) / kTile));
  f32acc_kernel<<<grid, 256>>>(X, W, fp16, M, N, K, S, cfg.k_chunk, cfg.out, Y);
  RLP_CUDA_CHECK_LAUNCH("f32acc_kernel");
}

void gemm_exact_fp8(const uint8_t* Xc, const float* Xs, const uint8_t* Wc, const float* Ws,
                    const Fp8GemmShape& s, const num::GemmConfig& cfg, float* Y) {
  const std::size_t n = static_cast<std::size_t>(s.M) * static_cast<std::size_t>(s.N);
  if (n == 0) return;
  fp8_kernel<<<blocks_for(n, 128), 128>>>(Xc, Xs, Wc, Ws, s, cfg, Y);
  RLP_CUDA_CHECK_LAUNCH("fp8_kernel");
}

}  // namespace rlp::cuda::kern
