// `rlparity replay` as a user runs it: the embedded default from any directory, the HDF5 file read
// back by h5py with no custom code, and every bad input giving a clear error, a non-zero exit and
// no output file.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "unit/scratch_test_util.hpp"

namespace {
namespace fs = std::filesystem;

using Result = rlp_test::CommandResult;
using rlp_test::run_command;
Result run(const std::string& cmd) { return run_command(cmd); }

class ReplayCli : public rlp_test::ScratchDirTest {
 protected:
  std::string cli() const { return RLPARITY_CLI_PATH; }
  // No file (final or temporary) left in the scratch directory but the inputs.
  bool only_inputs_left() const {
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path().extension() != ".jsonl") return false;
    return true;
  }
};

TEST_F(ReplayCli, DefaultRunFromAnotherDirectoryWritesAReadableFile) {
  const Result r = run("cd " + dir_.string() + " && " + cli() + " replay --max-new-tokens 6");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("fp8-e2e"), std::string::npos) << r.output;
  const fs::path out = dir_ / "rlparity-replay.h5";
  ASSERT_TRUE(fs::exists(out));
  // Refuses to overwrite without --force.
  const Result again = run("cd " + dir_.string() + " && " + cli() + " replay --max-new-tokens 6");
  EXPECT_NE(again.code, 0);
  EXPECT_NE(again.output.find("--force"), std::string::npos) << again.output;

  if (std::system("/usr/bin/python3 -c 'import h5py' 2>/dev/null") != 0)
    GTEST_SKIP() << "python3-h5py not installed";
  const std::string script = write("check.py", R"(
import h5py, json, sys
f = h5py.File(sys.argv[1], "r")
for a in ["schema_version", "tool_version", "command_line", "checkpoint_path", "checkpoint_hash", "seed"]:
    assert a in f.attrs, a
assert int(f.attrs["schema_version"]) == 1
ids, off, pl = f["/inputs/token_ids"], f["/inputs/seq_offsets"], f["/inputs/prompt_lengths"]
assert ids.dtype == "int32" and off.dtype == "int64" and pl.dtype == "int32"
assert len(off) == len(pl) + 1 and off[-1] == len(ids)
n_resp = int(sum(off[i + 1] - off[i] - pl[i] for i in range(len(pl))))
for r in ["bf16", "fp8-gen", "fp8-e2e"]:
    g = f["/recipes/" + r]
    for m in ["logp_gen", "logp_train", "logp_oracle", "log_ratio", "ratio", "kl_gen_train", "kl_train_gen", "top1_agree"]:
        assert g["tokens/" + m].shape == (n_resp,), (r, m)
    for s in ["mean_abs_log_ratio", "max_abs_log_ratio", "p99_abs_log_ratio", "mean_kl_gen_train", "max_kl_gen_train",
              "ratio_mean", "ratio_std", "ess", "tis_clip_frac", "mis_mask_frac", "token_mult_prob_error"]:
        assert s in g.attrs, (r, s)
    json.loads(g.attrs["settings"])
    assert len(g["sequences"].keys()) > 0 and len(g["layers"].keys()) > 0
print("ok")
)");
  const Result py = run("/usr/bin/python3 " + script + " " + out.string());
  EXPECT_EQ(py.code, 0) << py.output;
}

struct BadInput {
  const char* name;
  const char* jsonl;  // nullptr: use the default inputs
  const char* extra_args;
  const char* message;  // expected in the error output
};

TEST_F(ReplayCli, BadInputsFailCleanlyWithNoOutputFile) {
  const BadInput cases[] = {
      {"malformed json", "{\"id\": 1, \"prompt\": [1, 2]}\n{\"id\": 2, \"prompt\": [1, 2\n", "", "line 2"},
      {"id out of vocabulary", "{\"id\": 1, \"prompt\": [1, 512]}\n", "", "512"},
      {"empty prompt", "{\"id\": 1, \"prompt\": []}\n", "", "line 1"},
      {"response longer than the context", nullptr, "--max-new-tokens 3", ""},
      {"unknown recipe", "{\"id\": 1, \"prompt\": [1, 5], \"response\": [7]}\n", "--recipes bf16,fp4", "fp4"},
      {"unknown knob value", "{\"id\": 1, \"prompt\": [1, 5], \"response\": [7]}\n", "--gen-attention ring",
       "ring"},
      {"empty file", "", "", "no"},
  };
  for (const auto& c : cases) {
    std::string inputs;
    if (c.jsonl) {
      inputs = write("in.jsonl", c.jsonl);
    } else {
      std::string long_line = "{\"id\": 1, \"prompt\": [1";
      for (int i = 0; i < 600; ++i) long_line += ", 5";
      inputs = write("in.jsonl", long_line + "]}\n");
    }
    const std::string out = (dir_ / "out.h5").string();
    const Result r = run(cli() + " replay -q --inputs " + inputs + " --out " + out + " " + c.extra_args);
    EXPECT_NE(r.code, 0) << c.name << ": " << r.output;
    EXPECT_NE(r.output.find("error"), std::string::npos) << c.name << ": " << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.name << ": " << r.output;
    EXPECT_TRUE(only_inputs_left()) << c.name;
  }
  // An output path that cannot be written.
  const std::string ok = write("ok.jsonl", "{\"id\": 1, \"prompt\": [1, 5], \"response\": [7]}\n");
  for (const std::string bad : {"/nonexistent-dir/x.h5", "/proc/rlp.h5"}) {
    const Result r = run(cli() + " replay -q --inputs " + ok + " --out " + bad);
    EXPECT_NE(r.code, 0) << bad;
    EXPECT_NE(r.output.find("error"), std::string::npos) << r.output;
  }
}

TEST_F(ReplayCli, InterruptLeavesNoOutput) {
  for (const auto& [sig, code] : {std::pair{"INT", 130}, std::pair{"TERM", 143}}) {
    // A run long enough to be interrupted mid-way (seconds of work before the first write). The
    // signal is sent once the handlers are installed (SigCgt has SIGINT's bit), then half a second
    // into the work: on a loaded machine a fixed delay could signal a process not started yet.
    const std::string out = (dir_ / "int.h5").string();
    const std::string wait_for_handlers =
        "i=0; while [ $i -lt 1200 ]; do m=$(awk '/SigCgt/{print $2}' /proc/$pid/status 2>/dev/null); "
        "[ -n \"$m\" ] && [ $(( 0x$m & 2 )) -ne 0 ] && break; sleep 0.05; i=$((i+1)); done; sleep 0.5; ";
    const Result r =
        run("cd " + dir_.string() + " && (" + cli() +
            " replay -q --recipes bf16,fp8-gen,fp8-e2e,fp8-e2e-kv,fp16 --max-new-tokens 400 --out " + out +
            " & pid=$!; " + wait_for_handlers + "kill -" + sig + " $pid; wait $pid)");
    EXPECT_EQ(r.code, code) << sig << ": " << r.output;  // 128 + the signal, as shells report it
    EXPECT_NE(r.output.find("interrupted"), std::string::npos) << r.output;
    EXPECT_TRUE(only_inputs_left()) << sig;
  }
}

}  // namespace
