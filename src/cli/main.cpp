// rlparity command line: assembles the subcommands (one file each) and turns errors into the exit
// codes of util/exit_codes.hpp.
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>

#include "cli/commands.hpp"
#include "rlparity/dist/job.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/exit_codes.hpp"
#include "rlparity/util/interrupt.hpp"
#include "rlparity/util/process_memory.hpp"

namespace {

// Exit without running atexit handlers: after a failed write (disk full), HDF5's own atexit
// cleanup retries the flush of the file we already abandoned and can crash. Everything of ours
// (temporary files) has been cleaned up by the error path before this point.
[[noreturn]] void exit_now(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(code);
}

// A failure on this process: alone, printed and exited with `code`; in a job of several ranks
// (dist/job.hpp), made known to every rank first, then printed once, by rank 0, and every rank exits
// with the failed rank's code.
[[noreturn]] void fail(const std::string& kind, const std::string& message, const std::string& where,
                       bool verbose, int code) {
  rlp::Job& job = rlp::Job::current();
  if (job.distributed()) {
    const rlp::JobFailure f = job.fail(kind == "error" ? message : kind + ": " + message, code);
    if (job.is_root()) fmt::print(stderr, "rlparity: error: {}\n", f.what());
    job.shutdown();
    exit_now(f.exit_code());
  }
  fmt::print(stderr, "rlparity: {}: {}\n", kind, message);
  if (verbose && !where.empty()) fmt::print(stderr, "rlparity: (raised at {})\n", where);
  exit_now(code);
}

}  // namespace

int main(int argc, char** argv) {
  rlp::keep_freed_buffers();
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
  // MPI (when launched by mpirun/srun) starts before our SIGBUS handler, which must win over its own.
  rlp::Job* job = nullptr;
  try {
    job = &rlp::Job::current();
  } catch (const rlp::Error& e) {
    fmt::print(stderr, "rlparity: error: {}\n", e.what());
    exit_now(rlp::kExitError);
  }
  rlp::install_sigbus_handler();
  try {
    const int code = registry.run_selected();
    job->finish();
    job->shutdown();
    return code;
  } catch (const rlp::JobFailure& e) {  // another rank failed; every rank knows (dist/job.hpp)
    if (job->is_root()) fmt::print(stderr, "rlparity: error: {}\n", e.what());
    job->shutdown();
    exit_now(e.exit_code());
  } catch (const rlp::Error& e) {
    // A failure after SIGINT/SIGTERM is the signal's doing: the shell's convention, 128 + signal.
    const int sig = rlp::interrupt_signal();
    fail("error", e.what(), e.where(), verbose, sig != 0 ? rlp::exit_code_for_signal(sig) : rlp::kExitError);
  } catch (const std::exception& e) {
    fail("internal error", e.what(), "", verbose, rlp::kExitInternal);
  }
}
