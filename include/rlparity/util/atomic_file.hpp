// Output files are written whole or not at all: through a temporary in the same directory
// (`<path>.tmp.<pid>`), fsynced, then renamed over `path` (the HDF5 writer in io/ follows the same
// steps). The pre-check runs before any work, so a long run never ends in "cannot write".
#pragma once
#include <string>

namespace rlp {

// InputError unless `path` can be written: not empty, its directory exists and is writable, it is
// not a directory, and it does not exist unless `overwrite`. `what` names the file in messages
// ("run file": "cannot write run file 'x.h5': directory 'd' does not exist").
void check_output_path(const std::string& path, const std::string& what, bool overwrite);

// Writes `text` to `path` atomically (existing files are replaced); the directory entry is synced
// too (best effort). On any failure the temporary is removed, `path` is left untouched, and an
// InputError "cannot write <what> '<path>': <reason>" is thrown.
void write_file_atomically(const std::string& path, const std::string& text, const std::string& what);

}  // namespace rlp
