// Tests of the integration-test harness itself, independent of xdcr-agent: two real
// redis-servers replicating natively prove RedisServer, RespClient and the helpers.

#include "tests/support/harness.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace xdcr::test {
namespace {

using namespace std::chrono_literals;

TEST(TempDirTest, CreatesAndRemovesDirectory) {
  std::string path;
  {
    TempDir dir("xdcr-harness");
    path = dir.path();
    ASSERT_TRUE(std::filesystem::is_directory(path));
    writeFileText(dir.file("a.txt"), "one\ntwo\nthree\n");
    EXPECT_EQ(readFileText(dir.file("a.txt")), "one\ntwo\nthree\n");
  }
  if (std::getenv("XDCR_KEEP_TEST_DIRS") == nullptr) {
    EXPECT_FALSE(std::filesystem::exists(path));
  }
}

TEST(TempDirTest, LastLines) {
  EXPECT_EQ(lastLines("a\nb\nc\n", 2), "b\nc\n");
  EXPECT_EQ(lastLines("a\nb\nc", 2), "b\nc");
  EXPECT_EQ(lastLines("a\nb\n", 5), "a\nb\n");
  EXPECT_EQ(lastLines("", 3), "");
}

TEST(NetTest, FreePortIsUsable) {
  uint16_t port = freePort();
  EXPECT_GT(port, 0);
}

TEST(WaitTest, IsBounded) {
  EXPECT_TRUE(waitUntil([] { return true; }, 1s));
  auto start = std::chrono::steady_clock::now();
  int calls = 0;
  EXPECT_FALSE(waitUntil(
      [&] {
        ++calls;
        return false;
      },
      300ms, 50ms));
  auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_GE(elapsed, 300ms);
  EXPECT_LT(elapsed, 2s);
  EXPECT_GE(calls, 3);
}

TEST(SubprocessTest, MissingProgramThrows) {
  TempDir dir("xdcr-harness");
  EXPECT_THROW(Subprocess::start({"/nonexistent/xdcr-no-such-binary"}, dir.file("log")),
               std::runtime_error);
  EXPECT_THROW(Subprocess::start({"xdcr-no-such-binary-in-path"}, dir.file("log")),
               std::runtime_error);
}

TEST(SubprocessTest, ExitCodeAndStop) {
  TempDir dir("xdcr-harness");
  Subprocess quick = Subprocess::start({"sh", "-c", "echo hello; exit 3"}, dir.file("log"));
  auto status = quick.waitFor(10s);
  ASSERT_TRUE(status.has_value());
  EXPECT_TRUE(status->exited);
  EXPECT_EQ(status->code, 3);
  EXPECT_EQ(readFileText(dir.file("log")), "hello\n");

  Subprocess sleeper = Subprocess::start({"sleep", "30"}, dir.file("log2"));
  EXPECT_TRUE(sleeper.running());
  ExitStatus stopped = sleeper.stop(SIGTERM, 5s);
  EXPECT_FALSE(stopped.exited);
  EXPECT_EQ(stopped.signal, SIGTERM);
  EXPECT_FALSE(stopped.forced);
  EXPECT_FALSE(sleeper.running());
}

TEST(SubprocessTest, ExtraEnvironmentReachesOnlyThatChild) {
  TempDir dir("xdcr-harness");
  ASSERT_EQ(std::getenv("XDCR_HARNESS_EXTRA"), nullptr);
  const std::string script = "echo \"${XDCR_HARNESS_EXTRA-unset}|$HOME|${PATH:+path}\"";
  Subprocess with = Subprocess::start({"sh", "-c", script}, dir.file("log"),
                                      {{"XDCR_HARNESS_EXTRA", "a b=c"}, {"HOME", "/replaced"}});
  ASSERT_TRUE(with.waitFor(10s).has_value());
  // Added, replaced, and the rest of the environment (PATH) kept.
  EXPECT_EQ(readFileText(dir.file("log")), "a b=c|/replaced|path\n");
  EXPECT_EQ(std::getenv("XDCR_HARNESS_EXTRA"), nullptr) << "the test's own environment changed";

  Subprocess without = Subprocess::start({"sh", "-c", script}, dir.file("log2"));
  ASSERT_TRUE(without.waitFor(10s).has_value());
  EXPECT_EQ(readFileText(dir.file("log2")).substr(0, 6), "unset|");

  EXPECT_THROW(Subprocess::start({"true"}, dir.file("log3"), {{"BAD=NAME", "x"}}),
               std::invalid_argument);
}

TEST(RedisServerTest, StartsAnswersAndParsesEveryReplyType) {
  RedisServer server;
  ASSERT_GT(server.port(), 0);
  ASSERT_GT(server.pid(), 0);
  RespClient client = server.client();

  RespValue pong = client.command({"PING"});
  EXPECT_EQ(pong.type(), RespValue::Type::SimpleString);
  EXPECT_EQ(pong.str(), "PONG");

  EXPECT_EQ(client.command({"SET", "k", std::string("v\r\nwith\0nul", 11)}).str(), "OK");
  RespValue bulk = client.command({"GET", "k"});
  EXPECT_EQ(bulk.type(), RespValue::Type::Bulk);
  EXPECT_EQ(bulk.str(), std::string("v\r\nwith\0nul", 11));
  EXPECT_TRUE(client.command({"GET", "missing"}).isNull());
  EXPECT_EQ(client.command({"INCR", "n"}).integer(), 1);
  RespValue error = client.command({"LPUSH", "k", "x"});
  EXPECT_TRUE(error.isError());
  EXPECT_NE(error.str().find("WRONGTYPE"), std::string::npos);
  EXPECT_THROW(error.integer(), std::logic_error);

  client.command({"HSET", "h", "f1", "a", "f2", "b"});
  RespValue all = client.command({"HGETALL", "h"});
  ASSERT_TRUE(all.isArray());
  EXPECT_EQ(all.array().size(), 4u);
  EXPECT_TRUE(client.command({"HGETALL", "nohash"}).array().empty());
  EXPECT_EQ(client.command({"PEXPIRETIME", "k"}).integer(), -1);
  EXPECT_EQ(client.command({"PEXPIRETIME", "missing"}).integer(), -2);

  // The process answering is the one we started.
  auto info = client.info("server");
  EXPECT_EQ(info["process_id"], std::to_string(server.pid()));
  EXPECT_EQ(info["tcp_port"], std::to_string(server.port()));

  // A large pipeline (more than one internal chunk) in another db.
  client.select(3);
  std::vector<RespCommand> commands;
  for (int i = 0; i < 10000; ++i) {
    commands.push_back({"SET", "key:" + std::to_string(i), "value:" + std::to_string(i)});
  }
  auto replies = client.pipeline(commands);
  ASSERT_EQ(replies.size(), commands.size());
  for (const auto& reply : replies) {
    ASSERT_EQ(reply.toString(), "OK");
  }
  EXPECT_EQ(client.command({"DBSIZE"}).integer(), 10000);
  EXPECT_EQ(client.command({"GET", "key:9999"}).str(), "value:9999");
}

TEST(RedisServerTest, StopAndRestartOnTheSamePort) {
  RedisServer server;
  const uint16_t port = server.port();
  const pid_t first_pid = server.pid();
  ExitStatus status = server.stop();
  EXPECT_TRUE(status.success()) << status.describe();
  EXPECT_FALSE(server.running());
  EXPECT_THROW(RespClient(port, 1s), RespIoError);

  server.restart();
  EXPECT_EQ(server.port(), port);
  EXPECT_NE(server.pid(), first_pid);
  EXPECT_EQ(server.client().command({"PING"}).str(), "PONG");
}

TEST(RedisServerTest, ClientTimesOutInsteadOfHanging) {
  RedisServer server;
  RespClient client = server.client(500ms);
  auto start = std::chrono::steady_clock::now();
  // BLPOP with a 5 s timeout blocks the server's answer longer than the client waits.
  EXPECT_THROW(client.command({"BLPOP", "nothing", "5"}), RespIoError);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

// Native replication between two harness servers: the same waits the agent tests use
// (connected_slaves, state=online) and absolute deadlines compared with PEXPIRETIME.
TEST(RedisServerTest, NativeReplicationBetweenTwoServers) {
  RedisServer master({"--repl-diskless-sync-delay", "0"});
  RedisServer replica;
  RespClient m = master.client();
  RespClient r = replica.client();

  ASSERT_EQ(r.command({"REPLICAOF", "127.0.0.1", std::to_string(master.port())}).str(), "OK");
  ASSERT_TRUE(waitUntil(
      [&] {
        auto replicas = replicasOf(m.info("replication"));
        return replicas.size() == 1 && replicas[0].state == "online" &&
               r.info("replication")["master_link_status"] == "up";
      },
      20s, 50ms))
      << "replica never came online\nmaster log:\n"
      << master.logTail() << "\nreplica log:\n"
      << replica.logTail();
  EXPECT_EQ(m.info("replication")["connected_slaves"], "1");

  std::vector<RespCommand> writes;
  for (int i = 0; i < 2000; ++i) {
    std::string key = "r:" + std::to_string(i);
    if (i % 3 == 0) {
      writes.push_back({"SET", key, "v", "EX", std::to_string(100 + i)});
    } else if (i % 3 == 1) {
      writes.push_back({"HSET", key, "f", std::to_string(i)});
    } else {
      writes.push_back({"SET", key, "v"});
    }
  }
  for (const auto& reply : m.pipeline(writes)) {
    ASSERT_FALSE(reply.isError()) << reply.toString();
  }
  ASSERT_TRUE(waitUntil([&] { return r.command({"DBSIZE"}).integer() == 2000; }, 20s))
      << "replica DBSIZE " << r.command({"DBSIZE"}).toString();

  std::vector<RespCommand> reads;
  for (int i = 0; i < 2000; ++i) {
    reads.push_back({"PEXPIRETIME", "r:" + std::to_string(i)});
  }
  auto on_master = m.pipeline(reads);
  auto on_replica = r.pipeline(reads);
  for (int i = 0; i < 2000; ++i) {
    // Redis replicates absolute deadlines, so they are equal to the millisecond.
    ASSERT_EQ(on_master[i], on_replica[i]) << "r:" << i;
    if (i % 3 == 0) {
      ASSERT_GT(on_master[i].integer(), unixTimeMs());
    } else {
      ASSERT_EQ(on_master[i].integer(), -1);
    }
  }
  auto stats = m.info("stats");
  EXPECT_EQ(stats["sync_full"], "1");
}

// AgentProcess plumbing with a stand-in script, so it is proven before the agent exists.
TEST(AgentProcessTest, TerminateReportsExitStatusAndCapturesOutput) {
  TempDir dir("xdcr-harness");
  const std::string fake = dir.file("fake-agent.sh");
  writeFileText(fake,
                "#!/bin/sh\n"
                "trap 'echo \"fake agent: got TERM\"; exit 0' TERM\n"
                "echo \"fake agent ready: $*\"\n"
                "echo \"to stderr\" >&2\n"
                "while :; do sleep 0.05; done\n");
  ::chmod(fake.c_str(), 0755);
  AgentProcess agent(dir.file("config.yaml"), dir.file("agent.log"), {}, fake);
  ASSERT_TRUE(waitUntil([&] { return agent.logText().find("ready") != std::string::npos; }, 10s))
      << agent.logText();
  EXPECT_TRUE(agent.running());
  const auto asked = std::chrono::steady_clock::now();
  ExitStatus status = agent.terminate(10s);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - asked);
  const std::string log = agent.logText();
  // Everything a failure needs in one message: how it ended, when, and what the script printed.
  EXPECT_TRUE(status.success()) << status.describe() << " after " << took.count() << " ms; log:\n"
                                << log;
  EXPECT_FALSE(status.forced) << status.describe() << " after " << took.count() << " ms; log:\n"
                              << log;
  EXPECT_NE(log.find("fake agent ready: run -c " + dir.file("config.yaml")), std::string::npos)
      << log;
  EXPECT_NE(log.find("to stderr"), std::string::npos) << log;
  EXPECT_NE(log.find("got TERM"), std::string::npos) << log;
}

TEST(AgentProcessTest, TerminateKillsAnAgentThatIgnoresSigterm) {
  TempDir dir("xdcr-harness");
  const std::string fake = dir.file("stubborn-agent.sh");
  writeFileText(fake,
                "#!/bin/sh\n"
                "trap '' TERM\n"
                "echo ready\n"
                "while :; do sleep 0.05; done\n");
  ::chmod(fake.c_str(), 0755);
  AgentProcess agent(dir.file("config.yaml"), dir.file("agent.log"), {}, fake);
  ASSERT_TRUE(waitUntil([&] { return agent.logText().find("ready") != std::string::npos; }, 10s));
  auto start = std::chrono::steady_clock::now();
  ExitStatus status = agent.terminate(500ms);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_TRUE(status.forced);
  EXPECT_FALSE(status.exited);
  EXPECT_EQ(status.signal, SIGKILL);
  EXPECT_FALSE(agent.running());
}

// A sanitizer report in the agent's log is found (and ~AgentProcess fails the test with it).
TEST(AgentProcessTest, SanitizerReportFindsAsanAndUbsanReports) {
  TempDir dir("xdcr-harness");
  const std::string fake = dir.file("fake-agent.sh");
  writeFileText(fake, "#!/bin/sh\necho ready\nwhile :; do sleep 0.05; done\n");
  ::chmod(fake.c_str(), 0755);
  AgentProcess agent(dir.file("config.yaml"), dir.file("agent.log"), {}, fake);
  ASSERT_TRUE(waitUntil([&] { return agent.logText().find("ready") != std::string::npos; }, 10s));
  EXPECT_EQ(agent.sanitizerReport(), "");
  agent.kill();
  for (const std::string report :
       {"==42==ERROR: AddressSanitizer: heap-use-after-free on address 0x1\n    #0 0x2 in f a.cc:1",
        "common/x.cc:7:3: runtime error: signed integer overflow\n    #0 0x2 in f a.cc:1"}) {
    writeFileText(agent.logPath(), "[info] streaming\n" + report + "\n");
    EXPECT_EQ(agent.sanitizerReport(), report + "\n");
  }
  writeFileText(agent.logPath(), "[info] streaming\n");  // the destructor must not fail this test
}

// A SIGSTOPped server keeps its connections but answers nothing (a hung host, not a dead one);
// the guard's SIGCONT brings it back with nothing lost.
TEST(StoppedProcessTest, StoppedServerAnswersNothingUntilResumed) {
  RedisServer server;
  RespClient client = server.client(300ms);
  ASSERT_EQ(client.command({"SET", "k", "v"}), RespValue::simpleString("OK"));
  {
    StoppedProcess stopped(server.pid());
    RespClient during = server.client(300ms);  // the kernel still accepts the connection
    EXPECT_THROW(during.command({"PING"}), RespIoError);
  }
  EXPECT_EQ(server.client().command({"GET", "k"}), RespValue::bulk("v"));
  StoppedProcess twice(server.pid());
  twice.resume();
  EXPECT_FALSE(twice.stopped());
  EXPECT_EQ(server.client().command({"PING"}), RespValue::simpleString("PONG"));
  EXPECT_THROW(StoppedProcess(-1), std::runtime_error);
}

// checkKeys() finds each kind of difference: missing, unexpected, contents, deadline outside the
// clamp's window; and accepts a key within it.
TEST(KeyCheckTest, FindsEveryKindOfDifference) {
  const std::vector<DatasetKey> keys = {{0, "ok", ValueKind::StringEmbstr, 0, false},
                                        {0, "gone", ValueKind::StringEmbstr, 0, false},
                                        {0, "extra", ValueKind::StringEmbstr, 0, false},
                                        {0, "other", ValueKind::StringEmbstr, 0, false},
                                        {0, "late", ValueKind::StringEmbstr, 0, false},
                                        {0, "kept", ValueKind::StringEmbstr, 0, false}};
  std::vector<const DatasetKey*> refs;
  for (const auto& k : keys) refs.push_back(&k);
  const KeyState v{"string", 5000, "v"};
  const int64_t m = 60000;
  // E = 0 under M = 60 s written at now in [1000, 2000]: a deadline in [61000, 62000] +- 100.
  const std::vector<ExpectedKey> expected = {replicatedKey(v, 0, m, 1000, 2000, 100),
                                             replicatedKey(v, 0, m, 1000, 2000, 100),
                                             absentKey("filtered"),
                                             replicatedKey(v, 0, m, 1000, 2000, 100),
                                             replicatedKey(v, 0, m, 1000, 2000, 100),
                                             replicatedKey(v, 0, 0, 1000, 2000, 100)};
  const std::vector<KeyState> actual = {{"string", 61900, "v"}, {"none", -2, ""},
                                        {"string", -1, "v"},    {"string", 61500, "w"},
                                        {"string", 62101, "v"}, {"string", 3, "v"}};
  const KeyCheckReport r = checkKeys(refs, expected, actual, 0);
  EXPECT_EQ(r.checked, 6);
  EXPECT_EQ(r.missing, 1);
  EXPECT_EQ(r.unexpected, 1);
  EXPECT_EQ(r.contents, 1);
  EXPECT_EQ(r.deadlines, 2) << r.summary();  // "late", and "kept" (M = 0, E = 0: none)
  EXPECT_FALSE(r.ok());
  ASSERT_EQ(r.details.size(), 5u) << r.summary();
  EXPECT_NE(r.details[0].find("gone: missing"), std::string::npos) << r.details[0];
  EXPECT_TRUE(checkKeys({refs[0]}, {expected[0]}, {actual[0]}, 0).ok());
}

}  // namespace
}  // namespace xdcr::test
