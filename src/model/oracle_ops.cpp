#include "rlparity/model/oracle_ops.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "rlparity/model/moe_routing.hpp"
#include "rlparity/model/rope.hpp"
#include "rlparity/numerics/gemm.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/parallel.hpp"

namespace rlp {

OracleOps::OracleOps(const ModelSpec& spec, const OracleWeights& weights)
    : spec_(spec), w_(weights), inv_freq_(rope_inv_freq(spec)) {}

OracleOps::Cache OracleOps::new_cache(int capacity) const {
  Cache c;
  const int width = spec_.kv_heads * spec_.head_dim;
  c.k.assign(static_cast<std::size_t>(spec_.layers), Mat(capacity, width));
  c.v.assign(static_cast<std::size_t>(spec_.layers), Mat(capacity, width));
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

void OracleOps::affine(const Mat& x, const OracleLinear& lin, Mat& y) const {
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
  affine(x, w_.layers[static_cast<std::size_t>(layer)][p], y);
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
  // outputs' sums) run as register-held vector lanes, each lane's chain in the order above, and the
  // (row, head) pairs run on worker threads, each writing only its own outputs.
  const auto L = static_cast<std::size_t>(pos0 + n);
  std::vector<double> kt(static_cast<std::size_t>(spec_.kv_heads * hd) * L);  // keys transposed
  for (std::size_t j = 0; j < L; ++j)
    for (int c = 0; c < spec_.kv_heads * hd; ++c)
      kt[static_cast<std::size_t>(c) * L + j] = K(static_cast<Eigen::Index>(j), c);
  parallel_for(static_cast<std::size_t>(n) * static_cast<std::size_t>(spec_.heads), 1,
               [&](std::size_t b, std::size_t e) { attention_pairs(q, V, kt, pos0, b, e, out); });
}

void OracleOps::attention_pairs(const Mat& q, const Mat& V, const std::vector<double>& kt, int pos0,
                                std::size_t b, std::size_t e, Mat& out) const {
  constexpr std::size_t kTile = 32;
  const int n = static_cast<int>(q.rows()), hd = spec_.head_dim, group = spec_.heads / spec_.kv_heads;
  const auto L = static_cast<std::size_t>(pos0 + n);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  std::vector<double> sc(L);
  for (std::size_t idx = b; idx < e; ++idx) {
    // Rows paired short with long, so that contiguous ranges of pairs carry equal work.
    const int slot = static_cast<int>(idx / static_cast<std::size_t>(spec_.heads));
    const int r = slot % 2 == 0 ? slot / 2 : n - 1 - slot / 2;
    const int h = static_cast<int>(idx % static_cast<std::size_t>(spec_.heads)), g = h / group;
    const auto cnt = static_cast<std::size_t>(pos0 + r + 1);
    const double* qr = q.row(r).data() + h * hd;
    const double* kg = kt.data() + static_cast<std::size_t>(g * hd) * L;
    std::size_t j0 = 0;
    for (; j0 + kTile <= cnt; j0 += kTile) {
      double a[kTile] = {};
      for (int d = 0; d < hd; ++d) {
        const double* kd = kg + static_cast<std::size_t>(d) * L + j0;
        for (std::size_t t = 0; t < kTile; ++t) a[t] += qr[d] * kd[t];
      }
      std::copy(a, a + kTile, sc.begin() + static_cast<std::ptrdiff_t>(j0));
    }
    for (std::size_t j = j0; j < cnt; ++j) {
      double a = 0.0;
      for (int d = 0; d < hd; ++d) a += qr[d] * kg[static_cast<std::size_t>(d) * L + j];
      sc[j] = a;
    }
    double m = -std::numeric_limits<double>::infinity();
    for (std::size_t j = 0; j < cnt; ++j) {
      sc[j] = sc[j] * scale;
      m = std::max(m, sc[j]);
    }
    double l = 0.0;
    for (std::size_t j = 0; j < cnt; ++j) {
      sc[j] = std::exp(sc[j] - m);
      l += sc[j];
    }
    for (int d0 = 0; d0 < hd; d0 += static_cast<int>(kTile)) {
      const auto w = std::min<std::size_t>(kTile, static_cast<std::size_t>(hd - d0));
      double a[kTile] = {};
      for (std::size_t j = 0; j < cnt; ++j) {
        const double* vj = V.row(static_cast<Eigen::Index>(j)).data() + g * hd + d0;
        if (w == kTile)
          for (std::size_t t = 0; t < kTile; ++t) a[t] += sc[j] * vj[t];
        else
          for (std::size_t t = 0; t < w; ++t) a[t] += sc[j] * vj[t];
      }
      for (std::size_t t = 0; t < w; ++t) out(r, h * hd + d0 + static_cast<int>(t)) = a[t] / l;
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
  affine(xn, L.router, logits);
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
    affine(xe, L.expert(e, Proj::gate), g);
    affine(xe, L.expert(e, Proj::up), u);
    silu_mul(g, u, a);
    affine(a, L.expert(e, Proj::down), d);
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
  affine(xn, L.shared_gate, gate_logit);
  for (int r = 0; r < n; ++r) out.row(r) += 1.0 / (1.0 + std::exp(-gate_logit(r, 0))) * d.row(r);
}

void OracleOps::logprobs(const Mat& xn, Mat& out, bool /*decode_step*/) const {
  affine(xn, w_.lm_head, out);
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
