// Replay attribution (docs/inspect.md, "Attribution"): where the generation/training divergence of
// a recipe comes from, measured by extra replays over the same tokens.
//   layers   per decoder layer l, the divergence when only layer l runs fp8 on the generation side
//            (training side and every other layer bf16, fp8 KV cache off); ranked; then every
//            (--bf16-first-layers F, --bf16-last-layers K), F, K in 0..max_edge, replayed with the
//            full recipe, and the one removing the most divergence per bf16 layer recommended.
//   knobs    both paths set to the recipe's training path (all knobs aligned: zero divergence), then
//            each knob whose generation value differs set alone to its generation value.
//   kv_scales each recipe with an fp8 KV cache replayed with recalibrated and with stale scales.
// Each replay runs without the oracle; results are bit-identical across runs and thread counts.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "rlparity/model/checkpoint.hpp"
#include "rlparity/replay/inputs.hpp"
#include "rlparity/replay/replay.hpp"
#include "rlparity/replay/replay_plan.hpp"
#include "rlparity/run/run_data.hpp"

namespace rlp {

using AttributionLog = std::function<void(const std::string&)>;

// Runs the plan's attributions (ReplayPlan::attribution) and stores them in run.attribution
// ("layers", "layer_candidates", "knobs", "kv_scales"). `inputs` must hold responses (run it after
// run_replay). The plan's options supply the recipe options (user knobs, pow2 scales), the KV
// scale method and stale directory.
void run_attribution(const Checkpoint& ckpt, const std::vector<InputSequence>& inputs, const ReplayPlan& plan,
                     RunData& run, const AttributionLog& log = {});
// The same with the plan made here (InputError for options that cannot be attributed).
void run_attribution(const Checkpoint& ckpt, const std::vector<InputSequence>& inputs,
                     const ReplayOptions& replay, const AttributionOptions& options, RunData& run,
                     const AttributionLog& log = {});

// The attribution tables of a run, as printed by replay.
std::string format_attribution(const RunData& run);

}  // namespace rlp
