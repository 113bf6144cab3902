#include "rlparity/model/checkpoint_writer.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "rlparity/numerics/formats.hpp"
#include "rlparity/numerics/quantize.hpp"
#include "rlparity/util/error.hpp"

namespace rlp {
namespace fs = std::filesystem;

TensorData make_tensor(const std::string& name, DType dtype, std::vector<int64_t> shape,
                       const std::vector<float>& values) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  RLP_CHECK(static_cast<std::size_t>(n) == values.size(), "make_tensor({}): {} values for {} elements", name,
            values.size(), n);
  TensorData t;
  t.name = name;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes.resize(values.size() * dtype_size(dtype));
  uint8_t* p = t.bytes.data();
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::fp32) {
      std::memcpy(p + 4 * i, &values[i], 4);
    } else if (dtype == DType::e4m3) {
      p[i] = num::float_to_fp8(values[i], num::Fp8Kind::e4m3, num::Saturation::satfinite);
    } else {
      const uint16_t b =
          dtype == DType::bf16 ? num::float_to_bf16_bits(values[i]) : num::float_to_fp16_bits(values[i]);
      std::memcpy(p + 2 * i, &b, 2);
    }
  }
  return t;
}

std::vector<TensorData> make_fp8_block_tensors(const std::string& base, int64_t rows, int64_t cols,
                                               const std::vector<float>& master, const num::ScaleOptions& opt,
                                               const std::string& scale_suffix) {
  RLP_CHECK(static_cast<std::size_t>(rows * cols) == master.size(),
            "make_fp8_block_tensors({}): {} values for {}x{}", base, master.size(), rows, cols);
  const num::Fp8Tensor q =
      num::quantize_blocks(master.data(), static_cast<int>(rows), static_cast<int>(cols), 128, 128, opt);
  TensorData w{base + ".weight", DType::e4m3, {rows, cols}, q.codes};
  TensorData s{base + "." + scale_suffix, DType::fp32, {q.row_blocks(), q.col_blocks()}, {}};
  s.bytes.resize(4 * q.scale_inv.size());
  std::memcpy(s.bytes.data(), q.scale_inv.data(), s.bytes.size());
  return {std::move(w), std::move(s)};
}

namespace {
// x as a tensor of `d` holds it (f32 as is).
float round_to(DType d, float x) {
  return d == DType::bf16 ? num::round_bf16(x) : d == DType::fp16 ? num::round_fp16(x) : x;
}
}  // namespace

std::vector<TensorData> make_fp8_channel_tensors(const std::string& base, int64_t rows, int64_t cols,
                                                 const std::vector<float>& master, DType scale_dtype) {
  RLP_CHECK(static_cast<std::size_t>(rows * cols) == master.size(),
            "make_fp8_channel_tensors({}): {} values for {}x{}", base, master.size(), rows, cols);
  std::vector<float> scales(static_cast<std::size_t>(rows));
  std::vector<float> codes_as_values(master.size());
  for (int64_t r = 0; r < rows; ++r) {
    const float* w = master.data() + r * cols;
    float amax = 0.0f;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(w[c]));
    float s = round_to(scale_dtype, amax / num::kE4M3Max);
    if (!(s > 0.0f)) s = 1.0f;
    scales[static_cast<std::size_t>(r)] = s;
    for (int64_t c = 0; c < cols; ++c) {
      const float q = std::clamp(round_to(scale_dtype, w[c] / s), -num::kE4M3Max, num::kE4M3Max);
      codes_as_values[static_cast<std::size_t>(r * cols + c)] = q;  // make_tensor casts with RNE
    }
  }
  return {make_tensor(base + ".weight", DType::e4m3, {rows, cols}, codes_as_values),
          make_tensor(base + ".weight_scale", scale_dtype, {rows, 1}, scales)};
}

