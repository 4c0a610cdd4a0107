// bandwidth_limit end to end (issue 17 point 3): a pipeline limited to 2 MB/s full-syncs ~20 MB
// of values and then streams ~10 MB of writes. Neither goes faster than the limit allows — the
// elapsed times are at least 0.9 × bytes / limit, and the 5-second rates /status shows while it
// runs stay under the limit (a correctness property of the limiter, not a speed target) — and
// every key arrives (the target compared with the source key by key). /status and /metrics show
// the limit and a non-zero throttled time. The measured rates are printed.
//
// The values are random (incompressible: the snapshot carries them at their size), so the
// bytes read from the source and written to the target are at least the values' bytes.
//
// Three placements: on loopback, and across a simulated WAN (tests/support/wan_proxy.h, 40 ms
// each way) with the agent reading the source across it (in the target's datacenter) or writing
// the target across it (in the source's). The limit must hold, and every key arrive, in each.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "replicator/admin_server.h"
#include "tests/support/harness.h"
#include "tests/support/wan_proxy.h"

namespace xdcr::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kLimit = 2'000'000;  // bandwidth_limit: 2MB
constexpr size_t kValueBytes = 10'000;
constexpr int kSnapshotKeys = 2000;  // 20 MB
constexpr int kStreamKeys = 1000;    // 10 MB
constexpr int kBatch = 100;          // SETs per pipelined round trip (1 MB)
// Every wait is bounded: at the limit the full sync takes ~10 s, the stream ~5 s.
constexpr auto kFullSyncTimeout = 120s;
constexpr auto kStreamTimeout = 90s;
constexpr auto kPoll = 50ms;

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

enum class Placement { Loopback, ReadsAcross, WritesAcross };

std::string placementName(Placement p) {
  switch (p) {
    case Placement::Loopback:
      return "Loopback";
    case Placement::ReadsAcross:
      return "ReadsAcrossAWan";
    case Placement::WritesAcross:
      return "WritesAcrossAWan";
  }
  return "?";
}

class BandwidthTest : public ::testing::TestWithParam<Placement> {
 protected:
  void SetUp() override {
    admin_ = "127.0.0.1:" + std::to_string(freePort());
    config_ = dir_.file("xdcr.yaml");
    std::string source_address = source_.address(), target_address = target_.address();
    if (GetParam() != Placement::Loopback) {
      // The WAN is between the agent and the side it reaches across it.
      RedisServer& far = GetParam() == Placement::ReadsAcross ? source_ : target_;
      proxy_ = WanProxy::start(far.port(), {.delay = 40ms, .name = "wan"});
      (GetParam() == Placement::ReadsAcross ? source_address : target_address) =
          "127.0.0.1:" + std::to_string(proxy_->port());
    }
    std::ostringstream y;
    y << "agent: {state_dir: \"" << dir_.file("state") << "\", admin_listen: \"" << admin_
      << "\", log_level: info}\n"
      << "clusters:\n"
      << "  east: {type: redis, address: \"" << source_address << "\"}\n"
      << "  west: {type: redis, address: \"" << target_address << "\"}\n"
      << "pipelines:\n"
      << "  - {name: east-to-west, source: east, target: west, bandwidth_limit: 2MB}\n";
    writeFileText(config_, y.str());
  }

  void TearDown() override {
    if (HasFailure() && agent_) {
      std::cerr << "---- agent " << agent_->describeState() << " (log tail)\n"
                << agent_->logTail(40) << "\n";
    }
    agent_.reset();
  }

  /** Writes `count` keys `prefix:<i>` of random values to the source, pipelined. */
  void writeKeys(const std::string& prefix, int count) {
    RespClient c = source_.client(30s);
    std::vector<RespCommand> batch;
    for (int i = 0; i < count; ++i) {
      batch.push_back({"SET", prefix + ":" + std::to_string(i), randomValue(rng_, kValueBytes)});
      if (static_cast<int>(batch.size()) == kBatch || i + 1 == count) {
        for (const RespValue& r : c.pipeline(batch)) {
          ASSERT_EQ(r, RespValue::simpleString("OK")) << r.toString();
        }
        batch.clear();
      }
    }
  }

  int64_t targetKeys() {
    RespClient c = target_.client(5s);
    return dataDbSize(c);
  }

  std::pair<int, std::string> get(const std::string& path) {
    auto r = replicator::adminGet(admin_, path, 5s);
    return r ? *r : std::pair<int, std::string>{-1, r.error().message};
  }

  /** The pipeline's /status object (null while the admin server does not answer). */
  nlohmann::json pipelineStatus() {
    auto [code, body] = get("/status");
    if (code != 200) return nullptr;
    auto doc = nlohmann::json::parse(body, nullptr, false);
    if (doc.is_discarded() || !doc.contains("pipelines") || doc["pipelines"].empty()) {
      return nullptr;
    }
    return doc["pipelines"][0];
  }

