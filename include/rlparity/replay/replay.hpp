// Replay: for each recipe, the generation path (prefill + token-by-token decode with a KV cache)
// and the training path (teacher-forced) run over identical tokens and weights, the float64 oracle
// runs once, and every response token's full-vocabulary distributions are reduced to the per-token
// metrics of DESIGN section 5 as they stream by (memory grows with one sequence, not the run).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rlparity/model/checkpoint.hpp"
#include "rlparity/model/weights.hpp"
#include "rlparity/replay/inputs.hpp"
#include "rlparity/replay/path_runner.hpp"
#include "rlparity/replay/recipe.hpp"
#include "rlparity/replay/replay_plan.hpp"
#include "rlparity/run/run_data.hpp"

namespace rlp {

// Sequences replayed together: each emulated path keeps R x vocab log-prob rows per sequence of the
// group (memory), and a group's decode steps share one pass over the weights (speed: a decode GEMM
// of 16 rows runs 16-lane vectors, measured ~1/3 cheaper per row than 8; bench_numerics). At most
// kReplayGroup sequences, fewer when the two paths' kept rows (8 B x R x vocab per sequence) would
// pass kGroupRowBytes: long responses over a large vocabulary replay in smaller groups. Grouping
// never changes results. `cap` replaces kReplayGroup: a plan with no decoding path has nothing to
// share between a group's sequences and replays one sequence per worker (ReplayPlan::group_cap).
inline constexpr std::size_t kReplayGroup = 16;
inline constexpr uint64_t kGroupRowBytes = uint64_t{2} << 30;
std::size_t replay_group_size(const ModelSpec& spec, std::size_t sequences, uint64_t longest_response,
                              std::size_t cap = kReplayGroup);

// Groups replayed as one block: every path of the plan's schedule runs over the block's groups
// before the next path, so a block's outputs wait in memory: per sequence, the paths waiting for
// their recipe's other path (schedule_waiting_paths) and the running one's log-prob rows and hidden
// states at 4 B (deferred_heads: the final hidden rows their LM heads read in place of the log-prob
// rows, which the metrics compute kHeadRows at a time; the CPU paths), and the oracle's hidden
// states and log-probs at 8 B. As many groups as keep that
// under kBlockKeptBytes, at least one. Blocks never change results; each prepares the fp8 forms anew.
// A plan whose paths all read one form runs blocks of one group on the CPU emulation and keeps the
// form across them (ReplayPlan::blocks_of_one_group): nothing is prepared twice, and only one
// group's outputs wait.
inline constexpr uint64_t kBlockKeptBytes = uint64_t{2} << 30;
uint64_t replay_kept_bytes_per_sequence(const ModelSpec& spec, std::size_t waiting_paths,
                                        uint64_t longest_response, bool oracle, bool deferred_heads);
std::size_t replay_block_groups(const ModelSpec& spec, std::size_t waiting_paths, std::size_t group_size,
                                uint64_t longest_response, bool oracle, bool deferred_heads);

using ProgressFn = std::function<void(int64_t tokens_done, int64_t tokens_total)>;

// Prepared weights kept across replays of one checkpoint (a sweep's points), by weights_key: a form
// prepared once is read by every later replay that needs it. Not thread-safe (one replay at a time).
struct PreparedWeightsCache {
  std::map<std::string, std::unique_ptr<PreparedWeights>> by_key;
};

// A sequence with its response as the paths take it: prompt + response tokens, the split.
SeqTokens seq_tokens(const InputSequence& in);

// Fills in missing responses (sampling), then runs every recipe of the plan (made for ckpt's
// spec). `inputs` gains the sampled responses. Throws InputError for inputs the plan cannot replay.
// With `cache` (for ckpt only), prepared weights come from and go to it; results do not change.
RunData run_replay(const Checkpoint& ckpt, std::vector<InputSequence>& inputs, const ReplayPlan& plan,
                   const ProgressFn& progress = {}, PreparedWeightsCache* cache = nullptr);

// Only the sampling step of run_replay: fills in every missing response with the plan's sampler
// (the same responses run_replay would sample with this plan).
void sample_missing_responses(const Checkpoint& ckpt, std::vector<InputSequence>& inputs,
                              const ReplayPlan& plan, PreparedWeightsCache* cache = nullptr);
// The same with the plan made here from `options` (InputError for bad options).
RunData run_replay(const Checkpoint& ckpt, std::vector<InputSequence>& inputs, const ReplayOptions& options,
                   const ProgressFn& progress = {});

}  // namespace rlp
