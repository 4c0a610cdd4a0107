// Redis Sentinel (interface.md §6.1, type: redis_sentinel), on real servers: a master, its
// replica and three Sentinels (tests/support/sentinel_set.h), a standalone server on the other
// side, the agent between them, and a bounded mixed write load (SET with EX, INCR, HSET with
// EXPIRE, DEL) running through a failover.
//
//   1. A Sentinel-managed SOURCE fails over (SENTINEL FAILOVER) under load. The agent must follow
//      the promoted master WITHOUT a new full sync (xdcr_full_syncs_total unchanged,
//      xdcr_source_failovers_total{shard=<new master>} 1, "partial resync accepted" logged after
//      the switch), must not replicate the Sentinels' `PUBLISH __sentinel__:hello` entries that
//      the master's stream carries (the target's INFO commandstats shows no PUBLISH; the
//      source's shows the hellos were there), and the target must equal the source key by key
//      (value and exact deadline), by the harness's own comparison and by `xdcr-agent verify`.
//   2. A Sentinel-managed TARGET fails over under load: nothing is lost (the same two
//      comparisons), and no full sync follows (no target-loss resync: the checkpoints the agent
//      counts on are on the replica that gets promoted).
//
// Why the source failover is "graceful": Sentinel's manual failover promotes the replica without
// pausing the old master (unlike CLUSTER FAILOVER or FAILOVER), which keeps taking writes for
// seconds (cluster-notes.md §3.6) that Redis itself then throws away. A write the old master
// takes after the promotion reaches the agent but never the new master: the agent rightly does a
// full sync then (its target holds writes the source lost). The test makes the old master refuse
// such writes, as an operator would: min-replicas-to-write 2 (the replica and the agent, which
// counts as one, §3.8) stops writes as soon as the replica leaves, and a short CLIENT PAUSE WRITE
// lets the replica catch up before SENTINEL FAILOVER. The load runs before and after; the
// Sentinels' hellos keep flowing into the old master's stream past the promotion all the same.
//
// Every process is stopped by PID (harness), every wait is bounded, ports are free ones found at
// run time.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "replicator/admin_server.h"
#include "tests/support/harness.h"
#include "tests/support/sentinel_set.h"

namespace xdcr::test {
namespace {

using namespace std::chrono_literals;

constexpr auto kStreamingTimeout = 60s;
constexpr auto kCaughtUpTimeout = 60s;
constexpr auto kFailoverTimeout = 90s;
// Batches of the load before and after each failover.
constexpr int64_t kBatchesBefore = 150;
constexpr int64_t kBatchesAfter = 150;
constexpr auto kLoadProgressTimeout = 60s;

std::vector<std::string> dataNodeArgs() {
  // A diskless full sync at once (the agent's first, and a demoted master's resync).
  return {"--repl-diskless-sync-delay", "0"};
}

/** The value of one sample line of a /metrics text, or -1 when absent. */
double metric(const std::string& text, const std::string& sample) {
  std::regex re("(^|\n)" +
                std::regex_replace(sample, std::regex(R"([{}\[\]().*+?^$|\\])"), R"(\$&)") +
                " ([-0-9.e+]+)");
  std::smatch m;
  return std::regex_search(text, m, re) ? std::stod(m[2]) : -1;
}

/** The sum of every sample of `family` whose labels contain `labels` (0 when none). */
double metricSum(const std::string& text, const std::string& family, const std::string& labels) {
  double sum = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(family + "{", 0) != 0 || line.find(labels) == std::string::npos) continue;
    sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

/** `calls` of one command in INFO commandstats (0 when the command never ran). */
int64_t commandCalls(RespClient& client, const std::string& command) {
  const auto stats = client.info("commandstats");
  const auto it = stats.find("cmdstat_" + command);
  if (it == stats.end()) return 0;
  const size_t at = it->second.find("calls=");
  return at == std::string::npos ? 0 : std::stoll(it->second.substr(at + 6));
}

/**
 * A bounded mixed write load on its own thread: batches of SET with EX, INCR, HSET with EXPIRE
 * and DEL over a small key space (so keys are overwritten, counted up, expire-dated and deleted
 * again), to the node `master_port()` names. On an error reply (NOREPLICAS, READONLY) or a lost
 * connection it asks `master_port()` again after a short pause, as a Sentinel-aware client does.
 * What it meant to write does not matter: the tests compare the target with the source.
 */
class MasterLoad {
 public:
  MasterLoad(std::function<uint16_t()> master_port, uint64_t seed, int64_t max_batches)
      : master_port_(std::move(master_port)), rng_(seed), max_batches_(max_batches) {
    thread_ = std::thread([this] { run(); });
  }
  ~MasterLoad() { stop(); }
  MasterLoad(const MasterLoad&) = delete;
  MasterLoad& operator=(const MasterLoad&) = delete;

  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int64_t batches() const { return batches_; }
  int64_t refused() const { return refused_; }
  /** Waits (bounded) until `n` batches more than now were written. */
  bool waitForMore(int64_t n, std::chrono::milliseconds timeout) const {
    const int64_t goal = batches_ + n;
    return waitUntil([&] { return batches_ >= goal || done_; }, timeout, 20ms) && batches_ >= goal;
  }

