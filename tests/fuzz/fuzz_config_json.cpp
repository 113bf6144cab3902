// libFuzzer target: config.json text -> JSON -> parse_model_spec (the shapes and options a
// checkpoint's config declares), then to_json on what was accepted.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "rlparity/model/model_spec.hpp"
#include "rlparity/util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(data, data + size);
  } catch (const nlohmann::json::exception&) {
    return 0;
  }
  try {
    const rlp::ModelSpec spec = rlp::parse_model_spec(j, "config.json");
    (void)spec.to_json().dump();
  } catch (const rlp::Error&) {
  }
  return 0;
}
