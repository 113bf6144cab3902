// Weights prepared for one kernel path ("refit"): every tensor in the form that path's kernels
// read: act-dtype values (bf16/fp16, held exactly in float), fp8 codes with block scales for fp8
// linears, or float64 for the oracle. Prepared once per distinct form and shared between recipes.
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "rlparity/model/checkpoint.hpp"
#include "rlparity/model/kernel_style.hpp"
#include "rlparity/numerics/gemm.hpp"
#include "rlparity/numerics/quantize.hpp"

namespace rlp {

enum class Proj { q, k, v, o, gate, up, down };
enum class NormSlot { input, post, final };
inline constexpr int kNumProj = 7;

// Act-dtype (bf16/fp16) bit patterns: a view of the mapped checkpoint where it stores exactly these
// bits (a bf16 checkpoint on a bf16 path: no copy, the page cache holds them once for every path
// and form), else an owned conversion. Valid while the Checkpoint lives.
class Half16Bits {
 public:
  Half16Bits() = default;
  explicit Half16Bits(std::vector<uint16_t> owned)
      : owned_(std::make_shared<const std::vector<uint16_t>>(std::move(owned))),
        span_(std::make_shared<SpanMemo>()) {}
  static Half16Bits view(const uint16_t* p, std::size_t n) {
    Half16Bits b;
    b.view_ = p;
    b.view_n_ = n;
    b.span_ = std::make_shared<SpanMemo>();
    return b;
  }
  const uint16_t* data() const { return view_ ? view_ : owned_ ? owned_->data() : nullptr; }
  std::size_t size() const { return view_ ? view_n_ : owned_ ? owned_->size() : 0; }
  bool empty() const { return size() == 0; }
  uint16_t operator[](std::size_t i) const { return data()[i]; }
  const uint16_t* begin() const { return data(); }
  const uint16_t* end() const { return data() + size(); }
  bool mapped() const { return view_ != nullptr; }
  std::size_t owned_bytes() const { return owned_ ? owned_->size() * sizeof(uint16_t) : 0; }
  // The values' exponent span as bf16 patterns (what the GEMM's bf16 dot-product kernel checks),
  // scanned on first use and shared by the copies: the bits never change.
  const num::Bf16Span& bf16_span() const {
    static const num::Bf16Span kEmpty;
    if (!span_) return kEmpty;
    std::call_once(span_->once, [this] { span_->span = num::bf16_span(data(), size()); });
    return span_->span;
  }

 private:
  // Shared, so that a copy (a path's deferred LM head, PathOutput) is cheap and outlives the form.
  std::shared_ptr<const std::vector<uint16_t>> owned_;
  struct SpanMemo {
    std::once_flag once;
    num::Bf16Span span;
  };
  std::shared_ptr<SpanMemo> span_;
  const uint16_t* view_ = nullptr;
  std::size_t view_n_ = 0;
};

struct PreparedLinear {
  int out = 0;
  int in = 0;
  bool fp8 = false;
  Half16Bits w;       // [out x in] act-dtype bit patterns, when !fp8: 2 B/param (or mapped)
  num::Fp8Tensor wq;  // 128x128-block fp8, when fp8
  // wq holds a per-channel checkpoint's codes and [out] scales verbatim (1 x in blocks): the linear
  // runs vLLM's Fp8LinearOp (per-token activations, num::gemm_fp8_rowscaled).
  bool per_channel = false;
  std::vector<float> bias;  // act-dtype values; empty when the layer has none
};

// Expert e's gate/up/down projection in a layer's `experts` list (index 3 e + 0, 1, 2).
inline std::size_t expert_slot(int e, Proj p) {
  return static_cast<std::size_t>(3 * e + (static_cast<int>(p) - static_cast<int>(Proj::gate)));
}

struct PreparedLayer {
  PreparedLinear proj[kNumProj];
  std::vector<float> input_norm, post_norm, q_norm, k_norm;
  // Sparse MoE layers (ModelSpec::is_moe_layer): the router (act dtype on every path,
  // docs/kernel-paths.md "Mixture of experts") and the experts. Their proj gate/up/down hold
  // Qwen2-MoE's shared expert (an MLP like a dense layer's, fp8 where the layer is), with its
  // sigmoid gate [1 x hidden] (act dtype); both empty without a shared expert.
  PreparedLinear router, shared_gate;
  std::vector<PreparedLinear> experts;
  const PreparedLinear& operator[](Proj p) const { return proj[static_cast<int>(p)]; }
  const PreparedLinear& expert(int e, Proj p) const { return experts[expert_slot(e, p)]; }
};

struct PreparedWeights {
  Half16Bits embed;  // [vocab x hidden] act-dtype bit patterns
  std::vector<PreparedLayer> layers;
  std::vector<float> final_norm;
  PreparedLinear lm_head;  // always act dtype: fp8 recipes quantize decoder linears only
};

// The part of a style that decides the prepared form: two styles with equal keys share weights.
std::string weights_key(const PathStyle& style);
PreparedWeights prepare_weights(const Checkpoint& ckpt, const PathStyle& style);

// One prepared form for two refits. TE's and NeMo RL's weight quantizers give every whole 128x128
// block of finite weights the same codes and scale_inv when scales are not powers of two, unless
// the block's amax is below 448/FLT_MAX (docs/numerics.md, "One form for TE's and NeMo RL's
// refit"). refit_group_key is weights_key with those two conventions named alike where that holds:
// forms with equal group keys may share one prepared form. Whether they do is a property of the
// weights, which refit_form_is_shareable checks on a form prepared under either convention: the
// checkpoint verified finite, every fp8 linear whole blocks, and every scale_inv at least FLT_MIN
// (a block with amax under 448/FLT_MAX has scale_inv 1/FLT_MAX under TE and 0 under NeMo).
std::string refit_group_key(const PathStyle& style);
bool refit_form_is_shareable(const PreparedWeights& w, const Checkpoint& ckpt);

// Oracle weights: the float64 oracle reads every value widened exactly to double, no rounding. The
// matrices stay in the mapped checkpoint (the oracle GEMM widens a row as it packs it; the
// embedding a row as a token looks it up), so the oracle holds only its vectors: an 8B model's
// weights would be 64 GB as doubles.
struct OracleLinear {
  int out = 0, in = 0;
  const TensorView* w = nullptr;  // [out x in], valid while the Checkpoint lives
  std::vector<double> bias;
};
struct OracleLayer {
  OracleLinear proj[kNumProj];
  std::vector<double> input_norm, post_norm, q_norm, k_norm;
  OracleLinear router, shared_gate;  // MoE layers, as in PreparedLayer
  std::vector<OracleLinear> experts;
  const OracleLinear& operator[](Proj p) const { return proj[static_cast<int>(p)]; }
  const OracleLinear& expert(int e, Proj p) const { return experts[expert_slot(e, p)]; }
};
struct OracleWeights {
  const TensorView* embed = nullptr;  // [vocab x hidden]
  std::vector<OracleLayer> layers;
  std::vector<double> final_norm;
  OracleLinear lm_head;
};
OracleWeights prepare_oracle_weights(const Checkpoint& ckpt);

const char* proj_tensor_suffix(Proj p);  // "self_attn.q_proj", ...

}  // namespace rlp