 private:
  std::vector<RespCommand> batch() {
    std::vector<RespCommand> w;
    for (int i = 0; i < 40; ++i) {
      const uint64_t n = rng_();
      const std::string ttl = std::to_string(600 + n % 3000);  // 10 min to 1 h: none ends here
      switch (n % 6) {
        case 0:
        case 1:
          w.push_back({"SET", "s:" + std::to_string(n % 800), "v" + std::to_string(n), "EX", ttl});
          break;
        case 2:
          w.push_back({"INCR", "n:" + std::to_string(n % 100)});
          break;
        case 3:
          w.push_back({"HSET", "h:" + std::to_string(n % 200), "f" + std::to_string(n % 7),
                       std::to_string(n)});
          w.push_back({"EXPIRE", "h:" + std::to_string(n % 200), ttl});
          break;
        case 4:
          w.push_back({"DEL", "s:" + std::to_string(n % 800)});
          break;
        default:
          w.push_back({"SET", "s:" + std::to_string(n % 800), "p" + std::to_string(n)});
          break;
      }
    }
    return w;
  }

  void run() {
    std::optional<RespClient> c;
    const auto until = std::chrono::steady_clock::now() + 10min;  // a bound, never reached
    while (!stop_ && batches_ < max_batches_ && std::chrono::steady_clock::now() < until) {
      try {
        if (!c) c.emplace(master_port_(), 5s);
        const auto w = batch();
        const auto replies = c->pipeline(w);
        bool refused = false;
        for (const auto& r : replies) refused = refused || r.isError();
        if (refused) {
          ++refused_;
          c.reset();  // NOREPLICAS or READONLY: ask where the master is now
          std::this_thread::sleep_for(100ms);
          continue;
        }
        ++batches_;
      } catch (const std::exception&) {
        ++refused_;
        c.reset();
        std::this_thread::sleep_for(100ms);
        continue;
      }
      std::this_thread::sleep_for(5ms);
    }
    done_ = true;
  }

  std::function<uint16_t()> master_port_;
  std::mt19937_64 rng_;
  int64_t max_batches_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> done_{false};
  std::atomic<int64_t> batches_{0};
  std::atomic<int64_t> refused_{0};
  std::thread thread_;
};

/** The master's port as a Sentinel names it now (0 when none answers). */
uint16_t askSentinels(const std::vector<uint16_t>& sentinel_ports, const std::string& name) {
  for (uint16_t port : sentinel_ports) {
    try {
      RespValue r = RespClient(port, 2s).command({"SENTINEL", "GET-MASTER-ADDR-BY-NAME", name});
      if (r.isArray() && r.array().size() == 2) {
        return static_cast<uint16_t>(std::stoi(r.array()[1].str()));
      }
    } catch (const std::exception&) {
    }
  }
  return 0;
}

class SentinelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    admin_ = "127.0.0.1:" + std::to_string(freePort());
    config_ = dir_.file("xdcr.yaml");
  }

