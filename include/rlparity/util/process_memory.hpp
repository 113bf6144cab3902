// The process's memory as Linux reports it (/proc/self/status): what a replay records about its own
// peak (RunData::extra "resources") and what the benchmarks measure.
#pragma once
#include <cstdint>

namespace rlp {

// A /proc/self/status field given in kB ("VmHWM", "VmRSS", "RssAnon", "RssFile"), in bytes; -1
// where the field (or /proc) is absent.
int64_t proc_status_bytes(const char* key);

// Resets the peak RSS (VmHWM) to the current RSS (Linux >= 4.0); false where not permitted.
bool reset_peak_rss();

}  // namespace rlp
