// Sliding expiration of hash fields (issue 27, expiry-semantics.md §12, S-10): a session kept in
// a hash field with a TTL of its own (Redis 7.4+/8, Valkey 9: HPEXPIRE, HEXPIRE) is renewed on
// the source while the agent is stopped; the target expires its copy of the field by itself
// meanwhile — and of the whole key where that field was its only one. The renewals arrive as
// HPEXPIREAT on fields the target no longer has (code -2): the agent must read each such hash
// back from the source and write it whole, every field and every field deadline as the source
// holds them. A native replica of the same source, through the same stop, is the yardstick.
//
// Hit counters kept in a field (HINCRBY, then HPEXPIRE) must stay exact: the HINCRBY that
// reaches a target whose copy of the field expired is guarded (HEXISTS), not applied to nothing.
//
// Before this change: the HPEXPIREAT did nothing on the target (-2), so every cart lost its
// session field and every token hash was missing; every counter restarted from 1.

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "replicator/admin_server.h"
#include "tests/support/harness.h"
#include "tests/support/server_matrix.h"

namespace xdcr::test {
namespace {

using namespace std::chrono_literals;

using Pair = ServerPair;

std::string pairName(const ::testing::TestParamInfo<Pair>& info) {
  return serverPairName(info.param);
}

/** A hash as one side holds it: its fields and values, each field's HPEXPIRETIME and the key's
 *  PEXPIRETIME ("none" when the key does not exist). */
std::string hashState(RespClient& c, const std::string& key) {
  const RespValue all = c.command({"HGETALL", key});
  if (!all.isArray() || all.array().empty()) return "none";
  std::vector<std::pair<std::string, std::string>> fields;
  for (size_t i = 0; i + 1 < all.array().size(); i += 2) {
    fields.emplace_back(all.array()[i].str(), all.array()[i + 1].str());
  }
  std::sort(fields.begin(), fields.end());
  RespCommand times = {"HPEXPIRETIME", key, "FIELDS", std::to_string(fields.size())};
  for (const auto& f : fields) times.push_back(f.first);
  const RespValue t = c.command(times);
  std::string out;
  for (size_t i = 0; i < fields.size(); ++i) {
    const int64_t at = t.isArray() && i < t.array().size() ? t.array()[i].integer() : -3;
    out += fields[i].first + "=" + fields[i].second + "@" + std::to_string(at) + " ";
  }
  out += "key@" + std::to_string(c.command({"PEXPIRETIME", key}).integer());
  return out;
}

class SlidingFieldTest : public ::testing::TestWithParam<Pair> {
 protected:
  void SetUp() override {
    std::string why;
    auto source_kind = findMatrixServer(GetParam().source, &why);
    std::optional<MatrixServer> target_kind;
    if (source_kind) target_kind = findMatrixServer(GetParam().target, &why);
    if (!source_kind || !target_kind) {
      if (matrixRequired()) FAIL() << why;
      GTEST_SKIP() << why;
    }
    what_ = source_kind->name + " " + source_kind->version + " -> " + target_kind->name + " " +
            target_kind->version;
    // A backlog that holds the whole catch-up: the agent resumes by partial resync.
    source_ = RedisServer::startBinary(
        source_kind->binary, {"--repl-diskless-sync-delay", "0", "--repl-backlog-size", "64mb"});
    target_ = RedisServer::startBinary(target_kind->binary);
    replica_ = RedisServer::startBinary(
        source_kind->binary, {"--replicaof", "127.0.0.1", std::to_string(source_->port())});
    admin_ = "127.0.0.1:" + std::to_string(freePort());
  }
  void TearDown() override {
    if (HasFailure() && agent_) std::cerr << "---- agent (log tail)\n" << agent_->logTail(40);
    agent_.reset();
  }

