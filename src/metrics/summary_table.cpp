#include "rlparity/metrics/summary_table.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "rlparity/metrics/engine_side.hpp"
#include "rlparity/metrics/metric_catalogue.hpp"

namespace rlp {

namespace {

// The token count, then the headline statistics, each with its catalogue label and format.
std::vector<const MetricInfo*> columns() {
  std::vector<const MetricInfo*> out = {find_metric("num_tokens")};
  for (const auto& name : headline_metric_names()) out.push_back(find_metric(name));
  return out;
}

std::string header(const MetricInfo& m) { return m.label.empty() ? m.name : m.label; }

std::string cell(const RecipeResult& r, const MetricInfo& m) {
  auto it = r.summary.find(m.name);
  if (it == r.summary.end()) return "-";
  const double v = it->second;
  if (std::isnan(v)) return "nan";
  switch (m.format) {
    case MetricFormat::count: return fmt::format("{:.0f}", v);
    case MetricFormat::scientific: return fmt::format("{:.3e}", v);
    case MetricFormat::fixed4: return fmt::format("{:.4f}", v);
  }
  return "-";
}

// One row per recipe: its name, then `metrics` (catalogue labels and formats).
std::string format_table(const std::vector<RecipeResult>& recipes,
                         const std::vector<const MetricInfo*>& metrics) {
  const std::size_t kCols = metrics.size() + 1;
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> head = {"recipe"};
  for (const auto* m : metrics) head.push_back(header(*m));
  rows.push_back(head);
  for (const auto& r : recipes) {
    std::vector<std::string> row = {r.name};
    for (const auto* m : metrics) row.push_back(cell(r, *m));
    rows.push_back(std::move(row));
  }
  std::vector<std::size_t> width(kCols, 0);
  for (const auto& row : rows)
    for (std::size_t c = 0; c < kCols; ++c) width[c] = std::max(width[c], row[c].size());
  std::string out;
  auto emit = [&](const std::vector<std::string>& row) {
    std::string line = fmt::format("{:<{}}", row[0], width[0]);
    for (std::size_t c = 1; c < kCols; ++c) line += fmt::format("  {:>{}}", row[c], width[c]);
    out += line;
    out += '\n';
  };
  emit(rows[0]);
  std::size_t total = width[0];
  for (std::size_t c = 1; c < kCols; ++c) total += 2 + width[c];
  out += std::string(total, '-');
  out += '\n';
  for (std::size_t i = 1; i < rows.size(); ++i) emit(rows[i]);
  return out;
}

}  // namespace

std::string format_summary_table(const std::vector<RecipeResult>& recipes) {
  return format_table(recipes, columns());
}

std::string format_routing_table(const std::vector<RecipeResult>& recipes) {
  // (The routing statistics are summary attributes: a run file read back has them too.)
  if (std::none_of(recipes.begin(), recipes.end(),
                   [](const RecipeResult& r) { return r.summary.count("router_flip_frac") > 0; }))
    return {};
  std::vector<const MetricInfo*> metrics;
  for (const char* name : {"router_flip_frac", "mean_router_flip_frac", "mean_abs_log_ratio_flipped",
                           "mean_abs_log_ratio_unflipped"})
    if (const MetricInfo* m = find_metric(name)) metrics.push_back(m);
  std::string replay = "off";
  for (const auto& r : recipes)
    if (r.settings.is_object() && r.settings.contains("routing_replay") &&
        r.settings["routing_replay"].is_string())
      replay = r.settings["routing_replay"].get<std::string>();
  return fmt::format("router flips (MoE, routing replay {})\n", replay) + format_table(recipes, metrics);
}

std::string format_engine_table(const std::vector<RecipeResult>& recipes) {
  const std::vector<RecipeResult> rows = engine_comparison_rows(recipes);
  return rows.empty() ? std::string() : "engine vs emulation\n" + format_summary_table(rows);
}

}  // namespace rlp
