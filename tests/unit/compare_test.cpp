// compare: dump readers (combined JSONL, gen/train pair, prime-rl token export), statistics on
// hand-built dumps checked against hand-computed values, every bad input, and the CLI.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "rlparity/compare/engine_dumps.hpp"
#include "rlparity/io/run_file.hpp"
#include "rlparity/util/error.hpp"
#include "unit/gate_test_util.hpp"

using namespace rlp;
using namespace rlp::compare;
using rlp_test::input_error_message;
using rlp_test::TempDir;
using rlp_test::write_text;

namespace {

// Sequence a: prompt [1, 2], response [10, 11], lg = [-1.0, -2.0], lt = [-1.1, -1.8]
// Sequence b: prompt [3],    response [12],     lg = [-0.5],       lt = [-0.5]
const char* kCombined =
    R"({"id": "a", "prompt": [1, 2], "response": [10, 11], "gen_logprobs": [-1.0, -2.0], "train_logprobs": [-1.1, -1.8]})"
    "\n\n"
    R"({"id": 7, "prompt": [3], "response": [12], "gen_logprobs": [-0.5], "train_logprobs": [-0.5], "extra": "ignored"})"
    "\n";

}  // namespace

TEST(CompareDumps, HandComputedStatistics) {
  TempDir d("cmp");
  write_text(d / "dump.jsonl", kCombined);
  const auto seqs = read_combined_dump(d / "dump.jsonl");
  ASSERT_EQ(seqs.size(), 2u);
  EXPECT_EQ(seqs[1].id, "7");
  const RunData run = build_compare_run(seqs, "vllm-vs-fsdp", {{"format", "jsonl"}});
  EXPECT_EQ(run.token_ids, (std::vector<int32_t>{1, 2, 10, 11, 3, 12}));
  EXPECT_EQ(run.seq_offsets, (std::vector<int64_t>{0, 4, 6}));
  EXPECT_EQ(run.prompt_lengths, (std::vector<int32_t>{2, 1}));
  ASSERT_EQ(run.recipes.size(), 1u);
  const RecipeResult& r = run.recipes[0];
  EXPECT_EQ(r.name, "vllm-vs-fsdp");
  EXPECT_EQ(r.tokens.count("logp_oracle"), 0u);
  EXPECT_TRUE(r.layers.empty());
  EXPECT_EQ(r.settings["kl_estimators"], kKlEstimatorNote);
  EXPECT_EQ(run.extra["kl_estimators"], kKlEstimatorNote);
  const auto& s = r.summary;
  const double tol = 1e-12;
  // dlogp = lt - lg = [-0.1, +0.2, 0.0]; |dlogp| = [0.1, 0.2, 0]
  EXPECT_NEAR(s.at("mean_abs_log_ratio"), 0.1, tol);  // (0.1 + 0.2 + 0) / 3
  EXPECT_NEAR(s.at("max_abs_log_ratio"), 0.2, tol);
  // r = exp(dlogp) = [0.904837418, 1.221402758, 1]; mean = 3.126240176 / 3
  EXPECT_NEAR(s.at("ratio_mean"), 1.0420800587320431, tol);
  // token_mult_prob_error = mean exp|dlogp| = (1.105170918 + 1.221402758 + 1) / 3
  EXPECT_NEAR(s.at("token_mult_prob_error"), 1.1088578920786059, tol);
  // k1 = mean(lg - lt) = (0.1 - 0.2 + 0) / 3 (rollout_corr_kl is the same number)
  EXPECT_NEAR(s.at("k1"), -0.1 / 3, tol);
  EXPECT_NEAR(s.at("rollout_corr_kl"), -0.1 / 3, tol);
  // k3 = mean(r - 1 - dlogp) = (0.004837418 + 0.021402758 + 0) / 3 (= gen_kl_error = mismatch_kl)
  EXPECT_NEAR(s.at("k3"), 0.008746725398709835, tol);
  EXPECT_NEAR(s.at("gen_kl_error"), 0.008746725398709835, tol);
  EXPECT_NEAR(s.at("mismatch_kl"), 0.008746725398709835, tol);
  // ess = (sum r)^2 / (n sum r^2) = 3.126240176^2 / (3 * 3.310555451)
  EXPECT_NEAR(s.at("ess"), 0.9840622200462303, tol);
  // chi2_token = mean r^2 - 1 = 3.310555451 / 3 - 1
  EXPECT_NEAR(s.at("chi2_token"), 0.10351848357308402, tol);
  // prob diff = |e^lt - e^lg| averaged
  EXPECT_NEAR(s.at("rollout_probs_diff_mean"), 0.021657320819445536, tol);
  EXPECT_EQ(s.at("num_tokens"), 3.0);
  EXPECT_EQ(s.at("num_sequences"), 2.0);
  EXPECT_EQ(s.count("top1_agree_frac"), 0u);
  EXPECT_EQ(s.count("mean_kl_gen_train"), 0u);
  // Per sequence a: sum dlogp = 0.1, geometric mean ratio = exp(0.05), mean exp|d| = (e^0.1 + e^0.2)/2
  EXPECT_NEAR(r.sequences.at("sum_log_ratio")[0], 0.1, tol);
  EXPECT_NEAR(r.sequences.at("geo_mean_ratio")[0], 1.051271096376024, tol);
  EXPECT_NEAR(r.sequences.at("seq_mult_prob_error")[0], 1.1632868381179087, tol);
  EXPECT_NEAR(r.sequences.at("ppl_gen")[0], 4.4816890703380645, 1e-12);  // exp(3 / 2)
  EXPECT_EQ(r.sequences.at("length")[1], 1.0);

  // It writes and reads back.
  write_run_file(d / "out.h5", run, false);
  const RunData back = read_run_file(d / "out.h5");
  EXPECT_EQ(back.seq_ids, (std::vector<std::string>{"a", "7"}));
  EXPECT_NEAR(back.recipes[0].summary.at("gen_kl_error"), 0.008746725398709835, tol);
}

