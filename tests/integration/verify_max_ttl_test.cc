// `xdcr-agent verify` where the target has a max_ttl (issue 18, finding 4): a source key absent
// on the target is a difference unless the rules prove its copy has expired — the source key
// idle (OBJECT IDLETIME) and the pipeline's last full sync (its checkpoint) both over max_ttl +
// tolerance ago; examples are listed either way. A real agent replicates from a source into a
// target whose db 0 has max_ttl 1 h, and whose collection short:* has max_ttl 2 s:
//  (a) long:k (no TTL on the source) deleted directly on the target: missing, exit 1 (before the
//      fix: exit 0, "absent where max_ttl may have ended them");
//  (b) short:k, its copy expired 2 s after its write, the source key idle for 5 s: expired by
//      max_ttl, exit 0, listed; on Redis 7.0 (no CLIENT NO-TOUCH) verify's own reads reset the
//      idle time, so a rerun right away reports it missing, as the output's hint says;
//  (c) on a server with CLIENT NO-TOUCH (the server matrix's Redis 8 and Valkey 9): two runs in
//      a row give the same verdict, and the source key's idle time is left as it was.

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/harness.h"
#include "tests/support/server_matrix.h"

namespace xdcr::test {
namespace {

using namespace std::chrono_literals;

/** The example of `kind` whose source key is `key`, or null. */
const nlohmann::json* example(const nlohmann::json& report, const std::string& kind,
                              const std::string& key) {
  if (!report.contains("examples")) return nullptr;
  for (const auto& e : report["examples"]) {
    if (e.value("kind", "") == kind && e.value("source", "") == "db0 \"" + key + "\"") return &e;
  }
  return nullptr;
}

class VerifyMaxTtlTest : public ::testing::Test {
 protected:
  /** Starts the source (`matrix`: a server matrix name; "" the host's redis-server), the
   *  target and the agent; false (skipped or failed) when that server is not provisioned. */
  bool start(const std::string& matrix = "") {
    const std::vector<std::string> args = {"--repl-diskless-sync-delay", "0"};
    if (matrix.empty()) {
      source_ = std::make_unique<RedisServer>(args);
    } else {
      std::string why;
      auto s = findMatrixServer(matrix, &why);
      if (!s) {
        if (matrixRequired()) {
          ADD_FAILURE() << why;
        } else {
          skip_ = why;
        }
        return false;
      }
      source_ = RedisServer::startBinary(s->binary, args);
    }
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
                               "        max_ttl: 1h\n"
                               "        collections: [{name: short, keys: \"short:*\", "
                               "max_ttl: 2s}]\n"
                               "pipelines:\n"
                               "  - {name: p, source: src, target: dst}\n");
    agent_ = std::make_unique<AgentProcess>(config_, dir_.file("agent.log"));
    // The first checkpoint after the (empty) full sync: from here on the key below is written
    // by the stream, after the last full sync.
    const std::string ckpt = dir_.file("state") + "/p.ckpt";
    if (!waitUntil([&] { return std::filesystem::exists(ckpt); }, 30s)) {
      ADD_FAILURE() << "no checkpoint " << ckpt << "\n" << agent_->logTail();
      return false;
    }
    return true;
  }

  AgentCommandResult verify(const std::string& name, bool json = true) {
    std::vector<std::string> args = {"verify", "-c", config_, "-p", "p", "--rate", "0"};
    if (json) {
      args.push_back("-o");
      args.push_back("json");
    }
    AgentCommandResult r = runAgentCommand(args, dir_.file(name + ".out"));
    std::cout << "[ verify   ] " << name << ": exit " << r.exit_code << "\n"
              << r.output << std::endl;
    return r;
  }

  int64_t idle(const std::string& key) {
    // OBJECT touches no key: reading the idle time leaves it running.
    return source_->client().command({"OBJECT", "IDLETIME", key}).integer();
  }

  /** Writes `key` (no TTL) on the source and waits until the target has it with the deadline
   *  its collection's max_ttl gives. */
  void writeReplicated(const std::string& key) {
    source_->client().command({"SET", key, "v"});
    ASSERT_TRUE(waitAgentAcknowledgedAll(*source_, 20s));
    EXPECT_EQ(target_->client().command({"EXISTS", key}).integer(), 1);
    EXPECT_GT(target_->client().command({"PEXPIRETIME", key}).integer(), 0);
  }

