// config.json -> ModelSpec. Strict: every supported option is read, every unsupported option that
// would change the math is refused by name, and every error names the file and the key.
#include "rlparity/model/model_spec.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <regex>

#include "rlparity/util/error.hpp"

namespace rlp {
namespace {

using json = nlohmann::json;

const char* type_name(const json& v) { return v.type_name(); }

bool present(const json& c, const char* key) { return c.contains(key) && !c.at(key).is_null(); }

// An integer value (a float with an integral value is accepted too: some exporters write 64.0).
int64_t as_int(const json& v, const std::string& src, const std::string& key) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned()) {
      const auto u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        RLP_THROW_INPUT("{}: key '{}': value {} is out of range", src, key, u);
      return static_cast<int64_t>(u);
    }
    return v.get<int64_t>();
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return static_cast<int64_t>(d);
    RLP_THROW_INPUT("{}: key '{}': expected an integer, got {}", src, key, v.dump());
  }
  RLP_THROW_INPUT("{}: key '{}': expected an integer, got {} {}", src, key, type_name(v), v.dump());
}

int get_positive_int(const json& c, const std::string& src, const char* key) {
  if (!present(c, key)) RLP_THROW_INPUT("{}: required key '{}' is missing", src, key);
  const int64_t v = as_int(c.at(key), src, key);
  if (v <= 0 || v > std::numeric_limits<int>::max())
    RLP_THROW_INPUT("{}: key '{}' must be a positive integer (at most {}), got {}", src, key,
                    std::numeric_limits<int>::max(), v);
  return static_cast<int>(v);
}

double get_double(const json& v, const std::string& src, const std::string& key) {
  if (!v.is_number())
    RLP_THROW_INPUT("{}: key '{}': expected a number, got {} {}", src, key, type_name(v), v.dump());
  const double d = v.get<double>();
  if (!std::isfinite(d)) RLP_THROW_INPUT("{}: key '{}': value is not finite", src, key);
  return d;
}

double get_positive_double(const json& c, const std::string& src, const char* key, double dflt) {
  if (!present(c, key)) return dflt;
  const double d = get_double(c.at(key), src, key);
  if (!(d > 0)) RLP_THROW_INPUT("{}: key '{}' must be positive, got {}", src, key, d);
  return d;
}

bool get_bool(const json& c, const std::string& src, const char* key, bool dflt) {
  if (!present(c, key)) return dflt;
  const json& v = c.at(key);
  if (!v.is_boolean()) RLP_THROW_INPUT("{}: key '{}': expected true or false, got {}", src, key, v.dump());
  return v.get<bool>();
}

}  // namespace

// bos/eos: an int, a list of ints (Llama 3 lists several stop ids), null or absent (empty).
std::vector<int> parse_token_ids(const json& c, const std::string& src, const char* key) {
  std::vector<int> ids;
  if (!present(c, key)) return ids;
  const json& v = c.at(key);
  auto one = [&](const json& x, const std::string& where) {
    const int64_t t = as_int(x, src, where);
    if (t < 0 || t > std::numeric_limits<int>::max())
      RLP_THROW_INPUT("{}: key '{}': token id {} out of range", src, where, t);
    ids.push_back(static_cast<int>(t));
  };
  if (v.is_array())
    for (std::size_t i = 0; i < v.size(); ++i) one(v.at(i), fmt::format("{}[{}]", key, i));
  else
    one(v, key);
  return ids;
}

