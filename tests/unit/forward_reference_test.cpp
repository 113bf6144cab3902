// The oracle forward against a deliberately naive float64 reference written here with plain loops.
//
// The reference shares no code with rlparity's forward, ops, weights, GEMM or RoPE: it reads
// config.json itself (nlohmann::json, not parse_model_spec), takes every tensor through
// TensorView::to_double, computes inv_freq (including Hugging Face's _compute_llama3_parameters)
// itself, and runs every step of the HF decoder as a loop over scalars. For every architecture the
// generator writes (llama, llama3, qwen2, qwen3, mistral; tied/untied; f32/bf16/f16; sharded) the
// oracle's log-probabilities and per-layer residual streams must agree with it to 1e-9 relative.
// Also: the oracle's prefill + token-by-token decode equals its teacher-forced pass to 1e-12, and
// both CPU kernel paths (default training and generation styles) run and give finite outputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <numbers>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "rlparity/model/checkpoint.hpp"
#include "rlparity/model/checkpoint_writer.hpp"
#include "rlparity/model/emulated_ops.hpp"
#include "rlparity/model/forward.hpp"
#include "rlparity/model/kernel_style.hpp"
#include "rlparity/model/oracle_ops.hpp"
#include "rlparity/model/weights.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using Vec = std::vector<double>;
using Rows = std::vector<Vec>;  // [position][feature]

class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    std::random_device rd;
    path_ =
        fs::temp_directory_path() / ("rlp_fwdref_" + std::to_string(rd()) + "_" + std::to_string(counter++));
    fs::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

std::size_t sz(int64_t i) { return static_cast<std::size_t>(i); }

// ------------------------------------------------------------------------------------------------
// The naive reference.

struct NaiveModel {
  // From config.json, read here.
  std::string arch;
  int64_t H = 0, I = 0, L = 0, nh = 0, nkv = 0, hd = 0, V = 0;
  double eps = 0, theta = 10000.0;
  bool tied = false, bias = false, qknorm = false;
  Vec inv_freq;  // [hd/2]

  const rlp::Checkpoint* ck = nullptr;

  Vec tensor(const std::string& name) const {
    const rlp::TensorView& t = ck->tensor(name);
    Vec out(sz(t.numel()));
    t.to_double(out.data());
    return out;
  }
  Vec layer(int64_t l, const std::string& suffix) const {
    return tensor("model.layers." + std::to_string(l) + "." + suffix);
  }
};

