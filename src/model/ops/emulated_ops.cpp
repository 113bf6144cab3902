// EmulatedOps itself: construction, the KV cache, the embedding and the act-format rounding. The
// ops live one per file next to this one (norm, linear, rope, attention, silu, logprobs), each the
// mirror of kernels/<op>.cu.
#include "rlparity/model/emulated_ops.hpp"

#include <algorithm>

#include "rlparity/model/rope.hpp"
#include "rlparity/numerics/gemm.hpp"
#include "rlparity/numerics/ops.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/parallel.hpp"

namespace rlp {

EmulatedOps::EmulatedOps(const ModelSpec& spec, const PreparedWeights& weights, const PathStyle& style,
                         const KvScales* kv_scales)
    : spec_(spec), w_(weights), style_(style), head_(style, weights.lm_head) {
  if (kv_scales) kv_scales_ = *kv_scales;
  if (style_.kv_cache == KvCacheDtype::fp8 && kv_scales_.empty())
    RLP_THROW("path '{}' has an fp8 KV cache but no KV scales were calibrated", style_.name);
  for (double f : rope_inv_freq(spec)) inv_freq_.push_back(static_cast<float>(f));
  constexpr int kRopeTablePositions = 8192;
  rope_table_positions_ = std::min(spec_.max_positions, kRopeTablePositions);
  const std::size_t half = inv_freq_.size();
  rope_table_.resize(static_cast<std::size_t>(rope_table_positions_) * half);
  parallel_for(static_cast<std::size_t>(rope_table_positions_), 64, [&](std::size_t p0, std::size_t p1) {
    for (std::size_t p = p0; p < p1; ++p)
      for (std::size_t i = 0; i < half; ++i)
        rope_table_[p * half + i] =
            num::rope_entry(static_cast<float>(p), inv_freq_[i], style_.rope_table_rounded, style_.act);
  });
  if (style_.tp != 1) init_tensor_parallel();
}

float EmulatedOps::round_act(float x) const { return num::round_act(x, style_.act); }

EmulatedOps::Cache EmulatedOps::new_cache(int capacity) const {
  Cache c;
  const int width = spec_.kv_heads * spec_.head_dim;
  const auto layers = static_cast<std::size_t>(spec_.layers);
  c.k = sized_mats<Mat>(layers, capacity, width);
  c.v = sized_mats<Mat>(layers, capacity, width);
  c.kt = sized_mats<Mat>(layers, width, capacity);
  // Keys that can be bf16 values: bf16 activations, or e4m3 codes in an fp8 cache.
  const bool bf16_keys = style_.act == num::Half16::bf16 || style_.kv_cache == KvCacheDtype::fp8;
  if (bf16_keys && spec_.head_dim % 2 == 0 && num::bf16_dot_kernel_available()) {
    c.kt_pairs = sized_mats<PairMat>(layers, width / 2, capacity);
    c.k_span.assign(layers, num::Bf16Span{});
    c.v_pairs = sized_mats<PairMat>(layers, (capacity + 1) / 2, width);
    c.v_span.assign(layers, num::Bf16Span{});
  }
  return c;
}

void EmulatedOps::embed(const int32_t* tokens, int n, Mat& h) const {
  const int H = spec_.hidden;
  h.resize(n, H);
  for (int i = 0; i < n; ++i)
    num::widen_half16(w_.embed.data() + static_cast<std::size_t>(tokens[i]) * static_cast<std::size_t>(H), H,
                      style_.act, h.row(i).data());
}
}  // namespace rlp