namespace {

int first_token(const std::vector<int>& ids) { return ids.empty() ? -1 : ids.front(); }

const char* expected_model_type(Arch a) {
  switch (a) {
    case Arch::llama: return "llama";
    case Arch::qwen2: return "qwen2";
    case Arch::qwen3: return "qwen3";
    case Arch::mistral: return "mistral";
    case Arch::qwen3_moe: return "qwen3_moe";
    case Arch::qwen2_moe: return "qwen2_moe";
    case Arch::mixtral: return "mixtral";
  }
  return "";
}

void parse_rope(const json& c, const std::string& src, ModelSpec& s) {
  // Newer transformers versions keep RoPE settings (theta included) in `rope_parameters`.
  const char* key = present(c, "rope_scaling")
                        ? "rope_scaling"
                        : (present(c, "rope_parameters") ? "rope_parameters" : nullptr);
  if (present(c, "rope_theta")) {
    s.rope_theta = get_positive_double(c, src, "rope_theta", 10000.0);
  } else if (key && std::string(key) == "rope_parameters" && present(c.at(key), "rope_theta")) {
    s.rope_theta = get_positive_double(c.at(key), src + " (rope_parameters)", "rope_theta", 10000.0);
  }
  if (!key) return;
  const json& r = c.at(key);
  if (!r.is_object()) RLP_THROW_INPUT("{}: key '{}': expected an object or null, got {}", src, key, r.dump());
  std::string type;
  for (const char* tk : {"rope_type", "type"}) {
    if (present(r, tk)) {
      if (!r.at(tk).is_string()) RLP_THROW_INPUT("{}: key '{}.{}': expected a string", src, key, tk);
      type = r.at(tk).get<std::string>();
      break;
    }
  }
  if (type.empty()) RLP_THROW_INPUT("{}: key '{}': no 'rope_type' (or 'type') given", src, key);
  if (type == "default") return;
  if (type != "llama3")
    RLP_THROW_INPUT("{}: key '{}': RoPE scaling type '{}' is not supported (supported: llama3, default)", src,
                    key, type);
  const std::string k = key;
  auto need = [&](const char* f) -> const json& {
    if (!present(r, f)) RLP_THROW_INPUT("{}: key '{}.{}' is required for rope_type llama3", src, k, f);
    return r.at(f);
  };
  RopeScaling& rs = s.rope_scaling;
  rs.type = RopeScaling::Type::llama3;
  rs.factor = get_double(need("factor"), src, k + ".factor");
  rs.low_freq_factor = get_double(need("low_freq_factor"), src, k + ".low_freq_factor");
  rs.high_freq_factor = get_double(need("high_freq_factor"), src, k + ".high_freq_factor");
  const int64_t omp =
      as_int(need("original_max_position_embeddings"), src, k + ".original_max_position_embeddings");
  if (rs.factor <= 0) RLP_THROW_INPUT("{}: key '{}.factor' must be positive, got {}", src, k, rs.factor);
  if (rs.low_freq_factor <= 0) RLP_THROW_INPUT("{}: key '{}.low_freq_factor' must be positive", src, k);
  if (!(rs.high_freq_factor > rs.low_freq_factor))
    RLP_THROW_INPUT("{}: key '{}.high_freq_factor' ({}) must be greater than low_freq_factor ({})", src, k,
                    rs.high_freq_factor, rs.low_freq_factor);
  if (omp <= 0 || omp > std::numeric_limits<int>::max())
    RLP_THROW_INPUT("{}: key '{}.original_max_position_embeddings' must be a positive integer", src, k);
  rs.original_max_position_embeddings = static_cast<int>(omp);
}

// compressed-tensors' "re:" ignore patterns, as libstdc++'s polynomial-time (breadth-first) matcher
// runs them: a hostile config.json can neither recurse the compiler deep (length bound) nor make the
// match backtrack exponentially; back-references, which it cannot run, are refused.
constexpr std::size_t kMaxIgnorePattern = 256;
std::regex ignore_regex(const std::string& pattern) {
  return std::regex(pattern, std::regex::ECMAScript | std::regex_constants::__polynomial);
}

// quantization_config of a compressed-tensors (llm-compressor) checkpoint: only the block-scaled
// fp8 scheme vLLM runs through W8A8BlockFp8LinearOp (CompressedTensorsW8A8Fp8 with strategy block;
// vllm/model_executor/layers/quantization/compressed_tensors/schemes/compressed_tensors_w8a8_fp8.py).
// Also the per-channel scheme (llm-compressor's FP8_DYNAMIC preset: weights strategy channel, dynamic
// per-token activations), which vLLM runs through Fp8LinearOp (cutlass_scaled_mm). Every config
// group must use the same one; per-tensor fp8 is refused by name.
Fp8CheckpointQuant parse_compressed_tensors_config(const json& q, const std::string& src) {
  const std::string k = "quantization_config";
  Fp8CheckpointQuant f;
  f.enabled = true;
  f.method = "compressed-tensors";
  f.scale_suffix = "weight_scale";
  if (!present(q, "config_groups") || !q.at("config_groups").is_object() || q.at("config_groups").empty())
    RLP_THROW_INPUT(
        "{}: key '{}.config_groups' is missing or empty: a compressed-tensors checkpoint states its "
        "quantization schemes there",
        src, k);
  int n_block = 0, n_channel = 0;
  for (const auto& [name, g] : q.at("config_groups").items()) {
    const std::string gk = k + ".config_groups." + name;
    if (!g.is_object() || !present(g, "weights") || !g.at("weights").is_object())
      RLP_THROW_INPUT("{}: key '{}.weights' is missing: only weight-quantized groups are supported", src, gk);
    const json& w = g.at("weights");
    auto field = [&](const json& o, const char* key) {
      return present(o, key) ? o.at(key).dump() : std::string("null");
    };
    const bool fp8_weights =
        field(w, "num_bits") == "8" && field(w, "type") == "\"float\"" && field(w, "dynamic") != "true";
    const bool block =
        fp8_weights && field(w, "strategy") == "\"block\"" && field(w, "block_structure") == "[128,128]";
    const bool channel = fp8_weights && field(w, "strategy") == "\"channel\"";
    if (!block && !channel)
      RLP_THROW_INPUT(
          "{}: key '{}.weights' is {}: only fp8 weights (num_bits 8, type float, static) with strategy block "
          "(block_structure [128, 128]) or channel are supported; per-tensor fp8 (strategy tensor) is not "
          "(vLLM requantizes fused shards to their largest scale, which rlparity does not emulate)",
          src, gk, w.dump());
    const json* a = present(g, "input_activations") && g.at("input_activations").is_object()
                        ? &g.at("input_activations")
                        : nullptr;
    // Block weights run vLLM's W8A8BlockFp8LinearOp (dynamic 1x128 groups); channel weights its
    // Fp8LinearOp with dynamic per-token activations (the FP8_DYNAMIC preset's strategy token).
    const bool acts_ok = a != nullptr && field(*a, "dynamic") == "true" &&
                         (block || (field(*a, "strategy") == "\"token\"" &&
                                    field(*a, "type") == "\"float\"" && field(*a, "num_bits") == "8"));
    if (!acts_ok)
      RLP_THROW_INPUT(
          "{}: key '{}.input_activations' is {}: only dynamic activation quantization is supported ({})", src,
          gk, a != nullptr ? a->dump() : std::string("missing"),
          block ? "as vLLM's block fp8 runs it"
                : "fp8 per token, {num_bits 8, type float, strategy token, dynamic true}, as the FP8_DYNAMIC "
                  "preset writes it");
    (block ? n_block : n_channel)++;
  }
  if (n_block > 0 && n_channel > 0)
    RLP_THROW_INPUT(
        "{}: key '{}.config_groups' mixes block and channel fp8 groups; rlparity supports one scheme per "
        "checkpoint",
        src, k);
  if (n_channel > 0) {
    // weight_scale [out, 1]: one scale per output channel (vLLM's ChannelQuantScaleParameter).
    f.per_channel = true;
    f.block_rows = 1;
    f.block_cols = 0;
  }
  if (present(q, "ignore")) {
    const json& l = q.at("ignore");
    if (!l.is_array())
      RLP_THROW_INPUT("{}: key '{}.ignore': expected a list of names, got {}", src, k, l.dump());
    for (std::size_t i = 0; i < l.size(); ++i) {
      if (!l[i].is_string())
        RLP_THROW_INPUT("{}: key '{}.ignore[{}]': expected a string, got {}", src, k, i, l[i].dump());
      const std::string e = l[i].get<std::string>();
      if (e.rfind("re:", 0) == 0) {
        try {
          if (e.size() > kMaxIgnorePattern) throw std::regex_error(std::regex_constants::error_complexity);
          (void)ignore_regex(e.substr(3));
        } catch (const std::regex_error&) {
          RLP_THROW_INPUT(
              "{}: key '{}.ignore[{}]' is '{}': not a valid regular expression of at most {} characters "
              "without "
              "back-references",
              src, k, i, e, kMaxIgnorePattern);
        }
      }
      f.not_converted.push_back(e);
    }
  }
  return f;
}

// quantization_config of a block-scaled FP8 checkpoint. What vLLM's Fp8Config accepts for
// block-wise checkpoints (vllm/model_executor/layers/quantization/fp8.py, Fp8Config.__init__ and
// from_config): quant_method "fp8", activation_scheme "dynamic", a 2-element weight_block_size,
// ignored_layers; transformers' FineGrainedFP8Config adds fmt and modules_to_not_convert.
Fp8CheckpointQuant parse_quantization_config(const json& q, const std::string& src) {
  const std::string k = "quantization_config";
  if (!q.is_object()) RLP_THROW_INPUT("{}: key '{}': expected an object, got {}", src, k, q.dump());
  auto str = [&](const char* f) -> std::string {
    if (!present(q, f)) return {};
    if (!q.at(f).is_string())
      RLP_THROW_INPUT("{}: key '{}.{}': expected a string, got {}", src, k, f, q.at(f).dump());
    return q.at(f).get<std::string>();
  };
  const std::string method = str("quant_method");
  if (method == "compressed-tensors") return parse_compressed_tensors_config(q, src);
  if (method != "fp8")
    RLP_THROW_INPUT(
        "{}: key '{}.quant_method' is '{}': only block-scaled fp8 checkpoints (quant_method \"fp8\" with "
        "weight_block_size [128, 128], or \"compressed-tensors\" with block_structure [128, 128]) are "
        "supported",
        src, k, method.empty() ? "(missing)" : method);
  Fp8CheckpointQuant f;
  f.enabled = true;
  const std::string fmt_name = str("fmt");
  if (!fmt_name.empty() && fmt_name != "e4m3")
    RLP_THROW_INPUT("{}: key '{}.fmt' is '{}': only e4m3 is supported", src, k, fmt_name);
  const std::string act = str("activation_scheme");
  if (!act.empty() && act != "dynamic")
    RLP_THROW_INPUT(
        "{}: key '{}.activation_scheme' is '{}': only dynamic activation scales are supported (as in vLLM's "
        "block-wise fp8)",
        src, k, act);
  if (!present(q, "weight_block_size"))
    RLP_THROW_INPUT(
        "{}: key '{}.weight_block_size' is missing: per-tensor fp8 checkpoints are not supported (only "
        "128x128 block scales)",
        src, k);
  const json& b = q.at("weight_block_size");
  if (!b.is_array() || b.size() != 2)
    RLP_THROW_INPUT("{}: key '{}.weight_block_size' must be a list of 2 integers, got {}", src, k, b.dump());
  f.block_rows =
      static_cast<int>(std::clamp<int64_t>(as_int(b[0], src, k + ".weight_block_size[0]"), -1, 1 << 30));
  f.block_cols =
      static_cast<int>(std::clamp<int64_t>(as_int(b[1], src, k + ".weight_block_size[1]"), -1, 1 << 30));
  if (f.block_rows != 128 || f.block_cols != 128)
    RLP_THROW_INPUT("{}: key '{}.weight_block_size' is {}: only [128, 128] is supported", src, k, b.dump());
  for (const char* list : {"modules_to_not_convert", "ignored_layers"}) {
    if (!present(q, list)) continue;
    const json& l = q.at(list);
    if (!l.is_array())
      RLP_THROW_INPUT("{}: key '{}.{}': expected a list of names, got {}", src, k, list, l.dump());
    for (std::size_t i = 0; i < l.size(); ++i) {
      if (!l[i].is_string())
        RLP_THROW_INPUT("{}: key '{}.{}[{}]': expected a string, got {}", src, k, list, i, l[i].dump());
      f.not_converted.push_back(l[i].get<std::string>());
    }
  }
  return f;
}

// Every expert's tensors are named and checked at open: an absurd count (a damaged config) is
// refused before anything loops over it. Published MoE models have at most a few hundred.
void check_expert_count(const ModelSpec& s, const std::string& src, const char* key) {
  constexpr int kMaxExperts = 1 << 16;
  if (s.num_experts > kMaxExperts)
    RLP_THROW_INPUT("{}: key '{}' is {}; at most {} experts are supported", src, key, s.num_experts,
                    kMaxExperts);
}

// Qwen3-MoE's and Qwen2-MoE's routing keys. The shapes (num_experts, num_experts_per_tok,
// moe_intermediate_size, and Qwen2-MoE's shared_expert_intermediate_size) are required: every
// published config states them, and a default would silently change the math. The rest take the
// config classes' defaults (transformers models/qwen3_moe/configuration_qwen3_moe.py and
// models/qwen2_moe/configuration_qwen2_moe.py: decoder_sparse_step 1, norm_topk_prob False,
// mlp_only_layers None -> []; older Qwen2MoeConfig has no mlp_only_layers, and vLLM's qwen2_moe.py
// reads a missing one as []).
void parse_moe(const json& c, const std::string& src, ModelSpec& s) {
  // Newer Qwen3MoeConfig classes map num_experts to num_local_experts (attribute_map), so a config
  // they save may hold either name; both must then agree.
  const bool local = present(c, "num_local_experts");
  s.num_experts =
      get_positive_int(c, src, local && !present(c, "num_experts") ? "num_local_experts" : "num_experts");
  if (local && get_positive_int(c, src, "num_local_experts") != s.num_experts)
    RLP_THROW_INPUT("{}: keys 'num_experts' ({}) and 'num_local_experts' ({}) disagree", src, s.num_experts,
                    get_positive_int(c, src, "num_local_experts"));
  check_expert_count(s, src, "num_experts");
  s.experts_per_tok = get_positive_int(c, src, "num_experts_per_tok");
  s.moe_intermediate = get_positive_int(c, src, "moe_intermediate_size");
  if (s.experts_per_tok > s.num_experts)
    RLP_THROW_INPUT("{}: key 'num_experts_per_tok' ({}) exceeds 'num_experts' ({})", src, s.experts_per_tok,
                    s.num_experts);
  s.norm_topk_prob = get_bool(c, src, "norm_topk_prob", false);
  s.decoder_sparse_step =
      present(c, "decoder_sparse_step") ? get_positive_int(c, src, "decoder_sparse_step") : 1;
  if (present(c, "mlp_only_layers")) {
    const json& m = c.at("mlp_only_layers");
    if (!m.is_array()) RLP_THROW_INPUT("{}: key 'mlp_only_layers': expected a list of layer indices", src);
    for (std::size_t i = 0; i < m.size(); ++i) {
      const std::string key = fmt::format("mlp_only_layers[{}]", i);
      const int64_t l = as_int(m.at(i), src, key);
      if (l < 0 || l >= s.layers)
        RLP_THROW_INPUT("{}: key '{}' is {}, outside the model's layers [0, {})", src, key, l, s.layers);
      s.mlp_only_layers.push_back(static_cast<int>(l));
    }
  }
  if (s.arch == Arch::qwen2_moe) {
    s.shared_expert_intermediate = get_positive_int(c, src, "shared_expert_intermediate_size");
  } else if (present(c, "shared_expert_intermediate_size")) {
    RLP_THROW_INPUT(
        "{}: key 'shared_expert_intermediate_size' is not part of Qwen3MoeForCausalLM (Qwen3-MoE has no "
        "shared expert; Qwen2MoeForCausalLM does)",
        src);
  }
}

// Mixtral's routing (transformers models/mixtral/configuration_mixtral.py and modeling_mixtral.py
// MixtralSparseMoeBlock): num_local_experts experts of intermediate_size in every layer, top
// num_experts_per_tok, always renormalised (`routing_weights /= routing_weights.sum(...)`, no flag).
// router_jitter_noise multiplies the router input by random noise in training-mode forwards: a
// trainer that sets it runs a random router, which no replay can reproduce.
void parse_mixtral(const json& c, const std::string& src, ModelSpec& s) {
  s.num_experts = get_positive_int(c, src, "num_local_experts");
  check_expert_count(s, src, "num_local_experts");
  s.experts_per_tok = get_positive_int(c, src, "num_experts_per_tok");
  if (s.experts_per_tok > s.num_experts)
    RLP_THROW_INPUT("{}: key 'num_experts_per_tok' ({}) exceeds 'num_local_experts' ({})", src,
                    s.experts_per_tok, s.num_experts);
  s.moe_intermediate = s.intermediate;
  s.norm_topk_prob = true;
  if (present(c, "router_jitter_noise") && !c.at("router_jitter_noise").is_null()) {
    const json& j = c.at("router_jitter_noise");
    if (!j.is_number() || j.get<double>() != 0.0)
      RLP_THROW_INPUT(
          "{}: key 'router_jitter_noise' is {}: random router noise in training forwards is not modelled "
          "(set it to 0)",
          src, j.dump());
  }
}

}  // namespace

