// The source side against real redis-servers: both snapshot framings are consumed byte-exactly
// (the snapshot's keys arrive, and the offsets the agent acknowledges equal the source's own
// master_repl_offset), WAIT on the source is answered through GETACK, and a refused PSYNC turns
// into a full resync by itself.

#include <gtest/gtest.h>

#include <string>

#include "tests/support/harness.h"

namespace xdcr::test {
namespace {

using namespace std::chrono_literals;

std::string configYaml(const std::string& state_dir, uint16_t src, uint16_t dst) {
  return "agent:\n  state_dir: " + state_dir +
         "\n  log_level: debug\n"
         "clusters:\n"
         "  src: {type: redis, address: \"127.0.0.1:" +
         std::to_string(src) +
         "\"}\n"
         "  dst: {type: redis, address: \"127.0.0.1:" +
         std::to_string(dst) +
         "\"}\n"
         "pipelines:\n  - {name: p, source: src, target: dst, checkpoint_interval: 1s}\n";
}

int64_t infoInt(RespClient& c, const std::string& section, const std::string& key) {
  auto info = c.info(section);
  auto it = info.find(key);
  return it == info.end() ? -1 : std::stoll(it->second);
}

/** The agent as the source sees it: online, and how far it has acknowledged. */
std::optional<ReplicaInfo> agentReplica(RedisServer& source) {
  auto replicas = replicasOf(source.client().info("replication"));
  if (replicas.empty()) return std::nullopt;
  return replicas.front();
}

/** Waits until the source lists the agent as an online replica. */
bool waitAgentOnline(RedisServer& source) {
  return waitUntil(
      [&] {
        auto r = agentReplica(source);
        return r && r->state == "online";
      },
      30s);
}

class SourceFramingTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    const bool diskless = GetParam();
    source_ = std::make_unique<RedisServer>(
        std::vector<std::string>{"--repl-diskless-sync", diskless ? "yes" : "no",
                                 "--repl-diskless-sync-delay", "0", "--rdbcompression", "yes"});
    target_ = std::make_unique<RedisServer>();
    // A snapshot that is not empty: strings of every encoding, a hash, keys with deadlines.
    RespClient c = source_->client();
    std::vector<RespCommand> fill;
    for (int i = 0; i < 500; ++i) {
      std::string k = "pre:" + std::to_string(i);
      fill.push_back({"SET", k, i % 3 == 0 ? std::string(300, 'a') : std::to_string(i)});
      if (i % 2 == 0) fill.push_back({"PEXPIRE", k, "600000"});
      fill.push_back({"HSET", "preh:" + std::to_string(i % 20), "f" + std::to_string(i), "v"});
    }
    c.pipeline(fill);
    state_dir_ = dir_.file("state");
    config_ = dir_.file("xdcr.yaml");
    writeFileText(config_, configYaml(state_dir_, source_->port(), target_->port()));
  }

  void startAgent(const std::string& log) {
    agent_ = std::make_unique<AgentProcess>(config_, dir_.file(log));
    ASSERT_TRUE(waitAgentOnline(*source_))
        << "agent not online; " << agent_->describeState() << "\n"
        << agent_->logTail();
  }

  /** The agent has acknowledged exactly the source's whole stream. */
  void expectOffsetsEqual() {
    RespClient c = source_->client();
    int64_t master = -1;
    bool equal = waitUntil(
        [&] {
          master = infoInt(c, "replication", "master_repl_offset");
          auto r = agentReplica(*source_);
          return r && r->offset == master;
        },
        15s, 100ms);
    auto r = agentReplica(*source_);
    ASSERT_TRUE(equal) << "source master_repl_offset " << master << ", agent acknowledged "
                       << (r ? r->offset : -1) << "\n"
                       << agent_->logTail();
  }

  TempDir dir_{"xdcr-source"};
  std::unique_ptr<RedisServer> source_, target_;
  std::unique_ptr<AgentProcess> agent_;
  std::string state_dir_, config_;
};

