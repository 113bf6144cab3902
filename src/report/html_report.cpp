// The self-contained HTML mismatch report (docs/report.md): the page, its header, the summary and
// baseline tables, the attribution/inspect sections and the worst tokens; the plots are in
// html_plots.cpp, the style sheet and script in html_assets.cpp, the analysis in analysis.cpp.
// Output is XML-well-formed (XHTML style: every element closed, attributes quoted, text escaped),
// uses no external resource, and is a pure function of the run data and options.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "report/html_assets.hpp"
#include "report/html_plots.hpp"
#include "report/report_helpers.hpp"
#include "report/sections.hpp"
#include "rlparity/gate/report_writers.hpp"
#include "rlparity/report/report.hpp"
#include "rlparity/report/svg.hpp"
#include "rlparity/util/version.hpp"

namespace rlp::report {

namespace {

std::string truncate(const std::string& s, std::size_t n) {
  if (s.size() <= n) return s;
  std::size_t cut = n;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // keep UTF-8 whole
  return s.substr(0, cut) + fmt::format(" ... ({} more characters)", s.size() - cut);
}

// Flattens a JSON object into "a.b.c" -> compact value text (arrays of scalars kept whole).
void flatten(const nlohmann::json& j, const std::string& prefix,
             std::vector<std::pair<std::string, std::string>>& out) {
  if (j.is_object() && !j.empty()) {
    for (const auto& [k, v] : j.items()) flatten(v, prefix.empty() ? k : prefix + "." + k, out);
    return;
  }
  std::string text =
      j.is_string() ? j.get<std::string>() : j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  out.emplace_back(prefix, truncate(text, 400));
}

std::string dump_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

struct Verdicts {
  std::map<std::pair<std::string, std::string>, const gate::Check*> by_key;  // (recipe, statistic)
  explicit Verdicts(const gate::GateResult* g) {
    if (g)
      for (const auto& c : g->checks) by_key[{c.recipe, c.statistic}] = &c;
  }
  const gate::Check* find(const std::string& recipe, const std::string& stat) const {
    auto it = by_key.find({recipe, stat});
    return it == by_key.end() ? nullptr : it->second;
  }
};

std::string verdict_html(const gate::Check& c) {
  std::string o = fmt::format(R"(<span class="verdict {}">{}</span>)", gate::verdict_name(c.verdict),
                              gate::verdict_name(c.verdict));
  if (c.bound) o += fmt::format(R"(<span class="bound">{}</span>)", esc(gate::format_bound(c.bound)));
  if (!c.message.empty()) o = fmt::format(R"(<span title="{}">{}</span>)", esc(c.message), o);
  return o;
}

// Summary table: one row per statistic, one column per recipe. Each value cell's first <span
// class="v"> holds the exact attribute value (shortest round-trip text).
std::string summary_table(const RunData& run, const std::vector<std::string>& stats, const Verdicts& v,
                          const std::string& id) {
  std::string o =
      fmt::format(R"(<div class="scroll"><table class="summary" id="{}"><thead><tr><th>statistic</th>)", id);
  for (const auto& r : run.recipes) o += fmt::format("<th>{}</th>", esc(r.name));
  o += "</tr></thead><tbody>\n";
  for (const auto& s : stats) {
    o += fmt::format(R"(<tr data-stat="{}"><td>{}</td>)", esc(s), esc(s));
    for (const auto& r : run.recipes) {
      auto it = r.summary.find(s);
      o += fmt::format(R"(<td class="num" data-recipe="{}">)", esc(r.name));
      o += it == r.summary.end() ? std::string(R"(<span class="v">-</span>)")
                                 : fmt::format(R"(<span class="v">{}</span>)", format_exact(it->second));
      if (const auto* c = v.find(r.name, s))
        o += fmt::format(R"(<span class="vline">{}</span>)", verdict_html(*c));
      o += "</td>";
    }
    o += "</tr>\n";
  }
  o += "</tbody></table></div>\n";
  return o;
}

// "num worse" / "num better" / "num" by the statistic's direction (gate::direction_of).
std::string delta_class(const std::string& stat, double va, double vb) {
  const gate::Direction dir = gate::direction_of(stat);
  if (std::isfinite(va) && std::isfinite(vb) && va != vb) {
    if (gate::regressed(dir, va, vb, 0.0)) return "num worse";
    if (gate::regressed(dir, vb, va, 0.0)) return "num better";
  }
  return "num";
}

std::string baseline_section(const RunData& run, const ReportOptions& opt) {
  const RunData& base = *opt.baseline;
  std::string o = R"(<section id="baseline"><h2>Deltas against the baseline</h2>)";
  o += fmt::format(R"(<p>Baseline <code>{}</code> (checkpoint hash <code>{}</code>, {} sequences). )",
                   esc(opt.baseline_path), esc(base.checkpoint_hash), base.num_sequences());
  o += "&#916; = run &#8722; baseline; relative &#916; = &#916; / |baseline|. A cell is red when the "
       "statistic got worse "
       "(by its direction: lower is better for divergences, higher for ess and top-1 agreement, closer to 0 "
       "for "
       "signed KL estimators, closer to 1 for ratios), green when it got better.</p>\n";
  std::vector<std::string> names;
  for (const auto& r : run.recipes) names.push_back(r.name);
  std::vector<std::string> present;
  for (const auto& n : names)
    for (const auto& br : base.recipes)
      if (br.name == n) present.push_back(n);
  for (const auto& note : gate::check_baseline_compatible(run, base, present, true))
    o += fmt::format(R"(<p class="note">Note: {}</p>)", esc(note));
  auto find_base = [&](const std::string& name) -> const RecipeResult* {
    for (const auto& br : base.recipes)
      if (br.name == name) return &br;
    return nullptr;
  };
  // Headline: relative change of the headline statistics, one column per recipe.
  o +=
      R"(<div class="scroll"><table class="summary deltas-headline" id="baseline-headline"><thead><tr><th>statistic</th>)";
  for (const auto& r : run.recipes) o += fmt::format("<th>{}</th>", esc(r.name));
  o += "</tr></thead><tbody>\n";
  for (const auto& s : headline_statistics(opt.gate)) {
    o += fmt::format(R"(<tr data-stat="{}"><td>{}</td>)", esc(s), esc(s));
    for (const auto& r : run.recipes) {
      const RecipeResult* b = find_base(r.name);
      auto a = r.summary.find(s);
      if (!b || a == r.summary.end() || !b->summary.count(s)) {
        o += R"(<td class="num">-</td>)";
        continue;
      }
      const double va = a->second, vb = b->summary.at(s), rel = vb != 0 ? (va - vb) / std::abs(vb) : kNaN;
      o += fmt::format(R"(<td class="{}" title="run {} / baseline {}">{}</td>)", delta_class(s, va, vb),
                       format_exact(va), format_exact(vb),
                       std::isnan(rel) ? (va == vb ? std::string("0") : format_sig(va - vb, 4))
                                       : fmt::format("{}{}%", rel > 0 ? "+" : "", format_sig(rel * 100, 3)));
    }
    o += "</tr>\n";
  }
  o += "</tbody></table></div>\n";
  for (const auto& r : run.recipes) {
    const RecipeResult* b = nullptr;
    for (const auto& br : base.recipes)
      if (br.name == r.name) b = &br;
    if (!b) {
      o += fmt::format(R"(<p class="note">Recipe {} is not in the baseline.</p>)", esc(r.name));
      continue;
    }
    std::set<std::string> stats;
    for (const auto& [k, val] : r.summary) stats.insert(k);
    for (const auto& [k, val] : b->summary) stats.insert(k);
    o += fmt::format(R"(<details><summary>{}: all {} statistics</summary>)", esc(r.name), stats.size());
    o += fmt::format(
        R"(<table class="deltas" data-recipe="{}"><thead><tr><th>statistic</th><th>run</th><th>baseline</th><th>&#916;</th><th>relative &#916;</th></tr></thead><tbody>)",
        esc(r.name));
    o += "\n";
    for (const auto& s : stats) {
      auto a = r.summary.find(s), c = b->summary.find(s);
      const double va = a == r.summary.end() ? kNaN : a->second,
                   vb = c == b->summary.end() ? kNaN : c->second;
      const double d = va - vb, rel = vb != 0 ? d / std::abs(vb) : kNaN;
      const std::string cls = delta_class(s, va, vb);
      o += fmt::format(
          R"(<tr data-stat="{}"><td>{}</td><td class="num">{}</td><td class="num">{}</td><td class="{}">{}</td><td class="{}">{}</td></tr>)",
          esc(s), esc(s), a == r.summary.end() ? "-" : format_exact(va),
          c == b->summary.end() ? "-" : format_exact(vb), cls, std::isnan(d) ? "-" : format_sig(d, 4), cls,
          std::isnan(rel) ? std::string("-")
                          : fmt::format("{}{}%", rel > 0 ? "+" : "", format_sig(rel * 100, 3)));
      o += "\n";
    }
    o += "</tbody></table></details>\n";
  }
  o += "</section>\n";
  return o;
}

// A numeric table cell: the value to 6 significant digits, its exact text in data-v (sorting,
// tests); `col` names the column (data-col) when given.
std::string num_td(double v, const std::string& col = "") {
  return fmt::format(R"(<td class="num"{} data-v="{}">{}</td>)",
                     col.empty() ? "" : " data-col=\"" + esc(col) + "\"", format_exact(v), format_sig(v, 6));
}

// A table section (attribution, inspect): heading, notes, its bar charts, and the table (sortable;
// every cell has data-col = the HDF5 name of its value and data-v = the exact value).
std::string table_section_html(const TableSection& s) {
  std::string o = fmt::format(R"(<div class="table-section" id="{}"><h3>{}</h3>)", esc(s.id), esc(s.title));
  o += "\n";
  for (const auto& n : s.notes) o += fmt::format(R"(<p class="note">{}</p>)", esc(n));
  if (!s.charts.empty()) {
    o += "<div class=\"plots\">\n";
    for (const auto& c : s.charts) o += bar_chart(c.plot, c.categories, c.bars);
    o += "</div>\n";
  }
  o += fmt::format(
      R"(<div class="scroll"><table class="data sortable" id="{}-table" data-section="{}"><thead><tr>)",
      esc(s.id), esc(s.id));
  for (std::size_t k = 0; k < s.headers.size(); ++k) {
    const bool numeric = !s.rows.empty() && k < s.rows[0].size() && s.rows[0][k].numeric;
    o += fmt::format(R"(<th data-type="{}" data-col="{}">{}</th>)", numeric ? "num" : "str", esc(s.keys[k]),
                     esc(s.headers[k]));
  }
  o += "</tr></thead><tbody>\n";
  for (const auto& row : s.rows) {
    o += "<tr>";
    for (std::size_t k = 0; k < row.size() && k < s.keys.size(); ++k)
      o += row[k].numeric ? num_td(row[k].value, s.keys[k])
                          : fmt::format(R"(<td data-col="{}" data-v="{}">{}</td>)", esc(s.keys[k]),
                                        esc(row[k].text), esc(row[k].text));
    o += "</tr>\n";
  }
  o += "</tbody></table></div></div>\n";
  return o;
}

std::string attribution_html(const RunData& run) {
  const auto sections = attribution_sections(run);
  if (sections.empty()) return {};
  std::string o = R"(<section id="attribution"><h2>Attribution</h2>)";
  o += "<p class=\"note\">Extra replays of <code>replay --attribute</code> / <code>--kv-scales "
       "stale:DIR</code> over the same "
       "tokens (the run file's /attribution tables, docs/inspect.md). Values are exact in each cell's "
       "data-v.</p>\n";
  for (const auto& s : sections) o += table_section_html(s);
  o += "</section>\n";
  return o;
}

std::string routing_html(const RunData& run) {
  const auto sections = routing_sections(run);
  if (sections.empty()) return {};
  std::string o = R"(<section id="routing"><h2>Mixture of experts: router flips</h2>)";
  for (const auto& s : sections) o += table_section_html(s);
  o += "</section>\n";
  return o;
}

std::string engine_html(const RunData& run) {
  std::string o;
  for (const auto& s : engine_sections(run))
    o += "<section id=\"engine\">" + table_section_html(s) + "</section>\n";
  return o;
}

std::string inspect_html(const InspectResult& r, const std::string& path) {
  std::string o = R"(<section id="inspect"><h2>Checkpoint inspection</h2>)";
  o += fmt::format(
      R"(<p class="note">Inspect file <code>{}</code> (<code>rlparity inspect</code>): checkpoint <code>{}</code>, hash <code>{}</code>.</p>)",
      esc(path), esc(r.checkpoint_path), esc(r.checkpoint_hash));
  o += "\n";
  for (const auto& s : inspect_sections(r)) o += table_section_html(s);
  o += "</section>\n";
  return o;
}

// One row of a header's key/value table.
std::string meta_row(const std::string& k, const std::string& v) {
  return fmt::format("<tr><td>{}</td><td>{}</td></tr>\n", esc(k), esc(v));
}

// The page around the sections: document head with the inline CSS, and the closing footer + script.
std::string page_open(const std::string& title) {
  std::string o;
  o.reserve(1 << 18);
  o += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\"/>\n";
  o += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"/>\n";
  o += fmt::format("<title>{}</title>\n", esc(title));
  o += fmt::format("<style>{}</style>\n</head>\n<body>\n<main>\n", kReportCss);
  return o;
}

std::string page_close() {
  std::string o = fmt::format(
      "<footer>Generated by rlparity {} report. Self-contained: no external resources.</footer>\n",
      esc(version()));
  o += "</main>\n<script>";
  o += kReportJs;
  o += "</script>\n</body>\n</html>\n";
  return o;
}

std::string worst_table(const RunData& run, const RecipeResult& r, const ReportOptions& opt) {
  const auto rows = worst_tokens(run, r, opt.worst_tokens, opt.tokenizer);
  const std::size_t n = token_metric(r, "log_ratio") ? token_metric(r, "log_ratio")->size() : 0;
  std::string o = fmt::format(R"(<h3>Worst tokens: {}</h3>)", esc(r.name));
  o += fmt::format(
      R"(<p class="note">The {} response tokens with the largest |log ratio| (click a column header to sort).)",
      rows.size());
  const std::size_t omitted = n - rows.size();
  o += fmt::format(R"( <span class="omitted" data-omitted="{}">{} of {} tokens omitted.</span></p>)", omitted,
                   omitted, n);
  o += "\n";
  o += fmt::format(R"(<table class="worst sortable" data-recipe="{}"><thead><tr>)", esc(r.name));
  std::vector<std::pair<const char*, const char*>> heads = {
      {"sequence id", "str"}, {"position", "num"}, {"token id", "num"}};
  if (opt.tokenizer) {
    heads.emplace_back("context", "str");
    heads.emplace_back("token", "str");
  }
  for (const char* h : {"logp_gen", "logp_train", "log ratio", "KL(gen || train)"})
    heads.emplace_back(h, "num");
  for (const auto& [h, t] : heads) o += fmt::format(R"(<th data-type="{}">{}</th>)", t, esc(h));
  o += "</tr></thead><tbody>\n";
  for (const auto& w : rows) {
    o += fmt::format(
        R"(<tr><td data-v="{}">{}</td><td class="num" data-v="{}">{}</td><td class="num" data-v="{}">{}</td>)",
        esc(w.sequence_id), esc(w.sequence_id), w.position, w.position, w.token_id, w.token_id);
    if (opt.tokenizer) {
      const std::string ctx = printable_text(w.context, 60, true), tok = printable_text(w.text, 30);
      o += fmt::format(R"(<td class="text" data-v="{}">{}</td><td class="text" data-v="{}"><b>{}</b></td>)",
                       esc(ctx), esc(ctx), esc(tok), esc(tok));
    }
    o += num_td(w.logp_gen) + num_td(w.logp_train) + num_td(w.log_ratio);
    o += std::isnan(w.kl) ? std::string(R"(<td class="num" data-v="nan">-</td>)") : num_td(w.kl);
    o += "</tr>\n";
  }
  o += "</tbody></table>\n";
  return o;
}

}  // namespace

std::string render_html(const RunData& run, const ReportOptions& opt) {
  const Verdicts verdicts(opt.gate);
  std::size_t ntok = 0;
  if (!run.recipes.empty())
    if (const auto* lg = token_metric(run.recipes.front(), "logp_gen")) ntok = lg->size();

  std::string o = page_open("rlparity report: " + opt.run_path);

  // Header.
  o += "<header><h1>rlparity mismatch report</h1>\n<table class=\"meta\" id=\"run-meta\"><tbody>\n";
  auto meta = [&](const std::string& k, const std::string& v) { o += meta_row(k, v); };
  meta("run file", opt.run_path);
  meta("checkpoint", run.checkpoint_path);
  meta("checkpoint hash", run.checkpoint_hash);
  std::string inputs_path;
  if (run.extra.is_object() && run.extra.contains("inputs") && run.extra["inputs"].is_string())
    inputs_path = run.extra["inputs"].get<std::string>();
  meta("inputs", fmt::format("{}{} sequences, {} tokens ({} response tokens)",
                             inputs_path.empty() ? "" : inputs_path + ": ", run.num_sequences(),
                             run.token_ids.size(), ntok));
  std::string recipes;
  for (const auto& r : run.recipes) recipes += fmt::format("{}{}", recipes.empty() ? "" : ", ", r.name);
  meta("recipes", recipes);
  meta("seed", std::to_string(run.seed));
  meta("model", dump_json(run.model_spec));
  if (run.extra.is_object())
    for (const auto& [k, v] : run.extra.items())
      if (k != "inputs") meta(k, truncate(v.is_string() ? v.get<std::string>() : dump_json(v), 400));
  meta("written by", "rlparity " + run.tool_version + " at " + run.created);
  meta("command line", run.command_line);
  if (!opt.threshold_sources.empty()) {
    std::string s;
    for (const auto& x : opt.threshold_sources) s += fmt::format("{}{}", s.empty() ? "" : ", ", x);
    meta("thresholds", s);
  }
  if (opt.baseline) meta("baseline", opt.baseline_path);
  o += "</tbody></table>\n";
  o += "<details><summary>Recipe settings (knobs of both paths)</summary>\n";
  for (const auto& r : run.recipes) {
    std::vector<std::pair<std::string, std::string>> flat;
    flatten(r.settings, "", flat);
    o += fmt::format(R"(<h3>{}</h3><table class="meta settings" data-recipe="{}"><tbody>)", esc(r.name),
                     esc(r.name));
    for (const auto& [k, v] : flat) o += fmt::format("<tr><td>{}</td><td>{}</td></tr>", esc(k), esc(v));
    o += "</tbody></table>\n";
  }
  o += "</details>\n";
  o += "<nav><a href=\"#summary\">summary</a>";
  if (opt.baseline) o += "<a href=\"#baseline\">baseline deltas</a>";
  if (!routing_sections(run).empty()) o += "<a href=\"#routing\">router flips</a>";
  if (!run.attribution.empty()) o += "<a href=\"#attribution\">attribution</a>";
  if (opt.inspect) o += "<a href=\"#inspect\">inspection</a>";
  o += "<a href=\"#compare\">side by side</a>";
  for (const auto& r : run.recipes)
    o += fmt::format(R"(<a href="#recipe-{}">{}</a>)", slug(r.name), esc(r.name));
  o += "</nav></header>\n";

  // Summary.
  o += "<section id=\"summary\"><h2>Summary</h2>\n";
  if (opt.gate) {
    const std::size_t v = opt.gate->violations();
    o += fmt::format(R"(<p class="gate-result {}">Gate: {} of {} checks {}.</p>)", v == 0 ? "pass" : "fail",
                     v == 0 ? opt.gate->checks.size() : v, opt.gate->checks.size(),
                     v == 0 ? "pass" : "fail or are missing");
    for (const auto& n : opt.gate->notes) o += fmt::format(R"(<p class="note">{}</p>)", esc(n));
  }
  o += "<p class=\"note\">Values are the summary attributes of the run file, printed exactly (shortest text "
       "that reads back "
       "to the same double). Definitions: docs/metrics.md.</p>\n";
  o += summary_table(run, headline_statistics(opt.gate), verdicts, "summary-table");
  std::set<std::string> all;
  for (const auto& r : run.recipes)
    for (const auto& [k, v] : r.summary) all.insert(k);
  o += fmt::format("<details><summary>All {} summary statistics</summary>\n", all.size());
  o += summary_table(run, std::vector<std::string>(all.begin(), all.end()), verdicts, "summary-all");
  o += "</details>\n</section>\n";

  if (opt.baseline) o += baseline_section(run, opt);
  o += engine_html(run);
  o += routing_html(run);
  o += attribution_html(run);
  if (opt.inspect) o += inspect_html(*opt.inspect, opt.inspect_path);

  const PlotData pd = prepare_plots(run, opt);
  o += comparison_plots(run, pd, opt);
  for (std::size_t i = 0; i < run.recipes.size(); ++i) {
    const auto& r = run.recipes[i];
    o += fmt::format(R"(<section class="recipe" id="recipe-{}" data-recipe="{}"><h2>Recipe {}</h2>)",
                     slug(r.name), esc(r.name), esc(r.name));
    o += "\n";
    o += recipe_plots(run, i, pd, opt);
    o += worst_table(run, r, opt);
    o += "</section>\n";
  }
  o += page_close();
  return o;
}

std::string render_inspect_html(const InspectResult& r, const ReportOptions& opt) {
  std::string o = page_open("rlparity inspect report: " + opt.inspect_path);
  o += "<header><h1>rlparity checkpoint inspection</h1>\n<table class=\"meta\" id=\"run-meta\"><tbody>\n";
  for (const auto& [k, v] :
       std::vector<std::pair<std::string, std::string>>{{"inspect file", opt.inspect_path},
                                                        {"checkpoint", r.checkpoint_path},
                                                        {"checkpoint hash", r.checkpoint_hash},
                                                        {"model", dump_json(r.model_spec)},
                                                        {"tensors", std::to_string(r.tensors.size())},
                                                        {"recommendation", r.recommendation}})
    o += meta_row(k, v);
  o += "</tbody></table>\n<nav><a href=\"#inspect-layers\">layers</a><a "
       "href=\"#inspect-tensors\">tensors</a></nav></header>\n";
  o += inspect_html(r, opt.inspect_path);
  o += page_close();
  return o;
}

std::string render_sweep_html(const SweepResult& sweep, const ReportOptions& opt) {
  std::string o = page_open("rlparity sweep report: " + opt.run_path);
  o += "<header><h1>rlparity sweep</h1>\n<table class=\"meta\" id=\"run-meta\"><tbody>\n";
  const std::string knobs = fmt::format("{}", fmt::join(sweep.knobs, " x "));
  for (const auto& [k, v] : std::vector<std::pair<std::string, std::string>>{
           {"sweep file", opt.run_path},
           {"grid", knobs},
           {"points", std::to_string(sweep.points())},
           {"recipes", fmt::format("{}", fmt::join(sweep.recipes, ", "))}})
    o += meta_row(k, v);
  o += "</tbody></table>\n<nav><a href=\"#sweep-points\">points</a><a "
       "href=\"#sweep-positions\">positions</a><a "
       "href=\"#sweep-boundaries\">boundaries</a></nav></header>\n";
  const auto sections = sweep_sections(sweep);
  o += "<section>" + table_section_html(sections.at(0)) + "</section>\n";
  // Per recipe, the per-position mean |log ratio| of every point (one curve each).
  o += R"(<section id="sweep-positions"><h2>Mean |log ratio| per response position</h2><div class="plots">)";
  const std::size_t P = sweep.points(), R = sweep.recipes.size(), N = sweep.positions;
  for (std::size_t r = 0; r < R; ++r) {
    std::vector<Series> curves;
    for (std::size_t p = 0; p < P; ++p) {
      Series c{sweep_point_label(sweep, p), p, {}, {}, true};
      for (std::size_t j = 0; j < N; ++j) {
        c.x.push_back(static_cast<double>(j));
        c.y.push_back(sweep.position_curve[(p * R + r) * N + j]);
      }
      curves.push_back(std::move(c));
    }
    PlotOptions po;
    po.id = "sweep-position-" + slug(sweep.recipes[r]);
    po.title = "Mean |log ratio| per response position: " + sweep.recipes[r];
    po.x = Axis{"response position", "", false, {}, {}};
    po.y = Axis{"mean |log ratio|", "nats", true, {}, {}};
    po.width = 900;
    o += line_plot(po, curves);
  }
  o += "</div></section>\n";
  o += "<section>" + table_section_html(sections.at(1)) + "</section>\n";
  o += page_close();
  return o;
}

}  // namespace rlp::report
