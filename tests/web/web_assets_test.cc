// The dashboard's files compiled into the binary: byte-exact copies of
// every .html, .js and .css file of server/http/web (one left out of
// FCA_WEB_FILES fails here), the right content types, nothing else served,
// no reference to any other host (the dashboard works with no network access
// beyond the server), and index.html loading every script.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "server/http/web/assets.h"

namespace fca::http {
namespace {

const std::map<std::string, std::string>& Types() {
  static const auto* types =
      new std::map<std::string, std::string>{{".html", "text/html; charset=utf-8"},
                                             {".js", "text/javascript; charset=utf-8"},
                                             {".css", "text/css; charset=utf-8"}};
  return *types;
}

// The dashboard's files in server/http/web, by name, sorted.
std::vector<std::string> WebFiles() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(FCA_WEB_DIR)) {
    if (entry.is_regular_file() && Types().count(entry.path().extension().string()) > 0) {
      names.push_back(entry.path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> Scripts() {
  std::vector<std::string> scripts;
  for (const std::string& name : WebFiles()) {
    if (std::filesystem::path(name).extension() == ".js") scripts.push_back(name);
  }
  return scripts;
}

std::string Source(const std::string& name) {
  std::ifstream in(std::string(FCA_WEB_DIR) + "/" + name, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(WebAssetsTest, EveryFileIsEmbeddedByteForByte) {
  const std::vector<std::string> names = WebFiles();
  for (const char* expected : {"index.html", "style.css", "core.js", "main.js"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end()) << expected;
  }
  for (const std::string& name : names) {
    const std::optional<Asset> a = FindAsset(name);
    ASSERT_TRUE(a.has_value()) << name << " is not embedded: add it to FCA_WEB_FILES";
    EXPECT_EQ(a->content_type, Types().at(std::filesystem::path(name).extension().string()));
    const std::string source = Source(name);
    ASSERT_FALSE(source.empty()) << name;
    EXPECT_EQ(a->bytes, source) << name;
  }
}

TEST(WebAssetsTest, OnlyExactNamesAreFound) {
  for (const char* path :
       {"", "/index.html", "ui/main.js", "../index.html", "index.htm", "index.html/", "INDEX.HTML",
        "CMakeLists.txt", "embed.cmake", "assets.h"}) {
    EXPECT_FALSE(FindAsset(path).has_value()) << path;
  }
  EXPECT_FALSE(FindAsset(std::string_view("main.js\0x", 9)).has_value());
}

// Offline: nothing names another host. The only URL is the SVG namespace,
// which names elements and is never fetched.
TEST(WebAssetsTest, NoOtherHostIsReferenced) {
  for (const std::string& name : WebFiles()) {
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

// index.html loads every script: core.js (which makes the namespace the
// others add to) first and main.js (which starts the page) last.
TEST(WebAssetsTest, IndexIsAccessibleAndLoadsTheDashboard) {
  const std::string index(FindAsset("index.html")->bytes);
  EXPECT_NE(index.find("<meta name=\"viewport\""), std::string::npos);
  EXPECT_NE(index.find("<html lang=\"en\">"), std::string::npos);
  EXPECT_NE(index.find("href=\"/ui/style.css\""), std::string::npos);
  const auto at = [&](const std::string& name) {
    return index.find("<script src=\"/ui/" + name + "\" defer></script>");
  };
  for (const std::string& name : Scripts()) {
    ASSERT_NE(at(name), std::string::npos) << "index.html does not load " << name;
    if (name != "core.js") {
      EXPECT_LT(at("core.js"), at(name)) << name;
    }
    if (name != "main.js") {
      EXPECT_LT(at(name), at("main.js")) << name;
    }
  }
}

}  // namespace
}  // namespace fca::http
