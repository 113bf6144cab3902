// Attribution and inspect sections of the report, as data (see sections.hpp).
#include "report/sections.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "rlparity/metrics/engine_side.hpp"
#include "rlparity/metrics/metric_catalogue.hpp"

namespace rlp::report {

namespace {

constexpr const char* kAbs = "mean_abs_log_ratio";
constexpr const char* kKl = "mean_kl_gen_train";

struct Column {
  std::string key, header;
};

// Row order: `key` descending (ascending when !desc), NaN last, ties by row index.
std::vector<std::size_t> order_by(const std::vector<double>& key, bool desc) {
  std::vector<std::size_t> idx(key.size());
  std::iota(idx.begin(), idx.end(), std::size_t{0});
  std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
    const double x = key[a], y = key[b];
    if (std::isnan(x) != std::isnan(y)) return std::isnan(y);
    return desc ? x > y : x < y;
  });
  return idx;
}

// Adds the columns of `t` named in `cols` (those present) to `s`, rows in `order`.
void fill_table(TableSection& s, const AttributionTable& t, const std::vector<Column>& cols,
                const std::vector<std::size_t>& order) {
  std::vector<const Column*> present;
  for (const auto& c : cols)
    if (t.values.count(c.key) || t.labels.count(c.key)) present.push_back(&c);
  for (const Column* c : present) {
    s.keys.push_back(c->key);
    s.headers.push_back(c->header);
  }
  for (std::size_t i : order) {
    std::vector<TableCell> row;
    for (const Column* c : present) {
      if (auto v = t.values.find(c->key); v != t.values.end())
        row.push_back(num_cell(i < v->second.size() ? v->second[i] : std::nan("")));
      else {
        const auto& l = t.labels.at(c->key);
        row.push_back(text_cell(i < l.size() ? l[i] : std::string()));
      }
    }
    s.rows.push_back(std::move(row));
  }
}

std::size_t column_index(const TableSection& s, const std::string& key) {
  const auto it = std::find(s.keys.begin(), s.keys.end(), key);
  return static_cast<std::size_t>(it - s.keys.begin());
}

// A bar chart of the given columns of `s` (one series each), categories = `label` of each row.
void add_chart(TableSection& s, const std::string& title, const std::string& ylabel,
               const std::vector<std::string>& cats,
               const std::vector<std::pair<std::string, std::string>>& series, std::size_t max_rows = 0) {
  TableSection::Chart c;
  c.plot.id = s.id + (s.charts.empty() ? "" : "-" + std::to_string(s.charts.size() + 1));
  c.plot.title = title;
  c.plot.x = Axis{"", "", false, {}, {}};
  c.plot.y = Axis{ylabel, "", false, {}, {}};
  const std::size_t n = max_rows == 0 ? cats.size() : std::min(max_rows, cats.size());
  c.categories.assign(cats.begin(), cats.begin() + static_cast<std::ptrdiff_t>(n));
  std::size_t color = 0;
  for (const auto& [key, label] : series) {
    const std::size_t k = column_index(s, key);
    if (k >= s.keys.size()) continue;
    BarSeries b{label, color++, {}};
    for (std::size_t r = 0; r < n; ++r) b.values.push_back(s.rows[r][k].value);
    c.bars.push_back(std::move(b));
  }
  if (c.bars.empty()) return;
  c.plot.width = bar_chart_width(n * c.bars.size());
  if (n < cats.size()) c.plot.note = fmt::format("the first {} of {} rows of the table", n, cats.size());
  s.charts.push_back(std::move(c));
}

std::string fmt_num(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return "-";
  return format_sig(j[key].get<double>(), 4);
}

std::string info_text(const nlohmann::json& info, const char* key) {
  return info.is_object() && info.contains(key) && info[key].is_string() ? info[key].get<std::string>()
                                                                         : std::string("?");
}

}  // namespace

TableCell num_cell(double v) { return TableCell{std::string(), v, true}; }
TableCell text_cell(std::string s) {
  return TableCell{std::move(s), std::numeric_limits<double>::quiet_NaN(), false};
}

int bar_chart_width(std::size_t n_bars) {
  return std::max(640, std::min(1300, static_cast<int>(std::min<std::size_t>(n_bars, 1000)) * 14 + 120));
}

