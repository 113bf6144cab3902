// HDF5 schema v1 writer/reader (docs/hdf5-schema.md).
#include "rlparity/io/run_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <set>

#include "rlparity/io/h5_file.hpp"
#include "rlparity/util/atomic_file.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/json_depth.hpp"

namespace rlp {

namespace fs = std::filesystem;
using h5::H5Failure;

namespace {

// Checks names used as HDF5 link/attribute names.
void check_name(const std::string& name, const std::string& what) {
  if (name.empty() || name == "." || name.find('/') != std::string::npos ||
      name.find('\0') != std::string::npos)
    throw H5Failure(what + " name '" + name + "' is not a valid HDF5 name (empty, '.', or contains '/')");
}

// The consistency rules shared by writer and reader (a written file always reads back).
void validate(const RunData& run) {
  const std::size_t S = run.prompt_lengths.size();
  if (run.seq_offsets.size() != S + 1)
    throw H5Failure("/inputs/seq_offsets has " + std::to_string(run.seq_offsets.size()) +
                    " entries, expected S+1 = " + std::to_string(S + 1) +
                    " (S = length of /inputs/prompt_lengths)");
  if (run.seq_offsets.front() != 0) throw H5Failure("/inputs/seq_offsets does not start at 0");
  std::size_t response_tokens = 0;
  for (std::size_t s = 0; s < S; ++s) {
    const int64_t len = run.seq_offsets[s + 1] - run.seq_offsets[s];
    if (len < 0) throw H5Failure("/inputs/seq_offsets decreases at index " + std::to_string(s + 1));
    if (run.prompt_lengths[s] < 0 || run.prompt_lengths[s] > len)
      throw H5Failure("/inputs/prompt_lengths[" + std::to_string(s) +
                      "] = " + std::to_string(run.prompt_lengths[s]) + " is outside [0, " +
                      std::to_string(len) + "] (the sequence length)");
    response_tokens += static_cast<std::size_t>(len - run.prompt_lengths[s]);
  }
  if (run.seq_offsets.back() != static_cast<int64_t>(run.token_ids.size()))
    throw H5Failure("/inputs/seq_offsets ends at " + std::to_string(run.seq_offsets.back()) +
                    " but /inputs/token_ids has " + std::to_string(run.token_ids.size()) + " tokens");
  if (run.seq_ids.size() != S)
    throw H5Failure("/inputs/seq_ids has " + std::to_string(run.seq_ids.size()) + " entries, expected " +
                    std::to_string(S));
  if (!run.engine_logprobs.empty() && run.engine_logprobs.size() != response_tokens)
    throw H5Failure("/inputs/engine_logprobs has " + std::to_string(run.engine_logprobs.size()) +
                    " values, expected " + std::to_string(response_tokens) + " (number of response tokens)");
  std::set<std::string> names;
  for (const auto& r : run.recipes) {
    check_name(r.name, "recipe");
    if (!names.insert(r.name).second) throw H5Failure("recipe '" + r.name + "' appears twice");
    const std::string base = "/recipes/" + r.name;
    for (const auto& [k, v] : r.tokens) {
      check_name(k, base + "/tokens metric");
      if (v.size() != response_tokens)
        throw H5Failure(base + "/tokens/" + k + " has " + std::to_string(v.size()) + " values, expected " +
                        std::to_string(response_tokens) + " (number of response tokens)");
    }
    for (const auto& [k, v] : r.sequences) {
      check_name(k, base + "/sequences metric");
      if (v.size() != S)
        throw H5Failure(base + "/sequences/" + k + " has " + std::to_string(v.size()) + " values, expected " +
                        std::to_string(S) + " (number of sequences)");
    }
    for (const auto& [k, v] : r.layers) check_name(k, base + "/layers metric");
    for (const auto& [k, v] : r.engine) {
      check_name(k, base + "/engine metric");
      if (v.size() != response_tokens)
        throw H5Failure(base + "/engine/" + k + " has " + std::to_string(v.size()) + " values, expected " +
                        std::to_string(response_tokens) + " (number of response tokens)");
    }
    for (const auto& [k, v] : r.summary) {
      check_name(k, base + " summary attribute");
      if (k == "settings") throw H5Failure(base + ": summary attribute may not be named 'settings'");
    }
  }
  for (const auto& [kind, t] : run.attribution) {
    check_name(kind, "attribution kind");
    const std::string base = "/attribution/" + kind;
    std::size_t rows = 0;
    bool first = true;
    auto column = [&](const std::string& k, std::size_t n) {
      check_name(k, base + " column");
      if (first) rows = n;
      first = false;
      if (n != rows)
        throw H5Failure(base + "/" + k + " has " + std::to_string(n) + " rows, other columns have " +
                        std::to_string(rows));
    };
    for (const auto& [k, v] : t.values) column(k, v.size());
    for (const auto& [k, v] : t.labels) {
      if (t.values.count(k)) throw H5Failure(base + "/" + k + " is both a numeric and a string column");
      column(k, v.size());
    }
  }
}

// A group of 1-D float64 datasets; `extra` (optional) adds datasets of other shapes before it closes.
void write_metric_group(h5::Group& parent, const std::string& name,
                        const std::map<std::string, std::vector<double>>& metrics,
                        const std::function<void(h5::Group&)>& extra = {}) {
  h5::Group g = parent.create_group(name);
  for (const auto& [k, v] : metrics) g.write_dataset(k, v);
  if (extra) extra(g);
  g.close();
}

// The 2-D token x layer dataset of a recipe's /layers group.
constexpr const char* kTokenRelL2 = "token_rel_l2";

// /recipes/<name>/routing of a MoE run (docs/hdf5-schema.md): token x MoE layer (x k) arrays.
void write_routing_group(h5::Group& recipe, const RoutingResult& rt) {
  h5::Group g = recipe.create_group("routing");
  const auto M = static_cast<uint64_t>(rt.moe_layers), k = static_cast<uint64_t>(rt.k);
  const uint64_t T = M > 0 && k > 0 ? rt.gen_experts.size() / (M * k) : 0;
  g.write_dataset("moe_layers", rt.moe_layer_index);
  g.write_dataset("gen_experts", rt.gen_experts, {T, M, k});
  g.write_dataset("train_experts", rt.train_experts, {T, M, k});
  if (!rt.oracle_experts.empty()) {
    g.write_dataset("oracle_experts", rt.oracle_experts, {T, M, k});
    g.write_dataset("margin_oracle", rt.margin_oracle, {T, M});
  }
  for (const auto& [name, values] : rt.layers) g.write_dataset(name, values);
  g.close();
}

void write_contents(h5::Group& file, const RunData& run) {
  file.write_attr<int32_t>("schema_version", kSchemaVersion);
  file.write_attr_string("tool_version", run.tool_version);
  file.write_attr_string("command_line", run.command_line);
  file.write_attr_string("checkpoint_path", run.checkpoint_path);
  file.write_attr_string("checkpoint_hash", run.checkpoint_hash);
  file.write_attr_string("created", run.created);
  file.write_attr<uint64_t>("seed", run.seed);
  file.write_attr_string("model_spec", run.model_spec.dump());
  file.write_attr_string("extra", run.extra.dump());
  // The backend that computed the kernel paths, also as plain root attributes (replay runs only):
  // `backend`, and for cuda the device and library versions (docs/hdf5-schema.md).
  if (run.extra.is_object() && run.extra.contains("backend") && run.extra["backend"].is_string()) {
    file.write_attr_string("backend", run.extra["backend"].get<std::string>());
    const auto info = run.extra.find("backend_info");
    if (info != run.extra.end() && info->is_object())
      for (const auto& [k, v] : info->items())
        file.write_attr_string(k, v.is_string() ? v.get<std::string>() : v.dump());
  }

  {
    h5::Group in = file.create_group("inputs");
    in.write_dataset("token_ids", run.token_ids);
    in.write_dataset("seq_offsets", run.seq_offsets);
    in.write_dataset("prompt_lengths", run.prompt_lengths);
    in.write_dataset("seq_ids", run.seq_ids);
    if (!run.engine_logprobs.empty()) in.write_dataset("engine_logprobs", run.engine_logprobs);
    in.close();
  }

  h5::Group recipes = file.create_group("recipes");
  nlohmann::json order = nlohmann::json::array();
  for (const auto& r : run.recipes) order.push_back(r.name);
  recipes.write_attr_string("order", order.dump());
  for (const auto& r : run.recipes) {
    h5::Group g = recipes.create_group(r.name);
    g.write_attr_string("settings", r.settings.dump());
    for (const auto& [k, v] : r.summary) g.write_attr<double>(k, v);
    write_metric_group(g, "tokens", r.tokens);
    write_metric_group(g, "sequences", r.sequences);
    write_metric_group(g, "layers", r.layers, [&](h5::Group& layers) {
      if (r.token_rel_l2.empty()) return;
      const auto L = static_cast<uint64_t>(
          r.layers.count("rel_l2_gen_train") ? r.layers.at("rel_l2_gen_train").size() : 0);
      if (L == 0 || r.token_rel_l2.size() % L != 0)
        throw H5Failure("recipe '" + r.name + "': token_rel_l2 holds " +
                        std::to_string(r.token_rel_l2.size()) + " values, not tokens x " + std::to_string(L) +
                        " layers");
      layers.write_dataset(kTokenRelL2, r.token_rel_l2, {r.token_rel_l2.size() / L, L});
    });
    if (!r.engine.empty()) write_metric_group(g, "engine", r.engine);
    if (!r.routing.empty()) write_routing_group(g, r.routing);
    g.close();
  }
  recipes.close();

  if (!run.attribution.empty()) {
    h5::Group att = file.create_group("attribution");
    for (const auto& [kind, t] : run.attribution) {
      h5::Group g = att.create_group(kind);
      g.write_attr_string("info", t.info.dump());
      for (const auto& [k, v] : t.values) g.write_dataset(k, v);
      for (const auto& [k, v] : t.labels) g.write_dataset(k, v);
      g.close();
    }
    att.close();
  }
}

std::map<std::string, std::vector<double>> read_metric_group(const h5::Group& parent,
                                                             const std::string& name) {
  std::map<std::string, std::vector<double>> out;
  if (!parent.has_link(name)) throw H5Failure("missing group " + parent.path() + "/" + name);
  const h5::Group g = parent.open_group(name);
  for (const auto& k : g.links())
    if (k != kTokenRelL2) out[k] = g.read_dataset<double>(k);
  return out;
}

// /recipes/<name>/layers/token_rel_l2 (tokens x layers, float32), checked against the recipe's
// response tokens and layers; empty when absent (compare runs, files of earlier versions).
std::vector<float> read_token_rel_l2(const h5::Group& recipe, std::size_t tokens, std::size_t layers) {
  const h5::Group g = recipe.open_group("layers");
  if (!g.has_link(kTokenRelL2)) return {};
  std::vector<uint64_t> shape;
  std::vector<float> v = g.read_dataset<float>(kTokenRelL2, shape);
  if (shape != std::vector<uint64_t>{tokens, layers})
    throw H5Failure(g.path() + "/" + kTokenRelL2 + " is not (" + std::to_string(tokens) + " tokens, " +
                    std::to_string(layers) + " layers)");
  return v;
}

// /recipes/<name>/routing back into a RoutingResult, every array's shape checked against the
// MoE layers and the recipe's `tokens` response tokens.
RoutingResult read_routing_group(const h5::Group& recipe, std::size_t tokens) {
  const h5::Group g = recipe.open_group("routing");
  RoutingResult rt;
  rt.moe_layer_index = g.read_dataset<int32_t>("moe_layers");
  rt.moe_layers = static_cast<int>(rt.moe_layer_index.size());
  const auto M = static_cast<uint64_t>(rt.moe_layers);
  auto ids = [&](const char* name, std::vector<int32_t>& out) {
    std::vector<uint64_t> shape;
    out = g.read_dataset<int32_t>(name, shape);
    if (shape.size() != 3 || shape[0] != tokens || shape[1] != M || shape[2] == 0 ||
        (rt.k > 0 && shape[2] != static_cast<uint64_t>(rt.k)))
      throw H5Failure(g.path() + "/" + name + " is not (" + std::to_string(tokens) + " tokens, " +
                      std::to_string(M) + " MoE layers, k)");
    rt.k = static_cast<int>(shape[2]);
  };
  ids("gen_experts", rt.gen_experts);
  ids("train_experts", rt.train_experts);
  if (g.has_link("oracle_experts")) {
    ids("oracle_experts", rt.oracle_experts);
    std::vector<uint64_t> shape;
    rt.margin_oracle = g.read_dataset<double>("margin_oracle", shape);
    if (shape != std::vector<uint64_t>{tokens, M})
      throw H5Failure(g.path() + "/margin_oracle is not (" + std::to_string(tokens) + " tokens, " +
                      std::to_string(M) + " MoE layers)");
  }
  for (const auto& name : g.links()) {
    if (name == "moe_layers" || name == "gen_experts" || name == "train_experts" ||
        name == "oracle_experts" || name == "margin_oracle")
      continue;
    rt.layers[name] = g.read_dataset<double>(name);
    if (rt.layers[name].size() != M)
      throw H5Failure(g.path() + "/" + name + " has " + std::to_string(rt.layers[name].size()) +
                      " values for " + std::to_string(M) + " MoE layers");
  }
  return rt;
}

nlohmann::json parse_json_attr(const h5::Group& obj, const std::string& name) {
  const std::string what = obj.path() + "/" + name;
  const std::string s = obj.read_attr_string(name);
  if (json_nesting_depth(s) > kMaxJsonDepth)
    throw H5Failure("attribute " + what + " is JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                    " levels");
  try {
    return nlohmann::json::parse(s);
  } catch (const nlohmann::json::exception& e) {
    throw H5Failure("attribute " + what + " is not valid JSON: " + e.what());
  }
}

RunData read_contents(const h5::Group& file) {
  RunData run;
  const int64_t version = file.read_attr<int64_t>("schema_version");
  if (version != kSchemaVersion)
    throw H5Failure("schema version " + std::to_string(version) +
                    " not supported (this rlparity reads version " + std::to_string(kSchemaVersion) + ")");
  run.schema_version = static_cast<int>(version);
  run.tool_version = file.read_attr_string("tool_version");
  run.command_line = file.read_attr_string("command_line");
  run.checkpoint_path = file.read_attr_string("checkpoint_path");
  run.checkpoint_hash = file.read_attr_string("checkpoint_hash");
  run.created = file.read_attr_string("created");
  run.seed = file.read_attr<uint64_t>("seed");
  run.model_spec = parse_json_attr(file, "model_spec");
  run.extra = parse_json_attr(file, "extra");

  if (!file.has_link("inputs")) throw H5Failure("missing group /inputs");
  {
    const h5::Group in = file.open_group("inputs");
    run.token_ids = in.read_dataset<int32_t>("token_ids");
    run.seq_offsets = in.read_dataset<int64_t>("seq_offsets");
    run.prompt_lengths = in.read_dataset<int32_t>("prompt_lengths");
    run.seq_ids = in.read_string_dataset("seq_ids");
    if (in.has_link("engine_logprobs")) run.engine_logprobs = in.read_dataset<double>("engine_logprobs");
  }

  if (!file.has_link("recipes")) throw H5Failure("missing group /recipes");
  const h5::Group recipes = file.open_group("recipes");
  std::vector<std::string> names = recipes.links();
  if (recipes.has_attr("order")) {
    const nlohmann::json order = parse_json_attr(recipes, "order");
    std::vector<std::string> ordered;
    if (order.is_array())
      for (const auto& e : order)
        if (e.is_string()) ordered.push_back(e.get<std::string>());
    std::vector<std::string> a = ordered, b = names;
    std::sort(a.begin(), a.end());
    if (a != b) throw H5Failure("attribute /recipes/order does not list the groups under /recipes");
    names = ordered;
  }
  for (const auto& name : names) {
    RecipeResult r;
    r.name = name;
    const h5::Group g = recipes.open_group(name);
    r.settings = parse_json_attr(g, "settings");
    for (const auto& a : g.attributes()) {
      if (a == "settings" || !g.attr_is_numeric(a)) continue;
      r.summary[a] = g.read_attr<double>(a);
    }
    r.tokens = read_metric_group(g, "tokens");
    r.sequences = read_metric_group(g, "sequences");
    r.layers = read_metric_group(g, "layers");
    {
      const auto tok = r.tokens.find("logp_gen");
      const auto lay = r.layers.find("rel_l2_gen_train");
      r.token_rel_l2 = read_token_rel_l2(g, tok == r.tokens.end() ? 0 : tok->second.size(),
                                         lay == r.layers.end() ? 0 : lay->second.size());
    }
    if (g.has_link("engine")) r.engine = read_metric_group(g, "engine");
    if (g.has_link("routing")) {
      const auto it = r.tokens.find("logp_gen");
      r.routing = read_routing_group(g, it == r.tokens.end() ? 0 : it->second.size());
    }
    run.recipes.push_back(std::move(r));
  }
  if (file.has_link("attribution")) {
    const h5::Group att = file.open_group("attribution");
    for (const auto& kind : att.links()) {
      const h5::Group g = att.open_group(kind);
      AttributionTable t;
      if (g.has_attr("info")) t.info = parse_json_attr(g, "info");
      for (const auto& k : g.links()) {
        if (g.dataset_is_string(k))
          t.labels[k] = g.read_string_dataset(k);
        else
          t.values[k] = g.read_dataset<double>(k);
      }
      run.attribution[kind] = std::move(t);
    }
  }
  validate(run);
  return run;
}

}  // namespace

void write_run_file(const std::string& path, const RunData& run, bool force) {
  check_output_path(path, "run file", force);
  try {
    validate(run);
  } catch (const H5Failure& e) {
    RLP_THROW_INPUT("cannot write run file '{}': inconsistent run data: {}", path, e.what());
  }

  h5::write_file_atomic(path, "run file", [&](h5::Group& file) { write_contents(file, run); });
}

RunData read_run_file(const std::string& path) {
  RunData run;
  h5::read_file(path, "run file", [&](h5::Group& file) { run = read_contents(file); });
  return run;
}

}  // namespace rlp
