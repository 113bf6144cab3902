#include "rlparity/gate/thresholds.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "rlparity/metrics/metric_catalogue.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/fixtures.hpp"

namespace rlp::gate {

namespace {

std::string where(const toml::node& n, const std::string& source) {
  const auto& s = n.source();
  if (s.begin.line == 0) return source;
  return source + ":" + std::to_string(s.begin.line);
}

// The stored name of a statistic a gate file names (a catalogue name or alias); InputError with the
// nearest valid name otherwise.
std::string check_statistic(const std::string& name, const std::string& loc) {
  if (std::string stored = stored_metric_name(name); !stored.empty()) return stored;
  RLP_THROW_INPUT(
      "{}: unknown statistic '{}' (did you mean '{}'? the names are the summary attributes listed in "
      "docs/metrics.md)",
      loc, name, nearest_name(name, valid_statistics()));
}

double finite_number(const toml::node& n, const std::string& what, const std::string& loc) {
  if (!n.is_number()) RLP_THROW_INPUT("{}: {} must be a number", loc, what);
  const double v = n.value<double>().value_or(std::nan(""));
  if (!std::isfinite(v)) RLP_THROW_INPUT("{}: {} must be a finite number", loc, what);
  return v;
}

void parse_regression_table(const toml::table& t, std::map<std::string, double>& out,
                            const std::string& source, const std::string& table_name) {
  for (const auto& [key, node] : t) {
    const std::string name(key.str());
    const std::string loc = where(node, source);
    const std::string stat = check_statistic(name, loc);
    const double v = finite_number(node, table_name + "." + name, loc);
    if (v < 0)
      RLP_THROW_INPUT("{}: {}.{} = {} is negative (a relative tolerance, e.g. 0.1 = 10%)", loc, table_name,
                      name, v);
    out[stat] = v;
  }
}

ThresholdTable parse_table(const toml::table& t, const std::string& source, const std::string& table_name) {
  ThresholdTable out;
  for (const auto& [key, node] : t) {
    const std::string name(key.str());
    const std::string loc = where(node, source);
    if (name == "max_regression") {
      const auto* sub = node.as_table();
      if (!sub)
        RLP_THROW_INPUT("{}: [{}].max_regression must be a table of statistic = tolerance", loc, table_name);
      parse_regression_table(*sub, out.max_regression, source, table_name + ".max_regression");
      continue;
    }
    const std::string stat = check_statistic(name, loc);
    Bound b;
    if (node.is_number()) {
      b.max = finite_number(node, table_name + "." + name, loc);
    } else if (const auto* bt = node.as_table()) {
      for (const auto& [bk, bn] : *bt) {
        const std::string k(bk.str());
        const std::string bloc = where(bn, source);
        if (k == "min")
          b.min = finite_number(bn, table_name + "." + name + ".min", bloc);
        else if (k == "max")
          b.max = finite_number(bn, table_name + "." + name + ".max", bloc);
        else
          RLP_THROW_INPUT("{}: {}.{}: unknown key '{}' (expected min and/or max)", bloc, table_name, name, k);
      }
      if (!b.min && !b.max) RLP_THROW_INPUT("{}: {}.{}: give min and/or max", loc, table_name, name);
      if (b.min && b.max && *b.min > *b.max)
        RLP_THROW_INPUT("{}: {}.{}: min {} is greater than max {}", loc, table_name, name, *b.min, *b.max);
    } else {
      RLP_THROW_INPUT("{}: {}.{} must be a number (an upper bound) or a table {{ min = x, max = y }}", loc,
                      table_name, name);
    }
    out.bounds[stat] = b;
  }
  return out;
}

void overlay(ThresholdTable& base, const ThresholdTable& top) {
  for (const auto& [k, v] : top.bounds) base.bounds[k] = v;
  for (const auto& [k, v] : top.max_regression) base.max_regression[k] = v;
}

}  // namespace

const std::vector<std::string>& valid_statistics() { return metric_names(); }

std::size_t levenshtein(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string nearest_name(const std::string& name, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_d = static_cast<std::size_t>(-1);
  for (const auto& c : candidates) {
    const std::size_t d = levenshtein(name, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

std::map<std::string, Bound> Thresholds::bounds_for(const std::string& recipe) const {
  std::map<std::string, Bound> out = defaults.bounds;
  if (auto it = recipes.find(recipe); it != recipes.end())
    for (const auto& [k, v] : it->second.bounds) out[k] = v;
  return out;
}

std::optional<double> Thresholds::max_regression_for(const std::string& recipe,
                                                     const std::string& statistic) const {
  if (auto it = recipes.find(recipe); it != recipes.end())
    if (auto jt = it->second.max_regression.find(statistic); jt != it->second.max_regression.end())
      return jt->second;
  if (auto jt = defaults.max_regression.find(statistic); jt != defaults.max_regression.end())
    return jt->second;
  return std::nullopt;
}

std::vector<std::string> Thresholds::statistics_for(const std::string& recipe) const {
  std::set<std::string> s;
  for (const auto& [k, v] : defaults.bounds) s.insert(k);
  for (const auto& [k, v] : defaults.max_regression) s.insert(k);
  if (auto it = recipes.find(recipe); it != recipes.end()) {
    for (const auto& [k, v] : it->second.bounds) s.insert(k);
    for (const auto& [k, v] : it->second.max_regression) s.insert(k);
  }
  return {s.begin(), s.end()};
}

Thresholds parse_thresholds(const std::string& toml_text, const std::string& source) {
  toml::table root;
  try {
    root = toml::parse(toml_text, source);
  } catch (const toml::parse_error& e) {
    RLP_THROW_INPUT("{}:{}:{}: TOML syntax error: {}", source, e.source().begin.line, e.source().begin.column,
                    e.description());
  }
  Thresholds th;
  th.sources.push_back(source);
  for (const auto& [key, node] : root) {
    const std::string k(key.str());
    const std::string loc = where(node, source);
    const auto* t = node.as_table();
    if (k == "default") {
      if (!t) RLP_THROW_INPUT("{}: 'default' must be a table", loc);
      overlay(th.defaults, parse_table(*t, source, "default"));
    } else if (k == "max_regression") {
      if (!t) RLP_THROW_INPUT("{}: 'max_regression' must be a table of statistic = tolerance", loc);
      parse_regression_table(*t, th.defaults.max_regression, source, "max_regression");
    } else if (k == "recipes") {
      if (!t) RLP_THROW_INPUT("{}: 'recipes' must be a table of [recipes.<name>] tables", loc);
      for (const auto& [rk, rn] : *t) {
        const std::string rname(rk.str());
        const auto* rt = rn.as_table();
        if (!rt) RLP_THROW_INPUT("{}: recipes.{} must be a table", where(rn, source), rname);
        th.recipes[rname] = parse_table(*rt, source, "recipes." + rname);
      }
    } else {
      RLP_THROW_INPUT(
          "{}: unknown top-level key '{}' (expected [default], [recipes.<name>], [max_regression])", loc, k);
    }
  }
  return th;
}

Thresholds load_thresholds_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) RLP_THROW_INPUT("thresholds file '{}' does not exist", path);
  if (std::filesystem::is_directory(path, ec)) RLP_THROW_INPUT("thresholds file '{}' is a directory", path);
  const auto size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxThresholdsFileBytes)
    RLP_THROW_INPUT("thresholds file '{}' is {} bytes, over the {} KiB limit", path, size,
                    kMaxThresholdsFileBytes >> 10);
  std::ifstream in(path, std::ios::binary);
  if (!in) RLP_THROW_INPUT("cannot read thresholds file '{}'", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_thresholds(ss.str(), path);
}

const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> names = {"nemo-rl", "verl"};
  return names;
}

std::string preset_path(const std::string& name) {
  const auto& names = preset_names();
  if (std::find(names.begin(), names.end(), name) == names.end())
    RLP_THROW_INPUT("unknown preset '{}' (available: nemo-rl, verl; did you mean '{}'?)", name,
                    nearest_name(name, names));
  return fixtures_dir() + "/gate/" + name + ".toml";
}

Thresholds load_preset(const std::string& name) {
  Thresholds th = load_thresholds_file(preset_path(name));
  th.sources.back() = "preset " + name + " (" + th.sources.back() + ")";
  return th;
}

Thresholds merge_thresholds(const Thresholds& base, const Thresholds& top) {
  Thresholds out = base;
  out.sources.insert(out.sources.end(), top.sources.begin(), top.sources.end());
  overlay(out.defaults, top.defaults);
  for (const auto& [name, t] : top.recipes) overlay(out.recipes[name], t);
  return out;
}

}  // namespace rlp::gate
