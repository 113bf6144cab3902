// The subcommands of the rlparity CLI. Each lives in its own file with a setup_* function that
// binds its options and registers the action to run; main() only assembles them.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "rlparity/dist/job.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/exit_codes.hpp"

namespace rlp::cli {

// The command line as the user typed it (recorded in output files).
inline std::string& invocation() {
  static std::string s;
  return s;
}

// How a command runs in a job of several ranks (mpirun/srun; dist/job.hpp): sharing its work, or
// refused (it runs as one process).
enum class InJob { shares_work, refused };

class CommandRegistry {
 public:
  void add(CLI::App* sub, std::function<int()> action, InJob in_job = InJob::refused) {
    commands_.push_back({sub, std::move(action), in_job});
  }
  int run_selected() const {
    for (const auto& c : commands_) {
      if (!c.sub->parsed()) continue;
      if (c.in_job == InJob::refused && Job::current().distributed())
        RLP_THROW_INPUT(
            "`rlparity {}` runs as one process: start it without mpirun or srun (replay, sweep and "
            "inspect share their work over the ranks of a job; docs/scale-out.md)",
            c.sub->get_name());
      return c.action();
    }
    return kExitError;
  }

 private:
  struct Command {
    CLI::App* sub;
    std::function<int()> action;
    InJob in_job;
  };
  std::vector<Command> commands_;
};

void setup_selfcheck(CLI::App& app, CommandRegistry& registry);
void setup_replay(CLI::App& app, CommandRegistry& registry);
void setup_gate(CLI::App& app, CommandRegistry& registry);
void setup_summary(CLI::App& app, CommandRegistry& registry);
void setup_compare(CLI::App& app, CommandRegistry& registry);
void setup_inspect(CLI::App& app, CommandRegistry& registry);
void setup_report(CLI::App& app, CommandRegistry& registry);
void setup_sweep(CLI::App& app, CommandRegistry& registry);

inline void register_all(CLI::App& app, CommandRegistry& registry) {
  setup_selfcheck(app, registry);
  setup_replay(app, registry);
  setup_sweep(app, registry);
  setup_gate(app, registry);
  setup_summary(app, registry);
  setup_compare(app, registry);
  setup_inspect(app, registry);
  setup_report(app, registry);
}

}  // namespace rlp::cli
