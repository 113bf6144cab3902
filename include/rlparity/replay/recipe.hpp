// Precision recipes (DESIGN section 4): a pairing of a generation-style and a training-style path
// over the same weights and tokens. A recipe sets precisions; users' per-path knobs come after.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "rlparity/model/kernel_style.hpp"

namespace rlp {

struct RecipeOptions {
  int bf16_first_layers = 0;
  int bf16_last_layers = 0;
  bool pow2_scales = false;
  // The checkpoint is pre-quantized fp8 (ModelSpec::fp8): weight-quant checkpoint becomes the
  // generation default and is allowed at all (make_replay_plan sets it from the spec).
  bool fp8_checkpoint = false;
  // (knob, value) pairs applied to every recipe's generation / training path after the recipe.
  std::vector<std::pair<std::string, std::string>> gen_knobs, train_knobs;
};

struct Recipe {
  std::string name;
  PathStyle gen, train;
  bool needs_kv_scales() const {
    return gen.kv_cache == KvCacheDtype::fp8 || train.kv_cache == KvCacheDtype::fp8;
  }
};

const std::vector<std::string>& recipe_names();  // bf16, fp8-gen, fp8-e2e, fp8-e2e-kv, fp16
// InputError naming the recipe and the known ones when `name` is unknown.
Recipe make_recipe(const std::string& name, const RecipeOptions& options);

}  // namespace rlp
