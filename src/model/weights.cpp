#include "rlparity/model/weights.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <iterator>
#include <limits>

#include "rlparity/numerics/formats.hpp"
#include "rlparity/numerics/ops.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/parallel.hpp"

namespace rlp {

const char* proj_tensor_suffix(Proj p) {
  switch (p) {
    case Proj::q: return "self_attn.q_proj";
    case Proj::k: return "self_attn.k_proj";
    case Proj::v: return "self_attn.v_proj";
    case Proj::o: return "self_attn.o_proj";
    case Proj::gate: return "mlp.gate_proj";
    case Proj::up: return "mlp.up_proj";
    case Proj::down: return "mlp.down_proj";
  }
  return "?";
}

namespace {

std::vector<float> act_values(const TensorView& t, num::Half16 act) {
  std::vector<float> v(static_cast<std::size_t>(t.numel()));
  t.to_float(v.data());
  parallel_for(v.size(), 1 << 16, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) v[i] = num::round_act(v[i], act);
  });
  return v;
}

// The act-dtype values as bit patterns: what the kernels stream (half the bytes of floats). A tensor
// stored in the act dtype is its own bit patterns, widened and rounded back unchanged, unless it holds
// a NaN (canonicalised by the rounding) or sits at an odd address: it is then a view of the mapping.
// known_finite: the checkpoint was verified finite at open, so there is no NaN to scan for.
Half16Bits act_bits(const TensorView& t, num::Half16 act, bool known_finite) {
  const auto n = static_cast<std::size_t>(t.numel());
  const bool same_format = (t.dtype == DType::bf16 && act == num::Half16::bf16) ||
                           (t.dtype == DType::fp16 && act == num::Half16::fp16);
  if (same_format && reinterpret_cast<std::uintptr_t>(t.data) % alignof(uint16_t) == 0) {
    const auto* bits = reinterpret_cast<const uint16_t*>(t.data);
    const uint16_t exp_mask = act == num::Half16::bf16 ? 0x7F80u : 0x7C00u;
    const uint16_t frac_mask = act == num::Half16::bf16 ? 0x007Fu : 0x03FFu;
    if (known_finite) return Half16Bits::view(bits, n);
    std::atomic<bool> nan{false};
    parallel_for(n, 1 << 18, [&](std::size_t b, std::size_t e) {
      bool any = false;
      for (std::size_t i = b; i < e; ++i)
        any |= (bits[i] & exp_mask) == exp_mask && (bits[i] & frac_mask) != 0;
      if (any) nan = true;
    });
    if (!nan) return Half16Bits::view(bits, n);
  }
  std::vector<float> v(n);
  t.to_float(v.data());
  std::vector<uint16_t> out(n);
  parallel_for(n, 1 << 16, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) out[i] = num::float_to_half16_bits(v[i], act);
  });
  return Half16Bits(std::move(out));
}

std::vector<double> f64_values(const TensorView& t) {
  std::vector<double> v(static_cast<std::size_t>(t.numel()));
  t.to_double(v.data());
  return v;
}

