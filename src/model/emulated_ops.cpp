#include "rlparity/model/emulated_ops.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

#include "rlparity/model/rope.hpp"
#include "rlparity/numerics/formats.hpp"
#include "rlparity/numerics/quantize.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/parallel.hpp"

namespace rlp {

EmulatedOps::EmulatedOps(const ModelSpec& spec, const PreparedWeights& weights, const PathStyle& style,
                         const KvScales* kv_scales)
    : spec_(spec), w_(weights), style_(style) {
  if (kv_scales) kv_scales_ = *kv_scales;
  if (style_.kv_cache == KvCacheDtype::fp8 && kv_scales_.empty())
    RLP_THROW("path '{}' has an fp8 KV cache but no KV scales were calibrated", style_.name);
  for (double f : rope_inv_freq(spec)) inv_freq_.push_back(static_cast<float>(f));
}

float EmulatedOps::round_act(float x) const {
  return style_.act == ActDtype::bf16 ? num::round_bf16(x) : num::round_fp16(x);
}

EmulatedOps::Cache EmulatedOps::new_cache(int capacity) const {
  Cache c;
  const int width = spec_.kv_heads * spec_.head_dim;
  c.k.assign(static_cast<std::size_t>(spec_.layers), Mat(capacity, width));
  c.v.assign(static_cast<std::size_t>(spec_.layers), Mat(capacity, width));
  c.kt.assign(static_cast<std::size_t>(spec_.layers), Mat(width, capacity));
  return c;
}

void EmulatedOps::embed(const int32_t* tokens, int n, Mat& h) const {
  const int H = spec_.hidden;
  h.resize(n, H);
  for (int i = 0; i < n; ++i) {
    const float* row = w_.embed.data() + static_cast<std::size_t>(tokens[i]) * static_cast<std::size_t>(H);
    std::copy(row, row + H, h.row(i).data());
  }
}

// RMSNorm of one row. Variance: sequential fp32 sum of squares of `z_for_var`, divided by n.
// fused_add (vLLM rms_norm kernels): out = act(act(z * r) * w), two roundings, because the kernel
// writes `(scalar_t)(x * s_variance) * weight[i]` with a bf16 multiply. unfused (TransformerEngine):
// out = act(z * r * w) in fp32 with one rounding. r = 1/sqrt(var + eps): the GPU's rsqrtf is an
// approximation (<= 2 ulp); we use the correctly rounded value.
void EmulatedOps::rms_norm_row(const float* z_for_var, const float* z, const float* w, int n, float* out) const {
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum = std::fma(z_for_var[i], z_for_var[i], sum);
  const float var = sum / static_cast<float>(n);
  const float r = 1.0f / std::sqrt(var + static_cast<float>(spec_.rms_eps));
  if (style_.norm == NormKind::fused_add) {
    for (int i = 0; i < n; ++i) out[i] = round_act(round_act(z[i] * r) * w[i]);
  } else {
    for (int i = 0; i < n; ++i) out[i] = round_act((z[i] * r) * w[i]);
  }
}

void EmulatedOps::add_norm(Mat& resid, const Mat* delta, int layer, NormSlot slot, Mat& out) const {
  const int H = spec_.hidden;
  const float* w = slot == NormSlot::final ? w_.final_norm.data()
                   : slot == NormSlot::input ? w_.layers[static_cast<std::size_t>(layer)].input_norm.data()
                                             : w_.layers[static_cast<std::size_t>(layer)].post_norm.data();
  out.resize(resid.rows(), H);
  std::vector<float> z(static_cast<std::size_t>(H));
  for (int r = 0; r < resid.rows(); ++r) {
    float* res = resid.row(r).data();
    for (int i = 0; i < H; ++i) z[static_cast<std::size_t>(i)] = delta ? res[i] + (*delta)(r, i) : res[i];
    // The residual stream keeps the act dtype unless the path keeps it in fp32 (Megatron's
    // fp32_residual_connection).
    for (int i = 0; i < H; ++i)
      res[i] = style_.residual == ResidualDtype::act ? round_act(z[static_cast<std::size_t>(i)]) : z[static_cast<std::size_t>(i)];
    // vLLM's fused_add_rms_norm accumulates the variance from the fp32 sum before it stores the
    // rounded residual, then normalizes the rounded residual; an unfused norm sees only the stored one.
    const float* var_src = style_.norm == NormKind::fused_add ? z.data() : res;
    rms_norm_row(var_src, res, w, H, out.row(r).data());
  }
}

void EmulatedOps::residual_sum(const Mat& resid, const Mat& delta, Mat& out) const {
  out.resize(resid.rows(), resid.cols());
  for (Eigen::Index i = 0; i < resid.size(); ++i) {
    const float z = resid.data()[i] + delta.data()[i];
    out.data()[i] = style_.residual == ResidualDtype::act ? round_act(z) : z;
  }
}

void EmulatedOps::gemm(const Mat& x, const PreparedLinear& lin, Mat& y, bool out_fp32, bool decode_step) const {
  const int n = static_cast<int>(x.rows());
  // Kernel selection sees M = the engine's decode batch during decode steps (however many rows this
  // call groups), the token count otherwise.
  const int m_kernel = decode_step ? style_.batch : n;
  num::GemmConfig cfg = style_.gemm_config(m_kernel, lin.in);
  if (out_fp32 || !lin.bias.empty()) cfg.out = num::OutRound::fp32;
  y.resize(n, lin.out);
  if (lin.fp8) {
    num::ScaleOptions opts;
    opts.convention = style_.act_quant;
    opts.pow2 = style_.pow2_scales;
    const num::Fp8Tensor xq = num::quantize_blocks(x.data(), n, lin.in, 1, 128, opts);
    num::gemm_fp8_blockscaled(xq, lin.wq, y.data(), cfg);
  } else {
    num::gemm_f32acc(x.data(), lin.w.data(), style_.act == ActDtype::bf16 ? num::Half16::bf16 : num::Half16::fp16,
                     y.data(), n, lin.out, lin.in, cfg);
  }
  if (!lin.bias.empty()) {
    // Bias added in the fp32 epilogue, one rounding to the act dtype.
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < lin.out; ++c) y(r, c) = round_act(y(r, c) + lin.bias[static_cast<std::size_t>(c)]);
  }
}

