// Scale-out (docs/scale-out.md): `mpirun -np K rlparity replay` shards the sequences over K ranks
// and rank 0 writes one run file, bit-identical to the single process's for any K (every dataset
// and attribute but times, paths and the command line, compared by tools/same-bits.py with h5py).
// The mpirun tests skip themselves in a build without MPI (the asan preset builds one).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <numeric>
#include <string>
#include <thread>

#include "rlparity/dist/job.hpp"
#include "rlparity/replay/sequence_sharding.hpp"
#include "unit/scratch_test_util.hpp"

namespace {
namespace fs = std::filesystem;
using rlp::InputSequence;

InputSequence seq(int prompt, int response) {
  InputSequence s;
  s.prompt.assign(static_cast<std::size_t>(prompt), 1);
  s.response.assign(static_cast<std::size_t>(response), 2);
  s.has_response = response > 0;
  return s;
}

TEST(Sharding, BalancesCostNotCountAndCoversEverySequenceOnce) {
  // One long sequence (cost 10 + 2 x 500) and nine short ones (cost 4 + 2 x 8): two ranks get the long
  // one alone and the nine short ones together.
  std::vector<InputSequence> in{seq(4, 8), seq(10, 500)};
  for (int i = 0; i < 8; ++i) in.push_back(seq(4, 8));
  const rlp::Sharding s = rlp::shard_sequences(in, 2, 1, 16, 512);
  EXPECT_EQ(s.owner[1], 0);
  EXPECT_EQ(s.sequences[0], (std::vector<std::size_t>{1}));
  EXPECT_EQ(s.sequences[1].size(), 9u);
  EXPECT_EQ(s.mine(), s.sequences[1]);
  EXPECT_TRUE(s.owns(0));
  EXPECT_FALSE(s.owns(1));
  // Missing responses count at --max-new-tokens, capped by the context: a 500-token prompt in a
  // 512-token context can grow by 12 tokens only (cost 524), less than 30 + 2 x 256.
  std::vector<InputSequence> sampled{seq(500, 0), seq(30, 0), seq(40, 0)};
  const rlp::Sharding t = rlp::shard_sequences(sampled, 2, 0, 256, 512);
  EXPECT_EQ(t.owner, (std::vector<int>{1, 1, 0}));
}

TEST(Sharding, MoreRanksThanSequencesLeavesRanksEmpty) {
  const std::vector<InputSequence> in{seq(4, 4), seq(4, 4)};
  const rlp::Sharding s = rlp::shard_sequences(in, 5, 3, 16, 512);
  std::size_t total = 0;
  for (const auto& r : s.sequences) total += r.size();
  EXPECT_EQ(total, 2u);
  EXPECT_EQ(s.owner, (std::vector<int>{0, 1}));  // ties go to the lowest rank
  EXPECT_TRUE(s.mine().empty());
}

TEST(Job, OneProcessRunsTheStepAndReportsItsProgress) {
  rlp::Job& job = rlp::Job::current();  // not started by a launcher: one process
  ASSERT_FALSE(job.distributed());
  EXPECT_EQ(job.rank(), 0);
  EXPECT_EQ(job.all_gather("abc"), (std::vector<std::string>{"abc"}));
  std::vector<std::pair<int64_t, int64_t>> seen;
  job.run_step(
      [](const rlp::Job::Report& report) {
        report(3);
        report(7);
      },
      7, [&](int64_t d, int64_t t) { seen.emplace_back(d, t); });
  EXPECT_EQ(seen, (std::vector<std::pair<int64_t, int64_t>>{{3, 7}, {7, 7}}));
  // Alone, a failing step's own exception reaches the caller unchanged.
  EXPECT_THROW(job.run_step([](const rlp::Job::Report&) { RLP_THROW_INPUT("bad"); }, 0), rlp::InputError);
}

#ifdef RLPARITY_MPIEXEC
class ScaleOut : public rlp_test::ScratchDirTest {
 protected:
  // mpirun as the tests run it: as root in containers, more ranks than cores, shared memory only.
  static std::string mpirun(int ranks) {
    return "OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_rmaps_base_oversubscribe=1 " +
           std::string(RLPARITY_MPIEXEC) + " --allow-run-as-root --oversubscribe -np " +
           std::to_string(ranks) + " ";
  }
  static std::string cli() { return RLPARITY_CLI_PATH; }
  static bool have_h5py() { return std::system("/usr/bin/python3 -c 'import h5py' 2>/dev/null") == 0; }
  // Every dataset and attribute of dir_/a/run.h5 and dir_/b/run.h5 identical, bit for bit.
  void expect_same_bits(const std::string& a, const std::string& b, const std::string& file = "run.h5") {
    const auto r = rlp_test::run_command("/usr/bin/python3 " + std::string(RLPARITY_SOURCE_DIR) +
                                         "/tools/same-bits.py " + (dir_ / a).string() + " " +
                                         (dir_ / b).string() + " " + file);
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("same bits"), std::string::npos) << r.output;
  }
  std::string mkdir(const std::string& name) {
    fs::create_directories(dir_ / name);
    return (dir_ / name).string();
  }
};