TEST_P(SourceFramingTest, SnapshotAppliedByteExactlyThenStream) {
  ASSERT_NO_FATAL_FAILURE(startAgent("agent.log"));
  RespClient src = source_->client();
  RespClient dst = target_->client();
  std::vector<RespCommand> writes;
  for (int i = 0; i < 200; ++i) {
    writes.push_back({"SET", "post:" + std::to_string(i), std::string(i, 'x'), "PX", "600000"});
  }
  src.pipeline(writes);
  ASSERT_TRUE(waitUntil(
      [&] {
        return dst.command({"EXISTS", "post:199"}).integer() == 1;
      },
      15s))
      << agent_->logTail();
  for (int i = 0; i < 200; ++i) {
    std::string k = "post:" + std::to_string(i);
    ASSERT_EQ(dst.command({"GET", k}).str(), std::string(i, 'x')) << k;
    ASSERT_EQ(dst.command({"PEXPIRETIME", k}).integer(), src.command({"PEXPIRETIME", k}).integer())
        << k;
  }
  ASSERT_NO_FATAL_FAILURE(expectOffsetsEqual());
  // The snapshot's keys, with their deadlines.
  for (int i = 0; i < 500; ++i) {
    std::string k = "pre:" + std::to_string(i);
    ASSERT_EQ(dst.command({"GET", k}), src.command({"GET", k})) << k;
    ASSERT_EQ(dst.command({"PEXPIRETIME", k}), src.command({"PEXPIRETIME", k})) << k;
  }
  for (int i = 0; i < 20; ++i) {
    std::string h = "preh:" + std::to_string(i);
    ASSERT_EQ(dst.command({"HLEN", h}), src.command({"HLEN", h})) << h;
  }
  EXPECT_NE(agent_->logText().find("snapshot applied: 520 keys"), std::string::npos)
      << agent_->logTail();
}

TEST_P(SourceFramingTest, WaitOnTheSourceIsAnsweredWithTheAppliedOffset) {
  ASSERT_NO_FATAL_FAILURE(startAgent("agent.log"));
  RespClient src = source_->client();
  // WAIT on the connection that wrote makes the source put REPLCONF GETACK * in the stream.
  src.command({"SET", "w1", "v", "PX", "600000"});
  auto acked = src.command({"WAIT", "1", "5000"});
  ASSERT_TRUE(acked.isInteger()) << acked.toString();
  EXPECT_EQ(acked.integer(), 1) << "WAIT timed out: GETACK not answered\n" << agent_->logTail();
  // The ACK means "on the target": the key is there once WAIT returned.
  EXPECT_EQ(target_->client().command({"EXISTS", "w1"}).integer(), 1);
}

INSTANTIATE_TEST_SUITE_P(Framing, SourceFramingTest, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "Diskless" : "DiskLen"; });

TEST(SourceResync, RefusedPartialResyncBecomesAFullResync) {
  TempDir dir("xdcr-resync");
  RedisServer source({"--repl-diskless-sync-delay", "0"});
  RedisServer target;
  const std::string config = dir.file("xdcr.yaml");
  writeFileText(config, configYaml(dir.file("state"), source.port(), target.port()));
  {
    AgentProcess agent(config, dir.file("agent-1.log"));
    ASSERT_TRUE(waitAgentOnline(source)) << agent.logTail();
    source.client().command({"SET", "before", "v"});
    ASSERT_TRUE(waitUntil(
        [&] {
          return target.client().command({"EXISTS", "before"}).integer() == 1;
        },
        10s));
    ASSERT_TRUE(agent.terminate().success()) << agent.logTail();
  }
  // A source restarted without persistence has a new replication id: the checkpoint's history
  // is gone, PSYNC is refused, and the agent must full-sync on its own.
  source.restart();
  AgentProcess agent(config, dir.file("agent-2.log"));
  ASSERT_TRUE(waitAgentOnline(source)) << agent.logTail();
  RespClient src = source.client();
  EXPECT_EQ(infoInt(src, "stats", "sync_full"), 1);
  EXPECT_EQ(infoInt(src, "stats", "sync_partial_err"), 1);
  src.command({"SET", "after", "v", "PX", "600000"});
  ASSERT_TRUE(waitUntil(
      [&] {
        return target.client().command({"EXISTS", "after"}).integer() == 1;
      },
      10s))
      << agent.logTail();
  EXPECT_NE(agent.logText().find("refused partial resync"), std::string::npos) << agent.logTail();
  ASSERT_TRUE(agent.terminate().success());
}

}  // namespace
}  // namespace xdcr::test