void EmulatedOps::linear(const Mat& x, int layer, Proj p, Mat& y, bool decode_step) const {
  gemm(x, w_.layers[static_cast<std::size_t>(layer)][p], y, false, decode_step);
}

void EmulatedOps::head_norm(Mat& x, int layer, Proj which) const {
  const int hd = spec_.head_dim;
  const auto& L = w_.layers[static_cast<std::size_t>(layer)];
  const float* w = which == Proj::q ? L.q_norm.data() : L.k_norm.data();
  std::vector<float> tmp(static_cast<std::size_t>(hd));
  for (int r = 0; r < x.rows(); ++r)
    for (int h = 0; h < x.cols() / hd; ++h) {
      float* seg = x.row(r).data() + h * hd;
      rms_norm_row(seg, seg, w, hd, tmp.data());
      std::copy(tmp.begin(), tmp.end(), seg);
    }
}

void EmulatedOps::rope(Mat& q, Mat& k, const int* positions) const {
  const int hd = spec_.head_dim, half = hd / 2;
  std::vector<float> cs(static_cast<std::size_t>(half)), sn(static_cast<std::size_t>(half));
  auto rotate = [&](Mat& m, int r) {
    for (int h = 0; h < m.cols() / hd; ++h) {
      float* x = m.row(r).data() + h * hd;
      for (int i = 0; i < half; ++i) {
        const float a = x[i], b = x[i + half], c = cs[static_cast<std::size_t>(i)], s = sn[static_cast<std::size_t>(i)];
        if (style_.rope_table_rounded) {
          // vLLM's rotary kernel computes in scalar_t: every product and the sum round.
          x[i] = round_act(round_act(a * c) - round_act(b * s));
          x[i + half] = round_act(round_act(b * c) + round_act(a * s));
        } else {
          // TE's fused RoPE: fp32 arithmetic, one rounding.
          x[i] = round_act(a * c - b * s);
          x[i + half] = round_act(b * c + a * s);
        }
      }
    }
  };
  for (int r = 0; r < q.rows(); ++r) {
    const float pos = static_cast<float>(positions[r]);
    for (int i = 0; i < half; ++i) {
      // freqs = pos * inv_freq in fp32 (HF/vLLM build the table this way), cos/sin of that float.
      const float angle = pos * inv_freq_[static_cast<std::size_t>(i)];
      float c = static_cast<float>(std::cos(static_cast<double>(angle)));
      float s = static_cast<float>(std::sin(static_cast<double>(angle)));
      if (style_.rope_table_rounded) {
        c = round_act(c);
        s = round_act(s);
      }
      cs[static_cast<std::size_t>(i)] = c;
      sn[static_cast<std::size_t>(i)] = s;
    }
    rotate(q, r);
    rotate(k, r);
  }
}

