#include "report/html_plots.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "report/report_helpers.hpp"
#include "report/sections.hpp"

namespace rlp::report {

namespace {

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

// One per-token quantity with a histogram and a CDF: |log ratio| or the importance ratio r.
struct Quantity {
  const char* metric;      // the per-token array
  const char* id;          // plot id stem: hist-<id>-<recipe>, cdf-<id>-<recipe>, compare-...-<id>
  const char* title;       // "Histogram of <title>: <recipe>"
  bool abs;                // |log ratio| (exact zeros) or r (non-positive values)
  const char* empty_note;  // shown instead when no token has a finite, drawable value
  std::optional<Range> PlotData::*range;
};
constexpr Quantity kAbsLogRatio{
    "abs_log_ratio",     "abs-log-ratio", "|log ratio|", true, "every |log ratio| is 0 or not finite",
    &PlotData::abs_range};
constexpr Quantity kRatio{
    "ratio",           "ratio", "the importance ratio", false, "every ratio is exactly 1 or not finite",
    &PlotData::r_range};

PlotOptions hist_opts(const Quantity& q, const std::string& id, const std::string& title) {
  PlotOptions o;
  o.id = id;
  o.title = title;
  o.x = q.abs ? Axis{"|log ratio| = |logp_train - logp_gen|", "nats", true, {}, {}}
              : Axis{"importance ratio r = p_train / p_gen", "", true, {}, {}};
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

Series cdf_of(const std::vector<double>& values, const std::string& label, std::size_t color,
              const ReportOptions& opt) {
  Series s = cdf_series(values, opt.cdf_points, true);
  s.label = label;
  s.color = color;
  return s;
}

// The histogram and CDF of one quantity of recipe `ri`, or an empty plot saying why there is none.
std::string histogram_and_cdf(const RecipeResult& r, std::size_t ri, const Quantity& q, const PlotData& p,
                              const ReportOptions& opt) {
  const std::string sid = slug(r.name);
  const auto* v = token_metric(r, q.metric);
  const std::optional<Range>& range = p.*q.range;
  const std::string hist_id = fmt::format("hist-{}-{}", q.id, sid);
  const std::string hist_title = fmt::format("Histogram of {}: {}", q.title, r.name);
  if (!range || !v) return no_range_plot(hist_opts(q, hist_id, hist_title), q.empty_note);
  Bins b = bin_values(*v, range->lo, range->hi, opt.hist_bins, true);
  PlotOptions h = hist_opts(q, hist_id, hist_title);
  h.note = count_note(b, q.abs);
  std::string o = histogram_plot(h, {{r.name, ri, std::move(b)}});
  o += line_plot(cdf_opts(fmt::format("cdf-{}-{}", q.id, sid), fmt::format("CDF of {}: {}", q.title, r.name),
                          q.abs, *range),
                 {cdf_of(*v, r.name, ri, opt)});
  return o;
}

// The CDFs of one quantity for every recipe that has it, after their histograms when
// `histogram_note` is given (its note).
std::string compared_quantity(const RunData& run, const Quantity& q, const PlotData& p,
                              const ReportOptions& opt, const char* histogram_note) {
  const std::optional<Range>& range = p.*q.range;
  if (!range) return {};
  std::vector<HistSeries> hs;
  std::vector<Series> cs;
  for (std::size_t i = 0; i < run.recipes.size(); ++i) {
    const auto* v = token_metric(run.recipes[i], q.metric);
    if (!v) continue;
    if (histogram_note)
      hs.push_back({run.recipes[i].name, i, bin_values(*v, range->lo, range->hi, opt.hist_bins, true)});
    cs.push_back(cdf_of(*v, run.recipes[i].name, i, opt));
  }
  std::string o;
  if (histogram_note) {
    PlotOptions h = hist_opts(q, fmt::format("compare-hist-{}", q.id),
                              fmt::format("Histogram of {}, all recipes", q.title));
    h.note = histogram_note;
    o += histogram_plot(h, hs);
  }
  o += line_plot(cdf_opts(fmt::format("compare-cdf-{}", q.id), fmt::format("CDF of {}, all recipes", q.title),
                          q.abs, *range),
                 cs);
  return o;
}

// A bar chart of per-layer relative L2 divergences, one group of bars per decoder layer; nothing
// when there are no bars. The y axis is logarithmic when every value is positive.
std::string layer_bars(const std::string& id, const std::string& title, const std::string& y_label,
                       const std::vector<BarSeries>& bars) {
  std::size_t L = 0;
  bool positive = true;
  for (const auto& b : bars) {
    L = std::max(L, b.values.size());
    for (double x : b.values) positive = positive && x > 0;
  }
  if (bars.empty() || L == 0) return {};
  std::vector<std::string> cats;
  for (std::size_t l = 0; l < L; ++l) cats.push_back(std::to_string(l));
  PlotOptions o;
  o.id = id;
  o.title = title;
  o.x = Axis{"decoder layer (output)", "index", false, {}, {}};
  o.y = Axis{y_label, "", positive, {}, {}};
  o.width = bar_chart_width(L * bars.size());
  return bar_chart(o, cats, bars);
}

}  // namespace

PlotData prepare_plots(const RunData& run, const ReportOptions& opt) {
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

namespace {

// The token x layer divergence of the recipe's worst sequence (token_rel_l2), the first layer at the
// birth threshold outlined per token, and how many of all the run's tokens are born at each layer.
std::string birth_heatmap(const RunData& run, const RecipeResult& r, const std::string& sid,
                          const ReportOptions& opt) {
  const MismatchBirth b = mismatch_birth(run, r, opt.birth_threshold, opt.heatmap_tokens);
  if (b.layers == 0 || b.tokens == 0) return {};
  const auto L = static_cast<std::size_t>(b.layers);
  std::vector<double> cells(L * b.tokens);
  std::vector<int> marks(b.tokens);
  for (std::size_t c = 0; c < b.tokens; ++c) {
    for (std::size_t l = 0; l < L; ++l) cells[l * b.tokens + c] = r.token_rel_l2[(b.token0 + c) * L + l];
    marks[c] = b.first_layer[b.token0 + c];
  }
  const std::string seq_id =
      b.sequence < run.seq_ids.size() ? run.seq_ids[b.sequence] : std::to_string(b.sequence);
  PlotOptions po;
  po.id = "birth-" + sid;
  po.title = fmt::format("Where the mismatch is born: {}, sequence {}", r.name, seq_id);
  po.note = fmt::format(
      "|h_gen - h_train| / |h_train| per response token and layer (log scale); outlined: the first "
      "layer >= {}",
      format_sig(b.threshold, 3));
  po.x = Axis{"response token", "", false, {}, {}};
  po.y = Axis{"decoder layer", "", false, {}, {}};
  po.width = 900;
  po.height = std::max(220, std::min(520, 60 + 14 * b.layers));
  std::string o = heatmap_plot(po, b.layers, static_cast<int>(b.tokens), cells, 1e-4, 1.0, true, marks);
  std::string counts;
  for (std::size_t l = 0; l < L; ++l)
    if (b.born_at[l] > 0)
      counts += fmt::format("{}layer {}: {}", counts.empty() ? "" : ", ", l, b.born_at[l]);
  o += fmt::format(
      "<p class=\"note\" data-birth=\"{}\">Mismatch born (first layer with |h_gen - h_train| / |h_train| "
      "&gt;= {}) over "
      "all {} response tokens: {}{}never: {}.</p>\n",
      sid, format_sig(b.threshold, 3), b.first_layer.size(), counts, counts.empty() ? "" : "; ", b.never);
  return o;
}

}  // namespace

std::string recipe_plots(const RunData& run, std::size_t ri, const PlotData& p, const ReportOptions& opt) {
  const RecipeResult& r = run.recipes[ri];
  const std::string sid = slug(r.name);
  std::string o = "<div class=\"plots\">\n";
  o += histogram_and_cdf(r, ri, kAbsLogRatio, p, opt);
  o += histogram_and_cdf(r, ri, kRatio, p, opt);
  // KL per position
  const PositionCurve& kc = p.kl_curves[ri];
  Series ks{r.name, ri, kc.position, kc.mean, true};
  o += line_plot(kl_opts("kl-position-" + sid, "Mean KL per response position: " + r.name, p, kc.bucket),
                 {ks});
  // Per-layer bars: the three standard comparisons first, then any other /layers array.
  std::vector<BarSeries> bars;
  std::vector<std::string> order = {"rel_l2_gen_train", "rel_l2_gen_oracle", "rel_l2_train_oracle"};
  for (const auto& [k, v] : r.layers)
    if (std::find(order.begin(), order.end(), k) == order.end()) order.push_back(k);
  std::size_t color = 0;
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
  }
  o += layer_bars("layers-" + sid, "Per-layer hidden-state divergence: " + r.name,
                  "relative L2 ||a - b|| / ||b||", bars);
  o += birth_heatmap(run, r, sid, opt);
  o += "</div>\n";
  return o;
}

std::string comparison_plots(const RunData& run, const PlotData& p, const ReportOptions& opt) {
  std::string o = R"(<section id="compare"><h2>Recipes side by side</h2><div class="plots">)";
  o += "\n";
  o += compared_quantity(run, kAbsLogRatio, p, opt, "exact zeros are not shown on the log axis");
  o += compared_quantity(run, kRatio, p, opt, nullptr);
  std::vector<Series> ks;
  std::size_t bucket = 1;
  for (std::size_t i = 0; i < run.recipes.size(); ++i) {
    ks.push_back({run.recipes[i].name, i, p.kl_curves[i].position, p.kl_curves[i].mean, true});
    bucket = std::max(bucket, p.kl_curves[i].bucket);
  }
  o += line_plot(kl_opts("compare-kl-position", "Mean KL per response position, all recipes", p, bucket), ks);
  std::vector<BarSeries> bars;
  for (std::size_t i = 0; i < run.recipes.size(); ++i)
    if (auto it = run.recipes[i].layers.find("rel_l2_gen_train"); it != run.recipes[i].layers.end())
      bars.push_back({run.recipes[i].name, i, it->second});
  o += layer_bars("compare-layers", "Per-layer divergence gen vs train, all recipes",
                  "relative L2, gen vs train", bars);
  o += "</div></section>\n";
  return o;
}

}  // namespace rlp::report
