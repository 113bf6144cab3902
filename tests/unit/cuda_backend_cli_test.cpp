// `rlparity replay --backend cuda` on a machine without a usable GPU (or a build without the CUDA
// toolkit) is one clear error and exit code 2, never a crash, and no output file. On a machine with
// a GPU the same command must succeed and record the backend in the run file.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>

#include "unit/scratch_test_util.hpp"

namespace {
namespace fs = std::filesystem;

using Result = rlp_test::CommandResult;
Result run(const std::string& cmd) { return rlp_test::run_command(cmd); }

using CudaBackendCli = rlp_test::ScratchDirTest;

TEST_F(CudaBackendCli, NoGpuIsOneClearErrorWithExitCode2) {
  const fs::path out = dir_ / "run.h5";
  const Result r = run(std::string(RLPARITY_CLI_PATH) +
                       " replay --backend cuda --max-new-tokens 3 --no-oracle -q -o " + out.string());
  if (r.code == 0) {
    // A usable GPU: the run must have written its file.
    EXPECT_TRUE(fs::exists(out)) << r.output;
    GTEST_SKIP() << "a CUDA device is present; the no-GPU error path cannot be exercised here";
  }
  EXPECT_EQ(r.code, 2) << r.output;
  const bool no_device =
      r.output.find("rlparity: error: --backend cuda: no CUDA device: ") != std::string::npos;
  const bool no_toolkit =
      r.output.find("rlparity: error: --backend cuda: this build has no CUDA backend") != std::string::npos;
  EXPECT_TRUE(no_device || no_toolkit) << r.output;
  // One line, no crash report, no output file.
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(CudaBackendCli, UnknownBackendIsRejected) {
  const Result r =
      run(std::string(RLPARITY_CLI_PATH) + " replay --backend tpu -q -o " + (dir_ / "x.h5").string());
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--backend tpu: expected cpu or cuda"), std::string::npos) << r.output;
}

// A misspelled --cuda-gemm is refused before any work, with or without a GPU or the toolkit.
TEST_F(CudaBackendCli, UnknownCudaGemmModeIsRejected) {
  for (const char* backend : {"cpu", "cuda"}) {
    const fs::path out = dir_ / "y.h5";
    const Result r = run(std::string(RLPARITY_CLI_PATH) + " replay --backend " + backend +
                         " --cuda-gemm tensorcore -q -o " + out.string());
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("--cuda-gemm tensorcore: expected cublaslt or exact"), std::string::npos)
        << r.output;
    EXPECT_FALSE(fs::exists(out));
  }
}

// The run file names the backend as a root attribute (docs/hdf5-schema.md).
TEST_F(CudaBackendCli, CpuRunRecordsItsBackend) {
  const fs::path out = dir_ / "cpu.h5";
  const Result r = run(std::string(RLPARITY_CLI_PATH) +
                       " replay --max-new-tokens 2 --no-oracle --recipes bf16 -q -o " + out.string());
  ASSERT_EQ(r.code, 0) << r.output;
  const hid_t f = H5Fopen(out.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  EXPECT_GT(H5Aexists(f, "backend"), 0);
  EXPECT_EQ(H5Aexists(f, "cuda_device_name"), 0);
  const hid_t a = H5Aopen(f, "backend", H5P_DEFAULT);
  ASSERT_GE(a, 0);
  const hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, H5T_VARIABLE);
  H5Tset_cset(t, H5T_CSET_UTF8);
  char* value = nullptr;
  ASSERT_GE(H5Aread(a, t, &value), 0);
  EXPECT_STREQ(value, "cpu");
  H5free_memory(value);
  H5Tclose(t);
  H5Aclose(a);
  H5Fclose(f);
}

}  // namespace
