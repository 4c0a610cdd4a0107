// The admin server against a running agent: a known workload, then /metrics and /status are
// checked by name, label and value; operator pause/resume; /readyz during a drain; /config
// without the password.

#include <gtest/gtest.h>
#include <signal.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "replicator/admin_server.h"
#include "tests/support/harness.h"

namespace xdcr::test {
namespace {

using namespace std::chrono_literals;

constexpr const char* kPassword = "pw-4f1c9a77-never-printed";

class AdminTest : public ::testing::Test {
 protected:
  void SetUp() override {
    source_.client().command({"CONFIG", "SET", "requirepass", kPassword});
    admin_ = "127.0.0.1:" + std::to_string(freePort());
    config_ = dir_.file("xdcr.yaml");
    writeFileText(config_, "agent: {state_dir: " + dir_.file("state") + ", admin_listen: \"" +
                               admin_ +
                               "\"}\n"
                               "clusters:\n"
                               "  src: {type: redis, address: \"127.0.0.1:" +
                               std::to_string(source_.port()) + "\", password: \"" + kPassword +
                               "\"}\n"
                               "  dst:\n"
                               "    type: redis\n"
                               "    address: \"127.0.0.1:" +
                               std::to_string(target_.port()) +
                               "\"\n"
                               "    buckets: [{db: 0, max_ttl: 60s}]\n"
                               "pipelines:\n"
                               "  - {name: east-to-west, source: src, target: dst,\n"
                               "     filters: {exclude_keys: [\"^tmp:\"]}}\n");
    agent_ = std::make_unique<AgentProcess>(config_, dir_.file("agent.log"));
    ASSERT_TRUE(waitUntil([&] { return get("/readyz").first == 200; }, 30s)) << agent_->logTail();
  }

  RespClient src() {
    RespClient c = source_.client();
    c.command({"AUTH", kPassword});
    return c;
  }
  std::pair<int, std::string> request(const std::string& method, const std::string& path) {
    auto r = replicator::adminRequest(admin_, method, path, 5s);
    return r ? *r : std::pair<int, std::string>{-1, r.error().message};
  }
  std::pair<int, std::string> get(const std::string& path) { return request("GET", path); }
  nlohmann::json status() { return nlohmann::json::parse(get("/status").second); }
  /** Waits until the target has acknowledged the source's whole stream. */
  void waitCaughtUp() {
    RespClient c = src();
    ASSERT_TRUE(waitUntil(
        [&] {
          auto master = std::stoull(c.info("replication")["master_repl_offset"]);
          return status()["pipelines"][0]["applied_offset"].get<uint64_t>() == master;
        },
        20s))
        << get("/status").second;
  }
  /** The value of one sample line of /metrics, or -1. */
  double metric(const std::string& text, const std::string& sample) {
    std::regex re("(^|\n)" +
                  std::regex_replace(sample, std::regex(R"([{}\[\]().*+?^$|\\])"), R"(\$&)") +
                  " ([-0-9.e+]+)");
    std::smatch m;
    return std::regex_search(text, m, re) ? std::stod(m[2]) : -1;
  }