bool Fp8CheckpointQuant::is_not_converted(const std::string& module) const {
  std::string starred;
  for (std::size_t i = 0; i < module.size();) {
    if (module[i] >= '0' && module[i] <= '9') {
      starred.push_back('*');
      while (i < module.size() && module[i] >= '0' && module[i] <= '9') ++i;
    } else {
      starred.push_back(module[i++]);
    }
  }
  for (const auto& e : not_converted) {
    if (method == "compressed-tensors") {
      if (e == module) return true;
      if (e.rfind("re:", 0) == 0) {
        try {
          if (std::regex_search(module, ignore_regex(e.substr(3)), std::regex_constants::match_continuous))
            return true;
        } catch (const std::regex_error&) {
          RLP_THROW_INPUT("quantization_config.ignore entry '{}': not a valid regular expression", e);
        }
      }
      continue;
    }
    if (!e.empty() && (module.find(e) != std::string::npos || starred.find(e) != std::string::npos))
      return true;
  }
  return false;
}

bool ModelSpec::is_moe_layer(int layer) const {
  // Qwen3MoeDecoderLayer.__init__ (transformers models/qwen3_moe/modeling_qwen3_moe.py; the same in
  // Qwen2MoeDecoderLayer): sparse when `layer_idx not in mlp_only_layers and num_experts > 0 and
  // (layer_idx + 1) % decoder_sparse_step == 0`. Mixtral: step 1, no dense layers.
  if (num_experts <= 0) return false;
  for (int l : mlp_only_layers)
    if (l == layer) return false;
  return (layer + 1) % decoder_sparse_step == 0;
}

