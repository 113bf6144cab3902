// A kernel path is a named set of numerical choices (DESIGN section 3), not a copy of the model
// code: the forward is written once and asks its style how each op rounds and orders. Every field
// here is a knob a user can flip per path (--gen-<knob> / --train-<knob>) and that attribution
// can blame mismatch on; the table in kernel_style.cpp is the single list of them.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rlparity/numerics/all_reduce.hpp"
#include "rlparity/numerics/gemm.hpp"
#include "rlparity/numerics/scaling.hpp"

namespace rlp {

enum class SequenceMode { decode, teacher_forced };
enum class AttentionKind { flash, split_kv };
enum class KvCacheDtype { bf16, fp8 };
enum class NormKind { fused_add, unfused };  // vLLM fused_add_rms_norm vs TE/Megatron RMSNorm
enum class ResidualDtype { act, fp32 };
// How the partial outputs of the tensor-parallel ranks are all-reduced (numerics/all_reduce.hpp):
// vllm = vLLM's choice per message (custom all-reduce when it takes the message, the NCCL ring
// otherwise), custom_ar = always vLLM's custom all-reduce, nccl_ring = always NCCL's ring,
// nccl_rs = NCCL's ring reduce-scatter over sequence shards (Megatron's sequence parallelism).
enum class TpReduce { vllm, custom_ar, nccl_ring, nccl_rs };
// The M a decode batch runs at: the batch itself (eager), or padded up to the next CUDA-graph size
// vLLM captures (docs/kernel-paths.md, "CUDA-graph padding").
enum class BatchPad { none, vllm };
// How a MoE block combines its k experts' outputs (docs/kernel-paths.md, "Mixture of experts"):
// vllm = each expert's fp32 down-projection accumulator times its fp32 routing weight, rounded
// once, then vLLM's moe_sum over the k slots; fp32 = each expert's act-dtype output times its fp32
// weight, summed in fp32 in ascending expert order, one rounding (Megatron's unpermute with fp32
// probs); rounded = weights cast to the act dtype, each product rounded and added in the act dtype
// in ascending expert order (transformers' unfused Qwen3MoeSparseMoeBlock).
enum class MoeCombine { vllm, fp32, rounded };

struct PathStyle {
  std::string name;  // "gen" or "train"
  SequenceMode mode = SequenceMode::teacher_forced;
  int batch = 1;                        // decode batch size: the M that kernel selection sees during decode
  BatchPad batch_pad = BatchPad::none;  // decode M padded to a captured CUDA-graph size (decode only)
  // Generation prefill in chunks of this many prompt tokens, each attending to the cached positions
  // and itself (vLLM's chunked prefill under max_num_batched_tokens); 0 = the whole prompt at once.
  int prefill_chunk = 0;

  num::Half16 act = num::Half16::bf16;  // storage format of activations and non-fp8 weights
  bool fp8_linear = false;
  int bf16_first_layers = 0;  // on an fp8 path, keep these decoder layers' linears in act dtype
  int bf16_last_layers = 0;
  num::ScaleConvention weight_quant = num::ScaleConvention::te;
  // weight-quant "checkpoint": the fp8 linears use a pre-quantized checkpoint's own codes and
  // scales verbatim, as vLLM loads them (weight_quant and pow2 then act on activations only);
  // refused by make_recipe when the checkpoint is not fp8.
  bool weight_from_checkpoint = false;
  num::ScaleConvention act_quant = num::ScaleConvention::te;
  bool pow2_scales = false;
  num::Promotion fp8_promotion = num::Promotion::cublaslt;
  num::SliceAccum fp8_accum = num::SliceAccum::fp32;

  int split_k = 1;  // 0 = auto: chosen from M like a decode-tuned heuristic (see gemm_config_for)
  int k_chunk = 0;

  AttentionKind attention = AttentionKind::flash;
  int split_kv_partition = 512;  // positions per partition for split_kv
  int attn_block = 128;          // KV positions per online-softmax block
  bool attn_p_round = true;      // P rounded to act dtype (fp8 with an fp8 KV cache) before P.V
  KvCacheDtype kv_cache = KvCacheDtype::bf16;

