// The HTML form of a report (report_html.cc): one self-contained page
// (inline CSS and SVG, no scripts, nothing fetched), so it can be mailed or
// opened offline. Tables have captions and header scopes and scroll inside
// their box; charts keep their drawn size and scroll inside theirs, name
// both axes, and tell models apart by number, fill pattern, marker shape and
// line style besides colour.
#ifndef FCA_CLIENT_REPORT_HTML_H_
#define FCA_CLIENT_REPORT_HTML_H_

#include <string>

#include "client/report_format.h"

namespace fca::client {

// One HTML page with inline CSS and SVG (no scripts, no external files):
// the tables of the text report, penalty bars with their CIs, and the
// coefficient mean and variance per layer for each family.
std::string FormatReportHtml(const ReportView& report);

}  // namespace fca::client

#endif  // FCA_CLIENT_REPORT_HTML_H_