namespace {

struct PartitionState {
  float m = -std::numeric_limits<float>::infinity();
  float l = 0.0f;
  std::vector<float> acc;
};

// s[j - b0] = q . K[j][col0 .. col0+hd) for keys b0..b1, each dot a sequential fp32 fma chain over
// d from +0 (the order the paths model). Kt is K transposed: the loop over keys is contiguous and
// vectorizes, each key's chain keeping its own order, so its result is unchanged.
void key_dots(const float* q, const EmulatedOps::Mat& Kt, int col0, int hd, int b0, int b1, float* __restrict s) {
  const int nk = b1 - b0 + 1;
  std::fill(s, s + nk, 0.0f);
  for (int d = 0; d < hd; ++d) {
    const float qd = q[d];
    const float* __restrict kt = Kt.row(col0 + d).data() + b0;
    for (int j = 0; j < nk; ++j) s[j] = std::fma(qd, kt[j], s[j]);
  }
}

// acc[d] = fma(p[j], V[j][col0 + d], acc[d]) for keys j = b0..b1 in order, for every d. Up to
// four vectors of dimensions stay in registers across the keys (independent chains); per d the
// order over keys is unchanged.
#if defined(__AVX512F__)
constexpr int kPvLanes = 16;
using PvVec = __m512;
inline PvVec pv_load(const float* p) { return _mm512_loadu_ps(p); }
inline void pv_store(float* p, PvVec v) { _mm512_storeu_ps(p, v); }
inline PvVec pv_fma(float a, const float* b, PvVec c) { return _mm512_fmadd_ps(_mm512_set1_ps(a), _mm512_loadu_ps(b), c); }
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int kPvLanes = 8;
using PvVec = __m256;
inline PvVec pv_load(const float* p) { return _mm256_loadu_ps(p); }
inline void pv_store(float* p, PvVec v) { _mm256_storeu_ps(p, v); }
inline PvVec pv_fma(float a, const float* b, PvVec c) { return _mm256_fmadd_ps(_mm256_set1_ps(a), _mm256_loadu_ps(b), c); }
#else
constexpr int kPvLanes = 1;
using PvVec = float;
inline PvVec pv_load(const float* p) { return *p; }
inline void pv_store(float* p, PvVec v) { *p = v; }
inline PvVec pv_fma(float a, const float* b, PvVec c) { return std::fma(a, *b, c); }
#endif

template <int NV>
void accumulate_pv_vectors(const float* p, const EmulatedOps::Mat& V, int col, int b0, int b1, float* acc) {
  PvVec a[NV];
  for (int v = 0; v < NV; ++v) a[v] = pv_load(acc + v * kPvLanes);
  for (int j = b0; j <= b1; ++j) {
    const float pj = p[j - b0];
    const float* vr = V.row(j).data() + col;
    for (int v = 0; v < NV; ++v) a[v] = pv_fma(pj, vr + v * kPvLanes, a[v]);
  }
  for (int v = 0; v < NV; ++v) pv_store(acc + v * kPvLanes, a[v]);
}

void accumulate_pv(const float* p, const EmulatedOps::Mat& V, int col0, int hd, int b0, int b1, float* acc) {
  int d0 = 0;
  for (; d0 + 4 * kPvLanes <= hd; d0 += 4 * kPvLanes) accumulate_pv_vectors<4>(p, V, col0 + d0, b0, b1, acc + d0);
  for (; d0 + kPvLanes <= hd; d0 += kPvLanes) accumulate_pv_vectors<1>(p, V, col0 + d0, b0, b1, acc + d0);
  for (int j = b0; j <= b1; ++j) {
    const float pj = p[j - b0];
    const float* vr = V.row(j).data() + col0;
    for (int d = d0; d < hd; ++d) acc[d] = std::fma(pj, vr[d], acc[d]);
  }
}

}  // namespace

