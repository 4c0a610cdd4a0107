// `xdcr-agent verify` with a Redis Cluster on either side (issue 15), on real servers: a
// standalone source and a 3-master cluster target, a cluster source and a standalone target, and
// a cluster source and a 4-master cluster target (the two slot maps differ, so a read routed by
// the wrong map would miss). The test writes the same keys to both sides itself (five types,
// half with an absolute deadline): verify must say in sync (exit 0, every key checked, nothing
// extra); then one key removed from the target, one value changed and one deadline moved must be
// reported as one missing, one value and one deadline difference (exit 1), and a key only on the
// target as one extra. The agent's own __xdcr_marker__ keys on either side count as nothing.
// Also a cluster source with a Sentinel-managed target (read at the master the Sentinels name).
//
// And verify on a cluster whose slots move while it reads: a slot half migrated by hand (ASK for
// the keys already moved), then a reshard during a slow verify (MOVED for every key of the moved
// slots read after it): still in sync, with the redirections counted in the report.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "common/cluster_slot.h"
#include "tests/support/harness.h"

namespace xdcr::test {
namespace {

using namespace std::chrono_literals;

constexpr int kKeys = 300;

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string serverYaml(const RedisServer& s) {
  return "{type: redis, address: \"" + s.address() + "\"}";
}

/** Every node of the cluster as a seed. */
std::string clusterYaml(const RedisCluster& c) {
  std::string list;
  for (const std::string& seed : c.seeds()) list += (list.empty() ? "\"" : ", \"") + seed + "\"";
  return "{type: redis_cluster, addresses: [" + list + "]}";
}

std::string plainKey(int i) {
  return "k:" + std::to_string(i);
}

/**
 * The data set: `keys` keys of five types; every even one with the absolute deadline
 * `base_ms + i s`, so both sides hold exactly the same deadlines.
 */
std::vector<RespCommand> dataset(int keys, int64_t base_ms,
                                 const std::function<std::string(int)>& name) {
  std::vector<RespCommand> out;
  for (int i = 0; i < keys; ++i) {
    const std::string k = name(i);
    const std::string n = std::to_string(i);
    switch (i % 5) {
      case 0:
        out.push_back({"SET", k, "v" + n});
        break;
      case 1:
        out.push_back({"HSET", k, "f1", "a" + n, "f2", "b" + n});
        break;
      case 2:
        out.push_back({"RPUSH", k, "x", "y", n});
        break;
      case 3:
        out.push_back({"SADD", k, "m1", "m2", n});
        break;
      default:
        out.push_back({"ZADD", k, "1", "a", "2", "b" + n});
        break;
    }
    if (i % 2 == 0) out.push_back({"PEXPIREAT", k, std::to_string(base_ms + i * 1000LL)});
  }
  return out;
}

/** Runs `commands` through `client`; fails the test on any error reply. */
void write(ClusterClient& client, const std::vector<RespCommand>& commands) {
  const std::vector<RespValue> replies = client.pipeline(commands);
  ASSERT_EQ(replies.size(), commands.size());
  for (size_t i = 0; i < replies.size(); ++i) {
    ASSERT_FALSE(replies[i].isError())
        << commands[i][0] << " " << commands[i][1] << ": " << replies[i].toString();
  }
}

/** The example of `kind` whose source key is `key`, or null. */
const nlohmann::json* example(const nlohmann::json& report, const std::string& kind,
                              const std::string& key) {
  if (!report.contains("examples")) return nullptr;
  for (const auto& e : report["examples"]) {
    if (e.value("kind", "") == kind && e.value("source", "") == "db0 \"" + key + "\"") return &e;
  }
  return nullptr;
}

/** The calls of `command` on `server` so far (INFO commandstats). */
int64_t calls(const RedisServer& server, const std::string& command) {
  auto stats = server.client(2s).info("commandstats");
  auto it = stats.find("cmdstat_" + command);
  if (it == stats.end()) return 0;
  const size_t at = it->second.find("calls=");
  return at == std::string::npos ? 0 : std::stoll(it->second.substr(at + 6));
}

class VerifyClusterTest : public ::testing::Test {
 protected:
  static RedisClusterOptions clusterOptions(int masters) {
    RedisClusterOptions o;
    o.masters = masters;
    o.replicas_per_master = 0;  // verify reads masters only
    return o;
  }

