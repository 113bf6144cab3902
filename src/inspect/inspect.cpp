#include "rlparity/inspect/inspect.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <limits>
#include <map>

#include "io/h5_util.hpp"
#include "rlparity/metrics/statistics.hpp"
#include "rlparity/model/weights.hpp"
#include "rlparity/numerics/formats.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/parallel.hpp"
#include "rlparity/util/version.hpp"

namespace rlp {
namespace {

using num::BlockScale;
using num::ScaleConvention;
using num::ScaleOptions;
using std::size_t;

constexpr int kLanes = 8;
constexpr float kSatThreshold = 448.0f;   // e4m3 max
constexpr float kClipThreshold = 464.0f;  // midpoint 448..480: beyond it RNE would leave the range

// Accumulators of one scale mode over one block row; lanes keep the float64 sums vectorizable and
// their order fixed (lane j holds elements j, j+8, ... of each padded row, rows and blocks in order).
struct Lanes {
  double sx2[kLanes] = {}, se2[kLanes] = {};
  int64_t sat[kLanes] = {}, clip[kLanes] = {}, flush[kLanes] = {}, nonfin[kLanes] = {};
  int64_t blocks_differ = 0;
};

// e4m3 code -> float, branch-free (exact; NaN code -> NaN).
inline float decode_e4m3(uint8_t code) {
  const uint32_t m = code & 0x7Fu;
  const uint32_t e = m >> 3, f = m & 7u;
  const float normal = std::bit_cast<float>(((e + 120u) << 23) | (f << 20));
  const float sub = static_cast<float>(f) * 0x1p-9f;
  float mag = e != 0 ? normal : sub;
  mag = m == 0x7Fu ? std::numeric_limits<float>::quiet_NaN() : mag;
  return std::bit_cast<float>(std::bit_cast<uint32_t>(mag) | (static_cast<uint32_t>(code & 0x80u) << 24));
}

// One padded row (n8 a multiple of 8; padding is zeros, which add nothing) in convention C.
// Local lane accumulators and restrict pointers let the compiler vectorize the lane loop.
template <ScaleConvention C>
inline void row_kernel(const float* __restrict x, int n8, const BlockScale& bs, uint8_t* __restrict codes,
                       Lanes& L) {
  ScaleOptions o;
  o.convention = C;
  const BlockScale s = bs;
  double se2[kLanes] = {}, sx2[kLanes] = {};
  int32_t sat[kLanes] = {}, clip[kLanes] = {}, flush[kLanes] = {}, nonfin[kLanes] = {};
  for (int i0 = 0; i0 < n8; i0 += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const float xv = x[i0 + j];
      const float v = C == ScaleConvention::vllm ? xv / s.scale_inv : xv * s.scale;
      const uint8_t code = num::quantize_with(xv, s, o);
      codes[i0 + j] = code;
      const float deq = decode_e4m3(code) * s.scale_inv;  // as num::dequantize: one fp32 multiply
      const uint32_t ab = std::bit_cast<uint32_t>(xv) & 0x7FFFFFFFu;
      const bool fin = ab < 0x7F800000u;
      const double xd = static_cast<double>(xv);
      const double e = fin ? xd - static_cast<double>(deq) : 0.0;
      se2[j] += e * e;
      sx2[j] += fin ? xd * xd : 0.0;
      const float av = std::fabs(v);
      // Bitwise & (not &&): no branches in the lane loop.
      const int32_t f = static_cast<int32_t>(fin);
      sat[j] += f & static_cast<int32_t>(av > kSatThreshold);
      clip[j] += f & static_cast<int32_t>(av > kClipThreshold);
      flush[j] += f & static_cast<int32_t>(ab != 0) & static_cast<int32_t>((code & 0x7Fu) == 0);
      nonfin[j] += 1 - f;
    }
  }
  for (int j = 0; j < kLanes; ++j) {
    L.se2[j] += se2[j];
    L.sx2[j] += sx2[j];
    L.sat[j] += sat[j];
    L.clip[j] += clip[j];
    L.flush[j] += flush[j];
    L.nonfin[j] += nonfin[j];
  }
}

using RowKernel = void (*)(const float*, int, const BlockScale&, uint8_t*, Lanes&);
RowKernel pick_kernel(ScaleConvention c) {
  switch (c) {
    case ScaleConvention::te: return &row_kernel<ScaleConvention::te>;
    case ScaleConvention::vllm: return &row_kernel<ScaleConvention::vllm>;
    case ScaleConvention::deepgemm: return &row_kernel<ScaleConvention::deepgemm>;
    case ScaleConvention::nemo_refit: return &row_kernel<ScaleConvention::nemo_refit>;
  }
  return &row_kernel<ScaleConvention::te>;
}

// Converts n elements of `dtype` to float.
inline void load_elems(const uint8_t* p, DType dtype, size_t n, float* out) {
  switch (dtype) {
    case DType::f32: std::memcpy(out, p, 4 * n); break;
    case DType::bf16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, p + 2 * i, 2);
        out[i] = std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
      }
      break;
    case DType::f16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, p + 2 * i, 2);
        out[i] = num::fp16_bits_to_float(b);
      }
      break;
  }
}

