// The tool version recorded in every output file.
#pragma once

namespace rlp {
const char* version();
}  // namespace rlp
