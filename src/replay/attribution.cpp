#include "rlparity/replay/attribution.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "rlparity/util/error.hpp"

namespace rlp {
namespace {

constexpr const char* kAbs = "mean_abs_log_ratio";
constexpr const char* kKl = "mean_kl_gen_train";

struct Divergence {
  double abs_log_ratio = 0.0;
  double kl = 0.0;
  double router_flip_frac = 0.0;  // NaN on a dense model
};

double summary_value(const RecipeResult& r, const char* name) {
  const auto it = r.summary.find(name);
  return it == r.summary.end() ? std::numeric_limits<double>::quiet_NaN() : it->second;
}

// Measures the divergence of one recipe variant by a replay over the run's tokens (no oracle).
class DivergenceMeter {
 public:
  DivergenceMeter(const Checkpoint& ckpt, const std::vector<InputSequence>& inputs, const ReplayOptions& base,
                  const AttributionLog& log)
      : ckpt_(ckpt), inputs_(inputs), base_(base), log_(log) {}

  // The recipe's divergence with its options, KV scales and routing replay as given here.
  Divergence measure(const std::string& recipe, const RecipeOptions& ro, const std::string& stale_dir,
                     const std::string& what, RoutingReplayMode routing = RoutingReplayMode::off) {
    ReplayOptions opt = base_;
    opt.recipes = {recipe};
    opt.recipe = ro;
    opt.oracle = false;
    opt.kv_scales_stale_dir = stale_dir;
    opt.routing_replay = routing;
    std::vector<InputSequence> in = inputs_;
    const RunData run = run_replay(ckpt_, in, make_replay_plan(ckpt_.spec(), opt));
    const RecipeResult& r = run.recipes.at(0);
    const Divergence d{summary_value(r, kAbs), summary_value(r, kKl), summary_value(r, "router_flip_frac")};
    if (log_)
      log_(fmt::format("attribution: {}: mean |log ratio| {:.6g}, mean KL {:.6g}", what, d.abs_log_ratio,
                       d.kl));
    return d;
  }

 private:
  const Checkpoint& ckpt_;
  const std::vector<InputSequence>& inputs_;
  const ReplayOptions& base_;
  const AttributionLog& log_;
};

// Row indices sorted by rank (1 first).
std::vector<std::size_t> rank_order(const std::vector<double>& rank) {
  std::vector<std::size_t> order(rank.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return rank[a] < rank[b]; });
  return order;
}

nlohmann::json to_json(const Divergence& d) { return {{kAbs, d.abs_log_ratio}, {kKl, d.kl}}; }

// Ranks (1 = largest) by value descending, ties by index; NaN ranks last.
std::vector<double> ranks_desc(const std::vector<double>& v) {
  std::vector<std::size_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
    if (std::isnan(v[a]) != std::isnan(v[b])) return !std::isnan(v[a]);
    return v[a] > v[b];
  });
  std::vector<double> rank(v.size());
  for (std::size_t i = 0; i < idx.size(); ++i) rank[idx[i]] = static_cast<double>(i + 1);
  return rank;
}

