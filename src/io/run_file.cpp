// HDF5 schema v1 writer/reader (docs/hdf5-schema.md).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "io/h5_util.hpp"
#include "rlparity/io/run_data.hpp"
#include "rlparity/util/atomic_file.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/json_depth.hpp"

namespace rlp {

namespace fs = std::filesystem;
using h5::H5Failure;
using h5::Id;

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

void write_metric_group(hid_t parent, const std::string& name,
                        const std::map<std::string, std::vector<double>>& m, const std::string& base) {
  Id g = h5::create_group(parent, name, base + "/" + name);
  for (const auto& [k, v] : m)
    h5::write_dataset(g.get(), k, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, v.data(), v.size(), sizeof(double),
                      base + "/" + name + "/" + k);
  g.close("close group " + base + "/" + name);
}

void write_contents(hid_t file, const RunData& run) {
  const int32_t version = kSchemaVersion;
  h5::write_attr_scalar(file, "schema_version", H5T_STD_I32LE, H5T_NATIVE_INT32, &version, "/schema_version");
  h5::write_attr_string(file, "tool_version", run.tool_version, "/tool_version");
  h5::write_attr_string(file, "command_line", run.command_line, "/command_line");
  h5::write_attr_string(file, "checkpoint_path", run.checkpoint_path, "/checkpoint_path");
  h5::write_attr_string(file, "checkpoint_hash", run.checkpoint_hash, "/checkpoint_hash");
  h5::write_attr_string(file, "created", run.created, "/created");
  const uint64_t seed = run.seed;
  h5::write_attr_scalar(file, "seed", H5T_STD_U64LE, H5T_NATIVE_UINT64, &seed, "/seed");
  h5::write_attr_string(file, "model_spec", run.model_spec.dump(), "/model_spec");
  h5::write_attr_string(file, "extra", run.extra.dump(), "/extra");
  // The backend that computed the kernel paths, also as plain root attributes (replay runs only):
  // `backend`, and for cuda the device and library versions (docs/hdf5-schema.md).
  if (run.extra.is_object() && run.extra.contains("backend") && run.extra["backend"].is_string()) {
    h5::write_attr_string(file, "backend", run.extra["backend"].get<std::string>(), "/backend");
    const auto info = run.extra.find("backend_info");
    if (info != run.extra.end() && info->is_object())
      for (const auto& [k, v] : info->items())
        h5::write_attr_string(file, k, v.is_string() ? v.get<std::string>() : v.dump(), "/" + k);
  }

  {
    Id in = h5::create_group(file, "inputs", "/inputs");
    h5::write_dataset(in.get(), "token_ids", H5T_STD_I32LE, H5T_NATIVE_INT32, run.token_ids.data(),
                      run.token_ids.size(), sizeof(int32_t), "/inputs/token_ids");
    h5::write_dataset(in.get(), "seq_offsets", H5T_STD_I64LE, H5T_NATIVE_INT64, run.seq_offsets.data(),
                      run.seq_offsets.size(), sizeof(int64_t), "/inputs/seq_offsets");
    h5::write_dataset(in.get(), "prompt_lengths", H5T_STD_I32LE, H5T_NATIVE_INT32, run.prompt_lengths.data(),
                      run.prompt_lengths.size(), sizeof(int32_t), "/inputs/prompt_lengths");
    h5::write_string_dataset(in.get(), "seq_ids", run.seq_ids, "/inputs/seq_ids");
    if (!run.engine_logprobs.empty())
      h5::write_dataset(in.get(), "engine_logprobs", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE,
                        run.engine_logprobs.data(), run.engine_logprobs.size(), sizeof(double),
                        "/inputs/engine_logprobs");
    in.close("close group /inputs");
  }

  Id recipes = h5::create_group(file, "recipes", "/recipes");
  nlohmann::json order = nlohmann::json::array();
  for (const auto& r : run.recipes) order.push_back(r.name);
  h5::write_attr_string(recipes.get(), "order", order.dump(), "/recipes/order");
  for (const auto& r : run.recipes) {
    const std::string base = "/recipes/" + r.name;
    Id g = h5::create_group(recipes.get(), r.name, base);
    h5::write_attr_string(g.get(), "settings", r.settings.dump(), base + "/settings");
    for (const auto& [k, v] : r.summary)
      h5::write_attr_scalar(g.get(), k, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v, base + "/" + k);
    write_metric_group(g.get(), "tokens", r.tokens, base);
    write_metric_group(g.get(), "sequences", r.sequences, base);
    write_metric_group(g.get(), "layers", r.layers, base);
    g.close("close group " + base);
  }
  recipes.close("close group /recipes");

  if (!run.attribution.empty()) {
    Id att = h5::create_group(file, "attribution", "/attribution");
    for (const auto& [kind, t] : run.attribution) {
      const std::string base = "/attribution/" + kind;
      Id g = h5::create_group(att.get(), kind, base);
      h5::write_attr_string(g.get(), "info", t.info.dump(), base + "/info");
      for (const auto& [k, v] : t.values)
        h5::write_dataset(g.get(), k, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, v.data(), v.size(), sizeof(double),
                          base + "/" + k);
      for (const auto& [k, v] : t.labels) h5::write_string_dataset(g.get(), k, v, base + "/" + k);
      g.close("close group " + base);
    }
    att.close("close group /attribution");
  }
}

std::map<std::string, std::vector<double>> read_metric_group(hid_t parent, const std::string& name,
                                                             const std::string& base) {
  std::map<std::string, std::vector<double>> out;
  if (!h5::link_exists(parent, name)) throw H5Failure("missing group " + base + "/" + name);
  Id g = h5::open_group(parent, name, base + "/" + name);
  for (const auto& k : h5::list_links(g.get(), base + "/" + name))
    out[k] = h5::read_dataset<double>(g.get(), k, H5T_NATIVE_DOUBLE, base + "/" + name + "/" + k);
  return out;
}

nlohmann::json parse_json_attr(hid_t obj, const std::string& name, const std::string& what) {
  const std::string s = h5::read_attr_string(obj, name, what);
  if (json_nesting_depth(s) > kMaxJsonDepth)
    throw H5Failure("attribute " + what + " is JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                    " levels");
  try {
    return nlohmann::json::parse(s);
  } catch (const nlohmann::json::exception& e) {
    throw H5Failure("attribute " + what + " is not valid JSON: " + e.what());
  }
}

RunData read_contents(hid_t file) {
  RunData run;
  int64_t version = 0;
  h5::read_attr_scalar(file, "schema_version", H5T_NATIVE_INT64, &version, "/schema_version");
  if (version != kSchemaVersion)
    throw H5Failure("schema version " + std::to_string(version) +
                    " not supported (this rlparity reads version " + std::to_string(kSchemaVersion) + ")");
  run.schema_version = static_cast<int>(version);
  run.tool_version = h5::read_attr_string(file, "tool_version", "/tool_version");
  run.command_line = h5::read_attr_string(file, "command_line", "/command_line");
  run.checkpoint_path = h5::read_attr_string(file, "checkpoint_path", "/checkpoint_path");
  run.checkpoint_hash = h5::read_attr_string(file, "checkpoint_hash", "/checkpoint_hash");
  run.created = h5::read_attr_string(file, "created", "/created");
  h5::read_attr_scalar(file, "seed", H5T_NATIVE_UINT64, &run.seed, "/seed");
  run.model_spec = parse_json_attr(file, "model_spec", "/model_spec");
  run.extra = parse_json_attr(file, "extra", "/extra");

  if (!h5::link_exists(file, "inputs")) throw H5Failure("missing group /inputs");
  {
    Id in = h5::open_group(file, "inputs", "/inputs");
    run.token_ids = h5::read_dataset<int32_t>(in.get(), "token_ids", H5T_NATIVE_INT32, "/inputs/token_ids");
    run.seq_offsets =
        h5::read_dataset<int64_t>(in.get(), "seq_offsets", H5T_NATIVE_INT64, "/inputs/seq_offsets");
    run.prompt_lengths =
        h5::read_dataset<int32_t>(in.get(), "prompt_lengths", H5T_NATIVE_INT32, "/inputs/prompt_lengths");
    run.seq_ids = h5::read_string_dataset(in.get(), "seq_ids", "/inputs/seq_ids");
    if (h5::link_exists(in.get(), "engine_logprobs"))
      run.engine_logprobs =
          h5::read_dataset<double>(in.get(), "engine_logprobs", H5T_NATIVE_DOUBLE, "/inputs/engine_logprobs");
  }

  if (!h5::link_exists(file, "recipes")) throw H5Failure("missing group /recipes");
  Id recipes = h5::open_group(file, "recipes", "/recipes");
  std::vector<std::string> names = h5::list_links(recipes.get(), "/recipes");
  if (h5::attr_exists(recipes.get(), "order")) {
    const nlohmann::json order = parse_json_attr(recipes.get(), "order", "/recipes/order");
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
    const std::string base = "/recipes/" + name;
    RecipeResult r;
    r.name = name;
    Id g = h5::open_group(recipes.get(), name, base);
    r.settings = parse_json_attr(g.get(), "settings", base + "/settings");
    for (const auto& a : h5::list_attributes(g.get(), base)) {
      if (a == "settings" || !h5::attr_is_numeric(g.get(), a, base + "/" + a)) continue;
      double v = 0.0;
      h5::read_attr_scalar(g.get(), a, H5T_NATIVE_DOUBLE, &v, base + "/" + a);
      r.summary[a] = v;
    }
    r.tokens = read_metric_group(g.get(), "tokens", base);
    r.sequences = read_metric_group(g.get(), "sequences", base);
    r.layers = read_metric_group(g.get(), "layers", base);
    run.recipes.push_back(std::move(r));
  }
  if (h5::link_exists(file, "attribution")) {
    Id att = h5::open_group(file, "attribution", "/attribution");
    for (const auto& kind : h5::list_links(att.get(), "/attribution")) {
      const std::string base = "/attribution/" + kind;
      Id g = h5::open_group(att.get(), kind, base);
      AttributionTable t;
      if (h5::attr_exists(g.get(), "info")) t.info = parse_json_attr(g.get(), "info", base + "/info");
      for (const auto& k : h5::list_links(g.get(), base)) {
        if (h5::dataset_is_string(g.get(), k, base + "/" + k))
          t.labels[k] = h5::read_string_dataset(g.get(), k, base + "/" + k);
        else
          t.values[k] = h5::read_dataset<double>(g.get(), k, H5T_NATIVE_DOUBLE, base + "/" + k);
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

  std::lock_guard<std::mutex> lock(h5::h5_mutex());
  try {
    h5::write_file_atomic(path, [&](hid_t file) { write_contents(file, run); });
  } catch (const std::exception& e) {
    RLP_THROW_INPUT("cannot write run file '{}': {}", path, e.what());
  }
}

RunData read_run_file(const std::string& path) {
  RunData run;
  h5::read_file(path, "run file", [&](hid_t file) { run = read_contents(file); });
  return run;
}

}  // namespace rlp
