// Where the bundled files (default model, default prompts) live: next to an installed binary
// (<prefix>/share/rlparity/fixtures), in the source tree a build came from, or RLPARITY_FIXTURES.
#pragma once
#include <string>

namespace rlp {

// The fixtures directory; InputError listing the places searched when none has the default model.
std::string fixtures_dir();

}  // namespace rlp
