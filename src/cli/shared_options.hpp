// What several subcommands do the same way with their options: thresholds from --preset and
// --thresholds (gate and report), and JSON printed for --json (gate and summary).
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "rlparity/gate/thresholds.hpp"

namespace rlp::cli {

// The --preset thresholds, overridden per statistic by the --thresholds file; nullopt when both
// are empty.
std::optional<gate::Thresholds> load_thresholds(const std::string& preset, const std::string& file);

// `j` indented by 2, invalid UTF-8 replaced, and a newline.
void print_json(const nlohmann::json& j);

}  // namespace rlp::cli
