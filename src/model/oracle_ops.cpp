#include "rlparity/model/oracle_ops.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "rlparity/model/host_tensors.hpp"
#include "rlparity/model/moe_routing.hpp"
#include "rlparity/model/rope.hpp"
#include "rlparity/numerics/gemm.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/parallel.hpp"

namespace rlp {

OracleOps::OracleOps(const ModelSpec& spec, const OracleWeights& weights)
    : spec_(spec), w_(weights), head_(weights.lm_head), inv_freq_(rope_inv_freq(spec)) {}

OracleOps::Cache OracleOps::new_cache(int capacity) const {
  Cache c;
  const int width = spec_.kv_heads * spec_.head_dim;
  c.k = sized_mats<Mat>(static_cast<std::size_t>(spec_.layers), capacity, width);
  c.v = sized_mats<Mat>(static_cast<std::size_t>(spec_.layers), capacity, width);
  return c;
}

void OracleOps::embed(const int32_t* tokens, int n, Mat& h) const {
  const int H = spec_.hidden;
  h.resize(n, H);
  for (int i = 0; i < n; ++i) w_.embed->to_double(static_cast<int64_t>(tokens[i]) * H, H, h.row(i).data());
}

namespace {
void rms_norm_row(const double* x, const double* w, int n, double eps, double* out) {
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += x[i] * x[i];
  const double r = 1.0 / std::sqrt(sum / n + eps);
  for (int i = 0; i < n; ++i) out[i] = x[i] * r * w[i];
}
}  // namespace

void OracleOps::add_norm(Mat& resid, const Mat* delta, int layer, NormSlot slot, Mat& out) const {
  if (delta) resid += *delta;
  const double* w = slot == NormSlot::final   ? w_.final_norm.data()
                    : slot == NormSlot::input ? w_.layers[static_cast<std::size_t>(layer)].input_norm.data()
                                              : w_.layers[static_cast<std::size_t>(layer)].post_norm.data();
  out.resize(resid.rows(), resid.cols());
  for (int r = 0; r < resid.rows(); ++r)
    rms_norm_row(resid.row(r).data(), w, spec_.hidden, spec_.rms_eps, out.row(r).data());
}

void OracleOps::residual_sum(const Mat& resid, const Mat& delta, Mat& out) const { out = resid + delta; }

void oracle_affine(const OracleMat& x, const OracleLinear& lin, OracleMat& y) {
  y.resize(x.rows(), lin.out);
  const int64_t K = lin.in;
  num::gemm_f64(
      x.data(), [&](int n, double* row) { lin.w->to_double(n * K, K, row); }, y.data(),
      static_cast<int>(x.rows()), lin.out, lin.in);
  if (!lin.bias.empty())
    for (int r = 0; r < y.rows(); ++r)
      for (int c = 0; c < lin.out; ++c) y(r, c) += lin.bias[static_cast<std::size_t>(c)];
}

void OracleOps::linear(const Mat& x, int layer, Proj p, Mat& y, bool /*decode_step*/) const {
  oracle_affine(x, w_.layers[static_cast<std::size_t>(layer)][p], y);
}

void OracleOps::head_norm(Mat& x, int layer, Proj which) const {
  const int hd = spec_.head_dim;
  const auto& L = w_.layers[static_cast<std::size_t>(layer)];
  const double* w = which == Proj::q ? L.q_norm.data() : L.k_norm.data();
  std::vector<double> tmp(static_cast<std::size_t>(hd));
  for (int r = 0; r < x.rows(); ++r)
    for (int h = 0; h < x.cols() / hd; ++h) {
      double* seg = x.row(r).data() + h * hd;
      rms_norm_row(seg, w, hd, spec_.rms_eps, tmp.data());
      std::copy(tmp.begin(), tmp.end(), seg);
    }
}

void OracleOps::rope(Mat& q, Mat& k, const int* positions) const {
  const int hd = spec_.head_dim, half = hd / 2;
  auto rotate = [&](Mat& m, int r, const std::vector<double>& cs, const std::vector<double>& sn) {
    for (int h = 0; h < m.cols() / hd; ++h) {
      double* x = m.row(r).data() + h * hd;
      for (int i = 0; i < half; ++i) {
        const double a = x[i], b = x[i + half];
        x[i] = a * cs[static_cast<std::size_t>(i)] - b * sn[static_cast<std::size_t>(i)];
        x[i + half] = b * cs[static_cast<std::size_t>(i)] + a * sn[static_cast<std::size_t>(i)];
      }
    }
  };
  std::vector<double> cs(static_cast<std::size_t>(half)), sn(static_cast<std::size_t>(half));
  for (int r = 0; r < q.rows(); ++r) {
    for (int i = 0; i < half; ++i) {
      const double angle = static_cast<double>(positions[r]) * inv_freq_[static_cast<std::size_t>(i)];
      cs[static_cast<std::size_t>(i)] = std::cos(angle);
      sn[static_cast<std::size_t>(i)] = std::sin(angle);
    }
    rotate(q, r, cs, sn);
    rotate(k, r, cs, sn);
  }
}

void OracleOps::attention(int layer, const Mat& q, const Mat& k, const Mat& v, int pos0, Cache& cache,
                          Mat& out) const {
  const int n = static_cast<int>(q.rows()), hd = spec_.head_dim;
  Mat& K = cache.k[static_cast<std::size_t>(layer)];
  Mat& V = cache.v[static_cast<std::size_t>(layer)];
  if (pos0 + n > K.rows()) RLP_THROW("KV cache capacity {} exceeded at position {}", K.rows(), pos0 + n);
  K.middleRows(pos0, n) = k;
  V.middleRows(pos0, n) = v;
  out.resize(n, spec_.heads * hd);
  // Each (row, head) computes, in this order: dot_j = sum over d in increasing order of q_d K_jd
  // (from +0, product and sum each rounded), s_j = dot_j * scale, m = max s_j, e_j = exp(s_j - m),
  // l = sum over j in increasing order of e_j, out_d = (sum over j in increasing order of e_j V_jd) / l.
  // Only the loop nesting differs from the textbook loops: kTile keys' dot products (and kTile
  // outputs' sums) of kOracleAttnRows rows run as register-held vector lanes, each lane's chain in
  // the order above, and the (row block, head) pairs run on worker threads, each writing only its
  // own outputs.
  // The keys and values rearranged so that the loops below stream them: per KV head, key tiles of
  // kOracleKeyTile keys stored d-major (tile, d, key), zero past L; values key-major (key, d).
  const auto L = static_cast<std::size_t>(pos0 + n), H = static_cast<std::size_t>(spec_.kv_heads);
  const auto D = static_cast<std::size_t>(hd), tiles = (L + kOracleKeyTile - 1) / kOracleKeyTile;
  std::vector<double> kt(H * tiles * D * kOracleKeyTile, 0.0), vh(H * L * D);
  for (std::size_t j = 0; j < L; ++j)
    for (std::size_t g = 0; g < H; ++g)
      for (std::size_t d = 0; d < D; ++d) {
        const auto src = static_cast<Eigen::Index>(g * D + d);
        kt[((g * tiles + j / kOracleKeyTile) * D + d) * kOracleKeyTile + j % kOracleKeyTile] =
            K(static_cast<Eigen::Index>(j), src);
        vh[(g * L + j) * D + d] = V(static_cast<Eigen::Index>(j), src);
      }
  const auto blocks = static_cast<std::size_t>((n + kOracleAttnRows - 1) / kOracleAttnRows);
  parallel_for(blocks * static_cast<std::size_t>(spec_.heads), 1,
               [&](std::size_t b, std::size_t e) { attention_pairs(q, vh, kt, pos0, b, e, out); });
}

void OracleOps::attention_pairs(const Mat& q, const std::vector<double>& vh, const std::vector<double>& kt,
                                int pos0, std::size_t b, std::size_t e, Mat& out) const {
  constexpr std::size_t kTile = kOracleKeyTile;
  constexpr int kRows = kOracleAttnRows;
  const int n = static_cast<int>(q.rows()), hd = spec_.head_dim, group = spec_.heads / spec_.kv_heads;
  const int blocks = (n + kRows - 1) / kRows;
  const auto L = static_cast<std::size_t>(pos0 + n), D = static_cast<std::size_t>(hd);
  const std::size_t tiles = (L + kTile - 1) / kTile;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  std::vector<double> sc(static_cast<std::size_t>(kRows) * L);
  for (std::size_t idx = b; idx < e; ++idx) {
    // Row blocks paired short with long, so that contiguous ranges of pairs carry equal work.
    const int slot = static_cast<int>(idx / static_cast<std::size_t>(spec_.heads));
    const int blk = slot % 2 == 0 ? slot / 2 : blocks - 1 - slot / 2;
    const int h = static_cast<int>(idx % static_cast<std::size_t>(spec_.heads)), g = h / group;
    const int r0 = blk * kRows, nr = std::min(kRows, n - r0);
    // Rows past the block's last real row repeat it (their results are discarded): every tile
    // runs kRows rows, so the accumulators stay in registers.
    const double* qr[kRows];
    std::size_t cnt[kRows];
    double* s[kRows];
    for (int i = 0; i < kRows; ++i) {
      const int r = r0 + std::min(i, nr - 1);
      qr[i] = q.row(r).data() + h * hd;
      cnt[i] = static_cast<std::size_t>(pos0 + r + 1);
      s[i] = sc.data() + static_cast<std::size_t>(i) * L;
    }
    const std::size_t common = cnt[0];  // keys every row of the block attends to
    const double* kg = kt.data() + static_cast<std::size_t>(g) * tiles * D * kTile;
    const double* vg = vh.data() + static_cast<std::size_t>(g) * L * D;
    // Scores: each key's dot product is one lane's chain over d; a key tile is loaded once for the
    // block's rows.
    std::size_t j0 = 0;
    for (; j0 + kTile <= common; j0 += kTile) {
      double a[kRows][kTile] = {};
      const double* tile = kg + (j0 / kTile) * D * kTile;
      for (int d = 0; d < hd; ++d) {
        const double* kd = tile + static_cast<std::size_t>(d) * kTile;
        for (int i = 0; i < kRows; ++i)
          for (std::size_t t = 0; t < kTile; ++t) a[i][t] += qr[i][d] * kd[t];
      }
      for (int i = 0; i < kRows; ++i) std::copy(a[i], a[i] + kTile, s[i] + j0);
    }
    for (int i = 0; i < nr; ++i)
      for (std::size_t j = j0; j < cnt[i]; ++j) {
        double a = 0.0;
        const double* tile = kg + (j / kTile) * D * kTile + j % kTile;
        for (int d = 0; d < hd; ++d) a += qr[i][d] * tile[static_cast<std::size_t>(d) * kTile];
        s[i][j] = a;
      }
    double l[kRows] = {};
    for (int i = 0; i < nr; ++i) {
      double m = -std::numeric_limits<double>::infinity();
      for (std::size_t j = 0; j < cnt[i]; ++j) {
        s[i][j] = s[i][j] * scale;
        m = std::max(m, s[i][j]);
      }
      for (std::size_t j = 0; j < cnt[i]; ++j) {
        s[i][j] = std::exp(s[i][j] - m);
        l[i] += s[i][j];
      }
    }
    // Outputs: each one lane's chain over j in increasing order; a value tile is loaded once for
    // the block's rows over the common keys, then each row goes on alone over its own last keys.
    for (int d0 = 0; d0 < hd; d0 += static_cast<int>(kTile)) {
      const auto w = std::min<std::size_t>(kTile, static_cast<std::size_t>(hd - d0));
      double a[kRows][kTile] = {};
      for (std::size_t j = 0; j < common; ++j) {
        const double* vj = vg + j * D + static_cast<std::size_t>(d0);
        if (w == kTile) {
          for (int i = 0; i < kRows; ++i)
            for (std::size_t t = 0; t < kTile; ++t) a[i][t] += s[i][j] * vj[t];
        } else {
          for (int i = 0; i < kRows; ++i)
            for (std::size_t t = 0; t < w; ++t) a[i][t] += s[i][j] * vj[t];
        }
      }
      for (int i = 0; i < nr; ++i) {
        for (std::size_t j = common; j < cnt[i]; ++j) {
          const double* vj = vg + j * D + static_cast<std::size_t>(d0);
          for (std::size_t t = 0; t < w; ++t) a[i][t] += s[i][j] * vj[t];
        }
        for (std::size_t t = 0; t < w; ++t) out(r0 + i, h * hd + d0 + static_cast<int>(t)) = a[i][t] / l[i];
      }
    }
  }
}

void OracleOps::silu_mul(const Mat& gate, const Mat& up, Mat& out) const {
  out.resize(gate.rows(), gate.cols());
  for (Eigen::Index i = 0; i < gate.size(); ++i) {
    const double g = gate.data()[i];
    out.data()[i] = g / (1.0 + std::exp(-g)) * up.data()[i];
  }
}

void OracleOps::moe(const Mat& xn, int layer, Mat& out, bool /*decode_step*/, MoeRouting* routing,
                    const MoeReplay* replay) const {
  const OracleLayer& L = w_.layers[static_cast<std::size_t>(layer)];
  const int n = static_cast<int>(xn.rows()), E = spec_.num_experts, k = spec_.experts_per_tok;
  Mat logits;
  oracle_affine(xn, L.router, logits);
  std::vector<int> ids(static_cast<std::size_t>(n * k));
  std::vector<double> weights(static_cast<std::size_t>(n * k)), probs(static_cast<std::size_t>(E));
  if (routing) {
    routing->k = k;
    routing->margin.assign(static_cast<std::size_t>(n), 0.0);
  }
  for (int r = 0; r < n; ++r) {
    moe_softmax(
        logits.row(r).data(), E, [](double x) { return std::exp(x); }, probs.data());
    moe_route_row(probs.data(), E, k, spec_.norm_topk_prob, replay, static_cast<std::size_t>(r),
                  ids.data() + r * k, weights.data() + r * k);
    if (routing)
      routing->margin[static_cast<std::size_t>(r)] = moe_margin(probs.data(), E, k, ids.data() + r * k);
  }
  if (routing) {
    routing->ids.assign(ids.begin(), ids.end());
    routing->weights = weights;
  }
  out = Mat::Zero(n, spec_.hidden);
  Mat g, u, a, d;
  for (int e = 0; e < E; ++e) {
    std::vector<int> slot;
    for (int i = 0; i < n * k; ++i)
      if (ids[static_cast<std::size_t>(i)] == e) slot.push_back(i);
    if (slot.empty()) continue;
    Mat xe(static_cast<Eigen::Index>(slot.size()), spec_.hidden);
    for (std::size_t j = 0; j < slot.size(); ++j) xe.row(static_cast<Eigen::Index>(j)) = xn.row(slot[j] / k);
    oracle_affine(xe, L.expert(e, Proj::gate), g);
    oracle_affine(xe, L.expert(e, Proj::up), u);
    silu_mul(g, u, a);
    oracle_affine(a, L.expert(e, Proj::down), d);
    for (std::size_t j = 0; j < slot.size(); ++j)
      out.row(slot[j] / k) +=
          weights[static_cast<std::size_t>(slot[j])] * d.row(static_cast<Eigen::Index>(j));
  }
  if (spec_.shared_expert_intermediate == 0) return;
  // Qwen2-MoE's shared expert, sigmoid-gated (EmulatedOps::add_shared_expert).
  Mat gate_logit;
  linear(xn, layer, Proj::gate, g);
  linear(xn, layer, Proj::up, u);
  silu_mul(g, u, a);
  linear(a, layer, Proj::down, d);
  oracle_affine(xn, L.shared_gate, gate_logit);
  for (int r = 0; r < n; ++r) out.row(r) += 1.0 / (1.0 + std::exp(-gate_logit(r, 0))) * d.row(r);
}

void OracleOps::logprobs(const Mat& xn, Mat& out, bool /*decode_step*/) const { head_.logprobs(xn, out); }

void OracleHead::logprobs(const OracleMat& xn, OracleMat& out, HeadAt /*at*/) const {
  oracle_affine(xn, lm_head_, out);
  for (int r = 0; r < out.rows(); ++r) {
    double* row = out.row(r).data();
    double m = -std::numeric_limits<double>::infinity();
    for (int i = 0; i < out.cols(); ++i) m = std::max(m, row[i]);
    double sum = 0.0;
    for (int i = 0; i < out.cols(); ++i) sum += std::exp(row[i] - m);
    const double lse = m + std::log(sum);
    for (int i = 0; i < out.cols(); ++i) row[i] -= lse;
  }
}

}  // namespace rlp