  /** The value of one sample line of /metrics, or -1. */
  static double metric(const std::string& text, const std::string& sample) {
    std::regex re("(^|\n)" +
                  std::regex_replace(sample, std::regex(R"([{}\[\]().*+?^$|\\])"), R"(\$&)") +
                  " ([-0-9.e+]+)");
    std::smatch m;
    return std::regex_search(text, m, re) ? std::stod(m[2]) : -1;
  }

  /**
   * Polls until the target holds `keys` keys (bounded by `timeout`), also watching the 5-second
   * rates /status shows. Returns when the first of the keys not yet there (`from`) appeared and
   * when the last did.
   */
  struct Transfer {
    bool done = false;
    Clock::time_point first{};
    Clock::time_point last{};
    double max_read_rate = 0;
    double max_write_rate = 0;
  };
  Transfer waitForKeys(int64_t from, int64_t keys, std::chrono::seconds timeout) {
    Transfer t;
    bool seen = false;
    auto next_status = Clock::now();
    t.done = waitUntil(
        [&] {
          const int64_t n = targetKeys();
          const auto now = Clock::now();
          if (!seen && n > from) {
            seen = true;
            t.first = now;
          }
          if (now >= next_status) {
            next_status = now + 500ms;
            const nlohmann::json p = pipelineStatus();
            if (p.is_object() && p.contains("bandwidth_bytes_per_second")) {
              t.max_read_rate =
                  std::max(t.max_read_rate, p["bandwidth_bytes_per_second"].value("read", 0.0));
              t.max_write_rate =
                  std::max(t.max_write_rate, p["bandwidth_bytes_per_second"].value("write", 0.0));
            }
          }
          if (n >= keys) {
            t.last = now;
            return true;
          }
          return !agent_->running();
        },
        timeout, kPoll);
    t.done = t.done && agent_->running();
    return t;
  }

  TempDir dir_{"xdcr-bandwidth"};
  // A diskless full sync at once (no 5 s delay), as the other tests.
  RedisServer source_{{"--repl-diskless-sync-delay", "0"}};
  RedisServer target_;
  std::unique_ptr<WanProxy> proxy_;  // (Placement::Loopback: none)
  std::string admin_, config_;
  std::unique_ptr<AgentProcess> agent_;
  std::mt19937_64 rng_{17};
};