  TempDir dir_{"xdcr-admin"};
  RedisServer source_{{"--repl-diskless-sync-delay", "0"}};
  RedisServer target_;
  std::string admin_, config_;
  std::unique_ptr<AgentProcess> agent_;
};

TEST_F(AdminTest, MetricsAndStatusReportAKnownWorkload) {
  RespClient c = src();
  std::vector<RespCommand> w;
  for (int i = 0; i < 100; ++i) w.push_back({"SET", "k:" + std::to_string(i), "v", "EX", "1000"});
  for (int i = 0; i < 10; ++i) w.push_back({"SET", "tmp:" + std::to_string(i), "v"});
  for (int i = 0; i < 20; ++i) w.push_back({"DEL", "k:" + std::to_string(i)});
  c.pipeline(w);
  ASSERT_NO_FATAL_FAILURE(waitCaughtUp());
  std::this_thread::sleep_for(1500ms);  // one checkpoint interval

  auto [code, text] = get("/metrics");
  ASSERT_EQ(code, 200);
  const std::string p = "pipeline=\"east-to-west\"";
  EXPECT_EQ(metric(text, "xdcr_source_events_total{" + p + ",kind=\"mutation\"}"), 110) << text;
  EXPECT_EQ(metric(text, "xdcr_source_events_total{" + p + ",kind=\"deletion\"}"), 20);
  EXPECT_EQ(metric(text, "xdcr_filtered_total{" + p + ",reason=\"key\"}"), 10);
  EXPECT_EQ(metric(text, "xdcr_expiry_clamped_total{" + p + "}"), 100);  // 1000 s -> 60 s
  EXPECT_EQ(metric(text, "xdcr_target_writes_total{" + p + ",op=\"set\"}"), 100);
  EXPECT_EQ(metric(text, "xdcr_target_writes_total{" + p + ",op=\"delete\"}"), 20);
  EXPECT_EQ(metric(text, "xdcr_full_syncs_total{" + p + "}"), 1);
  EXPECT_GE(metric(text, "xdcr_checkpoints_total{" + p + "}"), 1);
  EXPECT_EQ(metric(text, "xdcr_checkpoint_failures_total{" + p + "}"), 0);
  EXPECT_EQ(metric(text, "xdcr_backlog_bytes{" + p + "}"), 0);
  double lag = metric(text, "xdcr_replication_lag_seconds{" + p + "}");
  EXPECT_GE(lag, 0);
  EXPECT_LT(lag, 5);
  EXPECT_NE(text.find("xdcr_build_info{version=\""), std::string::npos);

  auto s = status();
  const auto& ps = s["pipelines"][0];
  EXPECT_EQ(ps["name"], "east-to-west");
  EXPECT_EQ(ps["state"], "streaming");
  EXPECT_EQ(ps["backlog_bytes"], 0);
  EXPECT_EQ(ps["applied_offset"], ps["source_offset"]);
  EXPECT_EQ(ps["last_checkpoint"]["offset"], ps["applied_offset"]);
  EXPECT_EQ(ps["full_sync"]["active"], false);
  EXPECT_EQ(s["draining"], false);

  // The password is in the config, never in what the agent shows or logs.
  auto [ccode, config] = get("/config");
  EXPECT_EQ(ccode, 200);
  EXPECT_NE(config.find("<redacted>"), std::string::npos) << config;
  for (const std::string& shown : {config, text, get("/status").second, agent_->logText()}) {
    EXPECT_EQ(shown.find(kPassword), std::string::npos);
  }
}

// Issue 18, finding 7: HEAD answered 404, and `status --admin http://HOST:PORT` (the URL the
// agent logs) failed. Now HEAD answers what GET would without the body, and the URL is accepted.
TEST_F(AdminTest, HeadAndTheLoggedUrlAreAnswered) {
  for (const char* path : {"/status", "/healthz", "/readyz", "/metrics"}) {
    const auto [code, body] = request("HEAD", path);
    EXPECT_EQ(code, 200) << "HEAD " << path << ": " << body;
    EXPECT_TRUE(body.empty()) << "HEAD " << path << " carried a body: " << body.substr(0, 80);
  }
  EXPECT_EQ(request("HEAD", "/nothing").first, 404);

  auto url = replicator::adminRequest("http://" + admin_ + "/", "GET", "/healthz", 5s);
  ASSERT_TRUE(url) << url.error().message;
  EXPECT_EQ(url->first, 200);
  const AgentCommandResult status = runAgentCommand(
      {"status", "--admin", "http://" + admin_, "-o", "json"}, dir_.file("status.out"), 30s);
  EXPECT_EQ(status.exit_code, 0) << status.output;
  EXPECT_TRUE(status.report.contains("pipelines")) << status.output;
}

TEST_F(AdminTest, OperatorPauseHoldsWritesUntilResume) {
  auto [code, body] = request("POST", "/pipelines/east-to-west/pause");
  ASSERT_EQ(code, 200) << body;
  EXPECT_EQ(status()["pipelines"][0]["state"], "paused");
  EXPECT_EQ(status()["pipelines"][0]["paused_reason"], "operator");
  EXPECT_EQ(get("/readyz").first, 503);
  src().command({"SET", "during-pause", "v"});
  std::this_thread::sleep_for(1500ms);
  RespClient dst = target_.client();
  EXPECT_EQ(dst.command({"EXISTS", "during-pause"}).integer(), 0) << "a paused pipeline wrote";
  ASSERT_EQ(request("POST", "/pipelines/east-to-west/resume").first, 200);
  EXPECT_TRUE(waitUntil(
      [&] {
        return dst.command({"EXISTS", "during-pause"}).integer() == 1;
      },
      10s));
  EXPECT_EQ(get("/readyz").first, 200);
  EXPECT_EQ(request("POST", "/pipelines/nope/pause").first, 404);
  EXPECT_EQ(request("GET", "/pipelines/east-to-west/pause").first, 405);
}

TEST_F(AdminTest, ReadyzTurns503WhileDraining) {
  // A target that does not answer keeps the drain going long enough to look at it.
  ASSERT_EQ(::kill(target_.pid(), SIGSTOP), 0);
  src().command({"SET", "in-flight", "v"});
  // In flight: received by the agent, not yet acknowledged by the (stopped) target.
  ASSERT_TRUE(
      waitUntil([&] { return status()["pipelines"][0]["backlog_bytes"].get<uint64_t>() > 0; }, 10s))
      << get("/status").second;
  ASSERT_EQ(::kill(agent_->pid(), SIGTERM), 0);
  std::pair<int, std::string> ready;
  bool draining = waitUntil(
      [&] {
        ready = get("/readyz");
        return ready.first == 503 && ready.second.find("draining") != std::string::npos;
      },
      5s, 20ms);
  ::kill(target_.pid(), SIGCONT);
  EXPECT_TRUE(draining) << ready.first << " " << ready.second;
  // No second signal (that would mean "exit at once"): the drain finishes by itself.
  ASSERT_TRUE(waitUntil([&] { return !agent_->running(); }, 40s)) << agent_->logTail();
  ASSERT_TRUE(agent_->exitStatus().has_value());
  EXPECT_TRUE(agent_->exitStatus()->success()) << agent_->exitStatus()->describe() << "\n"
                                               << agent_->logTail();
  EXPECT_EQ(target_.client().command({"EXISTS", "in-flight"}).integer(), 1)
      << "the drain did not deliver what was in flight";
}

TEST_F(AdminTest, JsonLogsAreOneObjectPerLineWithoutSecrets) {
  ASSERT_TRUE(agent_->terminate().success());
  AgentProcess json_agent(config_, dir_.file("agent-json.log"), {"--log-format", "json"});
  ASSERT_TRUE(waitUntil([&] { return get("/readyz").first == 200; }, 30s)) << json_agent.logTail();
  src().command({"SET", "k", "v"});
  ASSERT_TRUE(json_agent.terminate().success());
  std::istringstream lines(json_agent.logText());
  std::string line;
  int n = 0, about_the_pipeline = 0, about_the_source = 0, about_the_target = 0;
  while (std::getline(lines, line)) {
    ++n;
    nlohmann::json j;
    ASSERT_NO_THROW(j = nlohmann::json::parse(line)) << line;
    EXPECT_TRUE(j.contains("ts") && j.contains("level") && j.contains("msg")) << line;
    EXPECT_EQ(line.find(kPassword), std::string::npos) << line;
    // Fields a log system can select on (issue 18, finding 7): every line that starts with
    // "pipeline NAME:" has it as a field, and the cluster and node it names.
    const std::string msg = j.value("msg", "");
    if (msg.rfind("pipeline east-to-west:", 0) == 0) {
      EXPECT_EQ(j.value("pipeline", ""), "east-to-west") << line;
      ++about_the_pipeline;
    }
    if (j.value("cluster", "") == "src") {
      EXPECT_EQ(j.value("cluster_role", ""), "source") << line;
      EXPECT_EQ(j.value("node", ""), "127.0.0.1:" + std::to_string(source_.port())) << line;
      ++about_the_source;
    }
    if (j.value("cluster", "") == "dst") {
      EXPECT_EQ(j.value("node", ""), "127.0.0.1:" + std::to_string(target_.port())) << line;
      ++about_the_target;
    }
  }
  EXPECT_GE(n, 4);  // start, full sync, streaming, stop at least
  EXPECT_GE(about_the_pipeline, 3);
  EXPECT_GE(about_the_source, 1);
  EXPECT_GE(about_the_target, 1);
}

}  // namespace
}  // namespace xdcr::test
