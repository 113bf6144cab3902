// Gate: threshold parsing, bound and baseline logic, report formats, and the CLI's exit codes
// (gate and summary) on run files built here with write_run_file.
#include "rlparity/gate/gate.hpp"

#include <gtest/gtest.h>
#include <hdf5.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "rlparity/gate/report_writers.hpp"
#include "rlparity/gate/thresholds.hpp"
#include "rlparity/io/run_file.hpp"
#include "rlparity/util/error.hpp"
#include "unit/gate_test_util.hpp"

using namespace rlp;
using namespace rlp::gate;
using rlp_test::input_error_message;
using rlp_test::TempDir;

namespace {

// A run of two sequences (prompt 2 + response 2, prompt 1 + response 1) whose recipes carry the
// given summary values directly (gate only reads summaries).
RunData make_run(const std::map<std::string, std::map<std::string, double>>& recipes,
                 const std::string& hash = "abc123") {
  RunData run;
  run.tool_version = "test";
  run.checkpoint_path = "/ckpt";
  run.checkpoint_hash = hash;
  run.created = "2024-01-01T00:00:00Z";
  run.model_spec = nlohmann::json::object();
  run.extra = nlohmann::json::object();
  run.token_ids = {1, 2, 3, 4, 5, 6, 7};
  run.seq_offsets = {0, 4, 7};
  run.prompt_lengths = {2, 2};
  run.seq_ids = {"a", "b"};
  for (const auto& [name, summary] : recipes) {
    RecipeResult r;
    r.name = name;
    r.settings = {{"recipe", name}, {"gen", "x"}};
    r.summary = summary;
    run.recipes.push_back(std::move(r));
  }
  return run;
}

const Check& find_check(const GateResult& r, const std::string& recipe, const std::string& stat) {
  for (const auto& c : r.checks)
    if (c.recipe == recipe && c.statistic == stat) return c;
  throw std::runtime_error("no check " + recipe + "/" + stat);
}

}  // namespace

// ---------------------------------------------------------------- thresholds

TEST(GateThresholds, ValidStatisticsComeFromFinalizeRecipe) {
  const auto& v = valid_statistics();
  ASSERT_TRUE(std::is_sorted(v.begin(), v.end()));
  for (const char* s : {"gen_kl_error", "token_mult_prob_error", "ess", "top1_agree_frac",
                        "mean_kl_gen_train", "rollout_corr_kl", "rollout_is_eff_sample_size", "chi2_token",
                        "rollout_probs_diff_mean", "max_abs_log_ratio", "p999_abs_log_ratio",
                        "js_divergence_error", "mean_entropy_gen", "mean_abs_gen_err_oracle", "mismatch_kl"})
    EXPECT_TRUE(std::binary_search(v.begin(), v.end(), s)) << s;
  EXPECT_FALSE(std::binary_search(v.begin(), v.end(), std::string("settings")));
}

TEST(GateThresholds, Levenshtein) {
  EXPECT_EQ(levenshtein("", ""), 0u);
  EXPECT_EQ(levenshtein("kitten", "sitting"), 3u);
  EXPECT_EQ(levenshtein("abc", ""), 3u);
  EXPECT_EQ(nearest_name("gen_kl_eror", valid_statistics()), "gen_kl_error");
  EXPECT_EQ(nearest_name("esss", valid_statistics()), "ess");
}

