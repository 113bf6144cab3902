// `rlparity compare`: per-token logprobs dumped by real engines -> a run file with the same
// statistics as replay (recipe named --name, no logp_oracle, no layers). docs/compare.md.
#include <fmt/core.h>

#include "cli/commands.hpp"
#include "cli/shared_options.hpp"
#include "rlparity/compare/engine_dumps.hpp"
#include "rlparity/io/run_file.hpp"
#include "rlparity/metrics/summary_table.hpp"
#include "rlparity/util/atomic_file.hpp"
#include "rlparity/util/error.hpp"

namespace rlp::cli {
namespace {

struct CompareArgs {
  std::string dump, gen, train, prime_rl, name = "compare", out, inputs_format = "auto";
  StatsOptions stats;
  bool force = false, quiet = false;
};

int run_compare(const CompareArgs& a) {
  const int modes = (!a.dump.empty()) + (!a.gen.empty() || !a.train.empty()) + (!a.prime_rl.empty());
  if (modes != 1)
    RLP_THROW_INPUT("give exactly one input: --dump FILE.jsonl, --gen FILE --train FILE, or --prime-rl DIR");
  if (!a.gen.empty() != !a.train.empty()) RLP_THROW_INPUT("--gen and --train go together");
  validate_stats_options(a.stats);
  const std::optional<ResponseFormat> format = parse_response_format(a.inputs_format);
  check_output_path(a.out, "run file", a.force);
  std::vector<compare::DumpSequence> seqs;
  nlohmann::json source;
  if (!a.dump.empty()) {
    seqs = compare::read_combined_dump(a.dump);
    source = {{"format", "jsonl"}, {"dump", a.dump}};
  } else if (!a.gen.empty()) {
    seqs = compare::read_split_dumps(a.gen, a.train, format);
    source = {
        {"format", "jsonl-pair"}, {"gen", a.gen}, {"train", a.train}, {"inputs_format", a.inputs_format}};
  } else {
    std::size_t dropped = 0;
    std::vector<std::string> files;
    seqs = compare::read_prime_rl_exports(a.prime_rl, &dropped, &files);
    source = {{"format", "prime-rl-token-export"},
              {"dir", a.prime_rl},
              {"files", files},
              {"dropped_unmasked_tokens", dropped}};
    if (dropped && !a.quiet)
      fmt::print(stderr,
                 "rlparity: note: dropped {} unmasked token(s) after the first response token (multi-turn "
                 "tool/user turns)\n",
                 dropped);
  }
  RunData run = compare::build_compare_run(seqs, a.name, source, a.stats);
  run.command_line = invocation();
  write_run_file(a.out, run, a.force);
  if (!a.quiet) {
    fmt::print("{}", format_summary_table(run.recipes));
    fmt::print("note: KL estimators: {}\n", compare::kKlEstimatorNote);
    fmt::print("wrote {} ({} sequences, {} response tokens, recipe '{}')\n", a.out, run.num_sequences(),
               run.recipes[0].tokens.at("logp_gen").size(), a.name);
  }
  return kExitOk;
}

}  // namespace

void setup_compare(CLI::App& app, CommandRegistry& registry) {
  auto args = std::make_shared<CompareArgs>();
  auto* sub =
      app.add_subcommand("compare", "Compute the divergence statistics from real engines' logprob dumps");
  sub->add_option("--dump", args->dump,
                  "JSONL: {\"id\", \"prompt\", \"response\", \"gen_logprobs\", \"train_logprobs\"} per line");
  sub->add_option(
      "--gen", args->gen,
      "JSONL of generation logprobs: {\"id\", \"prompt\", \"response\", \"logprobs\"} (with --train)");
  sub->add_option("--train", args->train, "JSONL of training logprobs, joined with --gen on \"id\"");
  add_inputs_format_option(sub, args->inputs_format);
  sub->add_option("--prime-rl", args->prime_rl,
                  "prime-rl token export dir (token_exports/step_N/rank_R.jsonl)");
  sub->add_option("--name", args->name, "recipe name for the source")->capture_default_str();
  sub->add_option("--out,-o", args->out, "output HDF5 run file")->required();
  sub->add_flag("--force", args->force, "overwrite an existing output file");
  add_stats_options(sub, args->stats);
  sub->add_flag("--quiet,-q", args->quiet, "print nothing on success");
  registry.add(sub, [args] { return run_compare(*args); });
}

}  // namespace rlp::cli
