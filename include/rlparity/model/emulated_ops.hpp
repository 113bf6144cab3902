// The CPU kernel paths: every op of the forward with the rounding points, scales and accumulation
// order of the engine a PathStyle names, in float (bf16/fp16/fp8 values are held exactly in float
// and rounded explicitly where the engine rounds). Transcendentals (exp, cos, 1/sqrt) use the host
// libm, correctly rounded or within 1 ulp: GPU fast-math intrinsics differ there by a few ulp.
// One file per op in src/model/ops/, mirroring the CUDA kernels in kernels/ file for file; both call
// the element-level rules of include/rlparity/numerics/ops.hpp.
#pragma once
#include <vector>

#include "rlparity/model/host_tensors.hpp"
#include "rlparity/model/kernel_style.hpp"
#include "rlparity/model/model_spec.hpp"
#include "rlparity/model/ops_contract.hpp"
#include "rlparity/model/weights.hpp"
#include "rlparity/numerics/ops.hpp"

namespace rlp {

// Per-layer per-tensor fp8 KV-cache scales (dequantization multipliers), used when a style has an
// fp8 KV cache. q_scale is used by fp8 attention (FlashAttention-3 style).
struct KvScales {
  std::vector<float> q, k, v;
  bool empty() const { return k.empty(); }
};

// y = x W^T (+ bias) of one linear as a CPU kernel path's GEMM computes it (linear.cpp). Kernel
// selection sees M = the engine's decode batch in decode steps, m_select (> 0) otherwise when given
// (a MoE expert's GEMM is configured from the block's token count, as vLLM's fused_moe is; a
// deferred LM head from its forward call's rows), else x's rows.
void emulated_gemm(const PathStyle& style, const HostMat& x, const PreparedLinear& lin, HostMat& y,
                   bool out_fp32, bool decode_step, int m_select = 0);

// A CPU kernel path's LM head on its own (logprobs.cpp): log-prob rows from final normed hidden
// rows, each computed as the forward call it came from computes it (HeadAt). It owns what it reads
// (the style, and the lm_head whose storage it shares), so a path's log-prob rows can be computed
// after the path's EmulatedOps and weight form are gone: when the metrics read them, a few rows at
// a time, instead of every path holding [response x vocab] floats (run_path_group).
class EmulatedHead {
 public:
  EmulatedHead(const PathStyle& style, const PreparedLinear& lm_head) : style_(style), lm_head_(lm_head) {}
  void logprobs(const HostMat& xn, HostMat& out, HeadAt at) const;

 private:
  PathStyle style_;
  PreparedLinear lm_head_;
};

class EmulatedOps {
 public:
  using Mat = HostMat;
  using Cache = KvCache;

  EmulatedOps(const ModelSpec& spec, const PreparedWeights& weights, const PathStyle& style,
              const KvScales* kv_scales = nullptr);

  const ModelSpec& spec() const { return spec_; }
  const PathStyle& style() const { return style_; }
  // new_cache, embed, add_norm, residual_sum, linear, head_norm, rope, attention, silu_mul,
  // logprobs: the ops contract (ops_contract.hpp).
  RLP_FORWARD_OPS_MEMBERS
  const EmulatedHead& head() const { return head_; }

  // Used by calibration: the amax observers see q/k/v after RoPE of each call.
  struct QkvObserver {
    virtual ~QkvObserver() = default;
    virtual void observe(int layer, const Mat& q, const Mat& k, const Mat& v) = 0;
  };
  void set_qkv_observer(QkvObserver* obs) const { observer_ = obs; }

 private:
  float round_act(float x) const;  // num::round_act in this path's activation format
  void gemm(const Mat& x, const PreparedLinear& lin, Mat& y, bool out_fp32, bool decode_step,
            int m_select = 0) const {
    emulated_gemm(style_, x, lin, y, out_fp32, decode_step, m_select);
  }
  // Qwen2-MoE: out += sigmoid(shared_expert_gate(xn)) * shared_expert(xn), act-dtype roundings (moe.cpp).
  void add_shared_expert(const Mat& xn, int layer, Mat& out, bool decode_step) const;
  void rms_norm_row(const float* z_for_var, const float* z, const float* w, int n, float* out) const;
  // A row-parallel linear (o_proj, down_proj) with style_.tp > 1: each rank's GEMM over its K range
  // writes an act-dtype partial, then the partials are all-reduced (linear.cpp).
  void init_tensor_parallel();  // checks tp against the model's dimensions, cuts tp_o_/tp_down_
  void row_parallel_linear(const Mat& x, const std::vector<PreparedLinear>& ranks, Mat& y,
                           bool decode_step) const;

  const ModelSpec& spec_;
  const PreparedWeights& w_;
  PathStyle style_;
  EmulatedHead head_;
  KvScales kv_scales_;
  std::vector<float> inv_freq_;
  // rope_entry of positions [0, rope_table_positions_) x the head's frequencies, computed once: every
  // layer of every call reads the same values (positions beyond are computed as they come).
  std::vector<num::RopeEntry> rope_table_;
  int rope_table_positions_ = 0;
  // With tp > 1: per layer, the o_proj [0] and down_proj [1] weights cut into tp K ranges.
  std::vector<std::vector<PreparedLinear>> tp_o_, tp_down_;
  mutable QkvObserver* observer_ = nullptr;
};
static_assert(ForwardOps<EmulatedOps>);

}  // namespace rlp
