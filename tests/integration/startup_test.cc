// What `xdcr-agent run` refuses before any pipeline starts, because running would replicate
// writes without end: a replication cycle (exit 78, also from `validate`).

#include <gtest/gtest.h>

#include <string>

#include "tests/support/harness.h"

namespace xdcr::test {
namespace {

using namespace std::chrono_literals;

constexpr auto kCommandTimeout = 30s;  // validate and refused runs end at once; bounds a hang

std::string clusterLine(const std::string& name, const std::string& address) {
  return "  " + name + ": {type: redis, address: \"" + address + "\"}\n";
}

class StartupTest : public ::testing::Test {
 protected:
  /** A config with the given clusters and pipelines, state in dir_/state. */
  std::string writeConfig(const std::string& name, const std::string& clusters,
                          const std::string& pipelines) {
    const std::string path = dir_.file(name);
    writeFileText(path, "agent: {state_dir: \"" + stateDir() + "\"}\n" + "clusters:\n" +
                            clusters + "pipelines:\n" + pipelines);
    return path;
  }
  std::string stateDir() const { return dir_.file("state"); }

  TempDir dir_{"xdcr-startup"};
};

TEST_F(StartupTest, ValidateAndRunRefuseAReplicationCycle) {
  // Nothing listens there: the cycle is refused before anything connects.
  const std::string a = "127.0.0.1:" + std::to_string(freePort());
  const std::string b = "127.0.0.1:" + std::to_string(freePort());
  const std::string c = "127.0.0.1:" + std::to_string(freePort());
  const std::string config = writeConfig(
      "cycle.yaml", clusterLine("a", a) + clusterLine("b", b) + clusterLine("c", c),
      "  - {name: a-to-b, source: a, target: b}\n"
      "  - {name: b-to-c, source: b, target: c}\n"
      "  - {name: c-to-a, source: c, target: a}\n");
  const std::string expected =
      config + ":9:28: error: pipelines \"a-to-b\" (a -> b), \"b-to-c\" (b -> c) and \"c-to-a\" "
               "(c -> a) form a replication cycle";
  for (const char* command : {"validate", "run"}) {
    SCOPED_TRACE(command);
    auto r = runAgentCommand({command, "-c", config}, dir_.file(std::string(command) + ".out"),
                             kCommandTimeout);
    EXPECT_EQ(r.exit_code, 78) << r.output;
    EXPECT_NE(r.output.find(expected), std::string::npos) << r.output;
  }

  // The same clusters without the way back are valid.
  const std::string chain = writeConfig(
      "chain.yaml", clusterLine("a", a) + clusterLine("b", b) + clusterLine("c", c),
      "  - {name: a-to-b, source: a, target: b}\n"
      "  - {name: b-to-c, source: b, target: c}\n");
  auto r = runAgentCommand({"validate", "-c", chain}, dir_.file("chain.out"), kCommandTimeout);
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

}  // namespace
}  // namespace xdcr::test
