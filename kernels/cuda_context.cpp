#include "cuda_context.hpp"

#include <fmt/format.h>

namespace rlp::cuda {

std::shared_ptr<CudaContext> CudaContext::create() {
  std::shared_ptr<CudaContext> c(new CudaContext());
  c->info_ = require_device();
  c->fp8_ok_ = fp8_blockscaled_supported(c->info_, &c->fp8_why_);
  c->gemm_ = std::make_unique<LtGemm>();
  return c;
}

void CudaContext::note_once(const std::string& msg) {
  std::lock_guard<std::mutex> lock(note_mu_);
  if (notes_.insert(msg).second) fmt::print(stderr, "rlparity: note: --backend cuda: {}\n", msg);
}

}  // namespace rlp::cuda
