// The host-side tensors the forward's ops exchange, named apart from any one backend: the
// activation matrix and the KV cache of one sequence. EmulatedOps (the CPU kernel paths) and
// CudaOps (which extends the cache with its device copy) both use them; OracleOps keeps its own
// float64 types.
#pragma once
#include <Eigen/Core>
#include <cstdint>
#include <vector>

#include "rlparity/numerics/gemm.hpp"

namespace rlp {

// Rows are tokens (or a decode step's sequences), columns features; values in float, rounded to the
// path's formats where the path rounds.
using HostMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
// bf16 pair words (two bf16 patterns in 32 bits), as the dot-product kernels read them.
using PairMat = Eigen::Matrix<uint32_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// `count` matrices of rows x cols, left uninitialized, each allocated on its own: assign(count,
// Mat(rows, cols)) would copy one uninitialized matrix into every slot, touching all their pages
// on the calling thread (a 4096-token cache: 0.4 GB copied before the forward starts).
template <class M>
std::vector<M> sized_mats(std::size_t count, Eigen::Index rows, Eigen::Index cols) {
  std::vector<M> v(count);
  for (M& m : v) m.resize(rows, cols);
  return v;
}

// The KV cache of one sequence on the host.
struct KvCache {
  std::vector<HostMat> k, v;  // per layer [capacity x kv_heads*head_dim], values as the cache holds them
  // per layer [kv_heads*head_dim x capacity]: the same keys transposed, so that the scores of a
  // block of keys are one vectorized loop per head dimension (same values, same order).
  std::vector<HostMat> kt;
  // Per layer [kv_heads*head_dim/2 x capacity]: the keys as bf16 pairs, dimension 2p in the high
  // half and 2p + 1 in the low one, for the dot-product score kernel (the pair words of
  // gemm_f32acc's bf16 steps); with k_span, the span of every key written (a layer's scores use
  // the kernel only when bf16_dot_exact holds for it). Empty where that kernel cannot apply
  // (EmulatedOps::new_cache).
  std::vector<PairMat> kt_pairs;
  std::vector<num::Bf16Span> k_span;
  // The same for P.V: per layer [ceil(capacity/2) x kv_heads*head_dim], pair row t holding the values
  // of positions 2t (high half) and 2t + 1 (low), and the span of every value written.
  std::vector<PairMat> v_pairs;
  std::vector<num::Bf16Span> v_span;
  int length = 0;  // positions filled
};

}  // namespace rlp
