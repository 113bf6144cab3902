// inspect's driver: which checkpoint tensors fp8 recipes quantize, their statistics
// (block_stats.cpp), the per-layer summary and the bf16-layers recommendation.
#include "rlparity/inspect/inspect.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>

#include "rlparity/dist/job.hpp"
#include "rlparity/dist/pack.hpp"
#include "rlparity/dist/sharding.hpp"
#include "rlparity/metrics/statistics.hpp"
#include "rlparity/model/weights.hpp"
#include "rlparity/numerics/quantize.hpp"
#include "rlparity/util/error.hpp"

namespace rlp {

using num::ScaleConvention;

const char* convention_name(ScaleConvention c) {
  // Indexed by the enum's value (te, vllm, deepgemm, nemo_refit: numerics/scaling.hpp).
  static constexpr const char* kNames[] = {"te", "vllm", "deepgemm", "nemo-refit"};
  const auto i = static_cast<std::size_t>(c);
  return i < std::size(kNames) ? kNames[i] : "?";
}

const std::vector<ScaleConvention>& inspect_conventions() {
  static const std::vector<ScaleConvention> v{ScaleConvention::te, ScaleConvention::vllm,
                                              ScaleConvention::deepgemm, ScaleConvention::nemo_refit};
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

bool is_fp8_weight(const std::string& name, int* layer, std::string* proj) {
  const std::string prefix = "model.layers.";
  if (name.rfind(prefix, 0) != 0) return false;
  size_t p = prefix.size();
  size_t q = p;
  while (q < name.size() && name[q] >= '0' && name[q] <= '9') ++q;
  if (q == p || q >= name.size() || name[q] != '.') return false;
  // rest = "<block>.<module path>.weight": self_attn.q_proj, mlp.down_proj, mlp.experts.3.up_proj,
  // block_sparse_moe.experts.0.w1, mlp.shared_expert.gate_proj; proj is the part after the block.
  const std::string rest = name.substr(q + 1), w = ".weight";
  if (rest.size() <= w.size() || rest.compare(rest.size() - w.size(), w.size(), w) != 0) return false;
  const std::string module = rest.substr(0, rest.size() - w.size());
  const std::size_t dot = module.find('.');
  if (dot == std::string::npos || !is_quantizable_linear_module(module.substr(module.rfind('.') + 1)))
    return false;
  if (layer) *layer = std::stoi(name.substr(p, q - p));
  if (proj) *proj = module.substr(dot + 1);
  return true;
}

namespace {

std::vector<StoredComparison> compare_stored(const TensorView& t, const std::vector<float>& master) {
  const int rows = static_cast<int>(t.shape[0]), cols = static_cast<int>(t.shape[1]);
  std::vector<float> stored_scales(static_cast<std::size_t>(t.scale_inv->numel()));
  t.scale_inv->to_float(stored_scales.data());
  std::vector<StoredComparison> out;
  for (int mode = 0; mode < 2; ++mode) {
    for (const ScaleConvention c : inspect_conventions()) {
      num::ScaleOptions o;
      o.convention = c;
      o.pow2 = mode == 1;
      const num::Fp8Tensor q = num::quantize_blocks(master.data(), rows, cols, t.block_rows, t.block_cols, o);
      StoredComparison sc;
      sc.convention = c;
      sc.pow2 = o.pow2;
      int64_t codes = 0, scales = 0;
      for (std::size_t i = 0; i < q.codes.size(); ++i) codes += q.codes[i] != t.data[i];
      sc.scale_ratio_min = std::numeric_limits<double>::infinity();
      sc.scale_ratio_max = 0.0;
      for (std::size_t b = 0; b < q.scale_inv.size(); ++b) {
        scales += std::bit_cast<uint32_t>(q.scale_inv[b]) != std::bit_cast<uint32_t>(stored_scales[b]);
        const double ratio = static_cast<double>(stored_scales[b]) / static_cast<double>(q.scale_inv[b]);
        sc.scale_ratio_min = std::min(sc.scale_ratio_min, ratio);
        sc.scale_ratio_max = std::max(sc.scale_ratio_max, ratio);
      }
      sc.codes_differ_frac =
          q.codes.empty() ? 0.0 : static_cast<double>(codes) / static_cast<double>(q.codes.size());
      sc.scales_differ_frac =
          q.scale_inv.empty() ? 0.0 : static_cast<double>(scales) / static_cast<double>(q.scale_inv.size());
      out.push_back(sc);
    }
  }
  return out;
}

TensorInspection inspect_tensor(const Checkpoint& ckpt, const std::string& name,
                                const InspectOptions& options) {
  const TensorView& t = ckpt.tensor(name);
  if (t.shape.size() != 2) RLP_THROW_INPUT("tensor {} is not 2-D", name);
  TensorInspection ti;
  ti.name = name;
  is_fp8_weight(name, &ti.layer, &ti.proj);
  ti.dtype = dtype_name(t.dtype);
  ti.rows = t.shape[0];
  ti.cols = t.shape[1];
  ti.blocks =
      ((ti.rows + options.block - 1) / options.block) * ((ti.cols + options.block - 1) / options.block);
  if (t.dtype == DType::e4m3) {
    // The statistics of the master a trainer holds (the dequantized values), then the stored
    // codes against each convention's requantization of it.
    std::vector<float> master(static_cast<std::size_t>(t.numel()));
    t.to_float(master.data());
    ti.stats =
        inspect_matrix(reinterpret_cast<const uint8_t*>(master.data()), DType::fp32, ti.rows, ti.cols,
                       options.block, inspect_conventions(), &ti.amax_min, &ti.amax_median, &ti.amax_max);
    ti.stored = compare_stored(t, master);
  } else {
    ti.stats = inspect_matrix(t.data, t.dtype, ti.rows, ti.cols, options.block, inspect_conventions(),
                              &ti.amax_min, &ti.amax_median, &ti.amax_max);
  }
  return ti;
}

void pack_string(Packer& out, const std::string& s) { out.put_vector(std::vector<char>(s.begin(), s.end())); }
std::string unpack_string(Unpacker& in) {
  const std::vector<char> v = in.get_vector<char>();
  return {v.begin(), v.end()};
}

void pack(Packer& out, const TensorInspection& t) {
  pack_string(out, t.name);
  pack_string(out, t.proj);
  pack_string(out, t.dtype);
  const int64_t ints[] = {t.layer, t.rows, t.cols, t.blocks};
  out.put(ints, 4);
  const double amax[] = {t.amax_min, t.amax_median, t.amax_max};
  out.put(amax, 3);
  out.put_vector(t.stats);
  out.put_vector(t.stored);
}

TensorInspection unpack_inspection(Unpacker& in) {
  TensorInspection t;
  t.name = unpack_string(in);
  t.proj = unpack_string(in);
  t.dtype = unpack_string(in);
  int64_t ints[4];
  in.get(ints, 4);
  t.layer = static_cast<int>(ints[0]);
  t.rows = ints[1];
  t.cols = ints[2];
  t.blocks = ints[3];
  double amax[3];
  in.get(amax, 3);
  t.amax_min = amax[0];
  t.amax_median = amax[1];
  t.amax_max = amax[2];
  t.stats = in.get_vector<QuantStats>();
  t.stored = in.get_vector<StoredComparison>();
  return t;
}

}  // namespace

InspectResult inspect_checkpoint(const Checkpoint& ckpt, const InspectOptions& options) {
  const ModelSpec& spec = ckpt.spec();
  InspectResult r;
  r.checkpoint_path = ckpt.dir();
  r.checkpoint_hash = ckpt.content_hash();
  r.model_spec = spec.to_json();
  // In a job of several ranks (dist/job.hpp) each rank inspects its share of the tensors, balanced by
  // size, and every rank gathers all of them.
  std::vector<std::string> names;
  std::vector<int64_t> cost;
  for (int l = 0; l < spec.layers; ++l) {
    for (const Proj p : {Proj::q, Proj::k, Proj::v, Proj::o})
      names.push_back(layer_tensor_name(l, proj_tensor_suffix(p)) + ".weight");
    for (const LinearTensor& f : spec.feed_forward_linears(l)) names.push_back(f.name + ".weight");
  }
  for (const auto& n : names) cost.push_back(ckpt.tensor(n).numel());
  Job& job = Job::current();
  const Sharding shard = shard_by_cost(cost, job.size(), job.rank());
  std::vector<TensorInspection> tensors(names.size());
  job.run_step(
      [&](const Job::Report&) {
        for (const std::size_t i : shard.mine()) tensors[i] = inspect_tensor(ckpt, names[i], options);
      },
      0);
  share_items(
      job, shard, [](std::size_t) { return true; },
      [&](Packer& out, std::size_t i) { pack(out, tensors[i]); },
      [&](Unpacker& in, std::size_t i) { tensors[i] = unpack_inspection(in); });
  for (TensorInspection& ti : tensors) {
    r.bytes_per_pass += static_cast<int64_t>(ckpt.tensor(ti.name).nbytes);
    r.tensors.push_back(std::move(ti));
  }
  // Sort key: worst SNR ascending, NaN first (a NaN SNR is the worst news), then name.
  auto key_less = [](double a, double b) {
    if (std::isnan(a) != std::isnan(b)) return std::isnan(a);
    return a < b;
  };
  std::stable_sort(r.tensors.begin(), r.tensors.end(),
                   [&](const TensorInspection& a, const TensorInspection& b) {
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
  std::stable_sort(r.layers.begin(), r.layers.end(), [&](const LayerSummary& a, const LayerSummary& b) {
    return key_less(a.worst_snr_db, b.worst_snr_db);
  });

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
        "outlier blocks (amax max/median > {:.0f}): no bf16 layers indicated; confirm with `replay "
        "--attribute "
        "layers`.",
        ranked, options.flag_margin_db, median, options.flag_amax_spread);
  } else {
    std::string flagged;
    for (int l : r.flagged_layers) flagged += (flagged.empty() ? "" : ",") + std::to_string(l);
    r.recommendation = fmt::format(
        "layers by worst SNR: {}; outlier blocks (amax max/median > {:.0f}): {}. Keep in bf16: layer(s) {} "
        "(more than {:.1f} dB below the median layer, {:.1f} dB, or outlier blocks) -> --bf16-first-layers "
        "{} "
        "--bf16-last-layers {} ({} layer(s) in bf16); measure it with `replay --attribute layers`.",
        ranked, options.flag_amax_spread, outliers.empty() ? "none" : outliers, flagged,
        options.flag_margin_db, median, bestF, bestK, bestF + bestK);
  }
  return r;
}

}  // namespace rlp
