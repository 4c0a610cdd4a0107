// The collection expiry policies of expiry-semantics.md §8 end to end: a real source and target
// redis-server and the agent between them, one collection per policy (the example of
// interface.md §6.3) plus one combining max_lifetime with a ttl field. Each vector writes on the
// source and reads the target's value and PEXPIRETIME (within kToleranceMs of the deadline the
// spec gives from the test's clock at the write). max_lifetime's first-seen second is shown to
// survive an agent restart (SIGTERM) and a crash (SIGKILL): a later write keeps the first
// write's cap instead of starting anew.

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/harness.h"

namespace xdcr::test {
namespace {

using namespace std::chrono_literals;

constexpr int64_t kS = 1000;
constexpr int64_t kToleranceMs = 1000;
constexpr int64_t kLifetimeMs = 90LL * 86400 * kS;  // tok:* max_lifetime 90d

class Policies : public ::testing::Test {
 protected:
  void SetUp() override {
    source_ =
        std::make_unique<RedisServer>(std::vector<std::string>{"--repl-diskless-sync-delay", "0"});
    target_ = std::make_unique<RedisServer>();
    config_ = dir_.file("xdcr.yaml");
    writeFileText(config_, "agent: {state_dir: \"" + dir_.file("state") +
                               "\"}\n"
                               "clusters:\n"
                               "  src: {type: redis, address: \"" +
                               source_->address() +
                               "\"}\n"
                               "  dst:\n"
                               "    type: redis\n"
                               "    address: \"" +
                               target_->address() +
                               "\"\n"
                               "    buckets:\n"
                               "      - db: 0\n"
                               "        max_ttl: 0\n"
                               "        collections:\n"
                               "          - {name: carts, keys: \"cart:*\", default_ttl: 1h}\n"
                               "          - {name: docs, keys: \"doc:*\", ttl_field: ttl, "
                               "default_ttl: -1}\n"
                               "          - {name: sess, keys: \"sess:*\", expire_at_field: "
                               "expireAt, expire_after: 0s}\n"
                               "          - {name: tokens, keys: \"tok:*\", max_lifetime: 90d}\n"
                               "          - {name: both, keys: \"both:*\", max_lifetime: 20s, "
                               "ttl_field: ttl, default_ttl: 1h, max_ttl: 10m}\n"
                               "pipelines:\n"
                               "  - {name: p, source: src, target: dst}\n");
    startAgent();
  }

  void startAgent() {
    agent_ = std::make_unique<AgentProcess>(config_, dir_.file("agent.log"));
    const std::string ckpt = dir_.file("state") + "/p.ckpt";
    ASSERT_TRUE(waitUntil([&] { return std::filesystem::exists(ckpt); }, 30s))
        << "no checkpoint " << ckpt << "\n"
        << agent_->logTail();
  }

  /** Writes on the source; returns the test's clock just before. */
  int64_t write(const std::vector<std::string>& cmd) {
    const int64_t t = unixTimeMs();
    auto r = source_->client().command(cmd);
    EXPECT_FALSE(r.isError()) << r.toString();
    return t;
  }
  void sync() { ASSERT_TRUE(waitAgentAcknowledgedAll(*source_, 20s)) << agent_->logTail(); }

  /** The key's target deadline is `want` (0 = none) within the tolerance; a line per check. */
  void expectDeadline(const std::string& vector, const std::string& key, int64_t want) {
    RespClient dst = target_->client();
    const int64_t got = dst.command({"PEXPIRETIME", key}).integer();
    bool ok = want == 0 ? got == -1 : (got > 0 && std::llabs(got - want) <= kToleranceMs);
    std::cout << vector << " " << key << ": target deadline " << got << ", expected "
              << (want == 0 ? std::string("none") : std::to_string(want))
              << (ok ? " ok" : " FAILED") << std::endl;
    EXPECT_TRUE(ok) << vector << " " << key << ": got " << got << " want " << want;
  }
  void expectAbsent(const std::string& vector, const std::string& key) {
    const int64_t n = target_->client().command({"EXISTS", key}).integer();
    std::cout << vector << " " << key << ": " << (n == 0 ? "absent ok" : "PRESENT, FAILED")
              << std::endl;
    EXPECT_EQ(n, 0) << vector << " " << key;
  }

