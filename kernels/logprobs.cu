// fp32 log-softmax over the vocabulary (the mirror of src/model/ops/logprobs.cpp) and the
// full-vocabulary KL / entropy / JS reduction (the rule num::FullVocabSums of
// src/metrics/token_metrics.cpp, summed per thread then in a block tree).
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

__global__ void full_vocab_kl_kernel(const float* lg_all, const float* lt_all, int vocab, double* out) {
  __shared__ double red[kThreads];
  const std::size_t base = static_cast<std::size_t>(blockIdx.x) * static_cast<std::size_t>(vocab);
  num::FullVocabSums sums;
  for (int v = static_cast<int>(threadIdx.x); v < vocab; v += blockDim.x)
    sums.add(static_cast<double>(lg_all[base + v]), static_cast<double>(lt_all[base + v]));
  sums.kl_gen_train = block_sum(sums.kl_gen_train, red);
  sums.kl_train_gen = block_sum(sums.kl_train_gen, red);
  sums.entropy_gen = block_sum(sums.entropy_gen, red);
  sums.js_gen = block_sum(sums.js_gen, red);
  sums.js_train = block_sum(sums.js_train, red);
  if (threadIdx.x == 0) {
    double* o = out + static_cast<std::size_t>(blockIdx.x) * 4;
    o[0] = sums.kl_gen_train;
    o[1] = sums.kl_train_gen;
    o[2] = sums.entropy_gen;
    o[3] = sums.js();
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