TEST(GateThresholds, ParsesBoundsTablesAndOverrides) {
  const Thresholds th = parse_thresholds(R"(
[default]
max_abs_log_ratio = 1.5
mean_kl_gen_train = 1e-3
ess = { min = 0.9 }
rollout_corr_kl = { min = -0.1, max = 0.1 }
num_tokens = 10          # integers are numbers too
max_regression = { gen_kl_error = 0.5 }

[max_regression]
ess = 0.02

[recipes.fp8-e2e]
max_abs_log_ratio = 3.0
max_regression = { ess = 0.05 }
)",
                                         "t.toml");
  const auto d = th.bounds_for("bf16");
  ASSERT_EQ(d.size(), 5u);
  EXPECT_EQ(*d.at("max_abs_log_ratio").max, 1.5);
  EXPECT_FALSE(d.at("max_abs_log_ratio").min);
  EXPECT_EQ(*d.at("mean_kl_gen_train").max, 1e-3);
  EXPECT_EQ(*d.at("ess").min, 0.9);
  EXPECT_FALSE(d.at("ess").max);
  EXPECT_EQ(*d.at("rollout_corr_kl").min, -0.1);
  EXPECT_EQ(*d.at("rollout_corr_kl").max, 0.1);
  EXPECT_EQ(*d.at("num_tokens").max, 10.0);
  const auto f = th.bounds_for("fp8-e2e");
  EXPECT_EQ(*f.at("max_abs_log_ratio").max, 3.0);
  EXPECT_EQ(*f.at("ess").min, 0.9);  // inherited from [default]
  EXPECT_EQ(*th.max_regression_for("bf16", "ess"), 0.02);
  EXPECT_EQ(*th.max_regression_for("fp8-e2e", "ess"), 0.05);
  EXPECT_EQ(*th.max_regression_for("fp8-e2e", "gen_kl_error"), 0.5);
  EXPECT_FALSE(th.max_regression_for("bf16", "max_abs_log_ratio"));
  const auto stats = th.statistics_for("fp8-e2e");
  EXPECT_NE(std::find(stats.begin(), stats.end(), "gen_kl_error"), stats.end());
}

TEST(GateThresholds, UnknownStatisticSuggestsNearest) {
  const std::string m =
      input_error_message([] { parse_thresholds("[default]\ngen_kl_eror = 0.1\n", "x.toml"); });
  EXPECT_NE(m.find("unknown statistic 'gen_kl_eror'"), std::string::npos) << m;
  EXPECT_NE(m.find("did you mean 'gen_kl_error'"), std::string::npos) << m;
  EXPECT_NE(m.find("x.toml:2"), std::string::npos) << m;
  const std::string m2 =
      input_error_message([] { parse_thresholds("[recipes.bf16]\nmax_abs_log_ration = 1\n", "y.toml"); });
  EXPECT_NE(m2.find("did you mean 'max_abs_log_ratio'"), std::string::npos) << m2;
  const std::string m3 =
      input_error_message([] { parse_thresholds("[max_regression]\nesss = 0.1\n", "z.toml"); });
  EXPECT_NE(m3.find("did you mean 'ess'"), std::string::npos) << m3;
}

TEST(GateThresholds, RejectsBadValues) {
  for (const char* text : {
           "[default]\ness = \"high\"\n",                  // not a number
           "[default]\ness = { min = 0.9, max = 0.5 }\n",  // min > max
           "[default]\ness = { lo = 0.9 }\n",              // unknown key
           "[default]\ness = {}\n",                        // no bound
           "[default]\ness = nan\n",                       // not finite
           "[defaults]\ness = 1\n",                        // unknown top-level table
           "[default\ness = 1\n",                          // syntax error
           "[max_regression]\ness = -0.1\n",               // negative tolerance
           "[default]\nmax_regression = 0.1\n",            // must be a table
           "recipes = 3\n",
       }) {
    EXPECT_THROW(parse_thresholds(text, "bad.toml"), InputError) << text;
  }
}

