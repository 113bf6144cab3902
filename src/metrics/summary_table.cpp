#include "rlparity/metrics/summary_table.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

namespace rlp {

namespace {

enum class Style { kCount, kSci, kFixed4 };

struct Column {
  const char* header;
  const char* key;
  Style style;
};

constexpr std::array<Column, 9> kColumns{{
    {"tokens", "num_tokens", Style::kCount},
    {"mean|dlogp|", "mean_abs_log_ratio", Style::kSci},
    {"p99|dlogp|", "p99_abs_log_ratio", Style::kSci},
    {"max|dlogp|", "max_abs_log_ratio", Style::kSci},
    {"mean KL", "mean_kl_gen_train", Style::kSci},
    {"token_mult_prob_error", "token_mult_prob_error", Style::kFixed4},
    {"gen_kl_error", "gen_kl_error", Style::kSci},
    {"ess", "ess", Style::kFixed4},
    {"top1 agree", "top1_agree_frac", Style::kFixed4},
}};

std::string cell(const RecipeResult& r, const Column& c) {
  auto it = r.summary.find(c.key);
  if (it == r.summary.end()) return "-";
  const double v = it->second;
  if (std::isnan(v)) return "nan";
  switch (c.style) {
    case Style::kCount:
      return fmt::format("{:.0f}", v);
    case Style::kSci:
      return fmt::format("{:.3e}", v);
    case Style::kFixed4:
      return fmt::format("{:.4f}", v);
  }
  return "-";
}

}  // namespace

std::string format_summary_table(const std::vector<RecipeResult>& recipes) {
  constexpr std::size_t kCols = kColumns.size() + 1;
  std::vector<std::array<std::string, kCols>> rows;
  std::array<std::string, kCols> head;
  head[0] = "recipe";
  for (std::size_t c = 0; c < kColumns.size(); ++c) head[c + 1] = kColumns[c].header;
  rows.push_back(head);
  for (const auto& r : recipes) {
    std::array<std::string, kCols> row;
    row[0] = r.name;
    for (std::size_t c = 0; c < kColumns.size(); ++c) row[c + 1] = cell(r, kColumns[c]);
    rows.push_back(std::move(row));
  }
  std::array<std::size_t, kCols> width{};
  for (const auto& row : rows)
    for (std::size_t c = 0; c < kCols; ++c) width[c] = std::max(width[c], row[c].size());
  std::string out;
  auto emit = [&](const std::array<std::string, kCols>& row) {
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

}  // namespace rlp
