#include "report/html_assets.hpp"

namespace rlp::report {

const char* const kReportCss = R"(
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:0;color:#1a1a1a;background:#f6f7f9;font-size:14px;line-height:1.4}
main{max-width:1380px;margin:0 auto;padding:16px 24px 40px}
h1{font-size:22px;margin:8px 0 4px}
h2{font-size:18px;margin:28px 0 8px;border-bottom:2px solid #d9dde3;padding-bottom:4px}
h3{font-size:15px;margin:18px 0 6px}
nav a{margin-right:14px;color:#0b5cad}
table{border-collapse:collapse;background:#fff;margin:6px 0}
th,td{border:1px solid #d9dde3;padding:3px 8px;vertical-align:top}
th{background:#eef1f5;text-align:left}
.vline{display:block;white-space:nowrap}
.scroll{overflow-x:auto;max-width:100%}
td.num{text-align:right;font-family:ui-monospace,"DejaVu Sans Mono",monospace;white-space:nowrap}
table.meta td:first-child{font-weight:600;white-space:nowrap}
table.meta td{font-family:ui-monospace,"DejaVu Sans Mono",monospace;word-break:break-all}
table.sortable th{cursor:pointer;user-select:none}
table.sortable th[data-dir="asc"]::after{content:" \25B2"}
table.sortable th[data-dir="desc"]::after{content:" \25BC"}
.verdict{display:inline-block;margin-left:0;padding:0 5px;border-radius:3px;font-size:11px;font-weight:700;font-family:system-ui,sans-serif}
.verdict.pass{background:#d8f0dd;color:#135c25}
.verdict.fail{background:#f8d3d0;color:#8a1208}
.verdict.missing{background:#fbe7c2;color:#6b4500}
.bound{color:#555;font-size:11px;margin-left:4px}
td.worse{background:#fdecea}
td.better{background:#e8f6ec}
.note{color:#555;font-size:12px}
.plots{display:flex;flex-wrap:wrap;gap:12px}
.plots svg{background:#fff;border:1px solid #d9dde3}
svg.plot .bg{fill:#fff}
svg.plot text{font-family:system-ui,"DejaVu Sans",sans-serif;fill:#1a1a1a}
svg.plot .title{font-size:13px;font-weight:600}
svg.plot .note{font-size:10px;fill:#666}
svg.plot .tick{font-size:10px;fill:#444}
svg.plot .legend{font-size:11px}
svg.plot .axis-label{font-size:11px;fill:#333}
svg.plot .nodata{font-size:13px;fill:#999}
svg.plot .grid{stroke:#e6e8ec;stroke-width:1}
svg.plot .axis,svg.plot .tickmark{stroke:#333;stroke-width:1}
details{margin:6px 0}
summary{cursor:pointer;color:#0b5cad}
footer{margin-top:30px;color:#777;font-size:12px}
)";

// Sorts a worst-tokens table by the clicked column (numbers by data-v); marks the page data-ready
// (the browser test checks the script ran). Written without '<' and '&' so the page stays
// XML-well-formed.
const char* const kReportJs = R"(
document.querySelectorAll('table.sortable th').forEach(function (th) {
  th.addEventListener('click', function () {
    var table = th.closest('table');
    var body = table.tBodies[0];
    var col = Array.prototype.indexOf.call(th.parentNode.children, th);
    var asc = th.getAttribute('data-dir') !== 'asc';
    th.parentNode.querySelectorAll('th').forEach(function (h) { h.removeAttribute('data-dir'); });
    th.setAttribute('data-dir', asc ? 'asc' : 'desc');
    var num = th.getAttribute('data-type') === 'num';
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = a.cells[col].getAttribute('data-v');
      var y = b.cells[col].getAttribute('data-v');
      var c = num ? parseFloat(x) - parseFloat(y) : x.localeCompare(y);
      if (isNaN(c)) c = 0;
      return asc ? c : -c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  });
});
document.documentElement.setAttribute('data-ready', 'yes');
)";

}  // namespace rlp::report
