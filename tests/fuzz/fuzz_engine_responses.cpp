// libFuzzer target: engine responses (engine_responses.hpp). The first byte picks how the rest is
// read: as one JSON response forced to each engine format in turn (parse_engine_response), as a
// replay inputs file detected per line (read_inputs_jsonl, vocabulary and context 512), or as the
// generation side of a compare (read_split_dumps against itself), which turns what it accepts into a
// run (build_compare_run).
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_util.hpp"
#include "rlparity/compare/engine_dumps.hpp"
#include "rlparity/compare/engine_responses.hpp"
#include "rlparity/replay/inputs.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/json_depth.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0] % 3;
  ++data;
  --size;
  try {
    if (mode == 0) {
      const std::string text(reinterpret_cast<const char*>(data), size);
      if (rlp::json_nesting_depth(text) > rlp::kMaxJsonDepth) return 0;  // the readers refuse it first
      const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
      if (j.is_discarded()) return 0;
      for (auto f : {rlp::ResponseFormat::vllm_completions, rlp::ResponseFormat::vllm_chat,
                     rlp::ResponseFormat::vllm_offline, rlp::ResponseFormat::sglang}) {
        try {
          (void)rlp::parse_engine_response(j, f, "fuzz:1");
        } catch (const rlp::Error&) {
        }
      }
    } else if (mode == 1) {
      (void)rlp::read_inputs_jsonl(rlp::fuzz::write_input("inputs.jsonl", data, size), 512, 512);
    } else {
      const std::string path = rlp::fuzz::write_input("gen.jsonl", data, size);
      (void)rlp::compare::build_compare_run(rlp::compare::read_split_dumps(path, path), "fuzz",
                                            nlohmann::json::object());
    }
  } catch (const rlp::Error&) {
  }
  return 0;
}
