// The small generated checkpoint that the inspect and attribution tests rank layers on: 4 layers,
// hidden 256 and intermediate 384 (several 128x128 blocks per weight), and one input channel of
// layer 2's weights scaled up so that their blocks are hard to quantize.
#pragma once
#include <cstdint>
#include <string>

#include "rlparity/model/checkpoint_writer.hpp"

namespace rlp_test {

inline rlp::RandomCheckpointOptions outlier_checkpoint_options(const std::string& out, int seed,
                                                               double outlier_scale, int outlier_channel) {
  return {.hidden = 256,
          .intermediate = 384,
          .layers = 4,
          .heads = 4,
          .kv_heads = 2,
          .vocab = 256,
          .seed = static_cast<uint64_t>(seed),
          .out = out,
          .outlier_layer = 2,
          .outlier_scale = outlier_scale,
          .outlier_channel = outlier_channel};
}

}  // namespace rlp_test
