// write_run_file / read_run_file: round trip, overwrite refusal, atomicity on failure (missing
// directory, file-size limit), schema version check, and h5py readability.
#include "rlparity/io/run_file.hpp"

#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "rlparity/metrics/statistics.hpp"
#include "rlparity/util/error.hpp"
#include "unit/h5_damage_test_util.hpp"
#include "unit/scratch_test_util.hpp"

namespace rlp {
namespace {

namespace fs = std::filesystem;

// S sequences with prompt 3 + response (2 + s % 3) tokens; two recipes with tokens, sequences,
// layers, summary and settings.
RunData make_run(int S = 4, int response_scale = 1) {
  RunData run;
  run.tool_version = "0.1.0";
  run.command_line = "rlparity replay --recipes bf16,fp8-gen";
  run.checkpoint_path = "/models/stories260K";
  run.checkpoint_hash = "abc123";
  run.created = "2024-01-01T00:00:00Z";
  run.seed = 0xFFFFFFFFFFFFFFF1ull;
  run.model_spec = {{"dim", 64}, {"n_layers", 5}, {"name", "stories260K"}};
  run.extra = {{"backend", "cpu"}, {"inputs", "fixtures/prompts.jsonl"}};
  std::mt19937 rng(5);
  run.seq_offsets.push_back(0);
  int64_t R = 0;
  for (int s = 0; s < S; ++s) {
    const int p = 3, r = (2 + s % 3) * response_scale;
    for (int i = 0; i < p + r; ++i) run.token_ids.push_back(static_cast<int32_t>(rng() % 512));
    run.seq_offsets.push_back(run.seq_offsets.back() + p + r);
    run.prompt_lengths.push_back(p);
    run.seq_ids.push_back(s % 2 ? "seq-" + std::to_string(s) : std::to_string(s));
    R += r;
  }
  std::uniform_real_distribution<double> u(-6.0, -0.01);
  for (int64_t i = 0; i < R; ++i) run.engine_logprobs.push_back(u(rng));
  for (const char* name : {"bf16", "fp8-gen"}) {
    RecipeResult rr;
    rr.name = name;
    rr.settings = {
        {"recipe", name}, {"gen", {{"attention", "split-kv:512"}}}, {"train", {{"residual", "fp32"}}}};
    std::vector<double> lg, lt, lo, kl, klr, agree;
    for (int64_t i = 0; i < R; ++i) {
      lg.push_back(u(rng));
      lt.push_back(lg.back() + 0.01 * (u(rng) + 3));
      lo.push_back(lg.back() + 0.001);
      kl.push_back(1e-3 * -u(rng));
      klr.push_back(1e-3 * -u(rng));
      agree.push_back(static_cast<double>(rng() % 2));
    }
    rr.tokens = {{"logp_gen", lg},     {"logp_train", lt},    {"logp_oracle", lo},
                 {"kl_gen_train", kl}, {"kl_train_gen", klr}, {"top1_agree", agree}};
    rr.layers["rel_l2_gen_train"] = {1e-3, 2e-3, 3e-3, 4e-3, 5e-3};
    rr.layers["rel_l2_gen_oracle"] = {1e-4, 2e-4, 3e-4, 4e-4, 5e-4};
    for (int64_t i = 0; i < R * 5; ++i) rr.token_rel_l2.push_back(static_cast<float>(u(rng)) * 1e-2f);
    compute_recipe_statistics(rr, response_offsets(run.seq_offsets, run.prompt_lengths), StatsOptions{});
    run.recipes.push_back(std::move(rr));
  }
  return run;
}

// Equal with NaN == NaN (undefined statistics, e.g. the mean of an empty sequence, are NaN).
bool same(const std::map<std::string, std::vector<double>>& a,
          const std::map<std::string, std::vector<double>>& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [k, v] : a) {
    auto it = b.find(k);
    if (it == b.end() || it->second.size() != v.size()) return false;
    for (std::size_t i = 0; i < v.size(); ++i)
      if (!(v[i] == it->second[i] || (std::isnan(v[i]) && std::isnan(it->second[i])))) return false;
  }
  return true;
}

void expect_equal(const RunData& a, const RunData& b) {
  EXPECT_EQ(a.schema_version, b.schema_version);
  EXPECT_EQ(a.tool_version, b.tool_version);
  EXPECT_EQ(a.command_line, b.command_line);
  EXPECT_EQ(a.checkpoint_path, b.checkpoint_path);
  EXPECT_EQ(a.checkpoint_hash, b.checkpoint_hash);
  EXPECT_EQ(a.created, b.created);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.model_spec, b.model_spec);
  EXPECT_EQ(a.extra, b.extra);
  EXPECT_EQ(a.token_ids, b.token_ids);
  EXPECT_EQ(a.seq_offsets, b.seq_offsets);
  EXPECT_EQ(a.prompt_lengths, b.prompt_lengths);
  EXPECT_EQ(a.seq_ids, b.seq_ids);
  EXPECT_EQ(a.engine_logprobs, b.engine_logprobs);
  ASSERT_EQ(a.recipes.size(), b.recipes.size());
  for (std::size_t i = 0; i < a.recipes.size(); ++i) {
    EXPECT_EQ(a.recipes[i].name, b.recipes[i].name);
    EXPECT_EQ(a.recipes[i].settings, b.recipes[i].settings);
    EXPECT_TRUE(same(a.recipes[i].tokens, b.recipes[i].tokens));
    EXPECT_TRUE(same(a.recipes[i].sequences, b.recipes[i].sequences));
    EXPECT_TRUE(same(a.recipes[i].layers, b.recipes[i].layers));
    EXPECT_EQ(a.recipes[i].token_rel_l2, b.recipes[i].token_rel_l2);
    // Summaries may hold NaN (e.g. undefined stds): compare bit patterns.
    ASSERT_EQ(a.recipes[i].summary.size(), b.recipes[i].summary.size());
    for (const auto& [k, v] : a.recipes[i].summary) {
      ASSERT_TRUE(b.recipes[i].summary.count(k)) << k;
      const double w = b.recipes[i].summary.at(k);
      EXPECT_TRUE(v == w || (std::isnan(v) && std::isnan(w))) << k;
    }
  }
}