namespace {

// One attribution kind as a section: its columns in display order, the column it is sorted by
// (largest first) and drawn, the chart's categories and series, and the note built from `info`.
struct AttributionSpec {
  const char* kind;
  const char* id;
  const char* title;
  std::vector<Column> columns;
  std::string sort_key;
  std::string chart_title;
  std::function<std::string(const TableSection&, std::size_t row)> category;
  std::vector<std::pair<std::string, std::string>> series;  // column, legend label
  std::function<std::string(const nlohmann::json& info)> note;
  bool table_order = false;  // rows as the table stores them (not sorted by sort_key)
};

std::string cell_text(const TableSection& s, std::size_t row, const std::string& key) {
  const std::size_t k = column_index(s, key);
  if (k >= s.rows[row].size()) return "?";
  const TableCell& c = s.rows[row][k];
  return c.numeric ? format_sig(c.value, 6) : c.text;
}

const std::vector<AttributionSpec>& attribution_specs() {
  static const std::vector<AttributionSpec> specs = {
      {"layers",
       "attribution-layers",
       "Layer attribution",
       {{"rank", "rank"},
        {"layer", "layer (fp8 alone)"},
        {kAbs, "mean |log ratio|"},
        {kKl, "mean KL(gen || train)"},
        {"excess_mean_abs_log_ratio", "excess mean |log ratio|"},
        {"excess_mean_kl_gen_train", "excess mean KL"}},
       kAbs,
       "Divergence with only this layer fp8 (generation side), largest first",
       [](const TableSection& s, std::size_t r) { return "layer " + cell_text(s, r, "layer"); },
       {{kAbs, "mean |log ratio|"}, {"excess_mean_abs_log_ratio", "excess over no fp8 layer"}},
       [](const nlohmann::json& info) {
         const nlohmann::json base = info.value("baseline_no_fp8_layer", nlohmann::json());
         return fmt::format(
             "Recipe {}: {}. Rows are the layers, largest mean |log ratio| first; excess = minus the "
             "baseline with no "
             "fp8 layer (mean |log ratio| {}, mean KL {}), what the other kernel differences cost alone.",
             info_text(info, "recipe"), info_text(info, "method"), fmt_num(base, kAbs), fmt_num(base, kKl));
       }},
      {"layer_candidates",
       "attribution-layer-candidates",
       "bf16 first/last layers: the recommendation, measured",
       {{"bf16_first_layers", "--bf16-first-layers"},
        {"bf16_last_layers", "--bf16-last-layers"},
        {"bf16_layers", "bf16 layers"},
        {kAbs, "mean |log ratio|"},
        {kKl, "mean KL(gen || train)"},
        {"removed_per_bf16_layer", "removed per bf16 layer"},
        {"recommended", "recommended (1)"}},
       kAbs,
       "Divergence left by each bf16 first/last choice (full recipe), largest first",
       [](const TableSection& s, std::size_t r) {
         return fmt::format("F={} K={}", cell_text(s, r, "bf16_first_layers"),
                            cell_text(s, r, "bf16_last_layers"));
       },
       {{kAbs, "mean |log ratio|"}},
       [](const nlohmann::json& info) {
         const nlohmann::json rec = info.value("recommended", nlohmann::json());
         const nlohmann::json full = info.value("full_recipe", nlohmann::json());
         if (!rec.is_object()) return std::string("No recommendation recorded.");
         return fmt::format(
             "Recommended: {} ({} bf16 layer(s)): it leaves mean |log ratio| {} and mean KL {}, against {} "
             "and {} with "
             "every layer fp8 (the full {} recipe). Criterion: {}.",
             rec.value("flags", std::string("?")),
             rec.value("bf16_first_layers", 0) + rec.value("bf16_last_layers", 0), fmt_num(rec, kAbs),
             fmt_num(rec, kKl), fmt_num(full, kAbs), fmt_num(full, kKl), info_text(info, "recipe"),
             info_text(info, "criterion"));
       }},
      {"knobs",
       "attribution-knobs",
       "Knob attribution",
       {{"rank", "rank"},
        {"knob", "knob"},
        {"gen_value", "generation value"},
        {"train_value", "training value"},
        {kAbs, "mean |log ratio|"},
        {kKl, "mean KL(gen || train)"}},
       kAbs,
       "Divergence with only this knob different between the paths, largest first",
       [](const TableSection& s, std::size_t r) { return cell_text(s, r, "knob"); },
       {{kAbs, "mean |log ratio|"}},
       [](const nlohmann::json& info) {
         return fmt::format(
             "Recipe {}: {}. Aligned (no knob different): mean |log ratio| {}; every knob at its generation "
             "value (the "
             "recipe): {}. Knobs interact, so the single-knob numbers need not add up.",
             info_text(info, "recipe"), info_text(info, "method"),
             fmt_num(info.value("aligned", nlohmann::json()), kAbs),
             fmt_num(info.value("all_knobs", nlohmann::json()), kAbs));
       }},
      {"kv_scales",
       "attribution-kv-scales",
       "Stale KV-cache scales",
       {{"recipe", "recipe"},
        {"mean_abs_log_ratio_recalibrated", "mean |log ratio| recalibrated"},
        {"mean_abs_log_ratio_stale", "mean |log ratio| stale"},
        {"mean_abs_log_ratio_added", "mean |log ratio| added"},
        {"mean_kl_gen_train_recalibrated", "mean KL recalibrated"},
        {"mean_kl_gen_train_stale", "mean KL stale"},
        {"mean_kl_gen_train_added", "mean KL added"}},
       "mean_abs_log_ratio_added",
       "Divergence added by stale KV scales, largest first",
       [](const TableSection& s, std::size_t r) { return cell_text(s, r, "recipe"); },
       {{"mean_abs_log_ratio_added", "added"},
        {"mean_abs_log_ratio_recalibrated", "recalibrated"},
        {"mean_abs_log_ratio_stale", "stale"}},
       [](const nlohmann::json& info) {
         return fmt::format(
             "fp8 KV-cache scales calibrated on {} (stale) against scales recalibrated on the replayed "
             "checkpoint ({} "
             "method); added = stale - recalibrated, the divergence that skipping recalibration adds. "
             "Largest added "
             "first.",
             info_text(info, "stale_dir"), info_text(info, "method"));
       }},
      {"routing",
       "attribution-routing",
       "Routing replay",
       {{"recipe", "recipe"},
        {"routing_replay", "routing replay"},
        {"router_flip_frac", "router flip fraction"},
        {kAbs, "mean |log ratio|"},
        {"removed_abs_log_ratio_frac", "removed (|log ratio|)"},
        {kKl, "mean KL(gen || train)"},
        {"removed_kl_frac", "removed (KL)"}},
       kAbs,
       "Divergence with routing replay off, ids and ids+weights, largest first",
       [](const TableSection& s, std::size_t r) {
         return cell_text(s, r, "recipe") + " " + cell_text(s, r, "routing_replay");
       },
       {{kAbs, "mean |log ratio|"}},
       [](const nlohmann::json& info) {
         return fmt::format(
             "MoE checkpoint, {}. removed = 1 - divergence / divergence without replay: the part of the "
             "generation/training mismatch that replaying the generation path's routing would remove.",
             info_text(info, "method"));
       },
       /*table_order=*/true},
  };
  return specs;
}

}  // namespace

