// The result of one run, as a domain type: what replay and compare produce (per-token results and
// the metrics computed from them), what io/run_file.hpp stores as HDF5 (schema v1,
// docs/hdf5-schema.md), and what gate, summary and report read back. Data flows one way:
// replay/compare -> metrics -> RunData -> write_run_file -> HDF5 -> read_run_file -> gate/report.
// A leaf header (std and JSON only): every stage names the data without depending on another stage.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace rlp {

// The run-file schema version this form corresponds to (io/run_file.hpp writes and checks it).
inline constexpr int kSchemaVersion = 1;

// A MoE checkpoint's router choices at each response token (/recipes/<name>/routing,
// docs/hdf5-schema.md): row i is the position whose output scores response token i, aligned with
// `tokens`; M = the MoE layers in layer order, k = experts per token. Empty for dense models.
struct RoutingResult {
  int moe_layers = 0, k = 0;
  std::vector<int32_t> moe_layer_index;                             // M: the decoder layer of each MoE layer
  std::vector<int32_t> gen_experts, train_experts, oracle_experts;  // tokens x M x k, ids ascending
  std::vector<double> margin_oracle;  // tokens x M: p_k - p_(k+1) of the oracle's router
  // Per MoE layer (length M): flip_frac, gen_flip_oracle_frac, train_flip_oracle_frac.
  std::map<std::string, std::vector<double>> layers;
  bool empty() const { return moe_layers == 0; }
};

struct RecipeResult {
  std::string name;         // "bf16", "fp8-gen", ... or a source name for compare
  nlohmann::json settings;  // full recipe and both paths' knobs (stored as JSON attribute "settings")
  // Per response token, in sequence order, aligned with the response tokens of /inputs.
  std::map<std::string, std::vector<double>> tokens;
  // Per sequence (length S).
  std::map<std::string, std::vector<double>> sequences;
  // Per layer (length = number of layers; index 0 = embedding output is not included).
  std::map<std::string, std::vector<double>> layers;
  // Per response token and layer (row-major, tokens x layers): |h_gen - h_train| / |h_train| of the
  // token's hidden state after each decoder layer (/recipes/<name>/layers/token_rel_l2, float32);
  // empty for a compare run, which has no hidden states.
  std::vector<float> token_rel_l2;
  // Per response token, the log ratios against a real engine's logprobs (engine_side.hpp):
  // log_ratio_engine_{gen,train,oracle}; empty when the inputs carry none. /recipes/<name>/engine.
  std::map<std::string, std::vector<double>> engine;
  // MoE checkpoints only: each path's router choices, the oracle's margins and the per-layer flip
  // statistics (/recipes/<name>/routing; read_run_file reads them back).
  RoutingResult routing;
  // Summary statistics, stored as attributes of /recipes/<name>.
  std::map<std::string, double> summary;
};

// One attribution table (replay --attribute, --kv-scales stale:DIR), stored as the group
// /attribution/<kind>: every column (numeric or string) has the same length, one row per layer /
// knob / candidate / recipe; `info` holds the settings and the derived conclusions (JSON string
// attribute "info"). Kinds and columns: docs/hdf5-schema.md.
struct AttributionTable {
  std::map<std::string, std::vector<double>> values;       // float64 datasets
  std::map<std::string, std::vector<std::string>> labels;  // string datasets
  nlohmann::json info = nlohmann::json::object();
  bool operator==(const AttributionTable&) const = default;
};

struct RunData {
  // Root attributes.
  int schema_version = kSchemaVersion;
  std::string tool_version;
  std::string command_line;
  std::string checkpoint_path;
  std::string checkpoint_hash;  // hex digest of config + tensor bytes
  std::string created;          // ISO 8601 UTC; not part of the determinism contract
  uint64_t seed = 0;
  nlohmann::json model_spec;  // stored as a JSON string attribute
  nlohmann::json extra;       // other run-level attributes (backend, inputs path, ...), JSON

  // /inputs: ragged token ids as flat + offsets.
  std::vector<int32_t> token_ids;       // all sequences concatenated (prompt + response)
  std::vector<int64_t> seq_offsets;     // S+1
  std::vector<int32_t> prompt_lengths;  // S
  std::vector<std::string> seq_ids;     // S, the "id" of each input line
  std::vector<double> engine_logprobs;  // optional: a real engine's generation logprobs, per response token

  std::vector<RecipeResult> recipes;

  // /attribution/<kind> (optional; absent from files without attribution): "layers",
  // "layer_candidates", "knobs", "kv_scales".
  std::map<std::string, AttributionTable> attribution;

  std::size_t num_sequences() const { return prompt_lengths.size(); }
};

}  // namespace rlp