class RunFileTest : public rlp_test::ScratchDirTest {
 protected:
  std::string path(const std::string& name = "run.h5") const { return (dir_ / name).string(); }
  std::size_t files_in_dir() const {
    return static_cast<std::size_t>(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()));
  }
  static std::string slurp(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "<no InputError>";
}

TEST_F(RunFileTest, RoundTrip) {
  const RunData run = make_run();
  write_run_file(path(), run, false);
  EXPECT_EQ(files_in_dir(), 1u);  // no temporary left behind
  const RunData back = read_run_file(path());
  expect_equal(run, back);
  // Recipe order is preserved (not alphabetical).
  RunData rev = run;
  std::swap(rev.recipes[0], rev.recipes[1]);
  write_run_file(path("rev.h5"), rev, false);
  EXPECT_EQ(read_run_file(path("rev.h5")).recipes[0].name, "fp8-gen");
}

TEST_F(RunFileTest, EmptyResponsesAndNoEngineLogprobs) {
  RunData run;
  run.token_ids = {1, 2, 3};
  run.seq_offsets = {0, 3};
  run.prompt_lengths = {3};
  run.seq_ids = {"only"};
  RecipeResult r;
  r.name = "bf16";
  r.tokens["logp_gen"] = {};
  r.tokens["logp_train"] = {};
  compute_recipe_statistics(r, {0, 0}, StatsOptions{});
  run.recipes.push_back(r);
  write_run_file(path(), run, false);
  expect_equal(run, read_run_file(path()));

  RunData none;  // no sequences, no recipes
  none.seq_offsets = {0};
  write_run_file(path("none.h5"), none, false);
  expect_equal(none, read_run_file(path("none.h5")));
}

TEST_F(RunFileTest, DeterministicBytes) {
  const RunData run = make_run(16, 20);
  write_run_file(path("a.h5"), run, false);
  write_run_file(path("b.h5"), run, false);
  EXPECT_EQ(slurp(path("a.h5")), slurp(path("b.h5")));
}