  void TearDown() override {
    if (HasFailure()) {
      std::cerr << "---- config " << config_ << "\n" << readFileText(config_);
      if (agent_) {
        std::cerr << "---- agent " << agent_->describeState() << " (log tail)\n"
                  << agent_->logTail(80) << "\n";
      }
    }
    agent_.reset();
  }

  /** `first`: an address listed before the Sentinels (a decoy, see below). */
  static std::string sentinelClusterYaml(const std::string& name, SentinelSet& set,
                                         const std::string& first = "") {
    std::ostringstream y;
    y << "  " << name << ":\n    type: redis_sentinel\n    master_name: " << set.masterName()
      << "\n    sentinels: [";
    auto sentinels = set.sentinels();
    if (!first.empty()) sentinels.insert(sentinels.begin(), first);
    for (size_t i = 0; i < sentinels.size(); ++i) {
      y << (i ? ", " : "") << "\"" << sentinels[i] << "\"";
    }
    y << "]\n";
    return y.str();
  }

  /** `pipeline_options`: more of the pipeline's flow mapping, e.g. ", full_sync: {...}". */
  void writeConfig(const std::string& clusters,
                   const std::string& pipeline_options = ", checkpoint_interval: 1s") {
    writeFileText(config_, "agent:\n  state_dir: \"" + dir_.file("state") +
                               "\"\n  log_level: info\n  admin_listen: \"" + admin_ +
                               "\"\nclusters:\n" + clusters +
                               "pipelines:\n  - {name: p, source: src, target: dst" +
                               pipeline_options + "}\n");
  }

  void startAgent() { agent_ = std::make_unique<AgentProcess>(config_, dir_.file("agent.log")); }

  std::string metrics() {
    auto reply = replicator::adminGet(admin_, "/metrics", 2s);
    return reply && reply->first == 200 ? reply->second : "";
  }

  /** The pipeline's /status object ({} while the admin server does not answer). */
  nlohmann::json pipelineStatus() {
    auto reply = replicator::adminGet(admin_, "/status", 2s);
    if (!reply || reply->first != 200) return nlohmann::json::object();
    auto doc = nlohmann::json::parse(reply->second, nullptr, false);
    if (doc.is_discarded() || !doc.contains("pipelines") || !doc["pipelines"].is_array() ||
        doc["pipelines"].empty() || !doc["pipelines"][0].is_object()) {
      return nlohmann::json::object();
    }
    return doc["pipelines"][0];
  }

  void waitStreaming() {
    nlohmann::json last;
    const bool ok = waitUntil(
        [&] {
          last = pipelineStatus();
          return !agent_->running() || last.value("state", "") == "streaming";
        },
        kStreamingTimeout, 200ms);
    ASSERT_TRUE(agent_->running()) << agent_->describeState();
    ASSERT_TRUE(ok) << "not streaming within " << kStreamingTimeout.count() << " s: " << last;
  }

  /** Until the agent has applied the source's stream up to the master's offset now. */
  void waitApplied(RedisServer& source_master) {
    const int64_t offset =
        std::stoll(source_master.client().info("replication")["master_repl_offset"]);
    nlohmann::json last;
    const bool ok = waitUntil(
        [&] {
          last = pipelineStatus();
          return last.value("state", "") == "streaming" &&
                 last.value("applied_offset", int64_t{0}) >= offset;
        },
        kCaughtUpTimeout, 100ms);
    ASSERT_TRUE(ok) << "the agent did not apply the source up to offset " << offset << " within "
                    << kCaughtUpTimeout.count() << " s: " << last;
  }

