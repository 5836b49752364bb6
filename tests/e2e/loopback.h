// A TCP connection to a server on 127.0.0.1 from a chosen loopback address
// (all of 127/8 is loopback on Linux): the tests and bench/soak stand in for
// another host with 127.0.0.2. No gtest: the soak bench links it too.
#ifndef FCA_TESTS_E2E_LOOPBACK_H_
#define FCA_TESTS_E2E_LOOPBACK_H_

namespace fca::e2e {

// A blocking connection to 127.0.0.1:port from `from` (e.g. "127.0.0.2"),
// or -1.
int ConnectFrom(int port, const char* from);

}  // namespace fca::e2e

#endif  // FCA_TESTS_E2E_LOOPBACK_H_
