#include "rlparity/dist/sharding.hpp"

#include <algorithm>
#include <numeric>

namespace rlp {

Sharding shard_by_cost(const std::vector<int64_t>& cost, int ranks, int rank) {
  const std::size_t n = cost.size(), k = static_cast<std::size_t>(std::max(1, ranks));
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return cost[a] > cost[b]; });
  Sharding s;
  s.rank = rank;
  s.owner.assign(n, 0);
  s.sequences.resize(k);
  std::vector<int64_t> load(k, 0);
  for (const std::size_t i : order) {
    const auto r = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    s.owner[i] = static_cast<int>(r);
    load[r] += cost[i];
  }
  for (std::size_t i = 0; i < n; ++i) s.sequences[static_cast<std::size_t>(s.owner[i])].push_back(i);
  return s;
}

}  // namespace rlp
