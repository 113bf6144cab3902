#include "cli/shared_options.hpp"

#include <fmt/core.h>

namespace rlp::cli {

std::optional<gate::Thresholds> load_thresholds(const std::string& preset, const std::string& file) {
  std::optional<gate::Thresholds> t;
  if (!preset.empty()) t = gate::load_preset(preset);
  if (!file.empty()) {
    gate::Thresholds from_file = gate::load_thresholds_file(file);
    t = t ? gate::merge_thresholds(*t, from_file) : from_file;
  }
  return t;
}

void print_json(const nlohmann::json& j) {
  fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace rlp::cli