void attribute_layers(DivergenceMeter& meter, const ReplayPlan& plan, RunData& run) {
  const ReplayOptions& base = plan.options;
  const std::string& recipe = plan.attribution.recipe.name;
  const int max_edge = plan.attribution.max_edge;
  const int L = plan.spec.layers;
  // Generation: fp8 linears in layer l only, bf16 KV cache; training: bf16.
  auto only_layer = [&](int first, int last) {
    RecipeOptions o = base.recipe;
    o.bf16_first_layers = first;
    o.bf16_last_layers = last;
    o.gen_knobs.emplace_back("kv-cache", "bf16");
    o.train_knobs.emplace_back("linear", "act");
    return o;
  };
  const Divergence none = meter.measure(recipe, only_layer(L, 0), "", "layers: no fp8 layer (baseline)");
  AttributionTable t;
  auto& layer = t.values["layer"];
  auto& abs = t.values[kAbs];
  auto& kl = t.values[kKl];
  auto& xabs = t.values["excess_mean_abs_log_ratio"];
  auto& xkl = t.values["excess_mean_kl_gen_train"];
  for (int l = 0; l < L; ++l) {
    const Divergence d =
        meter.measure(recipe, only_layer(l, L - 1 - l), "", fmt::format("layers: only layer {} fp8", l));
    layer.push_back(l);
    abs.push_back(d.abs_log_ratio);
    kl.push_back(d.kl);
    xabs.push_back(d.abs_log_ratio - none.abs_log_ratio);
    xkl.push_back(d.kl - none.kl);
  }
  t.values["rank"] = ranks_desc(abs);
  std::vector<int> ranking(static_cast<std::size_t>(L));
  for (int l = 0; l < L; ++l)
    ranking[static_cast<std::size_t>(t.values["rank"][static_cast<std::size_t>(l)]) - 1] = l;
  t.info = {{"recipe", recipe},
            {"method", "generation path fp8 in one decoder layer only (bf16 KV cache), training path bf16"},
            {"baseline_no_fp8_layer", to_json(none)},
            {"ranking", ranking}};
  run.attribution["layers"] = std::move(t);

  // Candidates: the full recipe with F first and K last layers kept in bf16.
  AttributionTable c;
  auto& cf = c.values["bf16_first_layers"];
  auto& ck = c.values["bf16_last_layers"];
  auto& cn = c.values["bf16_layers"];
  auto& cabs = c.values[kAbs];
  auto& ckl = c.values[kKl];
  Divergence full{};
  for (int F = 0; F <= max_edge; ++F)
    for (int K = 0; K <= max_edge; ++K) {
      if (F + K >= L && !(F == 0 && K == 0)) continue;  // at least one fp8 layer left
      RecipeOptions o = base.recipe;
      o.bf16_first_layers = F;
      o.bf16_last_layers = K;
      const Divergence d = meter.measure(
          recipe, o, base.kv_scales_stale_dir,
          fmt::format("layers: {} with --bf16-first-layers {} --bf16-last-layers {}", recipe, F, K));
      if (F == 0 && K == 0) full = d;
      cf.push_back(F);
      ck.push_back(K);
      cn.push_back(F + K);
      cabs.push_back(d.abs_log_ratio);
      ckl.push_back(d.kl);
    }
  auto& per_layer = c.values["removed_per_bf16_layer"];
  auto& rec = c.values["recommended"];
  std::size_t best = 0;  // index of (0, 0)
  double best_gain = 0.0;
  for (std::size_t i = 0; i < cabs.size(); ++i) {
    const double gain = cn[i] > 0 ? (full.abs_log_ratio - cabs[i]) / cn[i] : 0.0;
    per_layer.push_back(gain);
    // Most divergence removed per bf16 layer; ties keep the earlier (fewer layers first in F, K order
    // only when the gain is strictly larger, so equal gains keep the smaller F, then smaller K).
    if (gain > best_gain || (gain == best_gain && gain > 0.0 && cn[i] < cn[best])) {
      best_gain = gain;
      best = i;
    }
  }
  rec.assign(cabs.size(), 0.0);
  rec[best] = 1.0;
  const int F = static_cast<int>(cf[best]), K = static_cast<int>(ck[best]);
  c.info = {
      {"recipe", recipe},
      {"criterion",
       "largest (mean_abs_log_ratio(0,0) - mean_abs_log_ratio(F,K)) / (F+K); (0,0) when none is positive"},
      {"full_recipe", to_json(full)},
      {"recommended",
       {{"bf16_first_layers", F},
        {"bf16_last_layers", K},
        {kAbs, cabs[best]},
        {kKl, ckl[best]},
        {"flags", fmt::format("--bf16-first-layers {} --bf16-last-layers {}", F, K)}}}};
  run.attribution["layer_candidates"] = std::move(c);
}