TEST_F(RunFileTest, RefusesOverwriteWithoutForce) {
  const RunData run = make_run();
  write_run_file(path(), run, false);
  const std::string msg = error_of([&] { write_run_file(path(), run, false); });
  EXPECT_NE(msg.find("already exists"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path()), std::string::npos) << msg;
  RunData other = make_run(2);
  write_run_file(path(), other, true);
  EXPECT_EQ(read_run_file(path()).num_sequences(), 2u);
  EXPECT_EQ(files_in_dir(), 1u);
}

TEST_F(RunFileTest, MissingDirectoryAndInconsistentData) {
  const std::string p = (dir_ / "no" / "such" / "run.h5").string();
  const std::string msg = error_of([&] { write_run_file(p, make_run(), false); });
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
  EXPECT_NE(msg.find(p), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(dir_ / "no"));

  RunData bad = make_run();
  bad.recipes[0].tokens["logp_gen"].pop_back();
  const std::string m2 = error_of([&] { write_run_file(path(), bad, false); });
  EXPECT_NE(m2.find("/recipes/bf16/tokens/logp_gen"), std::string::npos) << m2;
  EXPECT_EQ(files_in_dir(), 0u);

  if (::geteuid() != 0) {
    fs::create_directories(dir_ / "ro");
    fs::permissions(dir_ / "ro", fs::perms::owner_read | fs::perms::owner_exec);
    const std::string m3 =
        error_of([&] { write_run_file((dir_ / "ro" / "x.h5").string(), make_run(), false); });
    EXPECT_NE(m3.find("not writable"), std::string::npos) << m3;
    fs::permissions(dir_ / "ro", fs::perms::owner_all);
  }
}

// A child process with RLIMIT_FSIZE far below the file size (SIGXFSZ ignored, so write() fails with
// EFBIG like a full disk) must report an InputError and leave no file behind.
TEST_F(RunFileTest, FileSizeLimitLeavesNoFile) {
  const RunData run = make_run(64, 400);  // ~ 64 * 1200 tokens * 20 metrics * 2 recipes of doubles
  const std::string p = path();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim {
      64 * 1024, 64 * 1024
    };
    if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) ::_exit(10);
    int code = 1;  // wrote successfully: wrong
    try {
      write_run_file(p, run, false);
    } catch (const InputError& e) {
      const std::string m = e.what();
      code = m.find(p) != std::string::npos ? 0 : 3;
      std::fprintf(stderr, "child error: %s\n", e.what());
    } catch (...) {
      code = 2;
    }
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child died by a signal";
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(files_in_dir(), 0u);
  EXPECT_FALSE(fs::exists(p));
}

