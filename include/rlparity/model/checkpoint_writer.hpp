// Writing checkpoints in the real Hugging Face on-disk format: safetensors files and random
// checkpoints of every supported architecture (tests, benchmarks, tools/rlparity_make_checkpoint).
#pragma once
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rlparity/model/checkpoint.hpp"
#include "rlparity/numerics/scaling.hpp"

namespace rlp {

struct TensorData {
  std::string name;
  DType dtype = DType::fp32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // little-endian elements, numel * dtype_size(dtype) bytes
};

// Encodes float values in `dtype` (bf16/f16 rounded to nearest even, e4m3 satfinite: values that
// are e4m3 numbers are stored exactly). values.size() must equal the shape's element count.
TensorData make_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape,
                       const std::vector<float>& values);

// The block-scaled fp8 form of a [rows x cols] master (ModelSpec::fp8's layout): `<base>.weight`
// F8_E4M3 codes and `<base>.weight_scale_inv` float32 [ceil(rows/128), ceil(cols/128)], quantized
// by num::quantize_blocks in the convention of `opt`.
// The scales are named `<base>.<scale_suffix>` ("weight_scale" in compressed-tensors checkpoints).
// The per-channel fp8 form of a [rows x cols] master (compressed-tensors strategy channel):
// `<base>.weight` F8_E4M3 and `<base>.weight_scale` [rows, 1] in `scale_dtype` (llm-compressor keeps
// the weight's dtype). Per row: scale = amax / 448 rounded to scale_dtype (the minmax observer's
// max(|min|, |max|) / 448; an all-zero row gets 1), then code = RNE(clamp(w / scale, +-448)), the
// quotient rounded to scale_dtype first (compressed-tensors' _quantize divides in that dtype).
std::vector<TensorData> make_fp8_channel_tensors(const std::string& base, int64_t rows, int64_t cols,
                                                 const std::vector<float>& master, DType scale_dtype);
std::vector<TensorData> make_fp8_block_tensors(const std::string& base, int64_t rows, int64_t cols,
                                               const std::vector<float>& master, const num::ScaleOptions& opt,
                                               const std::string& scale_suffix = "weight_scale_inv");

// What a safetensors header says of one tensor.
struct TensorHeader {
  std::string name;
  DType dtype = DType::fp32;
  std::vector<int64_t> shape;
  uint64_t nbytes() const;
};

// One safetensors file written tensor by tensor: 8-byte length, JSON header (padded with spaces to a
// multiple of 8, as the reference writer does) for every tensor up front, then each tensor's bytes
// as the caller produces it, in the header's order. A writer of an 8B checkpoint holds one tensor at
// a time, never the checkpoint.
class SafetensorsWriter {
 public:
  SafetensorsWriter(const std::string& path, std::vector<TensorHeader> tensors,
                    const nlohmann::json& metadata = nlohmann::json::object());
  // The next tensor's bytes; throws when it is not the one the header announced next.
  void write(const TensorData& t);
  // Checks that every announced tensor was written and flushes; throws InputError on a write error.
  void close();

 private:
  std::string path_;
  std::vector<TensorHeader> tensors_;
  std::size_t next_ = 0;
  std::ofstream out_;
};

// Writes one safetensors file holding `tensors` (a SafetensorsWriter fed in order).
void write_safetensors(const std::string& path, const std::vector<TensorData>& tensors,
                       const nlohmann::json& metadata = nlohmann::json::object());

struct RandomCheckpointOptions {
  std::string arch = "llama";  // llama | llama3 | qwen2 | qwen3 | mistral | qwen3-moe | qwen2-moe | mixtral
  int hidden = 64;
  int intermediate = 172;
  int layers = 2;
  int heads = 4;
  int kv_heads = 2;
  int head_dim = 0;  // 0: hidden / heads (written to config.json when given, always for qwen3)
  int vocab = 256;
  int max_pos = 512;
  DType dtype = DType::fp32;  // every tensor's dtype; with fp8_block, of the unquantized ones
  // Decoder linears written block-scaled fp8 (make_fp8_block_tensors) from the master rounded to
  // `dtype`, with config.json's quantization_config; quant sets their convention.
  bool fp8_block = false;
  num::ScaleOptions quant = {num::ScaleConvention::nemo_refit, false, -1.0f, num::Fp8Kind::e4m3};
  // With fp8_block: "fp8" (quant_method fp8, `weight_scale_inv`, as DeepSeek-V3 and Qwen3 -FP8) or
  // "compressed-tensors" (llm-compressor's block fp8 scheme, `weight_scale`, ignore ["lm_head"]).
  std::string fp8_format = "fp8";
  // With fp8_block and fp8_format "compressed-tensors": per-channel instead of 128x128 blocks, as
  // llm-compressor's FP8_DYNAMIC preset writes them (make_fp8_channel_tensors; `quant` unused).
  bool fp8_channel = false;
  bool tied = false;
  int shards = 1;  // > 1: model-0000k-of-0000N.safetensors + model.safetensors.index.json
  uint64_t seed = 0;
  std::string out;
  int outlier_layer = -1;  // >= 0: scale one input channel of this layer's q/k/v/gate/up
  double outlier_scale = 1.0;
  int outlier_channel = 0;
  // MoE archs (qwen3-moe, qwen2-moe, mixtral): layers sparse but mlp_only_layers (decoder_sparse_step
  // 1), `experts` experts of intermediate size moe_intermediate (mixtral: `intermediate`), top_k
  // routed per token, norm_topk_prob as Qwen3-30B-A3B's config sets it (mixtral: always);
  // qwen2-moe adds a shared expert of intermediate size shared_intermediate and its sigmoid gate.
  int experts = 8;
  int top_k = 2;
  int moe_intermediate = 64;
  int shared_intermediate = 96;
  bool norm_topk = true;
  std::vector<int> mlp_only_layers = {};  // qwen3-moe, qwen2-moe: these layers keep a dense MLP
  // MoE archs: in every layer, router row 1 is row 0 with its first element moved up by one bf16
  // ulp (both bf16-exact), so experts 0 and 1 nearly tie: logits rounded to bf16 often tie
  // (lowest index wins), fp32 logits keep them apart.
  bool router_near_tie = false;
};

// The config.json the generator writes for `o`.
nlohmann::json random_checkpoint_config(const RandomCheckpointOptions& o);

// Writes config.json and the weights to o.out (created if needed), one tensor at a time (an 8B
// checkpoint is written in the memory of its largest tensor). Deterministic in o (its own
// Box-Muller normals from std::mt19937_64, one stream per tensor seeded from seed and name, so a
// bf16 checkpoint holds the f32 one's values rounded). Scales: embeddings/lm_head N(0, (2/sqrt(H))^2)
// so logits are spread but not saturated, projections N(0, 1/fan_in) (o/down additionally
// / sqrt(2 layers)), norm weights 1 + N(0, 0.1^2), biases N(0, 0.1^2).
void write_random_checkpoint(const RandomCheckpointOptions& o);

}  // namespace rlp