TEST_P(BandwidthTest, FullSyncAndStreamStayUnderTheLimitAndEveryKeyArrives) {
  std::printf("placement: %s\n", placementName(GetParam()).c_str());
  // ---- the snapshot: 20 MB before the agent starts
  ASSERT_NO_FATAL_FAILURE(writeKeys("snap", kSnapshotKeys));
  const auto started = Clock::now();
  agent_ = std::make_unique<AgentProcess>(config_, dir_.file("agent.log"));
  const Transfer sync = waitForKeys(0, kSnapshotKeys, kFullSyncTimeout);
  ASSERT_TRUE(sync.done) << "the full sync did not complete within " << kFullSyncTimeout.count()
                         << " s: " << targetKeys() << " of " << kSnapshotKeys
                         << " keys on the target; " << agent_->describeState();
  // From the first key on the target to the last: every value but the first went through the
  // limiter in that time (read from the source, then written to the target).
  const double sync_s = seconds(sync.last - sync.first);
  const double sync_bytes = double(kSnapshotKeys - 1) * kValueBytes;
  const double sync_least = sync_bytes / double(kLimit);
  std::printf(
      "full sync: %d keys, %.1f MB of values in %.2f s (%.2f s since the agent started): "
      "%.3f MB/s, limit %.3f MB/s; largest 5 s rates in /status: read %.3f, write %.3f MB/s\n",
      kSnapshotKeys, sync_bytes / 1e6, sync_s, seconds(sync.last - started),
      sync_bytes / sync_s / 1e6, double(kLimit) / 1e6, sync.max_read_rate / 1e6,
      sync.max_write_rate / 1e6);
  EXPECT_GE(sync_s, 0.9 * sync_least) << "the full sync went faster than bandwidth_limit allows";
  EXPECT_GT(sync.max_read_rate, 0);
  EXPECT_LE(sync.max_read_rate, 1.05 * double(kLimit));
  EXPECT_LE(sync.max_write_rate, 1.05 * double(kLimit));

  // ---- the stream: 10 MB once the pipeline streams
  ASSERT_TRUE(waitUntil(
      [&] {
        const nlohmann::json p = pipelineStatus();
        return p.is_object() && p.value("state", "") == "streaming";
      },
      30s, 100ms))
      << "not streaming: " << pipelineStatus().dump();
  const auto writing = Clock::now();
  ASSERT_NO_FATAL_FAILURE(writeKeys("stream", kStreamKeys));
  const double write_s = seconds(Clock::now() - writing);
  const Transfer stream = waitForKeys(kSnapshotKeys, kSnapshotKeys + kStreamKeys, kStreamTimeout);
  ASSERT_TRUE(stream.done) << "the stream did not arrive within " << kStreamTimeout.count()
                           << " s: " << targetKeys() << " of " << kSnapshotKeys + kStreamKeys
                           << " keys on the target; " << agent_->describeState();
  const double stream_s = seconds(stream.last - writing);
  const double stream_bytes = double(kStreamKeys) * kValueBytes;
  const double stream_least = stream_bytes / double(kLimit);
  std::printf(
      "stream: %d keys, %.1f MB of values written to the source in %.2f s, all on the target "
      "after %.2f s: %.3f MB/s, limit %.3f MB/s; largest 5 s rates in /status: read %.3f, "
      "write %.3f MB/s\n",
      kStreamKeys, stream_bytes / 1e6, write_s, stream_s, stream_bytes / stream_s / 1e6,
      double(kLimit) / 1e6, stream.max_read_rate / 1e6, stream.max_write_rate / 1e6);
  EXPECT_GE(stream_s, 0.9 * stream_least) << "the stream went faster than bandwidth_limit allows";
  EXPECT_LE(stream.max_read_rate, 1.05 * double(kLimit));
  EXPECT_LE(stream.max_write_rate, 1.05 * double(kLimit));

  // ---- every key arrived, with its value
  RespClient src = source_.client(30s);
  RespClient dst = target_.client(30s);
  const KeySpaceSnapshot source = snapshotKeySpace(src);
  const KeySpaceSnapshot target = snapshotKeySpace(dst);
  EXPECT_EQ(source.keys.size(), size_t(kSnapshotKeys + kStreamKeys));
  const KeyCheckReport report = compareKeySpaces(source, target);
  EXPECT_TRUE(report.ok()) << report.summary();

  // ---- /status and /metrics: the limit, and the time spent waiting for it
  const nlohmann::json p = pipelineStatus();
  ASSERT_TRUE(p.is_object());
  EXPECT_EQ(p.value("bandwidth_limit", uint64_t{0}), kLimit) << p.dump(2);
  const double read_throttled = p["bandwidth_throttled_seconds"].value("read", 0.0);
  const double write_throttled = p["bandwidth_throttled_seconds"].value("write", 0.0);
  std::printf("throttled: read %.2f s, write %.2f s (/status)\n", read_throttled, write_throttled);
  EXPECT_GT(read_throttled + write_throttled, 0.0) << p.dump(2);
  // Reading is what holds the pipeline back here: both transfers waited most of their time.
  EXPECT_GT(read_throttled, 0.5 * (sync_least + stream_least)) << p.dump(2);
  EXPECT_TRUE(p.contains("bandwidth_bytes_per_second")) << p.dump(2);

  auto [code, text] = get("/metrics");
  ASSERT_EQ(code, 200);
  const std::string pl = "pipeline=\"east-to-west\"";
  EXPECT_EQ(metric(text, "xdcr_bandwidth_limit_bytes_per_second{" + pl + "}"), double(kLimit));
  const double m_read =
      metric(text, "xdcr_bandwidth_throttled_seconds_total{" + pl + ",direction=\"read\"}");
  const double m_write =
      metric(text, "xdcr_bandwidth_throttled_seconds_total{" + pl + ",direction=\"write\"}");
  std::printf("throttled: read %.2f s, write %.2f s (/metrics)\n", m_read, m_write);
  EXPECT_GE(m_read, read_throttled);  // a counter: not less than a moment ago
  EXPECT_GE(m_write, write_throttled);
  EXPECT_GT(m_read, 0.0);
  if (proxy_) {
    // Everything the agent exchanged with the far side went through the WAN.
    const WanProxy::Stats ws = proxy_->stats();
    std::printf("across the WAN: %.1f MB to the far side, %.1f MB from it\n", ws.bytes_up / 1e6,
                ws.bytes_down / 1e6);
    const double values = double(kSnapshotKeys + kStreamKeys) * kValueBytes;
    EXPECT_GE(double(GetParam() == Placement::ReadsAcross ? ws.bytes_down : ws.bytes_up), values);
  }
}

INSTANTIATE_TEST_SUITE_P(Placements, BandwidthTest,
                         ::testing::Values(Placement::Loopback, Placement::ReadsAcross,
                                           Placement::WritesAcross),
                         [](const ::testing::TestParamInfo<Placement>& info) {
                           return placementName(info.param);
                         });

}  // namespace
}  // namespace xdcr::test
