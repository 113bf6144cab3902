// fp8 KV-cache scales. NeMo RL (default) calibrates on the trainer after every step: per layer,
// amax of |q|, |k|, |v| after RoPE and q/k norm for each forward call, the 99.9th percentile of
// those amaxes, times 1.05, divided by 448. vLLM alone computes k_scale = amax(K)/200 and
// v_scale = amax(V)/100 on its first forward.
#pragma once
#include <vector>

#include "rlparity/model/checkpoint.hpp"
#include "rlparity/model/emulated_ops.hpp"
#include "rlparity/replay/inputs.hpp"
#include "rlparity/replay/replay.hpp"
#include "rlparity/replay/sequence_sharding.hpp"

namespace rlp {

// Runs the bf16 training-style path over every sequence (prompt + response) of `inputs` on
// `ckpt` and returns per-layer scales by `method`. With `shard`, each rank of the job runs its own
// sequences and the per-call amaxes are gathered: every rank returns the same scales, the ones one
// process computes.
KvScales calibrate_kv_scales(const Checkpoint& ckpt, const std::vector<InputSequence>& inputs,
                             KvScaleMethod method, const Sharding* shard = nullptr);

}  // namespace rlp
