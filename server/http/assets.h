// The dashboard's files (server/http/web/), compiled into the binary.
//
// The gateway serves GET / and GET /ui/<path> from FindAsset: "/" and
// "/ui/" as "index.html", "/ui/app.js" as "app.js". The generated source
// that server/http/web/CMakeLists.txt makes (target fca_http_assets)
// defines it; until that exists, assets_placeholder.cc does, with a page
// that points to the API.
#ifndef FCA_SERVER_HTTP_ASSETS_H_
#define FCA_SERVER_HTTP_ASSETS_H_

#include <optional>
#include <string_view>

namespace fca::http {

struct Asset {
  std::string_view content_type;  // "text/html; charset=utf-8", "text/javascript", ...
  std::string_view bytes;         // static storage: lives as long as the program
};

// The file at `path` relative to the dashboard's folder ("index.html",
// "app.js", "img/logo.svg"), or nullopt.
std::optional<Asset> FindAsset(std::string_view path);

}  // namespace fca::http

#endif  // FCA_SERVER_HTTP_ASSETS_H_
