// libFuzzer target: config.json text -> JSON -> parse_model_spec (the shapes and options a
// checkpoint's config declares), then to_json on what was accepted. The text goes through the same
// nesting bound as Checkpoint::open's reader (check_json_depth) before it is parsed.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "rlparity/model/model_spec.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/json_depth.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  nlohmann::json j;
  try {
    rlp::check_json_depth(std::string_view(reinterpret_cast<const char*>(data), size), "config.json");
    j = nlohmann::json::parse(data, data + size);
  } catch (const nlohmann::json::exception&) {
    return 0;
  } catch (const rlp::Error&) {
    return 0;
  }
  try {
    const rlp::ModelSpec spec = rlp::parse_model_spec(j, "config.json");
    (void)spec.to_json().dump();
  } catch (const rlp::Error&) {
  }
  return 0;
}