  void startAgent() {
    const std::string config = dir_.file("xdcr.yaml");
    writeFileText(config, "agent: {state_dir: \"" + dir_.file("state") + "\", admin_listen: \"" +
                              admin_ +
                              "\"}\n"
                              "clusters:\n"
                              "  src: {type: redis, address: \"" +
                              source_->address() +
                              "\"}\n"
                              "  dst: {type: redis, address: \"" +
                              target_->address() +
                              "\"}\n"
                              "pipelines:\n"
                              "  - {name: p, source: src, target: dst, checkpoint_interval: 1s}\n");
    agent_ = std::make_unique<AgentProcess>(config, dir_.file("agent.log"));
    ASSERT_TRUE(waitUntil(
        [&] {
          auto r = replicator::adminGet(admin_, "/readyz", 2s);
          return r && r->first == 200;
        },
        60s))
        << agent_->logTail(40);
  }
  double metric(const std::string& sample) {
    auto r = replicator::adminGet(admin_, "/metrics", 5s);
    if (!r) return NAN;
    std::regex re("(^|\n)" +
                  std::regex_replace(sample, std::regex(R"([{}\[\]().*+?^$|\\])"), R"(\$&)") +
                  " ([-+0-9.eE]+)");
    std::smatch m;
    return std::regex_search(r->second, m, re) ? std::strtod(m[2].str().c_str(), nullptr) : NAN;
  }
  ::testing::AssertionResult caughtUp() {
    const uint64_t want = std::stoull(source_->client().info("replication")["master_repl_offset"]);
    std::string last;
    if (waitUntil(
            [&] {
              auto r = replicator::adminGet(admin_, "/status", 5s);
              if (!r || r->first != 200) return false;
              last = r->second;
              const auto p = nlohmann::json::parse(r->second)["pipelines"][0];
              return p.value("state", "") == "streaming" &&
                     p.value("applied_offset", uint64_t{0}) >= want;
            },
            60s)) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "not caught up to " << want << ": " << last;
  }

  /** How many of `keys` differ between the source and `server` (details: the first few). */
  int differing(RedisServer& server, const std::vector<std::string>& keys,
                std::vector<std::string>& details) {
    RespClient src = source_->client(30s);
    RespClient dst = server.client(30s);
    int n = 0;
    details.clear();
    for (const auto& k : keys) {
      const std::string s = hashState(src, k);
      const std::string t = hashState(dst, k);
      if (s != t) {
        ++n;
        if (details.size() < 6) details.push_back(k + ": source " + s + " | target " + t);
      }
    }
    return n;
  }

