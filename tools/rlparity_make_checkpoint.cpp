// rlparity_make_checkpoint: writes a small random checkpoint of any supported architecture in the
// real Hugging Face on-disk format (config.json + safetensors, sharded with an index if asked).
// Deterministic in its options. A thin CLI over rlp::write_random_checkpoint.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <map>

#include "rlparity/model/checkpoint_writer.hpp"
#include "rlparity/model/kernel_style.hpp"
#include "rlparity/util/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Write a random Hugging Face-format checkpoint (config.json + safetensors)"};
  rlp::RandomCheckpointOptions o;
  std::string dtype = "f32", quantize = "none", quant_convention = "nemo-refit";
  bool quant_pow2 = false;
  app.add_option("--arch", o.arch,
                 "llama | llama3 | qwen2 | qwen3 | mistral | qwen3-moe | qwen2-moe | mixtral")
      ->check(CLI::IsMember(
          {"llama", "llama3", "qwen2", "qwen3", "mistral", "qwen3-moe", "qwen2-moe", "mixtral"}))
      ->capture_default_str();
  app.add_option("--hidden", o.hidden, "hidden size")->capture_default_str();
  app.add_option("--intermediate", o.intermediate, "MLP intermediate size")->capture_default_str();
  app.add_option("--layers", o.layers, "number of layers")->capture_default_str();
  app.add_option("--heads", o.heads, "attention heads")->capture_default_str();
  app.add_option("--kv-heads", o.kv_heads, "key/value heads (GQA)")->capture_default_str();
  app.add_option("--head-dim", o.head_dim, "head dimension (0: hidden / heads)")->capture_default_str();
  app.add_option("--vocab", o.vocab, "vocabulary size")->capture_default_str();
  app.add_option("--max-pos", o.max_pos, "max_position_embeddings")->capture_default_str();
  app.add_option("--dtype", dtype, "f32 | bf16 | f16 | fp8 (= bf16 with --quantize fp8-block)")
      ->check(CLI::IsMember({"f32", "bf16", "f16", "fp8"}))
      ->capture_default_str();
  app.add_option("--quantize", quantize,
                 "fp8-block: decoder linears as F8_E4M3 codes + float32 weight_scale_inv per 128x128 block "
                 "(the DeepSeek-V3 / Qwen3-FP8 layout), quantized from the --dtype master; fp8-channel: "
                 "compressed-tensors per-channel fp8 (llm-compressor's FP8_DYNAMIC: weight_scale [out, 1] in "
                 "the --dtype, per-token activations)")
      ->check(CLI::IsMember({"none", "fp8-block", "fp8-channel"}))
      ->capture_default_str();
  app.add_option("--quant-convention", quant_convention,
                 "scale convention of --quantize (nemo-refit: scale 448/amax, clamp, cast, as transformers' "
                 "Fp8Quantize)")
      ->check(CLI::IsMember({"te", "vllm", "deepgemm", "nemo-refit"}))
      ->capture_default_str();
  app.add_flag("--quant-pow2", quant_pow2, "power-of-2 scales for --quantize");
  app.add_option(
         "--fp8-format", o.fp8_format,
         "layout of --quantize fp8-block: fp8 (quant_method fp8, weight_scale_inv) or compressed-tensors "
         "(llm-compressor's block fp8: weight_scale, ignore lm_head)")
      ->check(CLI::IsMember({"fp8", "compressed-tensors"}))
      ->capture_default_str();
  app.add_flag("--tied,!--untied", o.tied, "tie lm_head to the embeddings (default: untied)");
  app.add_option("--shards", o.shards, "number of safetensors shards (>1 writes an index)")
      ->capture_default_str();
  app.add_option("--seed", o.seed, "random seed")->capture_default_str();
  app.add_option("--out", o.out, "output directory")->required();
  app.add_option("--outlier-layer", o.outlier_layer, "layer whose q/k/v/gate/up get an outlier input channel")
      ->capture_default_str();
  app.add_option("--outlier-scale", o.outlier_scale, "factor for the outlier channel")->capture_default_str();
  app.add_option("--outlier-channel", o.outlier_channel, "the outlier input channel")->capture_default_str();
  app.add_option("--experts", o.experts, "MoE archs: experts per layer")->capture_default_str();
  app.add_option("--top-k", o.top_k, "MoE archs: experts routed per token")->capture_default_str();
  app.add_option("--moe-intermediate", o.moe_intermediate,
                 "qwen3-moe, qwen2-moe: each expert's intermediate size (mixtral: --intermediate)")
      ->capture_default_str();
  app.add_option("--shared-intermediate", o.shared_intermediate,
                 "qwen2-moe: the shared expert's intermediate size")
      ->capture_default_str();
  app.add_flag("--norm-topk,!--no-norm-topk", o.norm_topk,
               "qwen3-moe, qwen2-moe: norm_topk_prob (default: on; mixtral always renormalises)");
  app.add_option("--mlp-only-layers", o.mlp_only_layers, "qwen3-moe, qwen2-moe: layers that keep a dense MLP")
      ->delimiter(',');
  app.add_flag("--router-near-tie", o.router_near_tie,
               "MoE archs: router rows of experts 0 and 1 one bf16 ulp apart in every layer");
  CLI11_PARSE(app, argc, argv);

  o.dtype = dtype == "bf16" || dtype == "fp8" ? rlp::DType::bf16
            : dtype == "f16"                  ? rlp::DType::fp16
                                              : rlp::DType::fp32;
  o.fp8_block = dtype == "fp8" || quantize == "fp8-block" || quantize == "fp8-channel";
  o.fp8_channel = quantize == "fp8-channel";
  if (o.fp8_channel) o.fp8_format = "compressed-tensors";
  rlp::PathStyle knobs;  // the knob table spells the conventions
  rlp::set_knob(knobs, "weight-quant", quant_convention);
  o.quant.convention = knobs.weight_quant;
  o.quant.pow2 = quant_pow2;
  try {
    rlp::write_random_checkpoint(o);
  } catch (const rlp::Error& e) {
    std::cerr << "rlparity_make_checkpoint: error: " << e.what() << "\n";
    return 1;
  }
  std::cout << fmt::format("wrote {} checkpoint to {}\n", o.arch, o.out);
  return 0;
}
