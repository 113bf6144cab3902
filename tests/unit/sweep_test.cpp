// Sweep: grid parsing errors, point order, a point equal to a plain replay with the same knobs bit
// for bit, the sweep file's datasets, and the boundary detector (a planted jump found, a flat or
// noisy-but-level curve giving nothing).
#include "rlparity/replay/sweep.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>

#include "rlparity/gate/gate.hpp"
#include "rlparity/gate/thresholds.hpp"
#include "rlparity/io/sweep_file.hpp"
#include "rlparity/metrics/statistics.hpp"
#include "rlparity/replay/replay.hpp"
#include "rlparity/util/error.hpp"
#include "unit/scratch_test_util.hpp"

namespace rlp {
namespace {

const std::string kStories = std::string(RLPARITY_SOURCE_DIR) + "/fixtures/models/stories260K";

const Checkpoint& stories() {
  static const Checkpoint c = Checkpoint::open(kStories);
  return c;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(SweepGrid, ParsesAndOrdersPoints) {
  const ReplayOptions base;
  const auto axes = parse_grid({"gen-tp=1,2", "gen-attention=flash,split-kv:4,split-kv:8"}, base);
  ASSERT_EQ(axes.size(), 2u);
  EXPECT_TRUE(axes[0].gen);
  EXPECT_EQ(axes[0].name, "tp");
  EXPECT_EQ(grid_points(axes), 6u);
  EXPECT_EQ(grid_point_indices(axes, 0), (std::vector<std::size_t>{0, 0}));
  EXPECT_EQ(grid_point_indices(axes, 1), (std::vector<std::size_t>{0, 1}));
  EXPECT_EQ(grid_point_indices(axes, 3), (std::vector<std::size_t>{1, 0}));
  const ReplayOptions o = point_options(base, axes, 5);
  ASSERT_EQ(o.recipe.gen_knobs.size(), 2u);
  EXPECT_EQ(o.recipe.gen_knobs[0], (std::pair<std::string, std::string>{"tp", "2"}));
  EXPECT_EQ(o.recipe.gen_knobs[1], (std::pair<std::string, std::string>{"attention", "split-kv:8"}));
  const auto train = parse_grid({"train-tp=2"}, base);
  EXPECT_FALSE(train[0].gen);
  EXPECT_TRUE(point_options(base, train, 0).recipe.gen_knobs.empty());
}

TEST(SweepGrid, ClearErrors) {
  ReplayOptions base;
  auto message = [&](const std::vector<std::string>& g) {
    try {
      parse_grid(g, base);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({"gen-tp"}).find("expected KNOB=V1,V2"), std::string::npos);
  EXPECT_NE(message({"tp=1,2"}).find("gen-<knob> or train-<knob>"), std::string::npos);
  EXPECT_NE(message({"gen-nosuch=1"}).find("unknown knob 'nosuch'"), std::string::npos);
  EXPECT_NE(message({"gen-tp=1", "gen-tp=2"}).find("given twice"), std::string::npos);
  EXPECT_NE(message({"gen-tp=1,1"}).find("value '1' given twice"), std::string::npos);
  EXPECT_NE(message({"gen-tp=1,,2"}).find("empty value"), std::string::npos);
  EXPECT_NE(message({"gen-tp="}).find("no values"), std::string::npos);
  EXPECT_NE(message({"gen-kv-cache=bf16,int3"}).find("kv-cache"), std::string::npos);
  EXPECT_NE(message({}).find("no --grid"), std::string::npos);
  base.recipe.gen_knobs.emplace_back("tp", "2");
  EXPECT_NE(message({"gen-tp=1,2"}).find("also set by --gen-tp 2"), std::string::npos);
  EXPECT_EQ(message({"train-tp=1,2"}), "no error");
}

TEST(Sweep, PointEqualsPlainReplayBitForBit) {
  std::vector<InputSequence> in(2);
  in[0] = {"a", {1, 295, 369, 309}, {}, false, {}, 1, {}};
  in[1] = {"b", {1, 306, 463, 436}, {}, false, {}, 2, {}};
  ReplayOptions base;
  base.recipes = {"bf16", "fp16"};
  base.oracle = false;
  base.max_new_tokens = 12;
  base.seed = 7;
  const auto axes = parse_grid({"gen-tp=1,2", "gen-attention=flash,split-kv:4"}, base);
  std::vector<InputSequence> sweep_in = in;
  std::vector<RunData> kept;
  const SweepResult sw =
      run_sweep(stories(), sweep_in, base, axes, [&](std::size_t, RunData& r) { kept.push_back(r); });
  ASSERT_EQ(sw.points(), 4u);
  ASSERT_EQ(sw.values.size(), 8u);
  EXPECT_EQ(sw.values[2], "1");
  EXPECT_EQ(sw.values[3], "split-kv:4");
  // The responses were sampled once, with the base sampler.
  std::vector<InputSequence> sampled = in;
  sample_missing_responses(stories(), sampled, make_replay_plan(stories().spec(), base));
  for (std::size_t i = 0; i < in.size(); ++i) EXPECT_EQ(sweep_in[i].response, sampled[i].response);

  const std::size_t R = sw.recipes.size();
  for (std::size_t p = 0; p < sw.points(); ++p) {
    std::vector<InputSequence> plain_in = sampled;
    ReplayOptions po = base;
    const auto idx = grid_point_indices(axes, p);
    for (std::size_t k = 0; k < axes.size(); ++k)
      po.recipe.gen_knobs.emplace_back(axes[k].name, axes[k].values[idx[k]]);
    const RunData plain = run_replay(stories(), plain_in, po);
    const auto offs = response_offsets(plain.seq_offsets, plain.prompt_lengths);
    for (std::size_t r = 0; r < R; ++r) {
      const RecipeResult& pr = plain.recipes[r];
      ASSERT_EQ(pr.name, sw.recipes[r]);
      for (const auto& [name, v] : pr.summary)
        EXPECT_TRUE(same_bits(v, sw.summary.at(name)[p * R + r])) << "point " << p << " " << name;
      const auto curve = position_mean_abs_log_ratio(pr, offs, sw.positions);
      for (std::size_t j = 0; j < sw.positions; ++j)
        EXPECT_TRUE(same_bits(curve[j], sw.position_curve[(p * R + r) * sw.positions + j]));
      // The run a sweep keeps is that replay too.
      EXPECT_EQ(kept[p].recipes[r].tokens, pr.tokens);
    }
  }
  // Different knobs do make a difference somewhere (the grid is not ignored).
  const auto& m = sw.summary.at("mean_abs_log_ratio");
  EXPECT_FALSE(same_bits(m[0 * R + 1], m[3 * R + 1]));

  // The file holds the datasets (checked with h5py by the CLI test; here: it writes).
  const std::string path = ::testing::TempDir() + "/sweep_test_" + std::to_string(::getpid()) + ".h5";
  write_sweep_file(path, sw, "test", stories().content_hash(), true);
  EXPECT_TRUE(std::filesystem::exists(path));
  EXPECT_THROW(write_sweep_file(path, sw, "test", "", false), InputError);
  // Read back as written.
  EXPECT_TRUE(is_sweep_file(path));
  const SweepResult back = read_sweep_file(path);
  EXPECT_EQ(back.knobs, sw.knobs);
  EXPECT_EQ(back.values, sw.values);
  EXPECT_EQ(back.recipes, sw.recipes);
  EXPECT_EQ(back.positions, sw.positions);
  ASSERT_EQ(back.summary.size(), sw.summary.size());
  for (const auto& [name, v] : sw.summary)
    for (std::size_t i = 0; i < v.size(); ++i) EXPECT_TRUE(same_bits(v[i], back.summary.at(name)[i])) << name;
  EXPECT_EQ(back.boundaries.size(), sw.boundaries.size());
  // The gate checks every point: a bound between the points' values passes some and fails others,
  // each check named by recipe and point.
  std::vector<double> fp16;
  for (std::size_t p = 0; p < sw.points(); ++p) fp16.push_back(m[p * R + 1]);
  const double mid =
      (*std::min_element(fp16.begin(), fp16.end()) + *std::max_element(fp16.begin(), fp16.end())) / 2;
  gate::GateOptions go;
  go.thresholds = gate::parse_thresholds(fmt::format("[default]\nmean_abs_log_ratio = {}\n", mid), "t.toml");
  go.recipes = {"fp16"};
  const gate::GateResult res = gate::evaluate_sweep(back, go);
  ASSERT_EQ(res.checks.size(), sw.points());
  std::size_t fails = 0;
  for (std::size_t p = 0; p < sw.points(); ++p) {
    EXPECT_EQ(res.checks[p].recipe, "fp16 @ " + sweep_point_label(sw, p));
    EXPECT_EQ(res.checks[p].verdict == gate::Verdict::fail, fp16[p] > mid) << p;
    fails += fp16[p] > mid;
  }
  EXPECT_GT(fails, 0u);
  EXPECT_LT(fails, sw.points());
  go.bitwise = true;
  EXPECT_THROW(gate::evaluate_sweep(back, go), InputError);
  const std::string toml = path + ".toml";
  std::ofstream(toml) << fmt::format("[default]\nmean_abs_log_ratio = {}\n", mid);
  const auto cli = rlp_test::run_command(std::string(RLPARITY_CLI_PATH) + " gate " + path +
                                         " --recipes fp16 --thresholds " + toml);
  std::filesystem::remove(toml);
  EXPECT_EQ(cli.code, 1) << cli.output;
  EXPECT_NE(cli.output.find("fp16 @ gen-tp="), std::string::npos) << cli.output;
  std::filesystem::remove(path);
  EXPECT_NE(format_sweep_table(sw).find("gen-attention=split-kv:4"), std::string::npos);
}

TEST(SweepBoundaries, FindsPlantedJumpAndNothingInFlatCurves) {
  std::mt19937_64 rng(1);
  std::normal_distribution<double> noise(0.0, 0.01);
  std::vector<double> curve(200);
  for (std::size_t i = 0; i < curve.size(); ++i) curve[i] = (i >= 97 ? 0.2 : 0.1) + noise(rng);
  const auto b = find_boundaries(curve);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0].position, 97);
  EXPECT_GT(b[0].jump, 0.05);

  // A downward jump too.
  for (double& x : curve) x = -x;
  const auto down = find_boundaries(curve);
  ASSERT_EQ(down.size(), 1u);
  EXPECT_EQ(down[0].position, 97);
  EXPECT_LT(down[0].jump, 0.0);

  // Exactly flat, and level with noise: nothing.
  EXPECT_TRUE(find_boundaries(std::vector<double>(200, 0.1)).empty());
  for (int seed = 0; seed < 20; ++seed) {
    std::mt19937_64 r2(static_cast<uint64_t>(seed));
    std::vector<double> flat(200);
    for (double& x : flat) x = 0.1 + noise(r2);
    EXPECT_TRUE(find_boundaries(flat).empty()) << "seed " << seed;
  }
  // Exact step without noise (sigma 0): found once.
  std::vector<double> step(64, 1.0);
  for (std::size_t i = 40; i < step.size(); ++i) step[i] = 2.0;
  const auto s = find_boundaries(step);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].position, 40);
  // Too short to test.
  EXPECT_TRUE(find_boundaries({1.0, 5.0, 1.0}).empty());
}