  /** The harness's comparison (independent of the agent) and `xdcr-agent verify`. */
  void expectTargetEqualsSource(RedisServer& source, RedisServer& target, const std::string& what) {
    RespClient src = source.client(30s);
    RespClient dst = target.client(30s);
    const KeySpaceSnapshot s = snapshotKeySpace(src);
    const KeySpaceSnapshot t = snapshotKeySpace(dst);
    const KeyCheckReport report = compareKeySpaces(s, t);
    std::cout << "[ compare  ] " << what << ": source " << s.keys.size() << " keys, target "
              << t.keys.size() << " keys: " << report.summary() << std::endl;
    EXPECT_TRUE(report.ok()) << what << ": " << report.summary();
    EXPECT_GT(s.keys.size(), 500u) << what << ": the load wrote too little to prove anything";

    AgentCommandResult v = runAgentCommand(
        {"verify", "-c", config_, "-p", "p", "-o", "json", "--rate", "0"}, dir_.file("verify.out"));
    ASSERT_TRUE(v.report.is_object()) << what << ": verify printed no report:\n" << v.output;
    std::cout << "[ verify   ] " << what << ": " << v.report["checked"] << " keys checked, "
              << v.report["missing"] << " missing, " << v.report["value_mismatches"]
              << " value mismatches, " << v.report["ttl_mismatches"] << " ttl mismatches, "
              << v.report["extra"] << " extra" << std::endl;
    EXPECT_EQ(v.exit_code, 0) << what << ":\n" << v.output;
    EXPECT_GT(v.report.value("checked", 0), 500) << what;
    EXPECT_EQ(v.report.value("missing", -1), 0) << what << ":\n" << v.output;
    EXPECT_EQ(v.report.value("value_mismatches", -1), 0) << what << ":\n" << v.output;
    EXPECT_EQ(v.report.value("ttl_mismatches", -1), 0) << what << ":\n" << v.output;
    EXPECT_EQ(v.report.value("extra", -1), 0) << what << ":\n" << v.output;
  }

  /** Until the agent streams again after a failover it had to find out about by itself (or
   *  did a full sync instead: a failure). */
  void waitFollowed(LogWatcher& resumed, size_t before) {
    LogWatcher full(agent_->logPath(), "source refused partial resync");
    const bool ok = waitUntil(
        [&] {
          resumed.poll();
          full.poll();
          return !agent_->running() || !full.matches().empty() ||
                 (resumed.matches().size() > before &&
                  pipelineStatus().value("state", "") == "streaming");
        },
        kFailoverTimeout, 200ms);
    ASSERT_TRUE(agent_->running()) << agent_->describeState();
    ASSERT_TRUE(full.matches().empty())
        << "a full sync instead of a partial resync: " << full.matches().front();
    ASSERT_TRUE(ok) << "the agent did not stream from the new master within "
                    << kFailoverTimeout.count() << " s";
  }

  TempDir dir_{"xdcr-sentinel"};
  std::string admin_, config_;
  std::unique_ptr<AgentProcess> agent_;
};

