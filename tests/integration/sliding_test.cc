// Sliding expiration (issue 27, expiry-semantics.md §12): a target expires its copy of a key by
// itself; a renewal or an in-place write that reaches it after that instant must still leave
// the whole source document on the target, in stream order. Each test keeps documents alive on
// a real Redis source by renewals while the agent cannot apply them (the pipeline paused, the
// agent stopped or killed), then compares every key of the target with the source — type,
// contents and deadline, exactly (no max_ttl: the same millisecond) — and reads the restore
// counters. A native replica of the same source, through the same pause, is the yardstick.
//
// Before issue 27 every one of these lost data: 2,000 of 2,000 sessions missing after a 20 s
// pause or stop; counters restarted from 1 (source 14, target 6); a hash clamped by max_ttl came
// back as a fragment of one field.

#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "replicator/admin_server.h"
#include "tests/support/harness.h"
#include "tests/support/wan_proxy.h"

namespace xdcr::test {
namespace {

using namespace std::chrono_literals;
constexpr const char* kPipeline = "sliding";

class SlidingTest : public ::testing::Test {
 protected:
  void SetUp() override { admin_ = "127.0.0.1:" + std::to_string(freePort()); }

  /** The agent's config; `buckets`: the target's YAML `buckets:` value ("" for none);
   *  `source_port`: where the agent reads the source (0: the source itself). */
  std::string yaml(const std::string& buckets = "", uint16_t source_port = 0,
                   const std::string& pipeline_extra = "", uint16_t target_port = 0) {
    return "agent: {state_dir: " + dir_.file("state") + ", admin_listen: \"" + admin_ +
           "\"}\n"
           "clusters:\n"
           "  src: {type: redis, address: \"127.0.0.1:" +
           std::to_string(source_port != 0 ? source_port : source_.port()) +
           "\"}\n"
           "  dst: {type: redis, address: \"127.0.0.1:" +
           std::to_string(target_port != 0 ? target_port : target_.port()) + "\"" +
           (buckets.empty() ? "" : ", buckets: " + buckets) +
           "}\n"
           "pipelines:\n"
           "  - {name: " +
           kPipeline + ", source: src, target: dst, checkpoint_interval: 1s" + pipeline_extra +
           "}\n";
  }
  void startAgent(const std::string& text) {
    writeFileText(config_, text);
    agent_ = std::make_unique<AgentProcess>(config_, dir_.file("agent.log"));
    ASSERT_TRUE(waitUntil([&] { return get("/readyz").first == 200; }, 30s)) << agent_->logTail();
  }
  std::pair<int, std::string> request(const std::string& method, const std::string& path) {
    auto r = replicator::adminRequest(admin_, method, path, 5s);
    return r ? *r : std::pair<int, std::string>{-1, r.error().message};
  }
  std::pair<int, std::string> get(const std::string& path) { return request("GET", path); }
  void pause() {
    auto [code, body] = request("POST", std::string("/pipelines/") + kPipeline + "/pause");
    ASSERT_EQ(code, 200) << body;
  }
  void resume() {
    auto [code, body] = request("POST", std::string("/pipelines/") + kPipeline + "/resume");
    ASSERT_EQ(code, 200) << body;
  }
  /** One sample of /metrics; NaN when absent. */
  double metric(const std::string& sample) {
    const std::string text = get("/metrics").second;
    std::regex re("(^|\n)" +
                  std::regex_replace(sample, std::regex(R"([{}\[\]().*+?^$|\\])"), R"(\$&)") +
                  " ([+-]?Inf|NaN|[-+0-9.eE]+)");
    std::smatch m;
    return std::regex_search(text, m, re) ? std::strtod(m[2].str().c_str(), nullptr) : NAN;
  }
  double restored(const std::string& reason) {
    return metric(std::string("xdcr_target_copies_restored_total{pipeline=\"") + kPipeline +
                  "\",reason=\"" + reason + "\"}");
  }
  double unrecoverable() {
    return metric(std::string("xdcr_target_copies_unrecoverable_total{pipeline=\"") + kPipeline +
                  "\"}");
  }
  /** One rate-limit round on the source: `INCR k` and `EXPIRE k ttl` for every key. */
  void incrementAndExpire(const std::vector<std::string>& keys, const std::string& ttl) {
    std::vector<RespCommand> batch;
    for (const auto& k : keys) {
      batch.push_back({"INCR", k});
      batch.push_back({"EXPIRE", k, ttl});
    }
    source_.client(30s).pipeline(batch);
  }
  uint64_t sourceOffset() {
    return std::stoull(source_.client().info("replication")["master_repl_offset"]);
  }
  ::testing::AssertionResult caughtUp(std::chrono::milliseconds timeout = 60s) {
    nlohmann::json last;
    const uint64_t want = sourceOffset();
    if (waitUntil(
            [&] {
              auto [code, body] = get("/status");
              if (code != 200) return false;
              last = nlohmann::json::parse(body)["pipelines"][0];
              return last.value("state", "") == "streaming" &&
                     last.value("applied_offset", uint64_t{0}) >= want;
            },
            timeout)) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "not caught up to " << want << ": " << last.dump();
  }