int ModelSpec::moe_layer_count() const {
  int n = 0;
  for (int l = 0; l < layers; ++l) n += is_moe_layer(l) ? 1 : 0;
  return n;
}

ModelSpec parse_model_spec(const nlohmann::json& c, const std::string& src) {
  if (!c.is_object()) RLP_THROW_INPUT("{}: expected a JSON object at the top level", src);
  ModelSpec s;

  // Architecture.
  if (!present(c, "architectures")) RLP_THROW_INPUT("{}: required key 'architectures' is missing", src);
  const json& archs = c.at("architectures");
  if (!archs.is_array() || archs.size() != 1 || !archs.at(0).is_string())
    RLP_THROW_INPUT("{}: key 'architectures' must be a list of exactly one name, got {}", src, archs.dump());
  s.arch_name = archs.at(0).get<std::string>();
  if (s.arch_name == "LlamaForCausalLM")
    s.arch = Arch::llama;
  else if (s.arch_name == "Qwen2ForCausalLM")
    s.arch = Arch::qwen2;
  else if (s.arch_name == "Qwen3ForCausalLM")
    s.arch = Arch::qwen3;
  else if (s.arch_name == "MistralForCausalLM")
    s.arch = Arch::mistral;
  else if (s.arch_name == "Qwen3MoeForCausalLM")
    s.arch = Arch::qwen3_moe;
  else if (s.arch_name == "Qwen2MoeForCausalLM")
    s.arch = Arch::qwen2_moe;
  else if (s.arch_name == "MixtralForCausalLM")
    s.arch = Arch::mixtral;
  else
    RLP_THROW_INPUT(
        "{}: key 'architectures': '{}' is not supported (supported: LlamaForCausalLM, "
        "Qwen2ForCausalLM, Qwen3ForCausalLM, MistralForCausalLM, Qwen3MoeForCausalLM, "
        "Qwen2MoeForCausalLM, MixtralForCausalLM)",
        src, s.arch_name);
  if (present(c, "model_type")) {
    const json& mt = c.at("model_type");
    if (!mt.is_string() || mt.get<std::string>() != expected_model_type(s.arch))
      RLP_THROW_INPUT("{}: key 'model_type' is {} but architectures says {} (model_type '{}')", src,
                      mt.dump(), s.arch_name, expected_model_type(s.arch));
  }
  if (present(c, "quantization_config")) s.fp8 = parse_quantization_config(c.at("quantization_config"), src);

  // Shapes.
  s.hidden = get_positive_int(c, src, "hidden_size");
  s.intermediate = get_positive_int(c, src, "intermediate_size");
  s.layers = get_positive_int(c, src, "num_hidden_layers");
  s.heads = get_positive_int(c, src, "num_attention_heads");
  s.kv_heads = present(c, "num_key_value_heads") ? get_positive_int(c, src, "num_key_value_heads") : s.heads;
  s.vocab = get_positive_int(c, src, "vocab_size");
  s.max_positions = get_positive_int(c, src, "max_position_embeddings");
  if (present(c, "head_dim")) {
    s.head_dim = get_positive_int(c, src, "head_dim");
  } else if (s.arch == Arch::qwen3 || s.arch == Arch::qwen3_moe) {
    RLP_THROW_INPUT("{}: required key 'head_dim' is missing (Qwen3 configs state it explicitly)", src);
  } else {
    if (s.hidden % s.heads != 0)
      RLP_THROW_INPUT(
          "{}: key 'hidden_size' ({}) is not divisible by 'num_attention_heads' ({}) and no 'head_dim' is "
          "given",
          src, s.hidden, s.heads);
    s.head_dim = s.hidden / s.heads;
  }
  if (s.heads % s.kv_heads != 0)
    RLP_THROW_INPUT("{}: key 'num_attention_heads' ({}) is not a multiple of 'num_key_value_heads' ({})", src,
                    s.heads, s.kv_heads);
  if (static_cast<int64_t>(s.heads) * s.head_dim > std::numeric_limits<int>::max())
    RLP_THROW_INPUT("{}: key 'num_attention_heads' x 'head_dim' overflows", src);
  if (s.head_dim % 2 != 0)
    RLP_THROW_INPUT("{}: key 'head_dim': RoPE needs an even head dimension, got {}", src, s.head_dim);

  // Norms, activation, RoPE.
  s.rms_eps = get_positive_double(c, src, "rms_norm_eps", 1e-6);
  const std::string act = present(c, "hidden_act")
                              ? (c.at("hidden_act").is_string() ? c.at("hidden_act").get<std::string>()
                                                                : c.at("hidden_act").dump())
                              : "silu";
  if (act != "silu")
    RLP_THROW_INPUT("{}: key 'hidden_act': activation '{}' is not supported (only silu)", src, act);
  parse_rope(c, src, s);

  // Biases.
  if (get_bool(c, src, "mlp_bias", false))
    RLP_THROW_INPUT("{}: key 'mlp_bias': MLP biases are not supported", src);
  if (get_bool(c, src, "attention_bias", false)) {
    RLP_THROW_INPUT(
        "{}: key 'attention_bias': attention projection biases are not supported for {} "
        "(only Qwen2's built-in q/k/v biases are)",
        src, s.arch_name);
  }
  // Qwen2-MoE's q/k/v biases: built in (older Qwen2MoeAttention) or `qkv_bias`, default True
  // (newer Qwen2MoeConfig).
  s.qkv_bias = s.arch == Arch::qwen2 || (s.arch == Arch::qwen2_moe && get_bool(c, src, "qkv_bias", true));
  s.qk_norm = s.arch == Arch::qwen3 || s.arch == Arch::qwen3_moe;
  if (s.arch == Arch::qwen3_moe || s.arch == Arch::qwen2_moe) parse_moe(c, src, s);
  if (s.arch == Arch::mixtral) parse_mixtral(c, src, s);

  // Sliding-window attention.
  if (s.arch == Arch::qwen2 || s.arch == Arch::qwen3 || s.arch == Arch::qwen3_moe ||
      s.arch == Arch::qwen2_moe) {
    if (get_bool(c, src, "use_sliding_window", false))
      RLP_THROW_INPUT("{}: key 'use_sliding_window' is true: sliding-window attention is not supported", src);
  } else if (s.arch == Arch::mistral || s.arch == Arch::mixtral) {
    if (present(c, "sliding_window"))
      RLP_THROW_INPUT(
          "{}: key 'sliding_window' is {}: sliding-window attention is not supported "
          "(set it to null for full attention)",
          src, c.at("sliding_window").dump());
  }
  if (present(c, "layer_types")) {
    const json& lt = c.at("layer_types");
    if (!lt.is_array()) RLP_THROW_INPUT("{}: key 'layer_types': expected a list", src);
    for (std::size_t i = 0; i < lt.size(); ++i) {
      if (!lt[i].is_string() || lt[i].get<std::string>() != "full_attention")
        RLP_THROW_INPUT(
            "{}: key 'layer_types[{}]' is {}: only full_attention is supported "
            "(sliding-window attention is not)",
            src, i, lt[i].dump());
    }
  }

  // Absent: false, the default of every supported config class (transformers LlamaConfig,
  // Qwen2Config, Qwen3Config: `tie_word_embeddings: bool = False`; MistralConfig.__init__:
  // `tie_word_embeddings=False`; models/<arch>/configuration_<arch>.py).
  s.tied_embeddings = get_bool(c, src, "tie_word_embeddings", false);
  s.bos_token = first_token(parse_token_ids(c, src, "bos_token_id"));
  s.stop_tokens = parse_token_ids(c, src, "eos_token_id");
  s.eos_token = first_token(s.stop_tokens);
  return s;
}