TEST_F(SentinelTest, SourceFailoverUnderLoadContinuesWithoutAFullSync) {
  SentinelSetOptions options;
  options.extra_args = dataNodeArgs();
  SentinelSet set(options);
  RedisServer target(dataNodeArgs());
  writeConfig(sentinelClusterYaml("src", set) + "  dst: {type: redis, address: \"" +
              target.address() + "\"}\n");
  startAgent();
  ASSERT_NO_FATAL_FAILURE(waitStreaming());

  std::vector<uint16_t> sentinel_ports;
  for (const auto& s : set.sentinelServers()) sentinel_ports.push_back(s->port());
  const std::string name = set.masterName();
  MasterLoad load([&] { return askSentinels(sentinel_ports, name); }, 15, 100'000);
  ASSERT_TRUE(load.waitForMore(kBatchesBefore, kLoadProgressTimeout)) << load.batches();

  RedisServer& old_master = set.master();
  RedisServer& promoted = set.replica();
  {
    // The old master's stream carries the Sentinels' hellos: the agent reads them.
    RespClient m = old_master.client();
    EXPECT_GT(commandCalls(m, "publish"), 0) << "no Sentinel hello reached the source";
  }
  const std::string before = metrics();
  const double full_syncs = metric(before, "xdcr_full_syncs_total{pipeline=\"p\"}");
  EXPECT_EQ(full_syncs, 1) << before;
  EXPECT_EQ(metricSum(before, "xdcr_source_failovers_total", "pipeline=\"p\""), 0) << before;
  LogWatcher partial(agent_->logPath(), "partial resync accepted");
  LogWatcher followed(agent_->logPath(), "followed a failover without a full sync");
  partial.poll();
  followed.poll();
  const size_t partial_before = partial.matches().size();

  // The graceful failover (see the top): the old master refuses writes once its replica leaves,
  // and the replica has everything before SENTINEL FAILOVER promotes it.
  {
    RespClient m = old_master.client();
    const auto replicas = replicasOf(m.info("replication"));
    ASSERT_EQ(replicas.size(), 2u) << "the replica and the agent should be attached";
    ASSERT_EQ(m.command({"CONFIG", "SET", "min-replicas-to-write", "2"}).toString(), "OK");
    ASSERT_EQ(m.command({"CLIENT", "PAUSE", "5000", "WRITE"}).toString(), "OK");
  }
  ASSERT_TRUE(waitReplicaCaughtUp(old_master, promoted, 5s));
  const auto failover = set.failover(kFailoverTimeout);
  ASSERT_EQ(failover.new_master, &promoted);
  std::cout << "[ failover ] source: " << failover.old_master->address() << " -> "
            << failover.new_master->address() << ": switched after "
            << failover.switched_after.count() << " ms, settled after "
            << failover.settled_after.count() << " ms; load refused " << load.refused()
            << " batch(es)" << std::endl;
  old_master.client().command({"CONFIG", "SET", "min-replicas-to-write", "0"});

  ASSERT_TRUE(load.waitForMore(kBatchesAfter, kLoadProgressTimeout))
      << "the load did not resume on the new master: " << load.batches();
  load.stop();
  ASSERT_NO_FATAL_FAILURE(waitApplied(promoted));

  // Followed without a full sync: a partial resync on the promoted master, counted as a
  // failover of the shard it leads to.
  const std::string after = metrics();
  EXPECT_EQ(metric(after, "xdcr_full_syncs_total{pipeline=\"p\"}"), full_syncs) << after;
  EXPECT_EQ(metric(after, "xdcr_source_failovers_total{pipeline=\"p\",shard=\"" +
                              promoted.address() + "\"}"),
            1)
      << after;
  EXPECT_EQ(metricSum(after, "xdcr_source_failovers_total", "pipeline=\"p\""), 1) << after;
  EXPECT_EQ(metric(after, "xdcr_target_loss_resyncs_total{pipeline=\"p\"}"), 0) << after;
  partial.poll();
  followed.poll();
  EXPECT_GT(partial.matches().size(), partial_before)
      << "no partial resync logged after the switch";
  EXPECT_EQ(followed.matches().size(), 1u);

  // Sentinel's hellos are framing: never published on (or written to) the target.
  RespClient dst = target.client();
  EXPECT_EQ(commandCalls(dst, "publish"), 0) << "a Sentinel hello was replicated";
  EXPECT_EQ(metric(after, "xdcr_unknown_commands_total{pipeline=\"p\"}"), 0) << after;

  expectTargetEqualsSource(promoted, target, "after the source's failover");
}

TEST_F(SentinelTest, TargetFailoverUnderLoadLosesNothing) {
  RedisServer source(dataNodeArgs());
  SentinelSetOptions options;
  options.extra_args = dataNodeArgs();
  SentinelSet set(options);
  writeConfig("  src: {type: redis, address: \"" + source.address() + "\"}\n" +
              sentinelClusterYaml("dst", set));
  startAgent();
  ASSERT_NO_FATAL_FAILURE(waitStreaming());

  const uint16_t source_port = source.port();
  MasterLoad load([source_port] { return source_port; }, 16, 100'000);
  ASSERT_TRUE(load.waitForMore(kBatchesBefore, kLoadProgressTimeout)) << load.batches();
  const std::string before = metrics();
  EXPECT_EQ(metric(before, "xdcr_full_syncs_total{pipeline=\"p\"}"), 1) << before;
  LogWatcher moved(agent_->logPath(), "the Sentinels moved the master away");
  moved.poll();

  // A plain SENTINEL FAILOVER while the agent writes: the old master keeps taking its writes for
  // a second and loses them when it rejoins as a replica.
  RedisServer& promoted = set.replica();
  const auto failover = set.failover(kFailoverTimeout);
  ASSERT_EQ(failover.new_master, &promoted);
  std::cout << "[ failover ] target: " << failover.old_master->address() << " -> "
            << failover.new_master->address() << ": switched after "
            << failover.switched_after.count() << " ms, settled after "
            << failover.settled_after.count() << " ms" << std::endl;

  ASSERT_TRUE(load.waitForMore(kBatchesAfter, kLoadProgressTimeout)) << load.batches();
  load.stop();
  EXPECT_EQ(load.refused(), 0) << "the source refused writes";
  ASSERT_NO_FATAL_FAILURE(waitApplied(source));

  moved.poll();
  EXPECT_GE(moved.matches().size(), 1u) << "the agent did not follow the target's switch";
  const std::string after = metrics();
  // The checkpoints the agent counted on were on the promoted replica: no "target lost data".
  EXPECT_EQ(metric(after, "xdcr_target_loss_resyncs_total{pipeline=\"p\"}"), 0) << after;
  EXPECT_EQ(metric(after, "xdcr_full_syncs_total{pipeline=\"p\"}"), 1) << after;

  expectTargetEqualsSource(source, promoted, "after the target's failover");
}

// The next two make the agent miss the +switch-master announcement, so that it stays on the old
// master through the whole split-brain window (until Sentinel demotes that node, which then drops
// its replicas for a full sync of its own): the first "Sentinel" in the agent's list is a plain
// redis-server, a decoy that accepts SUBSCRIBE +switch-master and answers pings but announces
// nothing (discovery skips it: it does not know SENTINEL). What the old master streams meanwhile
// decides what a resume on the promoted master may do.

// Only the Sentinels' hellos came after the fork: the checkpoints past it still resume there.
TEST_F(SentinelTest, SourceFailoverSeenLateResumesAtTheForkWhenOnlyHellosFollowedIt) {
  SentinelSetOptions options;
  options.extra_args = dataNodeArgs();
  SentinelSet set(options);
  RedisServer target(dataNodeArgs());
  RedisServer decoy;
  writeConfig(sentinelClusterYaml("src", set, decoy.address()) +
              "  dst: {type: redis, address: \"" + target.address() + "\"}\n");
  startAgent();
  ASSERT_NO_FATAL_FAILURE(waitStreaming());

  RedisServer& old_master = set.master();
  RedisServer& promoted = set.replica();
  {
    RespClient m = old_master.client();
    std::vector<RespCommand> w;
    for (int i = 0; i < 600; ++i) {
      w.push_back({"SET", "k:" + std::to_string(i), "v" + std::to_string(i), "EX",
                   std::to_string(1000 + i)});
    }
    for (int i = 0; i < 50; ++i) w.push_back({"INCR", "n:" + std::to_string(i % 10)});
    for (const auto& r : m.pipeline(w)) ASSERT_FALSE(r.isError()) << r.toString();
  }
  ASSERT_NO_FATAL_FAILURE(waitApplied(old_master));
  std::this_thread::sleep_for(3s);  // checkpoints of hellos only, after the last data
  LogWatcher resumed(agent_->logPath(), "followed a failover without a full sync");
  LogWatcher at_fork(agent_->logPath(), "the old master sent only framing");
  resumed.poll();
  const size_t resumed_before = resumed.matches().size();

  const auto failover = set.failover(kFailoverTimeout);
  ASSERT_EQ(failover.new_master, &promoted);
  ASSERT_NO_FATAL_FAILURE(waitFollowed(resumed, resumed_before));
  at_fork.poll();
  EXPECT_EQ(at_fork.matches().size(), 1u)
      << "the scenario did not happen: no checkpoint past the fork to resume from";

  const std::string after = metrics();
  EXPECT_EQ(metric(after, "xdcr_full_syncs_total{pipeline=\"p\"}"), 1) << after;
  EXPECT_EQ(metric(after, "xdcr_source_failovers_total{pipeline=\"p\",shard=\"" +
                              promoted.address() + "\"}"),
            1)
      << after;
  {
    RespClient m = promoted.client();
    std::vector<RespCommand> w;
    for (int i = 0; i < 100; ++i) w.push_back({"SET", "k:" + std::to_string(i), "after"});
    for (int i = 0; i < 50; ++i) w.push_back({"INCR", "n:" + std::to_string(i % 10)});
    for (const auto& r : m.pipeline(w)) ASSERT_FALSE(r.isError()) << r.toString();
  }
  ASSERT_NO_FATAL_FAILURE(waitApplied(promoted));
  RespClient dst = target.client();
  EXPECT_EQ(commandCalls(dst, "publish"), 0) << "a Sentinel hello was replicated";
  expectTargetEqualsSource(promoted, target, "after a failover seen late");
}

// The old master took writes after the fork, and the agent applied them: the source lost them,
// so only a full sync makes the target whole again (full_sync.delete_stale_keys takes away what
// the old master created). With no checkpoint since the agent started (checkpoint_interval 1h)
// the checkpoint lies before the fork: a partial resync would be accepted, and the target's
// replay stamp (the INCRs) would have skipped that much of the new history.
TEST_F(SentinelTest, WritesTheOldMasterTookAfterTheForkBringAFullSync) {
  SentinelSetOptions options;
  options.extra_args = dataNodeArgs();
  SentinelSet set(options);
  RedisServer target(dataNodeArgs());
  RedisServer decoy;
  writeConfig(sentinelClusterYaml("src", set, decoy.address()) +
                  "  dst: {type: redis, address: \"" + target.address() + "\"}\n",
              ", checkpoint_interval: 1h, full_sync: {delete_stale_keys: true}");
  startAgent();
  ASSERT_NO_FATAL_FAILURE(waitStreaming());

  RedisServer& old_master = set.master();
  RedisServer& promoted = set.replica();
  auto write = [](RedisServer& node, const std::string& value) {
    RespClient m = node.client();
    std::vector<RespCommand> w;
    for (int i = 0; i < 600; ++i) {
      w.push_back({"SET", "k:" + std::to_string(i), value, "EX", std::to_string(1000 + i)});
    }
    for (int i = 0; i < 100; ++i) w.push_back({"INCR", "n:" + std::to_string(i % 10)});
    for (int i = 0; i < 100; ++i) w.push_back({"DEL", "k:" + std::to_string(i * 3)});
    for (const auto& r : m.pipeline(w)) {
      if (r.isError()) return r.toString();
    }
    return std::string();
  };
  ASSERT_EQ(write(old_master, "before"), "");
  ASSERT_NO_FATAL_FAILURE(waitApplied(old_master));
  LogWatcher lost(agent_->logPath(), "the targets hold writes of the old master");
  const double full_syncs = metric(metrics(), "xdcr_full_syncs_total{pipeline=\"p\"}");
  EXPECT_EQ(full_syncs, 1);

  // The failover in the background; the old master takes writes while it is still a master.
  std::exception_ptr failed;
  std::thread failing_over([&] {
    try {
      set.failover(kFailoverTimeout);
    } catch (...) {
      failed = std::current_exception();
    }
  });
  const bool promoted_now = waitUntil(
      [&] {
        try {
          return promoted.client(2s).info("replication")["role"] == "master";
        } catch (const std::exception&) {
          return false;
        }
      },
      30s, 20ms);
  std::string old_writes = "not written";
  if (promoted_now) {
    old_writes = write(old_master, "lost");
    // The agent has them before the old master is demoted (seconds later).
    if (old_writes.empty()) waitApplied(old_master);
  }
  failing_over.join();
  if (failed) std::rethrow_exception(failed);
  ASSERT_TRUE(promoted_now) << "the replica was not promoted";
  ASSERT_EQ(old_writes, "") << "the old master refused the writes after the promotion";

  const bool resynced = waitUntil(
      [&] {
        lost.poll();
        return !agent_->running() ||
               (!lost.matches().empty() &&
                metric(metrics(), "xdcr_full_syncs_total{pipeline=\"p\"}") == full_syncs + 1 &&
                pipelineStatus().value("state", "") == "streaming");
      },
      kFailoverTimeout, 200ms);
  ASSERT_TRUE(agent_->running()) << agent_->describeState();
  ASSERT_TRUE(resynced) << "no full sync after the old master's lost writes: " << metrics();
  ASSERT_EQ(write(promoted, "after"), "");
  ASSERT_NO_FATAL_FAILURE(waitApplied(promoted));
  expectTargetEqualsSource(promoted, target, "after the old master's lost writes");
}

}  // namespace
}  // namespace xdcr::test
