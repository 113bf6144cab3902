#include "cuda_context.hpp"

#include <fmt/format.h>

namespace rlp::cuda {

std::shared_ptr<CudaContext> CudaContext::create(GemmMode mode) {
  std::shared_ptr<CudaContext> c(new CudaContext());
  c->info_ = require_device();
  c->mode_ = mode;
  // The exact-order kernels need no cuBLASLt feature: fp8 runs on any device.
  c->fp8_ok_ = mode == GemmMode::exact || fp8_blockscaled_supported(c->info_, &c->fp8_why_);
  c->gemm_ = std::make_unique<LtGemm>();
  return c;
}

CudaContext::~CudaContext() {
  if (!gemm_) return;
  if (const GemmTiming* t = gemm_->stats()) {
    for (const auto& [what, s] : {std::pair{"M <= 64", t->small_m}, std::pair{"M > 64", t->large_m}})
      if (s.calls > 0)
        fmt::print(stderr,
                   "rlparity: note: --backend cuda: GEMM timing ({}): {} {} calls, {:.4g} GFLOP in {:.4g} s "
                   "of device "
                   "time = {:.4g} TFLOP/s\n",
                   what, s.calls, exact() ? "exact-order kernel" : "cublasLtMatmul", s.flops * 1e-9,
                   s.seconds, s.seconds > 0 ? s.flops / s.seconds * 1e-12 : 0.0);
  }
  const Fp8Pairing p = gemm_->fp8_pairing();
  if (p != Fp8Pairing::unknown)
    fmt::print(stderr, "rlparity: note: --backend cuda: block-scaled FP8 GEMM operand pairing: {}\n",
               p == Fp8Pairing::weights_a ? "A = weights (BLK128x128), B = activations (VEC128)"
                                          : "A = activations (VEC128), B = weights (BLK128x128)");
}

void CudaContext::note_once(const std::string& msg) {
  std::lock_guard<std::mutex> lock(note_mu_);
  if (notes_.insert(msg).second) fmt::print(stderr, "rlparity: note: --backend cuda: {}\n", msg);
}

}  // namespace rlp::cuda
