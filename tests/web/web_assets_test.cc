// The dashboard's files compiled into the binary: byte-exact copies of
// server/http/web, the right content types, nothing else served, and no
// reference to any other host (the dashboard works with no network access
// beyond the server).
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>

#include "server/http/web/assets.h"

namespace fca::http {
namespace {

std::string Source(const std::string& name) {
  std::ifstream in(std::string(FCA_WEB_DIR) + "/" + name, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(WebAssetsTest, EveryFileIsEmbeddedByteForByte) {
  const struct {
    const char* name;
    const char* type;
  } files[] = {{"index.html", "text/html; charset=utf-8"},
               {"app.js", "text/javascript; charset=utf-8"},
               {"style.css", "text/css; charset=utf-8"}};
  for (const auto& f : files) {
    const std::optional<Asset> a = FindAsset(f.name);
    ASSERT_TRUE(a.has_value()) << f.name;
    EXPECT_EQ(a->content_type, f.type);
    const std::string source = Source(f.name);
    ASSERT_FALSE(source.empty()) << f.name;
    EXPECT_EQ(a->bytes, source) << f.name;
  }
}

TEST(WebAssetsTest, OnlyExactNamesAreFound) {
  for (const char* path :
       {"", "/index.html", "ui/app.js", "../index.html", "index.htm", "index.html/", "INDEX.HTML",
        "CMakeLists.txt", "embed.cmake", "assets.h"}) {
    EXPECT_FALSE(FindAsset(path).has_value()) << path;
  }
  EXPECT_FALSE(FindAsset(std::string_view("app.js\0x", 8)).has_value());
}

// Offline: nothing names another host. The only URL is the SVG namespace,
// which names elements and is never fetched.
TEST(WebAssetsTest, NoOtherHostIsReferenced) {
  for (const char* name : {"index.html", "app.js", "style.css"}) {
    std::string text(FindAsset(name)->bytes);
    const std::string ns = "http://www.w3.org/2000/svg";
    for (size_t at = text.find(ns); at != std::string::npos; at = text.find(ns, at)) {
      text.erase(at, ns.size());
    }
    for (const char* bad : {"http://", "https://", "//cdn", "@import", "fonts.g"}) {
      EXPECT_EQ(text.find(bad), std::string::npos) << name << " has " << bad;
    }
  }
}

TEST(WebAssetsTest, IndexIsAccessibleAndLoadsTheDashboard) {
  const std::string index(FindAsset("index.html")->bytes);
  EXPECT_NE(index.find("<meta name=\"viewport\""), std::string::npos);
  EXPECT_NE(index.find("<html lang=\"en\">"), std::string::npos);
  EXPECT_NE(index.find("src=\"/ui/app.js\""), std::string::npos);
  EXPECT_NE(index.find("href=\"/ui/style.css\""), std::string::npos);
}

}  // namespace
}  // namespace fca::http
