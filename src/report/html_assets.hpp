// The inline assets of the HTML report: its style sheet and the few lines of script that sort the
// tables. Plain text, no external resource (docs/report.md).
#pragma once

namespace rlp::report {

extern const char* const kReportCss;
// Sorts a table.sortable by the clicked column (numbers by data-v); marks the page data-ready.
extern const char* const kReportJs;

}  // namespace rlp::report
