// Small text helpers shared by the commands and the run writers.
#pragma once
#include <string>
#include <vector>

namespace rlp {

// "a,b,,c" -> {"a", "b", "c"}: a comma-separated option value, empty items dropped.
std::vector<std::string> split_list(const std::string& text);

// The current time in UTC as ISO 8601, e.g. "2026-12-04T17:40:18Z" (the files' `created`).
std::string utc_now();

}  // namespace rlp
