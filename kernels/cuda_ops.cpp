#include "cuda_ops.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "cuda_casts.hpp"
#include "cuda_kernels.hpp"
#include "rlparity/model/rope.hpp"
#include "rlparity/numerics/formats.hpp"
#include "rlparity/numerics/ops.hpp"

namespace rlp::cuda {
namespace {

using Lock = std::lock_guard<std::mutex>;

// Scratch slots of the context (each op uses them under the context lock).
enum Slot { kA, kB, kC, kD, kE, kCodes, kScaleInv, kScaleVec, kPos, kX16, kScratch, kPtrs, kSlotCount };
static_assert(kSlotCount <= CudaContext::kSlots);

std::size_t size_of(const HostMat& m) { return static_cast<std::size_t>(m.size()); }

void to_device(float* d, const HostMat& m) {
  if (m.size()) RLP_CUDA_CHECK(cudaMemcpy(d, m.data(), size_of(m) * sizeof(float), cudaMemcpyHostToDevice));
}
void to_host(HostMat& m, const float* d) {
  if (m.size()) RLP_CUDA_CHECK(cudaMemcpy(m.data(), d, size_of(m) * sizeof(float), cudaMemcpyDeviceToHost));
}

// out = f(a, b) element by element on the device (a, b and out of one shape): uploads a and b,
// runs `launch(d_a, d_b, d_out, n)` under the context lock, downloads out.
template <class Launch>
void elementwise_pair(CudaContext& ctx, const HostMat& a, const HostMat& b, HostMat& out,
                      const Launch& launch) {
  out.resize(a.rows(), a.cols());
  Lock lock(ctx.mutex());
  float* da = ctx.scratch<float>(kA, size_of(a));
  float* db = ctx.scratch<float>(kB, size_of(b));
  float* dout = ctx.scratch<float>(kC, size_of(a));
  to_device(da, a);
  to_device(db, b);
  launch(da, db, dout, size_of(a));
  to_host(out, dout);
}

}  // namespace

CudaOps::CudaOps(std::shared_ptr<CudaContext> ctx, const ModelSpec& spec, const PreparedWeights& weights,
                 const PathStyle& style, const KvScales* kv_scales)
    : ctx_(std::move(ctx)),
      spec_(spec),
      host_w_(weights),
      style_(style),
      emu_(spec, weights, style, kv_scales) {
  if (kv_scales) kv_scales_ = *kv_scales;
  if (spec_.num_experts > 0)
    RLP_THROW_INPUT(
        "path '{}': {} is a mixture-of-experts model; the CUDA backend has no MoE kernels yet "
        "(run it with --backend cpu)",
        style_.name, spec_.arch_name);
  // The CUDA forward runs one GPU's whole layer; the tensor-parallel split and its all-reduce are
  // modelled on the CPU only (src/model/ops/linear.cpp, logprobs.cpp).
  if (style_.tp != 1)
    RLP_THROW_INPUT(
        "path '{}': tp {} is not supported by the CUDA backend (its forward has no "
        "tensor-parallel all-reduce); run this path with --backend cpu or tp 1",
        style_.name, style_.tp);
  Lock lock(ctx_->mutex());
  w_ = std::make_unique<CudaWeights>(
      spec, weights,
      ctx_->exact() ? Fp8Upload::exact : (ctx_->fp8_ok() ? Fp8Upload::cublaslt : Fp8Upload::none));
  std::vector<float> f;
  for (double x : rope_inv_freq(spec)) f.push_back(static_cast<float>(x));
  inv_freq_.upload(f);

  if (style_.fp8_linear && !ctx_->fp8_ok())
    ctx_->note_once(
        fmt::format("fp8 linears of the {} path run on the CPU emulator: {}", style_.name, ctx_->fp8_why()));
  if (style_.attn_block > kern::kMaxAttentionBlock || spec_.head_dim > kern::kMaxHeadDim ||
      style_.attn_block < 1) {
    attention_gpu_ = false;
    ctx_->note_once(fmt::format(
        "attention of the {} path runs on the CPU emulator (attn-block {} / head_dim {} "
        "beyond the kernel's {} / {})",
        style_.name, style_.attn_block, spec_.head_dim, kern::kMaxAttentionBlock, kern::kMaxHeadDim));
  }
  // The GEMM accumulation order is the hardware's own: say which emulator models are not applied.
  if (ctx_->exact()) return;  // the exact kernels apply every one of them
  std::vector<std::string> models;
  if (style_.split_k != 1)
    models.push_back(style_.split_k == 0 ? "split-k=auto" : fmt::format("split-k={}", style_.split_k));
  if (style_.k_chunk != 0) models.push_back(fmt::format("k-chunk={}", style_.k_chunk));
  if (style_.fp8_linear && style_.fp8_promotion == num::Promotion::deepgemm)
    models.push_back("fp8-promotion=deepgemm");
  if (style_.fp8_linear && style_.fp8_accum == num::SliceAccum::hopper) models.push_back("fp8-accum=hopper");
  if (style_.decode_m() != 1)
    models.push_back(fmt::format("batch={} (decode M {}; kernel selection sees the real M)", style_.batch,
                                 style_.decode_m()));
  if (!models.empty()) {
    std::string list;
    for (const auto& m : models) list += (list.empty() ? "" : ", ") + m;
    ctx_->note_once(
        fmt::format("GEMMs of the {} path run in cuBLASLt's own accumulation order; the emulator's "
                    "models {} are not applied on the GPU",
                    style_.name, list));
  }
}

bool CudaOps::linear_on_gpu(int layer, Proj p) const {
  const CudaLinear& lin = w_->linear(layer, p);
  return !lin.fp8 || lin.fp8_on_gpu;
}

void CudaOps::embed(const int32_t* tokens, int n, Mat& h) const { emu_.embed(tokens, n, h); }

void CudaOps::add_norm(Mat& resid, const Mat* delta, int layer, NormSlot slot, Mat& out) const {
  const int rows = static_cast<int>(resid.rows()), H = spec_.hidden;
  out.resize(rows, H);
  Lock lock(ctx_->mutex());
  float* d_res = ctx_->scratch<float>(kA, size_of(resid));
  float* d_delta = delta ? ctx_->scratch<float>(kB, size_of(*delta)) : nullptr;
  float* d_out = ctx_->scratch<float>(kC, size_of(resid));
  to_device(d_res, resid);
  if (delta) to_device(d_delta, *delta);
  kern::add_rms_norm(d_res, d_delta, w_->norm(layer, slot), rows, H, eps(),
                     style_.norm == NormKind::fused_add, style_.residual == ResidualDtype::fp32, style_.act,
                     d_out, ctx_->exact());
  to_host(resid, d_res);
  to_host(out, d_out);
}

void CudaOps::residual_sum(const Mat& resid, const Mat& delta, Mat& out) const {
  elementwise_pair(*ctx_, resid, delta, out, [&](const float* a, const float* b, float* o, std::size_t n) {
    kern::residual_sum(a, b, o, n, style_.residual == ResidualDtype::fp32, style_.act);
  });
}

// Caller holds the lock. The path's activation quantization (1x128 blocks along K, its scale
// convention) by the shared-numerics kernel, as the emulator's gemm quantizes: codes [Mp x K] (rows
// past M zero, for cuBLASLt's padding) and scale_inv [M x ceil(K/128)] in scratch slots.
void CudaOps::quantize_activations(const float* d_x, int M, int Mp, int K, uint8_t*& d_codes,
                                   float*& d_sinv) const {
  const std::size_t kb = static_cast<std::size_t>((K + 127) / 128);
  const std::size_t ncodes = static_cast<std::size_t>(Mp) * static_cast<std::size_t>(K);
  d_codes = ctx_->scratch<uint8_t>(kCodes, ncodes);
  if (Mp > M) RLP_CUDA_CHECK(cudaMemset(d_codes, 0, ncodes));
  d_sinv = ctx_->scratch<float>(kScaleInv, static_cast<std::size_t>(M) * kb);
  quantize_blocks_device(d_x, M, K, 1, 128, style_.act_scale_options(), d_codes, d_sinv);
}

// Caller holds the lock. d_y receives [rows x out] floats.
bool CudaOps::gemm(const Mat& x, const CudaLinear& lin, const PreparedLinear& host, bool out_fp32,
                   bool decode_step, float* d_y) const {
  if (ctx_->exact()) return gemm_exact(x, lin, out_fp32, decode_step, d_y);
  const int M = static_cast<int>(x.rows()), N = lin.out, K = lin.in;
  // Bias: fp32 GEMM output, bias added and rounded once to the act format (as the emulator).
  const num::OutRound act_round = num::out_round_of(style_.act);
  const num::OutRound out = !lin.bias.empty() ? act_round : (out_fp32 ? num::OutRound::fp32 : act_round);
  const float* bias = lin.bias.empty() ? nullptr : lin.bias.get();
  if (!lin.fp8) {
    bits_.resize(size_of(x));
    for (std::size_t i = 0; i < bits_.size(); ++i)
      bits_[i] = style_.act == num::Half16::bf16 ? num::float_to_bf16_bits(x.data()[i])
                                                 : num::float_to_fp16_bits(x.data()[i]);
    uint16_t* d_x = ctx_->scratch<uint16_t>(kX16, bits_.size());
    if (!bits_.empty())
      RLP_CUDA_CHECK(cudaMemcpy(d_x, bits_.data(), bits_.size() * sizeof(uint16_t), cudaMemcpyHostToDevice));
    ctx_->gemm().gemm16(d_x, lin.w16.get(), M, N, K, style_.act == num::Half16::fp16, bias, out, d_y);
    return true;
  }
  if (!lin.fp8_on_gpu) {
    if (ctx_->fp8_ok())
      ctx_->note_once(fmt::format("an fp8 linear of the {} path runs on the CPU emulator: {}", style_.name,
                                  CudaWeights::fp8_shape_problem(host)));
    return false;
  }
  // Activations quantized on the device by the shared-numerics kernel (1x128 along K), then the
  // scales laid out for VEC128_32F; rows padded to a multiple of 16 with zero codes (scale 0).
  const int Mp = (M + 15) / 16 * 16, kb = (K + 127) / 128;
  float* d_x = ctx_->scratch<float>(kA, size_of(x));
  to_device(d_x, x);
  uint8_t* d_codes = nullptr;
  float* d_sinv = nullptr;
  quantize_activations(d_x, M, Mp, K, d_codes, d_sinv);
  float* d_svec =
      ctx_->scratch<float>(kScaleVec, static_cast<std::size_t>(Mp) * static_cast<std::size_t>(kb));
  kern::scales_to_vec128(d_sinv, M, kb, Mp, d_svec);
  if (ctx_->gemm().gemm_fp8(d_codes, d_svec, lin.codes.get(), lin.scales.get(), M, Mp, N, K, bias, out, d_y))
    return true;
  ctx_->note_once(
      fmt::format("cuBLASLt offers no block-scaled FP8 algorithm for M={} N={} K={}; that linear of the "
                  "{} path runs on the CPU emulator",
                  M, N, K, style_.name));
  return false;
}

// --cuda-gemm exact: the configuration the emulator picks (EmulatedOps::gemm: kernel selection
// sees the decode batch during decode steps), the emulator's order, bias in the fp32 epilogue.
bool CudaOps::gemm_exact(const Mat& x, const CudaLinear& lin, bool out_fp32, bool decode_step,
                         float* d_y) const {
  const int M = static_cast<int>(x.rows()), N = lin.out, K = lin.in;
  if (lin.fp8 && lin.block_cols != 128) return false;  // the emulator reports the problem
  num::GemmConfig cfg = style_.gemm_config(decode_step ? style_.decode_m() : M, K);
  const num::OutRound act_round = cfg.out;
  const bool has_bias = !lin.bias.empty();
  if (out_fp32 || has_bias) cfg.out = num::OutRound::fp32;
  float* d_raw =
      has_bias ? ctx_->scratch<float>(kE, static_cast<std::size_t>(M) * static_cast<std::size_t>(N)) : d_y;
  float* d_x = ctx_->scratch<float>(kA, size_of(x));
  to_device(d_x, x);
  ctx_->gemm().timing_begin();
  if (!lin.fp8) {
    kern::gemm_exact_f32acc(d_x, lin.w16.get(), style_.act == num::Half16::fp16, M, N, K, cfg, d_raw);
  } else {
    uint8_t* d_codes = nullptr;
    float* d_sinv = nullptr;
    quantize_activations(d_x, M, M, K, d_codes, d_sinv);
    kern::Fp8GemmShape s;
    s.M = M;
    s.N = N;
    s.K = K;
    s.block_cols = 128;
    s.w_block_rows = lin.block_rows;
    s.w_kind = lin.kind;
    kern::gemm_exact_fp8(d_codes, d_sinv, lin.codes.get(), lin.scales.get(), s, cfg, d_raw);
  }
  ctx_->gemm().timing_end(M, 2.0 * M * N * K);
  if (has_bias) kern::gemm_epilogue(d_raw, 0, M, N, lin.bias.get(), act_round, d_y);
  return true;
}

void CudaOps::linear(const Mat& x, int layer, Proj p, Mat& y, bool decode_step) const {
  const CudaLinear& lin = w_->linear(layer, p);
  const PreparedLinear& host = host_w_.layers[static_cast<std::size_t>(layer)][p];
  bool done = false;
  {
    Lock lock(ctx_->mutex());
    float* d_y =
        ctx_->scratch<float>(kD, static_cast<std::size_t>(x.rows()) * static_cast<std::size_t>(lin.out));
    if (gemm(x, lin, host, false, decode_step, d_y)) {
      y.resize(x.rows(), lin.out);
      to_host(y, d_y);
      done = true;
    }
  }
  if (!done) emu_.linear(x, layer, p, y, decode_step);
}

void CudaOps::head_norm(Mat& x, int layer, Proj which) const {
  Lock lock(ctx_->mutex());
  float* d = ctx_->scratch<float>(kA, size_of(x));
  to_device(d, x);
  kern::head_rms_norm(d, w_->head_norm(layer, which), static_cast<int>(x.rows()), static_cast<int>(x.cols()),
                      spec_.head_dim, eps(), style_.norm == NormKind::fused_add, style_.act, ctx_->exact());
  to_host(x, d);
}

void CudaOps::rope(Mat& q, Mat& k, const int* positions) const {
  const int rows = static_cast<int>(q.rows());
  Lock lock(ctx_->mutex());
  float* dq = ctx_->scratch<float>(kA, size_of(q));
  float* dk = ctx_->scratch<float>(kB, size_of(k));
  int* dpos = ctx_->scratch<int>(kPos, static_cast<std::size_t>(rows));
  to_device(dq, q);
  to_device(dk, k);
  if (rows)
    RLP_CUDA_CHECK(
        cudaMemcpy(dpos, positions, static_cast<std::size_t>(rows) * sizeof(int), cudaMemcpyHostToDevice));
  kern::rope(dq, static_cast<int>(q.cols()), dk, static_cast<int>(k.cols()), dpos, rows, inv_freq_.get(),
             spec_.head_dim, style_.rope_table_rounded, style_.act);
  to_host(q, dq);
  to_host(k, dk);
}

CudaOps::Cache CudaOps::new_cache(int capacity) const {
  Cache c;
  static_cast<KvCache&>(c) = emu_.new_cache(capacity);
  if (attention_gpu_) {
    c.dev = std::make_shared<DeviceKv>();
    c.dev->k.resize(static_cast<std::size_t>(spec_.layers));
    c.dev->v.resize(static_cast<std::size_t>(spec_.layers));
  }
  return c;
}

// The kernel parameters of this path's attention for `n` rows at pos0 (the emulator's exponent
// scale computed on the host exactly as it does); k_scale: the fp8 cache's key scale (1 for bf16).
kern::AttentionParams CudaOps::attention_params(int layer, int n, int pos0, float& k_scale) const {
  const std::size_t li = static_cast<std::size_t>(layer);
  const bool fp8 = style_.kv_cache == KvCacheDtype::fp8;
  kern::AttentionParams p;
  p.n = n;
  p.pos0 = pos0;
  p.heads = spec_.heads;
  p.kv_heads = spec_.kv_heads;
  p.hd = spec_.head_dim;
  p.block = style_.attn_block;
  p.partition =
      style_.attention == AttentionKind::split_kv ? std::max(1, style_.split_kv_partition) : 0x7FFFFFFF;
  p.p_round = style_.attn_p_round;
  p.fp8 = fp8;
  p.q_scale = fp8 ? kv_scales_.q[li] : 1.0f;
  p.v_scale = fp8 ? kv_scales_.v[li] : 1.0f;
  k_scale = fp8 ? kv_scales_.k[li] : 1.0f;
  p.c_log2 = num::attention_exp2_scale(p.hd, fp8 ? p.q_scale * k_scale : 1.0f);
  p.act = style_.act;
  p.exact = ctx_->exact();
  return p;
}

// The device copy of one layer of a cache (allocated on first use; rows [0, pos) hold what earlier
// calls wrote: a sequence fills its cache from position 0 up, one call after another).
std::pair<float*, float*> CudaOps::device_kv(Cache& cache, int layer) const {
  const std::size_t li = static_cast<std::size_t>(layer);
  const std::size_t capacity = static_cast<std::size_t>(cache.k[li].rows()) *
                               static_cast<std::size_t>(spec_.kv_heads * spec_.head_dim);
  return {cache.dev->k[li].ensure(capacity), cache.dev->v[li].ensure(capacity)};
}

void CudaOps::attention(int layer, const Mat& q, const Mat& k, const Mat& v, int pos0, Cache& cache,
                        Mat& out) const {
  if (!attention_gpu_ || !cache.dev) {
    emu_.attention(layer, q, k, v, pos0, cache, out);
    return;
  }
  const int n = static_cast<int>(q.rows());
  const std::size_t li = static_cast<std::size_t>(layer);
  Mat& K = cache.k[li];
  Mat& V = cache.v[li];
  if (pos0 + n > K.rows()) RLP_THROW("KV cache capacity {} exceeded at position {}", K.rows(), pos0 + n);
  const int width = spec_.kv_heads * spec_.head_dim;
  float ks = 1.0f;
  const kern::AttentionParams p = attention_params(layer, n, pos0, ks);
  out.resize(n, spec_.heads * spec_.head_dim);
  const std::size_t old = static_cast<std::size_t>(pos0) * static_cast<std::size_t>(width);
  const std::size_t fresh = static_cast<std::size_t>(n) * static_cast<std::size_t>(width);
  Lock lock(ctx_->mutex());
  const auto [dK, dV] = device_kv(cache, layer);
  float* dk = ctx_->scratch<float>(kC, fresh);
  float* dv = ctx_->scratch<float>(kD, fresh);
  float* dq = ctx_->scratch<float>(kE, size_of(q));
  float* dout = ctx_->scratch<float>(kX16, size_of(out));
  float* dscratch = ctx_->scratch<float>(kScratch, kern::attention_scratch_floats(p));
  to_device(dk, k);
  to_device(dv, v);
  to_device(dq, q);
  kern::kv_cache_write(dk, dv, dK, dV, n, width, pos0, p.fp8, ks, p.v_scale);
  // The host cache gets the new rows too (the emulator's attention and tests read it).
  RLP_CUDA_CHECK(cudaMemcpy(K.row(pos0).data(), dK + old, fresh * sizeof(float), cudaMemcpyDeviceToHost));
  RLP_CUDA_CHECK(cudaMemcpy(V.row(pos0).data(), dV + old, fresh * sizeof(float), cudaMemcpyDeviceToHost));
  kern::attention(dq, dK, dV, dout, p, dscratch);
  to_host(out, dout);
}

bool CudaOps::attention_rows(int layer, const Mat& q, const Mat& k, const Mat& v, const int* positions,
                             const std::vector<Cache*>& caches, Mat& out) const {
  const int n = static_cast<int>(q.rows()), width = spec_.kv_heads * spec_.head_dim;
  const std::size_t li = static_cast<std::size_t>(layer);
  bool on_gpu = attention_gpu_;
  for (const Cache* c : caches) on_gpu = on_gpu && c->dev;
  if (!on_gpu) return false;  // forward_decode calls attention() row by row
  out.resize(n, spec_.heads * spec_.head_dim);
  int max_position = 0;
  for (int r = 0; r < n; ++r) {
    const Mat& K = caches[static_cast<std::size_t>(r)]->k[li];
    if (positions[r] + 1 > K.rows())
      RLP_THROW("KV cache capacity {} exceeded at position {}", K.rows(), positions[r] + 1);
    max_position = std::max(max_position, positions[r]);
  }
  float ks = 1.0f;
  kern::AttentionParams p = attention_params(layer, n, 0, ks);
  const std::size_t fresh = static_cast<std::size_t>(n) * static_cast<std::size_t>(width);
  Lock lock(ctx_->mutex());
  // Per-row cache pointers and positions, uploaded once per call (pointers, then positions).
  std::vector<float*> ptrs(2 * static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    const auto [dK, dV] = device_kv(*caches[static_cast<std::size_t>(r)], layer);
    ptrs[static_cast<std::size_t>(r)] = dK;
    ptrs[static_cast<std::size_t>(n + r)] = dV;
  }
  auto** d_ptrs = ctx_->scratch<float*>(kPtrs, ptrs.size());
  int* d_pos = ctx_->scratch<int>(kPos, static_cast<std::size_t>(n));
  RLP_CUDA_CHECK(cudaMemcpy(d_ptrs, ptrs.data(), ptrs.size() * sizeof(float*), cudaMemcpyHostToDevice));
  RLP_CUDA_CHECK(
      cudaMemcpy(d_pos, positions, static_cast<std::size_t>(n) * sizeof(int), cudaMemcpyHostToDevice));
  p.Ks = d_ptrs;
  p.Vs = d_ptrs + n;
  p.positions = d_pos;
  p.max_position = max_position;
  float* dk = ctx_->scratch<float>(kC, fresh);
  float* dv = ctx_->scratch<float>(kD, fresh);
  float* dq = ctx_->scratch<float>(kE, size_of(q));
  float* dout = ctx_->scratch<float>(kX16, size_of(out));
  float* dscratch = ctx_->scratch<float>(kScratch, kern::attention_scratch_floats(p));
  float* stage = ctx_->scratch<float>(kB, 2 * fresh);
  to_device(dk, k);
  to_device(dv, v);
  to_device(dq, q);
  kern::kv_cache_write_rows(dk, dv, d_ptrs, d_ptrs + n, d_pos, n, width, p.fp8, ks, p.v_scale, stage,
                            stage + fresh);
  kern::attention(dq, nullptr, nullptr, dout, p, dscratch);
  to_host(out, dout);
  // The host caches get their new rows too, from one download.
  std::vector<float> rows(2 * fresh);
  RLP_CUDA_CHECK(cudaMemcpy(rows.data(), stage, rows.size() * sizeof(float), cudaMemcpyDeviceToHost));
  for (int r = 0; r < n; ++r) {
    Cache& c = *caches[static_cast<std::size_t>(r)];
    const float* kr = rows.data() + static_cast<std::size_t>(r) * static_cast<std::size_t>(width);
    std::copy(kr, kr + width, c.k[li].row(positions[r]).data());
    std::copy(kr + fresh, kr + fresh + width, c.v[li].row(positions[r]).data());
  }
  return true;
}

void CudaOps::moe(const Mat&, int, Mat&, bool, MoeRouting*, const MoeReplay*) const {
  RLP_THROW("CudaOps::moe: MoE models are refused when the backend is built");
}

void CudaOps::silu_mul(const Mat& gate, const Mat& up, Mat& out) const {
  elementwise_pair(*ctx_, gate, up, out, [&](const float* g, const float* u, float* o, std::size_t n) {
    kern::silu_mul(g, u, o, n, style_.mlp_fused, style_.act, ctx_->exact());
  });
}

void CudaOps::logprobs(const Mat& xn, Mat& out, bool decode_step) const {
  const CudaLinear& lin = w_->lm_head();
  Lock lock(ctx_->mutex());
  float* d_y =
      ctx_->scratch<float>(kD, static_cast<std::size_t>(xn.rows()) * static_cast<std::size_t>(lin.out));
  if (!gemm(xn, lin, host_w_.lm_head, style_.logits_fp32, decode_step, d_y))
    RLP_THROW("lm_head GEMM could not run on the GPU");  // lm_head is never fp8: unreachable
  kern::log_softmax(d_y, static_cast<int>(xn.rows()), lin.out, ctx_->exact());
  out.resize(xn.rows(), lin.out);
  to_host(out, d_y);
}

}  // namespace rlp::cuda
