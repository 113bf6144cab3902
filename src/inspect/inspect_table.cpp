// inspect's terminal table: tensors by worst SNR, each convention's SNR with fp32 and power-of-2
// scales, and the recommendation line.
#include <fmt/format.h>

#include <algorithm>

#include "rlparity/inspect/inspect.hpp"

namespace rlp {

std::string format_inspect(const InspectResult& r, std::size_t max_rows) {
  std::string s;
  s += fmt::format("{:<34} {:>11} {:>27} | {:^31} | {:^31} | {:>8} {:>7} {:>8} {:>6}\n",
                   "tensor (worst SNR first)", "shape", "block amax min/median/max", "SNR dB, fp32 scales",
                   "SNR dB, pow2 scales", "rel err", "sat", "flushed", "differ");
  s += fmt::format(
      "{:<34} {:>11} {:>27} | {:>7} {:>7} {:>7} {:>7} | {:>7} {:>7} {:>7} {:>7} | {:>8} {:>7} {:>8} {:>6}\n",
      "", "", "", "te", "vllm", "dg", "nemo", "te", "vllm", "dg", "nemo", "worst", "max", "max", "max");
  const std::size_t n = max_rows == 0 ? r.tensors.size() : std::min(max_rows, r.tensors.size());
  for (std::size_t i = 0; i < n; ++i) {
    const auto& t = r.tensors[i];
    std::string shortname = t.name.rfind("model.", 0) == 0 ? t.name.substr(6) : t.name;
    if (shortname.size() > 7 && shortname.compare(shortname.size() - 7, 7, ".weight") == 0)
      shortname.resize(shortname.size() - 7);
    s += fmt::format("{:<34} {:>11} {:>27} |", shortname, fmt::format("{}x{}", t.rows, t.cols),
                     fmt::format("{:.2e}/{:.2e}/{:.2e}", t.amax_min, t.amax_median, t.amax_max));
    double worst_rel = 0.0, max_differ = 0.0;
    int64_t max_sat = 0, max_flush = 0;
    for (int mode = 0; mode < 2; ++mode) {
      for (auto c : inspect_conventions()) {
        const QuantStats& q = t.find(c, mode == 1);
        s += fmt::format(" {:>7.2f}", q.snr_db);
        worst_rel = std::max(worst_rel, q.rel_fro_err);
        max_sat = std::max(max_sat, q.saturated);
        max_flush = std::max(max_flush, q.flushed);
        max_differ = std::max(max_differ, q.blocks_differ_frac);
      }
      s += " |";
    }
    s += fmt::format(" {:>8.2e} {:>7} {:>8} {:>5.1f}%\n", worst_rel, max_sat, max_flush, 100.0 * max_differ);
  }
  if (n < r.tensors.size())
    s += fmt::format("... {} more tensors (all in the HDF5 output)\n", r.tensors.size() - n);
  // A pre-quantized fp8 checkpoint: its stored codes against each convention's requantization.
  bool header = false;
  for (std::size_t i = 0; i < n; ++i) {
    const auto& t = r.tensors[i];
    if (t.stored.empty()) continue;
    if (!header) {
      s += fmt::format("{:<34} | {:^47} | {:^47}\n", "stored fp8 codes vs requantized",
                       "codes differ %, scale ratio range: fp32", "pow2");
      header = true;
    }
    s += fmt::format("{:<34} |", t.name.rfind("model.", 0) == 0 ? t.name.substr(6) : t.name);
    for (std::size_t k = 0; k < t.stored.size(); ++k) {
      const StoredComparison& q = t.stored[k];
      s += fmt::format(" {}:{:.1f}%", convention_name(q.convention), 100.0 * q.codes_differ_frac);
      if (q.scale_ratio_min != 1.0 || q.scale_ratio_max != 1.0)
        s += fmt::format("[{:.3g}..{:.3g}]", q.scale_ratio_min, q.scale_ratio_max);
      if (k + 1 == t.stored.size() / 2) s += " |";
    }
    s += "\n";
  }
  s += "recommendation: " + r.recommendation + "\n";
  return s;
}

}  // namespace rlp
