// Gate thresholds: absolute bounds on summary statistics and relative-regression tolerances against
// a baseline run, read from TOML (docs/gate.md). Pure parsing and lookup; no I/O except
// load_thresholds_file.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace rlp::gate {

// A bound on one statistic: value must be >= min and <= max (each optional; at least one set).
struct Bound {
  std::optional<double> min, max;
};

// One table of the TOML file ([default] or [recipes.<name>]).
struct ThresholdTable {
  std::map<std::string, Bound> bounds;           // statistic -> bound
  std::map<std::string, double> max_regression;  // statistic -> relative tolerance (>= 0)
};

struct Thresholds {
  std::vector<std::string> sources;  // files/presets this was read from, in merge order
  ThresholdTable defaults;           // [default] and the top-level [max_regression]
  std::map<std::string, ThresholdTable> recipes;

  // Effective bounds for a recipe: [default], with [recipes.<recipe>] replacing whole entries.
  std::map<std::string, Bound> bounds_for(const std::string& recipe) const;
  // Effective per-statistic regression tolerance (recipe table, then default), if any.
  std::optional<double> max_regression_for(const std::string& recipe, const std::string& statistic) const;
  // Statistics named anywhere for this recipe (bounds or max_regression), sorted.
  std::vector<std::string> statistics_for(const std::string& recipe) const;
  bool empty() const { return defaults.bounds.empty() && defaults.max_regression.empty() && recipes.empty(); }
};

// Every statistic name a gate may reference: the stored names of the metric catalogue (a unit test
// holds them equal to what compute_recipe_statistics writes). Sorted. A gate file may also use a catalogue
// alias (mean_ratio for ratio_mean); it is read as the stored name.
const std::vector<std::string>& valid_statistics();

// Edit distance (insert/delete/substitute, each cost 1).
std::size_t levenshtein(const std::string& a, const std::string& b);
// The candidate nearest to `name` by edit distance (first one on ties); empty if none.
std::string nearest_name(const std::string& name, const std::vector<std::string>& candidates);

// Parses TOML text. `source` names it in messages. Every problem (syntax, unknown statistic with
// the nearest valid name, unknown key, non-numeric bound, min > max, negative tolerance) is an
// rlp::InputError.
Thresholds parse_thresholds(const std::string& toml_text, const std::string& source);
inline constexpr unsigned long long kMaxThresholdsFileBytes = 1ull << 20;  // 1 MiB: larger is refused
Thresholds load_thresholds_file(const std::string& path);

// Named presets, found in fixtures_dir() + "/gate/<name>.toml".
const std::vector<std::string>& preset_names();
std::string preset_path(const std::string& name);  // InputError for an unknown name
Thresholds load_preset(const std::string& name);

// Overlays `top` on `base`: per statistic, entries of `top` replace those of `base`.
Thresholds merge_thresholds(const Thresholds& base, const Thresholds& top);

}  // namespace rlp::gate
