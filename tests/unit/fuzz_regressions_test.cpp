// Every input that crashed a fuzz target (tests/fuzz, saved in fixtures/fuzz/regressions/ as
// <target>-<what>) now gives a clean InputError, checked here through the same entry points the
// target drives; plus in-memory variants deep enough to overflow the stack of an unsanitized
// release build. See docs/robustness.md.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "model/safetensors.hpp"
#include "rlparity/compare/engine_dumps.hpp"
#include "rlparity/io/run_file.hpp"
#include "rlparity/model/checkpoint.hpp"
#include "rlparity/replay/inputs.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/json_depth.hpp"
#include "unit/h5_damage_test_util.hpp"
#include "unit/scratch_test_util.hpp"

namespace {
namespace fs = std::filesystem;
const fs::path kRegressions = fs::path(RLPARITY_SOURCE_DIR) / "fixtures" / "fuzz" / "regressions";
const fs::path kStories = fs::path(RLPARITY_SOURCE_DIR) / "fixtures" / "models" / "stories260K";

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class FuzzRegressions : public rlp_test::ScratchDirTest {
 protected:
  // Replays one saved input the way its fuzz target does.
  void replay(const fs::path& input) {
    const std::string name = input.filename().string();
    const std::string target = name.substr(0, name.find('-'));
    const std::string bytes = read_file(input);
    SCOPED_TRACE(name);
    std::string msg;
    if (target == "fuzz_safetensors") {
      const std::string p = write("model.safetensors", bytes);
      msg = input_error([&] { rlp::detail::SafetensorsFile f(p); });
    } else if (target == "fuzz_config_json" || target == "fuzz_index_json") {
      // Both go through Checkpoint::open's reader.
      fs::create_directories(dir_ / "ck");
      if (target == "fuzz_config_json") {
        write("ck/config.json", bytes);
        fs::copy_file(kStories / "model.safetensors", dir_ / "ck" / "model.safetensors");
      } else {
        write("ck/model.safetensors.index.json", bytes);
        fs::copy_file(kStories / "config.json", dir_ / "ck" / "config.json");
        fs::copy_file(kStories / "model.safetensors", dir_ / "ck" / "model-00001-of-00001.safetensors");
      }
      msg = input_error([&] { rlp::Checkpoint::open((dir_ / "ck").string()); });
    } else if (target == "fuzz_inputs_jsonl") {
      const std::string p = write("in.jsonl", bytes);
      msg = input_error([&] { rlp::read_inputs_jsonl(p, 512, 512); });
    } else if (target == "fuzz_dumps") {
      ASSERT_FALSE(bytes.empty());
      ASSERT_EQ(bytes[0] % 3, 0) << "only combined-dump regressions so far";
      const std::string p = write("d.jsonl", bytes.substr(1));
      msg = input_error([&] { rlp::compare::read_combined_dump(p); });
    } else if (target == "fuzz_run_file") {
      const std::string p = write("run.h5", bytes);
      msg = input_error([&] { rlp::read_run_file(p); });
    } else {
      FAIL() << "no replay rule for target " << target;
    }
    if (name.find("deep-nesting") != std::string::npos) {
      EXPECT_NE(msg.find("nested deeper than"), std::string::npos) << msg;
    }
    if (name.find("beyond-file") != std::string::npos) {
      EXPECT_NE(msg.find("bytes can hold"), std::string::npos) << msg;
    }
  }
};

TEST_F(FuzzRegressions, SavedInputsGiveInputErrors) {
  ASSERT_TRUE(fs::is_directory(kRegressions));
  int n = 0;
  for (const auto& e : fs::directory_iterator(kRegressions)) {
    replay(e.path());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ++n;
  }
  EXPECT_GE(n, 4);
}

std::string nest(std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

// Deep enough to overflow an 8 MiB stack in nlohmann's recursive dump() in any build.
constexpr std::size_t kDeep = 300000;

TEST_F(FuzzRegressions, DeepNestingInSafetensorsHeader) {
  const std::string h = R"({"a":{"dtype":"F32","shape":)" + nest(kDeep) + R"(,"data_offsets":[0,0]}})";
  std::string b(8, '\0');
  for (int k = 0; k < 8; ++k)
    b[static_cast<std::size_t>(k)] = static_cast<char>((h.size() >> (8 * k)) & 0xFF);
  const std::string p = write("model.safetensors", b + h);
  const std::string msg = input_error([&] { rlp::detail::SafetensorsFile f(p); });
  EXPECT_NE(msg.find("nested deeper than 128 levels"), std::string::npos) << msg;
}

TEST_F(FuzzRegressions, DeepNestingInConfigJson) {
  fs::create_directories(dir_ / "ck");
  write("ck/config.json", R"({"architectures": ["LlamaForCausalLM"], "hidden_size": )" + nest(kDeep) + "}");
  fs::copy_file(kStories / "model.safetensors", dir_ / "ck" / "model.safetensors");
  const std::string msg = input_error([&] { rlp::Checkpoint::open((dir_ / "ck").string()); });
  EXPECT_NE(msg.find("config.json: JSON is nested deeper"), std::string::npos) << msg;
}

TEST_F(FuzzRegressions, DeepNestingInInputsAndDumps) {
  const std::string in = write("in.jsonl", R"({"id": "a", "prompt": [1]})"
                                           "\n"
                                           R"({"id": "b", "prompt": [)" +
                                               nest(kDeep) + "]}\n");
  std::string msg = input_error([&] { rlp::read_inputs_jsonl(in, 512, 512); });
  EXPECT_NE(msg.find("line 2: JSON is nested deeper"), std::string::npos) << msg;
  const std::string d = write("d.jsonl", R"({"id": "a", "response": [)" + nest(kDeep) + "]}\n");
  msg = input_error([&] { rlp::compare::read_combined_dump(d); });
  EXPECT_NE(msg.find(d + ":1: JSON is nested deeper"), std::string::npos) << msg;
}

TEST_F(FuzzRegressions, DeepNestingInRunFileJsonAttribute) {
  // A valid run file whose "extra" attribute is replaced by a deeply nested JSON string.
  rlp::RunData run;
  run.tool_version = "test";
  run.seq_offsets = {0, 2};
  run.prompt_lengths = {1};
  run.token_ids = {1, 2};
  run.seq_ids = {"a"};
  run.model_spec = nlohmann::json::object();
  run.extra = nlohmann::json::object();
  const std::string p = (dir_ / "run.h5").string();
  rlp::write_run_file(p, run, false);
  ASSERT_NO_THROW(rlp::read_run_file(p));
  {
    const hid_t f = H5Fopen(p.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    rlp_test::replace_string_attr(f, "extra", nest(kDeep));
    H5Fclose(f);
  }
  const std::string msg = input_error([&] { rlp::read_run_file(p); });
  EXPECT_NE(msg.find("nested deeper than 128 levels"), std::string::npos) << msg;
}

TEST(JsonDepth, CountsBracketsOutsideStrings) {
  EXPECT_EQ(rlp::json_nesting_depth("{}"), 1u);
  EXPECT_EQ(rlp::json_nesting_depth(R"({"a": [[1], {"b": []}]})"), 4u);
  EXPECT_EQ(rlp::json_nesting_depth(R"({"a": "[[[[\"[[[", "b": 1})"), 1u);
  EXPECT_EQ(rlp::json_nesting_depth("3"), 0u);
  EXPECT_EQ(rlp::json_nesting_depth("]]]]["), 1u);
  EXPECT_NO_THROW(rlp::check_json_depth(nest(rlp::kMaxJsonDepth), "x"));
  EXPECT_THROW(rlp::check_json_depth(nest(rlp::kMaxJsonDepth + 1), "x"), rlp::InputError);
}

}  // namespace
