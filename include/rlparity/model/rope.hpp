// Rotary position embedding frequencies (HF rotate-half layout), including Llama 3.x
// `rope_scaling` of type llama3, computed in float64 once; kernel paths round from these.
#pragma once
#include <vector>

#include "rlparity/model/model_spec.hpp"

namespace rlp {

// inv_freq[i] for i in [0, head_dim/2), as HF's _compute_default/llama3_parameters define them.
std::vector<double> rope_inv_freq(const ModelSpec& spec);

}  // namespace rlp
