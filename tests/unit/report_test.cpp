// Structural tests of `rlparity report` (docs/report.md): the HTML is well-formed XML, has no
// external resources, every plot has data for every recipe, the summary numbers equal the run
// file's attributes, tables are capped with a note, the Markdown tables parse, output is
// deterministic, and a 1e6-token run gives a small page. Plus unit tests of the SVG writer.
#include "rlparity/report/report.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <hdf5.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <regex>
#include <set>

#include "rlparity/gate/gate.hpp"
#include "rlparity/gate/thresholds.hpp"
#include "rlparity/inspect/inspect.hpp"
#include "rlparity/io/run_file.hpp"
#include "rlparity/metrics/statistics.hpp"
#include "rlparity/model/checkpoint_writer.hpp"
#include "rlparity/report/svg.hpp"
#include "unit/gate_test_util.hpp"

namespace {

using rlp_test::XmlElement;

// ---- synthetic runs ----

struct SynthSpec {
  std::vector<std::string> recipes = {"bf16", "fp8-gen", "fp8-e2e"};
  std::size_t sequences = 24;
  std::size_t min_len = 5, max_len = 40;
  std::size_t layers = 5;
  uint64_t seed = 7;
  bool kl = true;
};

rlp::RunData make_run(const SynthSpec& sp) {
  rlp::RunData run;
  run.tool_version = "test";
  run.command_line = "rlparity replay --synthetic <&>";
  run.checkpoint_path = "/models/synthetic \"ckpt\"";
  run.checkpoint_hash = "0123456789abcdef";
  run.created = "2025-01-01T00:00:00Z";
  run.seed = sp.seed;
  run.model_spec = {{"dim", 64}, {"n_layers", sp.layers}};
  run.extra = {{"backend", "cpu"}, {"inputs", "synthetic.jsonl"}};
  std::mt19937_64 rng(sp.seed);
  std::uniform_int_distribution<std::size_t> len(sp.min_len, sp.max_len);
  std::uniform_int_distribution<int32_t> tok(0, 511);
  run.seq_offsets.push_back(0);
  std::size_t R = 0;
  for (std::size_t s = 0; s < sp.sequences; ++s) {
    const std::size_t plen = 3, rlen = len(rng);
    for (std::size_t i = 0; i < plen + rlen; ++i) run.token_ids.push_back(tok(rng));
    run.seq_offsets.push_back(static_cast<int64_t>(run.token_ids.size()));
    run.prompt_lengths.push_back(static_cast<int32_t>(plen));
    run.seq_ids.push_back("seq-" + std::to_string(s) + (s == 1 ? " <b>&amp;|" : ""));
    R += rlen;
  }
  const auto ro = rlp::response_offsets(run.seq_offsets, run.prompt_lengths);
  std::normal_distribution<double> noise(0.0, 1.0);
  std::uniform_real_distribution<double> unif(0.0, 1.0);
  for (std::size_t k = 0; k < sp.recipes.size(); ++k) {
    rlp::RecipeResult r;
    r.name = sp.recipes[k];
    r.settings = {{"recipe", r.name},
                  {"gen", {{"gemm", "fp8"}, {"block", 128}}},
                  {"train", {{"gemm", "bf16"}}},
                  {"is_cap", 2.0}};
    const double scale = 0.002 * std::pow(10.0, static_cast<double>(k));
    std::vector<double> lg(R), lt(R), kl(R);
    for (std::size_t i = 0; i < R; ++i) {
      lg[i] = -std::abs(noise(rng)) * 2.0 - 0.01;
      const double d = noise(rng) * scale * (unif(rng) < 0.01 ? 20.0 : 1.0);
      lt[i] = i % 17 == 3 ? lg[i] : std::min(0.0, lg[i] + d);  // some exact zeros
      kl[i] = std::abs(d) * std::abs(d) * 0.5 + 1e-9;
    }
    r.tokens["logp_gen"] = lg;
    r.tokens["logp_train"] = lt;
    if (sp.kl) r.tokens["kl_gen_train"] = kl;
    std::vector<double> gt(sp.layers), go(sp.layers), to(sp.layers);
    for (std::size_t l = 0; l < sp.layers; ++l) {
      gt[l] = scale * static_cast<double>(l + 1);
      go[l] = scale * 1.5 * static_cast<double>(l + 1);
      to[l] = 1e-4 * static_cast<double>(l + 1);
    }
    r.layers["rel_l2_gen_train"] = gt;
    r.layers["rel_l2_gen_oracle"] = go;
    r.layers["rel_l2_train_oracle"] = to;
    for (std::size_t i = 0; i < R; ++i)
      for (std::size_t l = 0; l < sp.layers; ++l)
        r.token_rel_l2.push_back(static_cast<float>(scale * static_cast<double>(l + 1) * (0.5 + unif(rng))));
    rlp::compute_recipe_statistics(r, ro, rlp::StatsOptions{});
    run.recipes.push_back(std::move(r));
  }
  return run;
}

// ---- HTML helpers ----

XmlElement parse_html(const std::string& html) {
  const std::string doctype = "<!DOCTYPE html>";
  EXPECT_EQ(html.compare(0, doctype.size(), doctype), 0);
  return rlp_test::parse_xml(html.substr(doctype.size()));
}

void walk(const XmlElement& e, const std::function<void(const XmlElement&)>& f) {
  f(e);
  for (const auto& c : e.children) walk(c, f);
}

std::vector<const XmlElement*> find_all(const XmlElement& root,
                                        const std::function<bool(const XmlElement&)>& pred) {
  std::vector<const XmlElement*> out;
  std::function<void(const XmlElement&)> rec = [&](const XmlElement& e) {
    if (pred(e)) out.push_back(&e);
    for (const auto& c : e.children) rec(c);
  };
  rec(root);
  return out;
}

std::string attr(const XmlElement& e, const std::string& k) {
  auto it = e.attrs.find(k);
  return it == e.attrs.end() ? std::string() : it->second;
}

bool has_class(const XmlElement& e, const std::string& c) {
  std::stringstream ss(attr(e, "class"));
  std::string w;
  while (ss >> w)
    if (w == c) return true;
  return false;
}

// Number of drawn points in a path's d attribute (commands M/L/H/V each add one).
std::size_t path_points(const std::string& d) {
  std::size_t n = 0;
  for (char c : d)
    if (c == 'M' || c == 'L' || c == 'H' || c == 'V') ++n;
  return n;
}

// Does this element (a path, or a group of rects) draw data?
bool draws_data(const XmlElement& e) {
  if (e.name == "path") return path_points(attr(e, "d")) >= 2;
  std::size_t rects = 0;
  for (const auto& c : e.children)
    if (c.name == "rect" && std::stod(attr(c, "width")) > 0 && std::stod(attr(c, "height")) > 0) ++rects;
  return rects > 0;
}

std::string slug(const std::string& s) {
  std::string o;
  for (char c : s) o += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') ? c : '_';
  return o;
}

rlp::report::ReportOptions default_opts() {
  rlp::report::ReportOptions o;
  o.run_path = "run.h5";
  return o;
}

// ---- SVG writer ----

TEST(ReportSvg, XmlEscape) {
  EXPECT_EQ(rlp::report::xml_escape("a<b>&\"'"), "a&lt;b&gt;&amp;&quot;&#39;");
  EXPECT_EQ(rlp::report::xml_escape(std::string("x\x01y")), "x?y");
  EXPECT_EQ(rlp::report::xml_escape("\xC3\xA9"), "\xC3\xA9");  // valid UTF-8 kept
  EXPECT_EQ(rlp::report::xml_escape("\xC3("), "?(");           // invalid UTF-8 replaced
}

TEST(ReportSvg, NumberFormatting) {
  for (double v : {0.1, 1.0 / 3.0, 1e-300, 123456.789, -2.5e-7, 5e-324})
    EXPECT_EQ(std::strtod(rlp::report::format_exact(v).c_str(), nullptr), v);
  EXPECT_EQ(rlp::report::format_exact(std::nan("")), "nan");
  EXPECT_EQ(rlp::report::format_sig(1.5e-7, 4), "1.5e-7");
  EXPECT_EQ(rlp::report::format_sig(0.00123, 3), "0.00123");
  EXPECT_EQ(rlp::report::format_sig(42.0, 4), "42");
  EXPECT_EQ(rlp::report::format_sig(1e6, 3), "1e6");
}

TEST(ReportSvg, BinningCountsEveryValueOnce) {
  std::vector<double> v = {0.0, -1.0, 1e-3, 1e-2, 0.05, 0.1, 1.0, 2.0, std::nan("")};
  const auto b = rlp::report::bin_values(v, 1e-3, 1.0, 6, true);
  ASSERT_EQ(b.edges.size(), 7u);
  EXPECT_EQ(b.edges.front(), 1e-3);
  EXPECT_EQ(b.edges.back(), 1.0);
  EXPECT_EQ(b.total(), 5u);  // 1e-3 .. 1.0 (right edge closed)
  EXPECT_EQ(b.nonpositive, 2u);
  EXPECT_EQ(b.above, 1u);
  EXPECT_EQ(b.nan, 1u);
  EXPECT_EQ(b.counts.front(), 1.0);
  EXPECT_EQ(b.counts.back(), 1.0);
}

TEST(ReportSvg, TicksAndCdf) {
  EXPECT_EQ(rlp::report::axis_ticks(1e-4, 1.0, true), (std::vector<double>{1e-4, 1e-3, 1e-2, 1e-1, 1.0}));
  const auto lin = rlp::report::axis_ticks(0, 10, false);
  ASSERT_FALSE(lin.empty());
  EXPECT_EQ(lin.front(), 0.0);
  EXPECT_EQ(lin.back(), 10.0);
  EXPECT_GE(rlp::report::axis_ticks(0.9, 1.1, true).size(), 3u);  // short log range: linear ticks
  std::vector<double> v;
  for (int i = 1000; i >= 1; --i) v.push_back(i * 1e-3);
  v.push_back(0.0);
  const auto s = rlp::report::cdf_series(v, 50, true);
  ASSERT_EQ(s.x.size(), 50u);
  EXPECT_EQ(s.x.front(), 1e-3);
  EXPECT_EQ(s.x.back(), 1.0);
  EXPECT_DOUBLE_EQ(s.y.back(), 1.0);
  EXPECT_DOUBLE_EQ(s.y.front(), 2.0 / 1001.0);  // the zero counts below the first point
}

TEST(ReportSvg, PlotsAreWellFormedAndDrawEverySeries) {
  rlp::report::PlotOptions o;
  o.id = "t";
  o.title = "T <&>";
  o.x = {"x", "nats", true, {}, {}};
  o.y = {"y", "", false, {}, {}};
  rlp::report::Series a{"a&b", 0, {1e-3, 1e-2, 1e-1}, {0.1, 0.5, 1.0}, false};
  rlp::report::Series b{"b", 1, {1e-3, 1e-2, 1e-1}, {0.2, 0.6, 1.0}, true};
  const auto svg = rlp::report::line_plot(o, {a, b});
  const auto root = rlp_test::parse_xml(svg);
  auto paths = find_all(root, [](const XmlElement& e) { return e.name == "path"; });
  ASSERT_EQ(paths.size(), 2u);
  EXPECT_EQ(attr(*paths[0], "data-series"), "a&b");
  EXPECT_GE(path_points(attr(*paths[1], "d")), 3u);
  const auto bars = rlp::report::bar_chart(o, {"0", "1"}, {{"s", 0, {1.0, 2.0}}});
  EXPECT_NO_THROW(rlp_test::parse_xml(bars));
  const auto empty = rlp::report::line_plot(o, {});
  EXPECT_NE(empty.find("no data"), std::string::npos);
}

TEST(ReportSvg, HeatmapMergesEqualCellsAndOutlinesMarks) {
  rlp::report::PlotOptions o;
  o.id = "h";
  o.title = "H";
  // Row 0: four cells of one colour class (one rectangle); row 1: 1e-4 .. 1 (four classes).
  const std::vector<double> v = {1e-3, 1e-3, 1e-3, 1e-3, 1e-4, 1e-3, 1e-1, 1.0};
  const std::string svg = rlp::report::heatmap_plot(o, 2, 4, v, 1e-4, 1.0, true, {1, -1, 0, 1});
  const auto root = rlp_test::parse_xml(svg);
  const auto data = find_all(root, [](const XmlElement& e) { return attr(e, "class") == "data"; });
  ASSERT_EQ(data.size(), 1u);
  std::size_t rects = 0;
  for (const auto& ch : data[0]->children) rects += ch.name == "rect" ? 1 : 0;
  EXPECT_EQ(rects, 1u + 4u);
  const auto marks = find_all(root, [](const XmlElement& e) { return attr(e, "class") == "marks"; });
  ASSERT_EQ(marks.size(), 1u);
  const std::string d = attr(*marks[0], "d");
  EXPECT_EQ(std::count(d.begin(), d.end(), 'M'), 3);
  EXPECT_NE(rlp::report::heatmap_plot(o, 2, 4, {1.0}, 1e-4, 1.0, true, {}).find("no data"),
            std::string::npos);
}

// ---- HTML report ----

class ReportHtml : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new rlp_test::TempDir("report");
    path_ = *dir_ / "run.h5";
    rlp::write_run_file(path_, make_run(SynthSpec{}), false);
    run_ = new rlp::RunData(rlp::read_run_file(path_));
    html_ = new std::string(rlp::report::render_html(*run_, default_opts()));
  }
  static void TearDownTestSuite() {
    delete html_;
    delete run_;
    delete dir_;
  }
  static rlp_test::TempDir* dir_;
  static std::string path_;
  static rlp::RunData* run_;
  static std::string* html_;
};
rlp_test::TempDir* ReportHtml::dir_ = nullptr;
std::string ReportHtml::path_;
rlp::RunData* ReportHtml::run_ = nullptr;
std::string* ReportHtml::html_ = nullptr;