TEST(GateThresholds, PresetsLoadWithDocumentedBounds) {
  const Thresholds n = load_preset("nemo-rl");
  const auto nb = n.bounds_for("any");
  EXPECT_EQ(*nb.at("gen_kl_error").max, 0.002);
  EXPECT_EQ(*nb.at("token_mult_prob_error").max, 1.1);
  const Thresholds v = load_preset("verl");
  const auto vb = v.bounds_for("any");
  EXPECT_EQ(*vb.at("rollout_is_eff_sample_size").min, 0.3);
  EXPECT_EQ(*vb.at("rollout_corr_kl").min, -0.1);
  EXPECT_EQ(*vb.at("rollout_corr_kl").max, 0.1);
  EXPECT_EQ(*vb.at("chi2_token").max, 1.0);
  EXPECT_EQ(*vb.at("rollout_probs_diff_mean").max, 0.01);
  const std::string m = input_error_message([] { load_preset("nemo"); });
  EXPECT_NE(m.find("did you mean 'nemo-rl'"), std::string::npos) << m;
}

TEST(GateThresholds, MergeOverlaysPerStatistic) {
  const Thresholds base = parse_thresholds("[default]\ness = { min = 0.3 }\ngen_kl_error = 0.002\n", "a");
  const Thresholds top = parse_thresholds("[default]\ngen_kl_error = 0.01\n[recipes.r]\ness = 2\n", "b");
  const Thresholds m = merge_thresholds(base, top);
  EXPECT_EQ(*m.bounds_for("x").at("gen_kl_error").max, 0.01);
  EXPECT_EQ(*m.bounds_for("x").at("ess").min, 0.3);
  EXPECT_EQ(*m.bounds_for("r").at("ess").max, 2.0);
  EXPECT_EQ(m.sources.size(), 2u);
}

// ---------------------------------------------------------------- bounds

TEST(GateEvaluate, BoundsPassFailMissingAndNaN) {
  const RunData run =
      make_run({{"bf16", {{"gen_kl_error", 0.001}, {"ess", 0.95}, {"chi2_token", std::nan("")}}},
                {"fp8", {{"gen_kl_error", 0.003}, {"ess", 0.5}, {"chi2_token", 0.1}}}});
  GateOptions o;
  o.thresholds = parse_thresholds(R"(
[default]
gen_kl_error = 0.002
ess = { min = 0.9 }
chi2_token = 1
[recipes.bf16]
top1_agree_frac = { min = 0.99 }
)",
                                  "t");
  const GateResult r = evaluate(run, o);
  EXPECT_EQ(r.recipes, (std::vector<std::string>{"bf16", "fp8"}));
  EXPECT_EQ(r.checks.size(), 7u);
  EXPECT_EQ(find_check(r, "bf16", "gen_kl_error").verdict, Verdict::pass);
  EXPECT_EQ(find_check(r, "bf16", "ess").verdict, Verdict::pass);
  EXPECT_EQ(find_check(r, "bf16", "chi2_token").verdict, Verdict::fail);  // NaN never passes
  EXPECT_EQ(find_check(r, "bf16", "top1_agree_frac").verdict, Verdict::missing);
  EXPECT_EQ(find_check(r, "fp8", "gen_kl_error").verdict, Verdict::fail);
  EXPECT_NE(find_check(r, "fp8", "gen_kl_error").message.find("above the maximum"), std::string::npos);
  EXPECT_EQ(find_check(r, "fp8", "ess").verdict, Verdict::fail);
  EXPECT_NE(find_check(r, "fp8", "ess").message.find("below the minimum"), std::string::npos);
  EXPECT_EQ(find_check(r, "fp8", "chi2_token").verdict, Verdict::pass);
  EXPECT_EQ(r.violations(), 4u);
  EXPECT_FALSE(r.passed());

  o.recipes = {"fp8"};
  o.thresholds = parse_thresholds("[default]\nchi2_token = 1\n", "t");
  EXPECT_TRUE(evaluate(run, o).passed());
}

TEST(GateEvaluate, BoundaryValuesPass) {
  const RunData run = make_run({{"r", {{"gen_kl_error", 0.002}, {"ess", 0.3}}}});
  GateOptions o;
  o.thresholds = parse_thresholds("[default]\ngen_kl_error = 0.002\ness = { min = 0.3 }\n", "t");
  EXPECT_TRUE(evaluate(run, o).passed());
}