  /**
   * Every key of `keys` on `server` as the source holds it: type, contents and PEXPIRETIME to
   * the millisecond (`deadline` decides instead, when given). Polled until equal or `timeout`
   * (a copy found gone by a write's reply is restored a moment after the write): the last
   * comparison's counts and first differences otherwise.
   */
  struct Diff {
    int missing = 0, contents = 0, deadlines = 0, checked = 0;
    int not_on_source = 0;  // every key compared must be alive on the source (a test's timing)
    std::vector<std::string> details;
    bool ok() const { return checked > 0 && missing + contents + deadlines + not_on_source == 0; }
    std::string summary() const {
      std::string s = std::to_string(checked) + " keys: " + std::to_string(missing) + " missing, " +
                      std::to_string(contents) + " with other contents, " +
                      std::to_string(deadlines) + " with another deadline";
      if (not_on_source > 0) {
        s += ", " + std::to_string(not_on_source) + " NOT ON THE SOURCE (the test's timing)";
      }
      for (const auto& d : details) s += "\n  " + d;
      return s;
    }
  };
  using DeadlineCheck = std::function<bool(int64_t source_pexpiretime, int64_t target)>;
  Diff compareOnce(RedisServer& server, const std::vector<std::string>& keys,
                   const DeadlineCheck& deadline) {
    RespClient src = source_.client(30s);
    RespClient dst = server.client(30s);
    auto run = [](RespClient& c) {
      return [&c](const std::vector<RespCommand>& cmds) { return c.pipeline(cmds); };
    };
    const std::vector<KeyState> s = readKeyStatesOfAnyType(run(src), keys);
    const std::vector<KeyState> t = readKeyStatesOfAnyType(run(dst), keys);
    Diff d;
    for (size_t i = 0; i < keys.size(); ++i) {
      ++d.checked;
      std::string what;
      if (s[i].type == "none" && t[i].type != "none") {
        ++d.contents;  // the source no longer has it: neither may the target
        what = "on the target (" + t[i].type + "), not on the source";
      } else if (s[i].type == "none") {
        ++d.not_on_source;
        what = "not on the source";
      } else if (t[i].type == "none") {
        ++d.missing;
        what = "missing (source " + s[i].type + " " + escapeBytes(s[i].contents, 60) + ")";
      } else if (s[i].type != t[i].type || s[i].contents != t[i].contents) {
        ++d.contents;
        what = "source " + s[i].type + " " + escapeBytes(s[i].contents, 80) + ", target " +
               t[i].type + " " + escapeBytes(t[i].contents, 80);
      } else if (s[i].type != "none" && !(deadline ? deadline(s[i].pexpiretime, t[i].pexpiretime)
                                                   : s[i].pexpiretime == t[i].pexpiretime)) {
        ++d.deadlines;
        what = "PEXPIRETIME source " + std::to_string(s[i].pexpiretime) + ", target " +
               std::to_string(t[i].pexpiretime);
      }
      if (!what.empty() && d.details.size() < 10) d.details.push_back(keys[i] + ": " + what);
    }
    return d;
  }
  Diff compare(RedisServer& server, const std::vector<std::string>& keys,
               const DeadlineCheck& deadline = nullptr, std::chrono::milliseconds timeout = 20s) {
    Diff d;
    waitUntil(
        [&] {
          d = compareOnce(server, keys, deadline);
          return d.ok();
        },
        timeout, 500ms);
    return d;
  }