// Hugging Face's _compute_default_rope_parameters and _compute_llama3_parameters, transcribed.
Vec naive_inv_freq(const json& c, int64_t hd) {
  const double base = c.value("rope_theta", 10000.0);
  Vec inv(sz(hd / 2));
  for (int64_t j = 0; j < hd; j += 2)
    inv[sz(j / 2)] = 1.0 / std::pow(base, static_cast<double>(j) / static_cast<double>(hd));
  if (!c.contains("rope_scaling") || c.at("rope_scaling").is_null()) return inv;
  const json& rs = c.at("rope_scaling");
  const std::string type =
      rs.contains("rope_type") ? rs.at("rope_type").get<std::string>() : rs.at("type").get<std::string>();
  if (type == "default") return inv;
  EXPECT_EQ(type, "llama3");
  const double factor = rs.at("factor").get<double>();
  const double low_freq_factor = rs.at("low_freq_factor").get<double>();
  const double high_freq_factor = rs.at("high_freq_factor").get<double>();
  const double old_context_len = rs.at("original_max_position_embeddings").get<double>();
  const double low_freq_wavelen = old_context_len / low_freq_factor;
  const double high_freq_wavelen = old_context_len / high_freq_factor;
  for (double& f : inv) {
    const double wavelen = 2.0 * std::numbers::pi / f;
    // inv_freq_llama = where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    const double llama = wavelen > low_freq_wavelen ? f / factor : f;
    const double smooth =
        (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
    const double smoothed = (1.0 - smooth) * llama / factor + smooth * llama;
    const bool is_medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    f = is_medium ? smoothed : llama;
  }
  return inv;
}

NaiveModel naive_model(const std::string& dir, const rlp::Checkpoint& ck) {
  std::ifstream in(fs::path(dir) / "config.json");
  const json c = json::parse(in);
  NaiveModel m;
  m.arch = c.at("architectures").at(0).get<std::string>();
  m.H = c.at("hidden_size").get<int64_t>();
  m.I = c.at("intermediate_size").get<int64_t>();
  m.L = c.at("num_hidden_layers").get<int64_t>();
  m.nh = c.at("num_attention_heads").get<int64_t>();
  m.nkv = c.value("num_key_value_heads", m.nh);
  m.hd = c.contains("head_dim") ? c.at("head_dim").get<int64_t>() : m.H / m.nh;
  m.V = c.at("vocab_size").get<int64_t>();
  m.eps = c.at("rms_norm_eps").get<double>();
  m.theta = c.value("rope_theta", 10000.0);
  m.tied = c.value("tie_word_embeddings", false);
  m.bias = m.arch == "Qwen2ForCausalLM";
  m.qknorm = m.arch == "Qwen3ForCausalLM";
  m.inv_freq = naive_inv_freq(c, m.hd);
  m.ck = &ck;
  return m;
}

// y[t][o] = sum_i x[t][i] * W[o][i] (+ b[o]); W row-major [out x in] as HF stores it.
Rows naive_linear(const Rows& x, const Vec& W, int64_t out, int64_t in, const Vec* b = nullptr) {
  Rows y(x.size(), Vec(sz(out), 0.0));
  for (std::size_t t = 0; t < x.size(); ++t)
    for (int64_t o = 0; o < out; ++o) {
      double s = 0.0;
      for (int64_t i = 0; i < in; ++i) s += x[t][sz(i)] * W[sz(o * in + i)];
      if (b) s += (*b)[sz(o)];
      y[t][sz(o)] = s;
    }
  return y;
}

// RMSNorm of x[off, off+n): x / sqrt(mean(x^2) + eps) * w.
void naive_rmsnorm(const double* x, const Vec& w, int64_t n, double eps, double* out) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = w[sz(i)] * (x[i] * inv);
}

Rows naive_norm_rows(const Rows& x, const Vec& w, int64_t n, double eps) {
  Rows y(x.size(), Vec(sz(n)));
  for (std::size_t t = 0; t < x.size(); ++t) naive_rmsnorm(x[t].data(), w, n, eps, y[t].data());
  return y;
}

// HF apply_rotary_pos_emb: x * cos + rotate_half(x) * sin, cos/sin = cat(freqs, freqs).
void naive_rope(Rows& x, int64_t heads, const NaiveModel& m) {
  const int64_t half = m.hd / 2;
  for (std::size_t t = 0; t < x.size(); ++t) {
    Vec cosv(sz(m.hd)), sinv(sz(m.hd));
    for (int64_t i = 0; i < m.hd; ++i) {
      const double ang = static_cast<double>(t) * m.inv_freq[sz(i % half)];
      cosv[sz(i)] = std::cos(ang);
      sinv[sz(i)] = std::sin(ang);
    }
    for (int64_t h = 0; h < heads; ++h) {
      const Vec src(x[t].begin() + h * m.hd, x[t].begin() + (h + 1) * m.hd);
      for (int64_t i = 0; i < m.hd; ++i) {
        const double rot = i < half ? -src[sz(i + half)] : src[sz(i - half)];
        x[t][sz(h * m.hd + i)] = src[sz(i)] * cosv[sz(i)] + rot * sinv[sz(i)];
      }
    }
  }
}

struct NaiveOut {
  Rows layer_resid;  // [layer * T + t][H]: residual stream after each decoder layer
  Rows logits, logprobs;
};

