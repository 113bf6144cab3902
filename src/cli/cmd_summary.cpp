// `rlparity summary RUN.h5`: the run's identity and the per-recipe summary table (the one replay
// prints); --json prints every summary attribute of every recipe.
#include <fmt/core.h>

#include <cmath>

#include "cli/commands.hpp"
#include "cli/shared_options.hpp"
#include "rlparity/io/run_file.hpp"
#include "rlparity/metrics/summary_table.hpp"
#include "rlparity/util/error.hpp"

namespace rlp::cli {
namespace {

struct SummaryArgs {
  std::string run;
  bool json = false;
};

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
  return kExitOk;
}

}  // namespace

void setup_summary(CLI::App& app, CommandRegistry& registry) {
  auto args = std::make_shared<SummaryArgs>();
  auto* sub = app.add_subcommand("summary", "Print a run file's per-recipe summary table");
  sub->add_option("run", args->run, "run file (HDF5) written by replay or compare")->required();
  sub->add_flag("--json", args->json, "print every summary attribute of every recipe as JSON");
  registry.add(sub, [args] { return run_summary(*args); });
}

}  // namespace rlp::cli
