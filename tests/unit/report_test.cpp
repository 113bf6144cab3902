// Structural tests of `rlparity report` (docs/report.md): the HTML is well-formed XML, has no
// external resources, every plot has data for every recipe, the summary numbers equal the run
// file's attributes, tables are capped with a note, the Markdown tables parse, output is
// deterministic, and a 1e6-token run gives a small page. Plus unit tests of the SVG writer.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <regex>
#include <set>

#include "rlparity/gate/gate.hpp"
#include "rlparity/gate/thresholds.hpp"
#include "rlparity/io/run_data.hpp"
#include "rlparity/metrics/statistics.hpp"
#include "rlparity/report/report.hpp"
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
    r.settings = {{"recipe", r.name}, {"gen", {{"gemm", "fp8"}, {"block", 128}}}, {"train", {{"gemm", "bf16"}}}, {"is_cap", 2.0}};
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
    rlp::finalize_recipe(r, ro, rlp::StatsOptions{});
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

std::vector<const XmlElement*> find_all(const XmlElement& root, const std::function<bool(const XmlElement&)>& pred) {
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
  for (std::size_t p = h.find("href=\""); p != std::string::npos; p = h.find("href=\"", p + 1)) EXPECT_EQ(h[p + 6], '#');
}

TEST_F(ReportHtml, HeaderNamesCheckpointInputsRecipesAndKnobs) {
  const auto root = parse_html(*html_);
  const auto meta = find_all(root, [](const XmlElement& e) { return e.name == "table" && attr(e, "id") == "run-meta"; });
  ASSERT_EQ(meta.size(), 1u);
  std::map<std::string, std::string> kv;
  for (const auto& tr : meta[0]->children[0].children) kv[tr.children[0].text] = tr.children[1].text;
  EXPECT_EQ(kv["checkpoint"], run_->checkpoint_path);
  EXPECT_EQ(kv["checkpoint hash"], run_->checkpoint_hash);
  EXPECT_EQ(kv["command line"], run_->command_line);
  EXPECT_NE(kv["inputs"].find("synthetic.jsonl"), std::string::npos);
  EXPECT_EQ(kv["recipes"], "bf16, fp8-gen, fp8-e2e");
  EXPECT_NE(kv["written by"].find("test"), std::string::npos);
  const auto settings = find_all(root, [](const XmlElement& e) { return e.name == "table" && has_class(e, "settings"); });
  ASSERT_EQ(settings.size(), 3u);
  bool found = false;
  for (const auto& tr : settings[1]->children[0].children)
    if (tr.children[0].text == "gen.gemm") found = tr.children[1].text == "fp8";
  EXPECT_TRUE(found);
}

