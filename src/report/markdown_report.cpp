// The Markdown mismatch report (docs/report.md): the summary table (with gate verdicts and
// baseline deltas when given) and the worst tokens of each recipe, for a CI step summary.
#include <fmt/format.h>

#include <cmath>

#include "rlparity/report/report.hpp"
#include "rlparity/report/svg.hpp"

namespace rlp::report {

namespace {

// Markdown table cell: no newlines, '|' escaped.
std::string cell(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '|') o += "\\|";
    else if (c == '\n' || c == '\r') o += ' ';
    else o += c;
  }
  return o;
}

std::string code(const std::string& s) { return fmt::format("`{}`", cell(s)); }

}  // namespace

std::string render_markdown(const RunData& run, const ReportOptions& opt) {
  std::string o;
  o += fmt::format("## rlparity report: {}\n\n", code(opt.run_path));
  std::size_t ntok = 0;
  if (!run.recipes.empty())
    if (auto it = run.recipes.front().tokens.find("logp_gen"); it != run.recipes.front().tokens.end()) ntok = it->second.size();
  o += fmt::format("Checkpoint {} (hash {}), {} sequences, {} response tokens, seed {}, rlparity {}.\n", code(run.checkpoint_path),
                   code(run.checkpoint_hash), run.num_sequences(), ntok, run.seed, cell(run.tool_version));
  if (opt.baseline) o += fmt::format("Baseline: {}; cells show the value and its relative change against it.\n", code(opt.baseline_path));
  if (opt.gate) {
    const std::size_t v = opt.gate->violations();
    std::string src;
    for (const auto& s : opt.threshold_sources) src += fmt::format("{}{}", src.empty() ? "" : ", ", code(s));
    o += fmt::format("Gate ({}): **{}** ({} of {} checks {}).\n", src.empty() ? "thresholds" : src, v == 0 ? "PASS" : "FAIL",
                     v == 0 ? opt.gate->checks.size() : v, opt.gate->checks.size(), v == 0 ? "pass" : "fail or are missing");
  }
  o += "\n### Summary\n\n| statistic |";
  for (const auto& r : run.recipes) o += fmt::format(" {} |", cell(r.name));
  o += "\n|---|";
  for (std::size_t i = 0; i < run.recipes.size(); ++i) o += "---:|";
  o += "\n";
  for (const auto& s : headline_statistics(opt.gate)) {
    o += fmt::format("| {} |", cell(s));
    for (const auto& r : run.recipes) {
      auto it = r.summary.find(s);
      std::string v = it == r.summary.end() ? "-" : format_sig(it->second, 6);
      if (opt.baseline && it != r.summary.end())
        for (const auto& b : opt.baseline->recipes)
          if (b.name == r.name)
            if (auto bt = b.summary.find(s); bt != b.summary.end() && bt->second != 0 && std::isfinite(bt->second)) {
              const double rel = (it->second - bt->second) / std::abs(bt->second) * 100;
              v += fmt::format(" ({}{}%)", rel > 0 ? "+" : "", format_sig(rel, 3));
            }
      if (opt.gate)
        for (const auto& c : opt.gate->checks)
          if (c.recipe == r.name && c.statistic == s)
            v += c.verdict == gate::Verdict::pass ? " ✅" : (c.verdict == gate::Verdict::fail ? " ❌ **fail**" : " ⚠️ missing");
      o += fmt::format(" {} |", cell(v));
    }
    o += "\n";
  }
  const std::size_t cap = opt.markdown_worst_tokens;
  for (const auto& r : run.recipes) {
    const auto rows = worst_tokens(run, r, cap);
    std::size_t n = 0;
    if (auto it = r.tokens.find("log_ratio"); it != r.tokens.end()) n = it->second.size();
    o += fmt::format("\n### Worst tokens: {}\n\n", cell(r.name));
    o += "| sequence id | position | token id | logp_gen | logp_train | log ratio | KL(gen \\|\\| train) |\n";
    o += "|---|---:|---:|---:|---:|---:|---:|\n";
    for (const auto& w : rows)
      o += fmt::format("| {} | {} | {} | {} | {} | {} | {} |\n", cell(w.sequence_id), w.position, w.token_id, format_sig(w.logp_gen, 6),
                       format_sig(w.logp_train, 6), format_sig(w.log_ratio, 6), std::isnan(w.kl) ? "-" : format_sig(w.kl, 6));
    o += fmt::format("\n{} of {} tokens omitted (showing the {} with the largest |log ratio|).\n", n - rows.size(), n, rows.size());
  }
  return o;
}

}  // namespace rlp::report