TEST(GateEvaluate, UsageErrors) {
  const RunData run = make_run({{"bf16", {{"ess", 1.0}}}, {"fp8-e2e", {{"ess", 1.0}}}});
  GateOptions none;
  EXPECT_THROW(evaluate(run, none), InputError);  // nothing to gate on
  GateOptions o;
  o.thresholds = parse_thresholds("[default]\ness = { min = 0.5 }\n", "t");
  o.recipes = {"fp8-e2", "bf16"};
  const std::string m = input_error_message([&] { evaluate(run, o); });
  EXPECT_NE(m.find("unknown recipe 'fp8-e2'"), std::string::npos) << m;
  EXPECT_NE(m.find("did you mean 'fp8-e2e'"), std::string::npos) << m;
  GateOptions t;
  t.thresholds = parse_thresholds("[recipes.fp16]\ness = { min = 0.5 }\n", "t");
  EXPECT_THROW(evaluate(run, t), InputError);  // thresholds for a recipe the run lacks
  GateOptions neg;
  neg.thresholds = o.thresholds;
  neg.max_regression = -1;
  EXPECT_THROW(evaluate(run, neg), InputError);
  EXPECT_THROW(evaluate(make_run({}), o), InputError);  // no recipes
}

// ---------------------------------------------------------------- baseline

TEST(GateBaseline, DirectionsAndRegression) {
  EXPECT_EQ(direction_of("ess"), Direction::higher_is_better);
  EXPECT_EQ(direction_of("top1_agree_frac"), Direction::higher_is_better);
  EXPECT_EQ(direction_of("rollout_is_eff_sample_size"), Direction::higher_is_better);
  EXPECT_EQ(direction_of("k1"), Direction::closer_to_zero);
  EXPECT_EQ(direction_of("ratio_mean"), Direction::closer_to_one);
  EXPECT_EQ(direction_of("gen_kl_error"), Direction::lower_is_better);
  // lower is better: 10% tolerance of 1.0.
  EXPECT_FALSE(regressed(Direction::lower_is_better, 1.09, 1.0, 0.1));
  EXPECT_TRUE(regressed(Direction::lower_is_better, 1.11, 1.0, 0.1));
  EXPECT_FALSE(regressed(Direction::lower_is_better, 0.2, 1.0, 0.1));  // improvement
  // higher is better: a drop of more than 10% of the baseline fails, any rise passes.
  EXPECT_FALSE(regressed(Direction::higher_is_better, 0.91, 1.0, 0.1));
  EXPECT_TRUE(regressed(Direction::higher_is_better, 0.89, 1.0, 0.1));
  EXPECT_FALSE(regressed(Direction::higher_is_better, 2.0, 1.0, 0.1));
  // closer to zero: |x| grows.
  EXPECT_TRUE(regressed(Direction::closer_to_zero, -0.012, 0.01, 0.1));
  EXPECT_FALSE(regressed(Direction::closer_to_zero, -0.0105, 0.01, 0.1));
  // closer to one: |x - 1| grows (baseline 1.1: distance 0.1).
  EXPECT_TRUE(regressed(Direction::closer_to_one, 0.88, 1.1, 0.1));
  EXPECT_FALSE(regressed(Direction::closer_to_one, 0.95, 1.1, 0.1));
  // zero baseline: any worsening fails, equality passes.
  EXPECT_TRUE(regressed(Direction::lower_is_better, 1e-12, 0.0, 0.1));
  EXPECT_FALSE(regressed(Direction::lower_is_better, 0.0, 0.0, 0.1));
  EXPECT_NEAR(relative_worsening(Direction::lower_is_better, 1.25, 1.0), 0.25, 1e-12);
  EXPECT_NEAR(relative_worsening(Direction::higher_is_better, 0.5, 1.0), 0.5, 1e-12);
}