TEST_F(ReportHtml, EveryPlotHasDataForEachRecipe) {
  const auto root = parse_html(*html_);
  const auto plots = find_all(root, [](const XmlElement& e) { return e.name == "svg" && has_class(e, "plot"); });
  std::set<std::string> ids;
  for (const auto* p : plots) ids.insert(attr(*p, "data-plot"));
  for (const auto& r : run_->recipes)
    for (const char* kind : {"hist-abs-log-ratio-", "cdf-abs-log-ratio-", "hist-ratio-", "cdf-ratio-", "kl-position-", "layers-"})
      EXPECT_TRUE(ids.count(kind + slug(r.name))) << kind << r.name;
  for (const char* cmp : {"compare-hist-abs-log-ratio", "compare-cdf-abs-log-ratio", "compare-cdf-ratio", "compare-kl-position", "compare-layers"})
    EXPECT_TRUE(ids.count(cmp)) << cmp;
  for (const auto* p : plots) {
    const std::string id = attr(*p, "data-plot");
    // Which series must be drawn: the recipe of a per-recipe plot, all recipes in a comparison;
    // the per-layer plot of one recipe draws the three layer metrics.
    std::set<std::string> want;
    if (id.rfind("compare-", 0) == 0) {
      for (const auto& r : run_->recipes) want.insert(r.name);
    } else if (id.rfind("layers-", 0) == 0) {
      want = {"gen vs train", "gen vs oracle", "train vs oracle"};
    } else {
      for (const auto& r : run_->recipes)
        if (id.size() > r.name.size() && id.compare(id.size() - r.name.size(), r.name.size(), slug(r.name)) == 0 &&
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
    const auto labels = find_all(*p, [](const XmlElement& e) { return e.name == "text" && has_class(e, "axis-label"); });
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
        EXPECT_EQ(std::strtod(text.c_str(), nullptr), it->second) << stat << " " << run.recipes[k].name << " " << text;
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
  const auto tables = find_all(root, [](const XmlElement& e) { return e.name == "table" && has_class(e, "worst"); });
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
    EXPECT_NE(notes[k]->text.find(std::to_string(n - 50) + " of " + std::to_string(n) + " tokens omitted"), std::string::npos);
    double prev = INFINITY;
    for (const auto& tr : rows) {
      ASSERT_EQ(tr.children.size(), 7u);
      const double lr = std::strtod(attr(tr.children[5], "data-v").c_str(), nullptr);
      EXPECT_LE(std::abs(lr), prev);
      prev = std::abs(lr);
      // sequence id + position + token id point at a token with this log ratio.
      const std::string sid = tr.children[0].text;
      const auto s = static_cast<std::size_t>(std::find(run_->seq_ids.begin(), run_->seq_ids.end(), sid) - run_->seq_ids.begin());
      ASSERT_LT(s, run_->seq_ids.size());
      const auto pos = std::stoul(tr.children[1].text);
      const auto i = static_cast<std::size_t>(ro[s]) + pos;
      EXPECT_EQ(r.tokens.at("log_ratio")[i], lr);
      EXPECT_EQ(std::stol(tr.children[2].text), run_->token_ids[static_cast<std::size_t>(run_->seq_offsets[s] + run_->prompt_lengths[s]) + pos]);
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
  const auto deltas = find_all(root, [](const XmlElement& e) { return e.name == "table" && has_class(e, "deltas"); });
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
  rlp::finalize_recipe(r, rlp::response_offsets(run.seq_offsets, run.prompt_lengths), rlp::StatsOptions{});
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
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = rlp_test::run_cli({"report", d / "big.h5", "-o", d / "big.html", "--markdown", d / "big.md"}, d.path().string());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(r.code, 0) << r.err;
  const auto size = std::filesystem::file_size(d / "big.html");
  std::printf("1e6-token report: %zu bytes of HTML, %.2f s (CLI, including reading the run file)\n", static_cast<std::size_t>(size), secs);
  EXPECT_LT(size, 2u * 1024 * 1024) << size;
  EXPECT_LT(secs, 30.0);
  const std::string html = rlp_test::read_text(d / "big.html");
  EXPECT_NO_THROW(parse_html(html));
  EXPECT_NE(html.find("tokens omitted"), std::string::npos);
  EXPECT_LT(std::filesystem::file_size(d / "big.md"), 64u * 1024);
}

// ---- CLI ----

TEST(ReportCli, WritesHtmlAndMarkdownAtomicallyAndDeterministically) {
  rlp_test::TempDir d("report-cli");
  rlp::write_run_file(d / "run.h5", make_run(SynthSpec{}), false);
  SynthSpec b;
  b.seed = 3;
  rlp::write_run_file(d / "base.h5", make_run(b), false);
  rlp_test::write_text(d / "t.toml", "[default]\ngen_kl_error = { max = 0.002 }\n");
  const std::vector<std::string> args = {"report", d / "run.h5", "-o", d / "a.html", "--markdown", d / "a.md",
                                         "--baseline", d / "base.h5", "--thresholds", d / "t.toml", "--preset", "verl"};
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
  const std::string cmd = "cd " + rlp_test::shell_quote(d.path().string()) + " && " + rlp_test::shell_quote(rlp_test::cli_path()) +
                          " report -q run.h5 2>/dev/null";
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
  r = rlp_test::run_cli({"report", d / "run.h5", "-o", d / "x.html", "--preset", "no-such-preset"}, d.path().string());
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
