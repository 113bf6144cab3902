// Small helpers shared by the report's analysis and its HTML rendering: a recipe's per-token array
// by name, element text escaping, anchor-safe ids.
#pragma once
#include <cctype>
#include <limits>
#include <string>
#include <vector>

#include "rlparity/report/svg.hpp"
#include "rlparity/run/run_data.hpp"

namespace rlp::report {

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The recipe's per-token array `name`, or nullptr when the run file has none.
inline const std::vector<double>* token_metric(const RecipeResult& r, const std::string& name) {
  auto it = r.tokens.find(name);
  return it == r.tokens.end() ? nullptr : &it->second;
}

inline std::string esc(const std::string& s) { return xml_escape(s); }

// Anchor-safe id fragment of a recipe name.
inline std::string slug(const std::string& s) {
  std::string o;
  for (char c : s) o += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') ? c : '_';
  return o;
}

}  // namespace rlp::report