std::vector<TableSection> attribution_sections(const RunData& run) {
  std::vector<TableSection> out;
  for (const AttributionSpec& sp : attribution_specs()) {
    const auto it = run.attribution.find(sp.kind);
    if (it == run.attribution.end() || !it->second.values.count(sp.sort_key)) continue;
    const AttributionTable& t = it->second;
    TableSection s;
    s.id = sp.id;
    s.title = sp.title;
    s.notes.push_back(sp.note(t.info));
    std::vector<std::size_t> order = order_by(t.values.at(sp.sort_key), true);
    if (sp.table_order) std::sort(order.begin(), order.end());
    fill_table(s, t, sp.columns, order);
    s.bar_column = column_index(s, sp.sort_key);
    std::vector<std::string> cats;
    for (std::size_t r = 0; r < s.rows.size(); ++r) cats.push_back(sp.category(s, r));
    add_chart(s, sp.chart_title, "mean |log ratio| (nats)", cats, sp.series);
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<TableSection> routing_sections(const RunData& run) {
  std::vector<const RecipeResult*> moe;
  for (const auto& r : run.recipes)
    if (!r.routing.empty() && r.routing.layers.count("flip_frac")) moe.push_back(&r);
  if (moe.empty()) return {};
  std::vector<TableSection> out;
  const RoutingResult& first = moe.front()->routing;
  const nlohmann::json& settings = moe.front()->settings;
  const std::string replay =
      settings.is_object() && settings.contains("routing_replay") && settings["routing_replay"].is_string()
          ? settings["routing_replay"].get<std::string>()
          : std::string("off");
  {
    TableSection s;
    s.id = "routing-layers";
    s.title = "Router flips per MoE layer";
    s.notes.push_back(fmt::format(
        "Fraction of response tokens whose generation and training routers chose different expert sets in "
        "each MoE layer (flip_frac), and each path against the float64 oracle's choice; top-{} of the "
        "checkpoint's experts, routing replay {} (docs/kernel-paths.md, \"Router flips\").",
        first.k, replay));
    s.keys = {"layer"};
    s.headers = {"decoder layer"};
    std::vector<std::pair<std::string, std::string>> series;
    for (const RecipeResult* r : moe)
      for (const auto& [key, label] : {std::pair<std::string, std::string>{"flip_frac", "gen vs train"},
                                       {"gen_flip_oracle_frac", "gen vs oracle"},
                                       {"train_flip_oracle_frac", "train vs oracle"}})
        if (r->routing.layers.count(key)) {
          s.keys.push_back(r->name + "/" + key);
          s.headers.push_back(r->name + ": " + label);
          if (key == "flip_frac") series.emplace_back(s.keys.back(), r->name);
        }
    std::vector<std::string> cats;
    for (int m = 0; m < first.moe_layers; ++m) {
      const auto mi = static_cast<std::size_t>(m);
      std::vector<TableCell> row = {num_cell(first.moe_layer_index[mi])};
      for (const RecipeResult* r : moe)
        for (const char* key : {"flip_frac", "gen_flip_oracle_frac", "train_flip_oracle_frac"}) {
          const auto it = r->routing.layers.find(key);
          if (it != r->routing.layers.end())
            row.push_back(mi < it->second.size() ? num_cell(it->second[mi]) : text_cell("-"));
        }
      s.rows.push_back(std::move(row));
      cats.push_back(fmt::format("layer {}", first.moe_layer_index[mi]));
    }
    s.bar_column = s.keys.size() > 1 ? 1 : static_cast<std::size_t>(-1);
    add_chart(s, "Generation vs training router flips per MoE layer", "fraction of tokens", cats, series);
    out.push_back(std::move(s));
  }
  if (!first.margin_oracle.empty()) {
    // Histogram of the oracle margin over (token, MoE layer) pairs, flipped vs kept, per recipe.
    const std::vector<double> edges = {1e-5, 1e-4, 1e-3, 1e-2, 1e-1};
    const std::vector<std::string> bins = {"< 1e-5",       "1e-5 .. 1e-4", "1e-4 .. 1e-3",
                                           "1e-3 .. 1e-2", "1e-2 .. 0.1",  ">= 0.1"};
    TableSection s;
    s.id = "routing-margins";
    s.title = "Oracle router margin of flipped and kept choices";
    s.notes.push_back(
        "margin = p_k - p_(k+1) of the float64 oracle router's probabilities, the distance of its k-th "
        "choice "
        "from a tie, over every (response token, MoE layer); columns are the fraction of the flipped (gen "
        "and "
        "train expert sets differ) and of the kept pairs in each margin bin. Flips far from a tie mean the "
        "paths' hidden states, not rounding at a near-tie, moved the router.");
    s.keys = {"margin"};
    s.headers = {"oracle margin"};
    std::vector<std::vector<double>> cols;
    std::vector<std::pair<std::string, std::string>> series;
    for (const RecipeResult* r : moe) {
      const RoutingResult& rt = r->routing;
      if (rt.margin_oracle.empty()) continue;
      const auto k = static_cast<std::size_t>(rt.k);
      std::vector<double> flipped(bins.size(), 0.0), kept(bins.size(), 0.0);
      double nf = 0, nk = 0;
      for (std::size_t i = 0; i < rt.margin_oracle.size(); ++i) {
        const bool flip = !std::equal(rt.gen_experts.begin() + static_cast<std::ptrdiff_t>(i * k),
                                      rt.gen_experts.begin() + static_cast<std::ptrdiff_t>((i + 1) * k),
                                      rt.train_experts.begin() + static_cast<std::ptrdiff_t>(i * k));
        const std::size_t b = static_cast<std::size_t>(
            std::upper_bound(edges.begin(), edges.end(), rt.margin_oracle[i]) - edges.begin());
        (flip ? flipped : kept)[b] += 1.0;
        (flip ? nf : nk) += 1.0;
      }
      for (double& x : flipped) x = nf > 0 ? x / nf : 0.0;
      for (double& x : kept) x = nk > 0 ? x / nk : 0.0;
      s.keys.push_back(r->name + "/flipped");
      s.headers.push_back(fmt::format("{}: flipped ({:.0f})", r->name, nf));
      series.emplace_back(s.keys.back(), r->name + " flipped");
      s.keys.push_back(r->name + "/kept");
      s.headers.push_back(fmt::format("{}: kept ({:.0f})", r->name, nk));
      series.emplace_back(s.keys.back(), r->name + " kept");
      cols.push_back(std::move(flipped));
      cols.push_back(std::move(kept));
    }
    for (std::size_t b = 0; b < bins.size(); ++b) {
      std::vector<TableCell> row = {text_cell(bins[b])};
      for (const auto& c : cols) row.push_back(num_cell(c[b]));
      s.rows.push_back(std::move(row));
    }
    add_chart(s, "Oracle margin of flipped vs kept router choices", "fraction of pairs", bins, series);
    out.push_back(std::move(s));
  }
  {
    TableSection s;
    s.id = "routing-divergence";
    s.title = "Divergence of tokens with and without a router flip";
    s.notes.push_back(
        "mean |log ratio| over tokens with a generation/training router flip in any MoE layer and over the "
        "others (summary attributes mean_abs_log_ratio_flipped / _unflipped; router_flip_frac = the flipped "
        "tokens' share).");
    const std::vector<std::string> names = {"router_flip_frac", "mean_router_flip_frac",
                                            "mean_abs_log_ratio_flipped", "mean_abs_log_ratio_unflipped"};
    s.keys.push_back("recipe");
    s.headers.push_back("recipe");
    for (const auto& n : names) {
      const MetricInfo* m = find_metric(n);
      s.keys.push_back(n);
      s.headers.push_back(m && !m->label.empty() ? m->label : n);
    }
    for (const RecipeResult* r : moe) {
      std::vector<TableCell> row = {text_cell(r->name)};
      for (const auto& n : names) {
        const auto it = r->summary.find(n);
        row.push_back(it == r->summary.end() ? text_cell("-") : num_cell(it->second));
      }
      s.rows.push_back(std::move(row));
    }
    s.bar_column = column_index(s, "mean_abs_log_ratio_flipped");
    std::vector<std::string> cats;
    for (const RecipeResult* r : moe) cats.push_back(r->name);
    add_chart(s, "Mean |log ratio| of tokens with and without a router flip", "mean |log ratio| (nats)", cats,
              {{"mean_abs_log_ratio_flipped", "flipped"}, {"mean_abs_log_ratio_unflipped", "unflipped"}});
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<TableSection> sweep_sections(const SweepResult& sweep) {
  std::vector<TableSection> out;
  const std::size_t P = sweep.points(), R = sweep.recipes.size(), K = sweep.knobs.size();
  {
    TableSection s;
    s.id = "sweep-points";
    s.title = "Headline statistics per point";
    s.notes.push_back(fmt::format(
        "{} points of the grid ({}), each a replay of the same inputs; per recipe its headline statistics "
        "(docs/sweep.md, docs/metrics.md).",
        P, fmt::join(sweep.knobs, " x ")));
    s.keys.push_back("point");
    s.headers.push_back("#");
    for (const auto& k : sweep.knobs) {
      s.keys.push_back(k);
      s.headers.push_back(k);
    }
    std::vector<std::string> stats;
    for (const auto& n : headline_metric_names())
      if (sweep.summary.count(n)) stats.push_back(n);
    std::vector<std::pair<std::string, std::string>> series;
    for (const auto& r : sweep.recipes)
      for (const auto& n : stats) {
        const MetricInfo* m = find_metric(n);
        s.keys.push_back(r + "/" + n);
        s.headers.push_back(r + ": " + (m && !m->label.empty() ? m->label : n));
        if (n == "mean_abs_log_ratio") series.emplace_back(s.keys.back(), r);
      }
    std::vector<std::string> cats;
    for (std::size_t p = 0; p < P; ++p) {
      std::vector<TableCell> row = {num_cell(static_cast<double>(p))};
      for (std::size_t k = 0; k < K; ++k) row.push_back(text_cell(sweep.values[p * K + k]));
      for (std::size_t r = 0; r < R; ++r)
        for (const auto& n : stats) row.push_back(num_cell(sweep.summary.at(n)[p * R + r]));
      s.rows.push_back(std::move(row));
      cats.push_back(sweep_point_label(sweep, p));
    }
    if (!series.empty()) s.bar_column = column_index(s, series.front().first);
    add_chart(s, "Mean |log ratio| per point of the grid", "mean |log ratio| (nats)", cats, series);
    out.push_back(std::move(s));
  }
  {
    TableSection s;
    s.id = "sweep-boundaries";
    s.title = "Divergence boundaries";
    s.notes.push_back(fmt::format(
        "Positions where a point's per-position mean |log ratio| jumps (the change-point test of "
        "docs/sweep.md: "
        "window {}, z >= {}, |jump| >= {}): a kernel tile boundary shows up here as a position, not by eye. "
        "{}",
        sweep.boundary_options.window, format_sig(sweep.boundary_options.z_threshold, 3),
        format_sig(sweep.boundary_options.min_jump, 3), sweep.boundaries.empty() ? "None was found." : ""));
    s.keys = {"point", "knobs", "recipe", "position", "jump", "z"};
    s.headers = {"#", "knobs", "recipe", "position", "jump", "z"};
    for (const auto& pb : sweep.boundaries) {
      const auto p = static_cast<std::size_t>(pb.point), r = static_cast<std::size_t>(pb.recipe);
      s.rows.push_back({num_cell(static_cast<double>(p)), text_cell(sweep_point_label(sweep, p)),
                        text_cell(r < R ? sweep.recipes[r] : "?"),
                        num_cell(static_cast<double>(pb.b.position)), num_cell(pb.b.jump), num_cell(pb.b.z)});
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<TableSection> engine_sections(const RunData& run) {
  const std::vector<RecipeResult> rows = engine_comparison_rows(run.recipes);
  if (rows.empty()) return {};
  TableSection s;
  s.id = "engine-vs-emulation";
  s.title = "Engine vs emulation";
  s.notes.push_back(
      "The real engine's logprobs of the inputs (/inputs/engine_logprobs) against each recipe's generation "
      "path, training path and float64 oracle, with the engine as the sampling side: log ratio = l_side - "
      "l_engine over the tokens the engine gave a logprob (attributes engine_<side>_<statistic>). Near zero "
      "against gen: the emulated generation path tells the truth about this engine.");
  std::vector<std::string> names = {"num_tokens"};
  for (const auto& n : headline_metric_names()) names.push_back(n);
  for (const char* n : {"ppo_clip_frac", "logprob_bit_mismatch"}) names.push_back(n);
  s.keys.push_back("pair");
  s.headers.push_back("recipe vs engine");
  for (const auto& n : names) {
    const MetricInfo* m = find_metric(n);
    s.keys.push_back(n);
    s.headers.push_back(m && !m->label.empty() ? m->label : n);
  }
  for (const auto& r : rows) {
    std::vector<TableCell> row = {text_cell(r.name)};
    for (const auto& n : names) {
      const auto it = r.summary.find(n);
      row.push_back(it == r.summary.end() ? text_cell("-") : num_cell(it->second));
    }
    s.rows.push_back(std::move(row));
  }
  s.bar_column = column_index(s, "mean_abs_log_ratio");
  return {std::move(s)};
}

std::vector<TableSection> inspect_sections(const InspectResult& r, std::size_t max_chart_tensors) {
  std::vector<TableSection> out;
  {
    TableSection s;
    s.id = "inspect-tensors";
    s.title = "Per-tensor FP8 quantization (worst SNR first)";
    s.notes.push_back(fmt::format(
        "{} tensors of {} (hash {}), 128x128 blocks. SNR = 10 log10(sum x^2 / sum (x - deq)^2) per scale "
        "convention "
        "with fp32 and power-of-2 scales; the max columns are over the 8 convention x scale combinations. "
        "Definitions: docs/inspect.md.",
        r.tensors.size(), r.checkpoint_path, r.checkpoint_hash));
    const auto& convs = inspect_conventions();
    s.keys = {"name", "layer", "proj", "shape", "amax_min", "amax_median", "amax_max"};
    s.headers = {"tensor", "layer", "proj", "shape", "block amax min", "block amax median", "block amax max"};
    for (const bool pow2 : {false, true})
      for (const auto c : convs) {
        const std::string pre = std::string(convention_name(c)) + (pow2 ? "_pow2" : "_fp32");
        s.keys.push_back(pre + "_snr_db");
        s.headers.push_back(fmt::format("SNR dB {} {}", convention_name(c), pow2 ? "pow2" : "fp32"));
      }
    for (const char* k : {"worst_snr_db", "max_rel_fro_err", "max_saturated", "max_clipped", "max_flushed",
                          "max_nonfinite", "max_blocks_differ_frac"})
      s.keys.push_back(k);
    for (const char* h : {"worst SNR dB", "max rel. error", "max saturated", "max clipped", "max flushed",
                          "max nonfinite", "max blocks differ"})
      s.headers.push_back(h);
    std::vector<double> worst;
    for (const auto& t : r.tensors) worst.push_back(t.worst_snr_db());
    // Worst first; a NaN SNR is the worst news, so it leads.
    std::vector<std::size_t> order(worst.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      if (std::isnan(worst[a]) != std::isnan(worst[b])) return std::isnan(worst[a]);
      return worst[a] < worst[b];
    });
    std::vector<std::string> cats;
    for (std::size_t i : order) {
      const auto& t = r.tensors[i];
      std::vector<TableCell> row = {text_cell(t.name),    num_cell(t.layer),
                                    text_cell(t.proj),    text_cell(fmt::format("{}x{}", t.rows, t.cols)),
                                    num_cell(t.amax_min), num_cell(t.amax_median),
                                    num_cell(t.amax_max)};
      double rel = 0, sat = 0, clip = 0, flush = 0, nonfin = 0, differ = 0;
      for (const bool pow2 : {false, true})
        for (const auto c : convs) {
          const QuantStats& q = t.find(c, pow2);
          row.push_back(num_cell(q.snr_db));
          rel = std::max(rel, q.rel_fro_err);
          sat = std::max(sat, static_cast<double>(q.saturated));
          clip = std::max(clip, static_cast<double>(q.clipped));
          flush = std::max(flush, static_cast<double>(q.flushed));
          nonfin = std::max(nonfin, static_cast<double>(q.nonfinite));
          differ = std::max(differ, q.blocks_differ_frac);
        }
      for (double v : {worst[i], rel, sat, clip, flush, nonfin, differ}) row.push_back(num_cell(v));
      s.rows.push_back(std::move(row));
      cats.push_back(t.layer >= 0 ? fmt::format("L{}.{}", t.layer, t.proj) : t.name);
    }
    s.markdown_rows = 10;
    for (const bool pow2 : {false, true}) {
      std::vector<std::pair<std::string, std::string>> series;
      for (const auto c : convs)
        series.emplace_back(std::string(convention_name(c)) + (pow2 ? "_pow2" : "_fp32") + "_snr_db",
                            convention_name(c));
      add_chart(s,
                fmt::format("Quantization SNR per tensor and convention, {} scales (worst tensor first)",
                            pow2 ? "power-of-2" : "fp32"),
                "SNR (dB)", cats, series, max_chart_tensors);
    }
    out.push_back(std::move(s));
  }
  {
    TableSection s;
    s.id = "inspect-layers";
    s.title = "Layers by worst SNR, and what to keep in bf16";
    s.notes.push_back("Recommendation: " + r.recommendation);
    s.keys = {"layer", "worst_snr_db", "flagged", "max_amax_spread", "worst_tensor"};
    s.headers = {"layer", "worst SNR dB", "flagged (1)", "max amax spread (max/median)", "worst tensor"};
    std::vector<std::string> cats;
    for (const auto& l : r.layers) {
      s.rows.push_back({num_cell(l.layer), num_cell(l.worst_snr_db), num_cell(l.flagged ? 1.0 : 0.0),
                        num_cell(l.max_amax_spread), text_cell(l.worst_tensor)});
      cats.push_back("layer " + std::to_string(l.layer));
    }
    add_chart(s, "Worst SNR per layer (worst first)", "SNR (dB)", cats, {{"worst_snr_db", "worst SNR"}});
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace rlp::report
