#include "rlparity/replay/recipe.hpp"

#include "rlparity/util/error.hpp"

namespace rlp {

const std::vector<std::string>& recipe_names() {
  static const std::vector<std::string> names{"bf16", "fp8-gen", "fp8-e2e", "fp8-e2e-kv", "fp16"};
  return names;
}

Recipe make_recipe(const std::string& name, const RecipeOptions& o) {
  Recipe r;
  r.name = name;
  r.gen = default_generation_style();
  r.train = default_training_style();
  bool gen_fp8 = false, train_fp8 = false;
  if (name == "bf16") {
  } else if (name == "fp8-gen") {
    gen_fp8 = true;
  } else if (name == "fp8-e2e") {
    gen_fp8 = train_fp8 = true;
  } else if (name == "fp8-e2e-kv") {
    gen_fp8 = train_fp8 = true;
    r.gen.kv_cache = KvCacheDtype::fp8;
  } else if (name == "fp16") {
    r.gen.act = r.train.act = num::Half16::fp16;
  } else {
    std::string known;
    for (const auto& n : recipe_names()) known += (known.empty() ? "" : ", ") + n;
    RLP_THROW_INPUT("unknown recipe '{}' (known: {})", name, known);
  }
  for (auto [style, fp8] : {std::pair{&r.gen, gen_fp8}, std::pair{&r.train, train_fp8}}) {
    style->fp8_linear = fp8;
    if (fp8) {
      style->bf16_first_layers = o.bf16_first_layers;
      style->bf16_last_layers = o.bf16_last_layers;
      style->pow2_scales = o.pow2_scales;
    }
  }
  // A pre-quantized fp8 checkpoint: generation uses its codes and scales verbatim, as vLLM does;
  // training requantizes the (dequantized) master with its own convention.
  r.gen.weight_from_checkpoint = o.fp8_checkpoint;
  for (const auto& [k, v] : o.gen_knobs) set_knob(r.gen, k, v);
  for (const auto& [k, v] : o.train_knobs) set_knob(r.train, k, v);
  if (!o.fp8_checkpoint)
    for (const PathStyle* s : {&r.gen, &r.train})
      if (s->weight_from_checkpoint)
        RLP_THROW_INPUT(
            "--{}-weight-quant checkpoint: the checkpoint is not fp8 (config.json has no quantization_config "
            "with quant_method fp8); choose te, vllm, deepgemm or nemo-refit",
            s->name);
  return r;
}

}  // namespace rlp