// The token x layer heatmap of each recipe and its birth counts, recounted here from token_rel_l2.
TEST_F(ReportHtml, MismatchBirthHeatmapAndCounts) {
  const std::string md = rlp::report::render_markdown(*run_, default_opts());
  for (const auto& r : run_->recipes) {
    EXPECT_NE(html_->find("data-plot=\"birth-" + r.name + "\""), std::string::npos) << r.name;
    const std::size_t L = r.layers.at("rel_l2_gen_train").size(), T = r.token_rel_l2.size() / L;
    std::vector<std::size_t> born(L, 0);
    std::size_t never = 0;
    for (std::size_t t = 0; t < T; ++t) {
      std::size_t l = 0;
      while (l < L && !(r.token_rel_l2[t * L + l] >= 1e-2f)) ++l;
      (l < L ? born[l] : never) += 1;
    }
    std::string want = " " + std::to_string(T) + " tokens:";
    for (std::size_t l = 0; l < L; ++l)
      if (born[l] > 0) want += " layer " + std::to_string(l) + ": " + std::to_string(born[l]) + ";";
    want += " never: " + std::to_string(never) + ".";
    EXPECT_NE(md.find(want), std::string::npos) << r.name << ": " << want;
  }
}

TEST_F(ReportHtml, IsWellFormed) {
  XmlElement root;
  ASSERT_NO_THROW(root = parse_html(*html_));
  EXPECT_EQ(root.name, "html");
  ASSERT_EQ(root.children.size(), 2u);
  EXPECT_EQ(root.children[0].name, "head");
  EXPECT_EQ(root.children[1].name, "body");
  // Every id is unique.
  std::set<std::string> ids;
  walk(root, [&](const XmlElement& e) {
    if (auto id = attr(e, "id"); !id.empty()) {
      EXPECT_TRUE(ids.insert(id).second) << "duplicate id " << id;
    }
  });
}