TEST(CompareDumps, SplitFilesJoinOnId) {
  TempDir d("cmp");
  write_text(d / "gen.jsonl", R"({"id": "a", "prompt": [1, 2], "response": [10, 11], "logprobs": [-1.0, -2.0]}
{"id": "b", "prompt": [3], "response": [12], "logprobs": [-0.5]}
)");
  write_text(d / "train.jsonl", R"({"id": "b", "prompt": [3], "response": [12], "logprobs": [-0.5]}
{"id": "a", "prompt": [1, 2], "response": [10, 11], "logprobs": [-1.1, -1.8]}
)");
  const auto seqs = read_split_dumps(d / "gen.jsonl", d / "train.jsonl");
  ASSERT_EQ(seqs.size(), 2u);
  EXPECT_EQ(seqs[0].id, "a");
  EXPECT_EQ(seqs[0].train_logprobs, (std::vector<double>{-1.1, -1.8}));
  const RunData run = build_compare_run(seqs, "compare", {{"format", "jsonl-pair"}});
  EXPECT_NEAR(run.recipes[0].summary.at("token_mult_prob_error"), 1.1088578920786059, 1e-12);
}

TEST(CompareDumps, PrimeRlTokenExport) {
  TempDir d("prime");
  std::filesystem::create_directories(d.path() / "token_exports" / "step_3");
  std::filesystem::create_directories(d.path() / "token_exports" / "step_10");
  // positions: prompt 1 2 | response 10 11 | tool 50 (unmasked, dropped) | response 12
  write_text(
      d / "token_exports/step_3/rank_0.jsonl",
      R"({"schema_version":1,"step":3,"export_step":3,"rank":0,"micro_step":0,"micro_sequence_idx":0,"export_sequence_idx":0,"run_id":null,"env_name":"x","token_ids":[1,2,10,11,50,12],"position_ids":[0,1,2,3,4,5],"loss_mask":[false,false,true,true,false,true],"inference_logprobs":[0.0,0.0,-1.0,-2.0,0.0,-0.5],"trainer_logprobs":[0.0,0.0,-1.1,-1.8,0.0,-0.5],"entropy":[0,0,0,0,0,0]})"
      "\n");
  write_text(
      d / "token_exports/step_10/rank_1.jsonl",
      R"({"step":10,"export_step":10,"rank":1,"export_sequence_idx":0,"token_ids":[4,13],"loss_mask":[false,true],"inference_logprobs":[0.0,-0.25],"trainer_logprobs":[0.0,-0.25]})"
      "\n");
  std::size_t dropped = 0;
  std::vector<std::string> files;
  for (const std::string& dir : std::vector<std::string>{d.path().string(), d / "token_exports"}) {
    files.clear();
    const auto seqs = read_prime_rl_exports(dir, &dropped, &files);
    ASSERT_EQ(seqs.size(), 2u);
    ASSERT_EQ(files.size(), 2u);
    EXPECT_NE(files[0].find("step_3"), std::string::npos);  // numeric order: 3 before 10
    EXPECT_EQ(seqs[0].id, "step_3/rank_0/0");
    EXPECT_EQ(seqs[0].prompt, (std::vector<int32_t>{1, 2}));
    EXPECT_EQ(seqs[0].response, (std::vector<int32_t>{10, 11, 12}));
    EXPECT_EQ(seqs[0].gen_logprobs, (std::vector<double>{-1.0, -2.0, -0.5}));
    EXPECT_EQ(seqs[0].train_logprobs, (std::vector<double>{-1.1, -1.8, -0.5}));
    EXPECT_EQ(seqs[1].id, "step_10/rank_1/0");
    EXPECT_EQ(dropped, 1u);
  }
  const auto one_step = read_prime_rl_exports(d / "token_exports/step_10");
  ASSERT_EQ(one_step.size(), 1u);
  EXPECT_THROW(read_prime_rl_exports(d / "nothing"), InputError);

  write_text(
      d / "token_exports/step_10/rank_1.jsonl",
      R"({"step":10,"export_step":10,"rank":1,"export_sequence_idx":0,"token_ids":[4,13],"loss_mask":[false,true],"inference_logprobs":[0.0,null],"trainer_logprobs":[0.0,-0.25]})"
      "\n");
  const std::string m = input_error_message([&] { read_prime_rl_exports(d / "token_exports"); });
  EXPECT_NE(m.find("rank_1.jsonl:1"), std::string::npos) << m;
  EXPECT_NE(m.find("step_10/rank_1/0"), std::string::npos) << m;
  write_text(
      d / "token_exports/step_10/rank_1.jsonl",
      R"({"step":10,"export_step":10,"rank":1,"export_sequence_idx":0,"token_ids":[4,13],"loss_mask":[false],"inference_logprobs":[0.0,-0.1],"trainer_logprobs":[0.0,-0.25]})"
      "\n");
  EXPECT_THROW(read_prime_rl_exports(d / "token_exports"), InputError);
  write_text(
      d / "token_exports/step_10/rank_1.jsonl",
      R"({"step":10,"export_step":10,"rank":1,"export_sequence_idx":0,"token_ids":[4,13],"loss_mask":[false,false],"inference_logprobs":[0.0,-0.1],"trainer_logprobs":[0.0,-0.25]})"
      "\n");
  EXPECT_THROW(read_prime_rl_exports(d / "token_exports"), InputError);
}

