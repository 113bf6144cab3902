#include "rlparity/util/interrupt.hpp"

#include <unistd.h>

#include <csignal>

#include "rlparity/util/error.hpp"
#include "rlparity/util/exit_codes.hpp"

namespace rlp {
namespace {
volatile std::sig_atomic_t g_signal = 0;
extern "C" void on_signal(int sig) { g_signal = sig; }
extern "C" void on_sigbus(int) {
  static const char msg[] =
      "rlparity: error: a memory-mapped checkpoint file was truncated or modified while in use (SIGBUS); "
      "checkpoint files must not change while rlparity runs\n";
  ssize_t w = ::write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)w;
  ::_exit(kExitCheckpointChanged);
}
}  // namespace

void install_interrupt_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

void install_sigbus_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_sigbus;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGBUS, &sa, nullptr);
}

bool interrupted() { return g_signal != 0; }

int interrupt_signal() { return static_cast<int>(g_signal); }

void check_interrupted() {
  if (g_signal != 0) RLP_THROW("interrupted by signal {}; no output written", static_cast<int>(g_signal));
}

}  // namespace rlp
