// rlparity command line: assembles the subcommands (one file each) and turns errors into the exit
// codes of util/exit_codes.hpp.
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>

#include "cli/commands.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/exit_codes.hpp"
#include "rlparity/util/interrupt.hpp"

namespace {

// Exit without running atexit handlers: after a failed write (disk full), HDF5's own atexit
// cleanup retries the flush of the file we already abandoned and can crash. Everything of ours
// (temporary files) has been cleaned up by the error path before this point.
[[noreturn]] void exit_now(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(code);
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) rlp::cli::invocation() += (i ? " " : "") + std::string(argv[i]);
  CLI::App app{"rlparity: generation vs training logprob divergence across precisions"};
  app.require_subcommand(1);
  app.fallthrough();  // --verbose after the subcommand too
  app.set_version_flag("--version", RLPARITY_VERSION);
  bool verbose = false;
  app.add_flag("--verbose", verbose, "on an error, also print where in rlparity's source it was raised");
  rlp::cli::CommandRegistry registry;
  rlp::cli::register_all(app, registry);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? rlp::kExitOk : rlp::kExitError;
  }
  rlp::install_sigbus_handler();
  try {
    return registry.run_selected();
  } catch (const rlp::Error& e) {
    fmt::print(stderr, "rlparity: error: {}\n", e.what());
    if (verbose && !e.where().empty()) fmt::print(stderr, "rlparity: (raised at {})\n", e.where());
    // A failure after SIGINT/SIGTERM is the signal's doing: the shell's convention, 128 + signal.
    const int sig = rlp::interrupt_signal();
    exit_now(sig != 0 ? rlp::exit_code_for_signal(sig) : rlp::kExitError);
  } catch (const std::exception& e) {
    fmt::print(stderr, "rlparity: internal error: {}\n", e.what());
    exit_now(rlp::kExitInternal);
  }
}
