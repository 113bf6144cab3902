// Log-probabilities on the CPU: the LM head's GEMM, then an fp32 log-softmax per row; the mirror of
// kernels/logprobs.cu.
#include <algorithm>
#include <limits>

#include "rlparity/model/emulated_ops.hpp"
#include "rlparity/numerics/libm_model.hpp"
#include "rlparity/util/parallel.hpp"

namespace rlp {

void EmulatedOps::logprobs(const Mat& xn, Mat& out, bool decode_step) const {
  gemm(xn, w_.lm_head, out, style_.logits_fp32, decode_step);
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
