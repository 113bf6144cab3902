// `rlparity inspect`: per-tensor FP8 quantization diagnostics of a checkpoint (DESIGN section 7):
// for every weight an fp8 recipe quantizes (decoder q/k/v/o/gate/up/down, 128x128 blocks), the
// block amax spread, and for each scale convention (te, vllm, deepgemm, nemo-refit) with fp32 and
// power-of-2 scales: quantization SNR, relative Frobenius error, saturated / clipped / flushed
// element counts, and the fraction of blocks whose fp8 codes differ from TransformerEngine's.
// Every number is defined in docs/inspect.md.
//
// The weights are read from the checkpoint mapping once: each 128x128 block is converted to fp32
// in a per-thread buffer, its amax and Σx² taken once, and every convention x scale mode runs on it
// while it is in cache (conventions whose scale makes them quantize the block identically, compared
// bit for bit per block, share one run). Parallel over block rows; results do not depend on the
// thread count, and are bit-identical to one pass per convention (docs/inspect.md).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rlparity/model/checkpoint.hpp"
#include "rlparity/numerics/scaling.hpp"

namespace rlp {

// One convention x scale mode over one tensor.
struct QuantStats {
  num::ScaleConvention convention = num::ScaleConvention::te;
  bool pow2 = false;
  double sum_sq_x = 0.0;      // sum of x^2 (float64, block-row order)
  double sum_sq_err = 0.0;    // sum of (x - dequant(x))^2, the difference taken in float64
  double snr_db = 0.0;        // 10 log10(sum_sq_x / sum_sq_err); +inf when the error is 0
  double rel_fro_err = 0.0;   // sqrt(sum_sq_err / sum_sq_x); 0 when both are 0
  int64_t saturated = 0;      // |v| > 448, v = the scaled value before clamp/cast (see below)
  int64_t clipped = 0;        // |v| > 464: the clamp lost more than rounding would (v rounds past 448)
  int64_t flushed = 0;        // x != 0 but the fp8 code is +-0
  int64_t nonfinite = 0;      // x is NaN or inf (excluded from the sums and counts above)
  int64_t blocks_differ = 0;  // blocks whose codes differ from te's with the same scale mode
  double blocks_differ_frac = 0.0;
};
// v is computed exactly as the convention's kernel computes it: fl(x * scale) for te, deepgemm and
// nemo-refit, fl(x / scale_inv) for vllm.

// Name used in tables and HDF5 attribute names: "te", "vllm", "deepgemm", "nemo-refit".
const char* convention_name(num::ScaleConvention c);
// The four conventions in report order (te first: the others are compared against it).
const std::vector<num::ScaleConvention>& inspect_conventions();

struct TensorInspection {
  std::string name;
  int layer = -1;     // decoder layer index, from "model.layers.<i>."
  std::string proj;   // "q_proj", ..., "down_proj"
  std::string dtype;  // checkpoint dtype
  int64_t rows = 0, cols = 0;
  int64_t blocks = 0;                                        // 128x128 blocks (edge blocks partial)
  double amax_min = 0.0, amax_median = 0.0, amax_max = 0.0;  // over blocks; median = nearest rank
  std::vector<QuantStats> stats;  // inspect_conventions() x {fp32, pow2}: index 2*c + pow2
  double worst_snr_db() const;    // min over stats
  const QuantStats& find(num::ScaleConvention c, bool pow2) const;
};

struct LayerSummary {
  int layer = 0;
  double worst_snr_db = 0.0;  // min over the layer's tensors and all conventions
  std::string worst_tensor;
  double max_amax_spread = 0.0;  // max over the layer's tensors of amax_max / amax_median
  bool flagged = false;          // recommended for bf16 (see InspectOptions)
};

struct InspectOptions {
  int block = 128;
  // A layer is flagged when its worst SNR is more than this many dB below the median layer's.
  double flag_margin_db = 3.0;
  // ... or when one of its tensors has amax_max / amax_median above this: an outlier sets some
  // blocks' scales and flushes their small values, which the energy-weighted SNR hides.
  double flag_amax_spread = 16.0;
};

struct InspectResult {
  std::string checkpoint_path, checkpoint_hash;
  nlohmann::json model_spec;
  std::vector<TensorInspection> tensors;  // sorted by worst SNR, worst first (ties: by name)
  std::vector<LayerSummary> layers;       // sorted by worst SNR, worst first
  // The flagged layers, and the smallest --bf16-first-layers / --bf16-last-layers that cover them
  // (-1 when a flagged layer is interior and neither flag can reach it without keeping more).
  std::vector<int> flagged_layers;
  int bf16_first_layers = 0, bf16_last_layers = 0;
  std::string recommendation;  // one line, as printed
  int64_t bytes_per_pass = 0;  // checkpoint bytes of the inspected tensors (read once; every
                               // convention's pass over a block runs on its cached fp32 copy)
};

// Statistics of one row-major matrix whose elements are `dtype` at `data` (little-endian), for the
// given conventions in order; pow2 false and true each. When `conventions` starts with te, the
// others' blocks_differ are counted against it (otherwise blocks_differ stays 0). Also returns the
// block amax distribution through the out-parameters when non-null.
std::vector<QuantStats> inspect_matrix(const uint8_t* data, DType dtype, int64_t rows, int64_t cols,
                                       int block, const std::vector<num::ScaleConvention>& conventions,
                                       double* amax_min = nullptr, double* amax_median = nullptr,
                                       double* amax_max = nullptr);
// The per-element step of inspect_matrix's vectorized kernel, exposed for tests: the fp8 e4m3 codes
// of x[0..n) (n a multiple of 16) in convention c with block scale s, and the dequantized values
// decode(code) * s.scale_inv. Bit-identical to num::quantize_with and num::fp8_to_float. Each group
// of 16 goes through the kernel's fast-path formula when it qualifies (finite x and scale, every
// |v| <= 464), through the general one otherwise, so both are checked.
void inspect_quantize(const float* x, std::size_t n, num::ScaleConvention c, const num::BlockScale& s,
                      uint8_t* codes, float* deq);
// Convenience for fp32 data.
std::vector<QuantStats> inspect_matrix(const float* x, int64_t rows, int64_t cols, int block,
                                       const std::vector<num::ScaleConvention>& conventions);

// Is `name` a weight that fp8 recipes quantize? Sets layer and proj when it is.
bool is_fp8_weight(const std::string& name, int* layer, std::string* proj);

InspectResult inspect_checkpoint(const Checkpoint& ckpt, const InspectOptions& options = {});

// The terminal table (sorted by worst SNR; at most max_rows tensors, 0 = all) and the per-layer
// recommendation line.
std::string format_inspect(const InspectResult& r, std::size_t max_rows = 0);

// /tensors/<name> groups with one attribute per number, /layers datasets, root attributes; written
// atomically (temporary + rename, as the run file). Refuses to overwrite unless `force`.
// Layout: docs/inspect.md.
void write_inspect_file(const std::string& path, const InspectResult& r, const std::string& command_line,
                        bool force);

// Reads an inspect file back (`report` draws it). Per-tensor stats come back in inspect_conventions()
// x {fp32, pow2} order with the HDF5 values (sum_sq_x / sum_sq_err are not stored: 0;
// blocks_differ = round(frac x blocks)); tensors in the file's `order`. InputError on any problem.
InspectResult read_inspect_file(const std::string& path);
// True when `path` is an HDF5 file whose root attribute `format` is "rlparity-inspect".
bool is_inspect_file(const std::string& path);

}  // namespace rlp
