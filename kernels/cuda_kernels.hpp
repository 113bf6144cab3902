// Host launchers of the CUDA kernels of the model ops, over device pointers, on the default stream.
// Each kernel file kernels/<op>.cu mirrors the CPU op src/model/ops/<op>.cpp, and both call the
// element-level rules of include/rlparity/numerics/ops.hpp (RLP_HD); the .cu files are
// compiled with --fmad=false so that, as on the host (-ffp-contract=off), only explicit fmaf
// calls fuse. What legitimately differs from the emulator (reduction order of block reductions,
// rsqrtf, expf/exp2f/log2f/logf device implementations) is stated per kernel.
// No CUDA or Eigen type appears here: cuda_ops.cpp (g++) calls these.
#pragma once
#include <cstddef>
#include <cstdint>

#include "rlparity/numerics/gemm.hpp"
#include "rlparity/numerics/scaling.hpp"

namespace rlp::cuda::kern {

// Rounding format of activations: bf16 or fp16 (values held in float).
using num::Half16;

// ---- norms (norm.cu) ---------------------------------------------------------------------------
// resid[r] += delta[r] (delta may be null) stored in the act format (or kept fp32), then
// out[r] = RMSNorm(resid[r]) * w. fused: vLLM fused_add_rms_norm (variance from the unrounded sum,
// out = act(act(x * r) * w)); unfused: TE (variance from the stored residual, out = act(x * r * w)).
// One CUDA block per row; the sum of squares is a block tree reduction (not the emulator's
// sequential chain) and r = rsqrtf(var + eps) (the emulator uses a correctly rounded 1/sqrt).
// exact (--cuda-gemm exact): the emulator's order instead, a sequential fma chain over the row and
// r = 1 / sqrtf(var + eps) with IEEE division and square root (bit-identical to rms_norm_row).
void add_rms_norm(float* resid, const float* delta, const float* w, int rows, int n, float eps, bool fused,
                  bool resid_fp32, Half16 act, float* out, bool exact = false);
// Per-head RMSNorm of q or k in place (Qwen3): segments of `hd` of each row, weight w[hd].
void head_rms_norm(float* x, const float* w, int rows, int cols, int hd, float eps, bool fused, Half16 act,
                   bool exact = false);
// out = a + b, rounded to act unless resid_fp32. Bit-identical to the emulator.
void residual_sum(const float* a, const float* b, float* out, std::size_t n, bool resid_fp32, Half16 act);

// ---- RoPE (rope.cu) ----------------------------------------------------------------------------
// Rotates the first/second halves of every head of q [rows x q_cols] and k [rows x k_cols] in
// place; positions[r] of row r; inv_freq[hd/2]. cos/sin of the fp32 angle pos*inv_freq computed in
// double and rounded to float, as the emulator does (so the table is identical); table_rounded:
// vLLM (table and every product in act), else TE (fp32, one rounding).
void rope(float* q, int q_cols, float* k, int k_cols, const int* positions, int rows, const float* inv_freq,
          int hd, bool table_rounded, Half16 act);

// ---- SiLU-gated MLP (silu.cu) ------------------------------------------------------------------
// out = act(silu(g) * u) (fused) or act(act(silu(g)) * u); silu(g) = g / (1 + expf(-g)).
// exact: expf is the emulation's model (libm_model.hpp), as on the CPU.
void silu_mul(const float* gate, const float* up, float* out, std::size_t n, bool fused, Half16 act,
              bool exact = false);

// ---- attention with a KV cache (attention.cu) --------------------------------------------------
// Cache write of rows [pos0, pos0 + n): bf16 cache stores k/v as given; fp8 stores
// satfinite_e4m3(x / scale) (vLLM). K, V: [capacity x width] device cache of one layer.
void kv_cache_write(const float* k, const float* v, float* K, float* V, int n, int width, int pos0, bool fp8,
                    float k_scale, float v_scale);
// The same for the rows of a decode step, one per sequence: row r goes to row positions[r] of the
// caches Ks[r] / Vs[r] (device arrays of device pointers and positions), and also, as stored, to
// row r of stage_k / stage_v [n x width] (for one download to the host caches).
void kv_cache_write_rows(const float* k, const float* v, float* const* Ks, float* const* Vs,
                         const int* positions, int n, int width, bool fp8, float k_scale, float v_scale,
                         float* stage_k, float* stage_v);

struct AttentionParams {
  int n = 0;  // query rows, at positions pos0 .. pos0 + n - 1
  int pos0 = 0;
  int heads = 0, kv_heads = 0, hd = 0;
  int block = 128;             // KV positions per online-softmax step
  int partition = 0x7FFFFFFF;  // split-KV partition (positions); huge = one partition (flash)
  bool p_round = true;
  bool fp8 = false;  // fp8 KV cache: q quantized, P rounded to e4m3
  float q_scale = 1.0f, v_scale = 1.0f;
  float c_log2 = 0.0f;  // softmax_scale * (q_scale * k_scale if fp8) * log2(e), from the host
  Half16 act = Half16::bf16;
  bool exact = false;  // exp2/log2 from the emulation's models (libm_model.hpp)
  // Rows of different sequences (a decode step): row r attends over the cache Ks[r] / Vs[r] up to
  // position positions[r] (device arrays; max_position = the largest, from the host). Null: the
  // rows of one sequence at pos0 + r over the K / V passed to attention().
  const float* const* Ks = nullptr;
  const float* const* Vs = nullptr;
  const int* positions = nullptr;
  int max_position = 0;
};
// The largest attn_block / head_dim the kernel takes (shared memory); larger falls back.
inline constexpr int kMaxAttentionBlock = 2048;
inline constexpr int kMaxHeadDim = 1024;
// out [n x heads*hd] from q [n x heads*hd] against cache rows 0 .. pos0 + r (causal). The same
// order as the emulator (sequential fma dot products, online softmax per block, P.V chains in
// position order, split-KV merge through fp32 log-sum-exp in partition order); only exp2f/log2f are
// the device's. `scratch` holds n * heads * partitions * (hd + 2) floats.
void attention(const float* q, const float* K, const float* V, float* out, const AttentionParams& p,
               float* scratch);
std::size_t attention_scratch_floats(const AttentionParams& p);

// ---- log-softmax and the full-vocabulary KL reduction (logprobs.cu) ----------------------------
// In place per row of x [rows x cols]: x - (max + logf(sum expf(x - max))), fp32. One block per
// row: the max is exact, the sum is a block tree reduction (the emulator sums sequentially).
// exact: the emulator's order instead (sequential max and sum along the row) and its expf/logf
// models: bit-identical to EmulatedOps::logprobs' log-softmax.
void log_softmax(float* x, int rows, int cols, bool exact = false);
// Per row of the log-prob matrices lg, lt [rows x vocab]: KL(g||t), KL(t||g), H(g), JS in double
// (exp_model/log_model of double: glibc's algorithms, libm_model_f64.hpp), written to
// out[row * 4 + {0,1,2,3}]; block tree reduction over the vocab. The same terms (the same functions) as
// rlp::full_vocab_stats (token_metrics.cpp; num::FullVocabSums), in another summation order.
void full_vocab_kl(const float* lg, const float* lt, int rows, int vocab, double* out);

// ---- GEMM helpers (gemm_epilogue.cu) -----------------------------------------------------------
// Host float (already act-dtype values) -> 16-bit patterns are converted on the host; these run on
// the device: y[r][c] = round_out(in[r][c] (+ bias[c])) where `in` holds fp32, bf16 or fp16 values
// (in_kind 0, 1, 2) row-major [rows x cols], or column-major with leading dimension col_major_ld
// when that is > 0 (a GEMM whose operands were swapped writes Y transposed).
void gemm_epilogue(const void* in, int in_kind, int rows, int cols, const float* bias, num::OutRound out,
                   float* y, int col_major_ld = 0);
// --cuda-gemm exact: the emulator's accumulation order (num::gemm_f32acc, gemm.hpp) on CUDA cores,
// bit-identical to it. X: [M x K] act-dtype values as floats; W: [N x K] bf16 (fp16 when `fp16`)
// bit patterns; Y: [M x N] rounded per cfg.out.
void gemm_exact_f32acc(const float* X, const uint16_t* W, bool fp16, int M, int N, int K,
                       const num::GemmConfig& cfg, float* Y);
// num::gemm_fp8_blockscaled's order: X codes [M x K] in 1 x block_cols blocks (scale_inv
// [M x ceil(K/block_cols)]), W codes [N x K] in w_block_rows x block_cols blocks (scale_inv
// [ceil(N/w_block_rows) x ceil(K/block_cols)]), promotion and in-slice model from cfg.
struct Fp8GemmShape {
  int M = 0, N = 0, K = 0;
  int block_cols = 128, w_block_rows = 128;
  num::Fp8Kind x_kind = num::Fp8Kind::e4m3, w_kind = num::Fp8Kind::e4m3;
};
void gemm_exact_fp8(const uint8_t* Xc, const float* Xs, const uint8_t* Wc, const float* Ws,
                    const Fp8GemmShape& s, const num::GemmConfig& cfg, float* Y);
// VEC128_32F scale layout from the quantizer's [rows][kb] scale_inv (num::vec128_scale_entry:
// out[b * ldm + m] for m < rows, 0 for the padding rows m in [rows, ldm)).
void scales_to_vec128(const float* scale_inv, int rows, int kb, int ldm, float* out);

}  // namespace rlp::cuda::kern
