// libFuzzer target: replay inputs JSONL (read_inputs_jsonl) with the stories260K vocabulary (512)
// and context (512).
#include <cstdint>

#include "fuzz_util.hpp"
#include "rlparity/replay/inputs.hpp"
#include "rlparity/util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string path = rlp::fuzz::write_input("inputs.jsonl", data, size);
  try {
    (void)rlp::read_inputs_jsonl(path, 512, 512);
  } catch (const rlp::Error&) {
  }
  return 0;
}