TEST_F(ReportHtml, HasNoExternalResources) {
  const std::string& h = *html_;
  EXPECT_EQ(h.find("http"), std::string::npos);
  EXPECT_EQ(h.find("<link"), std::string::npos);
  EXPECT_EQ(h.find("@import"), std::string::npos);
  EXPECT_EQ(h.find("url("), std::string::npos);
  EXPECT_EQ(h.find("<img"), std::string::npos);
  EXPECT_EQ(h.find("<iframe"), std::string::npos);
  for (std::size_t p = h.find("src="); p != std::string::npos; p = h.find("src=", p + 1))
    EXPECT_EQ(h.compare(p + 5, 5, "data:"), 0) << h.substr(p, 60);
  // Only in-page links.
  for (std::size_t p = h.find("href=\""); p != std::string::npos; p = h.find("href=\"", p + 1))
    EXPECT_EQ(h[p + 6], '#');
}

TEST_F(ReportHtml, HeaderNamesCheckpointInputsRecipesAndKnobs) {
  const auto root = parse_html(*html_);
  const auto meta =
      find_all(root, [](const XmlElement& e) { return e.name == "table" && attr(e, "id") == "run-meta"; });
  ASSERT_EQ(meta.size(), 1u);
  std::map<std::string, std::string> kv;
  for (const auto& tr : meta[0]->children[0].children) kv[tr.children[0].text] = tr.children[1].text;
  EXPECT_EQ(kv["checkpoint"], run_->checkpoint_path);
  EXPECT_EQ(kv["checkpoint hash"], run_->checkpoint_hash);
  EXPECT_EQ(kv["command line"], run_->command_line);
  EXPECT_NE(kv["inputs"].find("synthetic.jsonl"), std::string::npos);
  EXPECT_EQ(kv["recipes"], "bf16, fp8-gen, fp8-e2e");
  EXPECT_NE(kv["written by"].find("test"), std::string::npos);
  const auto settings =
      find_all(root, [](const XmlElement& e) { return e.name == "table" && has_class(e, "settings"); });
  ASSERT_EQ(settings.size(), 3u);
  bool found = false;
  for (const auto& tr : settings[1]->children[0].children)
    if (tr.children[0].text == "gen.gemm") found = tr.children[1].text == "fp8";
  EXPECT_TRUE(found);
}

TEST_F(ReportHtml, EveryPlotHasDataForEachRecipe) {
  const auto root = parse_html(*html_);
  const auto plots =
      find_all(root, [](const XmlElement& e) { return e.name == "svg" && has_class(e, "plot"); });
  std::set<std::string> ids;
  for (const auto* p : plots) ids.insert(attr(*p, "data-plot"));
  for (const auto& r : run_->recipes)
    for (const char* kind : {"hist-abs-log-ratio-", "cdf-abs-log-ratio-", "hist-ratio-", "cdf-ratio-",
                             "kl-position-", "layers-"})
      EXPECT_TRUE(ids.count(kind + slug(r.name))) << kind << r.name;
  for (const char* cmp : {"compare-hist-abs-log-ratio", "compare-cdf-abs-log-ratio", "compare-cdf-ratio",
                          "compare-kl-position", "compare-layers"})
    EXPECT_TRUE(ids.count(cmp)) << cmp;
  for (const auto* p : plots) {
    const std::string id = attr(*p, "data-plot");
    if (id.rfind("birth-", 0) == 0) continue;  // heatmaps: MismatchBirthHeatmapAndCounts
    // Which series must be drawn: the recipe of a per-recipe plot, all recipes in a comparison;
    // the per-layer plot of one recipe draws the three layer metrics.
    std::set<std::string> want;
    if (id.rfind("compare-", 0) == 0) {
      for (const auto& r : run_->recipes) want.insert(r.name);
    } else if (id.rfind("layers-", 0) == 0) {
      want = {"gen vs train", "gen vs oracle", "train vs oracle"};
    } else {
      for (const auto& r : run_->recipes)
        if (id.size() > r.name.size() &&
            id.compare(id.size() - r.name.size(), r.name.size(), slug(r.name)) == 0 &&
            id[id.size() - r.name.size() - 1] == '-')
          want = {r.name};
    }
    ASSERT_FALSE(want.empty()) << id;
    const auto data = find_all(*p, [](const XmlElement& e) { return e.name == "g" && has_class(e, "data"); });
    ASSERT_EQ(data.size(), 1u) << id;
    std::set<std::string> drawn;
    for (const auto& s : data[0]->children) {
      EXPECT_TRUE(draws_data(s)) << id << " " << attr(s, "data-series");
      drawn.insert(attr(s, "data-series"));
    }
    EXPECT_EQ(drawn, want) << id;
    // Axes are labelled.
    const auto labels =
        find_all(*p, [](const XmlElement& e) { return e.name == "text" && has_class(e, "axis-label"); });
    EXPECT_EQ(labels.size(), 2u) << id;
  }
}

