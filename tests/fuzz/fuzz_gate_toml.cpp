// libFuzzer target: gate thresholds TOML (parse_thresholds), then lookups on what was accepted.
#include <cstdint>
#include <string>

#include "rlparity/gate/thresholds.hpp"
#include "rlparity/util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const rlp::gate::Thresholds t = rlp::gate::parse_thresholds(text, "fuzz.toml");
    for (const auto& [name, table] : t.recipes) {
      (void)table;
      (void)t.bounds_for(name);
      (void)t.statistics_for(name);
    }
    (void)rlp::gate::merge_thresholds(t, t);
  } catch (const rlp::Error&) {
  }
  return 0;
}