uint64_t TensorHeader::nbytes() const {
  uint64_t n = dtype_size(dtype);
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

SafetensorsWriter::SafetensorsWriter(const std::string& path, std::vector<TensorHeader> tensors,
                                     const nlohmann::json& metadata)
    : path_(path), tensors_(std::move(tensors)) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t off = 0;
  for (const auto& t : tensors_) {
    header[t.name] = {
        {"dtype", dtype_name(t.dtype)}, {"shape", t.shape}, {"data_offsets", {off, off + t.nbytes()}}};
    off += t.nbytes();
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h.push_back(' ');
  out_.open(path, std::ios::binary | std::ios::trunc);
  if (!out_) RLP_THROW_INPUT("{}: cannot create file", path);
  uint8_t len[8];
  for (int k = 0; k < 8; ++k)
    len[k] = static_cast<uint8_t>((static_cast<uint64_t>(h.size()) >> (8 * k)) & 0xFF);
  out_.write(reinterpret_cast<const char*>(len), 8);
  out_.write(h.data(), static_cast<std::streamsize>(h.size()));
}

void SafetensorsWriter::write(const TensorData& t) {
  RLP_CHECK(next_ < tensors_.size(), "{}: tensor '{}' written after the last announced one", path_, t.name);
  const TensorHeader& h = tensors_[next_++];
  RLP_CHECK(t.name == h.name && t.dtype == h.dtype && t.shape == h.shape && t.bytes.size() == h.nbytes(),
            "{}: tensor '{}' written where the header announced '{}'", path_, t.name, h.name);
  out_.write(reinterpret_cast<const char*>(t.bytes.data()), static_cast<std::streamsize>(t.bytes.size()));
}

void SafetensorsWriter::close() {
  RLP_CHECK(next_ == tensors_.size(), "{}: {} of {} announced tensors written", path_, next_,
            tensors_.size());
  out_.close();
  if (!out_) RLP_THROW_INPUT("{}: write failed", path_);
}

void write_safetensors(const std::string& path, const std::vector<TensorData>& tensors,
                       const nlohmann::json& metadata) {
  std::vector<TensorHeader> headers;
  for (const auto& t : tensors) headers.push_back({t.name, t.dtype, t.shape});
  SafetensorsWriter w(path, std::move(headers), metadata);
  for (const auto& t : tensors) w.write(t);
  w.close();
}

namespace {

struct ArchInfo {
  const char* arch_name;
  const char* model_type;
};

ArchInfo arch_info(const std::string& a) {
  if (a == "llama" || a == "llama3") return {"LlamaForCausalLM", "llama"};
  if (a == "qwen2") return {"Qwen2ForCausalLM", "qwen2"};
  if (a == "qwen3") return {"Qwen3ForCausalLM", "qwen3"};
  if (a == "mistral") return {"MistralForCausalLM", "mistral"};
  if (a == "qwen3-moe") return {"Qwen3MoeForCausalLM", "qwen3_moe"};
  if (a == "qwen2-moe") return {"Qwen2MoeForCausalLM", "qwen2_moe"};
  if (a == "mixtral") return {"MixtralForCausalLM", "mixtral"};
  RLP_THROW_INPUT(
      "unknown --arch '{}' (expected llama, llama3, qwen2, qwen3, mistral, qwen3-moe, qwen2-moe or mixtral)",
      a);
}

// The routing keys Qwen3-MoE and Qwen2-MoE configs share.
void qwen_moe_keys(const RandomCheckpointOptions& o, nlohmann::json& c) {
  c["num_experts"] = o.experts;
  c["num_experts_per_tok"] = o.top_k;
  c["moe_intermediate_size"] = o.moe_intermediate;
  c["norm_topk_prob"] = o.norm_topk;
  c["decoder_sparse_step"] = 1;
  c["mlp_only_layers"] = o.mlp_only_layers;
}

int head_dim_of(const RandomCheckpointOptions& o) { return o.head_dim > 0 ? o.head_dim : o.hidden / o.heads; }

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Deterministic normals: Box-Muller over 53-bit uniforms from mt19937_64.
class Normal {
 public:
  explicit Normal(uint64_t seed) : rng_(seed) {}
  double operator()() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = 1.0 - static_cast<double>(rng_() >> 11) * 0x1.0p-53;  // (0, 1]
    const double u2 = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double t = 2.0 * 3.14159265358979323846 * u2;
    spare_ = r * std::sin(t);
    has_spare_ = true;
    return r * std::cos(t);
  }

 private:
  std::mt19937_64 rng_;
  double spare_ = 0;
  bool has_spare_ = false;
};

}  // namespace