TEST(GateBaseline, DetectsRegressionPerDirectionWithOverrides) {
  const RunData base = make_run({{"fp8",
                                  {{"mean_abs_log_ratio", 0.010},
                                   {"gen_kl_error", 0.001},
                                   {"ess", 0.90},
                                   {"max_abs_log_ratio", 1.0}}}});
  const RunData run = make_run({{"fp8",
                                 {{"mean_abs_log_ratio", 0.0112},  // +12%: fails at 10%
                                  {"gen_kl_error", 0.00105},       // +5%: passes
                                  {"ess", 0.95},                   // higher: better
                                  {"max_abs_log_ratio", 1.3}}}});  // +30%, override 0.5
  GateOptions o;
  o.baseline = &base;
  GateResult r = evaluate(run, o);  // baseline only: headline statistics
  EXPECT_EQ(find_check(r, "fp8", "mean_abs_log_ratio").verdict, Verdict::fail);
  EXPECT_EQ(find_check(r, "fp8", "gen_kl_error").verdict, Verdict::pass);
  EXPECT_EQ(find_check(r, "fp8", "ess").verdict, Verdict::pass);
  EXPECT_EQ(find_check(r, "fp8", "max_abs_log_ratio").verdict, Verdict::fail);
  EXPECT_EQ(*find_check(r, "fp8", "ess").baseline, 0.90);
  EXPECT_EQ(r.violations(), 2u);

  o.thresholds = parse_thresholds(
      "[max_regression]\nmax_abs_log_ratio = 0.5\n[recipes.fp8]\nmax_regression = { mean_abs_log_ratio = "
      "0.15 }\n",
      "t");
  r = evaluate(run, o);
  EXPECT_TRUE(r.passed()) << format_gate_table(r);
  EXPECT_EQ(*find_check(r, "fp8", "max_abs_log_ratio").tolerance, 0.5);

  o.thresholds.reset();
  o.max_regression = 0.35;  // max_abs_log_ratio rose 30%
  EXPECT_TRUE(evaluate(run, o).passed());

  // ess dropping by 20% fails: higher is better.
  const RunData worse = make_run(
      {{"fp8",
        {{"mean_abs_log_ratio", 0.01}, {"gen_kl_error", 0.001}, {"ess", 0.72}, {"max_abs_log_ratio", 1.0}}}});
  o.max_regression = 0.1;
  r = evaluate(worse, o);
  EXPECT_EQ(find_check(r, "fp8", "ess").verdict, Verdict::fail);
  EXPECT_EQ(r.violations(), 1u);
  // The same run as its own baseline passes.
  o.baseline = &run;
  EXPECT_TRUE(evaluate(run, o).passed());
}

TEST(GateBaseline, StatisticMissingFromRunButInBaselineIsMissing) {
  const RunData base = make_run({{"r", {{"gen_kl_error", 0.001}, {"top1_agree_frac", 0.99}}}});
  const RunData run = make_run({{"r", {{"gen_kl_error", 0.001}}}});
  GateOptions o;
  o.baseline = &base;
  const GateResult r = evaluate(run, o);
  EXPECT_EQ(find_check(r, "r", "top1_agree_frac").verdict, Verdict::missing);
  EXPECT_EQ(find_check(r, "r", "gen_kl_error").verdict, Verdict::pass);
}

