#include "rlparity/gate/report_writers.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace rlp::gate {

namespace {

std::string num(double v) {
  if (std::isnan(v)) return "nan";
  return fmt::format("{:.6g}", v);
}

std::string opt_num(const std::optional<double>& v) { return v ? num(*v) : "-"; }

std::string baseline_cell(const Check& c) {
  if (!c.baseline) return "-";
  std::string s = num(*c.baseline);
  if (c.value && !std::isnan(*c.value) && !std::isnan(*c.baseline)) {
    const double rel = relative_worsening(c.direction, *c.value, *c.baseline);
    if (!std::isnan(rel)) {
      if (rel > 0)
        s += fmt::format(" ({:.1f}% worse)", 100.0 * rel);
      else if (rel < 0)
        s += fmt::format(" ({:.1f}% better)", -100.0 * rel);
      else
        s += " (same)";
    }
  }
  return s;
}

std::string upper(const char* s) {
  std::string o(s);
  std::transform(o.begin(), o.end(), o.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
  return o;
}

std::string md_escape(const std::string& s) {
  std::string o;
  for (char ch : s) {
    if (ch == '|' || ch == '\\' || ch == '`' || ch == '*' || ch == '_' || ch == '<' || ch == '>') o += '\\';
    if (ch == '\n' || ch == '\r') {
      o += ' ';
      continue;
    }
    o += ch;
  }
  return o;
}

nlohmann::json jnum(const std::optional<double>& v) {
  if (!v || !std::isfinite(*v)) return nullptr;
  return *v;
}

}  // namespace

std::string format_bound(const std::optional<Bound>& b) {
  if (!b) return "-";
  if (b->min && b->max) return fmt::format("[{}, {}]", num(*b->min), num(*b->max));
  if (b->min) return ">= " + num(*b->min);
  if (b->max) return "<= " + num(*b->max);
  return "-";
}

std::string format_gate_table(const GateResult& r) {
  const std::vector<std::string> head = {"recipe", "statistic", "value", "bound", "baseline", "verdict"};
  std::vector<std::vector<std::string>> rows;
  for (const auto& c : r.checks)
    rows.push_back({c.recipe, c.statistic, opt_num(c.value), format_bound(c.bound), baseline_cell(c),
                    upper(verdict_name(c.verdict))});
  std::vector<std::size_t> w(head.size());
  for (std::size_t i = 0; i < head.size(); ++i) w[i] = head[i].size();
  for (const auto& row : rows)
    for (std::size_t i = 0; i < row.size(); ++i) w[i] = std::max(w[i], row[i].size());
  auto line = [&](const std::vector<std::string>& row) {
    std::string s;
    for (std::size_t i = 0; i < row.size(); ++i) {
      if (i) s += "  ";
      if (i < 2 || i == row.size() - 1)
        s += fmt::format("{:<{}}", row[i], w[i]);
      else
        s += fmt::format("{:>{}}", row[i], w[i]);
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s + "\n";
  };
  std::string out = line(head);
  for (const auto& row : rows) out += line(row);
  for (const auto& c : r.checks)
    if (c.verdict != Verdict::pass)
      out += fmt::format("{} {}/{}: {}\n", upper(verdict_name(c.verdict)), c.recipe, c.statistic, c.message);
  for (const auto& n : r.notes) out += "note: " + n + "\n";
  out += fmt::format("gate: {} ({} checks, {} violations)\n", r.passed() ? "PASS" : "FAIL", r.checks.size(),
                     r.violations());
  return out;
}

std::string xml_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    switch (ch) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      case '\'': o += "&apos;"; break;
      case '\n': o += "&#10;"; break;
      case '\r': o += "&#13;"; break;
      case '\t': o += "&#9;"; break;
      default: o += (u < 0x20 || u == 0x7f) ? '?' : ch;
    }
  }
  return o;
}

