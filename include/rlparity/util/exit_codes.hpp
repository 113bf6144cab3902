// The exit codes of every rlparity command, in one table (documented in README.md and
// docs/robustness.md). Scripts and CI read them: a code never changes meaning.
#pragma once

namespace rlp {

inline constexpr int kExitOk = 0;
// `gate`: a threshold or a baseline regression was violated (the only use of 1).
inline constexpr int kExitViolation = 1;
// Bad usage (options) or input (files, values), or a run that could not complete (a failed write,
// a full disk): the message names the input and the problem. Also `selfcheck` finding a wrong value.
inline constexpr int kExitError = 2;
// An unexpected exception: a bug in rlparity, not a problem with the input.
inline constexpr int kExitInternal = 3;
// SIGBUS: a memory-mapped checkpoint file was truncated or rewritten while in use.
inline constexpr int kExitCheckpointChanged = 4;
// Stopped by a signal (SIGINT 130, SIGTERM 143): no output left behind.
inline constexpr int kExitSignalBase = 128;
inline constexpr int exit_code_for_signal(int signal) { return kExitSignalBase + signal; }

}  // namespace rlp