// Checks every value cell of one summary table against the HDF5 attributes read with read_run_file.
void check_summary_table(const XmlElement& table, const rlp::RunData& run, std::size_t expect_rows) {
  const XmlElement& tbody = table.children.at(1);
  ASSERT_EQ(tbody.name, "tbody");
  EXPECT_EQ(tbody.children.size(), expect_rows);
  std::size_t compared = 0;
  for (const auto& tr : tbody.children) {
    const std::string stat = attr(tr, "data-stat");
    ASSERT_EQ(tr.children.size(), run.recipes.size() + 1);
    for (std::size_t k = 0; k < run.recipes.size(); ++k) {
      const XmlElement& td = tr.children[k + 1];
      EXPECT_EQ(attr(td, "data-recipe"), run.recipes[k].name);
      const std::string text = td.children.at(0).text;
      auto it = run.recipes[k].summary.find(stat);
      if (it == run.recipes[k].summary.end()) {
        EXPECT_EQ(text, "-");
        continue;
      }
      if (std::isnan(it->second)) {
        EXPECT_EQ(text, "nan");
      } else {
        EXPECT_EQ(std::strtod(text.c_str(), nullptr), it->second)
            << stat << " " << run.recipes[k].name << " " << text;
      }
      ++compared;
    }
  }
  EXPECT_GT(compared, 0u);
}

TEST_F(ReportHtml, SummaryNumbersEqualTheHdf5Attributes) {
  const auto root = parse_html(*html_);
  const auto head = find_all(root, [](const XmlElement& e) { return attr(e, "id") == "summary-table"; });
  const auto all = find_all(root, [](const XmlElement& e) { return attr(e, "id") == "summary-all"; });
  ASSERT_EQ(head.size(), 1u);
  ASSERT_EQ(all.size(), 1u);
  check_summary_table(*head[0], *run_, rlp::gate::headline_statistics().size());
  std::set<std::string> names;
  for (const auto& r : run_->recipes)
    for (const auto& [k, v] : r.summary) names.insert(k);
  check_summary_table(*all[0], *run_, names.size());
}

TEST_F(ReportHtml, WorstTokensAreCappedWithANote) {
  const auto root = parse_html(*html_);
  const auto tables =
      find_all(root, [](const XmlElement& e) { return e.name == "table" && has_class(e, "worst"); });
  ASSERT_EQ(tables.size(), run_->recipes.size());
  const auto notes = find_all(root, [](const XmlElement& e) { return has_class(e, "omitted"); });
  ASSERT_EQ(notes.size(), run_->recipes.size());
  const auto ro = rlp::response_offsets(run_->seq_offsets, run_->prompt_lengths);
  for (std::size_t k = 0; k < tables.size(); ++k) {
    const auto& r = run_->recipes[k];
    EXPECT_EQ(attr(*tables[k], "data-recipe"), r.name);
    const std::size_t n = r.tokens.at("log_ratio").size();
    ASSERT_GT(n, 50u);
    const auto& rows = tables[k]->children.at(1).children;
    ASSERT_EQ(rows.size(), 50u);
    EXPECT_EQ(attr(*notes[k], "data-omitted"), std::to_string(n - 50));
    EXPECT_NE(notes[k]->text.find(std::to_string(n - 50) + " of " + std::to_string(n) + " tokens omitted"),
              std::string::npos);
    double prev = INFINITY;
    for (const auto& tr : rows) {
      ASSERT_EQ(tr.children.size(), 7u);
      const double lr = std::strtod(attr(tr.children[5], "data-v").c_str(), nullptr);
      EXPECT_LE(std::abs(lr), prev);
      prev = std::abs(lr);
      // sequence id + position + token id point at a token with this log ratio.
      const std::string sid = tr.children[0].text;
      const auto s = static_cast<std::size_t>(std::find(run_->seq_ids.begin(), run_->seq_ids.end(), sid) -
                                              run_->seq_ids.begin());
      ASSERT_LT(s, run_->seq_ids.size());
      const auto pos = std::stoul(tr.children[1].text);
      const auto i = static_cast<std::size_t>(ro[s]) + pos;
      EXPECT_EQ(r.tokens.at("log_ratio")[i], lr);
      EXPECT_EQ(
          std::stol(tr.children[2].text),
          run_->token_ids[static_cast<std::size_t>(run_->seq_offsets[s] + run_->prompt_lengths[s]) + pos]);
      EXPECT_EQ(std::strtod(attr(tr.children[3], "data-v").c_str(), nullptr), r.tokens.at("logp_gen")[i]);
      EXPECT_EQ(std::strtod(attr(tr.children[6], "data-v").c_str(), nullptr), r.tokens.at("kl_gen_train")[i]);
    }
  }
}

TEST_F(ReportHtml, IsDeterministic) {
  const auto again = rlp::report::render_html(rlp::read_run_file(path_), default_opts());
  EXPECT_TRUE(again == *html_);
}

TEST_F(ReportHtml, MarkdownTablesParse) {
  const std::string md = rlp::report::render_markdown(*run_, default_opts());
  std::vector<std::vector<std::string>> tables;  // lines of each table
  std::stringstream ss(md);
  std::string line;
  bool in = false;
  while (std::getline(ss, line)) {
    if (!line.empty() && line[0] == '|') {
      if (!in) tables.emplace_back();
      tables.back().push_back(line);
      in = true;
    } else {
      in = false;
    }
  }
  ASSERT_EQ(tables.size(), 1 + run_->recipes.size());
  // Cells per row (unescaped '|' separators) equal the header's in each table.
  auto cells = [](const std::string& l) {
    std::size_t n = 0;
    for (std::size_t i = 0; i < l.size(); ++i)
      if (l[i] == '|' && (i == 0 || l[i - 1] != '\\')) ++n;
    return n - 1;
  };
  for (const auto& t : tables) {
    ASSERT_GE(t.size(), 2u);
    EXPECT_EQ(t[1].find_first_not_of("|-: "), std::string::npos) << t[1];
    for (const auto& l : t) EXPECT_EQ(cells(l), cells(t[0])) << l;
  }
  EXPECT_EQ(cells(tables[0][0]), 1 + run_->recipes.size());
  EXPECT_EQ(tables[0].size(), 2 + rlp::gate::headline_statistics().size());
  for (std::size_t k = 0; k < run_->recipes.size(); ++k) {
    EXPECT_EQ(tables[k + 1].size(), 2u + 10u);
    EXPECT_EQ(cells(tables[k + 1][0]), 7u);
  }
  EXPECT_NE(md.find("tokens omitted"), std::string::npos);
}

