// libFuzzer target: a safetensors file (8-byte header length, JSON header, tensor table, data) as
// SafetensorsFile reads it; then every tensor's bytes are read through the mapping, so an entry
// whose range was accepted but lies outside the file shows up as an ASan/SEGV finding.
#include <cstdint>

#include "fuzz_util.hpp"
#include "model/safetensors.hpp"
#include "rlparity/util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string path = rlp::fuzz::write_input("model.safetensors", data, size);
  try {
    rlp::detail::SafetensorsFile f(path);
    volatile uint8_t sink = 0;
    for (const auto& e : f.entries()) {
      const uint8_t* p = f.data_buffer() + e.begin;
      for (uint64_t i = 0; i < e.end - e.begin; ++i) sink = static_cast<uint8_t>(sink ^ p[i]);
    }
    f.check_unchanged();
  } catch (const rlp::Error&) {
  }
  return 0;
}