NaiveOut naive_forward(const NaiveModel& m, const std::vector<int32_t>& tokens) {
  const std::size_t T = tokens.size();
  NaiveOut out;
  const Vec emb = m.tensor("model.embed_tokens.weight");
  Rows x(T, Vec(sz(m.H)));
  for (std::size_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < m.H; ++c) x[t][sz(c)] = emb[sz(tokens[t] * m.H + c)];

  const int64_t qw = m.nh * m.hd, kw = m.nkv * m.hd, group = m.nh / m.nkv;
  for (int64_t l = 0; l < m.L; ++l) {
    const Rows xn = naive_norm_rows(x, m.layer(l, "input_layernorm.weight"), m.H, m.eps);
    Vec bq, bk, bv;
    if (m.bias) {
      bq = m.layer(l, "self_attn.q_proj.bias");
      bk = m.layer(l, "self_attn.k_proj.bias");
      bv = m.layer(l, "self_attn.v_proj.bias");
    }
    Rows q = naive_linear(xn, m.layer(l, "self_attn.q_proj.weight"), qw, m.H, m.bias ? &bq : nullptr);
    Rows k = naive_linear(xn, m.layer(l, "self_attn.k_proj.weight"), kw, m.H, m.bias ? &bk : nullptr);
    Rows v = naive_linear(xn, m.layer(l, "self_attn.v_proj.weight"), kw, m.H, m.bias ? &bv : nullptr);
    if (m.qknorm) {
      const Vec qn = m.layer(l, "self_attn.q_norm.weight"), kn = m.layer(l, "self_attn.k_norm.weight");
      for (std::size_t t = 0; t < T; ++t) {
        Vec tmp(sz(m.hd));
        for (int64_t h = 0; h < m.nh; ++h) {
          naive_rmsnorm(q[t].data() + h * m.hd, qn, m.hd, m.eps, tmp.data());
          std::copy(tmp.begin(), tmp.end(), q[t].begin() + h * m.hd);
        }
        for (int64_t h = 0; h < m.nkv; ++h) {
          naive_rmsnorm(k[t].data() + h * m.hd, kn, m.hd, m.eps, tmp.data());
          std::copy(tmp.begin(), tmp.end(), k[t].begin() + h * m.hd);
        }
      }
    }
    naive_rope(q, m.nh, m);
    naive_rope(k, m.nkv, m);

    // Causal softmax attention, key/value head h / group for query head h.
    Rows attn(T, Vec(sz(qw), 0.0));
    const double scale = 1.0 / std::sqrt(static_cast<double>(m.hd));
    for (std::size_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < m.nh; ++h) {
        const int64_t g = h / group;
        Vec score(t + 1);
        double mx = -std::numeric_limits<double>::infinity();
        for (std::size_t s = 0; s <= t; ++s) {
          double d = 0.0;
          for (int64_t i = 0; i < m.hd; ++i) d += q[t][sz(h * m.hd + i)] * k[s][sz(g * m.hd + i)];
          score[s] = d * scale;
          mx = std::max(mx, score[s]);
        }
        double den = 0.0;
        for (std::size_t s = 0; s <= t; ++s) den += std::exp(score[s] - mx);
        for (std::size_t s = 0; s <= t; ++s) {
          const double p = std::exp(score[s] - mx) / den;
          for (int64_t i = 0; i < m.hd; ++i) attn[t][sz(h * m.hd + i)] += p * v[s][sz(g * m.hd + i)];
        }
      }
    const Rows o = naive_linear(attn, m.layer(l, "self_attn.o_proj.weight"), m.H, qw);
    for (std::size_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < m.H; ++c) x[t][sz(c)] += o[t][sz(c)];

    const Rows xn2 = naive_norm_rows(x, m.layer(l, "post_attention_layernorm.weight"), m.H, m.eps);
    const Rows gate = naive_linear(xn2, m.layer(l, "mlp.gate_proj.weight"), m.I, m.H);
    const Rows up = naive_linear(xn2, m.layer(l, "mlp.up_proj.weight"), m.I, m.H);
    Rows act(T, Vec(sz(m.I)));
    for (std::size_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < m.I; ++j) {
        const double gj = gate[t][sz(j)];
        act[t][sz(j)] = gj * (1.0 / (1.0 + std::exp(-gj))) * up[t][sz(j)];
      }
    const Rows down = naive_linear(act, m.layer(l, "mlp.down_proj.weight"), m.H, m.I);
    for (std::size_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < m.H; ++c) x[t][sz(c)] += down[t][sz(c)];
    for (std::size_t t = 0; t < T; ++t) out.layer_resid.push_back(x[t]);
  }

  const Rows xf = naive_norm_rows(x, m.tensor("model.norm.weight"), m.H, m.eps);
  const Vec head = m.tied ? emb : m.tensor("lm_head.weight");
  out.logits = naive_linear(xf, head, m.V, m.H);
  out.logprobs = out.logits;
  for (Vec& row : out.logprobs) {
    const double mx = *std::max_element(row.begin(), row.end());
    double s = 0.0;
    for (double z : row) s += std::exp(z - mx);
    const double lse = mx + std::log(s);
    for (double& z : row) z -= lse;
  }
  return out;
}

