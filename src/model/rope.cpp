#include "rlparity/model/rope.hpp"

#include <cmath>
#include <numbers>

namespace rlp {

std::vector<double> rope_inv_freq(const ModelSpec& spec) {
  const int half = spec.head_dim / 2;
  std::vector<double> inv(static_cast<std::size_t>(half));
  for (int i = 0; i < half; ++i)
    inv[static_cast<std::size_t>(i)] = 1.0 / std::pow(spec.rope_theta, 2.0 * i / spec.head_dim);
  const RopeScaling& rs = spec.rope_scaling;
  if (rs.type == RopeScaling::Type::llama3) {
    const double old_ctx = rs.original_max_position_embeddings;
    const double low_wavelen = old_ctx / rs.low_freq_factor;
    const double high_wavelen = old_ctx / rs.high_freq_factor;
    for (double& f : inv) {
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen > low_wavelen) {
        f = f / rs.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth =
            (old_ctx / wavelen - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
        f = (1.0 - smooth) * f / rs.factor + smooth * f;
      }
    }
  }
  return inv;
}

}  // namespace rlp