nlohmann::json random_checkpoint_config(const RandomCheckpointOptions& o) {
  const ArchInfo ai = arch_info(o.arch);
  // (a json object keeps its keys sorted: the order written here does not reach config.json)
  nlohmann::json c = {{"architectures", nlohmann::json::array({ai.arch_name})},
                      {"model_type", ai.model_type},
                      {"hidden_size", o.hidden},
                      {"intermediate_size", o.intermediate},
                      {"num_hidden_layers", o.layers},
                      {"num_attention_heads", o.heads},
                      {"num_key_value_heads", o.kv_heads},
                      {"vocab_size", o.vocab},
                      {"max_position_embeddings", o.max_pos},
                      {"hidden_act", "silu"},
                      {"tie_word_embeddings", o.tied},
                      {"torch_dtype", o.dtype == DType::fp32   ? "float32"
                                      : o.dtype == DType::bf16 ? "bfloat16"
                                                               : "float16"},
                      {"bos_token_id", 1},
                      {"eos_token_id", 2}};
  const bool qwen3_like = o.arch == "qwen3" || o.arch == "qwen3-moe";
  if (o.head_dim > 0 || qwen3_like) c["head_dim"] = head_dim_of(o);
  if (o.fp8_block && o.fp8_format == "compressed-tensors") {
    // As llm-compressor writes its FP8_DYNAMIC preset (per-channel weights, per-token activations)
    // or its FP8_BLOCK scheme (128x128 weight blocks, 1x128 activation groups).
    nlohmann::json weights = {{"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"dynamic", false}};
    nlohmann::json acts = {{"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"dynamic", true}};
    if (o.fp8_channel) {
      weights["strategy"] = "channel";
      weights["observer"] = "minmax";
      acts["strategy"] = "token";
    } else {
      weights["strategy"] = "block";
      weights["block_structure"] = {128, 128};
      acts["strategy"] = "group";
      acts["group_size"] = 128;
    }
    c["quantization_config"] = {{"quant_method", "compressed-tensors"},
                                {"format", "float-quantized"},
                                {"quantization_status", "compressed"},
                                {"config_groups",
                                 {{"group_0",
                                   {{"targets", {"Linear"}},
                                    {"weights", weights},
                                    {"input_activations", acts},
                                    {"output_activations", nullptr}}}}},
                                {"ignore", {"lm_head"}}};
  } else if (o.fp8_block) {
    // As Qwen3-8B-FP8's and DeepSeek-V3's config.json state it (vLLM Fp8Config.from_config reads it).
    c["quantization_config"] = {{"quant_method", "fp8"},
                                {"fmt", "e4m3"},
                                {"activation_scheme", "dynamic"},
                                {"weight_block_size", {128, 128}}};
  }
  if (o.arch == "llama") {
    c["rms_norm_eps"] = 1e-5;
    c["rope_theta"] = 10000.0;
    c["rope_scaling"] = nullptr;
    c["attention_bias"] = false;
    c["mlp_bias"] = false;
  } else if (o.arch == "llama3") {
    c["rms_norm_eps"] = 1e-5;
    c["rope_theta"] = 500000.0;
    c["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 8.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192}};
    c["attention_bias"] = false;
    c["mlp_bias"] = false;
    c["eos_token_id"] = {2, 3};
  } else if (o.arch == "qwen2" || o.arch == "qwen2-moe") {
    c["rms_norm_eps"] = 1e-6;
    c["rope_theta"] = 1000000.0;
    c["use_sliding_window"] = false;
    c["sliding_window"] = o.max_pos;
    c["max_window_layers"] = o.layers;
    if (o.arch == "qwen2-moe") {  // as Qwen1.5-MoE-A2.7B's config.json spells it
      qwen_moe_keys(o, c);
      c["shared_expert_intermediate_size"] = o.shared_intermediate;
    }
  } else if (qwen3_like) {
    c["rms_norm_eps"] = 1e-6;
    c["rope_theta"] = 1000000.0;
    c["attention_bias"] = false;
    c["use_sliding_window"] = false;
    c["sliding_window"] = nullptr;
    if (o.arch == "qwen3-moe") qwen_moe_keys(o, c);
  } else {  // mistral, mixtral
    c["rms_norm_eps"] = 1e-5;
    c["rope_theta"] = 1000000.0;
    c["sliding_window"] = nullptr;
    if (o.arch == "mixtral") {  // as Mixtral-8x7B's config.json spells it
      c["num_local_experts"] = o.experts;
      c["num_experts_per_tok"] = o.top_k;
      c["router_jitter_noise"] = 0.0;
    }
  }
  return c;
}

void write_random_checkpoint(const RandomCheckpointOptions& o) {
  const ArchInfo ai = arch_info(o.arch);
  (void)ai;
  if (o.out.empty()) RLP_THROW_INPUT("write_random_checkpoint: no output directory given");
  if (o.fp8_format != "fp8" && o.fp8_format != "compressed-tensors")
    RLP_THROW_INPUT("write_random_checkpoint: fp8 format '{}' (expected fp8 or compressed-tensors)",
                    o.fp8_format);
  if (o.fp8_channel && (!o.fp8_block || o.fp8_format != "compressed-tensors"))
    RLP_THROW_INPUT(
        "write_random_checkpoint: per-channel fp8 is a compressed-tensors layout (fp8 linears with format "
        "compressed-tensors)");
  if (o.hidden <= 0 || o.intermediate <= 0 || o.layers <= 0 || o.heads <= 0 || o.kv_heads <= 0 ||
      o.vocab <= 0 || o.max_pos <= 0 || o.head_dim < 0)
    RLP_THROW_INPUT("write_random_checkpoint: sizes must be positive");
  if (o.head_dim == 0 && o.hidden % o.heads != 0)
    RLP_THROW_INPUT("write_random_checkpoint: hidden {} is not divisible by heads {}; give --head-dim",
                    o.hidden, o.heads);
  if (o.heads % o.kv_heads != 0)
    RLP_THROW_INPUT("write_random_checkpoint: heads {} not a multiple of kv-heads {}", o.heads, o.kv_heads);
  const bool moe = o.arch == "qwen3-moe" || o.arch == "qwen2-moe" || o.arch == "mixtral";
  if (moe && (o.experts <= 0 || o.top_k <= 0 || o.top_k > o.experts || o.moe_intermediate <= 0 ||
              o.shared_intermediate <= 0))
    RLP_THROW_INPUT(
        "write_random_checkpoint: need 0 < top-k ({}) <= experts ({}), moe-intermediate > 0 ({}) and "
        "shared-intermediate > 0 ({})",
        o.top_k, o.experts, o.moe_intermediate, o.shared_intermediate);
  if (o.router_near_tie && (!moe || o.experts < 2))
    RLP_THROW_INPUT(
        "write_random_checkpoint: --router-near-tie needs a MoE arch (qwen3-moe, qwen2-moe, mixtral) with at "
        "least 2 experts");
  if (o.arch == "mixtral" && !o.mlp_only_layers.empty())
    RLP_THROW_INPUT("write_random_checkpoint: mixtral has no dense layers (mlp_only_layers is Qwen-MoE's)");
  // Tensor names and the sparse layers as the reader will see them.
  const ModelSpec spec = parse_model_spec(random_checkpoint_config(o), o.out + "/config.json");
  if (o.outlier_layer >= o.layers)
    RLP_THROW_INPUT("write_random_checkpoint: outlier layer {} >= layers {}", o.outlier_layer, o.layers);
  if (o.outlier_layer >= 0 && (o.outlier_channel < 0 || o.outlier_channel >= o.hidden))
    RLP_THROW_INPUT("write_random_checkpoint: outlier channel {} outside [0, {})", o.outlier_channel,
                    o.hidden);

  const int64_t H = o.hidden, I = o.intermediate, V = o.vocab, hd = head_dim_of(o);
  const int64_t q = o.heads * hd, kv = o.kv_heads * hd;
  const double proj_out_scale = 1.0 / std::sqrt(2.0 * o.layers);

  // Every tensor is planned (name, dtype, shape) first and generated when the writer reaches it, so
  // the files are written in the memory of one tensor. `post` edits a tensor's values as stored.
  struct Planned {
    std::vector<TensorHeader> headers;  // one, or an fp8 linear's codes and scales
    std::function<std::vector<TensorData>()> make;
  };
  std::vector<Planned> planned;
  const std::string scale_suffix = o.fp8_format == "compressed-tensors" ? "weight_scale" : "weight_scale_inv";
  auto gen = [&](const std::string& name, std::vector<int64_t> shape, double mean, double stddev,
                 int layer = -1, bool outlier_input = false,
                 std::function<void(std::vector<float>&)> post = {}) {
    // The decoder linears (q/k/v/o, MLP, experts), not routers or gates.
    const std::string w = ".weight";
    const bool weight = name.size() > w.size() && name.compare(name.size() - w.size(), w.size(), w) == 0;
    const std::string module = weight ? name.substr(0, name.size() - w.size()) : std::string();
    const bool linear = weight && name.rfind("model.layers.", 0) == 0 &&
                        is_quantizable_linear_module(module.substr(module.rfind('.') + 1));
    const bool fp8 = o.fp8_block && linear;
    Planned p;
    if (fp8) {
      p.headers.push_back({name, DType::e4m3, shape});
      if (o.fp8_channel)
        p.headers.push_back({module + "." + scale_suffix, o.dtype, {shape[0], 1}});
      else
        p.headers.push_back(
            {module + "." + scale_suffix, DType::fp32, {(shape[0] + 127) / 128, (shape[1] + 127) / 128}});
    } else {
      p.headers.push_back({name, o.dtype, shape});
    }
    p.make = [&o, name, shape, mean, stddev, layer, outlier_input, fp8, module, post, scale_suffix]() {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      Normal normal(o.seed * 0x9E3779B97F4A7C15ull ^ fnv1a(name));
      std::vector<float> v(static_cast<std::size_t>(n));
      for (auto& x : v) x = static_cast<float>(mean + stddev * normal());
      if (outlier_input && layer == o.outlier_layer) {
        const int64_t cols = shape.back();
        for (int64_t r = 0; r < n / cols; ++r) {
          float& x = v[static_cast<std::size_t>(r * cols + o.outlier_channel)];
          x = static_cast<float>(x * o.outlier_scale);
        }
      }
      // The values as `dtype` holds them (an fp8 linear's master before it is quantized).
      if (fp8 || post)
        for (auto& x : v) x = round_to(o.dtype, x);
      if (fp8 && o.fp8_channel) return make_fp8_channel_tensors(module, shape[0], shape[1], v, o.dtype);
      if (fp8) return make_fp8_block_tensors(module, shape[0], shape[1], v, o.quant, scale_suffix);
      if (post) post(v);
      return std::vector<TensorData>{make_tensor(name, o.dtype, shape, v)};
    };
    planned.push_back(std::move(p));
  };
  const double emb_std = 2.0 / std::sqrt(static_cast<double>(H));
  gen("model.embed_tokens.weight", {V, H}, 0.0, emb_std);
  for (int i = 0; i < o.layers; ++i) {
    auto L = [&](const char* s) { return layer_tensor_name(i, s); };
    const double in_std = 1.0 / std::sqrt(static_cast<double>(H));
    gen(L("input_layernorm.weight"), {H}, 1.0, 0.1);
    gen(L("self_attn.q_proj.weight"), {q, H}, 0.0, in_std, i, true);
    gen(L("self_attn.k_proj.weight"), {kv, H}, 0.0, in_std, i, true);
    gen(L("self_attn.v_proj.weight"), {kv, H}, 0.0, in_std, i, true);
    if (spec.qkv_bias) {
      gen(L("self_attn.q_proj.bias"), {q}, 0.0, 0.1);
      gen(L("self_attn.k_proj.bias"), {kv}, 0.0, 0.1);
      gen(L("self_attn.v_proj.bias"), {kv}, 0.0, 0.1);
    }
    if (spec.qk_norm) {
      gen(L("self_attn.q_norm.weight"), {hd}, 1.0, 0.1);
      gen(L("self_attn.k_norm.weight"), {hd}, 1.0, 0.1);
    }
    gen(L("self_attn.o_proj.weight"), {H, q}, 0.0, proj_out_scale / std::sqrt(static_cast<double>(q)));
    gen(L("post_attention_layernorm.weight"), {H}, 1.0, 0.1);
    if (spec.is_moe_layer(i)) {
      const int64_t E = spec.num_experts, Im = spec.moe_intermediate;
      std::function<void(std::vector<float>&)> near_tie;
      if (o.router_near_tie)
        near_tie = [H](std::vector<float>& v) {
          for (float& x : v) x = num::round_bf16(x);  // bf16-exact values: every dtype stores them as is
          for (int64_t c = 0; c < H; ++c) v[static_cast<std::size_t>(H + c)] = v[static_cast<std::size_t>(c)];
          v[static_cast<std::size_t>(H)] =
              num::bf16_bits_to_float(static_cast<uint16_t>(num::float_to_bf16_bits(std::fabs(v[0])) + 1));
          v[0] = std::fabs(v[0]);
        };
      gen(layer_tensor_name(i, spec.router_tensor_suffix() + ".weight"), {E, H}, 0.0, in_std, -1, false,
          near_tie);
      auto mlp = [&](auto&& name, int64_t I_) {
        gen(layer_tensor_name(i, name("gate_proj") + ".weight"), {I_, H}, 0.0, in_std, i, true);
        gen(layer_tensor_name(i, name("up_proj") + ".weight"), {I_, H}, 0.0, in_std, i, true);
        gen(layer_tensor_name(i, name("down_proj") + ".weight"), {H, I_}, 0.0,
            proj_out_scale / std::sqrt(static_cast<double>(I_)));
      };
      for (int e = 0; e < spec.num_experts; ++e)
        mlp([&](const char* p) { return spec.expert_tensor_suffix(e, p); }, Im);
      if (spec.shared_expert_intermediate > 0) {
        mlp([](const char* p) { return ModelSpec::shared_expert_tensor_suffix(p); },
            spec.shared_expert_intermediate);
        gen(layer_tensor_name(i, ModelSpec::shared_expert_gate_tensor_suffix() + ".weight"), {1, H}, 0.0,
            in_std);
      }
      continue;
    }
    gen(L("mlp.gate_proj.weight"), {I, H}, 0.0, in_std, i, true);
    gen(L("mlp.up_proj.weight"), {I, H}, 0.0, in_std, i, true);
    gen(L("mlp.down_proj.weight"), {H, I}, 0.0, proj_out_scale / std::sqrt(static_cast<double>(I)));
  }
  gen("model.norm.weight", {H}, 1.0, 0.1);
  if (!o.tied) gen("lm_head.weight", {V, H}, 0.0, emb_std);

  const fs::path dir(o.out);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) RLP_THROW_INPUT("{}: cannot create directory: {}", o.out, ec.message());
  {
    std::ofstream cf(dir / "config.json", std::ios::trunc);
    cf << random_checkpoint_config(o).dump(2) << "\n";
    if (!cf) RLP_THROW_INPUT("{}: cannot write config.json", o.out);
  }
  const nlohmann::json meta = {{"format", "pt"}};
  std::vector<TensorHeader> headers;
  for (const auto& p : planned) headers.insert(headers.end(), p.headers.begin(), p.headers.end());
  // The tensors in order, each generated when the writer reaches it.
  std::size_t next_planned = 0;
  std::vector<TensorData> ready;
  auto next_tensor = [&]() {
    if (ready.empty()) {
      ready = planned[next_planned].make();
      std::reverse(ready.begin(), ready.end());
      planned[next_planned++].make = nullptr;
    }
    TensorData t = std::move(ready.back());
    ready.pop_back();
    return t;
  };
  auto write_file = [&](const std::string& path, std::size_t t0, std::size_t t1) {
    SafetensorsWriter w(path,
                        {headers.begin() + static_cast<std::ptrdiff_t>(t0),
                         headers.begin() + static_cast<std::ptrdiff_t>(t1)},
                        meta);
    for (std::size_t i = t0; i < t1; ++i) w.write(next_tensor());
    w.close();
  };
  if (o.shards <= 1) {
    write_file((dir / "model.safetensors").string(), 0, headers.size());
    return;
  }
  const std::size_t N = static_cast<std::size_t>(o.shards);
  if (N > headers.size())
    RLP_THROW_INPUT("write_random_checkpoint: {} shards for only {} tensors", N, headers.size());
  nlohmann::json index;
  uint64_t total = 0;
  for (const auto& h : headers) total += h.nbytes();
  index["metadata"] = {{"total_size", total}};
  index["weight_map"] = nlohmann::json::object();
  for (std::size_t sh = 0; sh < N; ++sh) {
    const std::string fname = fmt::format("model-{:05d}-of-{:05d}.safetensors", sh + 1, N);
    const std::size_t t0 = sh * headers.size() / N, t1 = (sh + 1) * headers.size() / N;
    for (std::size_t i = t0; i < t1; ++i) index["weight_map"][headers[i].name] = fname;
    write_file((dir / fname).string(), t0, t1);
  }
  std::ofstream idx(dir / "model.safetensors.index.json", std::ios::trunc);
  idx << index.dump(2) << "\n";
  if (!idx) RLP_THROW_INPUT("{}: cannot write model.safetensors.index.json", o.out);
}

}  // namespace rlp
