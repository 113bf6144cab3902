// Attention with a KV cache, in the emulator's order (see cuda_kernels.hpp): one CUDA block per
// (query row, head); scores are sequential fma dot products (one thread per key), the online
// softmax bookkeeping is done by thread 0 in key order, and each thread owns output dimensions
// whose P.V chains run in key order. This is a mirror of the emulated FlashAttention order, not
// FlashAttention's tensor-core order: it holds the emulator to the device's exp2f/log2f (or, with
// AttentionParams::exact, to the emulation's own exp2f/log2f models: then the bits are the
// emulator's), not to a different kernel.
#include <limits>

#include "device_common.cuh"

namespace rlp::cuda::kern {
namespace {

constexpr int kThreads = 128;

// Row r of k/v to row pos0 + r of K/V (one sequence), or to row positions[r] of Ks[r]/Vs[r] (one
// row per sequence); the stored value also to stage_k/stage_v when given.
__global__ void kv_write_kernel(const float* k, const float* v, float* K, float* V, float* const* Ks,
                                float* const* Vs, const int* positions, int n, int width, int pos0, bool fp8,
                                float ks, float vs, float* stage_k, float* stage_v) {
  const std::size_t total = static_cast<std::size_t>(n) * static_cast<std::size_t>(width);
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i >= total) return;
  const std::size_t r = i / static_cast<std::size_t>(width), c = i % static_cast<std::size_t>(width);
  float* Kd = Ks ? Ks[r] : K;
  float* Vd = Vs ? Vs[r] : V;
  const std::size_t pos =
      positions ? static_cast<std::size_t>(positions[r]) : static_cast<std::size_t>(pos0) + r;
  const std::size_t dst = pos * static_cast<std::size_t>(width) + c;
  const float kv = fp8 ? num::round_e4m3_sat(k[i] / ks) : k[i];
  const float vv = fp8 ? num::round_e4m3_sat(v[i] / vs) : v[i];
  Kd[dst] = kv;
  Vd[dst] = vv;
  if (stage_k) stage_k[i] = kv;
  if (stage_v) stage_v[i] = vv;
}

int partitions_for(const AttentionParams& p) {
  const long long positions =
      p.positions ? static_cast<long long>(p.max_position) + 1 : static_cast<long long>(p.pos0) + p.n;
  return static_cast<int>((positions + p.partition - 1) / p.partition);
}

__global__ void attention_kernel(const float* q, const float* K, const float* V, float* out,
                                 AttentionParams p, int max_parts, float* scratch) {
  extern __shared__ float sh[];
  float* qrow = sh;          // hd
  float* acc = qrow + p.hd;  // hd
  float* s = acc + p.hd;     // block
  float* pr = s + p.block;   // block
  __shared__ float st_m, st_l, sh_alpha, sh_mscaled, sh_mnew;
  const int r = static_cast<int>(blockIdx.x) / p.heads, h = static_cast<int>(blockIdx.x) % p.heads;
  const int hd = p.hd, width = p.kv_heads * hd, g = h / (p.heads / p.kv_heads);
  const int last = p.positions ? p.positions[r] : p.pos0 + r;
  if (p.Ks) {  // this row's own sequence
    K = p.Ks[r];
    V = p.Vs[r];
  }
  const float c = p.c_log2;
  const float* qsrc = q + static_cast<std::size_t>(r) * static_cast<std::size_t>(p.heads * hd) +
                      static_cast<std::size_t>(h) * hd;
  for (int d = static_cast<int>(threadIdx.x); d < hd; d += blockDim.x)
    qrow[d] = p.fp8 ? num::round_e4m3_sat(qsrc[d] / p.q_scale) : qsrc[d];
  const int nparts = static_cast<int>((static_cast<long long>(last) + p.partition) / p.partition);
  float* my_scratch =
      scratch + static_cast<std::size_t>(blockIdx.x) * static_cast<std::size_t>(max_parts) * (hd + 2);
  float* o = out + static_cast<std::size_t>(r) * static_cast<std::size_t>(p.heads * hd) +
             static_cast<std::size_t>(h) * hd;
  for (int pi = 0; pi < nparts; ++pi) {
    const int p0 = static_cast<int>(static_cast<long long>(pi) * p.partition);
    const int p1 =
        static_cast<int>(min(static_cast<long long>(p0) + p.partition - 1, static_cast<long long>(last)));
    if (threadIdx.x == 0) {
      st_m = -std::numeric_limits<float>::infinity();
      st_l = 0.0f;
    }
    for (int d = static_cast<int>(threadIdx.x); d < hd; d += blockDim.x) acc[d] = 0.0f;
    __syncthreads();
    for (int b0 = p0; b0 <= p1; b0 += p.block) {
      const int b1 = min(b0 + p.block - 1, p1);
      for (int j = b0 + static_cast<int>(threadIdx.x); j <= b1; j += blockDim.x) {
        const float* kr = K + static_cast<std::size_t>(j) * static_cast<std::size_t>(width) +
                          static_cast<std::size_t>(g) * hd;
        float dot = 0.0f;
        for (int d = 0; d < hd; ++d) dot = fmaf(qrow[d], kr[d], dot);
        s[j - b0] = dot;
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        float m_new = st_m;
        for (int j = b0; j <= b1; ++j) m_new = (m_new < s[j - b0]) ? s[j - b0] : m_new;
        const float m_scaled = m_new * c;
        const float alpha = exp2_f(st_m * c - m_scaled, p.exact);  // 0 on the first block
        st_l = st_l * alpha;
        sh_alpha = alpha;
        sh_mscaled = m_scaled;
        sh_mnew = m_new;
      }
      __syncthreads();
      for (int j = b0 + static_cast<int>(threadIdx.x); j <= b1; j += blockDim.x) {
        const float pj = exp2_f(fmaf(s[j - b0], c, -sh_mscaled), p.exact);
        s[j - b0] = pj;
        pr[j - b0] = num::round_to(pj, num::attention_p_format(p.p_round, p.fp8, p.act));
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        float l = st_l;
        for (int j = b0; j <= b1; ++j) l = l + s[j - b0];
        st_l = l;
        st_m = sh_mnew;
      }
      for (int d = static_cast<int>(threadIdx.x); d < hd; d += blockDim.x) {
        float a = acc[d] * sh_alpha;
        const float* vcol = V + static_cast<std::size_t>(g) * hd + d;
        for (int j = b0; j <= b1; ++j)
          a = fmaf(pr[j - b0], vcol[static_cast<std::size_t>(j) * static_cast<std::size_t>(width)], a);
        acc[d] = a;
      }
      __syncthreads();
    }
    if (nparts == 1) {
      const float inv = 1.0f / st_l;
      for (int d = static_cast<int>(threadIdx.x); d < hd; d += blockDim.x)
        o[d] = num::round_act(acc[d] * inv * p.v_scale, p.act);
      return;
    }
    float* slot = my_scratch + static_cast<std::size_t>(pi) * (hd + 2);
    if (threadIdx.x == 0) {
      slot[0] = st_m;
      slot[1] = st_l;
    }
    for (int d = static_cast<int>(threadIdx.x); d < hd; d += blockDim.x) slot[2 + d] = acc[d];
    __syncthreads();
  }
  // Split-KV combine: lse_i = m_i * c + log2(l_i), weights exp2(lse_i - lse) in partition order.
  __shared__ float lse_all;
  if (threadIdx.x == 0) {
    float lse_max = -std::numeric_limits<float>::infinity();
    for (int i = 0; i < nparts; ++i) {
      float* slot = my_scratch + static_cast<std::size_t>(i) * (hd + 2);
      const float lse = slot[0] * c + log2_f(slot[1], p.exact);
      slot[0] = lse;  // m is no longer needed
      lse_max = (lse_max < lse) ? lse : lse_max;
    }
    float sum = 0.0f;
    for (int i = 0; i < nparts; ++i)
      sum = sum + exp2_f(my_scratch[static_cast<std::size_t>(i) * (hd + 2)] - lse_max, p.exact);
    lse_all = lse_max + log2_f(sum, p.exact);
  }
  __syncthreads();
  for (int d = static_cast<int>(threadIdx.x); d < hd; d += blockDim.x) {
    float a = 0.0f;
    for (int i = 0; i < nparts; ++i) {
      const float* slot = my_scratch + static_cast<std::size_t>(i) * (hd + 2);
      a = fmaf(exp2_f(slot[0] - lse_all, p.exact), slot[2 + d] / slot[1], a);
    }
    o[d] = num::round_act(a * p.v_scale, p.act);
  }
}

}  // namespace