TEST_F(RunFileTest, SchemaVersionMismatchAndBrokenFiles) {
  write_run_file(path(), make_run(), false);
  {
    hid_t f = H5Fopen(path().c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    hid_t a = H5Aopen(f, "schema_version", H5P_DEFAULT);
    const int v = 2;
    ASSERT_GE(H5Awrite(a, H5T_NATIVE_INT, &v), 0);
    H5Aclose(a);
    H5Fclose(f);
  }
  const std::string msg = error_of([&] { read_run_file(path()); });
  EXPECT_NE(msg.find("schema version 2 not supported"), std::string::npos) << msg;
  EXPECT_NE(msg.find(path()), std::string::npos) << msg;

  // A token dataset removed: the reader names the group; a truncated one: names the dataset.
  write_run_file(path("b.h5"), make_run(), false);
  {
    hid_t f = H5Fopen(path("b.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    rlp_test::replace_f64_dataset(f, "/recipes/fp8-gen/tokens/ratio", {1, 2});
    ASSERT_GE(H5Ldelete(f, "/inputs/prompt_lengths", H5P_DEFAULT), 0);
    H5Fclose(f);
  }
  const std::string m2 = error_of([&] { read_run_file(path("b.h5")); });
  EXPECT_NE(m2.find("/inputs/prompt_lengths"), std::string::npos) << m2;

  std::ofstream(path("junk.h5")) << "not hdf5";
  EXPECT_NE(error_of([&] { read_run_file(path("junk.h5")); }).find("not an HDF5 file"), std::string::npos);
  EXPECT_NE(error_of([&] { read_run_file(path("missing.h5")); }).find("missing.h5"), std::string::npos);
}

TEST_F(RunFileTest, InconsistentLengthsOnRead) {
  write_run_file(path(), make_run(), false);
  {
    hid_t f = H5Fopen(path().c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    rlp_test::replace_f64_dataset(f, "/recipes/fp8-gen/tokens/ratio", {1, 2});
    H5Fclose(f);
  }
  const std::string m = error_of([&] { read_run_file(path()); });
  EXPECT_NE(m.find("/recipes/fp8-gen/tokens/ratio has 2 values"), std::string::npos) << m;
}

TEST_F(RunFileTest, ReadableByH5py) {
  if (std::system("/usr/bin/python3 -c 'import h5py' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "h5py not available";
  write_run_file(path(), make_run(), false);
  const std::string script = R"PY(
import sys, json, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
a = f.attrs
assert int(a["schema_version"]) == 1
for k in ["tool_version", "command_line", "checkpoint_path", "checkpoint_hash", "created", "model_spec", "extra"]:
    assert isinstance(a[k], str), k
assert int(a["seed"]) == 0xFFFFFFFFFFFFFFF1
assert json.loads(a["model_spec"])["name"] == "stories260K"
assert f["inputs/token_ids"].dtype == np.int32
assert f["inputs/seq_offsets"].dtype == np.int64
assert f["inputs/prompt_lengths"].dtype == np.int32
S = f["inputs/prompt_lengths"].shape[0]
off = f["inputs/seq_offsets"][:]
assert off.shape == (S + 1,) and off[-1] == f["inputs/token_ids"].shape[0]
ids = list(f["inputs/seq_ids"].asstr()[:])
assert ids[0] == "0" and ids[1] == "seq-1", ids
R = int(sum(off[1:] - off[:-1] - f["inputs/prompt_lengths"][:]))
assert f["inputs/engine_logprobs"].shape == (R,)
assert json.loads(f["recipes"].attrs["order"]) == ["bf16", "fp8-gen"]
for rec in ["bf16", "fp8-gen"]:
    g = f["recipes"][rec]
    assert json.loads(g.attrs["settings"])["recipe"] == rec
    for m in ["logp_gen", "logp_train", "logp_oracle", "log_ratio", "ratio", "kl_gen_train", "kl_train_gen",
              "top1_agree", "abs_log_ratio", "prob_diff", "k3", "gen_err_oracle", "train_err_oracle"]:
        d = g["tokens"][m]
        assert d.dtype == np.float64 and d.shape == (R,), m
        assert d.compression == "gzip" and d.shuffle and d.chunks is not None, m
    for m in ["length", "sum_log_ratio", "geo_mean_ratio", "max_abs_log_ratio", "mean_kl_gen_train",
              "mean_abs_log_ratio", "seq_mult_prob_error", "ppl_gen", "ppl_train"]:
        assert g["sequences"][m].shape == (S,), m
    assert g["layers"]["rel_l2_gen_train"].shape == (5,)
    for s in ["mean_abs_log_ratio", "max_abs_log_ratio", "p99_abs_log_ratio", "mean_kl_gen_train",
              "max_kl_gen_train", "ratio_mean", "ratio_std", "ess", "tis_clip_frac", "mis_mask_frac",
              "token_mult_prob_error", "gen_kl_error", "policy_kl_error", "k1", "k2", "k3", "chi2_token",
              "chi2_seq", "rollout_corr_kl", "k3_kl", "rollout_is_eff_sample_size", "rollout_probs_diff_mean",
              "rollout_probs_diff_max", "rollout_probs_diff_std", "train_rollout_logprob_abs_diff",
              "mismatch_kl", "seq_mult_prob_error", "top1_agree_frac", "num_tokens", "num_sequences",
              "mean_abs_gen_err_oracle", "mean_abs_train_err_oracle", "p999_abs_log_ratio", "ratio_p99"]:
        assert isinstance(g.attrs[s], (float, np.floating)), s
    lr = g["tokens"]["log_ratio"][:]
    assert np.allclose(g.attrs["mean_abs_log_ratio"], np.abs(lr).mean(), rtol=1e-12)
print("H5PY_OK")
)PY";
  const std::string sp = path("check.py");
  std::ofstream(sp) << script;
  const std::string cmd = "/usr/bin/python3 " + sp + " " + path() + " 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, pipe)) out += buf;
  const int rc = ::pclose(pipe);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("H5PY_OK"), std::string::npos) << out;
}

}  // namespace
}  // namespace rlp