void attribute_knobs(DivergenceMeter& meter, const ReplayPlan& plan, RunData& run) {
  const ReplayOptions& base = plan.options;
  const Recipe& rc = plan.attribution.recipe;
  const std::string& recipe = rc.name;
  RecipeOptions aligned = base.recipe;
  std::vector<std::pair<std::string, std::string>> differing;  // (knob, generation value)
  for (const auto& k : knob_table()) {
    const std::string tv = get_knob(rc.train, k.name), gv = get_knob(rc.gen, k.name);
    aligned.gen_knobs.emplace_back(k.name, tv);
    aligned.train_knobs.emplace_back(k.name, tv);
    // No row for a knob that changes nothing on either path (tp-reduce and logsoftmax when both run
    // tp 1, batch-pad when neither batch is padded, ...).
    const bool inert = knob_inert(rc.gen, k.name) && knob_inert(rc.train, k.name);
    if (gv != tv && !inert) differing.emplace_back(k.name, gv);
  }
  const Divergence zero = meter.measure(recipe, aligned, base.kv_scales_stale_dir, "knobs: all aligned");
  const Divergence all =
      meter.measure(recipe, base.recipe, base.kv_scales_stale_dir, "knobs: " + recipe + " as is");
  AttributionTable t;
  auto& names = t.labels["knob"];
  auto& gvals = t.labels["gen_value"];
  auto& tvals = t.labels["train_value"];
  auto& abs = t.values[kAbs];
  auto& kl = t.values[kKl];
  for (const auto& [knob, gv] : differing) {
    RecipeOptions o = aligned;
    o.gen_knobs.emplace_back(knob, gv);
    const Divergence d =
        meter.measure(recipe, o, base.kv_scales_stale_dir, "knobs: only " + knob + " = " + gv);
    names.push_back(knob);
    gvals.push_back(gv);
    tvals.push_back(get_knob(rc.train, knob));
    abs.push_back(d.abs_log_ratio);
    kl.push_back(d.kl);
  }
  t.values["rank"] = ranks_desc(abs);
  t.info = {{"recipe", recipe},
            {"method", "both paths = the recipe's training path; one knob set to its generation value"},
            {"aligned", to_json(zero)},
            {"all_knobs", to_json(all)}};
  run.attribution["knobs"] = std::move(t);
}

void attribute_kv_scales(DivergenceMeter& meter, const ReplayPlan& plan, RunData& run) {
  const ReplayOptions& base = plan.options;
  AttributionTable t;
  for (const auto& n : plan.attribution.kv_recipes) {
    const Divergence fresh = meter.measure(n, base.recipe, "", "kv scales: " + n + " recalibrated");
    const Divergence stale =
        meter.measure(n, base.recipe, base.kv_scales_stale_dir, "kv scales: " + n + " stale");
    t.labels["recipe"].push_back(n);
    t.values["mean_abs_log_ratio_recalibrated"].push_back(fresh.abs_log_ratio);
    t.values["mean_abs_log_ratio_stale"].push_back(stale.abs_log_ratio);
    t.values["mean_abs_log_ratio_added"].push_back(stale.abs_log_ratio - fresh.abs_log_ratio);
    t.values["mean_kl_gen_train_recalibrated"].push_back(fresh.kl);
    t.values["mean_kl_gen_train_stale"].push_back(stale.kl);
    t.values["mean_kl_gen_train_added"].push_back(stale.kl - fresh.kl);
  }
  t.info = {{"stale_dir", base.kv_scales_stale_dir},
            {"method", base.kv_scale_method == KvScaleMethod::nemo ? "nemo" : "vllm"}};
  run.attribution["kv_scales"] = std::move(t);
}

