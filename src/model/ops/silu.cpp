// The SiLU-gated MLP product on the CPU; the mirror of kernels/silu.cu (rule: num::silu_gate).
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
    for (std::size_t i = b; i < e; ++i) {
      const float g = gate.data()[i];
      out.data()[i] = num::silu_gate(g, up.data()[i], num::expf_model(-g), style_.mlp_fused, style_.act);
    }
  });
}

}  // namespace rlp
