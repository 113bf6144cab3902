// The inspect file (layout: docs/inspect.md): InspectResult as HDF5 through the io layer's
// interface (rlparity/io/h5_file.hpp), written atomically, read back for `report`.
#include <cmath>
#include <ctime>
#include <filesystem>

#include "rlparity/inspect/inspect.hpp"
#include "rlparity/io/h5_file.hpp"
#include "rlparity/util/atomic_file.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/strings.hpp"
#include "rlparity/util/version.hpp"

namespace rlp {
namespace {

using num::ScaleConvention;

// The attribute-name prefix of one convention x scale mode's statistics: "te_fp32_", "vllm_pow2_", ...
std::string stats_prefix(ScaleConvention c, bool pow2) {
  return std::string(convention_name(c)) + (pow2 ? "_pow2_" : "_fp32_");
}

}  // namespace

void write_inspect_file(const std::string& path, const InspectResult& r, const std::string& command_line,
                        bool force) {
  check_output_path(path, "inspect file", force);
  auto write = [&](h5::Group& file) {
    file.write_attr_string("format", "rlparity-inspect");
    file.write_attr<int32_t>("inspect_version", 1);
    file.write_attr_string("tool_version", version());
    file.write_attr_string("command_line", command_line);
    file.write_attr_string("checkpoint_path", r.checkpoint_path);
    file.write_attr_string("checkpoint_hash", r.checkpoint_hash);
    file.write_attr_string("created", utc_now());
    file.write_attr_string("model_spec", r.model_spec.dump());
    nlohmann::json order = nlohmann::json::array();
    for (const auto& t : r.tensors) order.push_back(t.name);
    file.write_attr_string("order", order.dump());
    file.write_attr_string("recommendation", r.recommendation);
    file.write_attr_string("flagged_layers", nlohmann::json(r.flagged_layers).dump());
    file.write_attr<int32_t>("bf16_first_layers", r.bf16_first_layers);
    file.write_attr<int32_t>("bf16_last_layers", r.bf16_last_layers);

    h5::Group tensors = file.create_group("tensors");
    for (const auto& t : r.tensors) {
      h5::Group g = tensors.create_group(t.name);
      g.write_attr<int64_t>("layer", t.layer);
      g.write_attr_string("proj", t.proj);
      g.write_attr_string("dtype", t.dtype);
      g.write_attr<int64_t>("rows", t.rows);
      g.write_attr<int64_t>("cols", t.cols);
      g.write_attr<int64_t>("blocks", t.blocks);
      g.write_attr<double>("amax_min", t.amax_min);
      g.write_attr<double>("amax_median", t.amax_median);
      g.write_attr<double>("amax_max", t.amax_max);
      g.write_attr<double>("worst_snr_db", t.worst_snr_db());
      for (const auto& q : t.stats) {
        const std::string pre = stats_prefix(q.convention, q.pow2);
        g.write_attr<double>(pre + "snr_db", q.snr_db);
        g.write_attr<double>(pre + "rel_fro_err", q.rel_fro_err);
        g.write_attr<int64_t>(pre + "saturated", q.saturated);
        g.write_attr<int64_t>(pre + "clipped", q.clipped);
        g.write_attr<int64_t>(pre + "flushed", q.flushed);
        g.write_attr<int64_t>(pre + "nonfinite", q.nonfinite);
        g.write_attr<double>(pre + "blocks_differ_frac", q.blocks_differ_frac);
      }
      for (const auto& q : t.stored) {  // a pre-quantized fp8 tensor only
        const std::string pre = "stored_" + stats_prefix(q.convention, q.pow2);
        g.write_attr<double>(pre + "codes_differ_frac", q.codes_differ_frac);
        g.write_attr<double>(pre + "scales_differ_frac", q.scales_differ_frac);
        g.write_attr<double>(pre + "scale_ratio_min", q.scale_ratio_min);
        g.write_attr<double>(pre + "scale_ratio_max", q.scale_ratio_max);
      }
      g.close();
    }
    tensors.close();

    h5::Group layers = file.create_group("layers");
    std::vector<double> idx, snr, flagged, spread;
    std::vector<std::string> worst;
    for (const auto& l : r.layers) {
      idx.push_back(l.layer);
      snr.push_back(l.worst_snr_db);
      flagged.push_back(l.flagged ? 1.0 : 0.0);
      spread.push_back(l.max_amax_spread);
      worst.push_back(l.worst_tensor);
    }
    layers.write_dataset("layer", idx);
    layers.write_dataset("worst_snr_db", snr);
    layers.write_dataset("flagged", flagged);
    layers.write_dataset("max_amax_spread", spread);
    layers.write_dataset("worst_tensor", worst);
    layers.close();
  };
  h5::write_file_atomic(path, "inspect file", write);
}

namespace {

std::string read_format_attr(const h5::Group& file) {
  return file.has_attr("format") ? file.read_attr_string("format") : std::string();
}

nlohmann::json parse_json(const std::string& text, const std::string& what) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw h5::H5Failure(what + ": invalid JSON: " + e.what());
  }
}

}  // namespace