TEST(CompareDumps, EveryBadCombinedInputNamesSequenceAndLine) {
  TempDir d("bad");
  const std::string good_line =
      R"({"id": "ok", "prompt": [1], "response": [2], "gen_logprobs": [-1.0], "train_logprobs": [-1.0]})";
  struct Case {
    std::string line;
    std::string expect;  // substring of the message (besides the line number)
  };
  const std::vector<Case> cases = {
      {R"({"id": "s1", "prompt": [1], "response": [2, 3], "gen_logprobs": [-1.0], "train_logprobs": [-1.0, -1.0]})",
       "sequence 's1': \"gen_logprobs\" has 1 values but the response has 2 tokens"},
      {R"({"id": "s2", "prompt": [1], "response": [2], "gen_logprobs": [-1.0], "train_logprobs": [-1.0, -2.0]})",
       "sequence 's2': \"train_logprobs\" has 2"},
      {R"({"id": "s3", "prompt": [1], "response": [2], "gen_logprobs": [null], "train_logprobs": [-1.0]})",
       "sequence 's3': \"gen_logprobs\"[0] = null is not a finite number"},
      {R"({"id": "s4", "prompt": [1], "response": [2], "gen_logprobs": [-1.0], "train_logprobs": [0.5]})",
       "sequence 's4': \"train_logprobs\"[0] = 0.5 is positive"},
      {R"({"id": "s5", "prompt": [1], "response": [2], "gen_logprobs": [-1.0], "train_logprobs": [1e400]})",
       "number overflow"},  // rejected by the JSON parser
      {R"({"id": "s6", "prompt": [1], "response": [], "gen_logprobs": [], "train_logprobs": []})",
       "sequence 's6': \"response\" is empty"},
      {R"({"id": "s7", "prompt": [1], "gen_logprobs": [-1.0], "train_logprobs": [-1.0]})",
       "sequence 's7': missing \"response\""},
      {R"({"id": "s8", "prompt": [1], "response": [-2], "gen_logprobs": [-1.0], "train_logprobs": [-1.0]})",
       "sequence 's8': \"response\"[0] = -2 is not a token id"},
      {R"({"id": "s9", "prompt": [1.5], "response": [2], "gen_logprobs": [-1.0], "train_logprobs": [-1.0]})",
       "sequence 's9': \"prompt\"[0] = 1.5"},
      {R"({"id": "s10", "prompt": [1], "response": [2], "train_logprobs": [-1.0]})",
       "sequence 's10': missing \"gen_logprobs\""},
      {R"({"id": "ok", "prompt": [1], "response": [2], "gen_logprobs": [-1.0], "train_logprobs": [-1.0]})",
       "duplicate sequence id 'ok' (first at"},
      {R"({"prompt": [1], "response": [2], "gen_logprobs": [-1.0], "train_logprobs": [-1.0]})",
       "missing \"id\""},
      {R"({"id": [1], "prompt": [1], "response": [2]})", "\"id\" must be a string or an integer"},
      {R"({"id": "", "prompt": [1], "response": [2]})", "\"id\" is empty"},
      {R"({"id": "s11", "prompt": [1], "response": [2], "gen_logprobs": [-1e-7], "train_logprobs": [2e-6]})",
       "sequence 's11': \"train_logprobs\"[0]"},
      {R"({"id": "s12", "response": [2], "gen_logprobs": "x", "train_logprobs": [-1.0]})",
       "must be an array"},
      {"not json", "not valid JSON"},
      {"[1, 2]", "expected a JSON object"},
  };
  for (const auto& c : cases) {
    write_text(d / "d.jsonl", good_line + "\n" + c.line + "\n");
    const std::string m = input_error_message([&] { read_combined_dump(d / "d.jsonl"); });
    EXPECT_NE(m.find("d.jsonl:2"), std::string::npos) << c.line << "\n" << m;
    EXPECT_NE(m.find(c.expect), std::string::npos) << c.line << "\n" << m;
  }
  // Tiny positive rounding (<= 1e-6) is accepted.
  write_text(d / "d.jsonl",
             R"({"id": "t", "prompt": [], "response": [2], "gen_logprobs": [1e-7], "train_logprobs": [0.0]})"
             "\n");
  EXPECT_NO_THROW(read_combined_dump(d / "d.jsonl"));
  // File-level problems.
  EXPECT_THROW(read_combined_dump(d / "missing.jsonl"), InputError);
  EXPECT_THROW(read_combined_dump(d.path().string()), InputError);
  write_text(d / "empty.jsonl", "\n  \n");
  EXPECT_NE(input_error_message([&] { read_combined_dump(d / "empty.jsonl"); }).find("no sequences"),
            std::string::npos);
  EXPECT_THROW(build_compare_run({}, "x", {}), InputError);
  const auto seqs = [&] {
    write_text(d / "d.jsonl", good_line + "\n");
    return read_combined_dump(d / "d.jsonl");
  }();
  EXPECT_THROW(build_compare_run(seqs, "a/b", {}), InputError);
  EXPECT_THROW(build_compare_run(seqs, "", {}), InputError);
}

