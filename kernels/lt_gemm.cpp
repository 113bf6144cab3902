#include "lt_gemm.hpp"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdlib>
#include <string>

#include "cublaslt_api.hpp"
#include "cuda_check.hpp"
#include "cuda_kernels.hpp"
#include "device_buffer.hpp"

namespace rlp::cuda {
namespace {

constexpr std::size_t kWorkspaceBytes = 32u << 20;  // as NVIDIA's samples and TransformerEngine use

// Descriptors destroyed on every path (also when a check throws).
struct MatmulDesc {
  cublasLtMatmulDesc_t d = nullptr;
  ~MatmulDesc() {
    if (d) cublaslt().MatmulDescDestroy(d);
  }
};
struct Layout {
  cublasLtMatrixLayout_t l = nullptr;
  ~Layout() {
    if (l) cublaslt().MatrixLayoutDestroy(l);
  }
};
struct Preference {
  cublasLtMatmulPreference_t p = nullptr;
  ~Preference() {
    if (p) cublaslt().MatmulPreferenceDestroy(p);
  }
};

int out_kind(cudaDataType_t t) { return t == CUDA_R_16BF ? 1 : (t == CUDA_R_16F ? 2 : 0); }
std::size_t out_size(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }

// The GEMM's output type: fp32 when a bias is added afterwards or fp32 is asked for, else the
// requested 16-bit format.
cudaDataType_t output_type(const float* bias, num::OutRound out) {
  return (bias || out == num::OutRound::fp32) ? CUDA_R_32F
                                              : (out == num::OutRound::fp16 ? CUDA_R_16F : CUDA_R_16BF);
}

// fp32 compute, A (weights) transposed, B (activations) not: TN, as TransformerEngine calls it.
void make_tn_desc(MatmulDesc& op) {
  RLP_CUBLAS_CHECK(cublaslt().MatmulDescCreate(&op.d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  RLP_CUBLAS_CHECK(cublaslt().MatmulDescSetAttribute(op.d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  RLP_CUBLAS_CHECK(cublaslt().MatmulDescSetAttribute(op.d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
}

}  // namespace

struct LtGemm::Impl {
  cublasLtHandle_t handle = nullptr;
  DeviceBuffer<char> workspace;
  DeviceBuffer<char> d_out;
  Fp8Pairing pairing = Fp8Pairing::unknown;
  // Timing (RLPARITY_CUDA_GEMM_TIMING=1): events around each cublasLtMatmul.
  bool timing = false;
  cudaEvent_t t0 = nullptr, t1 = nullptr;
  GemmTiming stats;

  void begin() {
    if (timing) RLP_CUDA_CHECK(cudaEventRecord(t0));
  }
  void end(int M, double flops) {
    if (!timing) return;
    RLP_CUDA_CHECK(cudaEventRecord(t1));
    RLP_CUDA_CHECK(cudaEventSynchronize(t1));
    float ms = 0;
    RLP_CUDA_CHECK(cudaEventElapsedTime(&ms, t0, t1));
    GemmStats& s = M <= 64 ? stats.small_m : stats.large_m;
    s.calls += 1;
    s.flops += flops;
    s.seconds += ms * 1e-3;
  }

  // D = A^T B with the given descriptors; false when no algorithm is offered. `rows` and `flops`
  // are the real problem's M and 2 M N K (padding rows excluded), for the timing statistics.
  bool run(cublasLtMatmulDesc_t op, cudaDataType_t a_type, cudaDataType_t b_type, cudaDataType_t d_type,
           const void* A, const void* B, int m, int n, int k, int rows, double flops) {
    Layout a, b, c, d;
    RLP_CUBLAS_CHECK(
        cublaslt().MatrixLayoutCreate(&a.l, a_type, static_cast<uint64_t>(k), static_cast<uint64_t>(m), k));
    RLP_CUBLAS_CHECK(
        cublaslt().MatrixLayoutCreate(&b.l, b_type, static_cast<uint64_t>(k), static_cast<uint64_t>(n), k));
    RLP_CUBLAS_CHECK(
        cublaslt().MatrixLayoutCreate(&c.l, d_type, static_cast<uint64_t>(m), static_cast<uint64_t>(n), m));
    RLP_CUBLAS_CHECK(
        cublaslt().MatrixLayoutCreate(&d.l, d_type, static_cast<uint64_t>(m), static_cast<uint64_t>(n), m));
    Preference pref;
    RLP_CUBLAS_CHECK(cublaslt().MatmulPreferenceCreate(&pref.p));
    const std::size_t ws = kWorkspaceBytes;
    RLP_CUBLAS_CHECK(cublaslt().MatmulPreferenceSetAttribute(pref.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                             &ws, sizeof ws));
    cublasLtMatmulHeuristicResult_t heur{};
    int returned = 0;
    const cublasStatus_t hs =
        cublaslt().MatmulAlgoGetHeuristic(handle, op, a.l, b.l, c.l, d.l, pref.p, 1, &heur, &returned);
    if (hs == CUBLAS_STATUS_NOT_SUPPORTED || hs == CUBLAS_STATUS_INVALID_VALUE ||
        (hs == CUBLAS_STATUS_SUCCESS && returned == 0))
      return false;
    RLP_CUBLAS_CHECK(hs);
    void* D = d_out.ensure(static_cast<std::size_t>(m) * static_cast<std::size_t>(n) * out_size(d_type));
    const float alpha = 1.0f, beta = 0.0f;
    begin();
    RLP_CUBLAS_CHECK(cublaslt().Matmul(handle, op, &alpha, A, a.l, B, b.l, &beta, D, c.l, D, d.l, &heur.algo,
                                       workspace.get(), ws, nullptr));
    end(rows, flops);
    return true;
  }
};

LtGemm::LtGemm() : impl_(std::make_unique<Impl>()) {
  RLP_CUBLAS_CHECK(cublaslt().Create(&impl_->handle));
  impl_->workspace.ensure(kWorkspaceBytes);
  const char* t = std::getenv("RLPARITY_CUDA_GEMM_TIMING");
  if (t && std::string(t) == "1") {
    impl_->timing = true;
    RLP_CUDA_CHECK(cudaEventCreate(&impl_->t0));
    RLP_CUDA_CHECK(cudaEventCreate(&impl_->t1));
  }
}

LtGemm::~LtGemm() {
  if (!impl_) return;
  if (impl_->t0) cudaEventDestroy(impl_->t0);
  if (impl_->t1) cudaEventDestroy(impl_->t1);
  if (impl_->handle) cublaslt().Destroy(impl_->handle);
}

const GemmTiming* LtGemm::stats() const { return impl_->timing ? &impl_->stats : nullptr; }
void LtGemm::timing_begin() { impl_->begin(); }
void LtGemm::timing_end(int M, double flops) { impl_->end(M, flops); }
Fp8Pairing LtGemm::fp8_pairing() const { return impl_->pairing; }

void LtGemm::gemm16(const uint16_t* X, const uint16_t* W, int M, int N, int K, bool fp16, const float* bias,
                    num::OutRound out, float* Y) {
  if (M == 0 || N == 0) return;
  const cudaDataType_t in_type = fp16 ? CUDA_R_16F : CUDA_R_16BF;
  const cudaDataType_t d_type = output_type(bias, out);
  MatmulDesc op;
  make_tn_desc(op);
  if (!impl_->run(op.d, in_type, in_type, d_type, W, X, N, M, K, M, 2.0 * M * N * K))
    throw Error(__FILE__, __LINE__,
                "cublasLtMatmulAlgoGetHeuristic: no algorithm for a " + std::string(fp16 ? "fp16" : "bf16") +
                    " GEMM M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K));
  kern::gemm_epilogue(impl_->d_out.get(), out_kind(d_type), M, N, bias, out, Y);
}

bool LtGemm::gemm_fp8(const uint8_t* Xq, const float* xs, const uint8_t* Wq, const float* ws, int M, int Mp,
                      int N, int K, const float* bias, num::OutRound out, float* Y) {
#if CUBLAS_VERSION >= 120900
  if (M == 0 || N == 0) return true;
  const cudaDataType_t d_type = output_type(bias, out);
  // Weights first (A = W with 128x128 blocks, B = X with 1x128 blocks, D = Y row-major), as
  // TransformerEngine's Float8BlockScaling forward GEMM pairs a 2D weight with a 1D input; else
  // NVIDIA's sample's order (A = X VEC128, B = W BLK128x128), whose D is Y transposed. The first
  // pairing cuBLASLt accepts is kept for the process.
  auto attempt = [&](Fp8Pairing pairing) {
    MatmulDesc op;
    make_tn_desc(op);
    const bool w_first = pairing == Fp8Pairing::weights_a;
    const int32_t a_mode =
        w_first ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    const int32_t b_mode =
        w_first ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    const float* a_scale = w_first ? ws : xs;
    const float* b_scale = w_first ? xs : ws;
    RLP_CUBLAS_CHECK(
        cublaslt().MatmulDescSetAttribute(op.d, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &a_mode, sizeof a_mode));
    RLP_CUBLAS_CHECK(
        cublaslt().MatmulDescSetAttribute(op.d, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &b_mode, sizeof b_mode));
    RLP_CUBLAS_CHECK(cublaslt().MatmulDescSetAttribute(op.d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale,
                                                       sizeof a_scale));
    RLP_CUBLAS_CHECK(cublaslt().MatmulDescSetAttribute(op.d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale,
                                                       sizeof b_scale));
    const double flops = 2.0 * M * N * K;
    if (w_first) return impl_->run(op.d, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, d_type, Wq, Xq, N, Mp, K, M, flops);
    return impl_->run(op.d, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, d_type, Xq, Wq, Mp, N, K, M, flops);
  };
  Fp8Pairing used = impl_->pairing;
  if (used != Fp8Pairing::unknown) {
    if (!attempt(used)) return false;
  } else if (attempt(Fp8Pairing::weights_a)) {
    used = impl_->pairing = Fp8Pairing::weights_a;
  } else if (attempt(Fp8Pairing::activations_a)) {
    used = impl_->pairing = Fp8Pairing::activations_a;
  } else {
    return false;
  }
  // weights_a: D is N x Mp column-major = Mp x N row-major (first M rows real); activations_a: D is
  // Mp x N column-major (ld Mp).
  kern::gemm_epilogue(impl_->d_out.get(), out_kind(d_type), M, N, bias, out, Y,
                      used == Fp8Pairing::weights_a ? 0 : Mp);
  return true;
#else
  (void)Xq, (void)xs, (void)Wq, (void)ws, (void)M, (void)Mp, (void)N, (void)K, (void)bias, (void)out, (void)Y;
  return false;
#endif
}

}  // namespace rlp::cuda
