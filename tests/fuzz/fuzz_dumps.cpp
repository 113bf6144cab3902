// libFuzzer target: engine dumps for `rlparity compare`. The first byte picks the reader: combined
// JSONL, split gen/train JSONL (the rest is cut in two at the first form feed, \f), or a prime-rl
// token export (the rest is step_0/rank_0.jsonl). Whatever is accepted is then turned into a run
// (build_compare_run), which computes every statistic on the parsed numbers.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "fuzz_util.hpp"
#include "rlparity/compare/engine_dumps.hpp"
#include "rlparity/util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0] % 3;
  ++data;
  --size;
  try {
    std::vector<rlp::compare::DumpSequence> seqs;
    if (mode == 0) {
      seqs = rlp::compare::read_combined_dump(rlp::fuzz::write_input("combined.jsonl", data, size));
    } else if (mode == 1) {
      const void* ff = std::memchr(data, '\f', size);
      const std::size_t cut = ff ? static_cast<std::size_t>(static_cast<const uint8_t*>(ff) - data) : size;
      const std::string gen = rlp::fuzz::write_input("gen.jsonl", data, cut);
      const std::size_t rest = cut < size ? cut + 1 : size;
      const std::string train = rlp::fuzz::write_input("train.jsonl", data + rest, size - rest);
      seqs = rlp::compare::read_split_dumps(gen, train);
    } else {
      const std::string dir = rlp::fuzz::scratch_dir() + "/token_exports/step_0";
      std::filesystem::create_directories(dir);
      const std::string tmp = rlp::fuzz::write_input("rank.jsonl", data, size);
      std::filesystem::rename(tmp, dir + "/rank_0.jsonl");
      std::size_t dropped = 0;
      seqs = rlp::compare::read_prime_rl_exports(dir, &dropped);
    }
    (void)rlp::compare::build_compare_run(seqs, "fuzz", nlohmann::json::object());
  } catch (const rlp::Error&) {
  }
  return 0;
}