class SweepCli : public rlp_test::ScratchDirTest {};

TEST_F(SweepCli, WritesTheSweepFileAndKeptRunsAndRefusesAmbiguousKnobs) {
  const std::string cli = RLPARITY_CLI_PATH;
  const std::string base = "cd " + dir_.string() + " && " + cli +
                           " sweep --recipes bf16 --no-oracle --max-new-tokens 4 --grid gen-tp=1,2 ";
  const auto ok = rlp_test::run_command(base + "--keep-runs . -o s.h5");
  ASSERT_EQ(ok.code, 0) << ok.output;
  EXPECT_NE(ok.output.find("gen-tp=2"), std::string::npos) << ok.output;
  EXPECT_TRUE(std::filesystem::exists(dir_ / "s.h5"));
  EXPECT_TRUE(std::filesystem::exists(dir_ / "point-0.h5"));
  EXPECT_TRUE(std::filesystem::exists(dir_ / "point-1.h5"));
  const auto again = rlp_test::run_command(base + "-o s.h5");
  EXPECT_EQ(again.code, 2) << again.output;
  const auto both = rlp_test::run_command(base + "--gen-tp 2 -o t.h5");
  EXPECT_EQ(both.code, 2);
  EXPECT_NE(both.output.find("also set by --gen-tp 2"), std::string::npos) << both.output;
  const auto bad = rlp_test::run_command(base + "--grid gen-kv-cache=bf16,int3 -o t.h5");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.output.find("int3"), std::string::npos) << bad.output;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "t.h5"));
  // report renders the sweep file: the per-point table and chart, one per-position plot per recipe.
  const auto rep =
      rlp_test::run_command("cd " + dir_.string() + " && " + cli + " report s.h5 -o s.html --markdown s.md");
  ASSERT_EQ(rep.code, 0) << rep.output;
  std::ifstream html(dir_ / "s.html"), md(dir_ / "s.md");
  const std::string h((std::istreambuf_iterator<char>(html)), std::istreambuf_iterator<char>()),
      m((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  for (const char* id :
       {"data-plot=\"sweep-points\"", "data-plot=\"sweep-position-bf16\"", "id=\"sweep-boundaries\""})
    EXPECT_NE(h.find(id), std::string::npos) << id;
  EXPECT_NE(m.find("| 1 | 2 |"), std::string::npos) << m;  // point 1: gen-tp=2
  const auto refused =
      rlp_test::run_command("cd " + dir_.string() + " && " + cli + " report s.h5 --preset verl -o x.html");
  EXPECT_EQ(refused.code, 2) << refused.output;
  EXPECT_NE(refused.output.find("is a sweep file"), std::string::npos) << refused.output;
  if (std::system("/usr/bin/python3 -c 'import h5py' 2>/dev/null") != 0) GTEST_SKIP() << "no h5py";
  const std::string script = write("check.py", R"(
import h5py, sys
f = h5py.File(sys.argv[1], "r")
assert [k.decode() for k in f["/sweep/knobs"][:]] == ["gen-tp"]
assert f["/sweep/values"].shape == (2, 1)
assert f["/sweep/summary/mean_abs_log_ratio"].shape == (2, 1)
assert f["/sweep/position/mean_abs_log_ratio"].shape[:2] == (2, 1)
for k in ["point", "recipe", "position", "jump", "z"]:
    assert k in f["/sweep/boundaries"], k
)");
  const auto py = rlp_test::run_command("/usr/bin/python3 " + script + " " + (dir_ / "s.h5").string());
  EXPECT_EQ(py.code, 0) << py.output;
}

}  // namespace
}  // namespace rlp
