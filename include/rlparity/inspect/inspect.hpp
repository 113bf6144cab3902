// `rlparity inspect`: per-tensor FP8 quantization diagnostics of a checkpoint (DESIGN section 7):
// for every weight an fp8 recipe quantizes (decoder q/k/v/o/gate/up/down, 128x128 blocks), the
// block amax spread, and for each scale convention (te, vllm, deepgemm, nemo-refit) with fp32 and
// power-of-2 scales: quantization SNR, relative Frobenius error, saturated / clipped / flushed
// element counts, and the fraction of blocks whose fp8 codes differ from TransformerEngine's.
// Every number is defined in docs/inspect.md.
// The per-tensor kernel: rlparity/inspect/block_stats.hpp.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rlparity/inspect/block_stats.hpp"
#include "rlparity/model/checkpoint.hpp"
#include "rlparity/numerics/scaling.hpp"

namespace rlp {

// Name used in tables and HDF5 attribute names: "te", "vllm", "deepgemm", "nemo-refit".
const char* convention_name(num::ScaleConvention c);
// The four conventions in report order (te first: the others are compared against it).
const std::vector<num::ScaleConvention>& inspect_conventions();

// A pre-quantized fp8 checkpoint's stored codes and scales against what one convention x scale
// mode produces when it requantizes the dequantized master (128x128 blocks): does requantizing
// this checkpoint for training change it?
struct StoredComparison {
  num::ScaleConvention convention = num::ScaleConvention::te;
  bool pow2 = false;
  double codes_differ_frac = 0.0;   // elements whose fp8 code differs from the stored one
  double scales_differ_frac = 0.0;  // blocks whose scale_inv differs (bitwise) from the stored one
  double scale_ratio_min = 1.0;     // min / max over blocks of stored scale_inv / requantized scale_inv
  double scale_ratio_max = 1.0;
};

struct TensorInspection {
  std::string name;
  int layer = -1;     // decoder layer index, from "model.layers.<i>."
  std::string proj;   // the module path after the block: "q_proj", "down_proj", "experts.3.up_proj",
                      // "experts.0.w1", "shared_expert.gate_proj"
  std::string dtype;  // checkpoint dtype
  int64_t rows = 0, cols = 0;
  int64_t blocks = 0;                                        // 128x128 blocks (edge blocks partial)
  double amax_min = 0.0, amax_median = 0.0, amax_max = 0.0;  // over blocks; median = nearest rank
  std::vector<QuantStats> stats;  // inspect_conventions() x {fp32, pow2}: index 2*c + pow2
  // Only for a tensor stored F8_E4M3 (stats are then of its dequantized master): {fp32, pow2} x
  // inspect_conventions(), the scale mode outer (index 4*pow2 + c; the table prints it in halves).
  std::vector<StoredComparison> stored;
  double worst_snr_db() const;  // min over stats
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
// x {fp32, pow2} order, and a pre-quantized tensor's stored comparison in its own order, with the HDF5 values
// (sum_sq_x / sum_sq_err are not stored: 0; blocks_differ = round(frac x blocks)); tensors in the file's
// `order`. InputError on any problem.
InspectResult read_inspect_file(const std::string& path);
// True when `path` is an HDF5 file whose root attribute `format` is "rlparity-inspect".
bool is_inspect_file(const std::string& path);

}  // namespace rlp