namespace xdcr::test {
namespace {

/** Writes `n` keys `prefix:i` with a 10-minute deadline. */
void writeKeys(RedisServer& source, const std::string& prefix, int n) {
  std::vector<RespCommand> w;
  for (int i = 0; i < n; ++i) {
    w.push_back({"SET", prefix + ":" + std::to_string(i), "v", "PX", "600000"});
  }
  source.client().pipeline(w);
}

bool hasKey(RedisServer& server, const std::string& key) {
  try {
    return server.client().command({"EXISTS", key}).integer() == 1;
  } catch (const std::exception&) {
    return false;  // the server is restarting
  }
}

TEST(Reconnect, TargetAndSourceRestartsUnderARunningAgent) {
  TempDir dir("xdcr-reconnect");
  RedisServer source({"--repl-diskless-sync-delay", "0"});
  RedisServer target;
  const std::string config = dir.file("xdcr.yaml");
  writeFileText(config, configYaml(dir.file("state"), source.port(), target.port()));
  AgentProcess agent(config, dir.file("agent.log"));
  ASSERT_TRUE(waitAgentOnline(source)) << agent.logTail();
  writeKeys(source, "a", 100);
  ASSERT_TRUE(waitUntil([&] { return hasKey(target, "a:99"); }, 10s)) << agent.logTail();

  // The target goes away and comes back empty: the agent reconnects with backoff, finds its
  // marker gone (the target lost what the checkpoint counts as written) and resynchronises, so
  // a:* come back too; what is written meanwhile arrives.
  target.restart();
  writeKeys(source, "b", 100);
  ASSERT_TRUE(waitUntil([&] { return hasKey(target, "b:99") && hasKey(target, "a:0"); }, 30s))
      << agent.logTail();
  EXPECT_TRUE(agent.running()) << agent.describeState();
  RespClient src = source.client();
  EXPECT_EQ(infoInt(src, "stats", "sync_full"), 2) << "an emptied target must be resynchronised";
  EXPECT_NE(agent.logText().find("lost data the checkpoint"), std::string::npos) << agent.logTail();

  // The source restarts with a new history: the agent full-syncs by itself.
  source.restart();
  ASSERT_TRUE(waitAgentOnline(source)) << agent.logTail();
  writeKeys(source, "c", 100);
  ASSERT_TRUE(waitUntil([&] { return hasKey(target, "c:99"); }, 30s)) << agent.logTail();
  EXPECT_NE(agent.logText().find("reconnecting in"), std::string::npos);
  ASSERT_TRUE(agent.terminate().success()) << agent.logTail();
}

}  // namespace
}  // namespace xdcr::test

