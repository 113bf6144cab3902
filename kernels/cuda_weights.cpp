#include "cuda_weights.hpp"

#include <fmt/format.h>

#include "rlparity/numerics/formats.hpp"
#include "rlparity/numerics/quantize.hpp"

namespace rlp::cuda {
namespace {

void upload_linear(const PreparedLinear& lin, Fp8Upload fp8, CudaLinear& d) {
  d.out = lin.out;
  d.in = lin.in;
  d.fp8 = lin.fp8;
  if (!lin.bias.empty()) d.bias.upload(lin.bias);
  if (!lin.fp8) {
    d.w16.upload(lin.w.data(), lin.w.size());  // already the act dtype's bit patterns
    return;
  }
  d.block_rows = lin.wq.block_rows;
  d.block_cols = lin.wq.block_cols;
  d.kind = lin.wq.kind;
  if (fp8 == Fp8Upload::exact) {
    d.fp8_on_gpu = true;
    d.codes.upload(lin.wq.codes);
    d.scales.upload(lin.wq.scale_inv);
    return;
  }
  d.fp8_on_gpu = fp8 == Fp8Upload::cublaslt && CudaWeights::fp8_shape_problem(lin).empty();
  if (!d.fp8_on_gpu) return;
  d.codes.upload(lin.wq.codes);
  d.scales.upload(num::scales_for_cublaslt_blk128(lin.wq));
}

}  // namespace

std::string CudaWeights::fp8_shape_problem(const PreparedLinear& lin) {
  if (lin.wq.block_rows != 128 || lin.wq.block_cols != 128)
    return fmt::format("weight blocks {}x{} (cuBLASLt takes 128x128)", lin.wq.block_rows, lin.wq.block_cols);
  if (lin.wq.kind != num::Fp8Kind::e4m3) return "weights not e4m3";
  // Our reading of the cuBLASLt constraints, not verified on a GPU: K and N whole 128-blocks
  // (TransformerEngine and DeepGEMM require the same of real models); partial blocks fall back.
  if (lin.in % 128 != 0 || lin.out % 128 != 0)
    return fmt::format("shape {}x{} is not a multiple of 128 (partial scale blocks)", lin.out, lin.in);
  return {};
}

CudaWeights::CudaWeights(const ModelSpec& spec, const PreparedWeights& w, Fp8Upload fp8) {
  layers_.resize(static_cast<std::size_t>(spec.layers));
  for (int l = 0; l < spec.layers; ++l) {
    const PreparedLayer& src = w.layers[static_cast<std::size_t>(l)];
    CudaLayer& dst = layers_[static_cast<std::size_t>(l)];
    for (int p = 0; p < kNumProj; ++p) upload_linear(src.proj[p], fp8, dst.proj[p]);
    dst.input_norm.upload(src.input_norm);
    dst.post_norm.upload(src.post_norm);
    if (!src.q_norm.empty()) dst.q_norm.upload(src.q_norm);
    if (!src.k_norm.empty()) dst.k_norm.upload(src.k_norm);
  }
  upload_linear(w.lm_head, Fp8Upload::none, lm_head_);
  final_norm_.upload(w.final_norm);
}

const float* CudaWeights::norm(int layer, NormSlot slot) const {
  if (slot == NormSlot::final) return final_norm_.get();
  const CudaLayer& L = layers_[static_cast<std::size_t>(layer)];
  return slot == NormSlot::input ? L.input_norm.get() : L.post_norm.get();
}

const float* CudaWeights::head_norm(int layer, Proj which) const {
  const CudaLayer& L = layers_[static_cast<std::size_t>(layer)];
  return which == Proj::q ? L.q_norm.get() : L.k_norm.get();
}

}  // namespace rlp::cuda
