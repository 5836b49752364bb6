// FindAsset until the dashboard's generated source replaces it (see
// assets.h): one page that says where the API is.
#include "server/http/assets.h"

namespace fca::http {

std::optional<Asset> FindAsset(std::string_view path) {
  static constexpr std::string_view kIndex =
      "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<title>fca</title></head><body>\n"
      "<h1>fca audit server</h1>\n"
      "<p>The dashboard is not built into this binary. The service is here as JSON: "
      "<code>POST /api/v1/&lt;RpcName&gt;</code> (e.g. <code>/api/v1/ListJobs</code>), "
      "job events at <code>/api/v1/jobs/&lt;id&gt;/events</code>, metrics at "
      "<a href=\"/metrics\">/metrics</a>.</p>\n</body></html>\n";
  if (path == "index.html") return Asset{"text/html; charset=utf-8", kIndex};
  return std::nullopt;
}

}  // namespace fca::http
