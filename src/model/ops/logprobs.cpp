// Log-probabilities on the CPU: the LM head's GEMM, then an fp32 log-softmax per row; the mirror of
// kernels/logprobs.cu.
#include <algorithm>
#include <limits>

#include "rlparity/model/emulated_ops.hpp"
#include "rlparity/numerics/all_reduce.hpp"
#include "rlparity/numerics/libm_model.hpp"
#include "rlparity/util/parallel.hpp"

namespace rlp {
namespace {

// The fp32 sum of expf(row[i] - m) over i in [0, n), in increasing i (the exps as lanes).
float sum_exp_shifted(const float* row, int n, float m) {
  constexpr int kBlock = 256;
  float t[kBlock];
  float sum = 0.0f;
  for (int i0 = 0; i0 < n; i0 += kBlock) {
    const int len = std::min(kBlock, n - i0);
    for (int j = 0; j < len; ++j) t[j] = row[i0 + j] - m;
    num::expf_model_n(t, t, static_cast<std::size_t>(len));
    for (int j = 0; j < len; ++j) sum += t[j];
  }
  return sum;
}

}  // namespace

void EmulatedOps::logprobs(const Mat& xn, Mat& out, bool decode_step) const {
  head_.logprobs(xn, out, HeadAt{decode_step, 0, 0});
}

void EmulatedHead::logprobs(const HostMat& xn, HostMat& out, HeadAt at) const {
  const bool decode_step = at.decode_step;
  emulated_gemm(style_, xn, lm_head_, out, style_.logits_fp32, decode_step, at.m);
  const int tp = style_.tp;
  if (tp != 1 && style_.vocab_parallel_logsoftmax) {
    // Megatron's vocab_parallel_cross_entropy (megatron/core/tensor_parallel/cross_entropy.py): each
    // rank holds a contiguous vocabulary shard of the logits (the lm_head is column-parallel over the
    // vocabulary: no arithmetic change); per rank the fp32 max, all-reduced with MAX (exact), then
    // the fp32 sum of exp(x - max) over the shard, all-reduced with SUM in fp32 by the path's
    // tp-reduce. Shards are ceil(V / tp) wide, the last one shorter (Megatron pads the vocabulary to
    // a multiple of tp instead; padded entries are not modelled).
    const int V = static_cast<int>(out.cols());
    const int shard = (V + tp - 1) / tp;
    const int64_t count = decode_step ? style_.decode_m() : at.m > 0 ? at.m : out.rows();
    const num::ReduceAlgo algo = style_.reduce_algo(count * 4, false);
    parallel_for(static_cast<std::size_t>(out.rows()), 1, [&](std::size_t r0, std::size_t r1) {
      std::vector<float> sums(static_cast<std::size_t>(tp));
      for (std::size_t r = r0; r < r1; ++r) {
        float* row = out.row(static_cast<Eigen::Index>(r)).data();
        float m = -std::numeric_limits<float>::infinity();
        for (int q = 0; q < tp; ++q) {
          float mq = -std::numeric_limits<float>::infinity();
          for (int i = q * shard; i < std::min(V, (q + 1) * shard); ++i) mq = std::max(mq, row[i]);
          m = std::max(m, mq);
        }
        for (int q = 0; q < tp; ++q) {
          const int i0 = std::min(V, q * shard);
          sums[static_cast<std::size_t>(q)] = sum_exp_shifted(row + i0, std::min(V, (q + 1) * shard) - i0, m);
        }
        const int64_t idx = decode_step ? 0 : at.row0 + static_cast<int64_t>(r);
        const float sum = num::all_reduce_element(
            algo, sums.data(), tp, num::reduce_owner(algo, idx, count, tp, 4), num::OutRound::fp32);
        const float lse = m + num::logf_model(sum);
        for (int i = 0; i < V; ++i) row[i] = row[i] - lse;
      }
    });
    return;
  }
  // log_softmax in fp32 per row: max, sequential sum of exp(x - max), log.
  parallel_for(static_cast<std::size_t>(out.rows()), 1, [&](std::size_t r0, std::size_t r1) {
    for (std::size_t r = r0; r < r1; ++r) {
      float* row = out.row(static_cast<Eigen::Index>(r)).data();
      float m = -std::numeric_limits<float>::infinity();
      for (int i = 0; i < out.cols(); ++i) m = std::max(m, row[i]);
      const float sum = sum_exp_shifted(row, static_cast<int>(out.cols()), m);
      const float lse = m + num::logf_model(sum);
      for (int i = 0; i < out.cols(); ++i) row[i] = row[i] - lse;
    }
  });
}

}  // namespace rlp
