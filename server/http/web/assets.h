// The web dashboard's files (index.html, style.css, *.js), compiled into
// the binary by embed.cmake so that fca-server serves them with no files
// beside it and nothing fetched from elsewhere. The HTTP gateway serves
// "index.html" at GET / and every asset at GET /ui/<path>.
#ifndef FCA_SERVER_HTTP_WEB_ASSETS_H_
#define FCA_SERVER_HTTP_WEB_ASSETS_H_

#include <optional>
#include <string_view>

namespace fca::http {

struct Asset {
  std::string_view content_type;  // e.g. "text/html; charset=utf-8"
  std::string_view bytes;         // the file's bytes, static storage
};

// The asset named `path` ("index.html", "main.js", "style.css"), exactly as
// named (no leading slash, no folders); nullopt for any other path.
std::optional<Asset> FindAsset(std::string_view path);

}  // namespace fca::http

#endif  // FCA_SERVER_HTTP_WEB_ASSETS_H_