// Sampled responses, the fp8 KV-cache calibration, three recipes and the oracle: each sharded step
// of the replay, gathered, equals the single process, for 2 and 3 ranks (16 sequences: 8 and 5-6 a
// rank) and --threads 1 or 2 a rank.
TEST_F(ScaleOut, ReplayIsBitIdenticalToOneProcessForTwoAndThreeRanks) {
  if (!have_h5py()) GTEST_SKIP() << "python3-h5py not installed";
  const std::string args =
      " replay --recipes bf16,fp8-gen,fp8-e2e-kv --max-new-tokens 12 --temperature 0.8 -q";
  const auto one = rlp_test::run_command(cli() + args + " --threads 2 -o " + mkdir("one") + "/run.h5");
  ASSERT_EQ(one.code, 0) << one.output;
  for (const int k : {2, 3}) {
    const std::string name = "np" + std::to_string(k);
    const auto r = rlp_test::run_command(mpirun(k) + cli() + args + " --threads " + (k == 2 ? "1" : "2") +
                                         " -o " + mkdir(name) + "/run.h5");
    ASSERT_EQ(r.code, 0) << r.output;
    expect_same_bits("one", name);
  }
}

// Rank 0's progress bar counts every rank's tokens: it ends at the job's total, not at its own share.
TEST_F(ScaleOut, RankZeroShowsTheWholeJobsProgress) {
  const auto r =
      rlp_test::run_command(mpirun(3) + cli() + " replay --recipes bf16 --max-new-tokens 12 --progress -o " +
                            (dir_ / "run.h5").string());
  ASSERT_EQ(r.code, 0) << r.output;
  const auto bar = r.output.rfind("] ");
  ASSERT_NE(bar, std::string::npos) << r.output;
  long done = -1, total = -2;
  ASSERT_EQ(std::sscanf(r.output.c_str() + bar, "] %ld/%ld tokens", &done, &total), 2) << r.output;
  EXPECT_EQ(done, total) << r.output;
  const std::string all = std::to_string(total) + " response tokens";
  EXPECT_NE(r.output.find(all), std::string::npos) << r.output;
}

// A sweep shards each point's sequences; its file equals the single process's too.
TEST_F(ScaleOut, SweepIsBitIdenticalToOneProcess) {
  if (!have_h5py()) GTEST_SKIP() << "python3-h5py not installed";
  const std::string args = " sweep --grid gen-kv-cache=bf16,fp8 --recipes bf16 --max-new-tokens 6 -q";
  ASSERT_EQ(rlp_test::run_command(cli() + args + " -o " + mkdir("one") + "/sweep.h5").code, 0);
  const auto r = rlp_test::run_command(mpirun(2) + cli() + args + " -o " + mkdir("np2") + "/sweep.h5");
  ASSERT_EQ(r.code, 0) << r.output;
  expect_same_bits("one", "np2", "sweep.h5");
}