std::string format_junit(const GateResult& r, const ReportContext& ctx) {
  std::string body;
  for (const auto& recipe : r.recipes) {
    std::size_t tests = 0, failures = 0;
    std::string cases;
    for (const auto& c : r.checks) {
      if (c.recipe != recipe) continue;
      ++tests;
      const std::string cls = xml_escape("rlparity." + recipe);
      cases +=
          fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"0\"", cls, xml_escape(c.statistic));
      if (c.verdict == Verdict::pass) {
        cases += "/>\n";
        continue;
      }
      ++failures;
      const std::string detail = fmt::format("value: {}\nbound: {}\nbaseline: {}\n{}", opt_num(c.value),
                                             format_bound(c.bound), opt_num(c.baseline), c.message);
      cases += fmt::format(">\n      <failure message=\"{}\" type=\"{}\">{}</failure>\n    </testcase>\n",
                           xml_escape(c.message), verdict_name(c.verdict), xml_escape(detail));
    }
    body += fmt::format(
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"0\" time=\"0\">\n{}  "
        "</testsuite>\n",
        xml_escape("rlparity." + recipe), tests, failures, cases);
  }
  (void)ctx;
  return fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"rlparity gate\" tests=\"{}\" "
      "failures=\"{}\" "
      "errors=\"0\">\n{}</testsuites>\n",
      r.checks.size(), r.violations(), body);
}

std::string format_markdown(const GateResult& r, const ReportContext& ctx) {
  std::string out = fmt::format("## rlparity gate: {}\n\n", r.passed() ? "PASS" : "FAIL");
  out += fmt::format("Run `{}`", ctx.run_path);
  if (!ctx.baseline_path.empty()) out += fmt::format(", baseline `{}`", ctx.baseline_path);
  if (!ctx.threshold_sources.empty())
    out +=
        fmt::format(", thresholds: {}", md_escape(fmt::format("{}", fmt::join(ctx.threshold_sources, ", "))));
  out += fmt::format(". {} checks, {} violations.\n\n", r.checks.size(), r.violations());
  out += "| recipe | statistic | value | bound | baseline | verdict |\n";
  out += "|---|---|---:|---:|---:|---|\n";
  for (const auto& c : r.checks) {
    const char* mark =
        c.verdict == Verdict::pass ? "pass" : (c.verdict == Verdict::fail ? "**FAIL**" : "**MISSING**");
    out += fmt::format("| {} | {} | {} | {} | {} | {} |\n", md_escape(c.recipe), md_escape(c.statistic),
                       md_escape(opt_num(c.value)), md_escape(format_bound(c.bound)),
                       md_escape(baseline_cell(c)), mark);
  }
  bool any = false;
  for (const auto& c : r.checks) {
    if (c.verdict == Verdict::pass) continue;
    if (!any) out += "\n### Violations\n\n";
    any = true;
    out += fmt::format("- {}/{}: {}\n", md_escape(c.recipe), md_escape(c.statistic), md_escape(c.message));
  }
  if (!r.notes.empty()) {
    out += "\n### Notes\n\n";
    for (const auto& n : r.notes) out += "- " + md_escape(n) + "\n";
  }
  return out;
}

nlohmann::json to_json(const GateResult& r, const ReportContext& ctx) {
  nlohmann::json j;
  j["run"] = ctx.run_path;
  j["baseline"] = ctx.baseline_path.empty() ? nlohmann::json(nullptr) : nlohmann::json(ctx.baseline_path);
  j["thresholds"] = ctx.threshold_sources;
  j["passed"] = r.passed();
  j["num_checks"] = r.checks.size();
  j["violations"] = r.violations();
  j["recipes"] = r.recipes;
  j["notes"] = r.notes;
  nlohmann::json checks = nlohmann::json::array();
  for (const auto& c : r.checks) {
    nlohmann::json e;
    e["recipe"] = c.recipe;
    e["statistic"] = c.statistic;
    e["value"] = jnum(c.value);
    e["min"] = c.bound ? jnum(c.bound->min) : nlohmann::json(nullptr);
    e["max"] = c.bound ? jnum(c.bound->max) : nlohmann::json(nullptr);
    e["baseline"] = jnum(c.baseline);
    e["max_regression"] = jnum(c.tolerance);
    e["direction"] = direction_name(c.direction);
    e["verdict"] = verdict_name(c.verdict);
    e["message"] = c.message;
    checks.push_back(std::move(e));
  }
  j["checks"] = std::move(checks);
  return j;
}

}  // namespace rlp::gate