bool is_inspect_file(const std::string& path) {
  bool yes = false;
  try {
    h5::read_file(path, "inspect file",
                  [&](h5::Group& file) { yes = read_format_attr(file) == "rlparity-inspect"; });
  } catch (const std::exception&) {
    return false;
  }
  return yes;
}

InspectResult read_inspect_file(const std::string& path) {
  InspectResult r;
  h5::read_file(path, "inspect file", [&](h5::Group& file) {
    if (read_format_attr(file) != "rlparity-inspect")
      throw h5::H5Failure("not an inspect file (root attribute format is not \"rlparity-inspect\")");
    const int64_t version = file.read_attr<int64_t>("inspect_version");
    if (version != 1)
      throw h5::H5Failure("inspect_version " + std::to_string(version) +
                          " not supported (this rlparity reads 1)");
    r.checkpoint_path = file.read_attr_string("checkpoint_path");
    r.checkpoint_hash = file.read_attr_string("checkpoint_hash");
    r.model_spec = parse_json(file.read_attr_string("model_spec"), "/model_spec");
    r.recommendation = file.read_attr_string("recommendation");
    r.flagged_layers =
        parse_json(file.read_attr_string("flagged_layers"), "/flagged_layers").get<std::vector<int>>();
    r.bf16_first_layers = file.read_attr<int32_t>("bf16_first_layers");
    r.bf16_last_layers = file.read_attr<int32_t>("bf16_last_layers");
    const nlohmann::json order = parse_json(file.read_attr_string("order"), "/order");
    const h5::Group tensors = file.open_group("tensors");
    for (const auto& name : order.get<std::vector<std::string>>()) {
      const h5::Group g = tensors.open_group(name);
      TensorInspection t;
      t.name = name;
      t.layer = static_cast<int>(g.read_attr<int64_t>("layer"));
      t.proj = g.read_attr_string("proj");
      t.dtype = g.read_attr_string("dtype");
      t.rows = g.read_attr<int64_t>("rows");
      t.cols = g.read_attr<int64_t>("cols");
      t.blocks = g.read_attr<int64_t>("blocks");
      t.amax_min = g.read_attr<double>("amax_min");
      t.amax_median = g.read_attr<double>("amax_median");
      t.amax_max = g.read_attr<double>("amax_max");
      for (const ScaleConvention c : inspect_conventions())
        for (const bool pow2 : {false, true}) {
          const std::string pre = stats_prefix(c, pow2);
          QuantStats q;
          q.convention = c;
          q.pow2 = pow2;
          q.snr_db = g.read_attr<double>(pre + "snr_db");
          q.rel_fro_err = g.read_attr<double>(pre + "rel_fro_err");
          q.saturated = g.read_attr<int64_t>(pre + "saturated");
          q.clipped = g.read_attr<int64_t>(pre + "clipped");
          q.flushed = g.read_attr<int64_t>(pre + "flushed");
          q.nonfinite = g.read_attr<int64_t>(pre + "nonfinite");
          q.blocks_differ_frac = g.read_attr<double>(pre + "blocks_differ_frac");
          q.blocks_differ =
              static_cast<int64_t>(std::llround(q.blocks_differ_frac * static_cast<double>(t.blocks)));
          t.stats.push_back(q);
        }
      // A pre-quantized fp8 tensor's stored-vs-requantized comparison: all of it or none.
      for (const bool pow2 : {false, true})  // compare_stored's order: scale mode outer
        for (const ScaleConvention c : inspect_conventions()) {
          const std::string pre = "stored_" + stats_prefix(c, pow2);
          if (!g.has_attr(pre + "codes_differ_frac")) continue;
          StoredComparison q;
          q.convention = c;
          q.pow2 = pow2;
          q.codes_differ_frac = g.read_attr<double>(pre + "codes_differ_frac");
          q.scales_differ_frac = g.read_attr<double>(pre + "scales_differ_frac");
          q.scale_ratio_min = g.read_attr<double>(pre + "scale_ratio_min");
          q.scale_ratio_max = g.read_attr<double>(pre + "scale_ratio_max");
          t.stored.push_back(q);
        }
      if (!t.stored.empty() && t.stored.size() != t.stats.size())
        throw h5::H5Failure("/tensors/" + name + ": stored_* attributes for " +
                            std::to_string(t.stored.size()) + " of the " + std::to_string(t.stats.size()) +
                            " conventions");
      r.tensors.push_back(std::move(t));
    }
    const h5::Group layers = file.open_group("layers");
    const auto idx = layers.read_dataset<double>("layer");
    const auto snr = layers.read_dataset<double>("worst_snr_db");
    const auto flagged = layers.read_dataset<double>("flagged");
    const auto spread = layers.read_dataset<double>("max_amax_spread");
    const auto worst = layers.read_string_dataset("worst_tensor");
    if (snr.size() != idx.size() || flagged.size() != idx.size() || spread.size() != idx.size() ||
        worst.size() != idx.size())
      throw h5::H5Failure("/layers: datasets of different lengths");
    for (std::size_t i = 0; i < idx.size(); ++i)
      r.layers.push_back({static_cast<int>(idx[i]), snr[i], worst[i], spread[i], flagged[i] != 0.0});
  });
  return r;
}

}  // namespace rlp
