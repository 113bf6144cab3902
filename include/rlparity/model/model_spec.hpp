// What a checkpoint's config.json says about the network: architecture, shapes, RoPE, norms.
// Parsed once, validated strictly: an unsupported architecture or option is refused by name.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace rlp {

enum class Arch { llama, qwen2, qwen3, mistral, qwen3_moe, qwen2_moe, mixtral };

struct RopeScaling {
  enum class Type { none, llama3 } type = Type::none;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_position_embeddings = 8192;
};

// config.json's quantization_config for a pre-quantized block-scaled FP8 checkpoint (the layout of
// DeepSeek-V3 and Qwen3 -FP8, loaded by vLLM's Fp8LinearMethod and transformers' finegrained_fp8):
// each quantized linear stores F8_E4M3 codes `*.weight` and float32 `*.weight_scale_inv`, one per
// block of block_rows x block_cols (dequantized value = code x scale_inv); everything else is
// stored unquantized. Only 128 x 128 blocks, e4m3 and dynamic activations are accepted.
//
// The same layout written by llm-compressor (quant_method "compressed-tensors", every config group's
// weights {num_bits 8, type float, strategy block, block_structure [128, 128]}, dynamic activations)
// names the scales `*.weight_scale` (the same dequantization multiplier) and lists unquantized
// modules in `ignore`; vLLM runs both through the same W8A8BlockFp8LinearOp
// (compressed_tensors_w8a8_fp8.py), so they replay alike.
struct Fp8CheckpointQuant {
  bool enabled = false;
  std::string method = "fp8";                     // "fp8" | "compressed-tensors"
  std::string scale_suffix = "weight_scale_inv";  // "weight_scale" for compressed-tensors
  int block_rows = 128, block_cols = 128;
  // compressed-tensors strategy channel: `weight_scale` [out, 1], one scale per output channel
  // (block_rows 1, block_cols 0 = the whole row), activations quantized per token (vLLM's
  // Fp8LinearOp; docs/kernel-paths.md).
  bool per_channel = false;
  // modules_to_not_convert (transformers) and ignored_layers (vLLM), or compressed-tensors' ignore:
  // linears stored unquantized.
  std::vector<std::string> not_converted;
  // Is the linear `module` (e.g. "model.layers.3.mlp.down_proj") listed as not converted? For "fp8",
  // an entry matches when it is a substring of the name or of the name with every digit run replaced
  // by '*' (transformers' _replace_with_fp8_linear rule, which covers vLLM's exact-prefix match); for
  // compressed-tensors when it equals the name or is "re:<regex>" matching from its start (vLLM's
  // compressed_tensors/utils.py _is_equal_or_regex_match).
  bool is_not_converted(const std::string& module) const;
};

// A linear's weight tensor: its name without ".weight", and its [out, in] shape.
struct LinearTensor {
  std::string name;
  int64_t out = 0, in = 0;
};

// Is `module` (a tensor name's last component before ".weight") a decoder linear an fp8 checkpoint
// may quantize: *_proj (attention, MLP, experts, shared expert) or Mixtral's w1/w2/w3? Routers
// ("gate") and Qwen2-MoE's shared_expert_gate are not.
bool is_quantizable_linear_module(const std::string& module);

struct ModelSpec {
  Arch arch = Arch::llama;
  std::string arch_name;  // as in config.json, e.g. "LlamaForCausalLM"
  int hidden = 0;
  int intermediate = 0;
  int layers = 0;
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;  // explicit in Qwen3 configs, hidden / heads otherwise
  int vocab = 0;
  int max_positions = 0;
  double rms_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tied_embeddings = false;
  bool qkv_bias = false;  // Qwen2
  bool qk_norm = false;   // Qwen3: per-head RMSNorm on q and k before RoPE
  int bos_token = -1;
  int eos_token = -1;            // the first of eos_token_id (an int or a list)
  std::vector<int> stop_tokens;  // every id that ends sampling: config.json's eos_token_id list,
                                 // then generation_config.json's (Checkpoint::open adds those)

  Fp8CheckpointQuant fp8;  // quantization_config (block-scaled fp8), when the checkpoint has one
  // Mixture of experts (Qwen3-MoE, Qwen2-MoE, Mixtral); num_experts 0 = a dense model. A layer is
  // sparse when is_moe_layer says so (transformers' Qwen3MoeDecoderLayer / Qwen2MoeDecoderLayer
  // rule; every Mixtral layer); dense layers keep the intermediate-size MLP.
  int num_experts = 0;
  int experts_per_tok = 0;      // k of the top-k routing
  int moe_intermediate = 0;     // each expert's intermediate size (Mixtral: intermediate_size)
  bool norm_topk_prob = false;  // Mixtral: always
  int decoder_sparse_step = 1;
  std::vector<int> mlp_only_layers;
  // Qwen2-MoE's shared expert: an MLP of this intermediate size every token passes through, gated
  // by sigmoid(shared_expert_gate(x)); 0 = none.
  int shared_expert_intermediate = 0;
  bool is_moe_layer(int layer) const;
  int moe_layer_count() const;

  // Tensor names of a sparse layer, relative to its "model.layers.{i}." prefix: the router
  // ("mlp.gate"; Mixtral "block_sparse_moe.gate"), expert e's projection `proj` (gate_proj, up_proj
  // or down_proj: "mlp.experts.{e}.{proj}"; Mixtral "block_sparse_moe.experts.{e}.w1|w3|w2"), and
  // Qwen2-MoE's shared expert ("mlp.shared_expert.{proj}") and its gate ("mlp.shared_expert_gate").
  std::string router_tensor_suffix() const;
  std::string expert_tensor_suffix(int expert, const char* proj) const;
  static std::string shared_expert_tensor_suffix(const char* proj);
  static std::string shared_expert_gate_tensor_suffix();
  // The feed-forward linears of decoder layer `layer`: the dense MLP (gate, up, down), or a sparse
  // layer's experts (Qwen3MoeSparseMoeBlock, Qwen2MoeSparseMoeBlock, MixtralSparseMoeBlock) then
  // Qwen2-MoE's shared expert. With q/k/v/o, the linears an fp8 checkpoint may quantize.
  std::vector<LinearTensor> feed_forward_linears(int layer) const;

  nlohmann::json to_json() const;
};

// Parses and validates a config.json object; `source` (the file path) is named in every error.
ModelSpec parse_model_spec(const nlohmann::json& config, const std::string& source);

// An int or a list of ints under `key` (bos/eos_token_id in config.json and generation_config.json);
// absent or null: empty. `source` is named in errors.
std::vector<int> parse_token_ids(const nlohmann::json& config, const std::string& source, const char* key);

// Hugging Face tensor names.
std::string layer_tensor_name(int layer, const std::string& suffix);  // "model.layers.{i}.{suffix}"

}  // namespace rlp
