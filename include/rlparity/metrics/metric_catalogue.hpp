// The one catalogue of summary statistics (the attributes of /recipes/<r>): per statistic its stored
// name, one-line definition, which way is worse, display format, whether it is a headline, and the
// names NeMo RL / verl / slime / prime-rl log for the same quantity. compute_recipe_statistics writes these
// names (a unit test holds the two equal), the summary table, the gate (accepted threshold keys,
// direction of a regression), the report headline and the table in docs/metrics.md read them.
#pragma once
#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace rlp {

// Which way a statistic gets worse: the gate's baseline comparison and the report's delta colours.
enum class MetricDirection {
  lower_is_better,   // most statistics: |dlogp|, KL, k3, chi2, token_mult_prob_error, ...
  higher_is_better,  // ess, rollout_is_eff_sample_size, top1_agree_frac
  closer_to_zero,    // signed estimators: k1, rollout_corr_kl (compared by |x|)
  closer_to_one,     // ratio_* (compared by |x - 1|)
};
const char* metric_direction_name(MetricDirection d);  // "lower is better", "closer to 1 is better", ...

// How the replay/summary table prints a value: "{:.0f}", "{:.3e}", "{:.4f}".
enum class MetricFormat { count, scientific, fixed4 };

// The eight order and moment statistics compute_recipe_statistics stores for a per-token array
// (Distribution).
enum class DistributionStat { mean, std, min, max, p50, p90, p99, p999 };
inline constexpr std::array<DistributionStat, 8> kDistributionStats = {
    DistributionStat::mean, DistributionStat::std, DistributionStat::min, DistributionStat::max,
    DistributionStat::p50,  DistributionStat::p90, DistributionStat::p99, DistributionStat::p999};
const char* distribution_stat_name(DistributionStat s);  // "mean", "std", ..., "p999"

// A per-token array whose distribution is stored. Stored names are "<stat>_<token_metric>"
// (mean_abs_log_ratio), except for the ratio, stored before the redesign as "ratio_<stat>"
// (ratio_mean): that stored name stays, and the gate also accepts "<stat>_ratio" as an alias.
struct DistributionFamily {
  const char* token_metric;  // the per-token array (/recipes/<r>/tokens/<name>)
  const char* of;            // what it is, for the definitions ("|d|", "r")
  bool stat_last;  // stored name "<token_metric>_<stat>" (the ratio) instead of "<stat>_<token_metric>"
};
namespace distribution {
inline constexpr DistributionFamily abs_log_ratio{"abs_log_ratio", "|d|", false};
inline constexpr DistributionFamily kl_gen_train{"kl_gen_train", "exact KL(p_g || p_t)", false};
inline constexpr DistributionFamily kl_train_gen{"kl_train_gen", "KL(p_t || p_g)", false};
inline constexpr DistributionFamily ratio{"ratio", "r", true};
}  // namespace distribution
std::string distribution_statistic_name(const DistributionFamily& f, DistributionStat s);  // stored name

// The names another engine logs for the same quantity (with its own prefix, e.g. verl's
// "rollout_corr/"); empty where none was confirmed in that engine's source. The source file of
// each is cited in metric_catalogue.cpp and docs/metrics.md.
struct EngineNames {
  std::string nemo_rl, verl, slime, prime_rl;
};

struct MetricInfo {
  std::string name;        // the stored attribute name, exactly as in run files and gate files
  std::string alias;       // a second name the gate accepts (same statistic), or empty
  std::string definition;  // one line, in the notation of docs/metrics.md
  MetricDirection direction = MetricDirection::lower_is_better;
  MetricFormat format = MetricFormat::scientific;
  int headline = 0;   // 1-based rank among the headline statistics; 0: not a headline
  std::string label;  // short column header in the summary table (empty: the name)
  std::string needs;  // the optional token metric it needs (empty: always present)
  EngineNames engines;
};

// Every summary statistic compute_recipe_statistics can write, in documentation order.
const std::vector<MetricInfo>& metric_catalogue();
// By stored name or alias; nullptr for an unknown name. A name with an engine pair's prefix
// (engine_gen_, engine_train_, engine_oracle_; engine_side.hpp) finds the statistic it prefixes.
const MetricInfo* find_metric(std::string_view name);
// The stored name of `name` (an alias resolved, an engine prefix kept); empty for an unknown name.
std::string stored_metric_name(std::string_view name);
// Stored names of every statistic, sorted (what a gate file may name, aliases aside).
const std::vector<std::string>& metric_names();
// The headline statistics in rank order: the summary table's columns (after the token count), the
// statistics the gate compares against a baseline by default, the first rows of the report.
const std::vector<std::string>& headline_metric_names();
// The catalogue's direction; lower_is_better for a name it does not know.
MetricDirection metric_direction(std::string_view name);
// The catalogue as the Markdown table of docs/metrics.md (between its "metric-catalogue" markers).
std::string metric_catalogue_markdown();

}  // namespace rlp
