// What `xdcr-agent run` refuses before any pipeline starts, because running would replicate
// writes twice or without end: a second agent on a state directory another agent holds (exit
// 75), and a replication cycle (exit 78, also from `validate`).

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

bool arrives(const RedisServer& target, const std::string& key) {
  return waitUntil([&] { return target.client().command({"EXISTS", key}).integer() == 1; }, 15s);
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

TEST_F(StartupTest, ASecondAgentOnTheSameStateDirectoryExitsAndTheFirstGoesOn) {
  RedisServer source({"--repl-diskless-sync-delay", "0"});
  RedisServer target;
  const std::string config =
      writeConfig("xdcr.yaml",
                  clusterLine("src", source.address()) + clusterLine("dst", target.address()),
                  "  - {name: p, source: src, target: dst}\n");
  AgentProcess first(config, dir_.file("first.log"));
  source.client().command({"SET", "before", "v"});
  ASSERT_TRUE(arrives(target, "before")) << first.logTail();

  AgentProcess second(config, dir_.file("second.log"));
  ASSERT_TRUE(waitUntil([&] { return !second.running(); }, 20s))
      << "the second agent is still running on the first one's state directory\n"
      << second.logTail();
  ASSERT_TRUE(second.exitStatus()->exited) << second.exitStatus()->describe();
  EXPECT_EQ(second.exitStatus()->code, 75) << second.logText();
  const std::string expected = "state directory " + stateDir() +
                               " is in use by another xdcr-agent (PID " +
                               std::to_string(first.pid()) + "; lock file " + stateDir() +
                               "/agent.lock): two agents on one state directory would apply "
                               "writes twice; stop the other agent or give this one its own "
                               "agent.state_dir";
  EXPECT_NE(second.logText().find(expected), std::string::npos) << second.logText();
  EXPECT_EQ(replicasOf(source.client().info("replication")).size(), 1u)
      << "the second agent connected to the source";

  ASSERT_TRUE(first.running()) << first.describeState() << "\n" << first.logTail();
  source.client().command({"SET", "after", "v"});
  EXPECT_TRUE(arrives(target, "after")) << first.logTail();
  EXPECT_TRUE(first.terminate().success()) << first.logTail();

  // The kernel released the lock with the first agent: the PID it left in the file does not
  // stop the next one.
  AgentProcess third(config, dir_.file("third.log"));
  source.client().command({"SET", "third", "v"});
  EXPECT_TRUE(arrives(target, "third")) << third.logTail();
  EXPECT_EQ(readFileText(stateDir() + "/agent.lock"), std::to_string(third.pid()) + "\n");
  EXPECT_TRUE(third.terminate().success()) << third.logTail();
}

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
