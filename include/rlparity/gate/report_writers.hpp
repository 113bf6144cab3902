// Renderings of a gate result: a terminal table, JUnit XML (one <testcase> per recipe and
// statistic), Markdown (a CI step summary) and JSON. Pure functions returning text.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "rlparity/gate/gate.hpp"

namespace rlp::gate {

struct ReportContext {
  std::string run_path, baseline_path;  // baseline_path empty when none
  std::vector<std::string> threshold_sources;
};

// "<= 0.002", ">= 0.3", "[-0.1, 0.1]", or "-" when there is no bound.
std::string format_bound(const std::optional<Bound>& b);

std::string format_gate_table(const GateResult& r);
// <testsuites name="rlparity gate" tests= failures=><testsuite name="rlparity.<recipe>" tests=
// failures= errors="0" skipped="0"><testcase classname="rlparity.<recipe>" name="<statistic>">
// [<failure message="..." type="fail|missing">details</failure>]</testcase>...
std::string format_junit(const GateResult& r, const ReportContext& ctx);
std::string format_markdown(const GateResult& r, const ReportContext& ctx);
nlohmann::json to_json(const GateResult& r, const ReportContext& ctx);

// XML text/attribute escaping (&, <, >, ", ') with characters XML 1.0 forbids (control characters
// other than tab/newline/CR) replaced by '?'.
std::string xml_escape(const std::string& s);

}  // namespace rlp::gate
