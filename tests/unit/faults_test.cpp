// Faults a CI gate meets on other people's machines (docs/robustness.md): the output disk full
// mid-write, a read-only checkpoint directory, a checkpoint truncated while open. The CLI runs as a
// child process (fork/exec of RLPARITY_CLI_PATH) so limits and identities apply to it alone.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "rlparity/model/checkpoint.hpp"
#include "rlparity/model/weights.hpp"
#include "rlparity/replay/recipe.hpp"
#include "rlparity/util/error.hpp"
#include "rlparity/util/exit_codes.hpp"
#include "rlparity/util/interrupt.hpp"

namespace {
namespace fs = std::filesystem;

const std::string kStories = std::string(RLPARITY_SOURCE_DIR) + "/fixtures/models/stories260K";

struct Result {
  int code = -1;   // exit status, or -1 when killed
  int signal = 0;  // the killing signal, if any
  std::string output;
};

struct ChildSetup {
  rlim_t fsize_limit = RLIM_INFINITY;  // RLIMIT_FSIZE, with SIGXFSZ ignored (writes fail with EFBIG)
  bool drop_root = false;              // run as nobody (65534) when started as root
};

// fork + exec of the CLI with `args`, stdout and stderr captured together.
Result run_cli(const std::vector<std::string>& args, const ChildSetup& setup = {}) {
  int pipefd[2];
  if (::pipe(pipefd) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(pipefd[1], STDOUT_FILENO);
    ::dup2(pipefd[1], STDERR_FILENO);
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    if (setup.fsize_limit != RLIM_INFINITY) {
      std::signal(SIGXFSZ, SIG_IGN);
      const rlimit lim{setup.fsize_limit, setup.fsize_limit};
      if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) ::_exit(120);
    }
    if (setup.drop_root && ::geteuid() == 0) {
      if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(121);
      // A private parent directory (mktemp -d makes 0700 ones) keeps nobody from the CLI itself.
      if (::access(RLPARITY_CLI_PATH, X_OK) != 0) ::_exit(123);
    }
    std::vector<char*> argv;
    std::string cli = RLPARITY_CLI_PATH;
    argv.push_back(cli.data());
    std::vector<std::string> copy = args;
    for (auto& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(cli.c_str(), argv.data());
    ::_exit(122);
  }
  ::close(pipefd[1]);
  Result r;
  char buf[4096];
  for (ssize_t n; (n = ::read(pipefd[0], buf, sizeof buf)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    r.output.append(buf, static_cast<std::size_t>(n));
  }
  ::close(pipefd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (WIFEXITED(status)) r.code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  return r;
}

class Faults : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("rlp_faults_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    inputs_ = (dir_ / "in.jsonl").string();
    std::ofstream(inputs_) << R"({"id": "a", "prompt": [1, 295, 369, 309], "response": [300, 301, 302]})"
                           << "\n"
                           << R"({"id": "b", "prompt": [1, 306], "response": [12, 13]})"
                           << "\n";
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add, ec);
    for (auto& e : fs::recursive_directory_iterator(dir_, ec))
      fs::permissions(e.path(), fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir_, ec);
  }
  std::vector<std::string> entries(const fs::path& d) const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(d)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  // A copy of the bundled stories260K checkpoint.
  fs::path copy_stories(const std::string& name) const {
    const fs::path d = dir_ / name;
    fs::create_directories(d);
    for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(fs::path(kStories) / f, d / f);
    return d;
  }
  fs::path dir_;
  std::string inputs_;
};

TEST_F(Faults, OutputFileSizeLimitMidWriteGivesClearErrorAndRemovesTemporary) {
  const fs::path out_dir = dir_ / "out";
  fs::create_directories(out_dir);
  const std::string out = (out_dir / "run.h5").string();
  ChildSetup setup;
  setup.fsize_limit = 8192;  // the run file needs more: the write fails part way (EFBIG, as on a full disk)
  const Result r = run_cli({"replay", "--quiet", "--threads", "2", "--recipes", "bf16", "--no-oracle",
                            "--inputs", inputs_, "--out", out},
                           setup);
  EXPECT_EQ(r.signal, 0) << r.output;
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.code, 3) << "not an internal error: " << r.output;
  EXPECT_NE(r.output.find("cannot write run file"), std::string::npos) << r.output;
  EXPECT_TRUE(entries(out_dir).empty()) << "left behind: " << ::testing::PrintToString(entries(out_dir));

  // The same run without the limit succeeds (the limit, not the run, caused the failure).
  const Result ok = run_cli({"replay", "--quiet", "--threads", "2", "--recipes", "bf16", "--no-oracle",
                             "--inputs", inputs_, "--out", out});
  EXPECT_EQ(ok.code, 0) << ok.output;
  EXPECT_EQ(entries(out_dir), std::vector<std::string>{"run.h5"});
}

