// SIGINT/SIGTERM handling for long runs: the handler only sets a flag; long loops call
// check_interrupted(), which throws, so the normal error path removes temporary files and no
// output that looks complete is left behind.
#pragma once

namespace rlp {

void install_interrupt_handlers();
bool interrupted();
// The handled signal that arrived (SIGINT, SIGTERM), 0 when none: the CLI exits with 128 + it.
int interrupt_signal();
// Throws rlp::Error("interrupted by signal N") once a handled signal has arrived.
void check_interrupted();

// SIGBUS means a memory-mapped checkpoint file shrank under us (truncated or rewritten while open;
// checkpoints are re-stat'ed before their bytes are read, but a change after that check faults).
// The handler writes one clear error line to stderr and exits with kExitCheckpointChanged (4;
// util/exit_codes.hpp) (async-signal-safe: write + _exit). Installed by the CLI's main for every
// subcommand.
void install_sigbus_handler();

}  // namespace rlp
