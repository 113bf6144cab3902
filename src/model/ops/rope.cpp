// RoPE on the CPU: vLLM's rotary kernel (table and products in the act format) or TE's fused RoPE
// (fp32); the mirror of kernels/rope.cu. The element rules are num::rope_entry and num::rope_rotate.
#include <algorithm>
#include <vector>

#include "op_grain.hpp"
#include "rlparity/model/emulated_ops.hpp"
#include "rlparity/numerics/ops.hpp"
#include "rlparity/util/parallel.hpp"

namespace rlp {

using ops_detail::kRowGrain;

void EmulatedOps::rope(Mat& q, Mat& k, const int* positions) const {
  const int hd = spec_.head_dim, half = hd / 2;
  const bool rounded = style_.rope_table_rounded;
  parallel_for(static_cast<std::size_t>(q.rows()), kRowGrain, [&](std::size_t r0, std::size_t r1) {
    std::vector<num::RopeEntry> table(static_cast<std::size_t>(half));
    auto rotate = [&](Mat& m, int r) {
      for (int h = 0; h < m.cols() / hd; ++h) {
        float* x = m.row(r).data() + h * hd;
        for (int i = 0; i < half; ++i)
          num::rope_rotate(x[i], x[i + half], table[static_cast<std::size_t>(i)], rounded, style_.act);
      }
    };
    for (int r = static_cast<int>(r0); r < static_cast<int>(r1); ++r) {
      if (positions[r] < rope_table_positions_) {
        const auto at = static_cast<std::ptrdiff_t>(positions[r]) * half;
        std::copy_n(rope_table_.begin() + at, half, table.begin());
      } else {
        const float pos = static_cast<float>(positions[r]);
        for (int i = 0; i < half; ++i)
          table[static_cast<std::size_t>(i)] =
              num::rope_entry(pos, inv_freq_[static_cast<std::size_t>(i)], rounded, style_.act);
      }
      rotate(q, r);
      rotate(k, r);
    }
  });
}

}  // namespace rlp
