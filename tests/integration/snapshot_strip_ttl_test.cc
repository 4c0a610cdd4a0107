// filters.strip_ttl on the snapshot of a full sync (expiry-semantics.md §6, README "Full sync").
//
// A snapshot entry is a replicated create, so strip_ttl must drop its deadline exactly as it does
// for a streamed `SET ... PXAT`: the key is written with E = 0 and rule 4 applies to that, i.e.
// no deadline when the target's maxTTL M is 0, and now+M when M > 0 (never the source's E).
//
//   A. No maxTTL on the target: after the full sync every key (strings of every encoding, hashes,
//      lists, sets, sorted sets, streams; half of them with a deadline 1-2 h ahead on the source)
//      has the source's contents and PEXPIRETIME -1; a streamed `SET k v EX 1000` and
//      `HSET` + `EXPIRE` then also arrive without a deadline.
//   B. Target bucket max_ttl 10m: every snapshot key gets now+10m, `now` being the agent's write
//      (between its start and the end of the sync). The source deadlines are 3-8 minutes ahead,
//      below M, so keeping them (min(E, now+M) = E) and stripping them (now+M) differ by at least
//      2 minutes; keys without a source deadline get now+M either way and serve as a control.
//
// The source holds its keys before the agent starts, so they reach the target only through the
// snapshot (+FULLRESYNC, RESTORE ... ABSTTL). No key expires on the source while the test runs.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/harness.h"

namespace xdcr::test {
namespace {

using namespace std::chrono_literals;

constexpr int64_t kKeys = 2000;
constexpr int64_t kMinute = 60 * 1000;
// How far a target deadline may be from the model's: the clamp's `now` is bounded by the sync's
// window already; this absorbs the ms between the agent's clock read and ours.
constexpr int64_t kToleranceMs = 1000;
constexpr auto kSyncTimeout = 60s;
constexpr auto kStreamTimeout = 15s;
constexpr const char* kAppliedMarker = "snapshot applied:";
constexpr const char* kStripTtl = "filters: {strip_ttl: true}";

class SnapshotStripTtlTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure()) {
      std::cerr << "---- config " << config_path_ << "\n" << readFileText(config_path_);
      if (agent_) {
        std::cerr << "---- agent " << agent_->describeState() << " (log tail)\n"
                  << agent_->logTail(30) << "\n";
      }
    }
    agent_.reset();
  }

  /**
   * Writes the data set to the source, then starts the agent (strip_ttl, target `buckets`) and
   * waits until the snapshot is on the target: the agent logged "snapshot applied:" and the
   * target's DBSIZE is the data set's. Sets sync_from_ms_ / sync_to_ms_ around the sync.
   */
  void fullSync(const std::vector<BucketSpec>& buckets, int64_t min_deadline_ms,
                int64_t max_deadline_ms) {
    DatasetOptions options;
    options.keys = kKeys;
    options.mix = DatasetMix::EveryType;
    options.tag = "strip";
    options.deadline_fraction = 0.5;
    options.expired_fraction = 0;
    options.min_deadline_ms = min_deadline_ms;
    options.max_deadline_ms = max_deadline_ms;
    data_ = writeDataset(source_.port(), options);

    config_path_ = dir_.file("xdcr.yaml");
    writeFileText(config_path_, pipelineConfigYaml(dir_.file("state"), source_.port(),
                                                   target_.port(), buckets, kStripTtl));
    sync_from_ms_ = unixTimeMs();
    agent_ = std::make_unique<AgentProcess>(config_path_, dir_.file("agent.log"));
    LogWatcher applied(agent_->logPath(), kAppliedMarker);
    ASSERT_TRUE(
        waitUntil([&] { return applied.poll() > 0 || !agent_->running(); }, kSyncTimeout, 100ms) &&
        agent_->running())
        << "no \"" << kAppliedMarker << "\" within " << kSyncTimeout.count() << " s; agent "
        << agent_->describeState();
    RespClient dst = target_.client();
    int64_t size = -1;
    ASSERT_TRUE(waitUntil(
        [&] {
          size = dataDbSize(dst);
          return size == kKeys;
        },
        kSyncTimeout, 100ms))
        << "target DBSIZE " << size << ", expected " << kKeys;
    sync_to_ms_ = unixTimeMs();
    std::cout << "[ sync     ] " << applied.matches().front() << " ("
              << (sync_to_ms_ - sync_from_ms_) << " ms after the agent started)\n";
  }

  /**
   * Every data-set key on the target with the source's contents and the deadline of a stripped
   * create (E = 0) under maxTTL `m_ms`, written between the agent's start and the sync's end.
   */
  void expectSnapshotStripped(int64_t m_ms) {
    const std::vector<const DatasetKey*> keys = data_.live();
    RespClient src = source_.client(30s);
    RespClient dst = target_.client(30s);
    const std::vector<KeyState> source = readKeyStates(src, 0, keys);
    const std::vector<KeyState> target = readKeyStates(dst, 0, keys);
    const int64_t read_ms = unixTimeMs();
    std::vector<ExpectedKey> expected;
    int64_t with_deadline = 0;
    int64_t kept_source_deadline = 0;  // the defect's signature: the source's E on the target
    for (size_t i = 0; i < keys.size(); ++i) {
      // The source is as the data set wrote it (else the test, not the agent, is wrong).
      ASSERT_EQ(source[i].pexpiretime, keys[i]->deadline_ms != 0 ? keys[i]->deadline_ms : -1)
          << keys[i]->key << " on the source";
      if (keys[i]->deadline_ms != 0) {
        ++with_deadline;
        kept_source_deadline += target[i].pexpiretime == keys[i]->deadline_ms;
      }
      expected.push_back(
          replicatedKey(source[i], /*e=*/0, m_ms, sync_from_ms_, sync_to_ms_, kToleranceMs,
                        "source deadline " + describeDeadline(source[i].pexpiretime, read_ms) +
                            ", stripped; M=" + std::to_string(m_ms / 1000) + "s"));
    }
    // Not vacuous: enough keys had a deadline to strip.
    ASSERT_GE(with_deadline, kKeys / 4);
    const KeyCheckReport report = checkKeys(keys, expected, target, read_ms);
    std::cout << "[ snapshot ] " << report.checked << " keys, " << with_deadline
              << " with a source deadline, " << kept_source_deadline
              << " of them kept it on the target; " << report.deadlines
              << " unexpected deadlines\n";
    EXPECT_TRUE(report.ok()) << "after the full sync with strip_ttl: " << with_deadline
                             << " keys had a source deadline, " << kept_source_deadline
                             << " kept it on the target\n"
                             << report.summary();
  }

  /** PEXPIRETIME of `key` on the target once it exists there (bounded wait), or -2. */
  int64_t targetDeadlineOnceThere(const std::string& key) {
    RespClient dst = target_.client();
    int64_t deadline = -2;
    waitUntil(
        [&] {
          deadline = dst.command({"PEXPIRETIME", key}).integer();
          return deadline != -2;
        },
        kStreamTimeout, 20ms);
    return deadline;
  }

  TempDir dir_{"xdcr-strip-ttl"};
  RedisServer source_{{"--repl-diskless-sync-delay", "0"}};
  RedisServer target_;
  std::string config_path_;
  std::unique_ptr<AgentProcess> agent_;
  Dataset data_;
  int64_t sync_from_ms_ = 0;
  int64_t sync_to_ms_ = 0;
};