PreparedLinear prepare_linear(const Checkpoint& ckpt, const std::string& base, const PathStyle& style,
                              bool fp8, bool has_bias) {
  const TensorView& t = ckpt.tensor(base + ".weight");
  PreparedLinear lin;
  lin.out = static_cast<int>(t.shape[0]);
  lin.in = static_cast<int>(t.shape[1]);
  // weight-quant checkpoint: a linear the checkpoint stores unquantized (modules_to_not_convert)
  // runs in the act dtype, as vLLM's UnquantizedLinearMethod runs it.
  lin.fp8 = fp8 && (!style.weight_from_checkpoint || t.dtype == DType::e4m3);
  if (lin.fp8 && style.weight_from_checkpoint) {
    // The checkpoint's own codes and scales, verbatim (vLLM's Fp8LinearMethod
    // process_weights_after_loading keeps weight and weight_scale_inv as loaded).
    lin.wq.rows = lin.out;
    lin.wq.cols = lin.in;
    lin.wq.block_rows = t.block_rows;
    lin.wq.block_cols = t.block_cols;
    lin.wq.kind = num::Fp8Kind::e4m3;
    lin.wq.codes.assign(t.data, t.data + t.nbytes);
    lin.wq.scale_inv.resize(static_cast<std::size_t>(t.scale_inv->numel()));
    t.scale_inv->to_float(lin.wq.scale_inv.data());
    lin.per_channel = ckpt.spec().fp8.per_channel;
    // vllm/_custom_ops.py cutlass_scaled_mm sends a weight whose dims are not multiples of 16 to
    // triton_scaled_mm, a kernel rlparity does not model.
    if (lin.per_channel && (lin.out % 16 != 0 || lin.in % 16 != 0))
      RLP_THROW_INPUT(
          "{}: tensor '{}' is {}x{}: vLLM runs a per-channel fp8 linear whose dims are not multiples of 16 "
          "through triton_scaled_mm instead of CUTLASS, which rlparity does not emulate",
          t.file, base + ".weight", lin.out, lin.in);
  } else if (lin.fp8) {
    // The trainer's master weights (as stored; an fp8 checkpoint's dequantized values) are what the
    // refit quantizes: no bf16 detour.
    // Widened a block row at a time inside the quantizer: the float master is never held whole.
    const int64_t cols = t.shape[1];
    num::quantize_blocks_into(
        [&t, cols](int r0, int r1, float* dst) { t.to_float(r0 * cols, (r1 - r0) * cols, dst); }, lin.out,
        lin.in, 128, 128, style.weight_scale_options(), lin.wq);
    t.release_resident_pages();  // read once: not resident beside the form it became
  } else {
    lin.w = act_bits(t, style.act, ckpt.values_checked_finite());
  }
  if (has_bias) lin.bias = act_values(ckpt.tensor(base + ".bias"), style.act);
  return lin;
}

}  // namespace

std::string weights_key(const PathStyle& s) {
  if (!s.fp8_linear) return fmt::format("act={}", static_cast<int>(s.act));
  if (s.weight_from_checkpoint)
    return fmt::format("act={};fp8;first={};last={};wq=checkpoint", static_cast<int>(s.act),
                       s.bf16_first_layers, s.bf16_last_layers);
  const num::ScaleOptions o = s.weight_scale_options();
  return fmt::format("act={};fp8;first={};last={};wq={};pow2={};eps={};kind={}", static_cast<int>(s.act),
                     s.bf16_first_layers, s.bf16_last_layers, static_cast<int>(o.convention), o.pow2, o.eps,
                     static_cast<int>(o.kind));
}

std::string refit_group_key(const PathStyle& s) {
  const num::ScaleOptions o = s.weight_scale_options();
  const bool agreeing =
      s.fp8_linear && !s.weight_from_checkpoint && !o.pow2 &&
      (o.convention == num::ScaleConvention::te || o.convention == num::ScaleConvention::nemo_refit);
  if (!agreeing) return weights_key(s);
  PathStyle t = s;  // both conventions' default amax floor is 0: the key's eps stays equal
  t.weight_quant = num::ScaleConvention::te;
  return weights_key(t) + ";refit=te|nemo-refit";
}

bool refit_form_is_shareable(const PreparedWeights& w, const Checkpoint& ckpt) {
  if (!ckpt.values_checked_finite()) return false;  // TE's amax skips a NaN, NeMo's propagates it
  auto whole_normal_blocks = [](const PreparedLinear& lin) {
    if (!lin.fp8) return true;
    const num::Fp8Tensor& q = lin.wq;
    // NeMo pads a partial edge block with the weight's last element before its amax; TE masks it.
    if (lin.per_channel || q.block_rows != 128 || q.block_cols != 128 || q.rows % 128 != 0 ||
        q.cols % 128 != 0)
      return false;
    return std::all_of(q.scale_inv.begin(), q.scale_inv.end(),
                       [](float s) { return s >= std::numeric_limits<float>::min(); });  // NaN fails too
  };
  return std::all_of(w.layers.begin(), w.layers.end(), [&](const PreparedLayer& l) {
    return std::all_of(std::begin(l.proj), std::end(l.proj), whole_normal_blocks) &&
           std::all_of(l.experts.begin(), l.experts.end(), whole_normal_blocks);
  });
}

