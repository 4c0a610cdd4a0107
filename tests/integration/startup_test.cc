// What `xdcr-agent run` refuses before any pipeline starts, because running would replicate
// writes twice or without end: a second agent on a state directory another agent holds (exit
// 75), a replication cycle (exit 78, also from `validate`), and one server configured under two
// cluster names (exit 78, found by run_id). A cluster that cannot be reached at start does not
// stop the agent.

#include <gtest/gtest.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

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

/** Whether "localhost" resolves to 127.0.0.1 here (the address a test server listens on). */
bool localhostIsLoopbackV4() {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo("localhost", nullptr, &hints, &res) != 0) return false;
  bool found = false;
  for (addrinfo* a = res; a != nullptr; a = a->ai_next) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
    found = found || ntohl(in->sin_addr.s_addr) == INADDR_LOOPBACK;
  }
  ::freeaddrinfo(res);
  return found;
}

class StartupTest : public ::testing::Test {
 protected:
  /** A config with the given clusters and pipelines, state in dir_/state. */
  std::string writeConfig(const std::string& name, const std::string& clusters,
                          const std::string& pipelines) {
    const std::string path = dir_.file(name);
    writeFileText(path, "agent: {state_dir: \"" + stateDir() + "\"}\n" + "clusters:\n" + clusters +
                            "pipelines:\n" + pipelines);
    return path;
  }
  std::string stateDir() const { return dir_.file("state"); }

  TempDir dir_{"xdcr-startup"};
};

