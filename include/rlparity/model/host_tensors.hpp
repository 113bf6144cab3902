// The host-side tensors the forward's ops exchange, named apart from any one backend: the
// activation matrix and the KV cache of one sequence. EmulatedOps (the CPU kernel paths) and
// CudaOps (which extends the cache with its device copy) both use them; OracleOps keeps its own
// float64 types.
#pragma once
#include <Eigen/Core>
#include <vector>

namespace rlp {

// Rows are tokens (or a decode step's sequences), columns features; values in float, rounded to the
// path's formats where the path rounds.
using HostMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The KV cache of one sequence on the host.
struct KvCache {
  std::vector<HostMat> k, v;  // per layer [capacity x kv_heads*head_dim], values as the cache holds them
  // per layer [kv_heads*head_dim x capacity]: the same keys transposed, so that the scores of a
  // block of keys are one vectorized loop per head dimension (same values, same order).
  std::vector<HostMat> kt;
  int length = 0;  // positions filled
};

}  // namespace rlp
