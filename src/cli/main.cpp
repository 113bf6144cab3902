// rlparity command line: assembles the subcommands (one file each) and turns errors into exit codes.
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>

#include "cli/commands.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/interrupt.hpp"

int main(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) rlp::cli::invocation() += (i ? " " : "") + std::string(argv[i]);
  CLI::App app{"rlparity: generation vs training logprob divergence across precisions"};
  app.require_subcommand(1);
  app.set_version_flag("--version", RLPARITY_VERSION);
  rlp::cli::CommandRegistry registry;
  rlp::cli::register_all(app, registry);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  rlp::install_sigbus_handler();
  try {
    return registry.run_selected();
  } catch (const rlp::Error& e) {
    fmt::print(stderr, "rlparity: error: {}\n", e.what());
    // Exit without running atexit handlers: after a failed write (disk full), HDF5's own atexit
    // cleanup retries the flush of the file we already abandoned and can crash. Everything of
    // ours (temporary files) has been cleaned up by the error path before this point.
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(registry.error_exit_code());
  } catch (const std::exception& e) {
    fmt::print(stderr, "rlparity: internal error: {}\n", e.what());
    return 3;
  }
}
