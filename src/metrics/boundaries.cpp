#include "rlparity/metrics/boundaries.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace rlp {
namespace {

double median_of(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

std::vector<Boundary> find_boundaries(const std::vector<double>& curve, const BoundaryOptions& options) {
  const auto n = static_cast<int64_t>(curve.size());
  const int64_t w = std::min<int64_t>(options.window, n / 2);
  if (w < 2) return {};

  std::vector<double> diffs;
  for (int64_t i = 0; i + 1 < n; ++i) {
    const double d = curve[static_cast<std::size_t>(i + 1)] - curve[static_cast<std::size_t>(i)];
    if (std::isfinite(d)) diffs.push_back(d);
  }
  const double med = median_of(diffs);
  for (double& d : diffs) d = std::fabs(d - med);
  const double sigma = 1.4826 * median_of(diffs) / std::sqrt(2.0);
  const double se = sigma * std::sqrt(2.0 / static_cast<double>(w));

  // Candidates: every position whose window pair passes the test.
  std::vector<Boundary> cand;
  for (int64_t p = w; p <= n - w; ++p) {
    double left = 0.0, right = 0.0;
    bool finite = true;
    for (int64_t k = 0; k < w; ++k) {
      left += curve[static_cast<std::size_t>(p - w + k)];
      right += curve[static_cast<std::size_t>(p + k)];
    }
    finite = std::isfinite(left) && std::isfinite(right);
    if (!finite) continue;
    const double jump = (right - left) / static_cast<double>(w);
    if (!(std::fabs(jump) > options.min_jump)) continue;
    const double z = se > 0.0 ? std::fabs(jump) / se : std::numeric_limits<double>::infinity();
    if (z >= options.z_threshold) cand.push_back({p, jump, z});
  }
  // Non-maximum suppression: keep a candidate whose |jump| no candidate within w positions beats
  // (an earlier equal one wins).
  std::vector<Boundary> out;
  for (std::size_t i = 0; i < cand.size(); ++i) {
    bool best = true;
    for (std::size_t j = 0; j < cand.size() && best; ++j) {
      if (j == i || std::llabs(cand[j].position - cand[i].position) > w) continue;
      const double a = std::fabs(cand[i].jump), b = std::fabs(cand[j].jump);
      if (b > a || (b == a && j < i)) best = false;
    }
    if (best) out.push_back(cand[i]);
  }
  return out;
}

}  // namespace rlp