  TempDir dir_;
  std::unique_ptr<RedisServer> source_, target_;
  std::string config_;
  std::unique_ptr<AgentProcess> agent_;
};

TEST_F(Policies, CosmosDefaultTtlAndTtlField) {
  const int64_t t1 = write({"SET", "cart:1", "v"});
  const int64_t t2 =
      write({"SET", "cart:2", "v", "PXAT", std::to_string(unixTimeMs() + 5 * 3600 * kS)});
  const int64_t p2 = t2 + 5 * 3600 * kS;
  write({"HSET", "cart:h", "f", "v"});
  const int64_t t10 = write({"SET", "doc:1", R"({"ttl":60,"x":1})"});
  write({"SET", "doc:11", R"({"ttl":-1})"});
  write({"SET", "doc:13", R"({"ttl":0})"});
  write({"SET", "doc:14", "not json"});
  const int64_t t17 =
      write({"SET", "doc:17", R"({"ttl":60})", "PXAT", std::to_string(unixTimeMs() + 600 * kS)});
  const int64_t t5 = write({"PERSIST", "cart:2"});
  sync();
  expectDeadline("P-1", "cart:1", t1 + 3600 * kS);
  expectDeadline("P-5", "cart:2", t5 + 3600 * kS);  // PERSIST in a default_ttl collection
  (void)p2;
  expectDeadline("P-7", "cart:h", 0);
  expectDeadline("P-10", "doc:1", t10 + 60 * kS);
  expectDeadline("P-11", "doc:11", 0);
  expectDeadline("P-13", "doc:13", 0);  // invalid ttl = no field; default -1 = none
  expectDeadline("P-14", "doc:14", 0);
  expectDeadline("P-17", "doc:17", t17 + 60 * kS);
  write({"SET", "cart:2b", "v", "PXAT", std::to_string(p2)});
  sync();
  expectDeadline("P-2", "cart:2b", p2);
}

TEST_F(Policies, ArangoExpireAtField) {
  const int64_t now_s = unixTimeMs() / 1000;
  write({"SET", "sess:23", "{\"expireAt\":" + std::to_string(now_s + 30) + "}"});
  write({"SET", "sess:24", "{\"expireAt\":" + std::to_string(now_s + 30) + ".5}"});
  // ISO-8601 with an offset: now + 40 s written in +02:00.
  const time_t at = static_cast<time_t>(now_s + 40 + 2 * 3600);
  std::tm tm{};
  gmtime_r(&at, &tm);
  char iso[40];
  std::strftime(iso, sizeof iso, "%Y-%m-%dT%H:%M:%S.250+02:00", &tm);
  write({"SET", "sess:25", std::string("{\"expireAt\":\"") + iso + "\"}"});
  write({"SET", "sess:28", R"({"expireAt":"yesterday"})"});
  write({"SET", "sess:29", "{\"expireAt\":" + std::to_string(now_s - 10) + "}"});
  sync();
  expectDeadline("P-23", "sess:23", (now_s + 30) * kS);
  expectDeadline("P-24", "sess:24", (now_s + 30) * kS + 500);
  expectDeadline("P-25", "sess:25", (now_s + 40) * kS + 250);
  expectDeadline("P-28", "sess:28", 0);
  expectAbsent("P-29", "sess:29");
}

TEST_F(Policies, MaxLifetimeSurvivesRestartAndCrash) {
  const int64_t t1 = write({"SET", "tok:1", "a"});
  const int64_t tb = write({"SET", "both:1", R"({"ttl":-1})"});
  sync();
  const int64_t cap1 = (t1 + 999) / 1000 * 1000 + kLifetimeMs;
  expectDeadline("P-33", "tok:1", cap1);
  expectDeadline("P-44", "both:1", (tb + 999) / 1000 * 1000 + 20 * kS);
  std::this_thread::sleep_for(2500ms);
  // A restart (SIGTERM, checkpoint): the second write keeps the first write's cap.
  ASSERT_FALSE(agent_->terminate().forced);
  startAgent();
  write({"SET", "tok:1", "b"});
  sync();
  expectDeadline("P-41 after a restart", "tok:1", cap1);
  // A crash (SIGKILL) right after a new key's first write: its first second is on disk.
  const int64_t t2 = write({"SET", "tok:2", "a"});
  sync();
  agent_->kill();
  std::this_thread::sleep_for(2500ms);
  startAgent();
  write({"SET", "tok:2", "b"});
  write({"SET", "tok:1", "c"});
  sync();
  expectDeadline("P-41 after a crash", "tok:2", (t2 + 999) / 1000 * 1000 + kLifetimeMs);
  expectDeadline("P-41 after a crash", "tok:1", cap1);
  // A deletion forgets: the key starts anew (P-36).
  write({"DEL", "tok:1"});
  const int64_t t3 = write({"SET", "tok:1", "d"});
  sync();
  expectDeadline("P-36", "tok:1", (t3 + 999) / 1000 * 1000 + kLifetimeMs);
  EXPECT_TRUE(std::filesystem::exists(dir_.file("state") + "/p.first-seen"));
}

// The same decision on a memcached target (MemcachedSink::finalDeadline calls target::decide):
// a ttl field, an ArangoDB date (one past: deleted, never written), and max_lifetime kept across
// an agent restart. memcached reports remaining whole seconds (`mg <key> t`).
TEST(PoliciesMemcached, FieldsDatesAndLifetime) {
  if (!memcachedAvailable()) GTEST_SKIP() << "memcached is not installed";
  TempDir dir;
  RedisServer source(std::vector<std::string>{"--repl-diskless-sync-delay", "0"});
  MemcachedServer mc;
  const std::string config = dir.file("xdcr.yaml");
  writeFileText(
      config, "agent: {state_dir: \"" + dir.file("state") +
                  "\"}\n"
                  "clusters:\n"
                  "  src: {type: redis, address: \"" +
                  source.address() +
                  "\"}\n"
                  "  mc:\n"
                  "    type: memcached\n"
                  "    address: \"" +
                  mc.address() +
                  "\"\n"
                  "    buckets:\n"
                  "      - db: 0\n"
                  "        collections:\n"
                  "          - {name: docs, keys: \"doc:*\", ttl_field: ttl, default_ttl: -1}\n"
                  "          - {name: sess, keys: \"sess:*\", expire_at_field: expireAt}\n"
                  "          - {name: tokens, keys: \"tok:*\", max_lifetime: 90d}\n"
                  "pipelines:\n"
                  "  - {name: p, source: src, target: mc, dbs: {0: 0}, checkpoint_interval: 1s}\n");
  auto agent = std::make_unique<AgentProcess>(config, dir.file("agent.log"));
  RespClient src = source.client();
  auto fence = [&](const std::string& key) {
    // Only once the agent streams: a fence written before the full sync's fork would be a
    // snapshot key, written in the RDB's order, proving nothing about the keys before it.
    ASSERT_TRUE(waitUntil(
        [&] { return agent->logText().find("streaming from") != std::string::npos; }, 30s, 20ms))
        << agent->logTail();
    src.command({"SET", key, "1"});
    ASSERT_TRUE(waitUntil([&] { return mc.get(key).present; }, 30s, 20ms)) << agent->logTail();
  };
  const int64_t now_s = unixTimeMs() / 1000;
  src.command({"SET", "doc:1", R"({"ttl":60})"});
  src.command({"SET", "doc:2", R"({"ttl":-1})"});
  src.command({"SET", "sess:1", "{\"expireAt\":" + std::to_string(now_s + 30) + "}"});
  src.command({"SET", "sess:past", "{\"expireAt\":" + std::to_string(now_s - 30) + "}"});
  src.command({"SET", "tok:1", "a"});
  fence("fence:1");
  const MemcachedItem d1 = mc.get("doc:1"), d2 = mc.get("doc:2"), s1 = mc.get("sess:1"),
                      t1 = mc.get("tok:1");
  std::cout << "memcached: doc:1 t=" << d1.ttl_s << " doc:2 t=" << d2.ttl_s
            << " sess:1 t=" << s1.ttl_s << " sess:past present=" << mc.get("sess:past").present
            << " tok:1 t=" << t1.ttl_s << std::endl;
  EXPECT_NEAR(d1.ttl_s, 60, 2);               // P-10
  EXPECT_EQ(d2.ttl_s, -1);                    // P-11
  EXPECT_NEAR(s1.ttl_s, 30, 2);               // P-23
  EXPECT_FALSE(mc.get("sess:past").present);  // P-29
  EXPECT_NEAR(t1.ttl_s, 90 * 86400, 2);       // P-33
  std::this_thread::sleep_for(3s);
  ASSERT_FALSE(agent->terminate().forced);
  agent = std::make_unique<AgentProcess>(config, dir.file("agent.log"));
  src.command({"SET", "tok:1", "b"});
  fence("fence:2");
  const MemcachedItem again = mc.get("tok:1");
  std::cout << "memcached: tok:1 after a restart 3 s later: value " << again.value
            << " t=" << again.ttl_s << " (the first write left t=" << t1.ttl_s
            << "; a new lifetime would give about that again)" << std::endl;
  EXPECT_EQ(again.value, "b");
  // P-41: the first write's cap, 3 s closer now, not a new lifetime. Compared with the first
  // reading, not with 90 d: memcached's remaining seconds carry its own clock's offset.
  EXPECT_LE(again.ttl_s, t1.ttl_s - 2);
  EXPECT_TRUE(agent->terminate().success());
}

}  // namespace
}  // namespace xdcr::test