TEST(GateBaseline, RefusesDifferentInputsHashSettingsUnlessAllowed) {
  const RunData run = make_run({{"r", {{"gen_kl_error", 0.001}}}});
  RunData tokens = run;
  tokens.token_ids[5] = 99;
  RunData hash = run;
  hash.checkpoint_hash = "other";
  RunData settings = run;
  settings.recipes[0].settings["gen"] = "y";
  RunData lengths = run;
  lengths.prompt_lengths = {1, 2};
  RunData no_recipe = make_run({{"q", {{"gen_kl_error", 0.001}}}});
  for (const RunData* b : {&tokens, &hash, &settings, &lengths, &no_recipe}) {
    GateOptions o;
    o.baseline = b;
    const std::string m = input_error_message([&] { evaluate(run, o); });
    EXPECT_NE(m.find("refusing the baseline"), std::string::npos) << m;
    EXPECT_NE(m.find("--allow-different-inputs"), std::string::npos) << m;
    o.allow_different_inputs = true;
    const GateResult r = evaluate(run, o);
    EXPECT_FALSE(r.notes.empty());
    EXPECT_TRUE(r.passed()) << format_gate_table(r);
  }
  GateOptions o;
  o.baseline = &settings;
  EXPECT_NE(input_error_message([&] { evaluate(run, o); }).find("settings differ in: gen"),
            std::string::npos);
  o.baseline = &tokens;
  EXPECT_NE(input_error_message([&] { evaluate(run, o); }).find("id 'b'"), std::string::npos);
}

// ---------------------------------------------------------------- report formats

namespace {

GateResult mixed_result() {
  const RunData run = make_run({{"bf16", {{"gen_kl_error", 0.001}, {"ess", 0.95}}},
                                {"fp8<&\"'>", {{"gen_kl_error", 0.003}, {"ess", 0.5}}}});
  GateOptions o;
  o.thresholds =
      parse_thresholds("[default]\ngen_kl_error = 0.002\ness = { min = 0.9 }\nchi2_token = 1\n", "t");
  return evaluate(run, o);
}

}  // namespace

TEST(GateReports, JUnitIsWellFormedAndCountsMatch) {
  const GateResult r = mixed_result();
  const std::string xml = format_junit(r, ReportContext{"run.h5", "", {"t"}});
  const rlp_test::XmlElement root = rlp_test::parse_xml(xml);
  EXPECT_EQ(root.name, "testsuites");
  std::size_t total = 0, failed = 0;
  ASSERT_EQ(root.children.size(), 2u);
  for (const auto& suite : root.children) {
    EXPECT_EQ(suite.name, "testsuite");
    std::size_t t = 0, f = 0;
    for (const auto& tc : suite.children) {
      EXPECT_EQ(tc.name, "testcase");
      EXPECT_EQ(tc.attrs.at("classname"), suite.attrs.at("name"));
      ++t;
      for (const auto& ch : tc.children) {
        EXPECT_EQ(ch.name, "failure");
        EXPECT_FALSE(ch.attrs.at("message").empty());
        ++f;
      }
    }
    EXPECT_EQ(std::to_string(t), suite.attrs.at("tests"));
    EXPECT_EQ(std::to_string(f), suite.attrs.at("failures"));
    total += t;
    failed += f;
  }
  EXPECT_EQ(root.children[0].attrs.at("name"), "rlparity.bf16");
  EXPECT_EQ(root.children[1].attrs.at("name"), "rlparity.fp8<&\"'>");  // escaped and decoded back
  EXPECT_EQ(std::to_string(total), root.attrs.at("tests"));
  EXPECT_EQ(std::to_string(failed), root.attrs.at("failures"));
  EXPECT_EQ(total, 6u);
  EXPECT_EQ(failed, r.violations());
  EXPECT_EQ(failed, 4u);  // fp8: gen_kl_error, ess; both recipes: chi2_token missing

  // xmllint, when installed, agrees that it is well-formed.
  if (std::filesystem::exists("/usr/bin/xmllint")) {
    TempDir d("junit");
    rlp_test::write_text(d / "j.xml", xml);
    EXPECT_EQ(std::system(("/usr/bin/xmllint --noout " + rlp_test::shell_quote(d / "j.xml")).c_str()), 0);
  }
}

TEST(GateReports, XmlEscape) {
  EXPECT_EQ(xml_escape("a<b>&\"c'\n\x01"), "a&lt;b&gt;&amp;&quot;c&apos;&#10;?");
}

