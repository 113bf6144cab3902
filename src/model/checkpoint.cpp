// Checkpoint::open: config.json -> ModelSpec, safetensors files mapped and validated, the
// architecture's tensors checked by name and shape, then one pass over the bytes that checks
// finiteness and computes the content hash.
//
// Content hash (deterministic, independent of the thread count): XXH64 (seed 0, the published
// algorithm) is applied to each 1 MiB unit of a tensor's bytes; a tensor's hash is XXH64 of the
// little-endian array of its unit hashes; the checkpoint hash is XXH64 of a record made of
// config.json's bytes followed, for each tensor in name order, by its name, dtype name, shape and
// tensor hash. Printed as 16 lowercase hex digits.
#include "rlparity/model/checkpoint.hpp"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <type_traits>

#include "model/safetensors.hpp"
#include "rlparity/numerics/formats.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/json_depth.hpp"
#include "rlparity/util/parallel.hpp"

namespace rlp {
namespace fs = std::filesystem;

// ---- dtype and TensorView ----------------------------------------------------------------------
const char* dtype_name(DType d) {
  switch (d) {
    case DType::fp32: return "F32";
    case DType::bf16: return "BF16";
    case DType::fp16: return "F16";
    case DType::e4m3: return "F8_E4M3";
  }
  return "?";
}

std::size_t dtype_size(DType d) {
  switch (d) {
    case DType::fp32: return 4;
    case DType::bf16:
    case DType::fp16: return 2;
    case DType::e4m3: return 1;
  }
  return 1;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {
inline uint16_t load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline uint32_t load32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
}  // namespace

void release_pages(const void* p, std::size_t n) {
  static const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto b = reinterpret_cast<uintptr_t>(p);
  const uintptr_t first = (b + page - 1) / page * page, last = (b + n) / page * page;
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);  // advisory
}

void TensorView::release_resident_pages() const {
  release_pages(data, nbytes);
  if (scale_inv) scale_inv->release_resident_pages();
}

float TensorView::block_scale_inv(int64_t r, int64_t c) const {
  const int64_t scale_cols = scale_inv->shape[1];
  return scale_inv->at((r / block_rows) * scale_cols + c / block_cols);  // f32, or bf16/f16 widened exactly
}

namespace {
float e4m3_code(uint8_t c) { return num::fp8_to_float(c, num::Fp8Kind::e4m3); }
}  // namespace

float TensorView::at(int64_t i) const {
  const auto k = static_cast<std::size_t>(i);
  switch (dtype) {
    case DType::fp32: return num::bits_f32(load32(data + 4 * k));
    case DType::bf16: return num::bf16_bits_to_float(load16(data + 2 * k));
    case DType::fp16: return num::fp16_bits_to_float(load16(data + 2 * k));
    case DType::e4m3: {
      const int64_t cols = shape[1];
      return e4m3_code(data[k]) * block_scale_inv(i / cols, i % cols);
    }
  }
  return 0.0f;
}

namespace {
// Elements [first, first + count) of `t` as T: f32/bf16/f16 widened exactly; an e4m3 code times its
// block's scale_inv multiplied in T (fp32: transformers' Fp8Dequantize; double: the exact product).
// One loop per dtype: the oracle GEMM and fp8 preparation widen every weight through here.
template <class T>
void widen_range(const TensorView& t, int64_t first, int64_t count, T* out) {
  const uint8_t* p = t.data + static_cast<std::size_t>(first) * dtype_size(t.dtype);
  const auto n = static_cast<std::size_t>(count);
  switch (t.dtype) {
    case DType::fp32:
      for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<T>(num::bits_f32(load32(p + 4 * i)));
      return;
    case DType::bf16:
    case DType::fp16: {
      const num::Half16 fmt = t.dtype == DType::bf16 ? num::Half16::bf16 : num::Half16::fp16;
      if constexpr (std::is_same_v<T, float>) {
        // The vectorized widening (same bits) where the bytes are 2-aligned, as tensor data is
        // unless a file's header length is odd.
        if (reinterpret_cast<std::uintptr_t>(p) % alignof(uint16_t) == 0) {
          const auto* h = reinterpret_cast<const uint16_t*>(p);
          for (std::size_t i = 0; i < n; i += 1u << 30)
            num::widen_half16(h + i, static_cast<int>(std::min<std::size_t>(n - i, 1u << 30)), fmt, out + i);
          return;
        }
      }
      for (std::size_t i = 0; i < n; ++i)
        out[i] = static_cast<T>(num::half16_bits_to_float(load16(p + 2 * i), fmt));
      return;
    }
    case DType::e4m3: {
      const int64_t cols = t.shape[1];
      for (int64_t i = first; i < first + count; ++i)
        out[i - first] = static_cast<T>(e4m3_code(t.data[static_cast<std::size_t>(i)])) *
                         static_cast<T>(t.block_scale_inv(i / cols, i % cols));
      return;
    }
  }
}
}  // namespace

void TensorView::to_float(float* out) const { to_float(0, numel(), out); }
void TensorView::to_float(int64_t first, int64_t count, float* out) const {
  widen_range(*this, first, count, out);
}
void TensorView::to_double(double* out) const { to_double(0, numel(), out); }
void TensorView::to_double(int64_t first, int64_t count, double* out) const {
  widen_range(*this, first, count, out);
}

// ---- XXH64 -------------------------------------------------------------------------------------
namespace {
constexpr uint64_t P1 = 0x9E3779B185EBCA87ull, P2 = 0xC2B2AE3D27D4EB4Full, P3 = 0x165667B19E3779F9ull,
                   P4 = 0x85EBCA77C2B2AE63ull, P5 = 0x27D4EB2F165667C5ull;
inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t xround(uint64_t acc, uint64_t in) { return rotl(acc + in * P2, 31) * P1; }
inline uint64_t xmerge(uint64_t acc, uint64_t v) { return (acc ^ xround(0, v)) * P1 + P4; }

uint64_t xxh64_impl(const uint8_t* p, std::size_t len, uint64_t seed) {
  const uint8_t* const end = p + len;
  uint64_t h;
  if (len >= 32) {
    uint64_t v1 = seed + P1 + P2, v2 = seed + P2, v3 = seed, v4 = seed - P1;
    const uint8_t* const limit = end - 32;
    do {
      v1 = xround(v1, load64(p));
      v2 = xround(v2, load64(p + 8));
      v3 = xround(v3, load64(p + 16));
      v4 = xround(v4, load64(p + 24));
      p += 32;
    } while (p <= limit);
    h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
    h = xmerge(h, v1);
    h = xmerge(h, v2);
    h = xmerge(h, v3);
    h = xmerge(h, v4);
  } else {
    h = seed + P5;
  }
  h += static_cast<uint64_t>(len);
  while (p + 8 <= end) {
    h ^= xround(0, load64(p));
    h = rotl(h, 27) * P1 + P4;
    p += 8;
  }
  if (p + 4 <= end) {
    h ^= static_cast<uint64_t>(load32(p)) * P1;
    h = rotl(h, 23) * P2 + P3;
    p += 4;
  }
  while (p < end) {
    h ^= static_cast<uint64_t>(*p) * P5;
    h = rotl(h, 11) * P1;
    ++p;
  }
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  h ^= h >> 32;
  return h;
}

}  // namespace

uint64_t xxh64(const void* data, std::size_t n, uint64_t seed) {
  return xxh64_impl(static_cast<const uint8_t*>(data), n, seed);
}

namespace {
bool is_nonfinite(const uint8_t* p, DType d) {
  switch (d) {
    case DType::fp32: return (load32(p) & 0x7F800000u) == 0x7F800000u;
    case DType::bf16: return (load16(p) & 0x7F80u) == 0x7F80u;
    case DType::fp16: return (load16(p) & 0x7C00u) == 0x7C00u;
    case DType::e4m3: return (*p & 0x7Fu) == 0x7Fu;  // e4m3fn: no inf, NaN = S.1111.111
  }
  return false;
}

// Index of the first non-finite element in [p, p + n elements), or -1. A branch-free SWAR scan
// over 64-bit words first: in each lane, (bits & exp_mask) + exp_lsb carries into the lane's top
// bit exactly when every exponent bit is set (inf or NaN), without crossing lanes. The exact index
// is searched only if something was found.
int64_t first_nonfinite(const uint8_t* p, std::size_t n, DType d) {
  if (d == DType::e4m3) {
    for (std::size_t i = 0; i < n; ++i)
      if (is_nonfinite(p + i, d)) return static_cast<int64_t>(i);
    return -1;
  }
  uint64_t mask, add, top;
  if (d == DType::fp32) {
    mask = 0x7F8000007F800000ull, add = 0x0080000000800000ull, top = 0x8000000080000000ull;
  } else if (d == DType::bf16) {
    mask = 0x7F807F807F807F80ull, add = 0x0080008000800080ull, top = 0x8000800080008000ull;
  } else {
    mask = 0x7C007C007C007C00ull, add = 0x0400040004000400ull, top = 0x8000800080008000ull;
  }
  const std::size_t es = dtype_size(d);
  const std::size_t nbytes = n * es, words = nbytes / 8;
  uint64_t acc = 0;
  for (std::size_t i = 0; i < words; ++i) acc |= ((load64(p + 8 * i) & mask) + add) & top;
  bool bad = acc != 0;
  for (std::size_t b = words * 8; b < nbytes; b += es) bad = bad || is_nonfinite(p + b, d);
  if (!bad) return -1;
  for (std::size_t i = 0; i < n; ++i)
    if (is_nonfinite(p + i * es, d)) return static_cast<int64_t>(i);
  return -1;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string r = "[";
  for (std::size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

std::string read_text_file(const fs::path& p, uint64_t cap, const char* what) {
  std::error_code ec;
  if (!fs::exists(p, ec)) RLP_THROW_INPUT("{}: {} not found", p.string(), what);
  if (!fs::is_regular_file(p, ec)) RLP_THROW_INPUT("{}: {} is not a regular file", p.string(), what);
  const auto size = fs::file_size(p, ec);
  if (ec) RLP_THROW_INPUT("{}: cannot read size: {}", p.string(), ec.message());
  if (size > cap)
    RLP_THROW_INPUT("{}: {} is {} bytes, over the {} MiB limit", p.string(), what, size, cap >> 20);
  std::ifstream in(p, std::ios::binary);
  if (!in) RLP_THROW_INPUT("{}: cannot open {}", p.string(), what);
  std::string s(size, '\0');
  in.read(s.data(), static_cast<std::streamsize>(size));
  if (static_cast<uint64_t>(in.gcount()) != size) RLP_THROW_INPUT("{}: short read", p.string());
  return s;
}

nlohmann::json parse_json_file(const std::string& text, const fs::path& p) {
  check_json_depth(text, p.string());
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for numbers like 1e400
    RLP_THROW_INPUT("{}: invalid JSON: {}", p.string(), e.what());
  }
}

struct Required {
  std::string name;
  std::vector<int64_t> shape;
};

std::vector<Required> required_tensors(const ModelSpec& s) {
  const int64_t H = s.hidden, V = s.vocab, hd = s.head_dim;
  const int64_t q = static_cast<int64_t>(s.heads) * hd, kv = static_cast<int64_t>(s.kv_heads) * hd;
  std::vector<Required> r;
  r.push_back({"model.embed_tokens.weight", {V, H}});
  for (int i = 0; i < s.layers; ++i) {
    auto L = [&](const char* suffix) { return layer_tensor_name(i, suffix); };
    r.push_back({L("input_layernorm.weight"), {H}});
    r.push_back({L("self_attn.q_proj.weight"), {q, H}});
    r.push_back({L("self_attn.k_proj.weight"), {kv, H}});
    r.push_back({L("self_attn.v_proj.weight"), {kv, H}});
    if (s.qkv_bias) {
      r.push_back({L("self_attn.q_proj.bias"), {q}});
      r.push_back({L("self_attn.k_proj.bias"), {kv}});
      r.push_back({L("self_attn.v_proj.bias"), {kv}});
    }
    if (s.qk_norm) {
      r.push_back({L("self_attn.q_norm.weight"), {hd}});
      r.push_back({L("self_attn.k_norm.weight"), {hd}});
    }
    r.push_back({L("self_attn.o_proj.weight"), {H, q}});
    r.push_back({L("post_attention_layernorm.weight"), {H}});
    if (s.is_moe_layer(i)) {
      // The router [experts x hidden] (and Qwen2-MoE's shared-expert gate [1 x hidden]), then the
      // experts' linears.
      r.push_back({layer_tensor_name(i, s.router_tensor_suffix() + ".weight"), {s.num_experts, H}});
      if (s.shared_expert_intermediate > 0)
        r.push_back(
            {layer_tensor_name(i, ModelSpec::shared_expert_gate_tensor_suffix() + ".weight"), {1, H}});
    }
    for (const LinearTensor& f : s.feed_forward_linears(i)) r.push_back({f.name + ".weight", {f.out, f.in}});
  }
  r.push_back({"model.norm.weight", {H}});
  if (!s.tied_embeddings) r.push_back({"lm_head.weight", {V, H}});
  return r;
}

constexpr uint64_t kHashUnit = 1ull << 20;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

// ---- Checkpoint --------------------------------------------------------------------------------
struct Checkpoint::Impl {
  std::string dir;
  ModelSpec spec;
  std::vector<std::unique_ptr<detail::SafetensorsFile>> files;
  std::map<std::string, TensorView> tensors;
  std::string hash;
  std::vector<std::string> unused;
  bool checked_finite = false;
  // Names served by another stored tensor: a tied checkpoint that stores the shared matrix only as
  // lm_head.weight serves model.embed_tokens.weight from it.
  std::map<std::string, std::string> aliases;
  const TensorView* find(const std::string& name) const {
    auto a = aliases.find(name);
    auto it = tensors.find(a == aliases.end() ? name : a->second);
    return it == tensors.end() ? nullptr : &it->second;
  }
};

namespace {
// The block-scaled fp8 layout (ModelSpec::fp8): every F8_E4M3 tensor is a decoder linear's weight
// with a float32 `<base>.weight_scale_inv` of shape [ceil(out/128), ceil(in/128)] (vLLM's
// Fp8LinearMethod.create_weights registers exactly that BlockQuantScaleParameter; the name
// "weight_scale_inv" is DeepSeek-V3's), whose entries are finite and positive. Links each weight to
// its scales and marks the scales as used.
void validate_fp8_tensors(const ModelSpec& spec, std::map<std::string, TensorView>& tensors,
                          const std::string& config_path, std::set<std::string>& required_names) {
  std::set<std::string> linears;
  for (int l = 0; l < spec.layers; ++l) {
    for (const char* p : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"})
      linears.insert(layer_tensor_name(l, p));
    for (const LinearTensor& f : spec.feed_forward_linears(l)) linears.insert(f.name);
  }
  for (auto& [name, v] : tensors) {
    if (v.dtype != DType::e4m3) continue;
    if (!spec.fp8.enabled)
      RLP_THROW_INPUT(
          "{}: tensor '{}' is F8_E4M3 but {} has no quantization_config (a block-scaled fp8 checkpoint "
          "states "
          "quant_method \"fp8\" and weight_block_size)",
          v.file, name, config_path);
    const std::string suffix = ".weight";
    const std::string base =
        name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0
            ? name.substr(0, name.size() - suffix.size())
            : std::string();
    if (!linears.count(base))
      RLP_THROW_INPUT(
          "{}: tensor '{}' is F8_E4M3, but only the decoder linears' weights (q/k/v/o/gate/up/down_proj, "
          "experts included) are quantized in this layout; norms, embeddings, routers and lm_head stay "
          "unquantized",
          v.file, name);
    if (spec.fp8.is_not_converted(base))
      RLP_THROW_INPUT(
          "{}: tensor '{}' is F8_E4M3 but {} lists '{}' as not converted (modules_to_not_convert / "
          "ignored_layers / ignore)",
          v.file, name, config_path, base);
    if (v.shape.size() != 2)
      RLP_THROW_INPUT("{}: tensor '{}' is F8_E4M3 with shape {}; a quantized linear weight is 2-D", v.file,
                      name, shape_str(v.shape));
    const std::string sname = base + "." + spec.fp8.scale_suffix;
    auto it = tensors.find(sname);
    if (it == tensors.end())
      RLP_THROW_INPUT("{}: tensor '{}' is F8_E4M3 but its block scales '{}' are missing", v.file, name,
                      sname);
    const TensorView& sc = it->second;
    // F32 as vLLM's scale parameters hold them; compressed-tensors stores scales in the model's
    // dtype (initialize_qparams: scale_dtype = the observed weight's), which vLLM widens exactly.
    if (sc.dtype != DType::fp32 && sc.dtype != DType::bf16 && sc.dtype != DType::fp16)
      RLP_THROW_INPUT("{}: tensor '{}' is {}; weight scales must be F32, BF16 or F16", sc.file, sname,
                      dtype_name(sc.dtype));
    // Per-channel: one block per row, [out, 1] scales.
    const int64_t br = spec.fp8.block_rows, bc = spec.fp8.per_channel ? v.shape[1] : spec.fp8.block_cols;
    const std::vector<int64_t> want = {ceil_div(v.shape[0], br), ceil_div(v.shape[1], bc)};
    if (sc.shape != want)
      RLP_THROW_INPUT(
          "{}: tensor '{}' has shape {} but '{}' {} in {}x{} blocks needs {} ([ceil(out/{}), ceil(in/{})])",
          sc.file, sname, shape_str(sc.shape), name, shape_str(v.shape), br, bc, shape_str(want), br, bc);
    for (int64_t b = 0; b < want[0] * want[1]; ++b) {
      const float s = sc.at(b);
      if (!(s > 0.0f) || !std::isfinite(s))
        RLP_THROW_INPUT(
            "{}: tensor '{}' has scale_inv {} at block [{}, {}]; block scales must be finite and positive",
            sc.file, sname, s, b / want[1], b % want[1]);
    }
    v.scale_inv = &sc;
    v.block_rows = static_cast<int>(br);
    v.block_cols = static_cast<int>(bc);
    required_names.insert(sname);
  }
}
}  // namespace

Checkpoint::Checkpoint(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Checkpoint::Checkpoint(Checkpoint&&) noexcept = default;
Checkpoint& Checkpoint::operator=(Checkpoint&&) noexcept = default;
Checkpoint::~Checkpoint() = default;

const std::string& Checkpoint::dir() const { return impl_->dir; }
const ModelSpec& Checkpoint::spec() const { return impl_->spec; }
bool Checkpoint::values_checked_finite() const { return impl_->checked_finite; }
bool Checkpoint::has(const std::string& name) const { return impl_->find(name) != nullptr; }
const TensorView& Checkpoint::tensor(const std::string& name) const {
  const TensorView* t = impl_->find(name);
  if (!t) RLP_THROW_INPUT("{}: checkpoint has no tensor '{}'", impl_->dir, name);
  return *t;
}
const std::map<std::string, TensorView>& Checkpoint::tensors() const { return impl_->tensors; }
const std::string& Checkpoint::content_hash() const { return impl_->hash; }
const std::vector<std::string>& Checkpoint::unused_tensors() const { return impl_->unused; }
void Checkpoint::check_unchanged() const {
  for (const auto& f : impl_->files) f->check_unchanged();
}

void Checkpoint::release_resident_pages() const {
  for (const auto& f : impl_->files) f->release_resident_pages();
}

Checkpoint Checkpoint::open(const std::string& dir_in, const CheckpointOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->dir = dir_in;
  const fs::path dir(dir_in);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) RLP_THROW_INPUT("{}: checkpoint directory not found", dir_in);

  // config.json
  const fs::path config_path = dir / "config.json";
  const std::string config_text = read_text_file(config_path, 16ull << 20, "config.json");
  impl->spec = parse_model_spec(parse_json_file(config_text, config_path), config_path.string());
  // generation_config.json's eos_token_id (an int or a list) also ends sampling, as in transformers'
  // generate() and vLLM; its bytes join the content hash.
  const fs::path gen_config_path = dir / "generation_config.json";
  std::string gen_config_text;
  if (fs::exists(gen_config_path, ec)) {
    gen_config_text = read_text_file(gen_config_path, 16ull << 20, "generation_config.json");
    for (int t : parse_token_ids(parse_json_file(gen_config_text, gen_config_path), gen_config_path.string(),
                                 "eos_token_id")) {
      std::vector<int>& stop = impl->spec.stop_tokens;
      if (std::find(stop.begin(), stop.end(), t) == stop.end()) stop.push_back(t);
    }
  }
  const ModelSpec& spec = impl->spec;

  // Weight files.
  const fs::path single = dir / "model.safetensors";
  const fs::path index_path = dir / "model.safetensors.index.json";
  const bool has_single = fs::exists(single, ec), has_index = fs::exists(index_path, ec);
  // Where each tensor is expected (for error messages): the index's shard or the single file.
  std::map<std::string, std::string> expected_file;
  if (has_single && has_index)
    RLP_THROW_INPUT(
        "{}: both model.safetensors and model.safetensors.index.json are present; remove one "
        "(it is ambiguous which holds the weights)",
        dir_in);
  if (!has_single && !has_index)
    RLP_THROW_INPUT("{}: no weights: neither model.safetensors nor model.safetensors.index.json exists",
                    dir_in);

  if (has_single) {
    impl->files.push_back(std::make_unique<detail::SafetensorsFile>(single.string()));
  } else {
    const std::string ip = index_path.string();
    const nlohmann::json index =
        parse_json_file(read_text_file(index_path, 64ull << 20, "index"), index_path);
    if (!index.is_object() || !index.contains("weight_map") || !index.at("weight_map").is_object())
      RLP_THROW_INPUT("{}: key 'weight_map' is missing or not an object", ip);
    std::map<std::string, std::size_t> shard_of_name;  // shard file -> index in files
    for (const auto& [tname, fv] : index.at("weight_map").items()) {
      if (!fv.is_string())
        RLP_THROW_INPUT("{}: weight_map entry for tensor '{}' is not a file name", ip, tname);
      const std::string shard = fv.get<std::string>();
      if (shard.empty() || shard.find('/') != std::string::npos || shard.find('\\') != std::string::npos ||
          shard == "." || shard == "..")
        RLP_THROW_INPUT(
            "{}: weight_map entry for tensor '{}': shard '{}' must be a plain file name in the checkpoint "
            "directory",
            ip, tname, shard);
      expected_file[tname] = (dir / shard).string();
      shard_of_name.emplace(shard, 0);
    }
    if (shard_of_name.empty()) RLP_THROW_INPUT("{}: weight_map is empty", ip);
    for (auto& [shard, idx] : shard_of_name) {
      const fs::path sp = dir / shard;
      if (!fs::exists(sp, ec))
        RLP_THROW_INPUT("{}: shard file '{}' listed in the index does not exist", sp.string(), shard);
      idx = impl->files.size();
      impl->files.push_back(std::make_unique<detail::SafetensorsFile>(sp.string()));
    }
  }

  // Gather tensors: no duplicates across shards, and each in the shard the index names.
  {
    std::map<std::string, std::string> holder;
    for (const auto& f : impl->files) {
      for (const auto& e : f->entries()) {
        auto [it, fresh] = holder.emplace(e.name, f->path());
        if (!fresh)
          RLP_THROW_INPUT("{}: tensor '{}' is also in {} (duplicate across shards)", f->path(), e.name,
                          it->second);
      }
    }
  }
  for (const auto& f : impl->files) {
    for (const auto& e : f->entries()) {
      if (has_index) {
        auto it = expected_file.find(e.name);
        if (it == expected_file.end())
          RLP_THROW_INPUT(
              "{}: tensor '{}' is in this shard but not listed in model.safetensors.index.json's weight_map",
              f->path(), e.name);
        if (it->second != f->path())
          RLP_THROW_INPUT("{}: tensor '{}' is in this shard but the index maps it to {}", f->path(), e.name,
                          it->second);
      }
      TensorView v;
      v.name = e.name;
      v.file = f->path();
      v.dtype = e.dtype;
      v.shape = e.shape;
      v.data = f->data_buffer() + e.begin;
      v.nbytes = static_cast<std::size_t>(e.end - e.begin);
      impl->tensors.emplace(e.name, std::move(v));
    }
  }
  for (const auto& [tname, file] : expected_file) {
    if (!impl->tensors.count(tname))
      RLP_THROW_INPUT("{}: tensor '{}' is listed in model.safetensors.index.json but missing from that shard",
                      file, tname);
  }

  // Tied embeddings: transformers ties lm_head to the input embedding on load (PreTrainedModel
  // tie_weights), so the shared matrix may be stored under either name, or under both when equal.
  std::set<std::string> required_names;
  if (spec.tied_embeddings) {
    const std::string embed = "model.embed_tokens.weight", head = "lm_head.weight";
    auto e = impl->tensors.find(embed), h = impl->tensors.find(head);
    if (e == impl->tensors.end() && h != impl->tensors.end()) {
      impl->aliases[embed] = head;
      required_names.insert(head);
    } else if (e != impl->tensors.end() && h != impl->tensors.end()) {
      const TensorView &a = e->second, &b = h->second;
      if (a.shape == b.shape) {
        if (a.dtype != b.dtype || std::memcmp(a.data, b.data, a.nbytes) != 0)
          RLP_THROW_INPUT(
              "{}: the embeddings are tied (tie_word_embeddings) but '{}' ({}) and '{}' ({}) hold different "
              "values (or dtypes); set tie_word_embeddings to false, or store one of them",
              config_path.string(), embed, a.file, head, b.file);
        required_names.insert(head);
      }
      // (a different shape or dtype is reported below, by name)
    }
  }

  validate_fp8_tensors(spec, impl->tensors, config_path.string(), required_names);
  impl->checked_finite = !options.allow_nonfinite;  // the hashing pass below checks every used tensor

  // The architecture's tensors, by name and shape.
  const std::vector<Required> req = required_tensors(spec);
  for (const auto& r : req) {
    required_names.insert(r.name);
    const TensorView* t = impl->find(r.name);
    if (!t) {
      auto ef = expected_file.find(r.name);
      const std::string where = has_single ? single.string()
                                : ef != expected_file.end()
                                    ? ef->second
                                    : index_path.string() + " (weight_map has no entry)";
      RLP_THROW_INPUT("{}: tensor '{}' is missing (required by {} with this config, shape {})", where, r.name,
                      spec.arch_name, shape_str(r.shape));
    }
    if (t->shape != r.shape)
      RLP_THROW_INPUT("{}: tensor '{}' has shape {} but the config implies {}", t->file, r.name,
                      shape_str(t->shape), shape_str(r.shape));
  }
  if (spec.tied_embeddings) {
    auto it = impl->tensors.find("lm_head.weight");
    const std::vector<int64_t> vh = {spec.vocab, spec.hidden};
    if (it != impl->tensors.end() && it->second.shape != vh)
      RLP_THROW_INPUT(
          "{}: tensor 'lm_head.weight' has shape {} but the embeddings are tied ({}) and it should be {}",
          it->second.file, shape_str(it->second.shape), shape_str(vh), shape_str(vh));
  }
  for (const auto& [tname, v] : impl->tensors) {
    (void)v;
    if (!required_names.count(tname)) impl->unused.push_back(tname);
  }

  // One pass over the bytes: finiteness (required tensors) and the content hash (all tensors).
  for (const auto& f : impl->files) f->check_unchanged();
  struct Unit {
    const TensorView* t;
    uint64_t offset, len;
    bool check;
  };
  std::vector<Unit> units;
  std::vector<std::size_t> first_unit;  // per tensor (name order), index into units
  std::vector<const TensorView*> order;
  for (const auto& [tname, v] : impl->tensors) {
    order.push_back(&v);
    first_unit.push_back(units.size());
    const bool check = required_names.count(tname) != 0 && !options.allow_nonfinite;
    for (uint64_t o = 0; o < v.nbytes; o += kHashUnit)
      units.push_back({&v, o, std::min<uint64_t>(kHashUnit, v.nbytes - o), check});
  }
  first_unit.push_back(units.size());
  std::vector<uint64_t> unit_hash(units.size());
  std::vector<int64_t> unit_bad(units.size(), -1);
  parallel_for(units.size(), 1, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) {
      const Unit& u = units[i];
      const uint8_t* p = u.t->data + u.offset;
      if (u.check) {
        const std::size_t es = dtype_size(u.t->dtype);
        const int64_t k = first_nonfinite(p, u.len / es, u.t->dtype);
        if (k >= 0) unit_bad[i] = static_cast<int64_t>(u.offset / es) + k;
      }
      unit_hash[i] = xxh64_impl(p, u.len, 0);
    }
  });
  std::string record = config_text + gen_config_text;
  auto put64 = [&](uint64_t x) {
    for (int k = 0; k < 8; ++k) record.push_back(static_cast<char>((x >> (8 * k)) & 0xFF));
  };
  for (std::size_t t = 0; t < order.size(); ++t) {
    const TensorView& v = *order[t];
    for (std::size_t i = first_unit[t]; i < first_unit[t + 1]; ++i) {
      if (unit_bad[i] >= 0) {
        const float x = v.at(unit_bad[i]);
        RLP_THROW_INPUT(
            "{}: tensor '{}' has a non-finite value ({}) at flat index {} (pass --allow-nonfinite to accept)",
            v.file, v.name, x, unit_bad[i]);
      }
    }
    std::string uh;
    for (std::size_t i = first_unit[t]; i < first_unit[t + 1]; ++i)
      for (int k = 0; k < 8; ++k) uh.push_back(static_cast<char>((unit_hash[i] >> (8 * k)) & 0xFF));
    put64(v.name.size());
    record += v.name;
    record += dtype_name(v.dtype);
    put64(v.shape.size());
    for (int64_t d : v.shape) put64(static_cast<uint64_t>(d));
    put64(xxh64_impl(reinterpret_cast<const uint8_t*>(uh.data()), uh.size(), 0));
  }
  impl->hash =
      fmt::format("{:016x}", xxh64_impl(reinterpret_cast<const uint8_t*>(record.data()), record.size(), 0));
  return Checkpoint(std::move(impl));
}

}  // namespace rlp
