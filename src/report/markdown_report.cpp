// The Markdown mismatch report (docs/report.md): the summary table (with gate verdicts and
// baseline deltas when given) and the worst tokens of each recipe, for a CI step summary.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "report/sections.hpp"
#include "rlparity/report/report.hpp"
#include "rlparity/report/svg.hpp"

namespace rlp::report {

namespace {

// Markdown table cell: no newlines, '|' escaped.
std::string cell(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '|')
      o += "\\|";
    else if (c == '\n' || c == '\r')
      o += ' ';
    else
      o += c;
  }
  return o;
}

std::string code(const std::string& s) { return fmt::format("`{}`", cell(s)); }

// A table section as Markdown: heading, notes, the table in the same row order as the HTML (numbers
// to 6 significant digits), with a text bar of the section's bar column when it has one (the HTML
// draws SVG bars).
std::string table_section_md(const TableSection& s) {
  std::string o = fmt::format("\n### {}\n\n", cell(s.title));
  for (const auto& n : s.notes) o += n + "\n\n";
  const std::size_t rows = s.markdown_rows == 0 ? s.rows.size() : std::min(s.markdown_rows, s.rows.size());
  const bool bar = s.bar_column < s.headers.size();
  double top = 0;
  for (std::size_t r = 0; bar && r < rows; ++r)
    if (s.bar_column < s.rows[r].size() && std::isfinite(s.rows[r][s.bar_column].value))
      top = std::max(top, std::abs(s.rows[r][s.bar_column].value));
  std::string head = "|", rule = "|";
  for (std::size_t k = 0; k < s.headers.size(); ++k) {
    head += fmt::format(" {} |", cell(s.headers[k]));
    rule += !s.rows.empty() && k < s.rows[0].size() && s.rows[0][k].numeric ? "---:|" : "---|";
  }
  if (bar) {
    head += fmt::format(" {} (bar) |", cell(s.headers[s.bar_column]));
    rule += "---|";
  }
  o += head + "\n" + rule + "\n";
  for (std::size_t r = 0; r < rows; ++r) {
    const auto& row = s.rows[r];
    o += "|";
    for (const auto& c : row) o += fmt::format(" {} |", c.numeric ? format_sig(c.value, 6) : cell(c.text));
    if (bar) {
      const double v = s.bar_column < row.size() ? row[s.bar_column].value : 0.0;
      const int n = top > 0 && std::isfinite(v) ? static_cast<int>(std::lround(20.0 * std::abs(v) / top)) : 0;
      std::string b;
      for (int i = 0; i < n; ++i) b += "\u2588";
      o += fmt::format(" {} |", b.empty() ? "" : "`" + b + "`");
    }
    o += "\n";
  }
  if (rows < s.rows.size()) o += fmt::format("\n{} more rows in the HTML report.\n", s.rows.size() - rows);
  return o;
}

}  // namespace

