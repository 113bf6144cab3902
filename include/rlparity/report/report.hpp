// Mismatch reports of one run file (docs/report.md): a self-contained HTML page (inline CSS, inline
// SVG plots, a few lines of inline JS to sort the worst-tokens tables; no external resources) and a
// Markdown summary for CI step summaries. Pure functions of their inputs: the same run file (and
// options) always gives the same bytes. The CLI (src/cli/cmd_report.cpp) does the file I/O.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "rlparity/gate/gate.hpp"
#include "rlparity/inspect/inspect.hpp"
#include "rlparity/model/tokenizer.hpp"
#include "rlparity/run/run_data.hpp"
#include "rlparity/run/sweep_data.hpp"

namespace rlp::report {

struct ReportOptions {
  std::string run_path;               // shown in the header
  const RunData* baseline = nullptr;  // --baseline: deltas of every summary statistic
  std::string baseline_path;
  const gate::GateResult* gate = nullptr;      // verdicts of --thresholds / --preset, if given
  std::vector<std::string> threshold_sources;  // where the thresholds came from
  std::size_t worst_tokens = 50;               // rows per recipe in the HTML worst-tokens tables
  std::size_t markdown_worst_tokens = 10;      // rows per recipe in the Markdown worst-tokens tables
  int hist_bins = 60;                          // fixed bin count of every histogram
  std::size_t cdf_points = 240;                // points per CDF curve
  std::size_t max_positions = 400;         // points of the per-position curves (positions bucketed beyond)
  const InspectResult* inspect = nullptr;  // --inspect FILE: its per-tensor and per-layer sections
  std::string inspect_path;
  const Tokenizer* tokenizer = nullptr;  // worst tokens as text (the checkpoint's tokenizer.json)
  double birth_threshold = 1e-2;     // token_rel_l2 at which the mismatch counts as born (--birth-threshold)
  std::size_t heatmap_tokens = 160;  // response tokens drawn in the token x layer heatmap
};

// One row of a worst-tokens table: the response tokens with the largest |log ratio| (ties: earlier
// token first); NaN log ratios rank first (they are the worst).
struct WorstToken {
  std::size_t index = 0;     // index into the recipe's per-token arrays
  std::size_t sequence = 0;  // sequence number s
  std::string sequence_id;   // /inputs/seq_ids[s]
  std::size_t position = 0;  // index within the response of s
  std::int64_t token_id = -1;
  double logp_gen = 0, logp_train = 0, log_ratio = 0, kl = 0;  // kl NaN when kl_gen_train is absent
  // With a tokenizer: the token as text, and the up to kContextTokens tokens before it in its
  // sequence (prompt included) as text; empty otherwise.
  std::string text, context;
};
inline constexpr std::size_t kContextTokens = 8;
std::vector<WorstToken> worst_tokens(const RunData& run, const RecipeResult& recipe, std::size_t cap,
                                     const Tokenizer* tokenizer = nullptr);

// Mean of a per-token metric at each response position (index within the response) over the
// sequences long enough to have it; NaN values are skipped. Positions are bucketed into at most
// max_points equal-width groups (x = first position of the group, y = mean over the group).
struct PositionCurve {
  std::vector<double> position, mean;
  std::size_t bucket = 1;  // positions per point
};
PositionCurve per_position_mean(const RunData& run, const std::vector<double>& token_values,
                                std::size_t max_points);

// Where the mismatch is born (token_rel_l2, tokens x layers): for every response token of the
// recipe, the first decoder layer whose |h_gen - h_train| / |h_train| is at least `threshold`
// (-1: none), and how many tokens are born at each layer; and the sequence with the largest
// mean |log ratio| (sequences/mean_abs_log_ratio; ties: the first), whose first `max_tokens`
// response tokens the report draws. Empty (layers 0) when the recipe has no token_rel_l2.
struct MismatchBirth {
  int layers = 0;
  double threshold = 0;
  std::vector<int> first_layer;        // per response token of the run
  std::vector<std::int64_t> born_at;   // per layer: tokens whose first_layer is that layer
  std::int64_t never = 0;              // tokens below the threshold at every layer
  std::size_t sequence = 0;            // the drawn sequence
  std::size_t token0 = 0, tokens = 0;  // its drawn tokens: [token0, token0 + tokens) of the run
};
MismatchBirth mismatch_birth(const RunData& run, const RecipeResult& recipe, double threshold,
                             std::size_t max_tokens);

// The summary statistics shown first (and in Markdown), in this order: gate's headline statistics,
// then any statistic a gate check names.
std::vector<std::string> headline_statistics(const gate::GateResult* gate);

// Run reports. HTML: header, summary, baseline deltas, the /attribution tables (when present), the
// inspect sections (when opt.inspect is set), then the plots and worst tokens. Markdown: the same
// blocks, the attribution and inspect ones last.
std::string render_html(const RunData& run, const ReportOptions& opt);
std::string render_markdown(const RunData& run, const ReportOptions& opt);
// A report of an inspect file alone (`report INSPECT.h5`): header, per-layer and per-tensor sections.
std::string render_inspect_html(const InspectResult& r, const ReportOptions& opt);
// A sweep file's report (`report SWEEP.h5`): header, the per-point table with its chart, the
// per-position curves of every recipe (one curve per point), the boundaries.
std::string render_sweep_html(const SweepResult& sweep, const ReportOptions& opt);
std::string render_sweep_markdown(const SweepResult& sweep, const ReportOptions& opt);
std::string render_inspect_markdown(const InspectResult& r, const ReportOptions& opt);

}  // namespace rlp::report