TEST_F(ReportHtml, GateVerdictsAndBaselineDeltas) {
  const auto th = rlp::gate::parse_thresholds(
      "[default]\nmean_abs_log_ratio = { max = 0.01 }\ness = { min = 0.5 }\n", "test.toml");
  rlp::gate::GateOptions go;
  go.thresholds = th;
  const auto res = rlp::gate::evaluate(*run_, go);
  SynthSpec other;
  other.seed = 99;
  const rlp::RunData base = make_run(other);
  auto opt = default_opts();
  opt.gate = &res;
  opt.threshold_sources = {"test.toml"};
  opt.baseline = &base;
  opt.baseline_path = "base.h5";
  const std::string html = rlp::report::render_html(*run_, opt);
  const auto root = parse_html(html);
  const auto verdicts = find_all(root, [](const XmlElement& e) { return has_class(e, "verdict"); });
  // 2 statistics x 3 recipes in each of the two summary tables.
  EXPECT_EQ(verdicts.size(), 12u);
  std::size_t fails = 0;
  for (const auto* v : verdicts) fails += has_class(*v, "fail");
  EXPECT_GT(fails, 0u);  // fp8-e2e's mean |log ratio| is ~0.16 > 0.01
  EXPECT_LT(fails, 12u);
  const auto deltas =
      find_all(root, [](const XmlElement& e) { return e.name == "table" && has_class(e, "deltas"); });
  ASSERT_EQ(deltas.size(), run_->recipes.size());
  EXPECT_EQ(deltas[0]->children.at(1).children.size(), run_->recipes[0].summary.size());
  EXPECT_NE(html.find("/inputs differ"), std::string::npos);  // inputs differ: noted
  const std::string md = rlp::report::render_markdown(*run_, opt);
  EXPECT_NE(md.find("FAIL"), std::string::npos);
  EXPECT_NE(md.find("%)"), std::string::npos);
}

TEST(ReportHtmlEdge, RunWithoutKlOrDivergenceStillRenders) {
  SynthSpec sp;
  sp.kl = false;
  sp.recipes = {"same"};
  rlp::RunData run = make_run(sp);
  // Identical paths: every |log ratio| is 0.
  auto& r = run.recipes[0];
  r.tokens.erase("log_ratio");
  r.tokens["logp_train"] = r.tokens["logp_gen"];
  r.layers.clear();
  rlp::compute_recipe_statistics(r, rlp::response_offsets(run.seq_offsets, run.prompt_lengths),
                                 rlp::StatsOptions{});
  const auto html = rlp::report::render_html(run, default_opts());
  EXPECT_NO_THROW(parse_html(html));
  EXPECT_NE(html.find("every |log ratio| is 0"), std::string::npos);
}

// A 1e6-token run: binned histograms and capped tables keep the page small.
TEST(ReportLarge, MillionTokenRunGivesASmallPage) {
  SynthSpec sp;
  sp.recipes = {"bf16", "fp8-e2e"};
  sp.sequences = 1000;
  sp.min_len = 999;
  sp.max_len = 1001;
  rlp::RunData run = make_run(sp);
  ASSERT_GE(run.recipes[0].tokens.at("logp_gen").size(), 999000u);
  rlp_test::TempDir d("report-large");
  rlp::write_run_file(d / "big.h5", run, false);
  // Size is what a browser's load time follows; the load time itself is measured, not asserted
  // (tools/measure-report-load.sh, figures in docs/report.md).
  const auto r = rlp_test::run_cli({"report", d / "big.h5", "-o", d / "big.html", "--markdown", d / "big.md"},
                                   d.path().string());
  ASSERT_EQ(r.code, 0) << r.err;
  const auto size = std::filesystem::file_size(d / "big.html");
  std::printf("1e6-token report: %zu bytes of HTML\n", static_cast<std::size_t>(size));
  EXPECT_LT(size, 2u * 1024 * 1024) << size;
  const std::string html = rlp_test::read_text(d / "big.html");
  EXPECT_NO_THROW(parse_html(html));
  EXPECT_NE(html.find("tokens omitted"), std::string::npos);
  EXPECT_LT(std::filesystem::file_size(d / "big.md"), 64u * 1024);
}

// ---- attribution and inspect sections ----

// Attribution tables shaped as replay --attribute writes them (src/replay/attribution.cpp).
void add_attribution(rlp::RunData& run, std::size_t L) {
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> u(1e-4, 5e-2);
  rlp::AttributionTable t;
  for (std::size_t l = 0; l < L; ++l) {
    t.values["layer"].push_back(static_cast<double>(l));
    t.values["mean_abs_log_ratio"].push_back(u(rng));
    t.values["mean_kl_gen_train"].push_back(u(rng) * 0.1);
    t.values["excess_mean_abs_log_ratio"].push_back(t.values["mean_abs_log_ratio"].back() - 1e-3);
    t.values["excess_mean_kl_gen_train"].push_back(t.values["mean_kl_gen_train"].back() - 1e-5);
  }
  std::vector<std::size_t> idx(L);
  for (std::size_t i = 0; i < L; ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
    return t.values["mean_abs_log_ratio"][a] > t.values["mean_abs_log_ratio"][b];
  });
  t.values["rank"].assign(L, 0.0);
  for (std::size_t r = 0; r < L; ++r) t.values["rank"][idx[r]] = static_cast<double>(r + 1);
  t.info = {{"recipe", "fp8-gen"},
            {"method", "one layer fp8"},
            {"baseline_no_fp8_layer", {{"mean_abs_log_ratio", 1e-3}, {"mean_kl_gen_train", 1e-5}}}};
  run.attribution["layers"] = t;

  rlp::AttributionTable c;
  for (int F = 0; F <= 2; ++F)
    for (int K = 0; K <= 2; ++K) {
      c.values["bf16_first_layers"].push_back(F);
      c.values["bf16_last_layers"].push_back(K);
      c.values["bf16_layers"].push_back(F + K);
      c.values["mean_abs_log_ratio"].push_back(0.05 / (1.0 + F + 2.0 * K) + u(rng) * 1e-3);
      c.values["mean_kl_gen_train"].push_back(u(rng) * 1e-2);
      c.values["removed_per_bf16_layer"].push_back(
          F + K > 0 ? (c.values["mean_abs_log_ratio"][0] - c.values["mean_abs_log_ratio"].back()) / (F + K)
                    : 0.0);
      c.values["recommended"].push_back(F == 0 && K == 1 ? 1.0 : 0.0);
    }
  c.info = {{"recipe", "fp8-gen"},
            {"criterion", "most removed per bf16 layer"},
            {"full_recipe",
             {{"mean_abs_log_ratio", c.values["mean_abs_log_ratio"][0]},
              {"mean_kl_gen_train", c.values["mean_kl_gen_train"][0]}}},
            {"recommended",
             {{"bf16_first_layers", 0},
              {"bf16_last_layers", 1},
              {"mean_abs_log_ratio", c.values["mean_abs_log_ratio"][1]},
              {"mean_kl_gen_train", c.values["mean_kl_gen_train"][1]},
              {"flags", "--bf16-first-layers 0 --bf16-last-layers 1"}}}};
  run.attribution["layer_candidates"] = c;

  rlp::AttributionTable k;
  for (const char* name : {"linear", "gemm-accum", "attention", "kv-cache", "residual"}) {
    k.labels["knob"].push_back(name);
    k.labels["gen_value"].push_back(std::string("gen-") + name);
    k.labels["train_value"].push_back(std::string("train-") + name);
    k.values["mean_abs_log_ratio"].push_back(u(rng));
    k.values["mean_kl_gen_train"].push_back(u(rng) * 0.1);
    k.values["rank"].push_back(0);
  }
  k.info = {{"recipe", "fp8-gen"},
            {"method", "one knob"},
            {"aligned", {{"mean_abs_log_ratio", 0.0}}},
            {"all_knobs", {{"mean_abs_log_ratio", 0.04}}}};
  run.attribution["knobs"] = k;

  rlp::AttributionTable v;
  for (const char* name : {"fp8-e2e-kv", "fp8-kv-b"}) {
    const double a = u(rng), b = a + u(rng);
    v.labels["recipe"].push_back(name);
    v.values["mean_abs_log_ratio_recalibrated"].push_back(a);
    v.values["mean_abs_log_ratio_stale"].push_back(b);
    v.values["mean_abs_log_ratio_added"].push_back(b - a);
    v.values["mean_kl_gen_train_recalibrated"].push_back(a * 0.1);
    v.values["mean_kl_gen_train_stale"].push_back(b * 0.1);
    v.values["mean_kl_gen_train_added"].push_back((b - a) * 0.1);
  }
  v.info = {{"stale_dir", "/ckpt/step-100"}, {"method", "nemo"}};
  run.attribution["kv_scales"] = v;
}