  /** Waits until the target's copy of `key` has expired and the source key has been idle for
   *  `idle_s` s (the copy's max_ttl 2 s + tolerance 1 s, proved with IDLETIME's 1 s grain). */
  void waitExpiredAndIdle(const std::string& key, int64_t idle_s) {
    ASSERT_TRUE(waitUntil(
        [&] {
          return target_->client().command({"EXISTS", key}).integer() == 0 && idle(key) >= idle_s;
        },
        20s, 100ms))
        << "idle " << idle(key);
  }

  std::string skip_;
  TempDir dir_{"xdcr-verify-max-ttl"};
  std::unique_ptr<RedisServer> source_, target_;
  std::string config_;
  std::unique_ptr<AgentProcess> agent_;
};

TEST_F(VerifyMaxTtlTest, AKeyDeletedOnTheTargetIsMissingUnderAMaxTtl) {
  ASSERT_TRUE(start());
  ASSERT_NO_FATAL_FAILURE(writeReplicated("long:k"));
  source_->client().command({"SET", "long:kept", "v"});
  ASSERT_TRUE(waitAgentAcknowledgedAll(*source_, 20s));
  ASSERT_EQ(target_->client().command({"DEL", "long:k"}).integer(), 1);

  AgentCommandResult r = verify("missing");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.report.value("checked", -1), 2);
  EXPECT_EQ(r.report.value("missing", -1), 1);
  EXPECT_EQ(r.report.value("ended_by_max_ttl", -1), 0);
  const nlohmann::json* e = example(r.report, "missing", "long:k");
  ASSERT_NE(e, nullptr) << r.output;
  const std::string detail = e->value("detail", "");
  EXPECT_NE(detail.find("absent on the target"), std::string::npos) << detail;
  EXPECT_NE(detail.find("max_ttl 3600 s"), std::string::npos) << detail;
  EXPECT_NE(detail.find("cannot have expired"), std::string::npos) << detail;

  // The table names it too.
  r = verify("missing-text", false);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("1 missing"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("missing   db0 \"long:k\""), std::string::npos) << r.output;
}

TEST_F(VerifyMaxTtlTest, ACopyMaxTtlEndedIsListedAsExpired) {
  ASSERT_TRUE(start());
  ASSERT_NO_FATAL_FAILURE(writeReplicated("short:k"));
  ASSERT_NO_FATAL_FAILURE(waitExpiredAndIdle("short:k", 5));

  AgentCommandResult r = verify("expired");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.report.value("missing", -1), 0);
  EXPECT_EQ(r.report.value("ended_by_max_ttl", -1), 1);
  const nlohmann::json* e = example(r.report, "expired", "short:k");
  ASSERT_NE(e, nullptr) << r.output;
  EXPECT_NE(e->value("detail", "").find("expired by max_ttl 2 s"), std::string::npos)
      << e->value("detail", "");
  ASSERT_TRUE(r.report.contains("max_ttl_evidence")) << r.output;
  EXPECT_TRUE(r.report["max_ttl_evidence"].contains("last_full_sync_by_ms")) << r.output;

  // Redis 7.0 has no CLIENT NO-TOUCH: that run's GET reset the source key's idle time, so right
  // away nothing proves the copy expired: missing, and the table says why.
  ASSERT_LE(idle("short:k"), 1);
  r = verify("rerun", false);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("missing   db0 \"short:k\""), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("a rerun within max_ttl reports such keys"), std::string::npos)
      << r.output;
}

class VerifyMaxTtlNoTouchTest : public VerifyMaxTtlTest,
                                public ::testing::WithParamInterface<std::string> {};

TEST_P(VerifyMaxTtlNoTouchTest, TwoRunsInARowGiveTheSameVerdict) {
  if (!start(GetParam())) {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    return;
  }
  ASSERT_NO_FATAL_FAILURE(writeReplicated("short:k"));
  ASSERT_NO_FATAL_FAILURE(waitExpiredAndIdle("short:k", 5));
  for (const char* run : {"first", "second"}) {
    const int64_t before = idle("short:k");
    AgentCommandResult r = verify(run);
    EXPECT_EQ(r.exit_code, 0) << run;
    EXPECT_EQ(r.report.value("ended_by_max_ttl", -1), 1) << run;
    EXPECT_NE(example(r.report, "expired", "short:k"), nullptr) << run << ": " << r.output;
    EXPECT_EQ(r.report["max_ttl_evidence"].value("source_idle_times_kept", false), true)
        << r.output;
    EXPECT_GE(idle("short:k"), before) << run << ": verify reset the source key's idle time";
  }
}

INSTANTIATE_TEST_SUITE_P(Servers, VerifyMaxTtlNoTouchTest,
                         ::testing::Values(std::string("redis-8"), std::string("valkey-9")),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (c == '-' || c == '.') c = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace xdcr::test