  NormKind norm = NormKind::unfused;
  ResidualDtype residual = ResidualDtype::act;
  bool rope_table_rounded = false;  // cos/sin tables rounded to act dtype
  bool mlp_fused = false;           // silu(gate)*up in fp32 with one rounding
  bool logits_fp32 = false;         // lm_head output kept fp32 instead of act dtype

  // Tensor parallelism (docs/kernel-paths.md, "Tensor parallelism"): row-parallel linears (o, down)
  // split K into `tp` contiguous ranges whose act-dtype partials are all-reduced by `tp_reduce`;
  // vocab_parallel_logsoftmax: the log-softmax reduces per-rank vocabulary shards (Megatron's
  // vocab_parallel_cross_entropy) instead of the gathered row (vLLM's logits processor).
  int tp = 1;
  TpReduce tp_reduce = TpReduce::nccl_ring;
  bool vocab_parallel_logsoftmax = true;

  // Mixture of experts (inert on dense models: the replay plan sets moe_model for MoE checkpoints).
  bool moe_model = false;
  bool router_logits_fp32 = true;  // router GEMM output kept fp32 (Megatron moe_router_dtype fp32) or act
  MoeCombine moe_combine = MoeCombine::fp32;

  // True when decoder layer `layer` (0-based) of a model with `num_layers` runs fp8 linears.
  bool layer_is_fp8(int layer, int num_layers) const;
  // The all-reduce algorithm tp_reduce picks for a message of `bytes` bytes; row_output: the
  // reduction after a row-parallel linear (nccl_rs reduce-scatters only those; others, like the
  // log-softmax sums, are all-reduced).
  num::ReduceAlgo reduce_algo(int64_t bytes, bool row_output) const;
  // The M kernel selection (and the all-reduce message) sees during a decode step: `batch`, padded
  // by batch_pad.
  int decode_m() const;
  // GEMM configuration for a linear with M rows of input and K inner dimension.
  num::GemmConfig gemm_config(int m, int k) const;
  // How this path's fp8 linears scale their weights (128x128 blocks) and activations (1x128
  // groups): the one mapping from the knobs to the quantizer, for the CPU and CUDA backends and the
  // prepared-weight cache key alike.
  num::ScaleOptions weight_scale_options() const;
  num::ScaleOptions act_scale_options() const;
  nlohmann::json to_json() const;
};

// Default styles of DESIGN section 3 (before a recipe sets precisions).
PathStyle default_generation_style();
PathStyle default_training_style();

// The knob table: name, allowed values (for help), and how to set/read it as a string.
struct KnobInfo {
  std::string name;
  std::string values;  // e.g. "flash|split-kv:P"
  std::string help;
};
const std::vector<KnobInfo>& knob_table();
// Sets knob `name` to `value`; InputError naming the knob and the accepted values on failure.
void set_knob(PathStyle& style, const std::string& name, const std::string& value);
std::string get_knob(const PathStyle& style, const std::string& name);
struct ModelSpec;
// InputError naming the dimension when style.tp does not divide the attention heads or the
// intermediate size, or neither divides the other with the KV heads (vLLM's rule for replicating
// them). Checked by the replay plan before any work and by the ops that cut the weights.
void check_tensor_parallel(const PathStyle& style, const ModelSpec& spec);
// True for the knobs that act only when the path's tp > 1 (tp-reduce, logsoftmax): a run file
// records them only then, and knob attribution skips them when both paths run tp 1.
bool knob_needs_tp(const std::string& name);
// True when knob `name`, as set on this path, changes nothing: the tp-only knobs at tp 1,
// prefill-chunk at 0, batch-pad where vLLM's padding leaves the batch as it is (a captured size, or
// beyond the largest), and both of those on a teacher-forced path (they act in decode mode only). A
// run file records such a knob only where it acts; knob attribution skips a knob inert on both paths.
bool knob_inert(const PathStyle& style, const std::string& name);
// vLLM's default CUDA-graph capture sizes (VllmConfig._set_cudagraph_sizes with max_num_seqs 256):
// the smallest one >= batch, or batch itself beyond the largest (vLLM then runs eagerly).
int vllm_cudagraph_size(int batch);

}  // namespace rlp