const XmlElement* by_id(const XmlElement& root, const std::string& id) {
  const auto v = find_all(root, [&](const XmlElement& e) { return attr(e, "id") == id; });
  return v.size() == 1 ? v[0] : nullptr;
}

// The rows (<tr> of <tbody>) of a table section's table, as column -> data-v.
std::vector<std::map<std::string, std::string>> section_rows(const XmlElement& root, const std::string& id) {
  std::vector<std::map<std::string, std::string>> out;
  const XmlElement* t = by_id(root, id + "-table");
  if (!t) return out;
  for (const auto& tr : t->children.at(1).children) {
    std::map<std::string, std::string> row;
    for (const auto& td : tr.children) row[attr(td, "data-col")] = attr(td, "data-v");
    out.push_back(row);
  }
  return out;
}

bool same_number(const std::string& text, double v) {
  const double x = std::strtod(text.c_str(), nullptr);
  return x == v || (std::isnan(x) && std::isnan(v));
}

// The values of the first series of a bar chart, from the bars' titles ("label category: value").
std::vector<double> chart_values(const XmlElement& root, const std::string& plot_id) {
  std::vector<double> out;
  const auto svgs =
      find_all(root, [&](const XmlElement& e) { return e.name == "svg" && attr(e, "data-plot") == plot_id; });
  if (svgs.size() != 1) return out;
  const auto groups =
      find_all(*svgs[0], [](const XmlElement& e) { return e.name == "g" && e.attrs.count("data-series"); });
  if (groups.empty()) return out;
  for (const auto& rect : groups[0]->children) {
    const std::string title = rect.children.empty() ? std::string() : rect.children[0].text;
    out.push_back(std::strtod(title.substr(title.rfind(": ") + 2).c_str(), nullptr));
  }
  return out;
}

// Markdown table rows (cells, trimmed) after the heading `### title`.
std::vector<std::vector<std::string>> md_section_rows(const std::string& md, const std::string& title) {
  std::vector<std::vector<std::string>> out;
  const auto at = md.find("### " + title + "\n");
  if (at == std::string::npos) return out;
  std::stringstream ss(md.substr(at));
  std::string line;
  int seen = 0;
  bool in = false;
  while (std::getline(ss, line)) {
    if (!line.empty() && line[0] == '|') {
      in = true;
      if (++seen <= 2) continue;  // header, separator
      std::vector<std::string> cells;
      std::string cur;
      for (std::size_t i = 1; i < line.size(); ++i) {
        if (line[i] == '|' && line[i - 1] != '\\') {
          const auto b = cur.find_first_not_of(' '), e = cur.find_last_not_of(' ');
          cells.push_back(b == std::string::npos ? std::string() : cur.substr(b, e - b + 1));
          cur.clear();
        } else {
          cur += line[i];
        }
      }
      out.push_back(cells);
    } else if (in) {
      break;
    }
  }
  return out;
}

struct SectionSpec {
  std::string kind, id, title, key, sort;  // key: column that identifies a row
};
const std::vector<SectionSpec>& attribution_specs() {
  static const std::vector<SectionSpec> v = {
      {"layers", "attribution-layers", "Layer attribution", "layer", "mean_abs_log_ratio"},
      {"layer_candidates", "attribution-layer-candidates",
       "bf16 first/last layers: the recommendation, measured", "", "mean_abs_log_ratio"},
      {"knobs", "attribution-knobs", "Knob attribution", "knob", "mean_abs_log_ratio"},
      {"kv_scales", "attribution-kv-scales", "Stale KV-cache scales", "recipe", "mean_abs_log_ratio_added"}};
  return v;
}

// Index of the HDF5 row a report row shows: by its key column, or (candidates) by F and K.
std::size_t hdf5_row(const rlp::AttributionTable& t, const SectionSpec& sp,
                     const std::map<std::string, std::string>& row) {
  const std::size_t n = t.values.at(sp.sort).size();
  for (std::size_t i = 0; i < n; ++i) {
    if (sp.key.empty()) {
      if (same_number(row.at("bf16_first_layers"), t.values.at("bf16_first_layers")[i]) &&
          same_number(row.at("bf16_last_layers"), t.values.at("bf16_last_layers")[i]))
        return i;
    } else if (t.labels.count(sp.key) ? t.labels.at(sp.key)[i] == row.at(sp.key)
                                      : same_number(row.at(sp.key), t.values.at(sp.key)[i])) {
      return i;
    }
  }
  return n;
}

