// The sweep file (docs/sweep.md): /sweep/knobs, values (points x knobs), recipes,
// summary/<statistic> (points x recipes), position/mean_abs_log_ratio (points x recipes x
// positions), boundaries/{point,recipe,position,jump,z}; root attributes format
// ("rlparity-sweep"), tool_version, command_line, checkpoint_hash.
#pragma once
#include <string>

#include "rlparity/run/sweep_data.hpp"

namespace rlp {

// Atomic; refuses to overwrite unless `force`.
void write_sweep_file(const std::string& path, const SweepResult& sweep, const std::string& command_line,
                      const std::string& checkpoint_hash, bool force);

// Reads a sweep file back, every array's shape checked against the knobs, points, recipes and
// positions it declares; InputError naming the file and the dataset otherwise.
SweepResult read_sweep_file(const std::string& path);

// Is `path` a readable sweep file (its root has the /sweep group)? False for run and inspect files
// and for anything unreadable.
bool is_sweep_file(const std::string& path);

}  // namespace rlp
