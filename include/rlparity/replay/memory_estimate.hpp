// Peak-memory estimate of a replay run, for `rlparity replay --max-memory SIZE`: the run is refused
// before any weight is prepared when the estimate exceeds the limit. The estimate is deliberately
// conservative (an upper bound for the CPU backend, not a prediction); each term is listed so a
// refused user sees what dominates. See docs/robustness.md for the formula.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rlparity/model/checkpoint.hpp"
#include "rlparity/replay/inputs.hpp"
#include "rlparity/replay/replay.hpp"
#include "rlparity/replay/replay_plan.hpp"

namespace rlp {

struct MemoryEstimate {
  std::vector<std::pair<std::string, uint64_t>> parts;  // (what, bytes), in the order they are summed
  uint64_t total = 0;
  uint64_t mapped_checkpoint = 0;  // file-backed mapping: reported, not counted (the page cache can drop it)
  // In a job of several ranks (dist/job.hpp) `total` is one rank's (each prepares its own weight
  // forms and holds the gathered results); the ranks on one node share its memory.
  int ranks_on_node = 1;
  uint64_t node_total() const;
  // Multi-line human-readable breakdown, e.g. "  oracle weights (float64, 8 B/param): 2.1 MiB".
  std::string describe() const;
};

// What the estimate needs to know of the checkpoint's files.
struct CheckpointStorage {
  uint64_t mapped_bytes = 0;
  // The 16-bit format every unquantized tensor is stored in, if one (bf16 or fp16): act-dtype forms
  // in that format are views of the mapping (Half16Bits) and hold no memory of their own.
  std::optional<num::Half16> half16;
};
CheckpointStorage checkpoint_storage(const Checkpoint& ckpt);

// Estimates the peak of run_replay(ckpt, inputs, plan) with the plan's worker threads (0: all
// cores). Inputs without a response count as prompt + max_new_tokens tokens. Attribution
// (--attribute) is not included. The prepared forms follow the plan's schedule (path_schedule): the
// most that are alive at once, each prepared before its first path and released after its last.
MemoryEstimate estimate_replay_memory(const ReplayPlan& plan, const std::vector<InputSequence>& inputs,
                                      const CheckpointStorage& storage = {});

// --max-memory: InputError (refusing to start, with the estimate's breakdown) when the estimate for
// this node (all its ranks) exceeds `limit` bytes (0: no limit); `limit_text` is the limit as the
// user wrote it.
void check_memory_limit(const MemoryEstimate& estimate, uint64_t limit, const std::string& limit_text);

// "8G", "512M", "1.5GiB", "64k", "1000000" (bytes); suffixes K/M/G/T (optionally followed by "B" or
// "iB") are powers of 1024, case-insensitive. InputError for anything else or zero.
uint64_t parse_memory_size(const std::string& text);
// 1536 -> "1.5 KiB".
std::string format_bytes(uint64_t bytes);

}  // namespace rlp
