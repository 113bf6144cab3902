// fp32 log-softmax over the vocabulary and the full-vocabulary KL / entropy / JS reduction.
#include "device_common.cuh"

namespace rlp::cuda::kern {
namespace {

constexpr int kThreads = 256;

__global__ void log_softmax_kernel(float* x, int cols, bool exact) {
  __shared__ float redf[kThreads];
  float* row = x + static_cast<std::size_t>(blockIdx.x) * static_cast<std::size_t>(cols);
  // exact: the emulator's order (thread 0 takes the max and the sum along the row).
  const RowWalk walk = row_walk(cols, exact);
  float m = -INFINITY, sum = 0.0f;
  for (int i = walk.first; i < cols; i += walk.step) m = (m < row[i]) ? row[i] : m;
  m = row_max(m, exact, redf);
  for (int i = walk.first; i < cols; i += walk.step) sum = sum + exp_f(row[i] - m, exact);
  sum = row_sum(sum, exact, redf);
  const float lse = m + log_f(sum, exact);
  for (int i = static_cast<int>(threadIdx.x); i < cols; i += blockDim.x) row[i] = row[i] - lse;
}

// p * (a - b) with 0 * anything = 0 (as token_metrics.cpp's weighted_diff).
__device__ __forceinline__ double wdiff(double p, double a, double b) { return p == 0.0 ? 0.0 : p * (a - b); }

__global__ void full_vocab_kl_kernel(const float* lg_all, const float* lt_all, int vocab, double* out) {
  __shared__ double red[kThreads];
  const std::size_t base = static_cast<std::size_t>(blockIdx.x) * static_cast<std::size_t>(vocab);
  double kl_gt = 0.0, kl_tg = 0.0, ent = 0.0, js_g = 0.0, js_t = 0.0;
  for (int v = static_cast<int>(threadIdx.x); v < vocab; v += blockDim.x) {
    const double lg = static_cast<double>(lg_all[base + v]);
    const double lt = static_cast<double>(lt_all[base + v]);
    const double pg = exp(lg), pt = exp(lt);
    kl_gt += wdiff(pg, lg, lt);
    kl_tg += wdiff(pt, lt, lg);
    ent -= wdiff(pg, lg, 0.0);
    if (pg != 0.0 || pt != 0.0) {
      const double lm = log(0.5 * (pg + pt));
      js_g += wdiff(pg, lg, lm);
      js_t += wdiff(pt, lt, lm);
    }
  }
  kl_gt = block_sum(kl_gt, red);
  kl_tg = block_sum(kl_tg, red);
  ent = block_sum(ent, red);
  js_g = block_sum(js_g, red);
  js_t = block_sum(js_t, red);
  if (threadIdx.x == 0) {
    double* o = out + static_cast<std::size_t>(blockIdx.x) * 4;
    o[0] = kl_gt;
    o[1] = kl_tg;
    o[2] = ent;
    o[3] = 0.5 * js_g + 0.5 * js_t;
  }
}

}  // namespace

void log_softmax(float* x, int rows, int cols, bool exact) {
  if (rows <= 0 || cols <= 0) return;
  log_softmax_kernel<<<static_cast<unsigned>(rows), kThreads>>>(x, cols, exact);
  RLP_CUDA_CHECK_LAUNCH("log_softmax_kernel");
}

void full_vocab_kl(const float* lg, const float* lt, int rows, int vocab, double* out) {
  if (rows <= 0 || vocab <= 0) return;
  full_vocab_kl_kernel<<<static_cast<unsigned>(rows), kThreads>>>(lg, lt, vocab, out);
  RLP_CUDA_CHECK_LAUNCH("full_vocab_kl_kernel");
}

}  // namespace rlp::cuda::kern