  std::string writeConfig(const std::string& name, const std::string& source,
                          const std::string& target) {
    const std::string path = dir_.file(name + ".yaml");
    writeFileText(path, "agent: {state_dir: \"" + dir_.file("state") +
                            "\"}\n"
                            "clusters:\n"
                            "  src: " +
                            source +
                            "\n"
                            "  dst: " +
                            target +
                            "\n"
                            "pipelines:\n"
                            "  - {name: p, source: src, target: dst, dbs: {0: 0}}\n");
    return path;
  }

  /** verify -o json, differences reported at once (no rechecks: nothing replicates here). */
  AgentCommandResult verify(const std::string& config, const std::string& name,
                            const std::string& rate = "0") {
    return runAgentCommand(
        {"verify", "-c", config, "-p", "p", "-o", "json", "--rechecks", "0", "--rate", rate},
        dir_.file(name + ".out"));
  }

  /** The same keys on both sides: in sync; then one difference of each kind on the target. */
  void checkScenario(const std::string& name, const std::string& source_yaml, ClusterClient& source,
                     const std::string& target_yaml, ClusterClient& target) {
    SCOPED_TRACE(name);
    const std::string config = writeConfig(name, source_yaml, target_yaml);
    const int64_t base = nowMs() + 3600 * 1000;
    const std::vector<RespCommand> data = dataset(kKeys, base, plainKey);
    ASSERT_NO_FATAL_FAILURE(write(source, data));
    ASSERT_NO_FATAL_FAILURE(write(target, data));
    // The agent's own keys: a marker of another pipeline on the source, this one's on the target.
    ASSERT_EQ(source.command({"SET", "__xdcr_marker__:q", "token"}).toString(), "OK");
    ASSERT_EQ(target.command({"SET", "__xdcr_marker__:p", "token"}).toString(), "OK");
    ASSERT_EQ(target.command({"SET", "__xdcr_marker__:p:applied:{x}", "r:1"}).toString(), "OK");

    AgentCommandResult same = verify(config, name + "-in-sync");
    ASSERT_TRUE(same.report.is_object()) << same.output;
    EXPECT_EQ(same.exit_code, 0) << same.output;
    EXPECT_EQ(same.report.value("checked", -1), kKeys) << same.output;
    EXPECT_EQ(same.report.value("missing", -1), 0) << same.output;
    EXPECT_EQ(same.report.value("value_mismatches", -1), 0) << same.output;
    EXPECT_EQ(same.report.value("ttl_mismatches", -1), 0) << same.output;
    EXPECT_EQ(same.report.value("extra", -1), 0) << same.output;
    EXPECT_EQ(same.report.value("source_gone", -1), 0) << same.output;
    ASSERT_TRUE(same.report.contains("redirections")) << same.output;  // a side is a cluster
    EXPECT_EQ(same.report["redirections"].value("moved", -1), 0) << same.output;
    EXPECT_EQ(same.report["redirections"].value("ask", -1), 0) << same.output;

    // k:1 a hash, gone; k:5 a string without a deadline, another value; k:10 a string with a
    // deadline, a minute later; extra:1 only on the target.
    ASSERT_EQ(target.command({"DEL", plainKey(1)}).integer(), 1);
    ASSERT_EQ(target.command({"SET", plainKey(5), "changed"}).toString(), "OK");
    ASSERT_EQ(target.command({"PEXPIREAT", plainKey(10), std::to_string(base + 10'000 + 60'000)})
                  .integer(),
              1);
    ASSERT_EQ(target.command({"SET", "extra:1", "x"}).toString(), "OK");

    AgentCommandResult diff = verify(config, name + "-differences");
    ASSERT_TRUE(diff.report.is_object()) << diff.output;
    EXPECT_EQ(diff.exit_code, 1) << diff.output;
    EXPECT_EQ(diff.report.value("checked", -1), kKeys) << diff.output;
    EXPECT_EQ(diff.report.value("missing", -1), 1) << diff.output;
    EXPECT_EQ(diff.report.value("value_mismatches", -1), 1) << diff.output;
    EXPECT_EQ(diff.report.value("ttl_mismatches", -1), 1) << diff.output;
    EXPECT_EQ(diff.report.value("extra", -1), 1) << diff.output;
    EXPECT_NE(example(diff.report, "missing", plainKey(1)), nullptr) << diff.output;
    const nlohmann::json* value = example(diff.report, "value", plainKey(5));
    ASSERT_NE(value, nullptr) << diff.output;
    EXPECT_NE(value->value("detail", "").find("\"changed\""), std::string::npos) << diff.output;
    const nlohmann::json* ttl = example(diff.report, "ttl", plainKey(10));
    ASSERT_NE(ttl, nullptr) << diff.output;
    EXPECT_NE(ttl->value("detail", "").find(std::to_string(base + 70'000)), std::string::npos)
        << diff.output;

    // The table output says the same.
    AgentCommandResult table =
        runAgentCommand({"verify", "-c", config, "-p", "p", "--rechecks", "0", "--rate", "0"},
                        dir_.file(name + "-table.out"));
    EXPECT_EQ(table.exit_code, 1) << table.output;
    EXPECT_NE(table.output.find("verify: " + std::to_string(kKeys) +
                                " keys checked, 1 missing, 1 value mismatches, 1 ttl mismatches, "
                                "1 extra"),
              std::string::npos)
        << table.output;
  }

  TempDir dir_{"xdcr-verify-cluster"};
};

TEST_F(VerifyClusterTest, StandaloneSourceAndClusterTarget) {
  RedisServer source;
  RedisCluster target(clusterOptions(3));
  ClusterClient src({source.address()});
  ClusterClient dst = target.client();
  ASSERT_FALSE(src.clusterMode());
  ASSERT_TRUE(dst.clusterMode());
  checkScenario("standalone-to-cluster", serverYaml(source), src, clusterYaml(target), dst);
  // The keys really are spread: every master holds some.
  for (const auto& [address, size] : dst.forEachMaster({"DBSIZE"})) {
    EXPECT_GT(size.integer(), 50) << address;
  }
}

TEST_F(VerifyClusterTest, ClusterSourceAndStandaloneTarget) {
  RedisCluster source(clusterOptions(3));
  RedisServer target;
  ClusterClient src = source.client();
  ClusterClient dst({target.address()});
  checkScenario("cluster-to-standalone", clusterYaml(source), src, serverYaml(target), dst);
  for (const auto& [address, size] : src.forEachMaster({"DBSIZE"})) {
    EXPECT_GT(size.integer(), 50) << address;
  }
}

// Under a target max_ttl verify reads each source key's OBJECT IDLETIME (issue 18, finding 4):
// on a cluster source it goes to the master owning the key (argument 2, not 1), like the other
// reads; keys absent on the target, touched just now, are missing, each with its idle time.
TEST_F(VerifyClusterTest, ClusterSourceIdleTimesUnderATargetMaxTtl) {
  RedisCluster source(clusterOptions(3));
  RedisServer target;
  ClusterClient src = source.client();
  const std::string config = writeConfig(
      "max-ttl", clusterYaml(source),
      "{type: redis, address: \"" + target.address() + "\", buckets: [{db: 0, max_ttl: 1h}]}");
  constexpr int kAbsent = 60;
  for (int i = 0; i < kAbsent; ++i) {
    ASSERT_EQ(src.command({"SET", plainKey(i), "v"}).toString(), "OK");
  }
  AgentCommandResult r = verify(config, "max-ttl");
  ASSERT_TRUE(r.report.is_object()) << r.output;
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.report.value("missing", -1), kAbsent) << r.output;
  EXPECT_EQ(r.report.value("ended_by_max_ttl", -1), 0) << r.output;
  EXPECT_EQ(r.report["redirections"].value("moved", -1), 0) << r.output;
  ASSERT_TRUE(r.report.contains("examples")) << r.output;
  for (const auto& e : r.report["examples"]) {
    EXPECT_NE(e.value("detail", "").find("OBJECT IDLETIME), under max_ttl 3600 s"),
              std::string::npos)
        << e.dump();
  }
}

TEST_F(VerifyClusterTest, ClusterSourceAndClusterTargetWithAnotherSlotMap) {
  RedisCluster source(clusterOptions(3));
  RedisCluster target(clusterOptions(4));
  ClusterClient src = source.client();
  ClusterClient dst = target.client();
  ASSERT_EQ(dst.masterAddresses().size(), 4u);
  checkScenario("cluster-to-cluster", clusterYaml(source), src, clusterYaml(target), dst);
}

// A Sentinel-managed target is a standalone side reached at the master its Sentinels name
// (common/sentinel.h): the two kinds of side together.
TEST_F(VerifyClusterTest, ClusterSourceAndSentinelManagedTarget) {
  RedisCluster source(clusterOptions(3));
  SentinelSet target;
  ClusterClient src = source.client();
  ClusterClient dst({target.master().address()});
  ASSERT_FALSE(dst.clusterMode());
  std::string sentinels;
  for (const std::string& s : target.sentinels()) {
    sentinels += (sentinels.empty() ? "\"" : ", \"") + s + "\"";
  }
  const std::string target_yaml = "{type: redis_sentinel, master_name: \"" + target.masterName() +
                                  "\", sentinels: [" + sentinels + "]}";
  checkScenario("cluster-to-sentinel", clusterYaml(source), src, target_yaml, dst);
}

TEST_F(VerifyClusterTest, FollowsAskAndMovedWhileTheTargetsSlotsMove) {
  RedisServer source;
  RedisCluster target(clusterOptions(3));
  RedisServer& a = target.nodeForSlot(0);
  RedisServer& b = target.nodeForSlot(9000);
  RedisServer& c = target.nodeForSlot(16000);
  ASSERT_NE(&a, &b);
  ASSERT_NE(&a, &c);
  ClusterClient src({source.address()});
  ClusterClient dst = target.client();
  // 400 keys in a's slots 0-49, 8 per slot: the slots moved below.
  constexpr int kTagged = 400;
  constexpr int kSlotsMoved = 50;
  auto tagged = [](int i) {
    return "{" + std::string(cluster::slotTag(i % kSlotsMoved)) + "}:" + std::to_string(i);
  };
  const std::vector<RespCommand> data = dataset(kTagged, nowMs() + 3600 * 1000, tagged);
  ASSERT_NO_FATAL_FAILURE(write(src, data));
  ASSERT_NO_FATAL_FAILURE(write(dst, data));
  const std::string config = writeConfig("moving", serverYaml(source), clusterYaml(target));

  // 1. ASK: slot 7 half migrated from a to b by hand; 4 of its 8 keys already on b.
  constexpr int kSlot = 7;
  const std::string slot = std::to_string(kSlot);
  RespClient on_a = a.client();
  RespClient on_b = b.client();
  ASSERT_EQ(on_b.command({"CLUSTER", "SETSLOT", slot, "IMPORTING", target.nodeId(a)}).toString(),
            "OK");
  ASSERT_EQ(on_a.command({"CLUSTER", "SETSLOT", slot, "MIGRATING", target.nodeId(b)}).toString(),
            "OK");
  std::vector<std::string> in_slot;
  for (int i = kSlot; i < kTagged; i += kSlotsMoved) in_slot.push_back(tagged(i));
  ASSERT_EQ(in_slot.size(), 8u);
  RespCommand migrate = {"MIGRATE", "127.0.0.1", std::to_string(b.port()), "", "0", "5000", "KEYS"};
  migrate.insert(migrate.end(), in_slot.begin(), in_slot.begin() + 4);
  ASSERT_EQ(on_a.command(migrate).toString(), "OK");
  ASSERT_EQ(on_a.command({"DBSIZE"}).integer(), kTagged - 4);

  AgentCommandResult asked = verify(config, "ask");
  ASSERT_TRUE(asked.report.is_object()) << asked.output;
  EXPECT_EQ(asked.exit_code, 0) << asked.output;
  EXPECT_EQ(asked.report.value("checked", -1), kTagged) << asked.output;
  EXPECT_EQ(asked.report.value("missing", -1), 0) << asked.output;
  EXPECT_EQ(asked.report.value("value_mismatches", -1), 0) << asked.output;
  EXPECT_EQ(asked.report.value("ttl_mismatches", -1), 0) << asked.output;
  EXPECT_EQ(asked.report.value("extra", -1), 0) << asked.output;
  ASSERT_TRUE(asked.report.contains("redirections")) << asked.output;
  // TYPE, PEXPIRETIME and the value read of each key already on b: asked of a first.
  EXPECT_EQ(asked.report["redirections"].value("ask", -1), 4 * 3) << asked.output;
  EXPECT_EQ(asked.report["redirections"].value("moved", -1), 0) << asked.output;

  // Finish slot 7's migration: b owns it everywhere.
  migrate.resize(7);
  migrate.insert(migrate.end(), in_slot.begin() + 4, in_slot.end());
  ASSERT_EQ(on_a.command(migrate).toString(), "OK");
  for (RedisServer* node : {&b, &a, &c}) {
    ASSERT_EQ(
        node->client().command({"CLUSTER", "SETSLOT", slot, "NODE", target.nodeId(b)}).toString(),
        "OK");
  }
  target.waitHealthy(20s);

  // 2. MOVED: a's lowest 50 slots (all but slot 7 of the keys' slots) resharded to c while a
  // verify at 50 keys/s reads: batches of 100 at 0, 2, 4 and 6 s, then the extra count.
  std::vector<RedisServer*> masters = {&a, &b, &c};
  auto typeCalls = [&] {
    int64_t n = 0;
    for (RedisServer* m : masters) n += calls(*m, "type");
    return n;
  };
  const int64_t types_before = typeCalls();
  std::atomic<bool> finished{false};
  AgentCommandResult moved;
  std::thread slow([&] {
    moved = verify(config, "moved", "50");
    finished = true;
  });
  // Once its first batch is read, verify has its slot map: move the slots under it.
  const bool reading = waitUntil([&] { return typeCalls() > types_before; }, 30s, 20ms);
  ReshardResult reshard;
  std::string reshard_error;
  if (reading) {
    try {
      reshard = target.reshard(a, c, kSlotsMoved);
    } catch (const std::exception& e) {
      reshard_error = e.what();
    }
  }
  const bool finished_before_reshard = finished;
  slow.join();
  ASSERT_TRUE(reading) << "verify never read the target:\n" << moved.output;
  ASSERT_EQ(reshard_error, "");
  EXPECT_EQ(reshard.slots, kSlotsMoved);
  EXPECT_GT(reshard.keys, 0);
  ASSERT_FALSE(finished_before_reshard)
      << "verify ended before the reshard (" << reshard.elapsed.count()
      << " ms): nothing was read after the slots moved";
  ASSERT_TRUE(moved.report.is_object()) << moved.output;
  EXPECT_EQ(moved.exit_code, 0) << moved.output;
  EXPECT_EQ(moved.report.value("checked", -1), kTagged) << moved.output;
  EXPECT_EQ(moved.report.value("missing", -1), 0) << moved.output;
  EXPECT_EQ(moved.report.value("value_mismatches", -1), 0) << moved.output;
  EXPECT_EQ(moved.report.value("ttl_mismatches", -1), 0) << moved.output;
  EXPECT_EQ(moved.report.value("extra", -1), 0) << moved.output;
  ASSERT_TRUE(moved.report.contains("redirections")) << moved.output;
  EXPECT_GE(moved.report["redirections"].value("moved", -1), 1) << moved.output;
  std::cout << "[ verify   ] reshard of " << reshard.slots << " slots (" << reshard.keys
            << " keys) in " << reshard.elapsed.count() << " ms during verify; redirections "
            << moved.report["redirections"].dump() << std::endl;
  EXPECT_EQ(&target.nodeForSlot(0), &c);
}

}  // namespace
}  // namespace xdcr::test
