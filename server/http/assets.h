// The placeholder of the dashboard's files, used until server/http/web/
// exists: server/http/web/assets.h declares the same FindAsset and its
// generated source (target fca_web_assets, added by server/CMakeLists.txt)
// defines it over index.html, app.js and style.css; gateway.cc then
// includes that header and links that target instead of this one.
//
// The gateway serves GET / and GET /ui/<path> from FindAsset: "/" and
// "/ui/" as "index.html", "/ui/app.js" as "app.js".
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
