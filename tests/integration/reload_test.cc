// SIGHUP: a broken file keeps the running configuration; a change to one pipeline restarts only
// that pipeline (resuming from its checkpoint) while the others go on streaming. Each with
// agent.threads 1 and 3 (the reload runs on the first thread, the link on another).

#include <gtest/gtest.h>
#include <signal.h>

#include <nlohmann/json.hpp>

#include "replicator/admin_server.h"
#include "tests/support/harness.h"

namespace xdcr::test {
namespace {

using namespace std::chrono_literals;

class ReloadTest : public ::testing::TestWithParam<int> {
 protected:
  std::string yaml(const std::string& p1_exclude) {
    auto addr = [](const RedisServer& s) {
      return "\"127.0.0.1:" + std::to_string(s.port()) + "\"";
    };
    return "agent: {state_dir: " + dir_.file("state") + ", admin_listen: \"" + admin_ +
           "\", threads: " + std::to_string(GetParam()) + "}\n" +
           "clusters:\n"
           "  src: {type: redis, address: " +
           addr(source_) +
           "}\n"
           "  dst1: {type: redis, address: " +
           addr(target1_) +
           "}\n"
           "  dst2: {type: redis, address: " +
           addr(target2_) +
           "}\n"
           "pipelines:\n"
           "  - {name: p1, source: src, target: dst1, filters: {exclude_keys: [" +
           p1_exclude +
           "]}}\n"
           "  - {name: p2, source: src, target: dst2}\n";
  }
  void SetUp() override {
    admin_ = "127.0.0.1:" + std::to_string(freePort());
    config_ = dir_.file("xdcr.yaml");
    writeFileText(config_, yaml(""));
    agent_ = std::make_unique<AgentProcess>(config_, dir_.file("agent.log"));
    ASSERT_TRUE(waitUntil([&] { return ready(); }, 30s)) << agent_->logTail();
  }
  bool ready() {
    auto r = replicator::adminGet(admin_, "/readyz", 2s);
    return r && r->first == 200;
  }
  nlohmann::json pipelineStatus(const std::string& name) {
    auto r = replicator::adminGet(admin_, "/status", 2s);
    if (!r) {
      ADD_FAILURE() << r.error().message;
      return {};
    }
    const auto doc = nlohmann::json::parse(r->second);  // a named object: the loop views into it
    for (const auto& p : doc["pipelines"]) {
      if (p["name"] == name) return p;
    }
    ADD_FAILURE() << "no pipeline " << name << " in /status: " << r->second;
    return {};
  }
  bool arrives(RedisServer& t, const std::string& key) {
    return waitUntil([&] { return t.client().command({"EXISTS", key}).integer() == 1; }, 10s);
  }
  void hup() { ASSERT_EQ(::kill(agent_->pid(), SIGHUP), 0); }

  TempDir dir_{"xdcr-reload"};
  RedisServer source_{{"--repl-diskless-sync-delay", "0"}};
  RedisServer target1_, target2_;
  std::string admin_, config_;
  std::unique_ptr<AgentProcess> agent_;
};

TEST_P(ReloadTest, ABrokenFileKeepsTheRunningConfiguration) {
  writeFileText(config_, "pipelines: [ {name: p1, source: nowhere\n");  // not even YAML
  hup();
  ASSERT_TRUE(waitUntil(
      [&] {
        return agent_->logText().find("keeping the running configuration") != std::string::npos;
      },
      10s))
      << agent_->logTail();
  EXPECT_TRUE(agent_->running());
  source_.client().command({"SET", "after-bad-reload", "v"});
  EXPECT_TRUE(arrives(target1_, "after-bad-reload"));
  EXPECT_TRUE(arrives(target2_, "after-bad-reload"));
  EXPECT_TRUE(ready());
}

TEST_P(ReloadTest, ChangingOnePipelinesFiltersRestartsOnlyThatOne) {
  source_.client().command({"SET", "before", "v"});
  ASSERT_TRUE(arrives(target1_, "before"));
  ASSERT_TRUE(arrives(target2_, "before"));
  const auto p2_before = pipelineStatus("p2");
  const int64_t partial_before = std::stoll(source_.client().info("stats")["sync_partial_ok"]);
  const int64_t full_before = std::stoll(source_.client().info("stats")["sync_full"]);

  writeFileText(config_, yaml("\"^secret:\""));
  hup();
  ASSERT_TRUE(waitUntil(
      [&] {
        return agent_->logText().find("reload: " + config_ + " applied") != std::string::npos;
      },
      10s))
      << agent_->logTail();
  ASSERT_TRUE(waitUntil([&] { return ready(); }, 30s)) << agent_->logTail();

  RespClient src = source_.client();
  src.command({"SET", "secret:1", "v"});
  src.command({"SET", "public:1", "v"});
  EXPECT_TRUE(arrives(target1_, "public:1"));
  EXPECT_TRUE(arrives(target2_, "secret:1"));  // p2 has no filter
  EXPECT_EQ(target1_.client().command({"EXISTS", "secret:1"}).integer(), 0)
      << "p1 did not pick up its new exclude_keys";

  const std::string log = agent_->logText();
  EXPECT_NE(log.find("reload: pipeline p1 changed"), std::string::npos) << log;
  EXPECT_EQ(log.find("reload: pipeline p2"), std::string::npos) << log;
  EXPECT_EQ(log.find("pipeline p2: stopped"), std::string::npos) << "p2 was restarted\n" << log;
  // p1 resumed from its checkpoint; nothing did a full sync.
  EXPECT_EQ(std::stoll(source_.client().info("stats")["sync_partial_ok"]), partial_before + 1);
  EXPECT_EQ(std::stoll(source_.client().info("stats")["sync_full"]), full_before);
  // p2 kept its session: the same counters, still streaming.
  auto p2_after = pipelineStatus("p2");
  EXPECT_EQ(p2_after["state"], "streaming");
  EXPECT_EQ(p2_after["last_error"], p2_before["last_error"]);
  // With threads: 1 every link is on the first thread. With 3: the shared link started on thread
  // 1 and keeps p2; p1's replacement is a new pipeline, on a new link, on the next thread (2).
  EXPECT_EQ(p2_after["link"]["thread"], GetParam() > 1 ? 1 : 0) << p2_after.dump();
  EXPECT_EQ(pipelineStatus("p1")["link"]["thread"], GetParam() > 1 ? 2 : 0);
}

INSTANTIATE_TEST_SUITE_P(Threads, ReloadTest, ::testing::Values(1, 3),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return std::to_string(i.param) + "threads";
                         });

}  // namespace
}  // namespace xdcr::test
