#include "rlparity/model/kernel_style.hpp"

#include <fmt/format.h>

#include <charconv>
#include <functional>
#include <initializer_list>

#include "rlparity/model/model_spec.hpp"
#include "rlparity/util/error.hpp"

namespace rlp {

bool PathStyle::layer_is_fp8(int layer, int num_layers) const {
  if (!fp8_linear) return false;
  return layer >= bf16_first_layers && layer < num_layers - bf16_last_layers;
}

namespace {
num::ScaleOptions scale_options(num::ScaleConvention c, bool pow2) {
  num::ScaleOptions o;
  o.convention = c;
  o.pow2 = pow2;
  return o;
}
}  // namespace

num::ScaleOptions PathStyle::weight_scale_options() const { return scale_options(weight_quant, pow2_scales); }
num::ScaleOptions PathStyle::act_scale_options() const { return scale_options(act_quant, pow2_scales); }

int vllm_cudagraph_size(int batch) {
  // VllmConfig._set_cudagraph_sizes (vllm/config/vllm.py): [1, 2, 4], then multiples of 8 below 256,
  // then multiples of 16 up to max_cudagraph_capture_size = min(max_num_seqs * 2, 512), i.e. 512
  // for the default max_num_seqs (256, or 1024 on large GPUs). Beyond it vLLM runs eagerly.
  constexpr int kMaxCapture = 512;
  if (batch <= 0 || batch > kMaxCapture) return batch;
  if (batch <= 2) return batch;
  if (batch <= 4) return 4;
  if (batch < 256) return (batch + 7) / 8 * 8;
  return (batch + 15) / 16 * 16;
}

int PathStyle::decode_m() const { return batch_pad == BatchPad::vllm ? vllm_cudagraph_size(batch) : batch; }

num::GemmConfig PathStyle::gemm_config(int m, int k) const {
  num::GemmConfig cfg;
  cfg.k_chunk = k_chunk;
  // auto: small-M (decode) GEMMs are split along K to fill the GPU, as cuBLAS heuristics and
  // vLLM's tuned configs do; large-M GEMMs are not. The rule is ours, stated and deterministic.
  if (split_k > 0) {
    cfg.split_k = split_k;
  } else {
    cfg.split_k = m <= 16 ? 4 : (m <= 64 ? 2 : 1);
  }
  cfg.split_k = std::max(1, std::min(cfg.split_k, k));
  cfg.out = num::out_round_of(act);
  cfg.slice_accum = fp8_accum;
  cfg.promotion = fp8_promotion;
  return cfg;
}

num::ReduceAlgo PathStyle::reduce_algo(int64_t bytes, bool row_output) const {
  switch (tp_reduce) {
    case TpReduce::custom_ar: return num::custom_ar_stage(bytes, tp);
    case TpReduce::vllm:
      return num::vllm_uses_custom_ar(bytes, tp) ? num::custom_ar_stage(bytes, tp)
                                                 : num::ReduceAlgo::nccl_ring;
    case TpReduce::nccl_rs:
      return row_output ? num::ReduceAlgo::nccl_reduce_scatter : num::ReduceAlgo::nccl_ring;
    case TpReduce::nccl_ring: break;
  }
  return num::ReduceAlgo::nccl_ring;
}

PathStyle default_training_style() {
  PathStyle s;
  s.name = "train";
  return s;
}

// The generation engine's kernels where they differ from training's.
PathStyle default_generation_style() {
  PathStyle s = default_training_style();
  s.name = "gen";
  s.mode = SequenceMode::decode;
  s.weight_quant = num::ScaleConvention::nemo_refit;
  s.act_quant = num::ScaleConvention::vllm;
  s.fp8_promotion = num::Promotion::deepgemm;
  s.split_k = 0;
  // vLLM replays decode steps as CUDA graphs by default (cudagraph_mode is not NONE unless
  // enforce_eager), padded to a captured size; at batch 1 (a captured size) it changes nothing.
  s.batch_pad = BatchPad::vllm;
  s.attention = AttentionKind::split_kv;
  s.split_kv_partition = 512;
  s.attn_block = 16;  // vLLM paged-attention block size
  s.norm = NormKind::fused_add;
  s.rope_table_rounded = true;
  s.mlp_fused = true;
  // vLLM picks its all-reduce per message (custom all-reduce below its size limit, NCCL above) and
  // gathers the vocabulary shards of the logits before a full-row log-softmax.
  s.tp_reduce = TpReduce::vllm;
  s.vocab_parallel_logsoftmax = false;
  // vLLM's Qwen3-MoE gate is a ReplicatedLinear in the model dtype (its logits are bf16), and its
  // fused_moe kernel weights each expert's output in the down GEMM's epilogue, then moe_sum adds them.
  s.router_logits_fp32 = false;
  s.moe_combine = MoeCombine::vllm;
  return s;
}

namespace {

using Setter = std::function<void(PathStyle&, const std::string&)>;
using Getter = std::function<std::string(const PathStyle&)>;

struct Knob {
  KnobInfo info;
  Setter set;
  Getter get;
};

[[noreturn]] void bad_value(const std::string& knob, const std::string& value, const std::string& allowed) {
  RLP_THROW_INPUT("knob '{}': invalid value '{}' (expected {})", knob, value, allowed);
}

int parse_int(const std::string& knob, const std::string& v, int lo, int hi, const std::string& allowed) {
  int out = 0;
  const auto* end = v.data() + v.size();
  const auto res = std::from_chars(v.data(), end, out);
  if (res.ec != std::errc() || res.ptr != end || out < lo || out > hi) bad_value(knob, v, allowed);
  return out;
}

bool parse_bool(const std::string& knob, const std::string& v) {
  if (v == "on" || v == "true" || v == "1") return true;
  if (v == "off" || v == "false" || v == "0") return false;
  bad_value(knob, v, "on|off");
}

template <class E>
struct EnumNames {
  std::vector<std::pair<E, std::string>> names;
  std::string allowed() const {
    std::string s;
    for (const auto& [e, n] : names) s += (s.empty() ? "" : "|") + n;
    return s;
  }
  E parse(const std::string& knob, const std::string& v) const {
    for (const auto& [e, n] : names)
      if (n == v) return e;
    bad_value(knob, v, allowed());
  }
  std::string name(E e) const {
    for (const auto& [x, n] : names)
      if (x == e) return n;
    return "?";
  }
};

// A format view's knob values, spelled as num::format_name spells them everywhere.
template <class View>
EnumNames<View> format_names(std::initializer_list<View> values) {
  EnumNames<View> n;
  for (const View v : values) n.names.emplace_back(v, num::format_name(num::format_of(v)));
  return n;
}
const EnumNames<num::ScaleConvention> kConventions{{{num::ScaleConvention::te, "te"},
                                                    {num::ScaleConvention::vllm, "vllm"},
                                                    {num::ScaleConvention::deepgemm, "deepgemm"},
                                                    {num::ScaleConvention::nemo_refit, "nemo-refit"}}};

template <class E>
Knob enum_knob(std::string name, std::string help, EnumNames<E> names, E PathStyle::*field) {
  const std::string allowed = names.allowed();
  return Knob{{name, allowed, std::move(help)},
              [=](PathStyle& s, const std::string& v) { s.*field = names.parse(name, v); },
              [=](const PathStyle& s) { return names.name(s.*field); }};
}

Knob bool_knob(std::string name, std::string help, bool PathStyle::*field, std::string on = "on",
               std::string off = "off") {
  return Knob{{name, on + "|" + off, std::move(help)},
              [=](PathStyle& s, const std::string& v) {
                if (v == on)
                  s.*field = true;
                else if (v == off)
                  s.*field = false;
                else
                  s.*field = parse_bool(name, v);
              },
              [=](const PathStyle& s) { return s.*field ? on : off; }};
}

Knob int_knob(std::string name, std::string help, int PathStyle::*field, int lo, int hi) {
  const std::string allowed = fmt::format("an integer in [{}, {}]", lo, hi);
  return Knob{{name, fmt::format("{}..{}", lo, hi), std::move(help)},
              [=](PathStyle& s, const std::string& v) { s.*field = parse_int(name, v, lo, hi, allowed); },
              [=](const PathStyle& s) { return std::to_string(s.*field); }};
}

const std::vector<Knob>& knobs() {
  static const std::vector<Knob> table = [] {
    std::vector<Knob> t;
    t.push_back(enum_knob("mode",
                          "prefill + token-by-token decode with a KV cache, or one teacher-forced pass",
                          EnumNames<SequenceMode>{{{SequenceMode::decode, "decode"},
                                                   {SequenceMode::teacher_forced, "teacher-forced"}}},
                          &PathStyle::mode));
    t.push_back(int_knob("batch", "decode batch size (the GEMM M that kernel selection sees)",
                         &PathStyle::batch, 1, 4096));
    t.push_back(enum_knob("batch-pad",
                          "decode M padded up to vLLM's captured CUDA-graph sizes, or the batch as is "
                          "(decode only)",
                          EnumNames<BatchPad>{{{BatchPad::none, "none"}, {BatchPad::vllm, "vllm"}}},
                          &PathStyle::batch_pad));
    t.push_back(int_knob("prefill-chunk",
                         "prefill the prompt in chunks of N tokens attending to the cached ones, as "
                         "vLLM's chunked prefill (0 = whole prompt; decode only)",
                         &PathStyle::prefill_chunk, 0, 1 << 24));
    t.push_back(enum_knob("act-dtype", "activation and non-fp8 weight format",
                          format_names({num::Half16::bf16, num::Half16::fp16}), &PathStyle::act));
    t.push_back(bool_knob("linear", "linear layers in fp8 or in the activation dtype", &PathStyle::fp8_linear,
                          "fp8", "act"));
    t.push_back(Knob{{"weight-quant", kConventions.allowed() + "|checkpoint",
                      "fp8 weight scale convention (128x128 blocks); checkpoint: a pre-quantized fp8 "
                      "checkpoint's own codes and scales"},
                     [](PathStyle& s, const std::string& v) {
                       if (v == "checkpoint") {
                         s.weight_from_checkpoint = true;
                         return;
                       }
                       for (const auto& [c, n] : kConventions.names)
                         if (n == v) {
                           s.weight_quant = c;
                           s.weight_from_checkpoint = false;
                           return;
                         }
                       bad_value("weight-quant", v, kConventions.allowed() + "|checkpoint");
                     },
                     [](const PathStyle& s) {
                       return s.weight_from_checkpoint ? std::string("checkpoint")
                                                       : kConventions.name(s.weight_quant);
                     }});
    t.push_back(enum_knob("act-quant", "fp8 activation scale convention (1x128 groups)", kConventions,
                          &PathStyle::act_quant));
    t.push_back(bool_knob("pow2-scales", "power-of-2 fp8 scales", &PathStyle::pow2_scales));
    t.push_back(enum_knob("fp8-promotion", "how 128-K slice partial sums are scaled into the accumulator",
                          EnumNames<num::Promotion>{{{num::Promotion::cublaslt, "cublaslt"},
                                                     {num::Promotion::deepgemm, "deepgemm"}}},
                          &PathStyle::fp8_promotion));
    t.push_back(enum_knob(
        "fp8-accum", "accumulation inside a 128-K slice: fp32 or Hopper wgmma model",
        EnumNames<num::SliceAccum>{{{num::SliceAccum::fp32, "fp32"}, {num::SliceAccum::hopper, "hopper"}}},
        &PathStyle::fp8_accum));
    t.push_back(Knob{
        {"split-k", "auto|1..64", "GEMM split-K count; auto picks from M (decode M is small)"},
        [](PathStyle& s, const std::string& v) {
          s.split_k = v == "auto" ? 0 : parse_int("split-k", v, 1, 64, "auto or 1..64");
        },
        [](const PathStyle& s) { return s.split_k == 0 ? std::string("auto") : std::to_string(s.split_k); }});
    t.push_back(int_knob("k-chunk", "GEMM K chunk accumulated from zero then added (0 = none)",
                         &PathStyle::k_chunk, 0, 1 << 20));
    t.push_back(Knob{{"attention", "flash|split-kv:P",
                      "online-softmax attention, or split-KV partitions of P positions merged"},
                     [](PathStyle& s, const std::string& v) {
                       if (v == "flash") {
                         s.attention = AttentionKind::flash;
                       } else if (v.rfind("split-kv:", 0) == 0) {
                         s.attention = AttentionKind::split_kv;
                         s.split_kv_partition =
                             parse_int("attention", v.substr(9), 1, 1 << 24, "flash or split-kv:P");
                       } else if (v == "split-kv") {
                         s.attention = AttentionKind::split_kv;
                       } else {
                         bad_value("attention", v, "flash|split-kv:P");
                       }
                     },
                     [](const PathStyle& s) {
                       return s.attention == AttentionKind::flash
                                  ? std::string("flash")
                                  : fmt::format("split-kv:{}", s.split_kv_partition);
                     }});
    t.push_back(
        int_knob("attn-block", "KV positions per online-softmax block", &PathStyle::attn_block, 1, 1 << 20));
    t.push_back(bool_knob("attn-p-round", "round P to the act dtype before P.V", &PathStyle::attn_p_round));
    t.push_back(enum_knob("kv-cache", "KV cache format (decode only)",
                          EnumNames<KvCacheDtype>{{{KvCacheDtype::bf16, "bf16"}, {KvCacheDtype::fp8, "fp8"}}},
                          &PathStyle::kv_cache));
    t.push_back(
        enum_knob("norm", "fused add+RMSNorm (vLLM) or unfused RMSNorm (TE)",
                  EnumNames<NormKind>{{{NormKind::fused_add, "fused-add"}, {NormKind::unfused, "unfused"}}},
                  &PathStyle::norm));
    t.push_back(
        enum_knob("residual", "residual stream format",
                  EnumNames<ResidualDtype>{{{ResidualDtype::act, "bf16"}, {ResidualDtype::fp32, "fp32"}}},
                  &PathStyle::residual));
    t.push_back(bool_knob("rope-table", "cos/sin table rounded to act dtype or fp32",
                          &PathStyle::rope_table_rounded, "rounded", "fp32"));
    t.push_back(bool_knob("mlp", "silu(gate)*up fused with one rounding, or two roundings",
                          &PathStyle::mlp_fused, "fused", "unfused"));
    t.push_back(
        bool_knob("logits", "lm_head output in fp32 or act dtype", &PathStyle::logits_fp32, "fp32", "bf16"));
    t.push_back(int_knob("tp", "tensor-parallel ranks: row-parallel linears all-reduce tp partials",
                         &PathStyle::tp, 1, 64));
    t.push_back(enum_knob("tp-reduce",
                          "all-reduce of row-parallel partials: vLLM's per-message choice, vLLM's custom "
                          "all-reduce, NCCL's ring, or NCCL's reduce-scatter over sequence shards",
                          EnumNames<TpReduce>{{{TpReduce::vllm, "vllm"},
                                               {TpReduce::custom_ar, "custom-ar"},
                                               {TpReduce::nccl_ring, "nccl-ring"},
                                               {TpReduce::nccl_rs, "nccl-rs"}}},
                          &PathStyle::tp_reduce));
    t.push_back(bool_knob("logsoftmax",
                          "with tp > 1: log-softmax over vocabulary shards all-reduced (Megatron) or over "
                          "the gathered row (vLLM)",
                          &PathStyle::vocab_parallel_logsoftmax, "vocab-parallel", "gathered"));
    t.push_back(bool_knob("moe-router-logits",
                          "MoE models: router logits kept fp32 (Megatron moe_router_dtype) or rounded to "
                          "the act dtype (vLLM's gate linear)",
                          &PathStyle::router_logits_fp32, "fp32", "act"));
    t.push_back(enum_knob(
        "moe-combine",
        "MoE models: experts' outputs weighted in the down GEMM epilogue then moe_sum "
        "(vLLM fused_moe), summed in fp32 (Megatron unpermute), or each product rounded "
        "and added in the act dtype (transformers)",
        EnumNames<MoeCombine>{
            {{MoeCombine::vllm, "vllm"}, {MoeCombine::fp32, "fp32"}, {MoeCombine::rounded, "rounded"}}},
        &PathStyle::moe_combine));
    return t;
  }();
  return table;
}

const Knob& find_knob(const std::string& name) {
  for (const auto& k : knobs())
    if (k.info.name == name) return k;
  std::string all;
  for (const auto& k : knobs()) all += (all.empty() ? "" : ", ") + k.info.name;
  RLP_THROW_INPUT("unknown kernel-path knob '{}' (known: {})", name, all);
}

}  // namespace

const std::vector<KnobInfo>& knob_table() {
  static const std::vector<KnobInfo> infos = [] {
    std::vector<KnobInfo> v;
    for (const auto& k : knobs()) v.push_back(k.info);
    return v;
  }();
  return infos;
}

void set_knob(PathStyle& style, const std::string& name, const std::string& value) {
  find_knob(name).set(style, value);
}

std::string get_knob(const PathStyle& style, const std::string& name) { return find_knob(name).get(style); }

void check_tensor_parallel(const PathStyle& style, const ModelSpec& spec) {
  const int tp = style.tp;
  if (tp == 1) return;
  if (spec.num_experts > 0)
    RLP_THROW_INPUT(
        "path '{}': tp {} with a mixture-of-experts model ({}) is not modelled (expert and tensor "
        "parallelism of MoE layers are not implemented); use tp 1",
        style.name, tp, spec.arch_name);
  // vLLM's attention and MLP layers shard heads and the intermediate size evenly (e.g.
  // vllm/model_executor/models/llama.py, LlamaAttention: total_num_heads % tp_size == 0; KV heads
  // split when tp <= their count, replicated when tp is a multiple of it).
  if (spec.heads % tp != 0)
    RLP_THROW_INPUT("path '{}': tp {} does not divide the attention heads ({})", style.name, tp, spec.heads);
  if (spec.intermediate % tp != 0)
    RLP_THROW_INPUT("path '{}': tp {} does not divide the intermediate size ({})", style.name, tp,
                    spec.intermediate);
  if (tp <= spec.kv_heads ? spec.kv_heads % tp != 0 : tp % spec.kv_heads != 0)
    RLP_THROW_INPUT(
        "path '{}': tp {} and the KV heads ({}): one must divide the other (KV heads are "
        "split when tp is at most their count, replicated when tp is a multiple of it)",
        style.name, tp, spec.kv_heads);
  // fp8 row-parallel shards must be whole 128-wide weight blocks (vLLM's block-fp8 linears refuse
  // other partitions); a per-channel checkpoint's own weights need shards of a multiple of 16 (else
  // vLLM runs triton_scaled_mm, not modelled). The ops check the prepared weights again.
  if (style.fp8_linear && style.bf16_first_layers + style.bf16_last_layers < spec.layers) {
    const bool per_channel = style.weight_from_checkpoint && spec.fp8.per_channel;
    for (const auto& [dim, k] :
         {std::pair<const char*, int>{"attention width (heads x head_dim)", spec.heads * spec.head_dim},
          std::pair<const char*, int>{"intermediate size", spec.intermediate}}) {
      if (per_channel && (k / tp) % 16 != 0)
        RLP_THROW_INPUT(
            "path '{}': tp {} cuts the {} ({}) into {}-wide shards: vLLM runs per-channel fp8 shards whose "
            "width is not a multiple of 16 through triton_scaled_mm, which rlparity does not emulate",
            style.name, tp, dim, k, k / tp);
      if (!per_channel && (k / tp) % 128 != 0)
        RLP_THROW_INPUT(
            "path '{}': tp {} cuts the {} ({}) into {}-wide shards, not whole 128-wide fp8 "
            "weight blocks (vLLM's block-fp8 linears refuse such a partition too)",
            style.name, tp, dim, k, k / tp);
    }
  }
}

bool knob_needs_tp(const std::string& name) { return name == "tp-reduce" || name == "logsoftmax"; }

bool knob_inert(const PathStyle& style, const std::string& name) {
  if (name.rfind("moe-", 0) == 0) return !style.moe_model;
  if (knob_needs_tp(name)) return style.tp == 1;
  if (name == "prefill-chunk") return style.mode != SequenceMode::decode || style.prefill_chunk == 0;
  if (name == "batch-pad")
    return style.mode != SequenceMode::decode || vllm_cudagraph_size(style.batch) == style.batch;
  return false;
}

nlohmann::json PathStyle::to_json() const {
  nlohmann::json j;
  j["name"] = name;
  for (const auto& k : knobs()) {
    if (tp == 1 && k.info.name == "tp") continue;  // single-GPU path
    // Knobs that change nothing here are recorded only where they act (run files from before they
    // existed read the same).
    if (knob_inert(*this, k.info.name)) continue;
    j[k.info.name] = k.get(*this);
  }
  j["bf16-first-layers"] = bf16_first_layers;
  j["bf16-last-layers"] = bf16_last_layers;
  return j;
}

}  // namespace rlp
