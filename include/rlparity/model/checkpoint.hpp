// A Hugging Face checkpoint directory (config.json + model.safetensors, or shards listed in
// model.safetensors.index.json), memory-mapped and validated before any tensor is used: the
// weights are never copied whole, so an 8B checkpoint opens without 2x its size in RAM.
//
// Sizes are checked when a file is opened (every tensor's byte range lies inside the file) and
// re-checked (size and mtime) just before the validation pass reads the bytes and again before
// weights are prepared (check_unchanged: InputError). A file truncated or rewritten after such a
// check while a Checkpoint has it mapped is NOT supported: reading a page past a truncated end raises
// SIGBUS, which the CLI turns into a one-line error and exit status 1 (install_sigbus_handler). Do
// not modify checkpoint files while rlparity runs on them (docs/robustness.md).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rlparity/model/model_spec.hpp"
#include "rlparity/numerics/formats.hpp"

namespace rlp {

// The formats a checkpoint tensor may be stored in: a view of num::Format. e4m3 (safetensors
// F8_E4M3) only as the codes of a block-scaled fp8 linear (ModelSpec::fp8).
enum class DType : uint8_t {
  fp32 = static_cast<uint8_t>(num::Format::fp32),
  bf16 = static_cast<uint8_t>(num::Format::bf16),
  fp16 = static_cast<uint8_t>(num::Format::fp16),
  e4m3 = static_cast<uint8_t>(num::Format::e4m3),
};
constexpr num::Format format_of(DType d) { return static_cast<num::Format>(d); }
const char* dtype_name(DType d);
std::size_t dtype_size(DType d);

struct TensorView {
  std::string name;
  std::string file;  // the safetensors file that holds it
  DType dtype = DType::fp32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;  // into the mapping, valid while the Checkpoint lives
  std::size_t nbytes = 0;

  // An e4m3 tensor's block scales (its `<base>.weight_scale_inv` or `.weight_scale`, F32/BF16/F16
  // [ceil(rows/block_rows), ceil(cols/block_cols)]; per-channel: blocks of 1 x cols, [rows, 1]);
  // validated at open. Null for other dtypes.
  const TensorView* scale_inv = nullptr;
  int block_rows = 0, block_cols = 0;

  int64_t numel() const;
  // The stored values: float widens f32/bf16/f16 exactly; an e4m3 tensor gives its dequantized
  // master, code x scale_inv of its block as one fp32 multiply (transformers' Fp8Dequantize:
  // `quantized.to(float32) * scales`). to_double gives the same values for f32/bf16/f16 and, for
  // e4m3, the exact product (4 x 24 significant bits fit a double): what the float64 oracle uses.
  float at(int64_t i) const;
  void to_float(float* out) const;
  void to_float(int64_t first, int64_t count, float* out) const;  // elements [first, first + count)
  void to_double(double* out) const;
  // Elements [first, first + count) (row-major) as to_double gives them: the float64 oracle widens
  // one weight row at a time from the mapping, never the whole tensor.
  void to_double(int64_t first, int64_t count, double* out) const;
  // Drops the whole pages of this tensor's bytes that the process holds resident (RSS): preparing an
  // fp8 form reads every bf16 weight once; without this, an 8B checkpoint's mapped pages and its fp8
  // form would be resident together. Reads fault the pages back; nothing changes but RSS.
  void release_resident_pages() const;
  // The float32 scale_inv of the block holding element (r, c) of an e4m3 tensor.
  float block_scale_inv(int64_t r, int64_t c) const;
};

// madvise(MADV_DONTNEED) on the whole pages inside [p, p + n) of a read-only file mapping.
void release_pages(const void* p, std::size_t n);

// XXH64 (the published xxHash 64-bit algorithm) of n bytes: the building block of content_hash().
uint64_t xxh64(const void* data, std::size_t n, uint64_t seed = 0);

struct CheckpointOptions {
  bool allow_nonfinite = false;  // NaN/inf in weights are an error unless this is set
};

class Checkpoint {
 public:
  // Opens, maps and validates everything; throws InputError naming the file, tensor and problem.
  static Checkpoint open(const std::string& dir, const CheckpointOptions& options = {});

  const std::string& dir() const;
  const ModelSpec& spec() const;
  bool has(const std::string& name) const;
  const TensorView& tensor(const std::string& name) const;  // InputError if absent
  const std::map<std::string, TensorView>& tensors() const;
  // 64-bit content hash (16 hex digits) of config.json and every tensor's name, dtype, shape and
  // bytes; deterministic and independent of the thread count (see src/model/checkpoint.cpp).
  const std::string& content_hash() const;
  // True when open verified every used tensor finite (no --allow-nonfinite): consumers need not scan
  // for NaN again.
  bool values_checked_finite() const;
  // Tensors present in the files that the architecture does not use (listed, never silently ignored).
  const std::vector<std::string>& unused_tensors() const;
  // InputError if any file's size or mtime changed since open (called before tensor bytes are read).
  void check_unchanged() const;
  // Drops every mapped page the process holds (TensorView::release_resident_pages for all files):
  // between the phases of a replay that read different weight forms.
  void release_resident_pages() const;

  Checkpoint(Checkpoint&&) noexcept;
  Checkpoint& operator=(Checkpoint&&) noexcept;
  ~Checkpoint();

 private:
  struct Impl;
  explicit Checkpoint(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace rlp
