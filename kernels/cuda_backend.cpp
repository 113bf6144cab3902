#include "cuda_backend.hpp"

#include "cuda_context.hpp"
#include "cuda_ops.hpp"

namespace rlp::cuda {
namespace {

class CudaRunner final : public PathRunner {
 public:
  CudaRunner(std::shared_ptr<CudaContext> ctx, const ModelSpec& spec, const PreparedWeights& w, const PathStyle& style,
             const KvScales* kv)
      : ops_(std::move(ctx), spec, w, style, kv) {}
  std::vector<PathOutput<Mat>> run(SequenceMode mode, const std::vector<SeqTokens>& seqs,
                                   bool want_hidden) const override {
    return run_path_group(ops_, mode, seqs, want_hidden);
  }

 private:
  CudaOps ops_;
};

}  // namespace

std::shared_ptr<const ReplayBackend> make_replay_backend() {
  std::shared_ptr<CudaContext> ctx = CudaContext::create();
  auto b = std::make_shared<ReplayBackend>();
  b->name = "cuda";
  b->info = ctx->info().to_json();
  b->info["cuda_gemm"] = "cuBLASLt, its own accumulation order (bf16/fp16 operands, fp32 accumulation)";
  b->info["cuda_fp8_gemm"] = ctx->fp8_ok() ? "cuBLASLt block-scaled e4m3: VEC128_32F activations x BLK128x128_32F weights"
                                           : "CPU emulator (" + ctx->fp8_why() + ")";
  b->make_runner = [ctx](const ModelSpec& spec, const PreparedWeights& w, const PathStyle& style,
                         const KvScales* kv) -> std::unique_ptr<PathRunner> {
    return std::make_unique<CudaRunner>(ctx, spec, w, style, kv);
  };
  return b;
}

}  // namespace rlp::cuda
