// The subcommands of the rlparity CLI. Each lives in its own file with a setup_* function that
// binds its options and registers the action to run; main() only assembles them.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "rlparity/util/exit_codes.hpp"

namespace rlp::cli {

// The command line as the user typed it (recorded in output files).
inline std::string& invocation() {
  static std::string s;
  return s;
}

class CommandRegistry {
 public:
  void add(CLI::App* sub, std::function<int()> action) { commands_.emplace_back(sub, std::move(action)); }
  int run_selected() const {
    for (const auto& [sub, action] : commands_)
      if (sub->parsed()) return action();
    return kExitError;
  }

 private:
  std::vector<std::pair<CLI::App*, std::function<int()>>> commands_;
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