// FlashAttention-style attention for the rows of this call against every cached position <= its
// own. Scores are fp32 dot products (sequential fma over head_dim); the softmax runs online over
// KV blocks of `attn_block` positions with FA2's exp2 formulation p = exp2(s*c - m*c),
// c = softmax_scale*log2(e); P is rounded to the act dtype before P.V when attn_p_round (tensor
// cores take bf16 P). split_kv runs independent partitions of `split_kv_partition` positions and
// merges them through their log-sum-exp in fp32, as FlashAttention's split-KV combine does.
void EmulatedOps::attention(int layer, const Mat& q, const Mat& k, const Mat& v, int pos0, Cache& cache,
                            Mat& out) const {
  const int n = static_cast<int>(q.rows()), hd = spec_.head_dim;
  const int group = spec_.heads / spec_.kv_heads;
  const std::size_t li = static_cast<std::size_t>(layer);
  if (observer_) observer_->observe(layer, q, k, v);
  Mat& K = cache.k[li];
  Mat& V = cache.v[li];
  if (pos0 + n > K.rows()) RLP_THROW("KV cache capacity {} exceeded at position {}", K.rows(), pos0 + n);
  RLP_CHECK(li < cache.kt.size() && cache.kt[li].cols() == K.rows(), "KV cache was not made by new_cache()");
  const bool fp8_kv = style_.kv_cache == KvCacheDtype::fp8;
  const float ks = fp8_kv ? kv_scales_.k[li] : 1.0f, vs = fp8_kv ? kv_scales_.v[li] : 1.0f;
  const float qs = fp8_kv ? kv_scales_.q[li] : 1.0f;
  // Cache write. fp8: vLLM stores satfinite_e4m3(x / scale); reads fp8 -> f16 -> f32 (exact) and the
  // kernel folds the scale into the softmax scale (K) and the output (V).
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < K.cols(); ++c) {
      if (fp8_kv) {
        K(pos0 + r, c) = num::round_e4m3_sat(k(r, c) / ks);
        V(pos0 + r, c) = num::round_e4m3_sat(v(r, c) / vs);
      } else {
        K(pos0 + r, c) = k(r, c);
        V(pos0 + r, c) = v(r, c);
      }
      cache.kt[li](c, pos0 + r) = K(pos0 + r, c);
    }
  const float softmax_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  const float c_log2 = softmax_scale * (fp8_kv ? qs * ks : 1.0f) * std::numbers::log2e_v<float>;
  const int block = std::max(1, style_.attn_block);
  const int partition = style_.attention == AttentionKind::split_kv ? std::max(1, style_.split_kv_partition)
                                                                    : std::numeric_limits<int>::max();
  out.resize(n, spec_.heads * hd);
  // Each (row, head) output is computed by one task in a fixed order: thread-count independent.
  // Tasks visit rows from both ends alternately (0, n-1, 1, n-2, ...): causal rows cost in
  // proportion to their position, and the pool's contiguous split would give the last thread the
  // longest rows.
  parallel_for(static_cast<std::size_t>(n) * static_cast<std::size_t>(spec_.heads), 4, [&](std::size_t t0, std::size_t t1) {
    std::vector<float> qrow(static_cast<std::size_t>(hd)), s(static_cast<std::size_t>(block)),
        pr(static_cast<std::size_t>(block));
    std::vector<PartitionState> parts;
    for (std::size_t task = t0; task < t1; ++task) {
      const int ri = static_cast<int>(task / static_cast<std::size_t>(spec_.heads));
      const int r = ri % 2 == 0 ? ri / 2 : n - 1 - ri / 2;
      const int h = static_cast<int>(task % static_cast<std::size_t>(spec_.heads));
      const int last = pos0 + r;  // causal: keys 0..last
      const int g = h / group;
      for (int d = 0; d < hd; ++d)
        qrow[static_cast<std::size_t>(d)] = fp8_kv ? num::round_e4m3_sat(q(r, h * hd + d) / qs) : q(r, h * hd + d);
      parts.clear();
      for (int p0 = 0; p0 <= last; p0 = (partition > last - p0) ? last + 1 : p0 + partition) {
        const int p1 = static_cast<int>(std::min<long long>(static_cast<long long>(p0) + partition - 1, last));
        PartitionState st;
        st.acc.assign(static_cast<std::size_t>(hd), 0.0f);
        for (int b0 = p0; b0 <= p1; b0 += block) {
          const int b1 = std::min(b0 + block - 1, p1);
          key_dots(qrow.data(), cache.kt[li], g * hd, hd, b0, b1, s.data());
          float m_new = st.m;
          for (int j = b0; j <= b1; ++j) m_new = std::max(m_new, s[static_cast<std::size_t>(j - b0)]);
          const float m_scaled = m_new * c_log2;
          const float alpha = std::exp2(st.m * c_log2 - m_scaled);  // 0 on the first block
          st.l *= alpha;
          for (float& a : st.acc) a *= alpha;
          for (int j = b0; j <= b1; ++j) {
            const float p = std::exp2(std::fma(s[static_cast<std::size_t>(j - b0)], c_log2, -m_scaled));
            st.l += p;
            pr[static_cast<std::size_t>(j - b0)] = !style_.attn_p_round ? p : (fp8_kv ? num::round_e4m3_sat(p) : round_act(p));
          }
          accumulate_pv(pr.data(), V, g * hd, hd, b0, b1, st.acc.data());
          st.m = m_new;
        }
        parts.push_back(std::move(st));
      }
      float* o = out.row(r).data() + h * hd;
      if (parts.size() == 1) {
        const float inv = 1.0f / parts[0].l;
        for (int d = 0; d < hd; ++d) o[d] = round_act(parts[0].acc[static_cast<std::size_t>(d)] * inv * vs);
      } else {
        // Split-KV combine: o_i = acc_i / l_i, lse_i = m_i*c + log2(l_i) (log2 domain), weights
        // exp2(lse_i - lse) in fp32, outputs summed in partition order.
        float lse_max = -std::numeric_limits<float>::infinity();
        std::vector<float> lse(parts.size());
        for (std::size_t i = 0; i < parts.size(); ++i) {
          lse[i] = parts[i].m * c_log2 + std::log2(parts[i].l);
          lse_max = std::max(lse_max, lse[i]);
        }
        float sum = 0.0f;
        for (float x : lse) sum += std::exp2(x - lse_max);
        const float lse_all = lse_max + std::log2(sum);
        for (int d = 0; d < hd; ++d) {
          float acc = 0.0f;
          for (std::size_t i = 0; i < parts.size(); ++i)
            acc = std::fma(std::exp2(lse[i] - lse_all), parts[i].acc[static_cast<std::size_t>(d)] / parts[i].l, acc);
          o[d] = round_act(acc * vs);
        }
      }
    }
  });
}