// Every recipe of the run replayed with routing replay off, ids and ids+weights: what replaying the
// generation path's routing into the training path removes.
void attribute_routing(DivergenceMeter& meter, const ReplayPlan& plan, RunData& run) {
  const ReplayOptions& base = plan.options;
  AttributionTable t;
  for (const auto& rc : plan.recipes) {
    double off_abs = 0.0, off_kl = 0.0;
    for (auto mode : {RoutingReplayMode::off, RoutingReplayMode::ids, RoutingReplayMode::ids_weights}) {
      const std::string name = routing_replay_name(mode);
      const Divergence d = meter.measure(rc.name, base.recipe, base.kv_scales_stale_dir,
                                         "routing: " + rc.name + " with routing replay " + name, mode);
      if (mode == RoutingReplayMode::off) {
        off_abs = d.abs_log_ratio;
        off_kl = d.kl;
      }
      t.labels["recipe"].push_back(rc.name);
      t.labels["routing_replay"].push_back(name);
      t.values[kAbs].push_back(d.abs_log_ratio);
      t.values[kKl].push_back(d.kl);
      t.values["router_flip_frac"].push_back(d.router_flip_frac);
      // Fractions of the recipe's divergence without replay that this replay removes (NaN when
      // there is none to remove).
      t.values["removed_abs_log_ratio_frac"].push_back(off_abs > 0 ? 1.0 - d.abs_log_ratio / off_abs
                                                                   : std::nan(""));
      t.values["removed_kl_frac"].push_back(off_kl > 0 ? 1.0 - d.kl / off_kl : std::nan(""));
    }
  }
  t.info = {{"method",
             "each recipe replayed without the oracle: routing replay off, ids (the training path takes "
             "the generation path's expert ids at every position and weighs them with its own router's "
             "probabilities), ids+weights (its ids and routing weights)"}};
  run.attribution["routing"] = std::move(t);
}

}  // namespace

void run_attribution(const Checkpoint& ckpt, const std::vector<InputSequence>& inputs, const ReplayPlan& plan,
                     RunData& run, const AttributionLog& log) {
  for (const auto& in : inputs)
    if (!in.has_response)
      RLP_THROW_INPUT("attribution: input '{}' has no response (run replay first)", in.id);
  DivergenceMeter meter(ckpt, inputs, plan.options, log);
  if (plan.attribution.layers) attribute_layers(meter, plan, run);
  if (plan.attribution.knobs) attribute_knobs(meter, plan, run);
  if (plan.attribution.kv_scales) attribute_kv_scales(meter, plan, run);
  if (plan.attribution.routing) attribute_routing(meter, plan, run);
}

void run_attribution(const Checkpoint& ckpt, const std::vector<InputSequence>& inputs,
                     const ReplayOptions& replay, const AttributionOptions& options, RunData& run,
                     const AttributionLog& log) {
  run_attribution(ckpt, inputs, make_replay_plan(ckpt.spec(), replay, options), run, log);
}