TEST(ReportSections, AttributionSectionsShowTheHdf5Values) {
  rlp_test::TempDir d("report-attr");
  rlp::RunData made = make_run(SynthSpec{});
  add_attribution(made, 7);
  rlp::write_run_file(d / "run.h5", made, false);
  const rlp::RunData run = rlp::read_run_file(d / "run.h5");  // the HDF5 values
  ASSERT_EQ(run.attribution.size(), 4u);
  const std::string html = rlp::report::render_html(run, default_opts());
  const std::string md = rlp::report::render_markdown(run, default_opts());
  const auto root = parse_html(html);
  ASSERT_NE(by_id(root, "attribution"), nullptr);
  for (const auto& sp : attribution_specs()) {
    SCOPED_TRACE(sp.kind);
    const rlp::AttributionTable& t = run.attribution.at(sp.kind);
    const auto rows = section_rows(root, sp.id);
    const std::size_t n = t.values.at(sp.sort).size();
    ASSERT_EQ(rows.size(), n);
    double prev = INFINITY;
    std::set<std::size_t> seen;
    for (const auto& row : rows) {
      const std::size_t i = hdf5_row(t, sp, row);
      ASSERT_LT(i, n);
      seen.insert(i);
      // Every column of the HDF5 table is shown, with its exact value.
      for (const auto& [k, v] : t.values) {
        ASSERT_TRUE(row.count(k)) << k;
        EXPECT_TRUE(same_number(row.at(k), v[i])) << k << ": " << row.at(k) << " vs " << v[i];
      }
      for (const auto& [k, v] : t.labels) EXPECT_EQ(row.at(k), v[i]) << k;
      // Sorted by divergence, largest first.
      EXPECT_LE(t.values.at(sp.sort)[i], prev);
      prev = t.values.at(sp.sort)[i];
    }
    EXPECT_EQ(seen.size(), n);
    // The chart's first series draws the sorted column in the table's order.
    const auto bars = chart_values(root, sp.id);
    ASSERT_EQ(bars.size(), n);
    for (std::size_t r = 0; r < n; ++r) EXPECT_TRUE(same_number(rows[r].at(sp.sort), bars[r]));
    // Markdown: the same rows in the same order, 6 significant digits.
    const auto mrows = md_section_rows(md, sp.title);
    ASSERT_EQ(mrows.size(), n);
    const XmlElement* table = by_id(root, sp.id + "-table");
    const auto& ths = table->children.at(0).children.at(0).children;
    for (std::size_t r = 0; r < n; ++r)
      for (std::size_t c = 0; c < ths.size(); ++c) {
        const std::string col = attr(ths[c], "data-col");
        if (t.values.count(col)) {
          const double want = std::strtod(rows[r].at(col).c_str(), nullptr);
          EXPECT_NEAR(std::strtod(mrows[r][c].c_str(), nullptr), want, 5e-6 * std::abs(want) + 1e-300) << col;
        } else {
          EXPECT_EQ(mrows[r][c], rows[r].at(col)) << col;
        }
      }
  }
  // The recommendation: flags and the divergence it leaves, from /attribution/layer_candidates info.
  const auto& rec = run.attribution.at("layer_candidates").info.at("recommended");
  const std::string flags = rec.at("flags").get<std::string>();
  const std::string leaves =
      "leaves mean |log ratio| " + rlp::report::format_sig(rec.at("mean_abs_log_ratio").get<double>(), 4);
  for (const std::string* out : {&html, &md}) {
    EXPECT_NE(out->find("Recommended: " + flags), std::string::npos);
    EXPECT_NE(out->find(leaves), std::string::npos) << leaves;
  }
  // The recommended row is the one the info names.
  for (const auto& row : section_rows(root, "attribution-layer-candidates"))
    if (same_number(row.at("recommended"), 1.0)) {
      EXPECT_TRUE(same_number(row.at("bf16_first_layers"), rec.at("bf16_first_layers").get<double>()));
      EXPECT_TRUE(same_number(row.at("bf16_last_layers"), rec.at("bf16_last_layers").get<double>()));
      EXPECT_TRUE(same_number(row.at("mean_abs_log_ratio"), rec.at("mean_abs_log_ratio").get<double>()));
    }
  EXPECT_NE(md.find("## Attribution"), std::string::npos);
}

TEST_F(ReportHtml, NoAttributionOrInspectSectionsWithoutTheData) {
  ASSERT_TRUE(run_->attribution.empty());
  EXPECT_EQ(html_->find("id=\"attribution"), std::string::npos);
  EXPECT_EQ(html_->find("id=\"inspect"), std::string::npos);
  const std::string md = rlp::report::render_markdown(*run_, default_opts());
  EXPECT_EQ(md.find("## Attribution"), std::string::npos);
  EXPECT_EQ(md.find("inspection"), std::string::npos);
  // One kind present: only its section.
  rlp::RunData one = *run_;
  add_attribution(one, 3);
  one.attribution.erase("knobs");
  one.attribution.erase("kv_scales");
  one.attribution.erase("layer_candidates");
  const auto root = parse_html(rlp::report::render_html(one, default_opts()));
  EXPECT_NE(by_id(root, "attribution-layers"), nullptr);
  EXPECT_EQ(by_id(root, "attribution-knobs"), nullptr);
  EXPECT_EQ(by_id(root, "attribution-kv-scales"), nullptr);
  EXPECT_EQ(by_id(root, "attribution-layer-candidates"), nullptr);
}

// Numeric attribute of an HDF5 object, read with the C API (independently of rlparity's reader).
double h5_attr(hid_t file, const std::string& obj, const std::string& name) {
  double v = std::nan("");
  const hid_t a = H5Aopen_by_name(file, obj.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT);
  EXPECT_GE(a, 0) << obj << " " << name;
  if (a < 0) return v;
  EXPECT_GE(H5Aread(a, H5T_NATIVE_DOUBLE, &v), 0);
  H5Aclose(a);
  return v;
}

