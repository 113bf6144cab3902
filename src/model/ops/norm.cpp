// RMSNorm (fused add + norm, per-head norm) and the residual sum on the CPU; the mirror of
// kernels/norm.cu. The element rules are num::rms_norm_out and num::residual_store (ops.hpp).
#include <cmath>
#include <vector>

#include "op_grain.hpp"
#include "rlparity/model/emulated_ops.hpp"
#include "rlparity/numerics/ops.hpp"
#include "rlparity/util/parallel.hpp"

namespace rlp {

using ops_detail::kElemGrain;
using ops_detail::kRowGrain;

// RMSNorm of one row. Variance: sequential fp32 sum of squares of `z_for_var`, divided by n.
// Each output element is num::rms_norm_out (fused_add: two roundings, unfused: one).
// r = 1/sqrt(var + eps): the GPU's rsqrtf is an approximation (<= 2 ulp); we use the correctly
// rounded value.
void EmulatedOps::rms_norm_row(const float* z_for_var, const float* z, const float* w, int n,
                               float* out) const {
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum = std::fma(z_for_var[i], z_for_var[i], sum);
  const float var = sum / static_cast<float>(n);
  const float r = 1.0f / std::sqrt(var + static_cast<float>(spec_.rms_eps));
  if (style_.norm == NormKind::fused_add) {
    for (int i = 0; i < n; ++i) out[i] = num::rms_norm_out(z[i], r, w[i], true, style_.act);
  } else {
    for (int i = 0; i < n; ++i) out[i] = num::rms_norm_out(z[i], r, w[i], false, style_.act);
  }
}

void EmulatedOps::add_norm(Mat& resid, const Mat* delta, int layer, NormSlot slot, Mat& out) const {
  const int H = spec_.hidden;
  const float* w = slot == NormSlot::final   ? w_.final_norm.data()
                   : slot == NormSlot::input ? w_.layers[static_cast<std::size_t>(layer)].input_norm.data()
                                             : w_.layers[static_cast<std::size_t>(layer)].post_norm.data();
  out.resize(resid.rows(), H);
  const bool fp32 = style_.residual == ResidualDtype::fp32;
  // Rows are independent: spread over threads (a long teacher-forced pass is one sequence).
  parallel_for(static_cast<std::size_t>(resid.rows()), kRowGrain, [&](std::size_t r0, std::size_t r1) {
    std::vector<float> z(static_cast<std::size_t>(H));
    for (Eigen::Index r = static_cast<Eigen::Index>(r0); r < static_cast<Eigen::Index>(r1); ++r) {
      float* res = resid.row(r).data();
      for (int i = 0; i < H; ++i) z[static_cast<std::size_t>(i)] = delta ? res[i] + (*delta)(r, i) : res[i];
      // The residual stream keeps the act dtype unless the path keeps it in fp32 (Megatron's
      // fp32_residual_connection).
      for (int i = 0; i < H; ++i)
        res[i] = num::residual_store(z[static_cast<std::size_t>(i)], fp32, style_.act);
      // vLLM's fused_add_rms_norm accumulates the variance from the fp32 sum before it stores the
      // rounded residual, then normalizes the rounded residual; an unfused norm sees only the stored one.
      const float* var_src = style_.norm == NormKind::fused_add ? z.data() : res;
      rms_norm_row(var_src, res, w, H, out.row(r).data());
    }
  });
}

void EmulatedOps::residual_sum(const Mat& resid, const Mat& delta, Mat& out) const {
  out.resize(resid.rows(), resid.cols());
  const bool fp32 = style_.residual == ResidualDtype::fp32;
  parallel_for(static_cast<std::size_t>(resid.size()), kElemGrain, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) {
      const float z = resid.data()[i] + delta.data()[i];
      out.data()[i] = num::residual_store(z, fp32, style_.act);
    }
  });
}
void EmulatedOps::head_norm(Mat& x, int layer, Proj which) const {
  const int hd = spec_.head_dim;
  const auto& L = w_.layers[static_cast<std::size_t>(layer)];
  const float* w = which == Proj::q ? L.q_norm.data() : L.k_norm.data();
  parallel_for(static_cast<std::size_t>(x.rows()), kRowGrain, [&](std::size_t r0, std::size_t r1) {
    std::vector<float> tmp(static_cast<std::size_t>(hd));
    for (Eigen::Index r = static_cast<Eigen::Index>(r0); r < static_cast<Eigen::Index>(r1); ++r)
      for (int h = 0; h < x.cols() / hd; ++h) {
        float* seg = x.row(r).data() + h * hd;
        rms_norm_row(seg, seg, w, hd, tmp.data());
        std::copy(tmp.begin(), tmp.end(), seg);
      }
  });
}

}  // namespace rlp
