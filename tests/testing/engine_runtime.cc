// Test binaries that run models configure the engine's runtime as the
// server and fca-local-audit do (engine::ConfigureRuntime), so tests run the
// code paths, thread layout and allocator settings of production: without
// it every forward's activations went back to the kernel and came back as
// page faults (seconds of system time), and torch's OpenMP team spun on a
// loaded CI machine.
#include <gtest/gtest.h>

#include "server/engine/models/torch_util.h"

namespace fca::testing {
namespace {

class EngineRuntime : public ::testing::Environment {
 public:
  void SetUp() override { engine::ConfigureRuntime({}); }
};

// Registered before main() runs RUN_ALL_TESTS (gtest_main).
[[maybe_unused]] ::testing::Environment* const kEngineRuntime =
    ::testing::AddGlobalTestEnvironment(new EngineRuntime);

}  // namespace
}  // namespace fca::testing
