// The gateway's cross-site checks (server/http/cross_site.h) on header
// values alone: what a browser sends from a foreign page, from the
// dashboard itself, and what other clients send.
#include "server/http/cross_site.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>

namespace fca::http {
namespace {

CrossSitePolicy Policy(const std::string& hosts = "", const std::string& origins = "",
                       const std::string& listen = "127.0.0.1") {
  absl::StatusOr<CrossSitePolicy> policy = CrossSitePolicy::Make(listen, hosts, origins);
  EXPECT_TRUE(policy.ok()) << policy.status();
  return policy.ok() ? *policy : CrossSitePolicy();
}

CrossSiteRequest Request(std::optional<std::string> host, std::optional<std::string> origin,
                         std::optional<std::string> content_type, bool changes_state) {
  CrossSiteRequest r;
  r.host = std::move(host);
  r.origin = std::move(origin);
  r.content_type = std::move(content_type);
  r.changes_state = changes_state;
  return r;
}

TEST(HostNameTest, NamesAndAddressesWithAndWithoutPorts) {
  EXPECT_EQ(HostName("127.0.0.1:7401"), "127.0.0.1");
  EXPECT_EQ(HostName("[::1]:7401"), "::1");
  EXPECT_EQ(HostName("[::1]"), "::1");
  EXPECT_EQ(HostName("Example.ORG.:80"), "example.org");
  EXPECT_EQ(HostName("localhost"), "localhost");
  for (const char* bad : {"", ":80", "a b", "[::1", "[nothex]:1", "host:port", "host:99999", "::1",
                          "evil.example/path", "x:1:2"}) {
    EXPECT_EQ(HostName(bad), std::nullopt) << bad;
  }
}

TEST(CrossSiteTest, WhatTheCliAndCurlSendPasses) {
  const CrossSitePolicy policy = Policy();
  // curl and cpp-httplib: an address or localhost as Host, no Origin.
  for (const char* host :
       {"127.0.0.1:7401", "localhost:7401", "[::1]:7401", "10.1.2.3:7401", "app.localhost:7401"}) {
    EXPECT_TRUE(CheckCrossSite(Request(host, std::nullopt, "application/json", true), policy).ok())
        << host;
  }
  // HTTP/1.0 without Host comes from no browser.
  EXPECT_TRUE(
      CheckCrossSite(Request(std::nullopt, std::nullopt, "application/json", true), policy).ok());
  // Read-only calls may carry any body type (curl -d sends a form type).
  EXPECT_TRUE(CheckCrossSite(Request("127.0.0.1:7401", std::nullopt,
                                     "application/x-www-form-urlencoded", false),
                             policy)
                  .ok());
}

TEST(CrossSiteTest, TheDashboardsOwnOriginPasses) {
  const CrossSitePolicy policy = Policy();
  EXPECT_TRUE(CheckCrossSite(Request("127.0.0.1:7401", "http://127.0.0.1:7401",
                                     "application/json; charset=utf-8", true),
                             policy)
                  .ok());
  EXPECT_TRUE(
      CheckCrossSite(Request("[::1]:7401", "http://[::1]:7401", "Application/JSON", true), policy)
          .ok());
  // Behind a proxy that ends TLS: the page is https on port 443, Host has
  // no port.
  const CrossSitePolicy behind_proxy = Policy("fca.lab.example.org");
  EXPECT_TRUE(CheckCrossSite(Request("fca.lab.example.org", "https://fca.lab.example.org",
                                     "application/json", true),
                             behind_proxy)
                  .ok());
}

TEST(CrossSiteTest, AForeignOriginIsRefused) {
  const CrossSitePolicy policy = Policy();
  for (const char* origin : {"https://evil.example", "http://127.0.0.1:8080", "null",
                             "http://localhost:7401", "file://", "garbage"}) {
    const absl::Status s =
        CheckCrossSite(Request("127.0.0.1:7401", origin, "application/json", true), policy);
    EXPECT_TRUE(absl::IsPermissionDenied(s)) << origin << ": " << s;
    EXPECT_NE(s.message().find("--http_allowed_origins"), std::string::npos) << s;
  }
  // Read-only calls too: a page must not read them.
  EXPECT_TRUE(absl::IsPermissionDenied(CheckCrossSite(
      Request("127.0.0.1:7401", "https://evil.example", std::nullopt, false), policy)));
}

TEST(CrossSiteTest, AnAllowedOriginPasses) {
  const CrossSitePolicy policy =
      Policy("", "https://Grafana.lab.example.org:3000/, http://dash.lab.example.org");
  EXPECT_TRUE(CheckCrossSite(Request("127.0.0.1:7401", "https://grafana.lab.example.org:3000",
                                     "application/json", true),
                             policy)
                  .ok());
  EXPECT_TRUE(CheckCrossSite(Request("127.0.0.1:7401", "http://dash.lab.example.org:80",
                                     "application/json", true),
                             policy)
                  .ok());
  EXPECT_TRUE(IsAllowedOrigin("http://dash.lab.example.org", policy));
  EXPECT_FALSE(IsAllowedOrigin("https://dash.lab.example.org", policy));
  EXPECT_FALSE(IsAllowedOrigin("https://grafana.lab.example.org", policy));
}

TEST(CrossSiteTest, AForeignHostIsRefusedAgainstDnsRebinding) {
  const CrossSitePolicy policy = Policy();
  for (const char* host : {"evil.example:7401", "evil.example", "localhost.evil.example:7401",
                           "127.0.0.1.nip.io:7401", "bad host"}) {
    // The rebinding page's own origin matches its Host: still refused.
    const absl::Status s = CheckCrossSite(
        Request(host, std::string("http://") + host, "application/json", false), policy);
    EXPECT_TRUE(absl::IsPermissionDenied(s)) << host << ": " << s;
    EXPECT_NE(s.message().find("--http_allowed_hosts"), std::string::npos) << s;
  }
}

TEST(CrossSiteTest, AllowedHostsNamesDomainsAndTheMachinesOwnName) {
  const CrossSitePolicy policy = Policy("fca.lab.example.org, .cluster.local", "", "fca-server");
  for (const char* host : {"fca.lab.example.org:7401", "FCA.lab.example.org", "cluster.local",
                           "fca.svc.cluster.local:7401", "fca-server:7401"}) {
    EXPECT_TRUE(CheckCrossSite(Request(host, std::nullopt, std::nullopt, false), policy).ok())
        << host;
  }
  EXPECT_FALSE(
      CheckCrossSite(Request("xcluster.local", std::nullopt, std::nullopt, false), policy).ok());
  char name[HOST_NAME_MAX + 1] = {};
  ASSERT_EQ(gethostname(name, sizeof(name) - 1), 0);
  EXPECT_TRUE(CheckCrossSite(
                  Request(std::string(name) + ":7401", std::nullopt, std::nullopt, false), Policy())
                  .ok());
  const CrossSitePolicy any = Policy("*");
  EXPECT_TRUE(
      CheckCrossSite(Request("anything.example", std::nullopt, std::nullopt, false), any).ok());
}

TEST(CrossSiteTest, AStateChangeWithoutAJsonBodyTypeIsRefused) {
  const CrossSitePolicy policy = Policy();
  for (const std::optional<std::string>& type :
       {std::optional<std::string>("text/plain"),
        std::optional<std::string>("application/x-www-form-urlencoded"),
        std::optional<std::string>("multipart/form-data; boundary=x"),
        std::optional<std::string>("application/jsonp"), std::optional<std::string>()}) {
    const absl::Status s =
        CheckCrossSite(Request("127.0.0.1:7401", std::nullopt, type, true), policy);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << type.value_or("(none)") << ": " << s;
    EXPECT_NE(s.message().find("application/json"), std::string::npos) << s;
  }
}

TEST(CrossSitePolicyTest, MalformedFlagsAreRefusedNamingTheEntry) {
  for (const char* hosts : {"http://x.org", "x.org:80", "a b", "x.org/path"}) {
    const auto policy = CrossSitePolicy::Make("127.0.0.1", hosts, "");
    EXPECT_TRUE(absl::IsInvalidArgument(policy.status())) << hosts;
    EXPECT_NE(policy.status().message().find("--http_allowed_hosts"), std::string::npos);
  }
  for (const char* origins : {"x.org", "ftp://x.org", "https://x.org/path", "https://", "null"}) {
    const auto policy = CrossSitePolicy::Make("127.0.0.1", "", origins);
    EXPECT_TRUE(absl::IsInvalidArgument(policy.status())) << origins;
    EXPECT_NE(policy.status().message().find(origins), std::string::npos) << policy.status();
  }
}

}  // namespace
}  // namespace fca::http