  /** `n` sessions "sess:<i>" (a JSON-ish string) with a TTL of `ttl_s`. */
  std::vector<std::string> createSessions(int n, int ttl_s) {
    std::vector<std::string> keys;
    std::vector<RespCommand> batch;
    for (int i = 0; i < n; ++i) {
      keys.push_back("sess:" + std::to_string(i));
      batch.push_back({"SET", keys.back(), "{\"user\":" + std::to_string(i) + ",\"cart\":[1,2]}",
                       "EX", std::to_string(ttl_s)});
    }
    source_.client(30s).pipeline(batch);
    return keys;
  }
  /** One renewal round of every session, by EXPIRE, GETEX … EX and PEXPIRE in turn. */
  void renew(const std::vector<std::string>& keys, int ttl_s) {
    std::vector<RespCommand> batch;
    for (size_t i = 0; i < keys.size(); ++i) {
      switch (i % 3) {
        case 0:
          batch.push_back({"EXPIRE", keys[i], std::to_string(ttl_s)});
          break;
        case 1:
          batch.push_back({"GETEX", keys[i], "EX", std::to_string(ttl_s)});
          break;
        default:
          batch.push_back({"PEXPIRE", keys[i], std::to_string(ttl_s * 1000)});
          break;
      }
    }
    for (const RespValue& r : source_.client(30s).pipeline(batch)) {
      ASSERT_FALSE(r.isError()) << r.toString();
    }
  }
  /** Renews every `period` for `rounds` rounds (bounded: rounds × period). */
  void renewFor(const std::vector<std::string>& keys, int ttl_s, int rounds,
                std::chrono::milliseconds period = 2s) {
    auto next = std::chrono::steady_clock::now();
    for (int r = 0; r < rounds; ++r) {
      next += period;
      std::this_thread::sleep_until(next);
      renew(keys, ttl_s);
    }
  }

  /** The native replica's figures, for the test's output. */
  void reportNativeReplica(const std::vector<std::string>& keys, const std::string& what) {
    ASSERT_TRUE(waitReplicaCaughtUp(source_, replica_, 30s));
    const Diff d = compareOnce(replica_, keys, nullptr);
    std::cout << "[ native   ] a native replica through the same " << what << ": " << d.missing
              << " of " << keys.size() << " lost, " << d.contents << " with other contents\n";
    EXPECT_TRUE(d.ok()) << d.summary();
  }

  /**
   * A catch-up held to 50 KB/s, killed once the target holds restored copies; the restart
   * resumes by partial resync (the source's backlog holds it all). The counters must stay exact.
   * While the pipeline is paused the source renews each counter for `paused_ttl` seconds.
   */
  void killedDuringTheCatchUp(const std::string& paused_ttl) {
    const std::string throttled = ", bandwidth_limit: 50KB";
    startAgent(yaml("", 0, throttled));
    std::vector<std::string> keys;
    for (int i = 0; i < 300; ++i) keys.push_back("rate:" + std::to_string(i));
    auto round = [&](const std::string& ttl = "3") {
      std::vector<RespCommand> batch;
      for (const auto& k : keys) {
        batch.push_back({"INCR", k});
        batch.push_back({"EXPIRE", k, ttl});
      }
      source_.client(30s).pipeline(batch);
    };
    round();
    ASSERT_TRUE(caughtUp());
    ASSERT_NO_FATAL_FAILURE(pause());
    for (int i = 0; i < 40; ++i) {  // 8 s of INCRs: the copies expire, the backlog grows
      round(paused_ttl);
      std::this_thread::sleep_for(200ms);
    }
    // The last paused round gives them two minutes: the copies the catch-up restores (read at the
    // source's head) stay alive through the kill, so a replay would INCR them again.
    round("120");
    ASSERT_NO_FATAL_FAILURE(resume());
    // Killed once the target holds restored copies (their records are written with them), the
    // catch-up still behind the reads they came from.
    const std::string records = std::string("__xdcr_marker__:") + kPipeline + ":restored";
    ASSERT_TRUE(waitUntil(
        [&] {
          return target_.client().command({"HLEN", records}).integer() >= 100;
        },
        60s, 20ms))
        << agent_->logTail();
    const double before_kill = restored("expired_before_write");
    agent_->kill();
    for (int i = 0; i < 5; ++i) {
      round(paused_ttl);  // (3 s: the counters may expire on the source before the restart)
      std::this_thread::sleep_for(200ms);
    }
    startAgent(yaml("", 0, throttled));
    round("120");  // the last round keeps them long enough to compare
    ASSERT_TRUE(caughtUp(120s)) << agent_->logTail();
    const Diff d = compare(target_, keys);
    std::cout << "[ sliding  ] renewed " << paused_ttl
              << " s while paused, SIGKILL in the catch-up after " << before_kill
              << " restores: " << d.summary() << "\n";
    EXPECT_TRUE(d.ok()) << d.summary() << "\n" << agent_->logTail(30);
    EXPECT_EQ(unrecoverable(), 0);
  }