TEST_F(SnapshotStripTtlTest, WithoutMaxTtlSnapshotAndStreamKeysHaveNoDeadline) {
  ASSERT_NO_FATAL_FAILURE(fullSync({}, 60 * kMinute, 120 * kMinute));
  EXPECT_NO_FATAL_FAILURE(expectSnapshotStripped(/*m_ms=*/0));

  // The stream, for comparison: the same filter strips a streamed deadline (SET ... PXAT E) and
  // turns a PEXPIREAT into nothing (M = 0).
  RespClient src = source_.client();
  ASSERT_EQ(src.command({"SET", "strip:stream:set", "v", "EX", "1000"}),
            RespValue::simpleString("OK"));
  ASSERT_FALSE(src.command({"HSET", "strip:stream:hash", "f", "v"}).isError());
  ASSERT_EQ(src.command({"EXPIRE", "strip:stream:hash", "1000"}), RespValue::integer(1));
  EXPECT_EQ(targetDeadlineOnceThere("strip:stream:set"), -1);
  // The hash's EXPIRE follows its HSET on the stream: wait for the key, then for everything
  // the source has sent to be applied (a marker written after it).
  ASSERT_EQ(src.command({"SET", "strip:stream:after", "v"}), RespValue::simpleString("OK"));
  ASSERT_EQ(targetDeadlineOnceThere("strip:stream:after"), -1);
  EXPECT_EQ(target_.client().command({"PEXPIRETIME", "strip:stream:hash"}), RespValue::integer(-1));
  EXPECT_TRUE(agent_->running()) << agent_->describeState();
}

TEST_F(SnapshotStripTtlTest, WithMaxTtlSnapshotKeysGetNowPlusMaxTtl) {
  constexpr int64_t kMaxTtlMs = 10 * kMinute;
  ASSERT_NO_FATAL_FAILURE(fullSync({{0, kMaxTtlMs / 1000, {}}}, 3 * kMinute, 8 * kMinute));
  EXPECT_NO_FATAL_FAILURE(expectSnapshotStripped(kMaxTtlMs));

  // The stream: a stripped SET ... PXAT E gets now+M too, not min(E, now+M) = E.
  RespClient src = source_.client();
  const int64_t before = unixTimeMs();
  ASSERT_EQ(src.command({"SET", "strip:stream:set", "v", "EX", "300"}),
            RespValue::simpleString("OK"));
  const int64_t deadline = targetDeadlineOnceThere("strip:stream:set");
  const int64_t after = unixTimeMs();
  EXPECT_GE(deadline, before + kMaxTtlMs - kToleranceMs) << describeDeadline(deadline, after);
  EXPECT_LE(deadline, after + kMaxTtlMs + kToleranceMs) << describeDeadline(deadline, after);
  EXPECT_TRUE(agent_->running()) << agent_->describeState();
}

}  // namespace
}  // namespace xdcr::test