std::string render_markdown(const RunData& run, const ReportOptions& opt) {
  std::string o;
  o += fmt::format("## rlparity report: {}\n\n", code(opt.run_path));
  std::size_t ntok = 0;
  if (!run.recipes.empty())
    if (auto it = run.recipes.front().tokens.find("logp_gen"); it != run.recipes.front().tokens.end())
      ntok = it->second.size();
  o += fmt::format("Checkpoint {} (hash {}), {} sequences, {} response tokens, seed {}, rlparity {}.\n",
                   code(run.checkpoint_path), code(run.checkpoint_hash), run.num_sequences(), ntok, run.seed,
                   cell(run.tool_version));
  if (opt.baseline)
    o += fmt::format("Baseline: {}; cells show the value and its relative change against it.\n",
                     code(opt.baseline_path));
  if (opt.gate) {
    const std::size_t v = opt.gate->violations();
    std::string src;
    for (const auto& s : opt.threshold_sources) src += fmt::format("{}{}", src.empty() ? "" : ", ", code(s));
    o += fmt::format("Gate ({}): **{}** ({} of {} checks {}).\n", src.empty() ? "thresholds" : src,
                     v == 0 ? "PASS" : "FAIL", v == 0 ? opt.gate->checks.size() : v, opt.gate->checks.size(),
                     v == 0 ? "pass" : "fail or are missing");
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
            if (auto bt = b.summary.find(s);
                bt != b.summary.end() && bt->second != 0 && std::isfinite(bt->second)) {
              const double rel = (it->second - bt->second) / std::abs(bt->second) * 100;
              v += fmt::format(" ({}{}%)", rel > 0 ? "+" : "", format_sig(rel, 3));
            }
      if (opt.gate)
        for (const auto& c : opt.gate->checks)
          if (c.recipe == r.name && c.statistic == s)
            v += c.verdict == gate::Verdict::pass
                     ? " ✅"
                     : (c.verdict == gate::Verdict::fail ? " ❌ **fail**" : " ⚠️ missing");
      o += fmt::format(" {} |", cell(v));
    }
    o += "\n";
  }
  const std::size_t cap = opt.markdown_worst_tokens;
  for (const auto& r : run.recipes) {
    const auto rows = worst_tokens(run, r, cap, opt.tokenizer);
    std::size_t n = 0;
    if (auto it = r.tokens.find("log_ratio"); it != r.tokens.end()) n = it->second.size();
    o += fmt::format("\n### Worst tokens: {}\n\n", cell(r.name));
    const bool text = opt.tokenizer != nullptr;
    o += std::string("| sequence id | position | token id") + (text ? " | context | token" : "") +
         " | logp_gen | logp_train | log ratio | KL(gen \\|\\| train) |\n";
    o += std::string("|---|---:|---:") + (text ? "|---|---" : "") + "|---:|---:|---:|---:|\n";
    for (const auto& w : rows) {
      std::string words;
      if (text)
        words = fmt::format(" {} | {} |", cell(printable_text(w.context, 60, true)),
                            cell(printable_text(w.text, 30)));
      o += fmt::format("| {} | {} | {} |{} {} | {} | {} | {} |\n", cell(w.sequence_id), w.position,
                       w.token_id, words, format_sig(w.logp_gen, 6), format_sig(w.logp_train, 6),
                       format_sig(w.log_ratio, 6), std::isnan(w.kl) ? "-" : format_sig(w.kl, 6));
    }
    o += fmt::format("\n{} of {} tokens omitted (showing the {} with the largest |log ratio|).\n",
                     n - rows.size(), n, rows.size());
    const MismatchBirth b = mismatch_birth(run, r, opt.birth_threshold, 0);
    if (b.layers > 0) {
      o += fmt::format(
          "\nMismatch born (first layer with \\|h_gen - h_train\\| / \\|h_train\\| >= {}), {} tokens:",
          format_sig(b.threshold, 3), b.first_layer.size());
      for (int l = 0; l < b.layers; ++l)
        if (b.born_at[static_cast<std::size_t>(l)] > 0)
          o += fmt::format(" layer {}: {};", l, b.born_at[static_cast<std::size_t>(l)]);
      o += fmt::format(" never: {}.\n", b.never);
    }
  }
  for (const auto& s : engine_sections(run)) o += table_section_md(s);
  const auto routing = routing_sections(run);
  if (!routing.empty()) o += "\n## Mixture of experts: router flips\n";
  for (const auto& s : routing) o += table_section_md(s);
  const auto attribution = attribution_sections(run);
  if (!attribution.empty()) o += "\n## Attribution\n";
  for (const auto& s : attribution) o += table_section_md(s);
  if (opt.inspect) {
    o += fmt::format("\n## Checkpoint inspection: {}\n", code(opt.inspect_path));
    for (const auto& s : inspect_sections(*opt.inspect)) o += table_section_md(s);
  }
  return o;
}

std::string render_inspect_markdown(const InspectResult& r, const ReportOptions& opt) {
  std::string o = fmt::format("## rlparity inspect report: {}\n\n", code(opt.inspect_path));
  o += fmt::format("Checkpoint {} (hash {}), {} tensors.\n", code(r.checkpoint_path), code(r.checkpoint_hash),
                   r.tensors.size());
  for (const auto& s : inspect_sections(r)) o += table_section_md(s);
  return o;
}

std::string render_sweep_markdown(const SweepResult& sweep, const ReportOptions& opt) {
  std::string o = fmt::format("## rlparity sweep: {}\n\n", code(opt.run_path));
  o += fmt::format("{} points of the grid {}; recipes {}.\n", sweep.points(),
                   code(fmt::format("{}", fmt::join(sweep.knobs, " x "))),
                   fmt::format("{}", fmt::join(sweep.recipes, ", ")));
  for (const auto& s : sweep_sections(sweep)) o += table_section_md(s);
  return o;
}

}  // namespace rlp::report