TEST(GateReports, MarkdownTableParsesBack) {
  const GateResult r = mixed_result();
  const std::string md = format_markdown(r, ReportContext{"run.h5", "base.h5", {"t"}});
  EXPECT_EQ(md.rfind("## rlparity gate: FAIL", 0), 0u);
  std::istringstream in(md);
  std::string line;
  std::vector<std::vector<std::string>> rows;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] != '|') continue;
    std::vector<std::string> cells;
    std::string cell;
    for (std::size_t i = 1; i < line.size(); ++i) {
      if (line[i] == '\\' && i + 1 < line.size()) {
        cell += line[++i];
      } else if (line[i] == '|') {
        const auto b = cell.find_first_not_of(' ');
        const auto e = cell.find_last_not_of(' ');
        cells.push_back(b == std::string::npos ? "" : cell.substr(b, e - b + 1));
        cell.clear();
      } else {
        cell += line[i];
      }
    }
    rows.push_back(cells);
  }
  ASSERT_EQ(rows.size(), 2 + r.checks.size());
  EXPECT_EQ(rows[0],
            (std::vector<std::string>{"recipe", "statistic", "value", "bound", "baseline", "verdict"}));
  for (std::size_t i = 0; i < r.checks.size(); ++i) {
    const auto& row = rows[i + 2];
    ASSERT_EQ(row.size(), 6u);
    EXPECT_EQ(row[0], r.checks[i].recipe);
    EXPECT_EQ(row[1], r.checks[i].statistic);
    EXPECT_EQ(row[3], format_bound(r.checks[i].bound));
    EXPECT_EQ(row[5].find("pass") != std::string::npos, r.checks[i].verdict == Verdict::pass);
  }
}

TEST(GateReports, JsonParsesBack) {
  const GateResult r = mixed_result();
  const auto j = nlohmann::json::parse(to_json(r, ReportContext{"run.h5", "", {"t"}}).dump());
  EXPECT_EQ(j["passed"], false);
  EXPECT_EQ(j["violations"], 4);
  EXPECT_TRUE(j["baseline"].is_null());
  ASSERT_EQ(j["checks"].size(), r.checks.size());
  const auto& c = j["checks"][0];
  EXPECT_EQ(c["recipe"], "bf16");
  EXPECT_EQ(c["statistic"], "chi2_token");
  EXPECT_EQ(c["verdict"], "missing");
  EXPECT_TRUE(c["value"].is_null());
  EXPECT_EQ(c["max"], 1.0);
  EXPECT_EQ(j["checks"][1]["statistic"], "ess");
  EXPECT_EQ(j["checks"][1]["min"], 0.9);
  EXPECT_EQ(j["checks"][1]["value"], 0.95);
}

// ---------------------------------------------------------------- CLI

namespace {

void set_schema_version(const std::string& path, int32_t v) {
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  const hid_t a = H5Aopen(f, "schema_version", H5P_DEFAULT);
  ASSERT_GE(a, 0);
  ASSERT_GE(H5Awrite(a, H5T_NATIVE_INT32, &v), 0);
  H5Aclose(a);
  H5Fclose(f);
}

}  // namespace

