#include "cuda_backend.hpp"

#include "cuda_context.hpp"
#include "cuda_ops.hpp"

namespace rlp::cuda {
namespace {

class CudaRunner final : public PathRunner {
 public:
  CudaRunner(std::shared_ptr<CudaContext> ctx, const ModelSpec& spec, const PreparedWeights& w,
             const PathStyle& style, const KvScales* kv)
      : ops_(std::move(ctx), spec, w, style, kv) {}
  std::vector<PathOutput<Mat>> run(SequenceMode mode, const std::vector<SeqTokens>& seqs,
                                   bool want_hidden) const override {
    return run_path_group(ops_, mode, seqs, want_hidden, true, ops_.style().prefill_chunk);
  }

 private:
  CudaOps ops_;
};

}  // namespace

std::shared_ptr<const ReplayBackend> make_replay_backend(const std::string& gemm) {
  if (gemm != "cublaslt" && gemm != "exact")
    throw Error("--cuda-gemm " + gemm + ": expected cublaslt or exact");
  const GemmMode mode = gemm == "exact" ? GemmMode::exact : GemmMode::cublaslt;
  std::shared_ptr<CudaContext> ctx = CudaContext::create(mode);
  auto b = std::make_shared<ReplayBackend>();
  b->name = "cuda";
  b->info = ctx->info().to_json();
  if (mode == GemmMode::exact) {
    b->info["cuda_gemm"] =
        "exact: the emulator's accumulation order in CUDA kernels (CUDA cores, no tensor cores)";
    b->info["cuda_fp8_gemm"] =
        "exact: the emulator's block-scaled order (promotion and in-slice model per path)";
  } else {
    b->info["cuda_gemm"] = "cuBLASLt, its own accumulation order (bf16/fp16 operands, fp32 accumulation)";
    b->info["cuda_fp8_gemm"] =
        ctx->fp8_ok() ? "cuBLASLt block-scaled e4m3: VEC128_32F activations x BLK128x128_32F weights"
                      : "CPU emulator (" + ctx->fp8_why() + ")";
  }
  b->make_runner = [ctx](const ModelSpec& spec, const PreparedWeights& w, const PathStyle& style,
                         const KvScales* kv) -> std::unique_ptr<PathRunner> {
    return std::make_unique<CudaRunner>(ctx, spec, w, style, kv);
  };
  return b;
}

}  // namespace rlp::cuda
