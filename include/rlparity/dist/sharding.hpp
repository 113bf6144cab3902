// Which rank of a job (dist/job.hpp) computes which item: a replay's sequences
// (replay/sequence_sharding.hpp), inspect's tensors. Results never depend on it: each item's numbers
// are computed by one rank alone, from its own data, and gathered bit for bit.
#pragma once
#include <cstdint>
#include <vector>

namespace rlp {

struct Sharding {
  int rank = 0;                                     // this process's rank
  std::vector<int> owner;                           // per item: the rank that computes it
  std::vector<std::vector<std::size_t>> sequences;  // per rank: its items, in input order
  const std::vector<std::size_t>& mine() const { return sequences[static_cast<std::size_t>(rank)]; }
  bool owns(std::size_t item) const { return owner[item] == rank; }
};

// Balances work, not counts: the costliest items are placed first, each on the least-loaded rank
// (lowest rank on ties). Deterministic: every rank computes the same sharding.
Sharding shard_by_cost(const std::vector<int64_t>& cost, int ranks, int rank);

}  // namespace rlp
