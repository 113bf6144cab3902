#include "rlparity/util/version.hpp"

namespace rlp {
const char* version() { return RLPARITY_VERSION; }
}  // namespace rlp
