#include "rlparity/util/interrupt.hpp"

#include <csignal>

#include "rlparity/util/error.hpp"

namespace rlp {
namespace {
volatile std::sig_atomic_t g_signal = 0;
extern "C" void on_signal(int sig) { g_signal = sig; }
}  // namespace

void install_interrupt_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool interrupted() { return g_signal != 0; }

void check_interrupted() {
  if (g_signal != 0) RLP_THROW("interrupted by signal {}; no output written", static_cast<int>(g_signal));
}

}  // namespace rlp