namespace xdcr::test {
namespace {

// expiry-semantics.md §2: the expiry index learned from the snapshot is persisted with the
// checkpoint and survives a restart that resumes by partial resync. An in-place write into a
// maxTTL collection after the restart shows it: its deadline is clamp(source deadline), which is
// the key's own 10 minutes only if the agent still knows it; without the index it would be
// now + 1 h.
TEST(SnapshotIndex, DeadlinesLearnedFromTheSnapshotSurviveARestart) {
  TempDir dir("xdcr-snapindex");
  RedisServer source({"--repl-diskless-sync-delay", "0", "--repl-backlog-size", "64mb"});
  RedisServer target;
  RespClient src = source.client();
  std::vector<RespCommand> fill;
  for (int i = 0; i < 200; ++i) {
    fill.push_back({"SET", "pre:" + std::to_string(i), "v", "PX", "600000"});  // 10 min
  }
  src.pipeline(fill);
  const std::string config = dir.file("xdcr.yaml");
  writeFileText(config,
                "agent: {state_dir: " + dir.file("state") +
                    "}\n"
                    "clusters:\n"
                    "  src: {type: redis, address: \"127.0.0.1:" +
                    std::to_string(source.port()) +
                    "\"}\n"
                    "  dst:\n"
                    "    type: redis\n"
                    "    address: \"127.0.0.1:" +
                    std::to_string(target.port()) +
                    "\"\n"
                    "    buckets: [{db: 0, max_ttl: 0, collections: [{name: pre, keys: \"pre:*\", "
                    "max_ttl: 1h}]}]\n"
                    "pipelines:\n  - {name: p, source: src, target: dst}\n");
  {
    AgentProcess agent(config, dir.file("agent-1.log"));
    ASSERT_TRUE(waitUntil(
        [&] { return agent.logText().find("snapshot applied: 200 keys") != std::string::npos; },
        30s))
        << agent.logTail();
    ASSERT_TRUE(agent.terminate().success()) << agent.logTail();
  }
  // While the agent is down: in-place writes to snapshot keys.
  std::vector<RespCommand> appends;
  for (int i = 0; i < 200; ++i) appends.push_back({"APPEND", "pre:" + std::to_string(i), "x"});
  src.pipeline(appends);
  AgentProcess agent(config, dir.file("agent-2.log"));
  RespClient dst = target.client();
  ASSERT_TRUE(waitUntil(
      [&] {
        return dst.command({"GET", "pre:199"}).str() == "vx";
      },
      30s))
      << agent.logTail();
  EXPECT_EQ(infoInt(src, "stats", "sync_full"), 1) << "the restart must resume, not full-sync";
  for (int i = 0; i < 200; ++i) {
    std::string k = "pre:" + std::to_string(i);
    ASSERT_EQ(dst.command({"GET", k}).str(), "vx") << k;
    int64_t want = src.command({"PEXPIRETIME", k}).integer();
    int64_t got = dst.command({"PEXPIRETIME", k}).integer();
    ASSERT_NEAR(got, want, 1000) << k << ": the snapshot's deadline was forgotten across the "
                                 << "restart (now+1h would be " << unixTimeMs() + 3600000 << ")";
  }
  ASSERT_TRUE(agent.terminate().success());
}

}  // namespace
}  // namespace xdcr::test

namespace xdcr::test {
namespace {

// A snapshot value too large for one RESTORE on the target is not dropped in silence: it is
// logged by name and counted as failed, and everything else is copied.
TEST(SnapshotLimits, ValuesOverTheTargetsProtoMaxBulkLenAreReportedNotDropped) {
  TempDir dir("xdcr-oversize");
  RedisServer source({"--repl-diskless-sync-delay", "0", "--rdbcompression", "no"});
  RedisServer target({"--proto-max-bulk-len", "1mb"});
  RespClient src = source.client();
  std::string big(2 << 20, 'b');
  for (size_t i = 0; i < big.size(); i += 97) big[i] = static_cast<char>('a' + i % 26);
  src.command({"SET", "huge", big});
  src.command({"SET", "small", "v"});
  const std::string config = dir.file("xdcr.yaml");
  writeFileText(config, configYaml(dir.file("state"), source.port(), target.port()));
  AgentProcess agent(config, dir.file("agent.log"));
  ASSERT_TRUE(waitUntil(
      [&] { return agent.logText().find("snapshot applied:") != std::string::npos; }, 30s))
      << agent.logTail();
  const std::string log = agent.logText();
  EXPECT_NE(log.find("snapshot applied: 1 keys, 0 expired, 1 failed"), std::string::npos) << log;
  EXPECT_NE(log.find("key \"huge\""), std::string::npos) << log;
  EXPECT_NE(log.find("proto-max-bulk-len"), std::string::npos) << log;
  RespClient dst = target.client();
  EXPECT_EQ(dst.command({"GET", "small"}).str(), "v");
  EXPECT_EQ(dst.command({"EXISTS", "huge"}).integer(), 0);
  ASSERT_TRUE(agent.terminate().success());
}

}  // namespace
}  // namespace xdcr::test