void EmulatedOps::silu_mul(const Mat& gate, const Mat& up, Mat& out) const {
  out.resize(gate.rows(), gate.cols());
  for (Eigen::Index i = 0; i < gate.size(); ++i) {
    const float g = gate.data()[i], u = up.data()[i];
    const float silu = g / (1.0f + std::exp(-g));
    // vLLM's silu_and_mul: one fp32 expression, one rounding; HF/Megatron: act_fn(gate) is a
    // separate bf16 tensor, then the product rounds again.
    out.data()[i] = style_.mlp_fused ? round_act(silu * u) : round_act(round_act(silu) * u);
  }
}

void EmulatedOps::logprobs(const Mat& xn, Mat& out, bool decode_step) const {
  gemm(xn, w_.lm_head, out, style_.logits_fp32, decode_step);
  // log_softmax in fp32 per row: max, sequential sum of exp(x - max), log.
  parallel_for(static_cast<std::size_t>(out.rows()), 1, [&](std::size_t r0, std::size_t r1) {
    for (std::size_t r = r0; r < r1; ++r) {
      float* row = out.row(static_cast<Eigen::Index>(r)).data();
      float m = -std::numeric_limits<float>::infinity();
      for (int i = 0; i < out.cols(); ++i) m = std::max(m, row[i]);
      float sum = 0.0f;
      for (int i = 0; i < out.cols(); ++i) sum += std::exp(row[i] - m);
      const float lse = m + std::log(sum);
      for (int i = 0; i < out.cols(); ++i) row[i] = row[i] - lse;
    }
  });
}

}  // namespace rlp
