// The self-contained HTML mismatch report (docs/report.md). Output is XML-well-formed (XHTML
// style: every element closed, attributes quoted, text escaped), uses no external resource, and is
// a pure function of the run data and options.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "report/sections.hpp"
#include "rlparity/gate/report_writers.hpp"
#include "rlparity/metrics/statistics.hpp"
#include "rlparity/report/report.hpp"
#include "rlparity/report/svg.hpp"
#include "rlparity/util/version.hpp"

namespace rlp::report {

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

const std::vector<double>* token_metric(const RecipeResult& r, const std::string& name) {
  auto it = r.tokens.find(name);
  return it == r.tokens.end() ? nullptr : &it->second;
}

std::string esc(const std::string& s) { return xml_escape(s); }

// Anchor-safe id fragment of a recipe name.
std::string slug(const std::string& s) {
  std::string o;
  for (char c : s) o += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') ? c : '_';
  return o;
}

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

const char* kCss = R"(
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:0;color:#1a1a1a;background:#f6f7f9;font-size:14px;line-height:1.4}
main{max-width:1380px;margin:0 auto;padding:16px 24px 40px}
h1{font-size:22px;margin:8px 0 4px}
h2{font-size:18px;margin:28px 0 8px;border-bottom:2px solid #d9dde3;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}
nav a{margin-right:14px;color:#0b5cad}
table{border-collapse:collapse;background:#fff;margin:6px 0}
th,td{border:1px solid #d9dde3;padding:3px 8px;vertical-align:top}
th{background:#eef1f5;text-align:left}
.vline{display:block;white-space:nowrap}
.scroll{overflow-x:auto;max-width:100%}
td.num{text-align:right;font-family:ui-monospace,"DejaVu Sans Mono",monospace;white-space:nowrap}
table.meta td:first-child{font-weight:600;white-space:nowrap}
table.meta td{font-family:ui-monospace,"DejaVu Sans Mono",monospace;word-break:break-all}
table.sortable th{cursor:pointer;user-select:none}
table.sortable th[data-dir="asc"]::after{content:" \25B2"}
table.sortable th[data-dir="desc"]::after{content:" \25BC"}
.verdict{display:inline-block;margin-left:0;padding:0 5px;border-radius:3px;font-size:11px;font-weight:700;font-family:system-ui,sans-serif}
.verdict.pass{background:#d8f0dd;color:#135c25}
.verdict.fail{background:#f8d3d0;color:#8a1208}
.verdict.missing{background:#fbe7c2;color:#6b4500}
.bound{color:#555;font-size:11px;margin-left:4px}
td.worse{background:#fdecea}
td.better{background:#e8f6ec}
.note{color:#555;font-size:12px}
.plots{display:flex;flex-wrap:wrap;gap:12px}
.plots svg{background:#fff;border:1px solid #d9dde3}
svg.plot .bg{fill:#fff}
svg.plot text{font-family:system-ui,"DejaVu Sans",sans-serif;fill:#1a1a1a}
svg.plot .title{font-size:13px;font-weight:600}
svg.plot .note{font-size:10px;fill:#666}
svg.plot .tick{font-size:10px;fill:#444}
svg.plot .legend{font-size:11px}
svg.plot .axis-label{font-size:11px;fill:#333}
svg.plot .nodata{font-size:13px;fill:#999}
svg.plot .grid{stroke:#e6e8ec;stroke-width:1}
svg.plot .axis,svg.plot .tickmark{stroke:#333;stroke-width:1}
details{margin:6px 0}
summary{cursor:pointer;color:#0b5cad}
footer{margin-top:30px;color:#777;font-size:12px}
)";

// Sorts a worst-tokens table by the clicked column (numbers by data-v); marks the page data-ready
// (the browser test checks the script ran). Written without '<' and '&' so the page stays
// XML-well-formed.
const char* kJs = R"(
document.querySelectorAll('table.sortable th').forEach(function (th) {
  th.addEventListener('click', function () {
    var table = th.closest('table');
    var body = table.tBodies[0];
    var col = Array.prototype.indexOf.call(th.parentNode.children, th);
    var asc = th.getAttribute('data-dir') !== 'asc';
    th.parentNode.querySelectorAll('th').forEach(function (h) { h.removeAttribute('data-dir'); });
    th.setAttribute('data-dir', asc ? 'asc' : 'desc');
    var num = th.getAttribute('data-type') === 'num';
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = a.cells[col].getAttribute('data-v');
      var y = b.cells[col].getAttribute('data-v');
      var c = num ? parseFloat(x) - parseFloat(y) : x.localeCompare(y);
      if (isNaN(c)) c = 0;
      return asc ? c : -c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  });
});
document.documentElement.setAttribute('data-ready', 'yes');
)";

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

// Shared plot inputs of every recipe, so per-recipe plots and the comparison use the same axes.
struct PlotData {
  std::optional<Range> abs_range;  // |log ratio|, log axis, whole decades
  std::optional<Range> r_range;    // ratio, log axis, symmetric around 1
  std::string kl_metric, kl_label;
  bool kl_log = false;
  std::vector<PositionCurve> kl_curves;  // per recipe
};

PlotData prepare(const RunData& run, const ReportOptions& opt) {
  PlotData p;
  std::vector<const std::vector<double>*> abs;
  double m = 0;
  bool any_r = false;
  for (const auto& r : run.recipes) {
    if (const auto* a = token_metric(r, "abs_log_ratio")) abs.push_back(a);
    if (const auto* ratio = token_metric(r, "ratio"))
      for (double x : *ratio)
        if (std::isfinite(x) && x > 0) {
          m = std::max(m, std::abs(std::log10(x)));
          any_r = true;
        }
  }
  p.abs_range = data_range(abs, true);
  if (any_r && m > 0) {
    m *= 1.02;
    p.r_range = Range{std::pow(10.0, -m), std::pow(10.0, m)};
  }
  bool all_kl = !run.recipes.empty();
  for (const auto& r : run.recipes) all_kl = all_kl && token_metric(r, "kl_gen_train");
  p.kl_metric = all_kl ? "kl_gen_train" : "k3";
  p.kl_label = all_kl ? "mean KL(p_gen || p_train)" : "mean k3 = r - 1 - log r";
  double lo = std::numeric_limits<double>::infinity(), hi = 0;
  bool nonpos = false;
  for (const auto& r : run.recipes) {
    const auto* v = token_metric(r, p.kl_metric);
    p.kl_curves.push_back(v ? per_position_mean(run, *v, opt.max_positions) : PositionCurve{});
    for (double y : p.kl_curves.back().mean) {
      if (!std::isfinite(y)) continue;
      if (y <= 0)
        nonpos = true;
      else
        lo = std::min(lo, y), hi = std::max(hi, y);
    }
  }
  p.kl_log = !nonpos && hi > 0 && hi / lo > 30;
  return p;
}

std::string count_note(const Bins& b, bool abs) {
  std::vector<std::string> parts;
  if (b.nonpositive)
    parts.push_back(fmt::format("{} {} not shown (log axis)", b.nonpositive,
                                abs ? "exact zeros" : "non-positive values"));
  if (b.nan) parts.push_back(fmt::format("{} NaN", b.nan));
  if (b.below + b.above) parts.push_back(fmt::format("{} outside the range", b.below + b.above));
  std::string o = fmt::format("{} tokens binned into {} log-spaced bins", b.total(), b.counts.size());
  for (const auto& s : parts) o += "; " + s;
  return o;
}

PlotOptions hist_abs_opts(const std::string& id, const std::string& title) {
  PlotOptions o;
  o.id = id;
  o.title = title;
  o.x = Axis{"|log ratio| = |logp_train - logp_gen|", "nats", true, {}, {}};
  o.y = Axis{"tokens", "count", true, {}, {}};
  return o;
}
PlotOptions hist_r_opts(const std::string& id, const std::string& title) {
  PlotOptions o;
  o.id = id;
  o.title = title;
  o.x = Axis{"importance ratio r = p_train / p_gen", "", true, {}, {}};
  o.y = Axis{"tokens", "count", true, {}, {}};
  return o;
}
PlotOptions cdf_opts(const std::string& id, const std::string& title, bool abs, const Range& xr) {
  PlotOptions o;
  o.id = id;
  o.title = title;
  o.x = abs ? Axis{"|log ratio|", "nats", true, xr.lo, xr.hi}
            : Axis{"importance ratio r", "", true, xr.lo, xr.hi};
  o.y = Axis{"fraction of tokens <= x", "", false, 0.0, 1.0};
  return o;
}
PlotOptions kl_opts(const std::string& id, const std::string& title, const PlotData& p, std::size_t bucket) {
  PlotOptions o;
  o.id = id;
  o.title = title;
  o.x = Axis{"position in response", "tokens", false, 0.0, {}};
  o.y = Axis{p.kl_label, "nats", p.kl_log, {}, {}};
  if (bucket > 1) o.note = fmt::format("each point averages {} consecutive positions", bucket);
  return o;
}

std::string no_range_plot(PlotOptions o, const std::string& why) {
  o.note = why;
  return line_plot(o, {});
}

std::string recipe_plots(const RunData& run, std::size_t ri, const PlotData& p, const ReportOptions& opt) {
  const RecipeResult& r = run.recipes[ri];
  const std::string sid = slug(r.name);
  std::string o = "<div class=\"plots\">\n";
  const auto* abs = token_metric(r, "abs_log_ratio");
  const auto* ratio = token_metric(r, "ratio");
  // |log ratio|
  if (p.abs_range && abs) {
    Bins b = bin_values(*abs, p.abs_range->lo, p.abs_range->hi, opt.hist_bins, true);
    PlotOptions h = hist_abs_opts("hist-abs-log-ratio-" + sid, "Histogram of |log ratio|: " + r.name);
    h.note = count_note(b, true);
    o += histogram_plot(h, {{r.name, ri, std::move(b)}});
    Series s = cdf_series(*abs, opt.cdf_points, true);
    s.label = r.name;
    s.color = ri;
    o += line_plot(cdf_opts("cdf-abs-log-ratio-" + sid, "CDF of |log ratio|: " + r.name, true, *p.abs_range),
                   {s});
  } else {
    o += no_range_plot(hist_abs_opts("hist-abs-log-ratio-" + sid, "Histogram of |log ratio|: " + r.name),
                       "every |log ratio| is 0 or not finite");
  }
  // ratio
  if (p.r_range && ratio) {
    Bins b = bin_values(*ratio, p.r_range->lo, p.r_range->hi, opt.hist_bins, true);
    PlotOptions h = hist_r_opts("hist-ratio-" + sid, "Histogram of the importance ratio: " + r.name);
    h.note = count_note(b, false);
    o += histogram_plot(h, {{r.name, ri, std::move(b)}});
    Series s = cdf_series(*ratio, opt.cdf_points, true);
    s.label = r.name;
    s.color = ri;
    o += line_plot(cdf_opts("cdf-ratio-" + sid, "CDF of the importance ratio: " + r.name, false, *p.r_range),
                   {s});
  } else {
    o += no_range_plot(hist_r_opts("hist-ratio-" + sid, "Histogram of the importance ratio: " + r.name),
                       "every ratio is exactly 1 or not finite");
  }
  // KL per position
  const PositionCurve& kc = p.kl_curves[ri];
  Series ks{r.name, ri, kc.position, kc.mean, true};
  o += line_plot(kl_opts("kl-position-" + sid, "Mean KL per response position: " + r.name, p, kc.bucket),
                 {ks});
  // Per-layer bars
  std::vector<BarSeries> bars;
  std::vector<std::string> order = {"rel_l2_gen_train", "rel_l2_gen_oracle", "rel_l2_train_oracle"};
  for (const auto& [k, v] : r.layers)
    if (std::find(order.begin(), order.end(), k) == order.end()) order.push_back(k);
  std::size_t L = 0, color = 0;
  bool positive = true;
  for (const auto& name : order) {
    auto it = r.layers.find(name);
    if (it == r.layers.end()) continue;
    std::string label = name;
    if (name == "rel_l2_gen_train")
      label = "gen vs train";
    else if (name == "rel_l2_gen_oracle")
      label = "gen vs oracle";
    else if (name == "rel_l2_train_oracle")
      label = "train vs oracle";
    bars.push_back({label, color++, it->second});
    L = std::max(L, it->second.size());
    for (double x : it->second) positive = positive && x > 0;
  }
  if (!bars.empty() && L > 0) {
    std::vector<std::string> cats;
    for (std::size_t l = 0; l < L; ++l) cats.push_back(std::to_string(l));
    PlotOptions b;
    b.id = "layers-" + sid;
    b.title = "Per-layer hidden-state divergence: " + r.name;
    b.x = Axis{"decoder layer (output)", "index", false, {}, {}};
    b.y = Axis{"relative L2 ||a - b|| / ||b||", "", positive, {}, {}};
    b.width = bar_chart_width(L * bars.size());
    o += bar_chart(b, cats, bars);
  }
  o += "</div>\n";
  return o;
}

std::string comparison_plots(const RunData& run, const PlotData& p, const ReportOptions& opt) {
  std::string o = R"(<section id="compare"><h2>Recipes side by side</h2><div class="plots">)";
  o += "\n";
  if (p.abs_range) {
    std::vector<HistSeries> hs;
    std::vector<Series> cs;
    for (std::size_t i = 0; i < run.recipes.size(); ++i) {
      const auto* abs = token_metric(run.recipes[i], "abs_log_ratio");
      if (!abs) continue;
      hs.push_back(
          {run.recipes[i].name, i, bin_values(*abs, p.abs_range->lo, p.abs_range->hi, opt.hist_bins, true)});
      Series s = cdf_series(*abs, opt.cdf_points, true);
      s.label = run.recipes[i].name;
      s.color = i;
      cs.push_back(std::move(s));
    }
    PlotOptions h = hist_abs_opts("compare-hist-abs-log-ratio", "Histogram of |log ratio|, all recipes");
    h.note = "exact zeros are not shown on the log axis";
    o += histogram_plot(h, hs);
    o += line_plot(
        cdf_opts("compare-cdf-abs-log-ratio", "CDF of |log ratio|, all recipes", true, *p.abs_range), cs);
  }
  if (p.r_range) {
    std::vector<Series> cs;
    for (std::size_t i = 0; i < run.recipes.size(); ++i) {
      const auto* ratio = token_metric(run.recipes[i], "ratio");
      if (!ratio) continue;
      Series s = cdf_series(*ratio, opt.cdf_points, true);
      s.label = run.recipes[i].name;
      s.color = i;
      cs.push_back(std::move(s));
    }
    o += line_plot(
        cdf_opts("compare-cdf-ratio", "CDF of the importance ratio, all recipes", false, *p.r_range), cs);
  }
  {
    std::vector<Series> ks;
    std::size_t bucket = 1;
    for (std::size_t i = 0; i < run.recipes.size(); ++i) {
      ks.push_back({run.recipes[i].name, i, p.kl_curves[i].position, p.kl_curves[i].mean, true});
      bucket = std::max(bucket, p.kl_curves[i].bucket);
    }
    o += line_plot(kl_opts("compare-kl-position", "Mean KL per response position, all recipes", p, bucket),
                   ks);
  }
  {
    std::vector<BarSeries> bars;
    std::size_t L = 0;
    bool positive = true;
    for (std::size_t i = 0; i < run.recipes.size(); ++i) {
      auto it = run.recipes[i].layers.find("rel_l2_gen_train");
      if (it == run.recipes[i].layers.end()) continue;
      bars.push_back({run.recipes[i].name, i, it->second});
      L = std::max(L, it->second.size());
      for (double x : it->second) positive = positive && x > 0;
    }
    if (!bars.empty() && L > 0) {
      std::vector<std::string> cats;
      for (std::size_t l = 0; l < L; ++l) cats.push_back(std::to_string(l));
      PlotOptions b;
      b.id = "compare-layers";
      b.title = "Per-layer divergence gen vs train, all recipes";
      b.x = Axis{"decoder layer (output)", "index", false, {}, {}};
      b.y = Axis{"relative L2, gen vs train", "", positive, {}, {}};
      b.width = bar_chart_width(L * bars.size());
      o += bar_chart(b, cats, bars);
    }
  }
  o += "</div></section>\n";
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
  o += fmt::format("<style>{}</style>\n</head>\n<body>\n<main>\n", kCss);
  return o;
}

std::string page_close() {
  std::string o = fmt::format(
      "<footer>Generated by rlparity {} report. Self-contained: no external resources.</footer>\n",
      esc(version()));
  o += "</main>\n<script>";
  o += kJs;
  o += "</script>\n</body>\n</html>\n";
  return o;
}

std::string worst_table(const RunData& run, const RecipeResult& r, const ReportOptions& opt) {
  const auto rows = worst_tokens(run, r, opt.worst_tokens);
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
  for (const auto& [h, t] : std::vector<std::pair<const char*, const char*>>{{"sequence id", "str"},
                                                                             {"position", "num"},
                                                                             {"token id", "num"},
                                                                             {"logp_gen", "num"},
                                                                             {"logp_train", "num"},
                                                                             {"log ratio", "num"},
                                                                             {"KL(gen || train)", "num"}})
    o += fmt::format(R"(<th data-type="{}">{}</th>)", t, esc(h));
  o += "</tr></thead><tbody>\n";
  for (const auto& w : rows) {
    o += fmt::format(
        R"(<tr><td data-v="{}">{}</td><td class="num" data-v="{}">{}</td><td class="num" data-v="{}">{}</td>)",
        esc(w.sequence_id), esc(w.sequence_id), w.position, w.position, w.token_id, w.token_id);
    o += num_td(w.logp_gen) + num_td(w.logp_train) + num_td(w.log_ratio);
    o += std::isnan(w.kl) ? std::string(R"(<td class="num" data-v="nan">-</td>)") : num_td(w.kl);
    o += "</tr>\n";
  }
  o += "</tbody></table>\n";
  return o;
}

}  // namespace

std::vector<WorstToken> worst_tokens(const RunData& run, const RecipeResult& recipe, std::size_t cap) {
  std::vector<WorstToken> out;
  const auto* lr = token_metric(recipe, "log_ratio");
  if (!lr) return out;
  const auto* lg = token_metric(recipe, "logp_gen");
  const auto* lt = token_metric(recipe, "logp_train");
  const auto* kl = token_metric(recipe, "kl_gen_train");
  std::vector<std::size_t> idx(lr->size());
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  auto key = [&](std::size_t i) {
    const double a = std::abs((*lr)[i]);
    return std::isnan(a) ? std::numeric_limits<double>::infinity() * 2 : a;  // NaN first
  };
  auto worse = [&](std::size_t a, std::size_t b) {
    const double ka = key(a), kb = key(b);
    const bool na = std::isnan((*lr)[a]), nb = std::isnan((*lr)[b]);
    if (na != nb) return na;
    if (ka != kb) return ka > kb;
    return a < b;
  };
  const std::size_t k = std::min(cap, idx.size());
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k), idx.end(), worse);
  const std::vector<int64_t> ro = response_offsets(run.seq_offsets, run.prompt_lengths);
  for (std::size_t j = 0; j < k; ++j) {
    const std::size_t i = idx[j];
    WorstToken w;
    w.index = i;
    auto it = std::upper_bound(ro.begin(), ro.end(), static_cast<int64_t>(i));
    const auto s = static_cast<std::size_t>(std::max<std::ptrdiff_t>(0, (it - ro.begin()) - 1));
    w.sequence = s;
    if (s < run.seq_ids.size()) w.sequence_id = run.seq_ids[s];
    if (s < ro.size()) w.position = i - static_cast<std::size_t>(ro[s]);
    if (s < run.prompt_lengths.size() && s + 1 < run.seq_offsets.size()) {
      const auto t = static_cast<std::size_t>(run.seq_offsets[s] + run.prompt_lengths[s]) + w.position;
      if (t < run.token_ids.size()) w.token_id = run.token_ids[t];
    }
    w.logp_gen = lg && i < lg->size() ? (*lg)[i] : kNaN;
    w.logp_train = lt && i < lt->size() ? (*lt)[i] : kNaN;
    w.log_ratio = (*lr)[i];
    w.kl = kl && i < kl->size() ? (*kl)[i] : kNaN;
    out.push_back(w);
  }
  return out;
}

PositionCurve per_position_mean(const RunData& run, const std::vector<double>& v, std::size_t max_points) {
  PositionCurve c;
  const std::vector<int64_t> ro = response_offsets(run.seq_offsets, run.prompt_lengths);
  std::size_t maxlen = 0;
  for (std::size_t s = 0; s + 1 < ro.size(); ++s)
    maxlen = std::max(maxlen, static_cast<std::size_t>(ro[s + 1] - ro[s]));
  if (maxlen == 0 || ro.empty() || static_cast<std::size_t>(ro.back()) != v.size()) return c;
  if (max_points < 1) max_points = 1;
  c.bucket = (maxlen + max_points - 1) / max_points;
  const std::size_t nb = (maxlen + c.bucket - 1) / c.bucket;
  std::vector<double> sum(nb, 0.0), cnt(nb, 0.0);
  for (std::size_t s = 0; s + 1 < ro.size(); ++s)
    for (auto i = ro[s]; i < ro[s + 1]; ++i) {
      const double x = v[static_cast<std::size_t>(i)];
      if (std::isnan(x)) continue;
      const auto b = static_cast<std::size_t>(i - ro[s]) / c.bucket;
      sum[b] += x;
      cnt[b] += 1;
    }
  for (std::size_t b = 0; b < nb; ++b) {
    c.position.push_back(static_cast<double>(b * c.bucket));
    c.mean.push_back(cnt[b] > 0 ? sum[b] / cnt[b] : kNaN);
  }
  return c;
}

std::vector<std::string> headline_statistics(const gate::GateResult* g) {
  std::vector<std::string> out = gate::headline_statistics();
  if (g) {
    std::set<std::string> extra;
    for (const auto& c : g->checks)
      if (std::find(out.begin(), out.end(), c.statistic) == out.end()) extra.insert(c.statistic);
    out.insert(out.end(), extra.begin(), extra.end());
  }
  return out;
}

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
  o += attribution_html(run);
  if (opt.inspect) o += inspect_html(*opt.inspect, opt.inspect_path);

  const PlotData pd = prepare(run, opt);
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

}  // namespace rlp::report
