// `xdcr-agent verify` and `explain` on target collections with expiry policies beside max_ttl
// (expiry-semantics.md §8): they judge a key's target deadline with the agent's own decision
// (target::decide, the collection from MaxTtlPolicy::resolve), the source's value (its JSON
// fields) and max_lifetime's first-seen records read read-only from agent.state_dir.
//  (a) Redis target, one collection per policy (default_ttl, ttl_field, expire_at_field,
//      max_lifetime): after replication verify exits 0 with 0 ttl mismatches; a hash an HSET
//      created under default_ttl (no deadline on the target, §8.1 P-7) is counted "deadline not
//      checked", not passed silently; then three target deadlines changed by hand (PEXPIREAT
//      well off) make it exit 1 naming each.
//  (b) the same on memcached for default_ttl and max_lifetime.
//  (c) explain on a ttl_field key prints the policy, the field read and its deadline.

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/harness.h"

namespace xdcr::test {
namespace {

using namespace std::chrono_literals;

constexpr int64_t kS = 1000;
constexpr int64_t kDay = 86400 * kS;

const nlohmann::json* example(const nlohmann::json& report, const std::string& kind,
                              const std::string& key) {
  if (!report.contains("examples")) return nullptr;
  for (const auto& e : report["examples"]) {
    if (e.value("kind", "") == kind && e.value("source", "") == "db0 \"" + key + "\"") return &e;
  }
  return nullptr;
}

std::string collections() {
  return "    buckets:\n"
         "      - db: 0\n"
         "        collections:\n"
         "          - {name: carts, keys: \"cart:*\", default_ttl: 1h}\n"
         "          - {name: docs, keys: \"doc:*\", ttl_field: ttl, default_ttl: -1}\n"
         "          - {name: sess, keys: \"sess:*\", expire_at_field: expireAt}\n"
         "          - {name: tokens, keys: \"tok:*\", max_lifetime: 1h}\n";
}

AgentCommandResult run(const TempDir& dir, const std::string& name, std::vector<std::string> args) {
  AgentCommandResult r = runAgentCommand(args, dir.file(name + ".out"));
  std::cout << "[ " << args[0] << " ] " << name << ": exit " << r.exit_code << "\n"
            << r.output << std::endl;
  return r;
}

class VerifyPolicies : public ::testing::Test {
 protected:
  void SetUp() override {
    source_ =
        std::make_unique<RedisServer>(std::vector<std::string>{"--repl-diskless-sync-delay", "0"});
    target_ = std::make_unique<RedisServer>();
    config_ = dir_.file("xdcr.yaml");
    writeFileText(config_,
                  "agent: {state_dir: \"" + dir_.file("state") +
                      "\"}\n"
                      "clusters:\n"
                      "  src: {type: redis, address: \"" +
                      source_->address() +
                      "\"}\n"
                      "  dst:\n"
                      "    type: redis\n"
                      "    address: \"" +
                      target_->address() + "\"\n" + collections() +
                      "pipelines:\n"
                      "  - {name: p, source: src, target: dst, checkpoint_interval: 1s}\n");
    agent_ = std::make_unique<AgentProcess>(config_, dir_.file("agent.log"));
    const std::string ckpt = dir_.file("state") + "/p.ckpt";
    ASSERT_TRUE(waitUntil([&] { return std::filesystem::exists(ckpt); }, 30s))
        << "no checkpoint " << ckpt << "\n"
        << agent_->logTail();
  }

  void write(const std::vector<std::string>& cmd) {
    auto r = source_->client().command(cmd);
    EXPECT_FALSE(r.isError()) << r.toString();
  }
  AgentCommandResult verify(const std::string& name, bool json = true) {
    std::vector<std::string> args = {"verify", "-c", config_, "-p", "p", "--rate", "0"};
    if (json) {
      args.push_back("-o");
      args.push_back("json");
    }
    return run(dir_, name, args);
  }
  int64_t targetDeadline(const std::string& key) {
    return target_->client().command({"PEXPIRETIME", key}).integer();
  }

