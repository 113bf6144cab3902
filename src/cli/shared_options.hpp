// What several subcommands do the same way with their options: thresholds from --preset and
// --thresholds (gate and report), and JSON printed for --json (gate and summary).
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "rlparity/gate/thresholds.hpp"
#include "rlparity/metrics/statistics.hpp"
#include "rlparity/model/tokenizer.hpp"
#include "rlparity/run/run_data.hpp"

namespace CLI {
class App;
}

namespace rlp::cli {

// The --preset thresholds, overridden per statistic by the --thresholds file; nullopt when both
// are empty.
std::optional<gate::Thresholds> load_thresholds(const std::string& preset, const std::string& file);

// --is-cap C, --ppo-eps LOW,HIGH and --icepop-bounds LOW,HIGH (replay, sweep and compare) into `s`,
// which must outlive the parse; the bands are checked by validate_stats_options when used.
void add_stats_options(CLI::App* sub, StatsOptions& s);

// --inputs-format auto|rlparity|vllm-completions|vllm-chat|vllm-offline|sglang into `format` (checked
// by parse_response_format when used).
void add_inputs_format_option(CLI::App* sub, std::string& format);

// `j` indented by 2, invalid UTF-8 replaced, and a newline.
void print_json(const nlohmann::json& j);

// The tokenizer that shows a run's tokens as text: `path` (a tokenizer.json, or a directory holding
// one; errors are the user's to fix), else the run's checkpoint directory's tokenizer.json when it
// is there (a missing or unreadable one is skipped with a note on stderr: ids are shown instead).
std::optional<Tokenizer> run_tokenizer(const RunData& run, const std::string& path);
// --tokenizer PATH (summary, report).
void add_tokenizer_option(CLI::App* sub, std::string& path);

}  // namespace rlp::cli