nlohmann::json ModelSpec::to_json() const {
  json rope = nullptr;
  if (rope_scaling.type == RopeScaling::Type::llama3)
    rope = {{"type", "llama3"},
            {"factor", rope_scaling.factor},
            {"low_freq_factor", rope_scaling.low_freq_factor},
            {"high_freq_factor", rope_scaling.high_freq_factor},
            {"original_max_position_embeddings", rope_scaling.original_max_position_embeddings}};
  // (a json object keeps its keys sorted: the order written here does not reach the output)
  json j = {{"arch", arch_name},      {"hidden", hidden},         {"intermediate", intermediate},
            {"layers", layers},       {"heads", heads},           {"kv_heads", kv_heads},
            {"head_dim", head_dim},   {"vocab", vocab},           {"max_positions", max_positions},
            {"rms_eps", rms_eps},     {"rope_theta", rope_theta}, {"rope_scaling", rope},
            {"qkv_bias", qkv_bias},   {"qk_norm", qk_norm},       {"tied_embeddings", tied_embeddings},
            {"bos_token", bos_token}, {"eos_token", eos_token},   {"stop_tokens", stop_tokens}};
  // Recorded only for fp8 checkpoints: other run files keep their model_spec as it was.
  if (fp8.enabled)
    j["quantization"] = {
        {"method", fp8.method},
        {"weight_block_size", fp8.per_channel ? json("per-channel") : json({fp8.block_rows, fp8.block_cols})},
        {"not_converted", fp8.not_converted}};
  if (num_experts > 0)  // dense models' spec reads as before
    j["moe"] = {{"num_experts", num_experts},
                {"experts_per_tok", experts_per_tok},
                {"moe_intermediate", moe_intermediate},
                {"norm_topk_prob", norm_topk_prob},
                {"decoder_sparse_step", decoder_sparse_step},
                {"mlp_only_layers", mlp_only_layers}};
  if (shared_expert_intermediate > 0) j["moe"]["shared_expert_intermediate"] = shared_expert_intermediate;
  return j;
}