// ------------------------------------------------------------------------------------------------
// Cases.

struct Case {
  std::string label;
  rlp::RandomCheckpointOptions opt;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.label; }

rlp::RandomCheckpointOptions base(const std::string& arch) {
  rlp::RandomCheckpointOptions o;
  o.arch = arch;
  o.hidden = 64;
  o.heads = 4;
  o.kv_heads = 2;
  o.layers = 2;
  o.vocab = 97;
  o.intermediate = 96;
  o.max_pos = 128;
  o.seed = 7;
  return o;
}

std::vector<Case> cases() {
  std::vector<Case> cs;
  auto add = [&](const std::string& label, rlp::RandomCheckpointOptions o) {
    cs.push_back({label, std::move(o)});
  };
  add("llama_untied", base("llama"));
  {
    auto o = base("llama");
    o.tied = true;
    o.seed = 11;
    add("llama_tied", o);
  }
  {
    auto o = base("llama");
    o.shards = 3;
    o.seed = 12;
    add("llama_sharded3", o);
  }
  add("llama3_untied", base("llama3"));
  {
    auto o = base("llama3");
    o.tied = true;
    o.kv_heads = 1;  // multi-query attention
    o.dtype = rlp::DType::bf16;
    o.seed = 13;
    add("llama3_tied_mqa_bf16", o);
  }
  {
    auto o = base("qwen2");
    o.tied = true;
    add("qwen2_tied", o);
  }
  {
    auto o = base("qwen2");
    o.dtype = rlp::DType::bf16;
    o.shards = 2;
    o.seed = 14;
    add("qwen2_untied_bf16_sharded2", o);
  }
  {
    auto o = base("qwen3");
    o.head_dim = 24;  // heads * head_dim = 96 != hidden
    add("qwen3_headdim24_untied", o);
  }
  {
    auto o = base("qwen3");
    o.tied = true;
    o.seed = 15;
    add("qwen3_tied", o);
  }
  add("mistral_untied", base("mistral"));
  {
    auto o = base("mistral");
    o.kv_heads = 4;  // no grouping
    o.dtype = rlp::DType::fp16;
    o.tied = true;
    o.seed = 16;
    add("mistral_tied_mha_f16", o);
  }
  return cs;
}

std::vector<int32_t> test_tokens(int vocab, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(0, vocab - 1);
  std::vector<int32_t> t(static_cast<std::size_t>(n));
  for (auto& x : t) x = d(rng);
  t[0] = 1;
  t[3] = 0;
  t[static_cast<std::size_t>(n - 2)] = vocab - 1;  // the edges of the vocabulary
  t[static_cast<std::size_t>(n - 1)] = t[2];       // a repeated token
  return t;
}

std::string sci(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", x);
  return buf;
}

double rel_err(double got, double ref) { return std::abs(got - ref) / std::max(std::abs(ref), 1.0); }

using OMat = rlp::OracleOps::Mat;
using EMat = rlp::EmulatedOps::Mat;

class ForwardReference : public ::testing::TestWithParam<Case> {};