TEST(CompareDumps, BadSplitInputs) {
  TempDir d("split");
  const std::string a = R"({"id": "a", "prompt": [1], "response": [2, 3], "logprobs": [-1.0, -2.0]})";
  const std::string b = R"({"id": "b", "prompt": [1], "response": [4], "logprobs": [-1.0]})";
  struct Case {
    std::string gen, train, expect;
  };
  const std::vector<Case> cases = {
      {a + "\n" + b, a, "sequence 'b' has no line in the training file"},
      {a, a + "\n" + b, "sequence 'b' has no line in the generation file"},
      {a, R"({"id": "a", "prompt": [1], "response": [2], "logprobs": [-1.0]})",
       "sequence 'a': the response has 2 tokens at"},
      {a, R"({"id": "a", "prompt": [1], "response": [2, 5], "logprobs": [-1.0, -2.0]})",
       "sequence 'a': the response token ids differ"},
      {a, R"({"id": "a", "prompt": [9], "response": [2, 3], "logprobs": [-1.0, -2.0]})",
       "sequence 'a': the prompt differs"},
      {a + "\n" + a, a, "duplicate sequence id 'a'"},
      {a, R"({"id": "a", "prompt": [1], "response": [2, 3], "logprobs": [-1.0]})",
       "sequence 'a': \"logprobs\" has 1 values but the response has 2 tokens"},
  };
  for (const auto& c : cases) {
    write_text(d / "g.jsonl", c.gen + "\n");
    write_text(d / "t.jsonl", c.train + "\n");
    const std::string m = input_error_message([&] { read_split_dumps(d / "g.jsonl", d / "t.jsonl"); });
    EXPECT_NE(m.find(c.expect), std::string::npos) << m;
    EXPECT_NE(m.find(".jsonl:"), std::string::npos) << m;  // names a file and line
  }
}

