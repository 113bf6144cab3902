// Log-probabilities on the CPU: the LM head's GEMM, then an fp32 log-softmax per row; the mirror of
// kernels/logprobs.cu.
#include <algorithm>
#include <limits>

#include "rlparity/model/emulated_ops.hpp"
#include "rlparity/numerics/all_reduce.hpp"
#include "rlparity/numerics/libm_model.hpp"
#include "rlparity/util/parallel.hpp"

namespace rlp {

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
          float sq = 0.0f;
          for (int i = q * shard; i < std::min(V, (q + 1) * shard); ++i) sq += num::expf_model(row[i] - m);
          sums[static_cast<std::size_t>(q)] = sq;
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
      float sum = 0.0f;
      for (int i = 0; i < out.cols(); ++i) sum += num::expf_model(row[i] - m);
      const float lse = m + num::logf_model(sum);
      for (int i = 0; i < out.cols(); ++i) row[i] = row[i] - lse;
    }
  });
}

}  // namespace rlp