  TempDir dir_{"xdcr-verify-policies"};
  std::unique_ptr<RedisServer> source_, target_;
  std::string config_;
  std::unique_ptr<AgentProcess> agent_;
};

TEST_F(VerifyPolicies, RedisTargetDeadlinesFollowEachPolicy) {
  const int64_t now = unixTimeMs();
  const int64_t e3 = now + 600 * kS;
  write({"SET", "cart:1", "v"});                                               // now + 1 h
  write({"SET", "cart:2", "v", "PXAT", std::to_string(now + 5 * 3600 * kS)});  // E
  write({"HSET", "cart:h", "f", "v"});                                         // in place: none
  write({"SET", "doc:1", R"({"ttl":60})"});                                    // now + 60 s
  write({"SET", "doc:2", R"({"ttl":-1})"});                                    // none
  write({"SET", "doc:3", R"({"ttl":60})", "PXAT", std::to_string(e3)});        // now + 60 s
  write({"SET", "sess:1", "{\"expireAt\":" + std::to_string(now / 1000 + 300) + "}"});
  write({"SET", "sess:2", R"({"expireAt":"yesterday"})"});               // none
  write({"SET", "tok:1", "a"});                                          // first + 1 h
  write({"SET", "tok:2", "b", "PXAT", std::to_string(now + 600 * kS)});  // E
  ASSERT_TRUE(waitAgentAcknowledgedAll(*source_, 20s)) << agent_->logTail();
  for (const char* k : {"cart:1", "doc:1", "doc:3", "sess:1", "tok:1"}) {
    std::cout << k << ": target deadline " << targetDeadline(k) << " (now " << now << ")\n";
  }
  ASSERT_GT(targetDeadline("cart:1"), 0);
  ASSERT_EQ(targetDeadline("cart:h"), -1);

  AgentCommandResult r = verify("replicated");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.report.value("checked", -1), 10);
  EXPECT_EQ(r.report.value("ttl_mismatches", -1), 0);
  EXPECT_EQ(r.report.value("missing", -1), 0);
  EXPECT_EQ(r.report.value("value_mismatches", -1), 0);
  // The HSET-created hash: no deadline, where a whole-value write would give now + 1 h; an
  // in-place write keeps the target's deadline (§8.1), so verify cannot tell and says so.
  EXPECT_EQ(r.report.value("ttl_not_checked", -1), 1) << r.output;
  const nlohmann::json* nc = example(r.report, "not-checked", "cart:h");
  ASSERT_NE(nc, nullptr) << r.output;
  EXPECT_NE(nc->value("detail", "").find("policy depends on the last write kind"),
            std::string::npos)
      << nc->value("detail", "");
  EXPECT_EQ(r.report.value("first_seen_unknown", -1), 0) << r.output;

  // By hand, on the target: deadlines no write kind gives.
  RespClient dst = target_->client();
  dst.command({"PEXPIREAT", "cart:1", std::to_string(now + 10 * kDay)});  // > now + default_ttl
  dst.command({"PEXPIREAT", "doc:3", std::to_string(e3 + kDay)});         // > E
  dst.command({"PEXPIREAT", "tok:1", std::to_string(now + 10 * kDay)});   // > first + 1 h
  r = verify("tampered");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.report.value("ttl_mismatches", -1), 3) << r.output;
  for (const char* k : {"cart:1", "doc:3", "tok:1"}) {
    const nlohmann::json* e = example(r.report, "ttl", k);
    ASSERT_NE(e, nullptr) << k << "\n" << r.output;
    EXPECT_NE(e->value("detail", "").find("expected"), std::string::npos) << e->value("detail", "");
  }
  r = verify("tampered-text", false);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("ttl       db0 \"tok:1\""), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("deadline not checked"), std::string::npos) << r.output;
}

