// libFuzzer target: tokenizer.json text -> Tokenizer::parse (the vocabulary, added tokens and the
// decoder a checkpoint's tokenizer declares), then decoding ids, known and unknown, and the
// table-cell escaping of what comes out. A malformed file must be an rlp::Error, never a crash.
#include <cstdint>
#include <string>
#include <vector>

#include "rlparity/model/tokenizer.hpp"
#include "rlparity/util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  try {
    const rlp::Tokenizer t =
        rlp::Tokenizer::parse(std::string(reinterpret_cast<const char*>(data), size), "tokenizer.json");
    std::vector<int32_t> ids;
    for (int32_t i = 0; i < 12; ++i) ids.push_back(i);
    ids.push_back(static_cast<int32_t>(size));
    (void)rlp::printable_text(t.decode(ids), 40, true);
    (void)rlp::printable_text(t.decode(ids.data() + 3, 2), 5);
  } catch (const rlp::Error&) {
  }
  return 0;
}