TEST(GateCli, ExitCodesAndOutputs) {
  TempDir d("gatecli");
  const std::string good = d / "good.h5", bad = d / "bad.h5", old = d / "old.h5";
  write_run_file(good, make_run({{"bf16", {{"gen_kl_error", 0.001}, {"token_mult_prob_error", 1.01}}}}),
                 false);
  write_run_file(bad, make_run({{"bf16", {{"gen_kl_error", 0.01}, {"token_mult_prob_error", 1.01}}}}), false);
  write_run_file(old, make_run({{"bf16", {{"gen_kl_error", 0.001}}}}), false);
  set_schema_version(old, 2);
  rlp_test::write_text(d / "t.toml", "[default]\ngen_kl_error = 0.002\n");
  rlp_test::write_text(d / "typo.toml", "[default]\ngen_kl_eror = 0.002\n");

  auto run = [&](std::vector<std::string> a) { return rlp_test::run_cli(a, d.path().string()); };
  auto r = run({"gate", good, "--preset", "nemo-rl"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("gate: PASS"), std::string::npos) << r.out;
  r = run({"gate", bad, "--thresholds", d / "t.toml", "--junit", d / "j.xml", "--markdown", d / "m.md"});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("FAIL"), std::string::npos);
  const auto junit = rlp_test::parse_xml(rlp_test::read_text(d / "j.xml"));
  EXPECT_EQ(junit.attrs.at("failures"), "1");
  EXPECT_NE(rlp_test::read_text(d / "m.md").find("**FAIL**"), std::string::npos);
  for (const auto& e : std::filesystem::directory_iterator(d.path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
  r = run({"gate", bad, "--baseline", good, "--json"});
  EXPECT_EQ(r.code, 1) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["passed"], false);
  EXPECT_EQ(j["baseline"], good);
  r = run({"gate", good, "--baseline", good, "--max-regression", "0"});
  EXPECT_EQ(r.code, 0) << r.out << r.err;

  // Usage and input errors: 2.
  EXPECT_EQ(run({"gate", d / "nope.h5", "--preset", "verl"}).code, 2);
  r = run({"gate", old, "--preset", "verl"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("schema version 2"), std::string::npos) << r.err;
  r = run({"gate", good, "--preset", "nemo-rl", "--recipes", "fp8"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unknown recipe 'fp8'"), std::string::npos) << r.err;
  EXPECT_EQ(run({"gate", good}).code, 2);  // nothing to gate on
  r = run({"gate", good, "--thresholds", d / "typo.toml"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("did you mean 'gen_kl_error'"), std::string::npos) << r.err;
  EXPECT_EQ(run({"gate", good, "--thresholds", d / "missing.toml"}).code, 2);
  EXPECT_EQ(run({"gate", good, "--preset", "trl"}).code, 2);
  EXPECT_EQ(run({"gate"}).code, 2);  // missing RUN.h5
  EXPECT_EQ(run({"gate", good, "--preset", "verl", "--max-regression", "-1"}).code, 2);
  EXPECT_EQ(run({"gate", good, "--preset", "nemo-rl", "--junit", d / "no/such/dir/j.xml"}).code, 2);
  RunData other = make_run({{"bf16", {{"gen_kl_error", 0.001}}}}, "different-hash");
  write_run_file(d / "other.h5", other, false);
  EXPECT_EQ(run({"gate", good, "--baseline", d / "other.h5"}).code, 2);
  EXPECT_EQ(run({"gate", good, "--baseline", d / "other.h5", "--allow-different-inputs"}).code, 0);
}

TEST(SummaryCli, TableAndJson) {
  TempDir d("summary");
  const std::string f = d / "run.h5";
  write_run_file(f, make_run({{"bf16", {{"gen_kl_error", 0.001}, {"num_tokens", 3}, {"ess", std::nan("")}}}}),
                 false);
  auto r = rlp_test::run_cli({"summary", f}, d.path().string());
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("abc123"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bf16"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sequences:  2"), std::string::npos) << r.out;
  r = rlp_test::run_cli({"summary", f, "--json"}, d.path().string());
  EXPECT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["checkpoint_hash"], "abc123");
  EXPECT_EQ(j["num_sequences"], 2);
  EXPECT_EQ(j["num_response_tokens"], 3);
  EXPECT_EQ(j["recipes"][0]["name"], "bf16");
  EXPECT_EQ(j["recipes"][0]["summary"]["gen_kl_error"], 0.001);
  EXPECT_TRUE(j["recipes"][0]["summary"]["ess"].is_null());
  EXPECT_EQ(rlp_test::run_cli({"summary", d / "missing.h5"}, d.path().string()).code, 2);
}