std::string format_attribution(const RunData& run) {
  std::string s;
  auto num = [](double v) { return fmt::format("{:.4e}", v); };
  if (const auto it = run.attribution.find("layers"); it != run.attribution.end()) {
    const auto& t = it->second;
    s += fmt::format("\nlayer attribution ({}: generation fp8 in one layer only, training bf16)\n",
                     t.info.value("recipe", std::string("?")));
    s += fmt::format("{:>5} {:>6} {:>14} {:>14} {:>16}\n", "rank", "layer", "mean|logratio|", "mean KL",
                     "excess |lr|");
    const auto& rank = t.values.at("rank");
    for (std::size_t i : rank_order(rank))
      s += fmt::format("{:>5} {:>6} {:>14} {:>14} {:>16}\n", rank[i], t.values.at("layer")[i],
                       num(t.values.at(kAbs)[i]), num(t.values.at(kKl)[i]),
                       num(t.values.at("excess_mean_abs_log_ratio")[i]));
    if (t.info.contains("baseline_no_fp8_layer"))
      s += fmt::format("  no fp8 layer (baseline): mean|logratio| {}, mean KL {}\n",
                       num(t.info["baseline_no_fp8_layer"][kAbs].get<double>()),
                       num(t.info["baseline_no_fp8_layer"][kKl].get<double>()));
  }
  if (const auto it = run.attribution.find("layer_candidates"); it != run.attribution.end()) {
    const auto& t = it->second;
    s += fmt::format("\nbf16 layers, measured with the full {} recipe\n",
                     t.info.value("recipe", std::string("?")));
    s += fmt::format("{:>7} {:>6} {:>14} {:>14} {:>16}\n", "first F", "last K", "mean|logratio|", "mean KL",
                     "removed/layer");
    for (std::size_t i = 0; i < t.values.at(kAbs).size(); ++i)
      s += fmt::format("{:>7} {:>6} {:>14} {:>14} {:>16}{}\n", t.values.at("bf16_first_layers")[i],
                       t.values.at("bf16_last_layers")[i], num(t.values.at(kAbs)[i]),
                       num(t.values.at(kKl)[i]), num(t.values.at("removed_per_bf16_layer")[i]),
                       t.values.at("recommended")[i] != 0.0 ? "  <- recommended" : "");
    if (t.info.contains("recommended")) {
      const auto& r = t.info["recommended"];
      s += fmt::format("recommendation: {} (measured: mean|logratio| {}, mean KL {}; full recipe {})\n",
                       r.value("flags", std::string()), num(r[kAbs].get<double>()), num(r[kKl].get<double>()),
                       num(t.info["full_recipe"][kAbs].get<double>()));
    }
  }
  if (const auto it = run.attribution.find("knobs"); it != run.attribution.end()) {
    const auto& t = it->second;
    s += fmt::format("\nknob attribution ({}: all knobs aligned, one set to its generation value)\n",
                     t.info.value("recipe", std::string("?")));
    s += fmt::format("{:>5} {:<15} {:<26} {:>14} {:>14}\n", "rank", "knob", "gen <- train value",
                     "mean|logratio|", "mean KL");
    const auto& rank = t.values.at("rank");
    for (std::size_t i : rank_order(rank))
      s += fmt::format("{:>5} {:<15} {:<26} {:>14} {:>14}\n", rank[i], t.labels.at("knob")[i],
                       t.labels.at("gen_value")[i] + " <- " + t.labels.at("train_value")[i],
                       num(t.values.at(kAbs)[i]), num(t.values.at(kKl)[i]));
    if (t.info.contains("all_knobs"))
      s += fmt::format("  all aligned: mean|logratio| {}; all knobs as the recipe sets them: {}\n",
                       num(t.info["aligned"][kAbs].get<double>()),
                       num(t.info["all_knobs"][kAbs].get<double>()));
  }
  if (const auto it = run.attribution.find("kv_scales"); it != run.attribution.end()) {
    const auto& t = it->second;
    s += fmt::format("\nKV-cache scales: recalibrated vs stale ({})\n",
                     t.info.value("stale_dir", std::string("?")));
    s += fmt::format("{:<12} {:>14} {:>14} {:>14} {:>14}\n", "recipe", "|lr| recal.", "|lr| stale",
                     "|lr| added", "KL added");
    for (std::size_t i = 0; i < t.labels.at("recipe").size(); ++i)
      s += fmt::format("{:<12} {:>14} {:>14} {:>14} {:>14}\n", t.labels.at("recipe")[i],
                       num(t.values.at("mean_abs_log_ratio_recalibrated")[i]),
                       num(t.values.at("mean_abs_log_ratio_stale")[i]),
                       num(t.values.at("mean_abs_log_ratio_added")[i]),
                       num(t.values.at("mean_kl_gen_train_added")[i]));
  }
  if (const auto it = run.attribution.find("routing"); it != run.attribution.end()) {
    const auto& t = it->second;
    s += "\nrouting replay: the training path takes the generation path's routing\n";
    s += fmt::format("{:<12} {:<12} {:>12} {:>14} {:>10} {:>14} {:>10}\n", "recipe", "replay", "router flips",
                     "mean|logratio|", "removed", "mean KL", "removed");
    auto pct = [](double v) { return std::isnan(v) ? std::string("-") : fmt::format("{:.1f}%", 100.0 * v); };
    for (std::size_t i = 0; i < t.labels.at("recipe").size(); ++i)
      s += fmt::format("{:<12} {:<12} {:>12} {:>14} {:>10} {:>14} {:>10}\n", t.labels.at("recipe")[i],
                       t.labels.at("routing_replay")[i], pct(t.values.at("router_flip_frac")[i]),
                       num(t.values.at(kAbs)[i]), pct(t.values.at("removed_abs_log_ratio_frac")[i]),
                       num(t.values.at(kKl)[i]), pct(t.values.at("removed_kl_frac")[i]));
  }
  return s;
}

}  // namespace rlp
