#include "cli/shared_options.hpp"

#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <filesystem>

#include "rlparity/util/error.hpp"

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

void add_stats_options(CLI::App* sub, StatsOptions& s) {
  sub->add_option("--is-cap", s.is_cap, "importance-ratio cap C for truncated/masked IS fractions")
      ->capture_default_str();
  const auto pair = [](double& low, double& high) {
    return [&low, &high](const std::vector<double>& v) {
      low = v.at(0);
      high = v.at(1);
    };
  };
  sub->add_option_function<std::vector<double>>(
         "--ppo-eps", pair(s.ppo_eps_low, s.ppo_eps_high),
         "PPO clip band LOW,HIGH: ppo_clip_frac counts r outside [1-LOW, 1+HIGH] (default 0.2,0.28)")
      ->delimiter(',')
      ->expected(2);
  sub->add_option_function<std::vector<double>>(
         "--icepop-bounds", pair(s.icepop_low, s.icepop_high),
         "IcePop mask LOW,HIGH: icepop_mask_frac counts r outside [LOW, HIGH] (default 0.5,2)")
      ->delimiter(',')
      ->expected(2);
}

void add_inputs_format_option(CLI::App* sub, std::string& format) {
  sub->add_option(
         "--inputs-format", format,
         "how input lines are read: auto (detected per line from its keys), rlparity, vllm-completions, "
         "vllm-chat, vllm-offline, sglang")
      ->capture_default_str();
}

void print_json(const nlohmann::json& j) {
  fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace rlp::cli

namespace rlp::cli {

std::optional<Tokenizer> run_tokenizer(const RunData& run, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!path.empty()) {
    if (fs::is_directory(path, ec)) {
      auto t = Tokenizer::open(path);
      if (!t) RLP_THROW_INPUT("--tokenizer {}: the directory has no tokenizer.json", path);
      return t;
    }
    if (!fs::exists(path, ec)) RLP_THROW_INPUT("--tokenizer {}: no such file or directory", path);
    return Tokenizer::open_file(path);
  }
  if (run.checkpoint_path.empty() || !fs::is_directory(run.checkpoint_path, ec)) return std::nullopt;
  try {
    return Tokenizer::open(run.checkpoint_path);
  } catch (const InputError& e) {
    fmt::print(stderr, "rlparity: note: tokens shown as ids: {}\n", e.what());
    return std::nullopt;
  }
}

void add_tokenizer_option(CLI::App* sub, std::string& path) {
  sub->add_option(
      "--tokenizer", path,
      "tokenizer.json (or a directory holding one) that shows the worst tokens and their contexts "
      "as text (default: the run's checkpoint directory's, when it has one)");
}

}  // namespace rlp::cli