TEST_F(StartupTest, ASecondAgentOnTheSameStateDirectoryExitsAndTheFirstGoesOn) {
  RedisServer source({"--repl-diskless-sync-delay", "0"});
  RedisServer target;
  const std::string config = writeConfig(
      "xdcr.yaml", clusterLine("src", source.address()) + clusterLine("dst", target.address()),
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
  const std::string config =
      writeConfig("cycle.yaml", clusterLine("a", a) + clusterLine("b", b) + clusterLine("c", c),
                  "  - {name: a-to-b, source: a, target: b}\n"
                  "  - {name: b-to-c, source: b, target: c}\n"
                  "  - {name: c-to-a, source: c, target: a}\n");
  const std::string expected =
      config +
      ":9:28: error: pipelines \"a-to-b\" (a -> b), \"b-to-c\" (b -> c) and \"c-to-a\" "
      "(c -> a) form a replication cycle";
  for (const char* command : {"validate", "run"}) {
    SCOPED_TRACE(command);
    auto r = runAgentCommand({command, "-c", config}, dir_.file(std::string(command) + ".out"),
                             kCommandTimeout);
    EXPECT_EQ(r.exit_code, 78) << r.output;
    EXPECT_NE(r.output.find(expected), std::string::npos) << r.output;
  }

  // The same clusters without the way back are valid.
  const std::string chain =
      writeConfig("chain.yaml", clusterLine("a", a) + clusterLine("b", b) + clusterLine("c", c),
                  "  - {name: a-to-b, source: a, target: b}\n"
                  "  - {name: b-to-c, source: b, target: c}\n");
  auto r = runAgentCommand({"validate", "-c", chain}, dir_.file("chain.out"), kCommandTimeout);
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_F(StartupTest, OneServerUnderTwoNamesIsRefusedAtRun) {
  if (!localhostIsLoopbackV4()) GTEST_SKIP() << "\"localhost\" does not resolve to 127.0.0.1";
  RedisServer server;
  const std::string port = std::to_string(server.port());
  const std::string config = writeConfig(
      "alias.yaml", clusterLine("a", "127.0.0.1:" + port) + clusterLine("b", "localhost:" + port),
      "  - {name: a-to-b, source: a, target: b}\n");
  // validate does not connect: to it these are two clusters.
  auto v = runAgentCommand({"validate", "-c", config}, dir_.file("validate.out"), kCommandTimeout);
  ASSERT_EQ(v.exit_code, 0) << v.output;

  const std::string run_id = server.client().info("server")["run_id"];
  const std::string changes_before =
      server.client().info("persistence")["rdb_changes_since_last_save"];
  auto r = runAgentCommand({"run", "-c", config}, dir_.file("run.out"), kCommandTimeout);
  EXPECT_EQ(r.exit_code, 78) << r.output;
  EXPECT_NE(r.output.find("clusters \"a\" (127.0.0.1:" + port + ") and \"b\" (localhost:" + port +
                          ") are one Redis server (run_id " + run_id + ")"),
            std::string::npos)
      << r.output;
  // Nothing was written: no data, no marker, no replica attached.
  EXPECT_EQ(server.client().info("persistence")["rdb_changes_since_last_save"], changes_before);
  EXPECT_EQ(server.client().command({"DBSIZE"}).integer(), 0);
  EXPECT_EQ(replicasOf(server.client().info("replication")).size(), 0u);
}

TEST_F(StartupTest, AClusterUnreachableAtStartDoesNotStopTheAgent) {
  RedisServer source({"--repl-diskless-sync-delay", "0"});
  const std::string nowhere = "127.0.0.1:" + std::to_string(freePort());
  const std::string config =
      writeConfig("xdcr.yaml", clusterLine("src", source.address()) + clusterLine("dst", nowhere),
                  "  - {name: p, source: src, target: dst}\n");
  AgentProcess agent(config, dir_.file("agent.log"));
  ASSERT_TRUE(waitUntil(
      [&] {
        return agent.logText().find("cannot read the run_id of cluster dst (" + nowhere + ")") !=
               std::string::npos;
      },
      20s))
      << agent.logTail();
  ASSERT_TRUE(waitUntil(
      [&] { return agent.logText().find("starting 1 pipeline(s)") != std::string::npos; }, 10s))
      << agent.logTail();
  EXPECT_TRUE(agent.running()) << agent.describeState() << "\n" << agent.logTail();
  EXPECT_TRUE(agent.terminate().success()) << agent.logTail();
}

// Issue 18, finding 5: a state_dir the agent cannot create (under systemd: the example's
// ./xdcr-state beside /etc/xdcr-agent/xdcr.yaml on a file system ProtectSystem=strict makes
// read-only) passed validate, then run exited 1 and systemd restarted it in a loop. Now both say
// which directory and what to do, with 78 (the unit's RestartPreventExitStatus).
TEST_F(StartupTest, AStateDirThatCannotBeCreatedIsRefusedByValidateAndRunWith78) {
  const std::string blocker = dir_.file("blocker");
  writeFileText(blocker, "a file where the state directory's parent should be");
  const std::string config = dir_.file("xdcr.yaml");
  writeFileText(config, "agent: {state_dir: \"" + blocker + "/state\"}\nclusters:\n" +
                            clusterLine("a", "127.0.0.1:1") + clusterLine("b", "127.0.0.1:2") +
                            "pipelines:\n  - {name: p, source: a, target: b}\n");
  for (const std::string command : {"validate", "run"}) {
    const AgentCommandResult r =
        runAgentCommand({command, "-c", config}, dir_.file(command + ".out"), kCommandTimeout);
    EXPECT_EQ(r.exit_code, 78) << command << ":\n" << r.output;
    EXPECT_NE(r.output.find("agent.state_dir \"" + blocker +
                            "/state\" cannot be created or written as user "),
              std::string::npos)
        << command << ":\n"
        << r.output;
    EXPECT_NE(r.output.find(blocker + " is not a directory"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("StateDirectory=xdcr-agent"), std::string::npos) << r.output;
  }
}

// Issue 18, finding 7: `--version`, `help` and a mistyped command all printed "A subcommand is
// required". Now: the version, the help, and the closest command(s) with the list (exit 2).
TEST(Cli, VersionHelpAndAMistypedCommandAreAnswered) {
  TempDir dir("xdcr-cli");
  const AgentCommandResult version =
      runAgentCommand({"--version"}, dir.file("version.out"), kCommandTimeout);
  EXPECT_EQ(version.exit_code, 0) << version.output;
  EXPECT_EQ(version.output.rfind("xdcr-agent ", 0), 0u) << version.output;
  EXPECT_NE(version.output.find("revision"), std::string::npos) << version.output;
  // The same line as the `version` command.
  const AgentCommandResult command =
      runAgentCommand({"version"}, dir.file("version-command.out"), kCommandTimeout);
  EXPECT_EQ(command.output, version.output);

  const AgentCommandResult help = runAgentCommand({"help"}, dir.file("help.out"), kCommandTimeout);
  EXPECT_EQ(help.exit_code, 0) << help.output;
  for (const char* word : {"Usage: xdcr-agent", "run", "validate", "verify", "status"}) {
    EXPECT_NE(help.output.find(word), std::string::npos) << word << " in:\n" << help.output;
  }

  const AgentCommandResult typo =
      runAgentCommand({"stauts"}, dir.file("typo.out"), kCommandTimeout);
  EXPECT_EQ(typo.exit_code, 2) << typo.output;
  EXPECT_NE(typo.output.find("unknown command \"stauts\"; did you mean status?"), std::string::npos)
      << typo.output;
  EXPECT_NE(typo.output.find("commands: run, validate"), std::string::npos) << typo.output;
  const AgentCommandResult far = runAgentCommand({"zzz"}, dir.file("far.out"), kCommandTimeout);
  EXPECT_EQ(far.exit_code, 2) << far.output;
  EXPECT_EQ(far.output.find("did you mean"), std::string::npos) << far.output;
}

}  // namespace
}  // namespace xdcr::test