  TempDir dir_{"xdcr-sliding"};
  // A backlog that holds every catch-up here: a restart resumes by partial resync (a full sync
  // would rewrite every key and hide what a replay does).
  RedisServer source_{{"--repl-diskless-sync-delay", "0", "--repl-backlog-size", "64mb"}};
  RedisServer target_;
  RedisServer replica_{{"--replicaof", "127.0.0.1", std::to_string(source_.port())}};
  std::string admin_;
  std::string config_ = dir_.file("xdcr.yaml");
  std::unique_ptr<AgentProcess> agent_;
};

TEST_F(SlidingTest, SessionsRenewedWhileThePipelineIsPausedAreAllOnTheTarget) {
  startAgent(yaml());
  const std::vector<std::string> keys = createSessions(2000, 10);
  ASSERT_TRUE(caughtUp());
  ASSERT_NO_FATAL_FAILURE(pause());
  renewFor(keys, 10, 10);  // 20 s: every copy on the target expires meanwhile
  ASSERT_NO_FATAL_FAILURE(resume());
  renewFor(keys, 10, 3);
  renewFor(keys, 120, 1);  // the last renewal keeps them long enough to compare
  ASSERT_TRUE(caughtUp()) << agent_->logTail();
  const Diff d = compare(target_, keys);
  std::cout << "[ sliding  ] paused 20 s: " << d.summary() << "; restored "
            << restored("expired_before_write") << ", unrecoverable " << unrecoverable() << "\n";
  EXPECT_TRUE(d.ok()) << d.summary() << "\n" << agent_->logTail(20);
  EXPECT_GE(restored("expired_before_write"), 2000);
  EXPECT_EQ(unrecoverable(), 0);
  reportNativeReplica(keys, "20 s");
}

TEST_F(SlidingTest, SessionsRenewedWhileTheAgentIsStoppedAreAllOnTheTarget) {
  startAgent(yaml());
  const std::vector<std::string> keys = createSessions(2000, 10);
  ASSERT_TRUE(caughtUp());
  ASSERT_EQ(::kill(agent_->pid(), SIGSTOP), 0);
  renewFor(keys, 10, 10);
  ASSERT_EQ(::kill(agent_->pid(), SIGCONT), 0);
  renewFor(keys, 10, 3);
  renewFor(keys, 120, 1);
  ASSERT_TRUE(caughtUp()) << agent_->logTail();
  const Diff d = compare(target_, keys);
  std::cout << "[ sliding  ] stopped 20 s: " << d.summary() << "; restored "
            << restored("expired_before_write") << "\n";
  EXPECT_TRUE(d.ok()) << d.summary() << "\n" << agent_->logTail(20);
  EXPECT_EQ(unrecoverable(), 0);
  reportNativeReplica(keys, "20 s");
}

TEST_F(SlidingTest, CountersAndHashesWhoseCopiesExpiredAreExact) {
  startAgent(yaml());
  std::vector<std::string> keys;
  for (int i = 0; i < 100; ++i) keys.push_back("rate:" + std::to_string(i));
  for (int i = 0; i < 100; ++i) keys.push_back("cart:" + std::to_string(i));
  // A rate limiter's INCR + EXPIRE, a cart's HSET + EXPIRE: every 500 ms, 3 s of life.
  auto round = [&](int r, const std::string& ttl = "3") {
    std::vector<RespCommand> batch;
    for (int i = 0; i < 100; ++i) {
      batch.push_back({"INCR", "rate:" + std::to_string(i)});
      batch.push_back({"EXPIRE", "rate:" + std::to_string(i), ttl});
      batch.push_back(
          {"HSET", "cart:" + std::to_string(i), "item" + std::to_string(r), std::to_string(r)});
      batch.push_back({"EXPIRE", "cart:" + std::to_string(i), ttl});
    }
    for (const RespValue& v : source_.client(30s).pipeline(batch)) {
      ASSERT_FALSE(v.isError()) << v.toString();
    }
  };
  int r = 0;
  for (; r < 4; ++r) {
    round(r);
    std::this_thread::sleep_for(500ms);
  }
  ASSERT_TRUE(caughtUp());
  ASSERT_NO_FATAL_FAILURE(pause());
  for (int i = 0; i < 12; ++i, ++r) {  // 6 s: every copy on the target expires
    round(r);
    std::this_thread::sleep_for(500ms);
  }
  ASSERT_NO_FATAL_FAILURE(resume());
  for (int i = 0; i < 4; ++i, ++r) {
    round(r);
    std::this_thread::sleep_for(500ms);
  }
  round(r, "120");  // the last round keeps them long enough to compare
  ASSERT_TRUE(caughtUp()) << agent_->logTail();
  const Diff d = compare(target_, keys);
  std::cout << "[ sliding  ] counters and hashes, paused 6 s: " << d.summary() << "; source "
            << source_.client().command({"GET", "rate:0"}).toString() << ", target "
            << target_.client().command({"GET", "rate:0"}).toString() << "\n";
  EXPECT_TRUE(d.ok()) << d.summary() << "\n" << agent_->logTail(20);
  EXPECT_GE(restored("expired_before_write"), 1);
  EXPECT_EQ(unrecoverable(), 0);
  reportNativeReplica(keys, "6 s");

  // What an agent without §12 left behind, made by hand: a counter restarted from 1 and a cart
  // missing its first items, deadlines kept. verify names both as value differences.
  {
    RespClient dst = target_.client();
    dst.command({"SET", "rate:7", "1", "KEEPTTL"});
    dst.command({"HDEL", "cart:7", "item0", "item1"});
  }
  const AgentCommandResult v = runAgentCommand(
      {"verify", "-c", config_, "-p", kPipeline, "-o", "json"}, dir_.file("verify.out"));
  EXPECT_NE(v.exit_code, 0) << v.output;
  EXPECT_EQ(v.report.value("value_mismatches", -1), 2) << v.output;
  EXPECT_EQ(v.report.value("missing", -1), 0) << v.output;
  std::string named;
  for (const auto& e : v.report.value("examples", nlohmann::json::array())) {
    if (e.value("kind", "") == "value") named += e.value("source", "") + ";";
  }
  EXPECT_NE(named.find("rate:7"), std::string::npos) << v.output;
  EXPECT_NE(named.find("cart:7"), std::string::npos) << v.output;
}

TEST_F(SlidingTest, ADocumentTheTargetsMaxTtlEndedComesBackWholeWithItsClamp) {
  startAgent(yaml("[{db: 0, collections: [{name: carts, keys: \"cart:*\", max_ttl: 5s}]}]"));
  RespClient src = source_.client();
  src.command({"HSET", "cart:1", "a", "1", "b", "2", "c", "3"});
  src.command({"EXPIRE", "cart:1", "3600"});
  ASSERT_TRUE(caughtUp());
  EXPECT_EQ(target_.client().command({"HLEN", "cart:1"}).integer(), 3);
  std::this_thread::sleep_for(8s);  // the target's clamp (now+5 s) ends its copy
  EXPECT_EQ(target_.client().command({"EXISTS", "cart:1"}).integer(), 0);
  // The source keeps it for an hour: a renewal and an in-place write reach the target.
  const int64_t write_lo = unixTimeMs();
  src.command({"HSET", "cart:1", "d", "4"});
  src.command({"EXPIRE", "cart:1", "3600"});
  ASSERT_TRUE(caughtUp());
  // now+M for a write (the restore follows the write's reply) between write_lo and the check.
  const Diff d = compare(target_, {"cart:1"}, [&](int64_t, int64_t t) {
    return t >= write_lo + 5000 - 1000 && t <= unixTimeMs() + 5000 + 100;
  });
  std::cout << "[ sliding  ] max_ttl 5 s, mutated after 8 s: " << d.summary() << "; target HGETALL "
            << target_.client().command({"HGETALL", "cart:1"}).toString() << "\n";
  EXPECT_TRUE(d.ok()) << d.summary() << "\n" << agent_->logTail(20);
  EXPECT_GE(restored("clamped_before_write"), 1);

  // explain names the cause: the running agent's journal of restores (GET …/restores).
  const auto [code, body] = get(std::string("/pipelines/") + kPipeline + "/restores");
  ASSERT_EQ(code, 200) << body;
  const nlohmann::json journal = nlohmann::json::parse(body);
  ASSERT_EQ(journal["restores"].size(), 1u) << body;
  const nlohmann::json& note = journal["restores"][0];
  EXPECT_EQ(note["key"], "cart:1");
  EXPECT_EQ(note["reason"], "clamped_before_write");
  EXPECT_TRUE(note["source_had_it"].get<bool>());
  // The copy's end is the clamp the agent gave it (now+5 s at the first write), which had passed
  // when the write that found it gone was answered; the read came after that write.
  EXPECT_GT(note["copy_deadline_ms"].get<int64_t>(), 0) << body;
  EXPECT_LT(note["copy_deadline_ms"].get<int64_t>(), write_lo) << body;
  EXPECT_GE(note["found_at_ms"].get<int64_t>(), note["copy_deadline_ms"].get<int64_t>()) << body;
  EXPECT_GE(note["read_offset"].get<uint64_t>(), note["write_offset"].get<uint64_t>()) << body;
  const AgentCommandResult x =
      runAgentCommand({"explain", "-c", config_, "-p", kPipeline, "cart:1", "-o", "json"},
                      dir_.file("explain.out"));
  ASSERT_EQ(x.exit_code, 0) << x.output;
  ASSERT_EQ(x.report["restores"]["notes"].size(), 1u) << x.output;
  ASSERT_EQ(x.report["restores"]["history"].size(), 1u) << x.output;
  const std::string history = x.report["restores"]["history"][0];
  std::cout << "[ sliding  ] explain cart:1: " << history << "\n";
  EXPECT_NE(history.find("the target ended its copy at"), std::string::npos) << history;
  EXPECT_NE(history.find("max_ttl"), std::string::npos) << history;
  EXPECT_NE(history.find("read back from the source"), std::string::npos) << history;
  // A key never restored has no history.
  src.command({"SET", "plain", "1"});
  ASSERT_TRUE(caughtUp());
  const AgentCommandResult y = runAgentCommand(
      {"explain", "-c", config_, "-p", kPipeline, "plain", "-o", "json"}, dir_.file("y.out"));
  ASSERT_EQ(y.exit_code, 0) << y.output;
  EXPECT_TRUE(y.report["restores"]["read"].get<bool>()) << y.output;
  EXPECT_TRUE(y.report["restores"]["history"].empty()) << y.output;
}

TEST_F(SlidingTest, RenewalsArrivingWithinTheWansDelayOfEachDeadlineLoseNothing) {
  // The agent reads the source across 300 ms each way; 3,000 sessions live 2 s and are renewed
  // 1.75 s after each renewal, so every renewal reaches the target 50 ms after its copy ended — in
  // normal operation, without any fault. A native replica reads across the same delay.
  auto wan = WanProxy::start(source_.port(), {.delay = 300ms, .name = "wan"});
  RedisServer far_replica{{"--replicaof", "127.0.0.1", std::to_string(wan->port())}};
  startAgent(yaml("", wan->port()));
  const std::vector<std::string> keys = createSessions(3000, 2);
  renewFor(keys, 2, 16, 1750ms);  // 28 s
  // A last late renewal for a minute: the copies are restored, and stay long enough to compare.
  renewFor(keys, 60, 1, 1750ms);
  ASSERT_TRUE(caughtUp()) << agent_->logTail();
  // (At 40 ms each way, renewals 20 ms before each deadline left the test itself too little
  // slack: under ASan with lint beside none of 3,000 lived. 250 ms now.) On a busy machine
  // some renewals may still arrive late on the source too and
  // those sessions end there (and must on the target: checked). Seen: 1,905 and 509 of 3,000
  // alive. The check needs 100 to have lived, and every one the source holds on the target.
  Diff d = compare(target_, keys);
  const int lived = d.checked - d.not_on_source;
  EXPECT_GE(lived, 100) << "too few sessions survived the test's own renewals: " << d.summary();
  d.not_on_source = 0;
  std::cout << "[ sliding  ] 300 ms WAN, renewals 1.75 s apart for 2 s sessions: " << lived
            << " alive on the source; " << d.summary() << "; restored "
            << restored("expired_before_write") << "\n";
  EXPECT_TRUE(d.ok()) << d.summary() << "\n" << agent_->logTail(20);
  EXPECT_GE(restored("expired_before_write"), lived);
  EXPECT_EQ(unrecoverable(), 0);
  ASSERT_TRUE(waitReplicaCaughtUp(source_, far_replica, 30s));
  Diff native = compareOnce(far_replica, keys, nullptr);
  native.not_on_source = 0;  // (as above)
  std::cout << "[ native   ] a native replica across the same WAN: " << native.missing << " of "
            << lived << " lost\n";
  EXPECT_TRUE(native.ok()) << native.summary();
}

TEST_F(SlidingTest, KilledDuringTheCatchUpTheCountersStayExact) {
  // Renewed with 3 s while paused: the replayed renewals carry deadlines that have passed (sent
  // as DEL, expired on arrival) and the next INCR finds the copy gone and restores it again, so
  // this one passes with the records of §12.2 step 5 ignored too: it shows no loss in that
  // path, not the records; the next (disabled) test isolates them.
  killedDuringTheCatchUp("3");
}

// Renewed with 120 s while paused: the target's copies still end (their 3 s deadline passed
// while the pipeline was paused) and are restored, but a replayed renewal is now a live
// deadline and a replayed INCR finds the restored copy: only the record on the target (the key
// holds the stream up to X) keeps the INCRs up to X from being applied twice (with the records
// ignored on replay: 300 of 300 counters wrong, 85 against 48). Where the kill lands before
// some restores (1 run in 3 beside a CPU hog, before §12.2 step 5 read back what a replay
// stamp covers: 90 of 300 counters one short), the next test's path restores them.
TEST_F(SlidingTest, KilledDuringTheCatchUpTheRecordsKeepReplayedIncrementsOut) {
  killedDuringTheCatchUp("120");
}

// §12.2 step 5, made certain: the catch-up's read-backs cannot reach the source (`CLIENT PAUSE
// ... ALL` holds every client but a replica's link), so the agent is killed with guarded INCRs
// applied on the target — each one's copy gone, a fragment made, the group's replay stamp
// written — and not one copy restored. A checkpoint every 100 ms: one may be due between a
// guarded write and its reply. Before the fix every counter whose guard answered 0 kept its
// fragment: the replay skipped the stamped units (or started from a checkpoint past them) and
// the requests had died with the process.
TEST_F(SlidingTest, KilledBeforeAnyRestoreLandsTheCountersStayExact) {
  std::string text = yaml();
  const std::string every = "checkpoint_interval: 1s";
  text.replace(text.find(every), every.size(), "checkpoint_interval: 100ms");
  startAgent(text);
  std::vector<std::string> keys;
  for (int i = 0; i < 300; ++i) keys.push_back("rate:" + std::to_string(i));
  auto round = [&](const std::string& ttl) { incrementAndExpire(keys, ttl); };
  round("3");
  ASSERT_TRUE(caughtUp());
  const uint64_t caught_up = sourceOffset();
  ASSERT_NO_FATAL_FAILURE(pause());
  // 5 s of INCRs, each renewing for 2 minutes: the target's copies (3 s) expire meanwhile, and
  // no replayed renewal carries a deadline that has passed (sent as DEL, the next INCR would
  // find the copy gone and restore it: that path restores without step 5).
  for (int i = 0; i < 26; ++i) {
    round("120");
    std::this_thread::sleep_for(200ms);
  }
  const std::string stamp = std::string("__xdcr_marker__:") + kPipeline + ":applied";
  const std::string records = std::string("__xdcr_marker__:") + kPipeline + ":restored";
  auto stampOffset = [&]() -> uint64_t {
    const RespValue v = target_.client().command({"GET", stamp});
    if (v.isNull()) return 0;
    return std::stoull(v.str().substr(v.str().rfind(':') + 1));
  };
  const auto pause_ms = 8000;
  ASSERT_FALSE(
      source_.client().command({"CLIENT", "PAUSE", std::to_string(pause_ms), "ALL"}).isError());
  const auto paused_at = std::chrono::steady_clock::now();
  ASSERT_NO_FATAL_FAILURE(resume());
  ASSERT_TRUE(waitUntil([&] { return stampOffset() > caught_up; }, 5s, 20ms)) << agent_->logTail();
  std::this_thread::sleep_for(1s);  // what was sent lands; the read back waits on the source
  // The precondition, read from the target alone (the paused source would hold a read): no
  // restore landed, and counters that are not the source's 27 (1 + 26 INCRs).
  const int64_t landed = target_.client().command({"HLEN", records}).integer();
  RespCommand mget = {"MGET"};
  mget.insert(mget.end(), keys.begin(), keys.end());
  int wrong = 0;
  const RespValue counters = target_.client().command(mget);
  for (const RespValue& v : counters.array()) {
    wrong += v.isNull() || v.str() != "27" ? 1 : 0;
  }
  std::cout << "[ sliding  ] killed with the read-backs held by CLIENT PAUSE: " << landed
            << " restores landed, " << wrong << " of " << keys.size()
            << " counters on the target not the source's\n";
  ASSERT_EQ(landed, 0) << "a restore landed: the source's pause did not hold the read back";
  ASSERT_GT(wrong, 0);
  ASSERT_LT(std::chrono::steady_clock::now() - paused_at, std::chrono::milliseconds(pause_ms));
  agent_->kill();
  std::this_thread::sleep_until(paused_at + std::chrono::milliseconds(pause_ms + 200));
  startAgent(text);
  ASSERT_TRUE(caughtUp(60s)) << agent_->logTail();
  const Diff d = compare(target_, keys);
  std::cout << "[ sliding  ] after the restart: " << d.summary() << "; "
            << restored("unconfirmed_before_restart") << " read back as unconfirmed\n";
  EXPECT_TRUE(d.ok()) << d.summary() << "\n" << agent_->logTail(30);
  EXPECT_EQ(unrecoverable(), 0);
}

// §12.2 step 6: the source's ACK waits for the repairs. The agent writes its target through a
// WAN proxy 2 s each way, so a restore lands 2 s after it is sent, while the agent ACKs the
// source at least once a second. The moment the source shows the agent at its offset (what
// `WAIT` counts), the target must hold every counter whole — not the fragment an INCR made of a
// copy that had ended, with its restore still on the way.
TEST_F(SlidingTest, TheSourceSeesTheAgentCaughtUpOnlyOnceTheRestoresLanded) {
  auto wan = WanProxy::start(target_.port(), {.name = "target"});
  startAgent(yaml("", 0, "", wan->port()));
  std::vector<std::string> keys;
  for (int i = 0; i < 200; ++i) keys.push_back("rate:" + std::to_string(i));
  auto round = [&](const std::string& ttl) { incrementAndExpire(keys, ttl); };
  round("3");
  ASSERT_TRUE(caughtUp());
  wan->setDelay(2000ms);
  uint64_t want = 0;
  {
    // Stopped, not paused: a stopped agent ACKs nothing, so the source's view of it stays
    // where it was until it has applied what follows.
    StoppedProcess stopped(agent_->pid());
    // 4 s of INCRs renewing for 2 minutes: the target's copies (3 s) end meanwhile.
    for (int i = 0; i < 20; ++i) {
      round("120");
      std::this_thread::sleep_for(200ms);
    }
    want = sourceOffset();
  }
  // The source's view of the agent: its replica offset (the replica that is not the fixture's
  // native one), polled every 10 ms.
  RespClient src = source_.client();
  auto agentOffset = [&]() -> int64_t {
    for (const auto& r : replicasOf(src.info("replication"))) {
      if (r.port != replica_.port()) return r.offset;
    }
    return -1;
  };
  ASSERT_TRUE(waitUntil([&] { return agentOffset() >= static_cast<int64_t>(want); }, 60s, 10ms))
      << agent_->logTail();
  RespCommand mget = {"MGET"};
  mget.insert(mget.end(), keys.begin(), keys.end());
  const RespValue counters = target_.client().command(mget);
  int wrong = 0;
  for (const RespValue& v : counters.array()) {
    wrong += v.isNull() || v.str() != "21" ? 1 : 0;  // 1 + 20 INCRs
  }
  std::cout << "[ sliding  ] the moment the source saw the agent at its offset: " << wrong << " of "
            << keys.size() << " counters on the target not the source's; restored "
            << restored("expired_before_write") << "\n";
  EXPECT_EQ(wrong, 0) << "the source was ACKed past writes whose restores had not landed";
  EXPECT_GE(restored("expired_before_write"), static_cast<double>(keys.size()));
  Diff d = compare(target_, keys);
  EXPECT_TRUE(d.ok()) << d.summary();
  EXPECT_EQ(unrecoverable(), 0);
}

}  // namespace
}  // namespace xdcr::test
