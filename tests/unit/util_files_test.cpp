// The shared small utilities: the atomic text writer and the output-path pre-check
// (util/atomic_file), split_list and utc_now (util/strings), and the CLI's use of the exit-code
// table for errors (--verbose, usage errors).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "rlparity/util/atomic_file.hpp"
#include "rlparity/util/exit_codes.hpp"
#include "rlparity/util/strings.hpp"
#include "unit/scratch_test_util.hpp"

namespace {
namespace fs = std::filesystem;

class AtomicFile : public rlp_test::ScratchDirTest {
 protected:
  std::string read(const fs::path& p) const {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  std::vector<std::string> entries() const {
    std::vector<std::string> v;
    for (const auto& e : fs::directory_iterator(dir_)) v.push_back(e.path().filename().string());
    std::sort(v.begin(), v.end());
    return v;
  }
};

TEST_F(AtomicFile, WritesAndReplacesLeavingNoTemporary) {
  const std::string path = (dir_ / "out.txt").string();
  rlp::write_file_atomically(path, "first", "report");
  EXPECT_EQ(read(path), "first");
  rlp::write_file_atomically(path, "second, longer", "report");
  EXPECT_EQ(read(path), "second, longer");
  EXPECT_EQ(entries(), std::vector<std::string>{"out.txt"});
}

TEST_F(AtomicFile, RefusesPathsItCannotWriteInTheCallersWords) {
  const std::string missing = (dir_ / "nope" / "x.txt").string();
  std::string msg = input_error([&] { rlp::write_file_atomically(missing, "x", "JUnit report"); });
  EXPECT_NE(msg.find("cannot write JUnit report '" + missing + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
  fs::create_directory(dir_ / "sub");
  msg = input_error([&] { rlp::write_file_atomically((dir_ / "sub").string(), "x", "report"); });
  EXPECT_NE(msg.find("it is a directory"), std::string::npos) << msg;
  EXPECT_TRUE(fs::is_directory(dir_ / "sub"));
}

TEST_F(AtomicFile, OutputCheckRefusesAnExistingFileUnlessOverwriting) {
  const std::string path = write("run.h5", "x");
  const std::string msg = input_error([&] { rlp::check_output_path(path, "run file", false); });
  EXPECT_NE(msg.find("already exists (use --force to overwrite)"), std::string::npos) << msg;
  EXPECT_NO_THROW(rlp::check_output_path(path, "run file", true));
  EXPECT_NO_THROW(rlp::check_output_path((dir_ / "new.h5").string(), "run file", false));
  EXPECT_NE(input_error([&] { rlp::check_output_path("", "run file", false); }).find("empty"),
            std::string::npos);
}

TEST(Strings, SplitListDropsEmptyItems) {
  EXPECT_EQ(rlp::split_list("a,b,,c,"), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(rlp::split_list("").empty());
  EXPECT_EQ(rlp::split_list("bf16"), std::vector<std::string>{"bf16"});
}

TEST(Strings, UtcNowIsIso8601) {
  EXPECT_TRUE(std::regex_match(rlp::utc_now(), std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")))
      << rlp::utc_now();
}

TEST(ExitCodes, SignalsFollowTheShellConvention) {
  EXPECT_EQ(rlp::exit_code_for_signal(2), 130);
  EXPECT_EQ(rlp::exit_code_for_signal(15), 143);
  EXPECT_NE(rlp::kExitCheckpointChanged, rlp::kExitViolation);
  EXPECT_NE(rlp::kExitInternal, rlp::kExitViolation);
}

TEST_F(AtomicFile, CliErrorsExitTwoAndVerboseSaysWhere) {
  const std::string cli = RLPARITY_CLI_PATH;
  const std::string missing = (dir_ / "missing.h5").string();
  const auto quiet = rlp_test::run_command(cli + " summary " + missing);
  EXPECT_EQ(quiet.code, rlp::kExitError) << quiet.output;
  EXPECT_EQ(quiet.output.find("raised at"), std::string::npos) << quiet.output;
  for (const std::string args : {" --verbose summary ", " summary --verbose "}) {
    const auto verbose = rlp_test::run_command(cli + args + missing);
    EXPECT_EQ(verbose.code, rlp::kExitError) << verbose.output;
    EXPECT_NE(verbose.output.find("rlparity: error:"), std::string::npos) << verbose.output;
    EXPECT_NE(verbose.output.find("raised at "), std::string::npos) << verbose.output;
    EXPECT_NE(verbose.output.find(".cpp:"), std::string::npos) << verbose.output;
  }
  EXPECT_EQ(rlp_test::run_command(cli + " summary --no-such-option " + missing).code, rlp::kExitError);
  EXPECT_EQ(rlp_test::run_command(cli).code, rlp::kExitError);
}

}  // namespace
