// libFuzzer target: model.safetensors.index.json, through Checkpoint::open on a scratch checkpoint
// directory that holds the bundled stories260K config.json and its weights as one shard
// (model-00001-of-00001.safetensors); the fuzz input is the index file.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "fuzz_util.hpp"
#include "rlparity/model/checkpoint.hpp"
#include "rlparity/util/error.hpp"

namespace fs = std::filesystem;

namespace {
const std::string& checkpoint_dir() {
  static const std::string dir = [] {
    const std::string d = rlp::fuzz::scratch_dir() + "/ckpt";
    const fs::path src = fs::path(RLPARITY_SOURCE_FIXTURES) / "models" / "stories260K";
    fs::create_directories(d);
    fs::copy_file(src / "config.json", fs::path(d) / "config.json", fs::copy_options::overwrite_existing);
    fs::copy_file(src / "model.safetensors", fs::path(d) / "model-00001-of-00001.safetensors",
                  fs::copy_options::overwrite_existing);
    return d;
  }();
  return dir;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string& dir = checkpoint_dir();
  const std::string index = dir + "/model.safetensors.index.json";
  const std::string tmp = rlp::fuzz::write_input("index.json", data, size);
  if (std::rename(tmp.c_str(), index.c_str()) != 0) std::abort();
  try {
    const rlp::Checkpoint c = rlp::Checkpoint::open(dir);
    (void)c.content_hash();
  } catch (const rlp::Error&) {
  }
  return 0;
}
