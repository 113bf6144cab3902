// The SiLU-gated MLP product on the CPU; the mirror of kernels/silu.cu (rule: num::silu_gate).
#include <algorithm>

#include "op_grain.hpp"
#include "rlparity/model/emulated_ops.hpp"
#include "rlparity/numerics/libm_model.hpp"
#include "rlparity/numerics/ops.hpp"
#include "rlparity/util/parallel.hpp"

namespace rlp {

using ops_detail::kElemGrain;

void EmulatedOps::silu_mul(const Mat& gate, const Mat& up, Mat& out) const {
  out.resize(gate.rows(), gate.cols());
  parallel_for(static_cast<std::size_t>(gate.size()), kElemGrain, [&](std::size_t b, std::size_t e) {
    constexpr std::size_t kBlock = 256;
    float ex[kBlock];  // exp(-g) of a block, computed as lanes (expf_model_n)
    for (std::size_t b0 = b; b0 < e; b0 += kBlock) {
      const std::size_t n = std::min(kBlock, e - b0);
      for (std::size_t j = 0; j < n; ++j) ex[j] = -gate.data()[b0 + j];
      num::expf_model_n(ex, ex, n);
      for (std::size_t j = 0; j < n; ++j)
        out.data()[b0 + j] =
            num::silu_gate(gate.data()[b0 + j], up.data()[b0 + j], ex[j], style_.mlp_fused, style_.act);
    }
  });
}

}  // namespace rlp
