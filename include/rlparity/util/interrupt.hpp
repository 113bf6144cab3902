// SIGINT/SIGTERM handling for long runs: the handler only sets a flag; long loops call
// check_interrupted(), which throws, so the normal error path removes temporary files and no
// output that looks complete is left behind.
#pragma once

namespace rlp {

void install_interrupt_handlers();
bool interrupted();
// Throws rlp::Error("interrupted by signal N") once a handled signal has arrived.
void check_interrupted();

}  // namespace rlp
