#include "rlparity/metrics/engine_side.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "rlparity/util/error.hpp"

namespace rlp {

std::string engine_prefix(const EngineSide& side) { return fmt::format("engine_{}_", side.name); }

void compute_engine_statistics(RecipeResult& r, const std::vector<double>& engine,
                               const std::vector<int64_t>& offsets, const StatsOptions& opts) {
  const std::size_t n = engine.size();
  RLP_CHECK(!offsets.empty() && offsets.back() == static_cast<int64_t>(n),
            "recipe '{}': {} engine logprobs for {} response tokens", r.name, n,
            offsets.empty() ? 0 : offsets.back());
  // The tokens that have an engine logprob, and the offsets of the sequences over them.
  std::vector<std::size_t> kept;
  std::vector<int64_t> kept_offsets = {0};
  for (std::size_t s = 0; s + 1 < offsets.size(); ++s) {
    for (auto i = offsets[s]; i < offsets[s + 1]; ++i)
      if (!std::isnan(engine[static_cast<std::size_t>(i)])) kept.push_back(static_cast<std::size_t>(i));
    kept_offsets.push_back(static_cast<int64_t>(kept.size()));
  }
  if (kept.empty()) return;
  for (const EngineSide& side : kEngineSides) {
    const auto it = r.tokens.find(side.token_metric);
    if (it == r.tokens.end()) continue;
    const std::vector<double>& l = it->second;
    RLP_CHECK(l.size() == n, "recipe '{}': {} has {} values, the engine {}", r.name, side.token_metric,
              l.size(), n);
    std::vector<double> ratio(n, std::numeric_limits<double>::quiet_NaN());
    RecipeResult pair;
    pair.name = fmt::format("{} engine-vs-{}", r.name, side.name);
    std::vector<double>& lg = pair.tokens["logp_gen"];
    std::vector<double>& lt = pair.tokens["logp_train"];
    for (std::size_t i : kept) {
      ratio[i] = l[i] - engine[i];
      lg.push_back(engine[i]);
      lt.push_back(l[i]);
    }
    // The top-k KL bounds of this pair (replay, when the engine gave its top-k): per kept token.
    for (const char* bound : {"lower", "upper"}) {
      const auto b = r.engine.find(fmt::format("kl_topk_{}_engine_{}", bound, side.name));
      if (b == r.engine.end() || b->second.size() != n) continue;
      std::vector<double>& dst = pair.tokens[fmt::format("kl_topk_{}", bound)];
      for (std::size_t i : kept) dst.push_back(b->second[i]);
    }
    compute_recipe_statistics(pair, kept_offsets, opts);
    for (const auto& [name, value] : pair.summary) r.summary[engine_prefix(side) + name] = value;
    r.engine["log_ratio_engine_" + std::string(side.name)] = std::move(ratio);
  }
}

std::vector<RecipeResult> engine_comparison_rows(const std::vector<RecipeResult>& recipes) {
  std::vector<RecipeResult> rows;
  for (const auto& r : recipes)
    for (const EngineSide& side : kEngineSides) {
      const std::string prefix = engine_prefix(side);
      RecipeResult row;
      row.name = fmt::format("{} engine-vs-{}", r.name, side.name);
      for (const auto& [name, value] : r.summary)
        if (name.rfind(prefix, 0) == 0) row.summary[name.substr(prefix.size())] = value;
      if (!row.summary.empty()) rows.push_back(std::move(row));
    }
  return rows;
}

}  // namespace rlp