struct Geometry {
  int64_t rows, cols;
  int block, rb, cb, bcp;  // bcp: block columns padded to a multiple of kLanes
  size_t block_elems() const { return static_cast<size_t>(block) * static_cast<size_t>(bcp); }
};

double snr_db(double sx2, double se2) {
  if (se2 == 0.0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(sx2 / se2);
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

const char* convention_name(ScaleConvention c) {
  switch (c) {
    case ScaleConvention::te: return "te";
    case ScaleConvention::vllm: return "vllm";
    case ScaleConvention::deepgemm: return "deepgemm";
    case ScaleConvention::nemo_refit: return "nemo-refit";
  }
  return "?";
}

const std::vector<ScaleConvention>& inspect_conventions() {
  static const std::vector<ScaleConvention> v{ScaleConvention::te, ScaleConvention::vllm, ScaleConvention::deepgemm,
                                              ScaleConvention::nemo_refit};
  return v;
}

double TensorInspection::worst_snr_db() const {
  double w = std::numeric_limits<double>::infinity();
  for (const auto& s : stats) w = std::min(w, s.snr_db);  // NaN never wins
  return w;
}

const QuantStats& TensorInspection::find(ScaleConvention c, bool pow2) const {
  for (const auto& s : stats)
    if (s.convention == c && s.pow2 == pow2) return s;
  RLP_THROW("tensor {}: no statistics for {} {}", name, convention_name(c), pow2 ? "pow2" : "fp32");
}

std::vector<QuantStats> inspect_matrix(const uint8_t* data, DType dtype, int64_t rows, int64_t cols, int block,
                                       const std::vector<ScaleConvention>& conventions, double* amax_min,
                                       double* amax_median, double* amax_max) {
  RLP_CHECK(rows > 0 && cols > 0, "inspect: empty matrix {}x{}", rows, cols);
  RLP_CHECK(block > 0, "inspect: block size {} must be positive", block);
  RLP_CHECK(data != nullptr, "inspect: null data");
  const size_t esize = dtype_size(dtype);
  Geometry g{rows, cols, block, static_cast<int>((rows + block - 1) / block),
             static_cast<int>((cols + block - 1) / block), (block + kLanes - 1) / kLanes * kLanes};
  const size_t nblocks = static_cast<size_t>(g.rb) * static_cast<size_t>(g.cb);
  const bool have_te = !conventions.empty() && conventions[0] == ScaleConvention::te;

  // The last element's |value|: NeMo RL pads partial edge blocks with it (see quantize.hpp).
  float last = 0.0f;
  load_elems(data + (static_cast<size_t>(rows) * static_cast<size_t>(cols) - 1) * esize, dtype, 1, &last);

  std::vector<double> block_amax(nblocks, 0.0);
  std::vector<uint8_t> te_codes[2];
  if (have_te && conventions.size() > 1)
    for (auto& v : te_codes) v.assign(nblocks * g.block_elems(), 0);

  std::vector<QuantStats> out;
  for (size_t ci = 0; ci < conventions.size(); ++ci) {
    const ScaleConvention conv = conventions[ci];
    const RowKernel kernel = pick_kernel(conv);
    const bool store_te = ci == 0 && have_te && !te_codes[0].empty();
    const bool compare_te = ci > 0 && have_te;
    const bool record_amax = ci == 0;
    std::vector<Lanes> partial(static_cast<size_t>(g.rb) * 2);

    parallel_for(static_cast<size_t>(g.rb), 1, [&](size_t b0, size_t b1) {
      std::vector<float> buf(g.block_elems(), 0.0f);
      std::vector<uint8_t> codes(static_cast<size_t>(g.bcp));
      for (size_t br = b0; br < b1; ++br) {
        Lanes& L32 = partial[2 * br];
        Lanes& Lp2 = partial[2 * br + 1];
        const int64_t r0 = static_cast<int64_t>(br) * block;
        const int nr = static_cast<int>(std::min<int64_t>(rows - r0, block));
        for (int bc = 0; bc < g.cb; ++bc) {
          const int64_t c0 = static_cast<int64_t>(bc) * block;
          const int nc = static_cast<int>(std::min<int64_t>(cols - c0, block));
          // Load the block (padding columns stay zero: the buffer is reused only for same-width
          // blocks, and a narrower edge block is the last of its row of blocks).
          if (nc < g.bcp)
            for (int r = 0; r < nr; ++r)
              std::fill(buf.begin() + static_cast<std::ptrdiff_t>(r) * g.bcp + nc,
                        buf.begin() + static_cast<std::ptrdiff_t>(r + 1) * g.bcp, 0.0f);
          for (int r = 0; r < nr; ++r)
            load_elems(data + (static_cast<size_t>(r0 + r) * static_cast<size_t>(cols) + static_cast<size_t>(c0)) * esize,
                       dtype, static_cast<size_t>(nc), buf.data() + static_cast<size_t>(r) * static_cast<size_t>(g.bcp));
          // amax as quantize_blocks reduces it: NaN-ignoring max of |x| on the bits.
          uint32_t m = 0, all = 0;
          for (int r = 0; r < nr; ++r) {
            const float* row = buf.data() + static_cast<size_t>(r) * static_cast<size_t>(g.bcp);
            for (int c = 0; c < g.bcp; ++c) {
              const uint32_t a = std::bit_cast<uint32_t>(row[c]) & 0x7FFFFFFFu;
              const uint32_t keep = 0u - static_cast<uint32_t>(a <= 0x7F800000u);
              m = std::max(m, a & keep);
              all = std::max(all, a);
            }
          }
          const size_t bidx = br * static_cast<size_t>(g.cb) + static_cast<size_t>(bc);
          if (record_amax) block_amax[bidx] = static_cast<double>(std::bit_cast<float>(m));
          const bool partial_block = nr < block || nc < block;
          if (conv == ScaleConvention::nemo_refit && partial_block) {
            const uint32_t a = std::bit_cast<uint32_t>(last) & 0x7FFFFFFFu;
            if (a <= 0x7F800000u) m = std::max(m, a);
            all = std::max(all, a);
          }
          const float amax = num::finish_amax(std::bit_cast<float>(m), all > 0x7F800000u, conv);
          for (int mode = 0; mode < 2; ++mode) {
            ScaleOptions o;
            o.convention = conv;
            o.pow2 = mode == 1;
            const BlockScale s = num::compute_block_scale(amax, o);
            Lanes& L = mode == 0 ? L32 : Lp2;
            uint8_t* te = te_codes[mode].empty() ? nullptr : te_codes[mode].data() + bidx * g.block_elems();
            uint32_t differ = 0;
            for (int r = 0; r < nr; ++r) {
              const size_t off = static_cast<size_t>(r) * static_cast<size_t>(g.bcp);
              uint8_t* dst = store_te ? te + off : codes.data();
              kernel(buf.data() + off, g.bcp, s, dst, L);
              if (compare_te) {
                const uint8_t* ref = te + off;
                for (int c = 0; c < g.bcp; ++c) differ |= static_cast<uint32_t>(dst[c] ^ ref[c]);
              }
            }
            L.blocks_differ += differ != 0 ? 1 : 0;
          }
        }
      }
    });

    for (int mode = 0; mode < 2; ++mode) {
      QuantStats q;
      q.convention = conv;
      q.pow2 = mode == 1;
      for (int br = 0; br < g.rb; ++br) {
        const Lanes& L = partial[2 * static_cast<size_t>(br) + static_cast<size_t>(mode)];
        for (int j = 0; j < kLanes; ++j) {
          q.sum_sq_x += L.sx2[j];
          q.sum_sq_err += L.se2[j];
          q.saturated += L.sat[j];
          q.clipped += L.clip[j];
          q.flushed += L.flush[j];
          q.nonfinite += L.nonfin[j];
        }
        q.blocks_differ += L.blocks_differ;
      }
      q.snr_db = snr_db(q.sum_sq_x, q.sum_sq_err);
      q.rel_fro_err = q.sum_sq_x == 0.0 ? (q.sum_sq_err == 0.0 ? 0.0 : std::numeric_limits<double>::infinity())
                                        : std::sqrt(q.sum_sq_err / q.sum_sq_x);
      if (!compare_te) q.blocks_differ = 0;
      q.blocks_differ_frac = static_cast<double>(q.blocks_differ) / static_cast<double>(nblocks);
      out.push_back(q);
    }
  }

  if (amax_min || amax_median || amax_max) {
    std::sort(block_amax.begin(), block_amax.end());
    if (amax_min) *amax_min = block_amax.front();
    if (amax_median) *amax_median = percentile_nearest_rank(block_amax, 500);
    if (amax_max) *amax_max = block_amax.back();
  }
  return out;
}

std::vector<QuantStats> inspect_matrix(const float* x, int64_t rows, int64_t cols, int block,
                                       const std::vector<ScaleConvention>& conventions) {
  return inspect_matrix(reinterpret_cast<const uint8_t*>(x), DType::f32, rows, cols, block, conventions);
}

bool is_fp8_weight(const std::string& name, int* layer, std::string* proj) {
  const std::string prefix = "model.layers.";
  if (name.rfind(prefix, 0) != 0) return false;
  size_t p = prefix.size();
  size_t q = p;
  while (q < name.size() && name[q] >= '0' && name[q] <= '9') ++q;
  if (q == p || q >= name.size() || name[q] != '.') return false;
  const std::string rest = name.substr(q + 1);
  for (int i = 0; i < kNumProj; ++i) {
    const std::string suffix = std::string(proj_tensor_suffix(static_cast<Proj>(i))) + ".weight";
    if (rest == suffix) {
      if (layer) *layer = std::stoi(name.substr(p, q - p));
      if (proj) *proj = suffix.substr(suffix.find('.') + 1, suffix.size() - suffix.find('.') - 1 - 7);
      return true;
    }
  }
  return false;
}

InspectResult inspect_checkpoint(const Checkpoint& ckpt, const InspectOptions& options) {
  const ModelSpec& spec = ckpt.spec();
  InspectResult r;
  r.checkpoint_path = ckpt.dir();
  r.checkpoint_hash = ckpt.content_hash();
  r.model_spec = spec.to_json();
  for (int l = 0; l < spec.layers; ++l) {
    for (int p = 0; p < kNumProj; ++p) {
      const std::string name = layer_tensor_name(l, proj_tensor_suffix(static_cast<Proj>(p))) + ".weight";
      const TensorView& t = ckpt.tensor(name);
      if (t.shape.size() != 2) RLP_THROW_INPUT("tensor {} is not 2-D", name);
      TensorInspection ti;
      ti.name = name;
      is_fp8_weight(name, &ti.layer, &ti.proj);
      ti.dtype = dtype_name(t.dtype);
      ti.rows = t.shape[0];
      ti.cols = t.shape[1];
      ti.blocks = ((ti.rows + options.block - 1) / options.block) * ((ti.cols + options.block - 1) / options.block);
      ti.stats = inspect_matrix(t.data, t.dtype, ti.rows, ti.cols, options.block, inspect_conventions(), &ti.amax_min,
                                &ti.amax_median, &ti.amax_max);
      r.bytes_per_pass += static_cast<int64_t>(t.nbytes);
      r.tensors.push_back(std::move(ti));
    }
  }
  // Sort key: worst SNR ascending, NaN first (a NaN SNR is the worst news), then name.
  auto key_less = [](double a, double b) {
    if (std::isnan(a) != std::isnan(b)) return std::isnan(a);
    return a < b;
  };
  std::stable_sort(r.tensors.begin(), r.tensors.end(), [&](const TensorInspection& a, const TensorInspection& b) {
    const double wa = a.worst_snr_db(), wb = b.worst_snr_db();
    if (key_less(wa, wb)) return true;
    if (key_less(wb, wa)) return false;
    return a.name < b.name;
  });

  std::map<int, LayerSummary> per_layer;
  for (const auto& t : r.tensors) {  // worst first: the first tensor seen per layer is its worst
    auto [it, inserted] = per_layer.try_emplace(t.layer);
    if (inserted) {
      it->second.layer = t.layer;
      it->second.worst_snr_db = t.worst_snr_db();
      it->second.worst_tensor = t.name;
    }
    const double spread = t.amax_median > 0.0 ? t.amax_max / t.amax_median : 0.0;
    it->second.max_amax_spread = std::max(it->second.max_amax_spread, spread);
  }
  std::vector<double> worst;
  for (const auto& [l, s] : per_layer) worst.push_back(s.worst_snr_db);
  std::vector<double> sorted = worst;
  std::sort(sorted.begin(), sorted.end(), key_less);
  const double median = sorted.empty() ? 0.0 : percentile_nearest_rank(sorted, 500);
  for (auto& [l, s] : per_layer) {
    s.flagged = std::isnan(s.worst_snr_db) || s.worst_snr_db < median - options.flag_margin_db ||
                s.max_amax_spread > options.flag_amax_spread;
    if (s.flagged) r.flagged_layers.push_back(l);
    r.layers.push_back(s);
  }
  std::stable_sort(r.layers.begin(), r.layers.end(),
                   [&](const LayerSummary& a, const LayerSummary& b) { return key_less(a.worst_snr_db, b.worst_snr_db); });

  // Smallest F + K (then smallest F) whose bf16 edges cover every flagged layer.
  const int L = spec.layers;
  int bestF = 0, bestK = 0, best = L + 1;
  for (int F = 0; F <= L; ++F)
    for (int K = 0; F + K <= L; ++K) {
      bool covers = true;
      for (int l : r.flagged_layers) covers = covers && (l < F || l >= L - K);
      if (covers && F + K < best) {
        best = F + K;
        bestF = F;
        bestK = K;
      }
    }
  r.bf16_first_layers = bestF;
  r.bf16_last_layers = bestK;

  std::string ranked;
  for (std::size_t i = 0; i < r.layers.size() && i < 8; ++i)
    ranked += fmt::format("{}{} ({:.1f} dB)", i ? ", " : "", r.layers[i].layer, r.layers[i].worst_snr_db);
  std::string outliers;
  for (const auto& [l, s] : per_layer)
    if (s.max_amax_spread > options.flag_amax_spread)
      outliers += fmt::format("{}{} (x{:.0f})", outliers.empty() ? "" : ", ", l, s.max_amax_spread);
  if (r.flagged_layers.empty()) {
    r.recommendation = fmt::format(
        "layers by worst SNR: {}. No layer is more than {:.1f} dB below the median layer ({:.1f} dB) or has "
        "outlier blocks (amax max/median > {:.0f}): no bf16 layers indicated; confirm with `replay --attribute "
        "layers`.",
        ranked, options.flag_margin_db, median, options.flag_amax_spread);
  } else {
    std::string flagged;
    for (int l : r.flagged_layers) flagged += (flagged.empty() ? "" : ",") + std::to_string(l);
    r.recommendation = fmt::format(
        "layers by worst SNR: {}; outlier blocks (amax max/median > {:.0f}): {}. Keep in bf16: layer(s) {} "
        "(more than {:.1f} dB below the median layer, {:.1f} dB, or outlier blocks) -> --bf16-first-layers {} "
        "--bf16-last-layers {} ({} layer(s) in bf16); measure it with `replay --attribute layers`.",
        ranked, options.flag_amax_spread, outliers.empty() ? "none" : outliers, flagged, options.flag_margin_db,
        median, bestF, bestK, bestF + bestK);
  }
  return r;
}

std::string format_inspect(const InspectResult& r, std::size_t max_rows) {
  std::string s;
  s += fmt::format("{:<34} {:>11} {:>27} | {:^31} | {:^31} | {:>8} {:>7} {:>8} {:>6}\n", "tensor (worst SNR first)",
                   "shape", "block amax min/median/max", "SNR dB, fp32 scales", "SNR dB, pow2 scales", "rel err",
                   "sat", "flushed", "differ");
  s += fmt::format("{:<34} {:>11} {:>27} | {:>7} {:>7} {:>7} {:>7} | {:>7} {:>7} {:>7} {:>7} | {:>8} {:>7} {:>8} {:>6}\n",
                   "", "", "", "te", "vllm", "dg", "nemo", "te", "vllm", "dg", "nemo", "worst", "max", "max", "max");
  const std::size_t n = max_rows == 0 ? r.tensors.size() : std::min(max_rows, r.tensors.size());
  for (std::size_t i = 0; i < n; ++i) {
    const auto& t = r.tensors[i];
    std::string shortname = t.name.rfind("model.", 0) == 0 ? t.name.substr(6) : t.name;
    if (shortname.size() > 7 && shortname.compare(shortname.size() - 7, 7, ".weight") == 0)
      shortname.resize(shortname.size() - 7);
    s += fmt::format("{:<34} {:>11} {:>27} |", shortname, fmt::format("{}x{}", t.rows, t.cols),
                     fmt::format("{:.2e}/{:.2e}/{:.2e}", t.amax_min, t.amax_median, t.amax_max));
    double worst_rel = 0.0, max_differ = 0.0;
    int64_t max_sat = 0, max_flush = 0;
    for (int mode = 0; mode < 2; ++mode) {
      for (auto c : inspect_conventions()) {
        const QuantStats& q = t.find(c, mode == 1);
        s += fmt::format(" {:>7.2f}", q.snr_db);
        worst_rel = std::max(worst_rel, q.rel_fro_err);
        max_sat = std::max(max_sat, q.saturated);
        max_flush = std::max(max_flush, q.flushed);
        max_differ = std::max(max_differ, q.blocks_differ_frac);
      }
      s += " |";
    }
    s += fmt::format(" {:>8.2e} {:>7} {:>8} {:>5.1f}%\n", worst_rel, max_sat, max_flush, 100.0 * max_differ);
  }
  if (n < r.tensors.size()) s += fmt::format("... {} more tensors (all in the HDF5 output)\n", r.tensors.size() - n);
  s += "recommendation: " + r.recommendation + "\n";
  return s;
}

void write_inspect_file(const std::string& path, const InspectResult& r, const std::string& command_line,
                        bool force) {
  namespace fs = std::filesystem;
  if (path.empty()) RLP_THROW_INPUT("output path is empty");
  const fs::path p(path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    RLP_THROW_INPUT("cannot write inspect file '{}': directory '{}' does not exist", path, dir.string());
  const auto st = fs::symlink_status(p, ec);
  if (fs::exists(st)) {
    if (fs::is_directory(st)) RLP_THROW_INPUT("cannot write inspect file '{}': it is a directory", path);
    if (!force) RLP_THROW_INPUT("output file '{}' already exists (use --force to overwrite)", path);
  }
  auto write = [&](hid_t file) {
    const int32_t format_version = 1;
    h5::write_attr_string(file, "format", "rlparity-inspect", "/format");
    h5::write_attr_scalar(file, "inspect_version", H5T_STD_I32LE, H5T_NATIVE_INT32, &format_version,
                          "/inspect_version");
    h5::write_attr_string(file, "tool_version", version(), "/tool_version");
    h5::write_attr_string(file, "command_line", command_line, "/command_line");
    h5::write_attr_string(file, "checkpoint_path", r.checkpoint_path, "/checkpoint_path");
    h5::write_attr_string(file, "checkpoint_hash", r.checkpoint_hash, "/checkpoint_hash");
    h5::write_attr_string(file, "created", utc_now(), "/created");
    h5::write_attr_string(file, "model_spec", r.model_spec.dump(), "/model_spec");
    nlohmann::json order = nlohmann::json::array();
    for (const auto& t : r.tensors) order.push_back(t.name);
    h5::write_attr_string(file, "order", order.dump(), "/order");
    h5::write_attr_string(file, "recommendation", r.recommendation, "/recommendation");
    h5::write_attr_string(file, "flagged_layers", nlohmann::json(r.flagged_layers).dump(), "/flagged_layers");
    const int32_t F = r.bf16_first_layers, K = r.bf16_last_layers;
    h5::write_attr_scalar(file, "bf16_first_layers", H5T_STD_I32LE, H5T_NATIVE_INT32, &F, "/bf16_first_layers");
    h5::write_attr_scalar(file, "bf16_last_layers", H5T_STD_I32LE, H5T_NATIVE_INT32, &K, "/bf16_last_layers");

    h5::Id tensors = h5::create_group(file, "tensors", "/tensors");
    auto f64 = [](hid_t g, const std::string& name, double v, const std::string& what) {
      h5::write_attr_scalar(g, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v, what);
    };
    auto i64 = [](hid_t g, const std::string& name, int64_t v, const std::string& what) {
      h5::write_attr_scalar(g, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v, what);
    };
    for (const auto& t : r.tensors) {
      const std::string base = "/tensors/" + t.name;
      h5::Id g = h5::create_group(tensors.get(), t.name, base);
      i64(g.get(), "layer", t.layer, base + "/layer");
      h5::write_attr_string(g.get(), "proj", t.proj, base + "/proj");
      h5::write_attr_string(g.get(), "dtype", t.dtype, base + "/dtype");
      i64(g.get(), "rows", t.rows, base + "/rows");
      i64(g.get(), "cols", t.cols, base + "/cols");
      i64(g.get(), "blocks", t.blocks, base + "/blocks");
      f64(g.get(), "amax_min", t.amax_min, base + "/amax_min");
      f64(g.get(), "amax_median", t.amax_median, base + "/amax_median");
      f64(g.get(), "amax_max", t.amax_max, base + "/amax_max");
      f64(g.get(), "worst_snr_db", t.worst_snr_db(), base + "/worst_snr_db");
      for (const auto& q : t.stats) {
        const std::string pre = std::string(convention_name(q.convention)) + (q.pow2 ? "_pow2_" : "_fp32_");
        f64(g.get(), pre + "snr_db", q.snr_db, base + "/" + pre + "snr_db");
        f64(g.get(), pre + "rel_fro_err", q.rel_fro_err, base + "/" + pre + "rel_fro_err");
        i64(g.get(), pre + "saturated", q.saturated, base + "/" + pre + "saturated");
        i64(g.get(), pre + "clipped", q.clipped, base + "/" + pre + "clipped");
        i64(g.get(), pre + "flushed", q.flushed, base + "/" + pre + "flushed");
        i64(g.get(), pre + "nonfinite", q.nonfinite, base + "/" + pre + "nonfinite");
        f64(g.get(), pre + "blocks_differ_frac", q.blocks_differ_frac, base + "/" + pre + "blocks_differ_frac");
      }
      g.close("close group " + base);
    }
    tensors.close("close group /tensors");

    h5::Id layers = h5::create_group(file, "layers", "/layers");
    std::vector<double> idx, snr, flagged, spread;
    std::vector<std::string> worst;
    for (const auto& l : r.layers) {
      idx.push_back(l.layer);
      snr.push_back(l.worst_snr_db);
      flagged.push_back(l.flagged ? 1.0 : 0.0);
      spread.push_back(l.max_amax_spread);
      worst.push_back(l.worst_tensor);
    }
    h5::write_dataset(layers.get(), "layer", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, idx.data(), idx.size(), sizeof(double),
                      "/layers/layer");
    h5::write_dataset(layers.get(), "worst_snr_db", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, snr.data(), snr.size(),
                      sizeof(double), "/layers/worst_snr_db");
    h5::write_dataset(layers.get(), "flagged", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, flagged.data(), flagged.size(),
                      sizeof(double), "/layers/flagged");
    h5::write_dataset(layers.get(), "max_amax_spread", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, spread.data(),
                      spread.size(), sizeof(double), "/layers/max_amax_spread");
    h5::write_string_dataset(layers.get(), "worst_tensor", worst, "/layers/worst_tensor");
    layers.close("close group /layers");
  };
  std::lock_guard<std::mutex> lock(h5::h5_mutex());
  try {
    h5::write_file_atomic(path, write);
  } catch (const std::exception& e) {
    RLP_THROW_INPUT("cannot write inspect file '{}': {}", path, e.what());
  }
}

}  // namespace rlp