TEST_P(ForwardReference, OracleMatchesNaiveReference) {
  const Case& c = GetParam();
  TempDir dir;
  auto o = c.opt;
  o.out = dir.str();
  rlp::write_random_checkpoint(o);
  const rlp::Checkpoint ck = rlp::Checkpoint::open(dir.str());
  const NaiveModel m = naive_model(dir.str(), ck);
  ASSERT_EQ(ck.tensors().count("lm_head.weight"), c.opt.tied ? 0u : 1u);

  const int T = 12;
  const auto tokens = test_tokens(o.vocab, T, 1234);
  const NaiveOut ref = naive_forward(m, tokens);

  const rlp::OracleWeights w = rlp::prepare_oracle_weights(ck);
  const rlp::OracleOps ops(ck.spec(), w);
  auto cache = ops.new_cache(T);
  OMat lp;
  std::vector<OMat> hidden;
  rlp::forward<rlp::OracleOps>(ops, cache, tokens.data(), T, 0, lp,
                               [&](int layer, const OMat& h, const rlp::MoeRouting*) {
                                 EXPECT_EQ(layer, static_cast<int>(hidden.size()));
                                 hidden.push_back(h);
                               });
  ASSERT_EQ(lp.rows(), T);
  ASSERT_EQ(lp.cols(), o.vocab);
  EXPECT_EQ(cache.length, T);

  // Per-layer residual streams.
  ASSERT_EQ(hidden.size(), static_cast<std::size_t>(o.layers));
  double worst_h = 0.0;
  for (int l = 0; l < o.layers; ++l)
    for (int t = 0; t < T; ++t)
      for (int ch = 0; ch < o.hidden; ++ch)
        worst_h = std::max(worst_h, rel_err(hidden[sz(l)](t, ch), ref.layer_resid[sz(l * T + t)][sz(ch)]));
  EXPECT_LE(worst_h, 1e-9) << c.label << ": residual stream";

  // Every log-probability, and the logits up to each row's normalizer (logprob - logprob of the
  // row's argmax equals logit - max logit).
  double worst_lp = 0.0, worst_logit = 0.0;
  for (int t = 0; t < T; ++t) {
    const Vec& rl = ref.logits[sz(t)];
    const auto amax = static_cast<int>(std::max_element(rl.begin(), rl.end()) - rl.begin());
    for (int j = 0; j < o.vocab; ++j) {
      worst_lp = std::max(worst_lp, rel_err(lp(t, j), ref.logprobs[sz(t)][sz(j)]));
      worst_logit = std::max(worst_logit, rel_err(lp(t, j) - lp(t, amax), rl[sz(j)] - rl[sz(amax)]));
    }
  }
  EXPECT_LE(worst_lp, 1e-9) << c.label << ": logprobs";
  EXPECT_LE(worst_logit, 1e-9) << c.label << ": logits (relative to the row max)";
  // Not a trivial agreement: the model must actually discriminate between tokens.
  double spread = 0.0;
  for (int t = 0; t < T; ++t) {
    double lo = lp(t, 0), hi = lp(t, 0);
    for (int j = 1; j < o.vocab; ++j) {
      lo = std::min(lo, lp(t, j));
      hi = std::max(hi, lp(t, j));
    }
    spread = std::max(spread, hi - lo);
  }
  EXPECT_GT(spread, 1.0) << c.label;
  RecordProperty("max_rel_err_logprobs", sci(worst_lp));
  RecordProperty("max_rel_err_residual", sci(worst_h));
}

TEST_P(ForwardReference, OraclePrefillDecodeEqualsTeacherForced) {
  const Case& c = GetParam();
  TempDir dir;
  auto o = c.opt;
  o.out = dir.str();
  rlp::write_random_checkpoint(o);
  const rlp::Checkpoint ck = rlp::Checkpoint::open(dir.str());
  const rlp::OracleWeights w = rlp::prepare_oracle_weights(ck);
  const rlp::OracleOps ops(ck.spec(), w);

  const int T = 12;
  const auto tokens = test_tokens(o.vocab, T, 99);
  auto tf_cache = ops.new_cache(T);
  OMat tf;
  rlp::forward(ops, tf_cache, tokens.data(), T, 0, tf);

  for (int P : {1, 5, T - 1}) {
    auto cache = ops.new_cache(T);
    OMat part;
    rlp::forward(ops, cache, tokens.data(), P, 0, part);
    ASSERT_EQ(part.rows(), P);
    EXPECT_EQ(cache.length, P);
    double worst = 0.0;
    for (int t = 0; t < P; ++t)
      for (int j = 0; j < o.vocab; ++j) worst = std::max(worst, rel_err(part(t, j), tf(t, j)));
    for (int t = P; t < T; ++t) {
      rlp::forward(ops, cache, tokens.data() + t, 1, t, part);
      ASSERT_EQ(part.rows(), 1);
      EXPECT_EQ(cache.length, t + 1);
      for (int j = 0; j < o.vocab; ++j) worst = std::max(worst, rel_err(part(0, j), tf(t, j)));
    }
    EXPECT_LE(worst, 1e-12) << c.label << " prefill " << P;
    RecordProperty("max_rel_err_prefill_" + std::to_string(P), sci(worst));
  }
}

