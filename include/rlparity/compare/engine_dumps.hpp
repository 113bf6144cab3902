// `rlparity compare`: reads per-token logprobs that real engines dumped (a generation engine's
// rollout logprobs and a trainer's logprobs of the same tokens) and turns them into a run file with
// the same per-token, per-sequence and summary statistics as replay (docs/compare.md).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "rlparity/compare/engine_responses.hpp"
#include "rlparity/metrics/statistics.hpp"
#include "rlparity/run/run_data.hpp"

namespace rlp::compare {

// Printed by the CLI and stored in the recipe settings and the run's extra attributes.
inline constexpr const char* kKlEstimatorNote =
    "sampled-token k1/k3 only; full-vocabulary KL needs the full distributions, which a dump does not carry";

struct DumpSequence {
  std::string id;
  std::vector<int32_t> prompt, response;
  std::vector<double> gen_logprobs, train_logprobs;  // one per response token
  // Both sides' top-k per response token, when both engine responses carried them (else empty).
  std::vector<std::vector<TopLogprob>> gen_top, train_top;
  std::string where;  // "file:line" it came from
};

// Longest accepted line of a dump file (an InputError names the file and line beyond it).
inline constexpr std::size_t kMaxDumpLineBytes = std::size_t{64} << 20;  // 64 MiB

// One JSONL file, each line {"id", "prompt", "response", "gen_logprobs", "train_logprobs"}.
// "id": string or integer; "prompt": array of token ids (may be empty or absent);
// "response": non-empty array of token ids; both logprob arrays as long as "response". Other keys
// are ignored. Blank lines are skipped.
std::vector<DumpSequence> read_combined_dump(const std::string& path);

// Two JSONL files, each line {"id", "prompt", "response", "logprobs"} or an engine's response (or an
// array of them; engine_responses.hpp: one sequence per choice/output, its logprobs that side's),
// detected per line unless `format` (--inputs-format) forces one; joined on "id": every id must
// appear in both, once, with the same prompt and response. Order: the generation file's.
std::vector<DumpSequence> read_split_dumps(const std::string& gen_path, const std::string& train_path,
                                           std::optional<ResponseFormat> format = std::nullopt);

// prime-rl's trainer token export (prime_rl/trainer/rl/token_export.py): DIR is an output dir
// holding token_exports/, a token_exports/ dir holding step_N/, or one step_N/ dir holding
// rank_R.jsonl. Each line is one sequence with aligned per-position arrays "token_ids",
// "loss_mask", "inference_logprobs" (generation) and "trainer_logprobs" (training); response tokens
// are the loss_mask positions, the prompt the positions before the first of them (unmasked
// positions after it, e.g. tool output in multi-turn rollouts, are dropped and counted in
// `dropped`). id = "[run_id/]step_<export_step>/rank_<rank>/<export_sequence_idx>".
std::vector<DumpSequence> read_prime_rl_exports(const std::string& dir, std::size_t* dropped = nullptr,
                                                std::vector<std::string>* files = nullptr);

// Builds the run (one recipe `name`, tokens logp_gen/logp_train, no logp_oracle, no layers),
// finalizes its statistics, and records `source` (a JSON object describing the inputs) in the
// run's extra attributes. InputError for an empty list or an invalid recipe name.
RunData build_compare_run(const std::vector<DumpSequence>& seqs, const std::string& name,
                          const nlohmann::json& source, const StatsOptions& stats = {});

}  // namespace rlp::compare
