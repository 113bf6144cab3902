// Change points of a per-position divergence curve (the sweep's /sweep/boundaries): positions where
// the level of the curve jumps, e.g. a tile boundary at response position 97, found by a stated
// test instead of by eye. The rule (docs/sweep.md, "Boundaries"):
//   w = min(window, floor(n / 2)); no boundaries when w < 2.
//   noise sigma = 1.4826 * MAD(first differences) / sqrt(2), MAD = median |d_i - median(d)|
//   (robust: one jump is one outlying difference, not a change of scale).
//   For each p in [w, n - w]: jump(p) = mean(c[p .. p+w-1]) - mean(c[p-w .. p-1]),
//   z(p) = |jump(p)| / (sigma * sqrt(2 / w)) (the standard error of a difference of two w-means).
//   p is a boundary when |jump(p)| > min_jump, z(p) >= z_threshold (z is +inf when sigma is 0), and
//   |jump(p)| is the largest of the candidates within w positions of p (the first one on ties).
// Windows holding a NaN are skipped. Pure and deterministic.
#pragma once
#include <cstdint>
#include <vector>

namespace rlp {

struct BoundaryOptions {
  int window = 8;            // positions averaged each side
  double z_threshold = 6.0;  // jump in units of its standard error under the noise
  double min_jump = 0.0;     // absolute floor on |jump| (exactly flat curves report nothing)
};

struct Boundary {
  int64_t position = 0;  // first position of the new level
  double jump = 0.0;     // right mean - left mean
  double z = 0.0;        // |jump| / its standard error (+inf when the noise estimate is 0)
};

std::vector<Boundary> find_boundaries(const std::vector<double>& curve, const BoundaryOptions& options = {});

}  // namespace rlp