TEST_P(ForwardReference, EmulatedPathsRunAndStayNearOracle) {
  const Case& c = GetParam();
  TempDir dir;
  auto o = c.opt;
  o.out = dir.str();
  rlp::write_random_checkpoint(o);
  const rlp::Checkpoint ck = rlp::Checkpoint::open(dir.str());
  const rlp::OracleWeights ow = rlp::prepare_oracle_weights(ck);
  const rlp::OracleOps oracle(ck.spec(), ow);

  const int T = 12, P = 4;
  const auto tokens = test_tokens(o.vocab, T, 4321);
  auto oc = oracle.new_cache(T);
  OMat truth;
  rlp::forward(oracle, oc, tokens.data(), T, 0, truth);

  for (const rlp::PathStyle& style : {rlp::default_training_style(), rlp::default_generation_style()}) {
    const rlp::PreparedWeights pw = rlp::prepare_weights(ck, style);
    const rlp::EmulatedOps ops(ck.spec(), pw, style);
    auto cache = ops.new_cache(T);
    EMat all(T, o.vocab), part;
    if (style.mode == rlp::SequenceMode::teacher_forced) {
      rlp::forward(ops, cache, tokens.data(), T, 0, all);
    } else {  // generation: prefill the prompt, then decode one token per call
      rlp::forward(ops, cache, tokens.data(), P, 0, part);
      all.topRows(P) = part;
      for (int t = P; t < T; ++t) {
        rlp::forward(ops, cache, tokens.data() + t, 1, t, part);
        all.row(t) = part.row(0);
      }
    }
    ASSERT_EQ(all.rows(), T) << c.label << " " << style.name;
    ASSERT_EQ(all.cols(), o.vocab) << c.label << " " << style.name;
    EXPECT_EQ(cache.length, T);
    double worst = 0.0;
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < o.vocab; ++j) {
        ASSERT_TRUE(std::isfinite(all(t, j)))
            << c.label << " " << style.name << " row " << t << " token " << j;
        ASSERT_LE(all(t, j), 1e-6) << c.label << " " << style.name;  // a log-probability
        worst = std::max(worst, std::abs(static_cast<double>(all(t, j)) - truth(t, j)));
      }
    // bf16 activations move logprobs by about 0.1 at most on these small models; a broken op moves
    // them by whole units.
    RecordProperty("max_abs_diff_vs_oracle_" + style.name, sci(worst));
    EXPECT_LT(worst, 0.5) << c.label << " " << style.name << ": max |logprob - oracle|";
    EXPECT_GT(worst, 0.0) << c.label << " " << style.name << ": a bf16 path cannot equal the float64 oracle";
  }
}

INSTANTIATE_TEST_SUITE_P(AllArchitectures, ForwardReference, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& p) { return p.param.label; });

// The naive reference's own RoPE frequencies against hand-computed Llama 3 values: wavelengths
// beyond original/low_freq_factor are divided by factor, those below original/high_freq_factor
// are kept, and the band between is interpolated.
TEST(NaiveReference, Llama3InvFreqRegimes) {
  const json c = {{"rope_theta", 500000.0},
                  {"rope_scaling",
                   {{"rope_type", "llama3"},
                    {"factor", 8.0},
                    {"low_freq_factor", 1.0},
                    {"high_freq_factor", 4.0},
                    {"original_max_position_embeddings", 8192}}}};
  const Vec inv = naive_inv_freq(c, 16);
  int scaled = 0, kept = 0, smoothed = 0;
  for (std::size_t i = 0; i < inv.size(); ++i) {
    const double raw = 1.0 / std::pow(500000.0, 2.0 * static_cast<double>(i) / 16.0);
    const double wl = 2.0 * std::numbers::pi / raw;
    if (wl > 8192.0) {
      EXPECT_DOUBLE_EQ(inv[i], raw / 8.0);
      ++scaled;
    } else if (wl < 2048.0) {
      EXPECT_DOUBLE_EQ(inv[i], raw);
      ++kept;
    } else {
      EXPECT_LT(inv[i], raw);
      EXPECT_GT(inv[i], raw / 8.0);
      ++smoothed;
    }
  }
  // The small generated llama3 checkpoints (head_dim 16) exercise all three regimes.
  EXPECT_GT(scaled, 0);
  EXPECT_GT(kept, 0);
  EXPECT_GT(smoothed, 0);
}

}  // namespace
