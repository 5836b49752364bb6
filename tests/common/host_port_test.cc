#include "common/host_port.h"

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

namespace fca {
namespace {

TEST(ParseHostPortTest, AddressesNamesAndBracketedIpv6) {
  absl::StatusOr<HostPort> v4 = ParseHostPort("127.0.0.1:7401");
  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_EQ(v4->host, "127.0.0.1");
  EXPECT_EQ(v4->port, 7401);
  absl::StatusOr<HostPort> v6 = ParseHostPort("[::1]:0");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 0);
  absl::StatusOr<HostPort> name = ParseHostPort("localhost:65535");
  ASSERT_TRUE(name.ok()) << name.status();
  EXPECT_EQ(name->host, "localhost");
  EXPECT_EQ(name->port, 65535);
}

TEST(ParseHostPortTest, RefusesWhatIsNotHostColonPort) {
  for (const char* bad : {"", "localhost", ":7401", "[]:7401", "host:", "host:-1", "host:65536",
                          "host:port", "host:12x"}) {
    absl::StatusOr<HostPort> parsed = ParseHostPort(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(parsed.status().message(),
              absl::StrCat("'", bad, "' is not HOST:PORT with a port in [0, 65535]"));
  }
}

// A peer's host, as the upload budget counts clients: gRPC's and the HTTP
// gateway's forms give the same host; other forms come back whole.
TEST(PeerHostTest, TheHostOfEachTransportsPeer) {
  EXPECT_EQ(PeerHost("ipv4:10.0.0.7:5123"), "10.0.0.7");
  EXPECT_EQ(PeerHost("http 10.0.0.7:5123"), "10.0.0.7");
  EXPECT_EQ(PeerHost("ipv6:[::1]:5123"), "::1");
  EXPECT_EQ(PeerHost("ipv6:%5B::1%5D:5123"), "::1");
  EXPECT_EQ(PeerHost("unix:/run/fca.sock"), "unix:/run/fca.sock");
  EXPECT_EQ(PeerHost("ipv4:nonsense"), "ipv4:nonsense");
  EXPECT_EQ(PeerHost(""), "");
}

}  // namespace
}  // namespace fca
