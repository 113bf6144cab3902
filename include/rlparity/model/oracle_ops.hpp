// The oracle: the same forward in float64 with no intermediate rounding, on the weights as stored
// in the checkpoint. Every report splits mismatch into "generation vs truth" and "training vs truth".
#pragma once
#include <Eigen/Core>
#include <vector>

#include "rlparity/model/model_spec.hpp"
#include "rlparity/model/ops_contract.hpp"
#include "rlparity/model/weights.hpp"

namespace rlp {

class OracleOps {
 public:
  using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  struct Cache {
    std::vector<Mat> k, v;
    int length = 0;
  };

  OracleOps(const ModelSpec& spec, const OracleWeights& weights);

  const ModelSpec& spec() const { return spec_; }
  Cache new_cache(int capacity) const;
  void embed(const int32_t* tokens, int n, Mat& h) const;
  void add_norm(Mat& resid, const Mat* delta, int layer, NormSlot slot, Mat& out) const;
  void residual_sum(const Mat& resid, const Mat& delta, Mat& out) const;
  // decode_step: the rows are one decode step (kernel selection sees the decode batch as M).
  void linear(const Mat& x, int layer, Proj p, Mat& y, bool decode_step = false) const;
  void head_norm(Mat& x, int layer, Proj which) const;
  void rope(Mat& q, Mat& k, const int* positions) const;  // positions[r] of row r
  void attention(int layer, const Mat& q, const Mat& k, const Mat& v, int pos0, Cache& cache, Mat& out) const;
  void silu_mul(const Mat& gate, const Mat& up, Mat& out) const;
  void logprobs(const Mat& xn, Mat& out, bool decode_step = false) const;

 private:
  void affine(const Mat& x, const OracleLinear& lin, Mat& y) const;
  const ModelSpec& spec_;
  const OracleWeights& w_;
  std::vector<double> inv_freq_;
};
static_assert(ForwardOps<OracleOps>);

}  // namespace rlp