TEST(CompareCli, WritesRunFileAndGatesIt) {
  TempDir d("cmpcli");
  write_text(d / "dump.jsonl", kCombined);
  auto run = [&](std::vector<std::string> a) { return rlp_test::run_cli(a, d.path().string()); };
  auto r = run({"compare", "--dump", d / "dump.jsonl", "--name", "vllm", "--out", d / "c.h5"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("full-vocabulary KL needs the full distributions"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("vllm"), std::string::npos);
  const RunData back = read_run_file(d / "c.h5");
  ASSERT_EQ(back.recipes.size(), 1u);
  EXPECT_EQ(back.recipes[0].name, "vllm");
  EXPECT_EQ(back.recipes[0].settings["kl_estimators"], kKlEstimatorNote);
  EXPECT_EQ(back.recipes[0].tokens.count("logp_oracle"), 0u);
  // Exists: refused without --force.
  EXPECT_EQ(run({"compare", "--dump", d / "dump.jsonl", "--out", d / "c.h5"}).code, 2);
  EXPECT_EQ(
      run({"compare", "--dump", d / "dump.jsonl", "--name", "vllm", "--out", d / "c.h5", "--force", "-q"})
          .code,
      0);
  // gen_kl_error = 0.0087 > 0.002: the nemo-rl preset fails; verl passes (ess 0.98, |k1| 0.033, chi2 0.10,
  // probs diff 0.0217 > 0.01 fails).
  r = run({"gate", d / "c.h5", "--preset", "nemo-rl"});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  r = run({"gate", d / "c.h5", "--preset", "verl", "--json"});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  const auto j = nlohmann::json::parse(r.out);
  for (const auto& c : j["checks"])
    EXPECT_EQ(c["verdict"], c["statistic"] == "rollout_probs_diff_mean" ? "fail" : "pass") << c.dump();
  r = run({"summary", d / "c.h5"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("sampled-token k1/k3 only"), std::string::npos) << r.out;
  // Usage errors.
  EXPECT_EQ(run({"compare", "--out", d / "x.h5"}).code, 2);
  EXPECT_EQ(run({"compare", "--dump", d / "dump.jsonl", "--gen", d / "dump.jsonl", "--out", d / "x.h5"}).code,
            2);
  EXPECT_EQ(run({"compare", "--gen", d / "dump.jsonl", "--out", d / "x.h5"}).code, 2);
  EXPECT_EQ(run({"compare", "--dump", d / "missing.jsonl", "--out", d / "x.h5"}).code, 2);
  EXPECT_FALSE(std::filesystem::exists(d / "x.h5"));
}

// gate --bitwise: a compare of a dump whose two sides are the same numbers passes; one token that
// differs in its last bit (and a -0.0 against 0.0, equal as numbers) fails, naming the first.
TEST(CompareCli, BitwiseGateCertifiesIdenticalLogprobsOnly) {
  TempDir d("bitwise");
  auto run = [&](std::vector<std::string> a) { return rlp_test::run_cli(a, d.path().string()); };
  write_text(
      d / "same.jsonl",
      R"({"id": "a", "prompt": [1], "response": [2, 3], "gen_logprobs": [-1.25, -0.1], "train_logprobs": [-1.25, -0.1]})"
      "\n");
  write_text(
      d / "ulp.jsonl",
      R"({"id": "a", "prompt": [1], "response": [2, 3], "gen_logprobs": [-1.25, -0.1], "train_logprobs": [-1.25, -0.1]})"
      "\n"
      R"({"id": "b", "prompt": [1], "response": [4, 5], "gen_logprobs": [-2.0, -0.5], "train_logprobs": [-2.0, -0.50000000000000011]})"
      "\n");
  ASSERT_EQ(run({"compare", "--dump", d / "same.jsonl", "--out", d / "same.h5", "-q"}).code, 0);
  ASSERT_EQ(run({"compare", "--dump", d / "ulp.jsonl", "--out", d / "ulp.h5", "-q"}).code, 0);
  EXPECT_EQ(read_run_file(d / "same.h5").recipes[0].summary.at("logprob_bit_mismatch"), 0.0);
  EXPECT_EQ(read_run_file(d / "ulp.h5").recipes[0].summary.at("logprob_bit_mismatch"), 0.25);
  auto r = run({"gate", d / "same.h5", "--bitwise"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  r = run({"gate", d / "ulp.h5", "--bitwise", "--json"});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["checks"].size(), 1u) << r.out;
  EXPECT_EQ(j["checks"][0]["statistic"], "logprob_bit_mismatch");
  EXPECT_EQ(j["checks"][0]["verdict"], "fail");
  const std::string msg = j["checks"][0]["message"];
  EXPECT_NE(msg.find("1 of 4 tokens"), std::string::npos) << msg;
  EXPECT_NE(msg.find("sequence 'b' response token 1"), std::string::npos) << msg;
  // With thresholds that the ulp run passes, --bitwise alone still fails it.
  write_text(d / "loose.toml", "[default]\nmax_abs_log_ratio = { max = 1.0 }\n");
  EXPECT_EQ(run({"gate", d / "ulp.h5", "--thresholds", d / "loose.toml"}).code, 0);
  EXPECT_EQ(run({"gate", d / "ulp.h5", "--thresholds", d / "loose.toml", "--bitwise"}).code, 1);
  // The RL-impact bands are options of compare, checked before any file is read.
  r = run({"compare", "--dump", d / "same.jsonl", "--out", d / "x.h5", "--ppo-eps", "1.5,0.2"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("--ppo-eps"), std::string::npos) << r.err;
  EXPECT_EQ(run({"compare", "--dump", d / "same.jsonl", "--out", d / "x.h5", "--icepop-bounds", "0.5"}).code,
            2);
  EXPECT_FALSE(std::filesystem::exists(d / "x.h5"));
  ASSERT_EQ(
      run({"compare", "--dump", d / "ulp.jsonl", "--out", d / "band.h5", "-q", "--ppo-eps", "0,0"}).code, 0);
  // The ulp token has r = exp(-1.1e-16) < 1 and is clipped by a zero-width band; the other three are not.
  EXPECT_EQ(read_run_file(d / "band.h5").recipes[0].summary.at("ppo_clip_frac_low"), 0.25);
}

// compare --gen with a vLLM offline dump and an SGLang response (detected per line) against the
// trainer's rlparity JSONL: the engine's logprobs are logp_gen, joined on the engine's ids.
TEST(CompareCli, EngineResponsesAsTheGenerationSide) {
  TempDir d("cmpengine");
  auto run = [&](std::vector<std::string> a) { return rlp_test::run_cli(a, d.path().string()); };
  write_text(
      d / "gen.jsonl",
      R"({"request_id": "r", "prompt_token_ids": [1, 4], "outputs": [{"index": 0, "token_ids": [9, 2], )"
      R"("logprobs": [{"9": {"logprob": -0.75, "rank": 1}}, {"2": {"logprob": -0.25, "rank": 1}}]}]})"
      "\n"
      R"({"output_ids": [5], "meta_info": {"id": "s", "prompt_tokens": 1, "input_token_logprobs": [[null, 3, null]], )"
      R"("output_token_logprobs": [[-1.0, 5, null]]}})"
      "\n");
  write_text(d / "train.jsonl",
             R"({"id": "s", "prompt": [3], "response": [5], "logprobs": [-1.0]})"
             "\n"
             R"({"id": "r/0", "prompt": [1, 4], "response": [9, 2], "logprobs": [-0.5, -0.25]})"
             "\n");
  auto r =
      run({"compare", "--gen", d / "gen.jsonl", "--train", d / "train.jsonl", "--out", d / "e.h5", "-q"});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const RunData back = read_run_file(d / "e.h5");
  EXPECT_EQ(back.seq_ids, (std::vector<std::string>{"r/0", "s"}));
  EXPECT_EQ(back.recipes[0].tokens.at("logp_gen"), (std::vector<double>{-0.75, -0.25, -1.0}));
  EXPECT_EQ(back.recipes[0].tokens.at("logp_train"), (std::vector<double>{-0.5, -0.25, -1.0}));
  // Forced to a format the lines are not in: refused naming the line and the field.
  r = run({"compare", "--gen", d / "gen.jsonl", "--train", d / "train.jsonl", "--out", d / "x.h5",
           "--inputs-format", "vllm-chat"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("gen.jsonl:1: vllm-chat response: \"id\" is missing"), std::string::npos) << r.err;
  // An engine response without logprobs cannot be a side.
  write_text(
      d / "nolp.jsonl",
      R"({"request_id": "r", "prompt_token_ids": [1, 4], "outputs": [{"index": 0, "token_ids": [9, 2]}]})");
  r = run({"compare", "--gen", d / "nolp.jsonl", "--train", d / "train.jsonl", "--out", d / "x.h5"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("nolp.jsonl:1: sequence 'r/0': the vllm-offline response carries no logprobs"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(d / "x.h5"));
}