TEST_F(VerifyPolicies, ExplainShowsTheFieldDerivedDeadline) {
  write({"SET", "doc:1", R"({"ttl":60,"x":1})"});
  ASSERT_TRUE(waitAgentAcknowledgedAll(*source_, 20s)) << agent_->logTail();
  const int64_t before = unixTimeMs();
  AgentCommandResult r =
      run(dir_, "explain-json", {"explain", "-c", config_, "-p", "p", "doc:1", "-o", "json"});
  const int64_t after = unixTimeMs();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json& d = r.report["deadline"];
  const int64_t w = d.value("would_write_ms", int64_t{0});
  EXPECT_GE(w, before + 60 * kS - 1000) << r.output;
  EXPECT_LE(w, after + 60 * kS + 1000) << r.output;
  EXPECT_NE(d.value("rule", "").find("ttl_field"), std::string::npos) << r.output;
  ASSERT_TRUE(r.report.contains("policy")) << r.output;
  EXPECT_EQ(r.report["policy"].value("applied", ""), "ttl_field") << r.output;
  EXPECT_NE(r.report["policy"].value("fields_read", "").find("ttl = 60"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.report.value("verdict", ""), "in_sync") << r.output;

  r = run(dir_, "explain-table", {"explain", "-c", config_, "-p", "p", "doc:1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("policy"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ttl_field \"ttl\""), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ttl = 60"), std::string::npos) << r.output;
}

TEST(VerifyPoliciesMemcached, DefaultTtlAndMaxLifetime) {
  if (!memcachedAvailable()) GTEST_SKIP() << "memcached is not installed";
  TempDir dir("xdcr-verify-policies-mc");
  RedisServer source(std::vector<std::string>{"--repl-diskless-sync-delay", "0"});
  MemcachedServer mc;
  const std::string config = dir.file("xdcr.yaml");
  writeFileText(config, "agent: {state_dir: \"" + dir.file("state") +
                            "\"}\n"
                            "clusters:\n"
                            "  src: {type: redis, address: \"" +
                            source.address() +
                            "\"}\n"
                            "  mc:\n"
                            "    type: memcached\n"
                            "    address: \"" +
                            mc.address() + "\"\n" + collections() +
                            "pipelines:\n"
                            "  - {name: p, source: src, target: mc, dbs: {0: 0}, "
                            "checkpoint_interval: 1s}\n");
  AgentProcess agent(config, dir.file("agent.log"));
  RespClient src = source.client();
  const int64_t now = unixTimeMs();
  src.command({"SET", "cart:1", "v"});
  src.command({"SET", "cart:2", "v", "PXAT", std::to_string(now + 5 * 3600 * kS)});
  src.command({"SET", "tok:1", "a"});
  src.command({"SET", "fence", "1"});
  ASSERT_TRUE(waitUntil([&] { return mc.get("fence").present; }, 30s, 20ms)) << agent.logTail();
  std::cout << "memcached: cart:1 t=" << mc.get("cart:1").ttl_s
            << " cart:2 t=" << mc.get("cart:2").ttl_s << " tok:1 t=" << mc.get("tok:1").ttl_s
            << std::endl;
  const std::vector<std::string> args = {"verify", "-c", config, "-p",  "p",
                                         "--rate", "0",  "-o",   "json"};
  AgentCommandResult r = run(dir, "mc-replicated", args);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.report.value("checked", -1), 4);
  EXPECT_EQ(r.report.value("ttl_mismatches", -1), 0);
  EXPECT_EQ(r.report.value("missing", -1), 0);
  EXPECT_EQ(r.report.value("ttl_not_checked", -1), 0) << r.output;

  // By hand: memcached's absolute exptime 10 days ahead (memcached's STAT time clock).
  const int64_t far = mc.statTime() + 10 * 86400;
  EXPECT_EQ(mc.set("cart:1", "v", far), "HD");
  EXPECT_EQ(mc.set("tok:1", "a", far), "HD");
  r = run(dir, "mc-tampered", args);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.report.value("ttl_mismatches", -1), 2) << r.output;
  EXPECT_NE(example(r.report, "ttl", "cart:1"), nullptr) << r.output;
  EXPECT_NE(example(r.report, "ttl", "tok:1"), nullptr) << r.output;
}

}  // namespace
}  // namespace xdcr::test