TEST(ReportSections, InspectFileSectionsShowTheHdf5Values) {
  rlp_test::TempDir d("report-inspect");
  rlp::RandomCheckpointOptions co;
  co.hidden = 256;
  co.intermediate = 384;
  co.layers = 3;
  co.heads = 4;
  co.kv_heads = 2;
  co.vocab = 128;
  co.dtype = rlp::DType::bf16;
  co.seed = 5;
  co.outlier_layer = 1;
  co.outlier_scale = 100.0;
  co.outlier_channel = 3;
  co.out = (d / "ckpt");
  rlp::write_random_checkpoint(co);
  const rlp::InspectResult r = rlp::inspect_checkpoint(rlp::Checkpoint::open(co.out));
  rlp::write_inspect_file(d / "inspect.h5", r, "rlparity inspect", false);
  rlp::write_run_file(d / "run.h5", make_run(SynthSpec{}), false);
  EXPECT_TRUE(rlp::is_inspect_file(d / "inspect.h5"));
  EXPECT_FALSE(rlp::is_inspect_file(d / "run.h5"));

  // `report INSPECT.h5` (kind told by the root attribute) and `report RUN.h5 --inspect INSPECT.h5`.
  auto res = rlp_test::run_cli({"report", d / "inspect.h5", "-o", d / "i.html", "--markdown", d / "i.md"},
                               d.path().string());
  ASSERT_EQ(res.code, 0) << res.err;
  res = rlp_test::run_cli(
      {"report", d / "run.h5", "--inspect", d / "inspect.h5", "-o", d / "r.html", "--markdown", d / "r.md"},
      d.path().string());
  ASSERT_EQ(res.code, 0) << res.err;
  res = rlp_test::run_cli({"report", d / "inspect.h5", "--baseline", d / "run.h5", "-o", d / "bad.html"},
                          d.path().string());
  EXPECT_EQ(res.code, 2);
  EXPECT_FALSE(std::filesystem::exists(d / "bad.html"));

  const hid_t file = H5Fopen((d / "inspect.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  const std::vector<std::string> convs = {"te", "vllm", "deepgemm", "nemo-refit"};
  for (const char* page : {"i", "r"}) {
    SCOPED_TRACE(page);
    const std::string html = rlp_test::read_text(d / (std::string(page) + ".html"));
    const std::string md = rlp_test::read_text(d / (std::string(page) + ".md"));
    const auto root = parse_html(html);
    ASSERT_NE(by_id(root, "inspect"), nullptr);
    EXPECT_EQ(by_id(root, "summary") != nullptr, std::string(page) == "r");
    const auto rows = section_rows(root, "inspect-tensors");
    ASSERT_EQ(rows.size(), r.tensors.size());
    double prev = -INFINITY;
    for (const auto& row : rows) {
      const std::string obj = "/tensors/" + row.at("name");
      for (const auto& [col, text] : row) {
        if (col == "name" || col == "proj") continue;
        if (col == "shape") {
          EXPECT_EQ(text, fmt::format("{}x{}", h5_attr(file, obj, "rows"), h5_attr(file, obj, "cols")));
        } else if (col.rfind("max_", 0) == 0) {  // maximum over the 8 convention x mode attributes
          double m = 0;
          for (const auto& c : convs)
            for (const char* mode : {"_fp32_", "_pow2_"})
              m = std::max(m, h5_attr(file, obj, c + mode + col.substr(4)));
          EXPECT_TRUE(same_number(text, m)) << obj << " " << col;
        } else {
          EXPECT_TRUE(same_number(text, h5_attr(file, obj, col))) << obj << " " << col << ": " << text;
        }
      }
      const double w = h5_attr(file, obj, "worst_snr_db");
      EXPECT_GE(w, prev);  // worst SNR first
      prev = w;
    }
    // The SNR charts: fp32 and pow2 scales, one series per convention, bars in the table's order.
    for (const auto& [plot, mode] : std::vector<std::pair<std::string, std::string>>{
             {"inspect-tensors", "_fp32_"}, {"inspect-tensors-2", "_pow2_"}}) {
      const auto bars = chart_values(root, plot);
      ASSERT_EQ(bars.size(), rows.size()) << plot;
      for (std::size_t i = 0; i < rows.size(); ++i)
        EXPECT_TRUE(same_number(rows[i].at("te" + mode + "snr_db"), bars[i])) << plot;
      const auto svg = find_all(root, [&](const XmlElement& e) { return attr(e, "data-plot") == plot; });
      const auto series = find_all(
          *svg.at(0), [](const XmlElement& e) { return e.name == "g" && e.attrs.count("data-series"); });
      EXPECT_EQ(series.size(), 4u);
    }
    // Per-layer table against /layers.
    const auto lrows = section_rows(root, "inspect-layers");
    ASSERT_EQ(lrows.size(), r.layers.size());
    for (std::size_t i = 0; i < lrows.size(); ++i) {
      EXPECT_TRUE(same_number(lrows[i].at("layer"), r.layers[i].layer));
      EXPECT_TRUE(same_number(lrows[i].at("worst_snr_db"), r.layers[i].worst_snr_db));
      EXPECT_EQ(lrows[i].at("worst_tensor"), r.layers[i].worst_tensor);
    }
    EXPECT_NE(html.find(r.recommendation.substr(0, 40)), std::string::npos);
    // Markdown: the 10 worst tensors in the same order with a note of the rest.
    const auto mrows = md_section_rows(md, "Per-tensor FP8 quantization (worst SNR first)");
    ASSERT_EQ(mrows.size(), 10u);
    for (std::size_t i = 0; i < mrows.size(); ++i) EXPECT_EQ(mrows[i].at(0), rows[i].at("name"));
    EXPECT_NE(md.find(std::to_string(r.tensors.size() - 10) + " more rows"), std::string::npos);
  }
  H5Fclose(file);
}

// ---- CLI ----

TEST(ReportCli, WritesHtmlAndMarkdownAtomicallyAndDeterministically) {
  rlp_test::TempDir d("report-cli");
  rlp::write_run_file(d / "run.h5", make_run(SynthSpec{}), false);
  SynthSpec b;
  b.seed = 3;
  rlp::write_run_file(d / "base.h5", make_run(b), false);
  rlp_test::write_text(d / "t.toml", "[default]\ngen_kl_error = { max = 0.002 }\n");
  const std::vector<std::string> args = {"report",       d / "run.h5", "-o",         d / "a.html",
                                         "--markdown",   d / "a.md",   "--baseline", d / "base.h5",
                                         "--thresholds", d / "t.toml", "--preset",   "verl"};
  auto r = rlp_test::run_cli(args, d.path().string());
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string first = rlp_test::read_text(d / "a.html");
  const std::string md = rlp_test::read_text(d / "a.md");
  EXPECT_NE(first.find("class=\"verdict"), std::string::npos);
  EXPECT_NE(first.find("id=\"baseline\""), std::string::npos);
  EXPECT_NE(md.find("Gate ("), std::string::npos);
  r = rlp_test::run_cli(args, d.path().string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(rlp_test::read_text(d / "a.html") == first);
  EXPECT_TRUE(rlp_test::read_text(d / "a.md") == md);
  for (const auto& e : std::filesystem::directory_iterator(d.path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
}

TEST(ReportCli, DefaultOutputName) {
  rlp_test::TempDir d("report-default");
  rlp::write_run_file(d / "run.h5", make_run(SynthSpec{}), false);
  const std::string cmd = "cd " + rlp_test::shell_quote(d.path().string()) + " && " +
                          rlp_test::shell_quote(rlp_test::cli_path()) + " report -q run.h5 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  EXPECT_TRUE(std::filesystem::exists(d / "rlparity-report.html"));
}

TEST(ReportCli, BadInputsExitTwoAndWriteNothing) {
  rlp_test::TempDir d("report-bad");
  rlp_test::write_text(d / "junk.h5", "not hdf5");
  auto r = rlp_test::run_cli({"report", d / "junk.h5", "-o", d / "x.html"}, d.path().string());
  EXPECT_EQ(r.code, 2);
  EXPECT_FALSE(std::filesystem::exists(d / "x.html"));
  rlp::write_run_file(d / "run.h5", make_run(SynthSpec{}), false);
  r = rlp_test::run_cli({"report", d / "run.h5", "-o", d / "x.html", "--preset", "no-such-preset"},
                        d.path().string());
  EXPECT_EQ(r.code, 2);
  EXPECT_FALSE(std::filesystem::exists(d / "x.html"));
  r = rlp_test::run_cli({"report", d / "run.h5", "-o", d / "no-such-dir/x.html"}, d.path().string());
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
  r = rlp_test::run_cli({"report", d / "missing.h5"}, d.path().string());
  EXPECT_EQ(r.code, 2);
  for (const auto& e : std::filesystem::directory_iterator(d.path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp."), std::string::npos) << e.path();
}

}  // namespace
