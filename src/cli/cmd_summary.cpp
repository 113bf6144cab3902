// `rlparity summary RUN.h5`: the run's identity and the per-recipe summary table (the one replay
// prints); --json prints every summary attribute of every recipe.
#include <fmt/core.h>

#include <cmath>

#include "cli/commands.hpp"
#include "cli/shared_options.hpp"
#include "rlparity/io/run_file.hpp"
#include "rlparity/metrics/summary_table.hpp"
#include "rlparity/report/report.hpp"
#include "rlparity/util/error.hpp"

namespace rlp::cli {
namespace {

struct SummaryArgs {
  std::string run, tokenizer;
  std::size_t worst = 3;
  bool json = false;
};

// Each recipe's `n` tokens with the largest |log ratio|: sequence, position, token id, log ratio,
// and with a tokenizer the token and its context as text.
std::string worst_tokens_text(const RunData& run, std::size_t n, const Tokenizer* tok) {
  if (n == 0) return {};
  std::string o =
      fmt::format("worst tokens (largest |log ratio|){}\n", tok ? "" : "; token text: no tokenizer.json");
  for (const auto& r : run.recipes) {
    const auto rows = report::worst_tokens(run, r, n, tok);
    for (const auto& w : rows) {
      o += fmt::format("{:<8} {:>12} pos {:>5} id {:>7}  log ratio {:>+11.4e}", r.name, w.sequence_id,
                       w.position, w.token_id, w.log_ratio);
      if (tok) o += fmt::format("  {} [{}]", printable_text(w.context, 48, true), printable_text(w.text, 24));
      o += '\n';
    }
  }
  return o;
}

std::size_t response_tokens(const RunData& run) {
  if (run.seq_offsets.empty()) return 0;
  int64_t prompts = 0;
  for (int32_t p : run.prompt_lengths) prompts += p;
  return static_cast<std::size_t>(run.seq_offsets.back() - prompts);
}

int run_summary(const SummaryArgs& a) {
  const RunData run = read_run_file(a.run);
  const std::size_t tokens = response_tokens(run);
  if (a.json) {
    nlohmann::json j;
    j["file"] = a.run;
    j["schema_version"] = run.schema_version;
    j["tool_version"] = run.tool_version;
    j["created"] = run.created;
    j["command_line"] = run.command_line;
    j["checkpoint_path"] = run.checkpoint_path;
    j["checkpoint_hash"] = run.checkpoint_hash;
    j["num_sequences"] = run.num_sequences();
    j["num_response_tokens"] = tokens;
    j["extra"] = run.extra;
    nlohmann::json recipes = nlohmann::json::array();
    for (const auto& r : run.recipes) {
      nlohmann::json s = nlohmann::json::object();
      for (const auto& [k, v] : r.summary)
        s[k] = std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
      recipes.push_back({{"name", r.name}, {"settings", r.settings}, {"summary", std::move(s)}});
    }
    j["recipes"] = std::move(recipes);
    print_json(j);
    return kExitOk;
  }
  fmt::print("run:        {}\n", a.run);
  fmt::print("checkpoint: {}\n", run.checkpoint_path.empty() ? "-" : run.checkpoint_path);
  fmt::print("hash:       {}\n", run.checkpoint_hash.empty() ? "-" : run.checkpoint_hash);
  fmt::print("sequences:  {}\n", run.num_sequences());
  fmt::print("tokens:     {} response tokens\n", tokens);
  fmt::print("created:    {} by rlparity {}\n", run.created.empty() ? "-" : run.created,
             run.tool_version.empty() ? "-" : run.tool_version);
  if (run.extra.is_object() && run.extra.contains("kl_estimators") && run.extra["kl_estimators"].is_string())
    fmt::print("note:       KL: {}\n", run.extra["kl_estimators"].get<std::string>());
  fmt::print("\n{}", format_summary_table(run.recipes));
  if (const std::string routing = format_routing_table(run.recipes); !routing.empty())
    fmt::print("\n{}", routing);
  if (const std::string engine = format_engine_table(run.recipes); !engine.empty())
    fmt::print("\n{}", engine);
  if (a.worst > 0) {
    const std::optional<Tokenizer> tok = run_tokenizer(run, a.tokenizer);
    fmt::print("\n{}", worst_tokens_text(run, a.worst, tok ? &*tok : nullptr));
  }
  return kExitOk;
}

}  // namespace

void setup_summary(CLI::App& app, CommandRegistry& registry) {
  auto args = std::make_shared<SummaryArgs>();
  auto* sub = app.add_subcommand("summary", "Print a run file's per-recipe summary table");
  sub->add_option("run", args->run, "run file (HDF5) written by replay or compare")->required();
  sub->add_flag("--json", args->json, "print every summary attribute of every recipe as JSON");
  sub->add_option("--worst", args->worst, "tokens with the largest |log ratio| listed per recipe (0: none)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000));
  add_tokenizer_option(sub, args->tokenizer);
  registry.add(sub, [args] { return run_summary(*args); });
}

}  // namespace rlp::cli
