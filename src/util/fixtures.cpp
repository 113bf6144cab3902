#include "rlparity/util/fixtures.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "rlparity/util/error.hpp"

namespace rlp {
namespace fs = std::filesystem;

std::string fixtures_dir() {
  std::vector<fs::path> candidates;
  if (const char* env = std::getenv("RLPARITY_FIXTURES")) candidates.emplace_back(env);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path bin = exe.parent_path();
    candidates.push_back(bin.parent_path() / "share" / "rlparity" / "fixtures");  // installed
    candidates.push_back(bin / "fixtures");
  }
  candidates.emplace_back(RLPARITY_SOURCE_FIXTURES);  // the source tree this binary was built from
  std::string searched;
  for (const auto& c : candidates) {
    if (fs::exists(c / "models" / "stories260K" / "config.json", ec))
      return fs::weakly_canonical(c, ec).string();
    searched += "\n  " + c.string();
  }
  RLP_THROW_INPUT("bundled fixtures not found (set RLPARITY_FIXTURES); searched:{}", searched);
}

}  // namespace rlp