// inspect shards the tensors (stories260K: 5 layers x 7 projections over 3 ranks).
TEST_F(ScaleOut, InspectIsBitIdenticalToOneProcess) {
  if (!have_h5py()) GTEST_SKIP() << "python3-h5py not installed";
  ASSERT_EQ(rlp_test::run_command(cli() + " inspect -q -o " + mkdir("one") + "/inspect.h5").code, 0);
  const auto r = rlp_test::run_command(mpirun(3) + cli() + " inspect -q -o " + mkdir("np3") + "/inspect.h5");
  ASSERT_EQ(r.code, 0) << r.output;
  expect_same_bits("one", "np3", "inspect.h5");
}

TEST_F(ScaleOut, MoreRanksThanSequences) {
  if (!have_h5py()) GTEST_SKIP() << "python3-h5py not installed";
  const std::string in = write("two.jsonl",
                               "{\"id\": \"a\", \"prompt\": [1, 295, 369], \"response\": [309, 50, 51]}\n"
                               "{\"id\": \"b\", \"prompt\": [1, 306], \"response\": [462, 449]}\n");
  const std::string args = " replay --inputs " + in + " --recipes bf16,fp8-e2e -q";
  ASSERT_EQ(rlp_test::run_command(cli() + args + " -o " + mkdir("one") + "/run.h5").code, 0);
  const auto r = rlp_test::run_command(mpirun(3) + cli() + args + " -o " + mkdir("np3") + "/run.h5");
  ASSERT_EQ(r.code, 0) << r.output;
  expect_same_bits("one", "np3");
}

// The bad sequence (a prompt filling the 512-token context, so nothing can be sampled) is rank 1's:
// the costliest sequence goes to rank 0 first. Every rank stops, rank 0 prints the reason once,
// naming the rank, the job exits 2 and no file is left.
TEST_F(ScaleOut, ABadInputOnOneRanksShardStopsTheJobWithItsReason) {
  std::string long_prompt, full_prompt, response;
  for (int i = 0; i < 300; ++i) long_prompt += (i ? ", " : "") + std::to_string(1 + i % 400);
  for (int i = 0; i < 200; ++i) response += (i ? ", " : "") + std::to_string(1 + i % 400);
  for (int i = 0; i < 512; ++i) full_prompt += (i ? ", " : "") + std::to_string(1 + i % 400);
  const std::string in =
      write("bad.jsonl", "{\"id\": \"long\", \"prompt\": [" + long_prompt + "], \"response\": [" + response +
                             "]}\n{\"id\": \"full\", \"prompt\": [" + full_prompt +
                             "]}\n{\"id\": \"short\", \"prompt\": [1, 2, 3]}\n");
  const std::string out = (dir_ / "run.h5").string();
  const auto r = rlp_test::run_command(
      mpirun(3) + cli() + " replay --recipes bf16 --max-new-tokens 4 --inputs " + in + " -o " + out);
  EXPECT_NE(r.code, 0) << r.output;
  const std::string reason =
      "rank 1 of 3: sequence 'full' (line 2): its prompt of 512 tokens fills the context";
  const auto at = r.output.find(reason);
  ASSERT_NE(at, std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(reason, at + 1), std::string::npos) << "printed more than once:\n" << r.output;
  EXPECT_FALSE(fs::exists(out));
  for (const auto& e : fs::directory_iterator(dir_)) EXPECT_EQ(e.path().extension(), ".jsonl") << e.path();
}

// SIGTERM to mpirun mid-replay: the job stops with a non-zero status and leaves no file behind.
TEST_F(ScaleOut, SigtermStopsTheJobWithNoOutput) {
  const std::string out = (dir_ / "run.h5").string();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    const std::string cmd = "exec " + mpirun(2) + cli() +
                            " replay --max-new-tokens 400 --recipes bf16,fp8-gen,fp8-e2e -q -o " + out +
                            " >/dev/null 2>&1";
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  std::this_thread::sleep_for(std::chrono::seconds(3));
  ::kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_FALSE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_FALSE(fs::exists(out));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // ranks exit after mpirun reports
  for (const auto& e : fs::directory_iterator(dir_)) ADD_FAILURE() << "left behind: " << e.path();
}

TEST_F(ScaleOut, CommandsThatDoNotShareWorkRefuseToRunInAJob) {
  const auto r = rlp_test::run_command(mpirun(2) + cli() + " selfcheck");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("`rlparity selfcheck` runs as one process"), std::string::npos) << r.output;
}
#endif

}  // namespace
