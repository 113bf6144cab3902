// The linear layers (and the LM head's GEMM) on the CPU: the GEMM models of gemm.hpp, the fp8
// activation quantization and the bias epilogue; the mirror of the kernels' GEMM files
// (kernels/gemm_exact.cu, gemm_epilogue.cu, lt_gemm.cpp).
#include "op_grain.hpp"
#include "rlparity/model/emulated_ops.hpp"
#include "rlparity/numerics/gemm.hpp"
#include "rlparity/numerics/quantize.hpp"
#include "rlparity/util/parallel.hpp"

namespace rlp {

using ops_detail::kRowGrain;

void EmulatedOps::gemm(const Mat& x, const PreparedLinear& lin, Mat& y, bool out_fp32,
                       bool decode_step) const {
  const int n = static_cast<int>(x.rows());
  // Kernel selection sees M = the engine's decode batch during decode steps (however many rows this
  // call groups), the token count otherwise.
  const int m_kernel = decode_step ? style_.batch : n;
  num::GemmConfig cfg = style_.gemm_config(m_kernel, lin.in);
  if (out_fp32 || !lin.bias.empty()) cfg.out = num::OutRound::fp32;
  y.resize(n, lin.out);
  if (lin.fp8) {
    const num::Fp8Tensor xq = num::quantize_blocks(x.data(), n, lin.in, 1, 128, style_.act_scale_options());
    num::gemm_fp8_blockscaled(xq, lin.wq, y.data(), cfg);
  } else {
    num::gemm_f32acc(x.data(), lin.w.data(), style_.act, y.data(), n, lin.out, lin.in, cfg);
  }
  if (!lin.bias.empty()) {
    // Bias added in the fp32 epilogue, one rounding to the act dtype.
    parallel_for(static_cast<std::size_t>(n), kRowGrain, [&](std::size_t r0, std::size_t r1) {
      for (Eigen::Index r = static_cast<Eigen::Index>(r0); r < static_cast<Eigen::Index>(r1); ++r)
        for (int c = 0; c < lin.out; ++c)
          y(r, c) = round_act(y(r, c) + lin.bias[static_cast<std::size_t>(c)]);
    });
  }
}

void EmulatedOps::linear(const Mat& x, int layer, Proj p, Mat& y, bool decode_step) const {
  gemm(x, w_.layers[static_cast<std::size_t>(layer)][p], y, false, decode_step);
}

}  // namespace rlp