TEST_F(Faults, OutputDirectoryRemovedBeforeWriteIsAClearError) {
  // Not writable "mid-run": the directory exists when checked up front, then is replaced by a file
  // (so even root cannot create the output in it) before the write. Simulated by pointing --out
  // under a path that is a regular file: the up-front check must refuse it the same way.
  const fs::path blocker = dir_ / "not_a_dir";
  std::ofstream(blocker) << "x";
  const Result r = run_cli({"replay", "--quiet", "--recipes", "bf16", "--no-oracle", "--inputs", inputs_,
                            "--out", (blocker / "run.h5").string()});
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.code, 3) << r.output;
  EXPECT_NE(r.output.find("does not exist"), std::string::npos) << r.output;
}

TEST_F(Faults, ReadOnlyCheckpointDirectoryWorks) {
  const fs::path ck = copy_stories("ro_ckpt");
  const auto ro = fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read;
  for (const char* f : {"config.json", "model.safetensors"}) fs::permissions(ck / f, ro);
  fs::permissions(ck, ro | fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec);
  // Root ignores permission bits, so the child drops to nobody: an open for writing would then fail.
  const fs::path out_dir = dir_ / "out";
  fs::create_directories(out_dir);
  fs::permissions(dir_, fs::perms::all);
  fs::permissions(out_dir, fs::perms::all);
  fs::permissions(inputs_, fs::perms::all);
  ChildSetup setup;
  setup.drop_root = true;
  const auto before = entries(ck);
  const Result r =
      run_cli({"replay", "--quiet", "--threads", "2", "--recipes", "bf16,fp8-gen", "--checkpoint",
               ck.string(), "--inputs", inputs_, "--out", (out_dir / "run.h5").string()},
              setup);
  if (r.code == 121) GTEST_SKIP() << "cannot drop root privileges here";
  if (r.code == 123)
    GTEST_SKIP() << "the CLI is not reachable by an unprivileged user here (private parent directory)";
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_TRUE(fs::exists(out_dir / "run.h5"));
  EXPECT_EQ(entries(ck), before) << "nothing may be created in the checkpoint directory";
  const Result insp = run_cli({"inspect", "--checkpoint", ck.string()}, setup);
  EXPECT_EQ(insp.code, 0) << insp.output;
}

// In-process: the mapping is read-only (PROT_READ), as /proc/self/maps shows.
TEST_F(Faults, CheckpointIsMappedReadOnly) {
  const fs::path ck = copy_stories("map");
  const rlp::Checkpoint c = rlp::Checkpoint::open(ck.string());
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int found = 0;
  while (std::getline(maps, line)) {
    if (line.find((ck / "model.safetensors").string()) == std::string::npos) continue;
    ++found;
    std::istringstream ss(line);
    std::string range, perms;
    ss >> range >> perms;
    EXPECT_EQ(perms.substr(0, 3), "r--") << line;
  }
  EXPECT_EQ(found, 1);
}

// A checkpoint truncated after open is detected by the re-stat before weights are prepared.
TEST_F(Faults, TruncatedAfterOpenIsDetectedBeforeReading) {
  const fs::path ck = copy_stories("trunc");
  const rlp::Checkpoint c = rlp::Checkpoint::open(ck.string());
  fs::resize_file(ck / "model.safetensors", 4096);
  try {
    (void)rlp::prepare_weights(c, rlp::make_recipe("bf16", {}).gen);
    FAIL() << "expected InputError";
  } catch (const rlp::InputError& e) {
    EXPECT_NE(std::string(e.what()).find("modified while"), std::string::npos) << e.what();
  }
  EXPECT_THROW(rlp::prepare_oracle_weights(c), rlp::InputError);
}

// Truncated after that check: reading the mapping past the new end raises SIGBUS, which the CLI's
// handler turns into one error line and exit status 4 (kExitCheckpointChanged: not the gate's 1).
TEST_F(Faults, TruncatedAfterCheckFaultBecomesCleanExit) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const fs::path ck = copy_stories("sigbus");
  EXPECT_EXIT(
      {
        rlp::install_sigbus_handler();
        const rlp::Checkpoint c = rlp::Checkpoint::open(ck.string());
        const rlp::TensorView& t = c.tensor("model.embed_tokens.weight");
        fs::resize_file(ck / "model.safetensors", 0);
        volatile float sink = 0;
        for (int64_t i = 0; i < t.numel(); i += 1024) sink = sink + t.at(i);
        std::exit(0);
      },
      ::testing::ExitedWithCode(rlp::kExitCheckpointChanged), "truncated or modified while in use");
}

}  // namespace
