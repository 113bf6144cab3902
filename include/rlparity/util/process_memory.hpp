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

// Has glibc's malloc keep freed blocks of up to 32 MiB for reuse instead of handing their pages back
// to the kernel (a fixed mmap threshold of 32 MiB, the most its dynamic one reaches, and no heap
// trimming). A forward allocates and frees the same activation buffers layer after layer; returned
// pages fault in again on the next layer, 6% of a teacher-forced forward's time (perf). Peak RSS
// moves by a few MiB (docs/results.md). Called by the CLI and the benchmarks, not by the library.
void keep_freed_buffers();

}  // namespace rlp