void kv_cache_write(const float* k, const float* v, float* K, float* V, int n, int width, int pos0, bool fp8,
                    float k_scale, float v_scale) {
  const std::size_t total = static_cast<std::size_t>(n) * static_cast<std::size_t>(width);
  if (total == 0) return;
  kv_write_kernel<<<blocks_for(total, 256), 256>>>(k, v, K, V, nullptr, nullptr, nullptr, n, width, pos0, fp8,
                                                   k_scale, v_scale, nullptr, nullptr);
  RLP_CUDA_CHECK_LAUNCH("kv_write_kernel");
}

void kv_cache_write_rows(const float* k, const float* v, float* const* Ks, float* const* Vs,
                         const int* positions, int n, int width, bool fp8, float k_scale, float v_scale,
                         float* stage_k, float* stage_v) {
  const std::size_t total = static_cast<std::size_t>(n) * static_cast<std::size_t>(width);
  if (total == 0) return;
  kv_write_kernel<<<blocks_for(total, 256), 256>>>(k, v, nullptr, nullptr, Ks, Vs, positions, n, width, 0,
                                                   fp8, k_scale, v_scale, stage_k, stage_v);
  RLP_CUDA_CHECK_LAUNCH("kv_write_kernel");
}

std::size_t attention_scratch_floats(const AttentionParams& p) {
  const int parts = partitions_for(p);
  if (parts <= 1) return 1;
  return static_cast<std::size_t>(p.n) * static_cast<std::size_t>(p.heads) * static_cast<std::size_t>(parts) *
         static_cast<std::size_t>(p.hd + 2);
}

void attention(const float* q, const float* K, const float* V, float* out, const AttentionParams& p,
               float* scratch) {
  if (p.n <= 0) return;
  if (p.block < 1 || p.block > kMaxAttentionBlock || p.hd < 1 || p.hd > kMaxHeadDim || p.partition < 1 ||
      p.kv_heads < 1 || p.heads % p.kv_heads != 0)
    throw ::rlp::Error(__FILE__, __LINE__,
                       "cuda attention: unsupported parameters (block, head_dim or heads)");
  const std::size_t shared = static_cast<std::size_t>(2 * p.hd + 2 * p.block) * sizeof(float);
  const unsigned grid = static_cast<unsigned>(p.n) * static_cast<unsigned>(p.heads);
  attention_kernel<<<grid, kThreads, shared>>>(q, K, V, out, p, partitions_for(p), scratch);
  RLP_CUDA_CHECK_LAUNCH("attention_kernel");
}

}  // namespace rlp::cuda::kern
