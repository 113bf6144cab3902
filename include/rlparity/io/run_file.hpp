// The run file: RunData (rlparity/run/run_data.hpp) stored as HDF5 schema v1 (docs/hdf5-schema.md),
// written by replay and compare, read by gate, summary and report.
#pragma once
#include <string>

#include "rlparity/run/run_data.hpp"

namespace rlp {

// Writes through a temporary file in the same directory, renamed on success; on any failure the
// temporary is removed and nothing is left at `path`. Refuses to overwrite unless `force`.
void write_run_file(const std::string& path, const RunData& run, bool force);

// Reads and checks a run file (schema version, required datasets, consistent lengths); every
// problem is an InputError naming the file and the object.
RunData read_run_file(const std::string& path);

}  // namespace rlp
