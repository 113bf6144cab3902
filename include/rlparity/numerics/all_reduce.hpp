// The element rules of the tensor-parallel all-reduce: in which order the `ranks` partials of one
// element are added and where the sum is rounded, for each engine's all-reduce, written once for host
// and device (RLP_HD; C++17 under nvcc). docs/kernel-paths.md ("Tensor parallelism") cites the
// engine sources these follow.
//
// custom_1stage / custom_2stage: vLLM's custom all-reduce (csrc/custom_all_reduce.cuh,
//   packed_reduce): the partials are upcast to fp32 and added in fp32 starting at the rank that
//   reduces the element, one rounding to the dtype at the end. The 1-stage kernel reduces every
//   element on every rank in the order 0, 1, ..., n-1 ("we don't reorder the address"); the 2-stage
//   kernel (reduce-scatter then all-gather) gives rank r the r-th part of the message, in packs of
//   16 bytes (part = packs / n, the last rank also takes the remainder), and rank r adds in the
//   order r, r+1, ..., r-1 (ptrs[i] = rank (r + i) % n).
// nccl_ring: NCCL's ring all-reduce (src/device/all_reduce.h, runRing): the message is cut into n
//   chunks of alignUp(divUp(count, n), 16 / sizeof(T)) elements; chunk c starts at rank c+1 (step
//   0 sends chunk ringIx-1), each next rank adds its own value to what it received and rounds to
//   the dtype, and rank c adds last (step n-1, chunk = ringIx). Order c+1, c+2, ..., c-1, c, a
//   rounding after every add. We assume one channel, the ring in rank order and the whole message
//   in one loop of runRing (the chunking NCCL uses for its last, partial loop).
// nccl_reduce_scatter: NCCL's ring reduce-scatter (src/device/reduce_scatter.h, runRing), what
//   Megatron's sequence parallelism uses after a row-parallel linear: rank c receives shard c, the
//   c-th of n contiguous shards of divUp(count, n) elements (the sequence cut into n), summed in the
//   ring order c+1, ..., c-1, c with a rounding after every add (then all-gathered: copies).
#pragma once
#include <cstdint>

#include "rlparity/numerics/gemm.hpp"  // OutRound, round_out
#include "rlparity/numerics/host_device.hpp"

namespace rlp::num {

enum class ReduceAlgo : uint8_t { custom_1stage, custom_2stage, nccl_ring, nccl_reduce_scatter };

// The rank whose order an element's sum follows (the rank it starts at for custom_*, the chunk
// owner, where it ends, for nccl_ring). `idx` is the element's index in the flat message of
// `count` elements of `elem_bytes` bytes each.
RLP_HD int reduce_owner(ReduceAlgo algo, int64_t idx, int64_t count, int ranks, int elem_bytes) {
  if (ranks <= 1 || algo == ReduceAlgo::custom_1stage) return 0;
  const int64_t per16 = 16 / elem_bytes;  // elements per 16-byte pack / NCCL chunk alignment
  if (algo == ReduceAlgo::custom_2stage) {
    const int64_t part = (count / per16) / ranks;  // packs per rank; the last rank takes the rest
    if (part == 0) return ranks - 1;
    const int64_t r = (idx / per16) / part;
    return r < ranks - 1 ? static_cast<int>(r) : ranks - 1;
  }
  const int64_t per_rank = (count + ranks - 1) / ranks;
  const int64_t chunk =
      algo == ReduceAlgo::nccl_reduce_scatter ? per_rank : (per_rank + per16 - 1) / per16 * per16;
  const int64_t c = idx / chunk;
  return c < ranks - 1 ? static_cast<int>(c) : ranks - 1;
}

// The all-reduced value of one element: vals[r] is rank r's partial (a value of the dtype `out`),
// `owner` from reduce_owner.
RLP_HD float all_reduce_element(ReduceAlgo algo, const float* vals, int ranks, int owner, OutRound out) {
  if (ranks <= 1) return vals[0];
  if (algo == ReduceAlgo::nccl_ring || algo == ReduceAlgo::nccl_reduce_scatter) {
    int r = owner + 1 < ranks ? owner + 1 : 0;
    float acc = vals[r];
    for (int i = 1; i < ranks; ++i) {
      r = r + 1 < ranks ? r + 1 : 0;
      acc = round_out(acc + vals[r], out);
    }
    return acc;
  }
  float acc = vals[owner];
  int r = owner;
  for (int i = 1; i < ranks; ++i) {
    r = r + 1 < ranks ? r + 1 : 0;
    acc += vals[r];
  }
  return round_out(acc, out);
}

// vLLM's choice between its kernels for a message of `bytes` bytes over `ranks` GPUs, as
// CustomAllreduce::allreduce (csrc/custom_all_reduce.cuh) dispatches on a fully NVLink-connected
// node: 1-stage for 2 GPUs, or below 512 KiB (<= 4 GPUs) / 256 KiB (<= 8 GPUs); 2-stage otherwise.
RLP_HD ReduceAlgo custom_ar_stage(int64_t bytes, int ranks) {
  if (ranks == 2 || (ranks <= 4 && bytes < 512 * 1024) || (ranks <= 8 && bytes < 256 * 1024))
    return ReduceAlgo::custom_1stage;
  return ReduceAlgo::custom_2stage;
}

// vLLM's custom all-reduce takes a message when CustomAllreduce.should_custom_ar says so
// (vllm/distributed/device_communicators/custom_all_reduce.py): world size in {2, 4, 6, 8}, the
// byte size a multiple of 16 and below max_size = 8 MiB; pynccl (the NCCL ring) otherwise.
RLP_HD bool vllm_uses_custom_ar(int64_t bytes, int ranks) {
  const bool supported = ranks == 2 || ranks == 4 || ranks == 6 || ranks == 8;
  return supported && bytes % 16 == 0 && bytes < 8192 * 1024;
}

}  // namespace rlp::num
