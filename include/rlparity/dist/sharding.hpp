// Which rank of a job (dist/job.hpp) computes which item: a replay's sequences
// (replay/sequence_sharding.hpp), inspect's tensors. Results never depend on it: each item's numbers
// are computed by one rank alone, from its own data, and gathered bit for bit.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "rlparity/dist/job.hpp"
#include "rlparity/dist/pack.hpp"

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

// Every rank's results for its items into every rank, bit for bit: put(out, i) packs item i on its
// owner, get(in, i) unpacks it on every other rank, in item order; `wanted(i)` (the same on every
// rank) limits the items exchanged. A collective call; nothing to do for one process.
template <class Wanted, class Put, class Get>
void share_items(Job& job, const Sharding& shard, const Wanted& wanted, const Put& put, const Get& get) {
  if (!job.distributed()) return;
  Packer out;
  for (const std::size_t i : shard.mine())
    if (wanted(i)) put(out, i);
  const std::vector<std::string> parts = job.all_gather(out.bytes());
  for (std::size_t r = 0; r < parts.size(); ++r) {
    if (static_cast<int>(r) == shard.rank) continue;
    Unpacker in(parts[r]);
    for (const std::size_t i : shard.sequences[r])
      if (wanted(i)) get(in, i);
  }
}

}  // namespace rlp
