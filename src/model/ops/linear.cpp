// The linear layers (and the LM head's GEMM) on the CPU: the GEMM models of gemm.hpp, the fp8
// activation quantization and the bias epilogue; the mirror of the kernels' GEMM files
// (kernels/gemm_exact.cu, gemm_epilogue.cu, lt_gemm.cpp).
#include <algorithm>

#include "op_grain.hpp"
#include "rlparity/model/emulated_ops.hpp"
#include "rlparity/numerics/all_reduce.hpp"
#include "rlparity/numerics/gemm.hpp"
#include "rlparity/numerics/quantize.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/parallel.hpp"

namespace rlp {

using ops_detail::kRowGrain;

void emulated_gemm(const PathStyle& style, const HostMat& x, const PreparedLinear& lin, HostMat& y,
                   bool out_fp32, bool decode_step, int m_select) {
  const int n = static_cast<int>(x.rows());
  // Kernel selection sees M = the engine's decode batch during decode steps (however many rows this
  // call groups), the token count otherwise.
  const int m_kernel = decode_step ? style.decode_m() : (m_select > 0 ? m_select : n);
  y.resize(n, lin.out);
  if (lin.per_channel) {
    // vLLM's Fp8LinearOp: per-token activation scales, CUTLASS scaled_mm with its epilogue (bias
    // included); swap-AB for M <= 64 (scaled_mm_sm90_fp8_dispatch.cuh), M as the kernel sees it.
    num::Fp8Tensor xq;
    num::quantize_per_token_vllm(x.data(), n, lin.in, xq);
    num::gemm_fp8_rowscaled(xq, lin.wq, y.data(), style.fp8_accum, m_kernel <= 64,
                            lin.bias.empty() ? nullptr : lin.bias.data(),
                            out_fp32 ? num::OutRound::fp32 : num::out_round_of(style.act));
    return;
  }
  num::GemmConfig cfg = style.gemm_config(m_kernel, lin.in);
  if (out_fp32 || !lin.bias.empty()) cfg.out = num::OutRound::fp32;
  if (lin.fp8) {
    const num::Fp8Tensor xq = num::quantize_blocks(x.data(), n, lin.in, 1, 128, style.act_scale_options());
    num::gemm_fp8_blockscaled(xq, lin.wq, y.data(), cfg);
  } else {
    num::gemm_f32acc(x.data(), lin.w.data(), style.act, y.data(), n, lin.out, lin.in, cfg,
                     style.act == num::Half16::bf16 ? &lin.w.bf16_span() : nullptr);
  }
  if (!lin.bias.empty()) {
    // Bias added in the fp32 epilogue, one rounding to the act dtype.
    parallel_for(static_cast<std::size_t>(n), kRowGrain, [&](std::size_t r0, std::size_t r1) {
      for (Eigen::Index r = static_cast<Eigen::Index>(r0); r < static_cast<Eigen::Index>(r1); ++r)
        for (int c = 0; c < lin.out; ++c)
          y(r, c) = num::round_act(y(r, c) + lin.bias[static_cast<std::size_t>(c)], style.act);
    });
  }
}

namespace {

// Columns [k0, k1) of a linear's K: one tensor-parallel rank's shard of a row-parallel weight. The
// bias goes to rank 0 only, as vLLM's RowParallelLinear.forward passes it to rank 0's GEMM.
PreparedLinear slice_k(const PreparedLinear& lin, int k0, int k1, bool keep_bias) {
  PreparedLinear s;
  s.out = lin.out;
  s.in = k1 - k0;
  s.fp8 = lin.fp8;
  s.per_channel = lin.per_channel;
  if (keep_bias) s.bias = lin.bias;
  const auto K = static_cast<std::size_t>(lin.in), w = static_cast<std::size_t>(s.in);
  if (!lin.fp8) {
    std::vector<uint16_t> bits(static_cast<std::size_t>(lin.out) * w);
    for (std::size_t r = 0; r < static_cast<std::size_t>(lin.out); ++r)
      std::copy_n(lin.w.begin() + r * K + static_cast<std::size_t>(k0), w,
                  bits.begin() + static_cast<std::ptrdiff_t>(r * w));
    s.w = Half16Bits(std::move(bits));
    return s;
  }
  const num::Fp8Tensor& q = lin.wq;
  num::Fp8Tensor& o = s.wq;
  o.rows = q.rows;
  o.cols = s.in;
  o.block_rows = q.block_rows;
  o.block_cols = lin.per_channel ? s.in : q.block_cols;  // a channel's one scale covers every shard
  o.kind = q.kind;
  o.codes.resize(static_cast<std::size_t>(o.rows) * w);
  for (std::size_t r = 0; r < static_cast<std::size_t>(o.rows); ++r)
    std::copy_n(q.codes.begin() + static_cast<std::ptrdiff_t>(r * K + static_cast<std::size_t>(k0)), w,
                o.codes.begin() + static_cast<std::ptrdiff_t>(r * w));
  const int cb0 = k0 / q.block_cols;
  for (int rb = 0; rb < o.row_blocks(); ++rb)
    for (int cb = 0; cb < o.col_blocks(); ++cb)
      o.scale_inv.push_back(
          q.scale_inv[static_cast<std::size_t>(rb) * static_cast<std::size_t>(q.col_blocks()) +
                      static_cast<std::size_t>(cb0 + cb)]);
  return s;
}

}  // namespace

void EmulatedOps::init_tensor_parallel() {
  const int tp = style_.tp;
  check_tensor_parallel(style_, spec_);
  // Column-parallel projections need no change: each output column is the same dot product on
  // whichever rank owns it. Row-parallel ones are cut along K here.
  auto cut = [&](Proj p, const char* dim) {
    std::vector<std::vector<PreparedLinear>> out;
    for (const auto& layer : w_.layers) {
      const PreparedLinear& lin = layer[p];
      const int kr = lin.in / tp;
      if (lin.per_channel && kr % 16 != 0)
        RLP_THROW_INPUT(
            "path '{}': tp {} cuts the {} ({}) into {}-wide shards: vLLM runs per-channel fp8 shards whose "
            "width is not a multiple of 16 through triton_scaled_mm, which rlparity does not emulate",
            style_.name, tp, dim, lin.in, kr);
      if (lin.fp8 && !lin.per_channel && kr % lin.wq.block_cols != 0)
        RLP_THROW_INPUT(
            "path '{}': tp {} cuts the {} ({}) into {}-wide shards, not whole {}-wide fp8 "
            "weight blocks (vLLM's block-fp8 linears refuse such a partition too)",
            style_.name, tp, dim, lin.in, kr, lin.wq.block_cols);
      std::vector<PreparedLinear> ranks;
      for (int r = 0; r < tp; ++r) ranks.push_back(slice_k(lin, r * kr, (r + 1) * kr, r == 0));
      out.push_back(std::move(ranks));
    }
    return out;
  };
  tp_o_ = cut(Proj::o, "attention width (heads x head_dim)");
  tp_down_ = cut(Proj::down, "intermediate size");
}

void EmulatedOps::linear(const Mat& x, int layer, Proj p, Mat& y, bool decode_step) const {
  const auto l = static_cast<std::size_t>(layer);
  if (style_.tp != 1 && (p == Proj::o || p == Proj::down)) {
    row_parallel_linear(x, (p == Proj::o ? tp_o_ : tp_down_)[l], y, decode_step);
    return;
  }
  gemm(x, w_.layers[l][p], y, false, decode_step);
}

void EmulatedOps::row_parallel_linear(const Mat& x, const std::vector<PreparedLinear>& ranks, Mat& y,
                                      bool decode_step) const {
  const int tp = static_cast<int>(ranks.size());
  const int n = static_cast<int>(x.rows()), N = ranks[0].out;
  // Each rank's GEMM on its K range, with its own kernel selection (split-K of K / tp).
  std::vector<Mat> part(static_cast<std::size_t>(tp));
  Mat xs;
  for (int r = 0, k0 = 0; r < tp; k0 += ranks[static_cast<std::size_t>(r)].in, ++r) {
    xs = x.middleCols(k0, ranks[static_cast<std::size_t>(r)].in);
    gemm(xs, ranks[static_cast<std::size_t>(r)], part[static_cast<std::size_t>(r)], false, decode_step);
  }
  // The all-reduce of the act-dtype partials. The message is the call's rows, or during decode one
  // step of the engine's decode batch with this row first (so that grouping rows changes nothing).
  const num::OutRound fmt = num::out_round_of(style_.act);
  const int elem_bytes = 2;
  const int64_t count = static_cast<int64_t>(decode_step ? style_.decode_m() : n) * N;
  const int64_t bytes = count * elem_bytes;
  const num::ReduceAlgo algo = style_.reduce_algo(bytes, true);
  y.resize(n, N);
  parallel_for(static_cast<std::size_t>(n), kRowGrain, [&](std::size_t r0, std::size_t r1) {
    std::vector<float> vals(static_cast<std::size_t>(tp));
    for (auto r = static_cast<Eigen::Index>(r0); r < static_cast<Eigen::Index>(r1); ++r)
      for (int c = 0; c < N; ++c) {
        for (int q = 0; q < tp; ++q)
          vals[static_cast<std::size_t>(q)] = part[static_cast<std::size_t>(q)](r, c);
        const int64_t idx = decode_step ? c : static_cast<int64_t>(r) * N + c;
        const int owner = num::reduce_owner(algo, idx, count, tp, elem_bytes);
        y(r, c) = num::all_reduce_element(algo, vals.data(), tp, owner, fmt);
      }
  });
}

}  // namespace rlp
