#include "rlparity/replay/sequence_sharding.hpp"

#include <algorithm>

namespace rlp {

Sharding shard_sequences(const std::vector<InputSequence>& inputs, int ranks, int rank, int max_new_tokens,
                         int max_positions) {
  std::vector<int64_t> cost(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const auto prompt = static_cast<int64_t>(inputs[i].prompt.size());
    const int64_t response = inputs[i].has_response
                                 ? static_cast<int64_t>(inputs[i].response.size())
                                 : std::clamp<int64_t>(max_positions - prompt, 0, max_new_tokens);
    cost[i] = prompt + 2 * response;
  }
  return shard_by_cost(cost, ranks, rank);
}

}  // namespace rlp
