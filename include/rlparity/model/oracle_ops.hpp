// The oracle: the same forward in float64 with no intermediate rounding, on the weights as stored
// in the checkpoint. Every report splits mismatch into "generation vs truth" and "training vs truth".
#pragma once
#include <Eigen/Core>
#include <vector>

#include "rlparity/model/model_spec.hpp"
#include "rlparity/model/ops_contract.hpp"
#include "rlparity/model/weights.hpp"

namespace rlp {

using OracleMat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// y = x W^T (+ bias) in float64, W's rows widened from the mapped checkpoint (num::gemm_f64: each
// output a fixed-order sum, whatever the rows beside it).
void oracle_affine(const OracleMat& x, const OracleLinear& lin, OracleMat& y);

// The oracle's LM head on its own: float64 log-prob rows, each independent of the call's other rows
// (HeadAt changes nothing). A copy of the lm_head's description: the checkpoint must outlive it.
class OracleHead {
 public:
  explicit OracleHead(const OracleLinear& lm_head) : lm_head_(lm_head) {}
  void logprobs(const OracleMat& xn, OracleMat& out, HeadAt at = {}) const;

 private:
  OracleLinear lm_head_;
};

class OracleOps {
 public:
  using Mat = OracleMat;
  struct Cache {
    std::vector<Mat> k, v;
    int length = 0;
  };

  OracleOps(const ModelSpec& spec, const OracleWeights& weights);

  const ModelSpec& spec() const { return spec_; }
  // The ops contract (ops_contract.hpp) in float64, no intermediate rounding.
  RLP_FORWARD_OPS_MEMBERS
  const OracleHead& head() const { return head_; }

 private:
  // attention()'s (row block, head) pairs [b, e) over the layer's keys (kt: per KV head, tiles of
  // kOracleKeyTile keys stored d-major) and values (vh: per KV head, key-major): a row block is
  // kOracleAttnRows consecutive query rows of one head.
  static constexpr int kOracleAttnRows = 4;
  static constexpr std::size_t kOracleKeyTile = 32;
  void attention_pairs(const Mat& q, const std::vector<double>& vh, const std::vector<double>& kt, int pos0,
                       std::size_t b, std::size_t e, Mat& out) const;
  const ModelSpec& spec_;
  const OracleWeights& w_;
  OracleHead head_;
  std::vector<double> inv_freq_;
};
static_assert(ForwardOps<OracleOps>);

}  // namespace rlp