namespace {

// The tensors a forward reads, walked once for every weight form: embed(tensor) makes the embedding,
// vec(name) a norm vector, linear(base, layer, bias) a projection (layer -1: the LM head or a MoE
// router, kept in the act dtype on fp8 paths).
template <class Weights, class Embed, class Vec, class Linear>
Weights walk_checkpoint(const Checkpoint& ckpt, const Embed& embed, const Vec& vec, const Linear& linear) {
  ckpt.check_unchanged();  // a truncated mapping would fault on the reads below
  const ModelSpec& spec = ckpt.spec();
  Weights w;
  w.embed = embed(ckpt.tensor("model.embed_tokens.weight"));
  w.layers.resize(static_cast<std::size_t>(spec.layers));
  for (int l = 0; l < spec.layers; ++l) {
    auto& layer = w.layers[static_cast<std::size_t>(l)];
    const bool moe = spec.is_moe_layer(l);
    const bool shared = moe && spec.shared_expert_intermediate > 0;
    for (int p = 0; p < kNumProj; ++p) {
      const Proj proj = static_cast<Proj>(p);
      const bool mlp = proj == Proj::gate || proj == Proj::up || proj == Proj::down;
      if (moe && mlp && !shared) continue;
      const bool bias = spec.qkv_bias && (proj == Proj::q || proj == Proj::k || proj == Proj::v);
      const std::string suffix = proj_tensor_suffix(proj);  // "mlp.gate_proj", ...
      layer.proj[p] =
          linear(layer_tensor_name(
                     l, moe && mlp ? ModelSpec::shared_expert_tensor_suffix(suffix.c_str() + 4) : suffix),
                 l, bias);
    }
    if (moe) {
      layer.router = linear(layer_tensor_name(l, spec.router_tensor_suffix()), -1, false);  // never fp8
      if (shared)
        layer.shared_gate =
            linear(layer_tensor_name(l, ModelSpec::shared_expert_gate_tensor_suffix()), -1, false);
      for (int e = 0; e < spec.num_experts; ++e)
        for (const char* p : {"gate_proj", "up_proj", "down_proj"})
          layer.experts.push_back(linear(layer_tensor_name(l, spec.expert_tensor_suffix(e, p)), l, false));
    }
    layer.input_norm = vec(layer_tensor_name(l, "input_layernorm.weight"));
    layer.post_norm = vec(layer_tensor_name(l, "post_attention_layernorm.weight"));
    if (spec.qk_norm) {
      layer.q_norm = vec(layer_tensor_name(l, "self_attn.q_norm.weight"));
      layer.k_norm = vec(layer_tensor_name(l, "self_attn.k_norm.weight"));
    }
  }
  w.final_norm = vec("model.norm.weight");
  w.lm_head = linear(spec.tied_embeddings ? "model.embed_tokens" : "lm_head", -1, false);
  return w;
}

}  // namespace

PreparedWeights prepare_weights(const Checkpoint& ckpt, const PathStyle& style) {
  const int layers = ckpt.spec().layers;
  return walk_checkpoint<PreparedWeights>(
      ckpt, [&](const TensorView& t) { return act_bits(t, style.act, ckpt.values_checked_finite()); },
      [&](const std::string& name) { return act_values(ckpt.tensor(name), style.act); },
      [&](const std::string& base, int layer, bool bias) {
        const bool fp8 = layer >= 0 && style.layer_is_fp8(layer, layers);
        return prepare_linear(ckpt, base, style, fp8, bias);
      });
}

OracleWeights prepare_oracle_weights(const Checkpoint& ckpt) {
  return walk_checkpoint<OracleWeights>(
      ckpt, [](const TensorView& t) { return &t; },
      [&](const std::string& name) { return f64_values(ckpt.tensor(name)); },
      [&](const std::string& base, int, bool bias) {
        const TensorView& t = ckpt.tensor(base + ".weight");
        OracleLinear lin;
        lin.out = static_cast<int>(t.shape[0]);
        lin.in = static_cast<int>(t.shape[1]);
        lin.w = &t;
        if (bias) lin.bias = f64_values(ckpt.tensor(base + ".bias"));
        return lin;
      });
}

}  // namespace rlp