  TempDir dir_{"xdcr-sliding-field"};
  std::unique_ptr<RedisServer> source_, target_, replica_;
  std::string admin_, what_;
  std::unique_ptr<AgentProcess> agent_;
};

TEST_P(SlidingFieldTest, HashFieldsRenewedWhileTheAgentIsStoppedComeBackWithEveryField) {
  constexpr int kCarts = 300, kTokens = 200, kCounters = 100;
  constexpr int kTtlS = 12;  // the field TTL; the agent is stopped 20 s, longer than it
  std::vector<std::string> carts, tokens, counters, keys;
  for (int i = 0; i < kCarts; ++i) carts.push_back("cart:" + std::to_string(i));
  for (int i = 0; i < kTokens; ++i) tokens.push_back("tok:" + std::to_string(i));
  for (int i = 0; i < kCounters; ++i) counters.push_back("rl:" + std::to_string(i));
  keys = carts;
  keys.insert(keys.end(), tokens.begin(), tokens.end());
  keys.insert(keys.end(), counters.begin(), counters.end());
  const std::string ttl_ms = std::to_string(kTtlS * 1000);
  const std::string ttl_s = std::to_string(kTtlS);
  startAgent();
  if (HasFatalFailure()) return;
  {
    // A cart: items and owner without a TTL, its session field with one; the cart lives an hour.
    // A token hash: one field, with a TTL: the key goes when the field does.
    std::vector<RespCommand> batch;
    for (int i = 0; i < kCarts; ++i) {
      batch.push_back({"HSET", carts[i], "items", "[1,2," + std::to_string(i) + "]", "owner",
                       "u" + std::to_string(i), "sess", "s" + std::to_string(i)});
      batch.push_back({"HPEXPIRE", carts[i], ttl_ms, "FIELDS", "1", "sess"});
      batch.push_back({"PEXPIRE", carts[i], "3600000"});
    }
    for (int i = 0; i < kTokens; ++i) {
      batch.push_back({"HSET", tokens[i], "t", "secret" + std::to_string(i)});
      batch.push_back({"HEXPIRE", tokens[i], ttl_s, "FIELDS", "1", "t"});
    }
    // A rate limit kept in a field: HINCRBY, then its window renewed (HPEXPIRE); `plan` has none.
    for (int i = 0; i < kCounters; ++i) {
      batch.push_back({"HSET", counters[i], "plan", "basic"});
      batch.push_back({"HINCRBY", counters[i], "hits", "1"});
      batch.push_back({"HPEXPIRE", counters[i], ttl_ms, "FIELDS", "1", "hits"});
    }
    for (const RespValue& r : source_->client(30s).pipeline(batch)) {
      ASSERT_FALSE(r.isError()) << r.toString() << " (" << what_ << ")";
    }
  }
  ASSERT_TRUE(caughtUp());
  // One renewal round: HPEXPIRE and HEXPIRE in turn (both propagate as HPEXPIREAT); each
  // counter counts a hit first, an in-place write to a field whose copy may be gone.
  auto renew = [&](const std::string& ms) {
    std::vector<RespCommand> batch;
    for (const auto& k : counters) batch.push_back({"HINCRBY", k, "hits", "1"});
    for (size_t i = 0; i < keys.size(); ++i) {
      const std::string field = i < carts.size()                   ? "sess"
                                : i < carts.size() + tokens.size() ? "t"
                                                                   : "hits";
      if (i % 2 == 0) {
        batch.push_back({"HPEXPIRE", keys[i], ms, "FIELDS", "1", field});
      } else {
        batch.push_back(
            {"HEXPIRE", keys[i], std::to_string(std::stoll(ms) / 1000), "FIELDS", "1", field});
      }
    }
    for (const RespValue& r : source_->client(30s).pipeline(batch)) {
      ASSERT_FALSE(r.isError()) << r.toString();
    }
  };
  auto renewFor = [&](int rounds, const std::string& ms) {
    auto next = std::chrono::steady_clock::now();
    for (int r = 0; r < rounds; ++r) {
      next += 2s;
      std::this_thread::sleep_until(next);
      renew(ms);
    }
  };

  ASSERT_EQ(::kill(agent_->pid(), SIGSTOP), 0);
  renewFor(10, ttl_ms);  // 20 s: every field copy on the target expires meanwhile
  // The scenario happened: the target holds no session field and no token now.
  {
    RespClient dst = target_->client();
    int sessions = 0, toks = 0, hits = 0;
    for (const auto& c : carts) sessions += dst.command({"HEXISTS", c, "sess"}).integer();
    for (const auto& t : tokens) toks += dst.command({"EXISTS", t}).integer();
    for (const auto& r : counters) hits += dst.command({"HEXISTS", r, "hits"}).integer();
    std::cout << "[ sliding  ] " << what_ << ": agent stopped 20 s; the target holds " << sessions
              << " of " << kCarts << " session fields, " << toks << " of " << kTokens << " tokens, "
              << hits << " of " << kCounters << " hit counters\n";
    ASSERT_EQ(sessions + toks + hits, 0) << "the field TTLs did not end on the target: no scenario";
  }
  ASSERT_EQ(::kill(agent_->pid(), SIGCONT), 0);
  renewFor(2, ttl_ms);
  renewFor(1, "120000");  // the last renewal keeps them long enough to compare
  ASSERT_TRUE(caughtUp()) << agent_->logTail(20);
  std::vector<std::string> details;
  int diff = 0;
  waitUntil(
      [&] {
        diff = differing(*target_, keys, details);
        return diff == 0;
      },
      20s, 500ms);
  const double restored = metric(
      R"(xdcr_target_copies_restored_total{pipeline="p",reason="field_expired_before_write"})");
  const double unrecoverable = metric(R"(xdcr_target_copies_unrecoverable_total{pipeline="p"})");
  std::string shown;
  for (const auto& d : details) shown += "\n  " + d;
  std::cout << "[ sliding  ] " << what_ << ": after the catch-up " << diff << " of " << keys.size()
            << " hashes differ (fields, values, field deadlines, key deadline); restored "
            << restored << ", unrecoverable " << unrecoverable << shown << "\n";
  EXPECT_EQ(diff, 0) << shown;
  EXPECT_GE(restored, kCarts + kTokens + kCounters);
  EXPECT_EQ(unrecoverable, 0);

  ASSERT_TRUE(waitUntil(
      [&] {
        return source_->client().info("replication")["master_repl_offset"] ==
               replica_->client().info("replication")["master_repl_offset"];
      },
      30s));
  const int native = differing(*replica_, keys, details);
  std::cout << "[ native   ] a native replica through the same 20 s: " << native << " of "
            << keys.size() << " hashes differ\n";
  EXPECT_EQ(native, 0);
}

INSTANTIATE_TEST_SUITE_P(FieldTtlServers, SlidingFieldTest,
                         ::testing::Values(Pair{"redis-8", "redis-8"}, Pair{"valkey-9", "redis-8"}),
                         pairName);

}  // namespace
}  // namespace xdcr::test