std::string ModelSpec::router_tensor_suffix() const {
  return arch == Arch::mixtral ? "block_sparse_moe.gate" : "mlp.gate";
}

std::string ModelSpec::expert_tensor_suffix(int expert, const char* proj) const {
  if (arch != Arch::mixtral) return fmt::format("mlp.experts.{}.{}", expert, proj);
  // MixtralBlockSparseTop2MLP: w2(act_fn(w1(x)) * w3(x)): w1 the gate, w3 the up, w2 the down projection.
  const std::string p = proj;
  const char* w = p == "gate_proj" ? "w1" : p == "up_proj" ? "w3" : "w2";
  return fmt::format("block_sparse_moe.experts.{}.{}", expert, w);
}

std::string ModelSpec::shared_expert_tensor_suffix(const char* proj) {
  return std::string("mlp.shared_expert.") + proj;
}

std::string ModelSpec::shared_expert_gate_tensor_suffix() { return "mlp.shared_expert_gate"; }

std::vector<LinearTensor> ModelSpec::feed_forward_linears(int layer) const {
  std::vector<LinearTensor> r;
  auto mlp = [&](auto&& suffix, int64_t I) {
    r.push_back({layer_tensor_name(layer, suffix("gate_proj")), I, hidden});
    r.push_back({layer_tensor_name(layer, suffix("up_proj")), I, hidden});
    r.push_back({layer_tensor_name(layer, suffix("down_proj")), hidden, I});
  };
  if (!is_moe_layer(layer)) {
    mlp([](const char* p) { return std::string("mlp.") + p; }, intermediate);
    return r;
  }
  for (int e = 0; e < num_experts; ++e)
    mlp([&](const char* p) { return expert_tensor_suffix(e, p); }, moe_intermediate);
  if (shared_expert_intermediate > 0)
    mlp(&ModelSpec::shared_expert_tensor_suffix, shared_expert_intermediate);
  return r;
}

bool is_quantizable_linear_module(const std::string& module) {
  const std::string p = "_proj";
  return (module.size() > p.size() && module.compare(module.size() - p.size(), p.size(), p) == 0) ||
         module == "w1" || module == "w2" || module == "w3";
}

std::string layer_tensor_name(int layer, const std::string& suffix) {
  return "model.layers." + std::to_string(layer) + "." + suffix;
}

}  // namespace rlp
