// Helpers shared by the unit tests that run commands or write input files: a fixture owning a
// fresh scratch directory per test, a shell command runner, and the InputError expectation.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "rlparity/util/error.hpp"

namespace rlp_test {

struct CommandResult {
  int code;            // exit status; -1 if the command did not exit normally
  std::string output;  // stdout and stderr together
};

// Runs `cmd` through the shell with stderr folded into stdout.
inline CommandResult run_command(const std::string& cmd) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return {-1, "popen failed"};
  std::string out;
  char buf[4096];
  while (std::size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// A fixture whose dir_ is a fresh, empty directory named after the test, removed afterwards.
class ScratchDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("rlp_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name() + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // Writes `bytes` to dir_/name and returns the path.
  std::string write(const std::string& name, const std::string& bytes) const {
    const std::filesystem::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p.string();
  }
  // The message of the InputError that `f` must throw (no crash, no other exception type).
  template <class F>
  std::string input_error(F&& f) {
    try {
      f();
    } catch (const rlp::InputError& e) {
      return e.what();
    }
    ADD_FAILURE() << "expected an InputError";
    return "";
  }
  std::filesystem::path dir_;
};

}  // namespace rlp_test
