// A replay's sequences over the ranks of a job (dist/sharding.hpp).
#pragma once
#include "rlparity/dist/sharding.hpp"
#include "rlparity/replay/inputs.hpp"

namespace rlp {

// A sequence costs its prompt plus twice its response (the response is decoded token by token on
// generation paths and scored on both), a missing response counted at `max_new_tokens` (capped by
// the context).
Sharding shard_sequences(const std::vector<InputSequence>& inputs, int ranks, int rank, int max_new_tokens,
                         int max_positions);

}  // namespace rlp
