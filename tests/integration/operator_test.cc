// What an operator relies on (issue 18), each against a running agent and real servers:
//  - lag and backlog tell the truth while the target is down and while a pipeline is paused
//    (they counted only what the agent had received: 0, and 59 B with the source 3.2 MB ahead);
//  - a pause outlives a restart and a reload; a resync on demand copies what a widened filter
//    now selects; counters survive the restart of a pipeline by a reload or a resync;
//  - a failed reload shows in /metrics and /config, and /config shows what runs;
//  - agent.watch_config applies an edited file without a signal (a ConfigMap);
//  - a full sync is never silent for more than progress_report (5 s), stalled or not, and
//    /status shows its time so far, rate and ETA.

#include <gtest/gtest.h>
#include <signal.h>

#include <fmt/format.h>
#include <cmath>
#include <ctime>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>

#include "replicator/admin_server.h"
#include "tests/support/agent_command.h"
#include "tests/support/dataset.h"
#include "tests/support/harness.h"
#include "tests/support/wan_proxy.h"

namespace xdcr::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr const char* kPipeline = "east-to-west";

class OperatorTest : public ::testing::Test {
 protected:
  /** The config: src -> dst, keys matching `exclude` (a YAML list's inside) not replicated. */
  std::string yaml(const std::string& exclude, const std::string& agent_extra = "",
                   const std::string& pipeline_extra = "") {
    return "agent: {state_dir: " + dir_.file("state") + ", admin_listen: \"" + admin_ + "\"" +
           agent_extra +
           "}\n"
           "clusters:\n"
           "  src: {type: redis, address: \"127.0.0.1:" +
           std::to_string(source_port_ != 0 ? source_port_ : source_.port()) +
           "\"}\n"
           "  dst: {type: redis, address: \"127.0.0.1:" +
           std::to_string(target_.port()) +
           "\"}\n"
           "pipelines:\n"
           "  - {name: " +
           kPipeline + ", source: src, target: dst, checkpoint_interval: 500ms" + pipeline_extra +
           ", filters: {exclude_keys: [" + exclude + "]}}\n";
  }
  void SetUp() override {
    admin_ = "127.0.0.1:" + std::to_string(freePort());
    config_ = dir_.file("xdcr.yaml");
  }
  void startAgent(const std::string& config_text, bool wait_streaming = true) {
    writeFileText(config_, config_text);
    agent_ = std::make_unique<AgentProcess>(config_, dir_.file("agent.log"));
    if (wait_streaming) {
      ASSERT_TRUE(waitUntil([&] { return get("/readyz").first == 200; }, 30s)) << agent_->logTail();
    }
  }
  std::pair<int, std::string> request(const std::string& method, const std::string& path) {
    auto r = replicator::adminRequest(admin_, method, path, 5s);
    return r ? *r : std::pair<int, std::string>{-1, r.error().message};
  }
  std::pair<int, std::string> get(const std::string& path) { return request("GET", path); }
  /** The pipeline's /status object (an empty object while the agent does not answer). */
  nlohmann::json pipeline() {
    auto [code, body] = get("/status");
    if (code != 200) return nlohmann::json::object();
    const auto doc = nlohmann::json::parse(body);
    return doc["pipelines"].empty() ? nlohmann::json::object() : doc["pipelines"][0];
  }
  /** One sample of /metrics (NaN when absent); +Inf is read as infinity. */
  double metric(const std::string& sample) {
    const std::string text = get("/metrics").second;
    std::regex re("(^|\n)" +
                  std::regex_replace(sample, std::regex(R"([{}\[\]().*+?^$|\\])"), R"(\$&)") +
                  " ([+-]?Inf|NaN|[-+0-9.eE]+)");
    std::smatch m;
    return std::regex_search(text, m, re) ? std::strtod(m[2].str().c_str(), nullptr) : NAN;
  }
  static std::string p() { return std::string("pipeline=\"") + kPipeline + "\""; }
  /** Waits until /metrics shows at least `min_backlog` bytes and `min_lag` seconds; the last
   *  figures seen in `backlog` and `lag`. */
  bool waitForLagAndBacklog(double min_backlog, double min_lag, std::chrono::milliseconds timeout,
                            double& backlog, double& lag) {
    return waitUntil(
        [&] {
          backlog = metric("xdcr_backlog_bytes{" + p() + "}");
          lag = metric("xdcr_replication_lag_seconds{" + p() + "}");
          return backlog >= min_backlog && lag >= min_lag;
        },
        timeout, 250ms);
  }
  /** `n` keys `prefix<i>` of `value_bytes` random bytes on the source, pipelined. */
  void write(const std::string& prefix, int n, size_t value_bytes) {
    RespClient c = source_.client(60s);
    std::mt19937_64 rng(11);
    std::vector<RespCommand> batch;
    for (int i = 0; i < n; ++i) {
      batch.push_back({"SET", prefix + std::to_string(i), randomValue(rng, value_bytes)});
      if (batch.size() == 500 || i + 1 == n) {
        for (const RespValue& r : c.pipeline(batch)) ASSERT_EQ(r, RespValue::simpleString("OK"));
        batch.clear();
      }
    }
  }
  bool onTarget(const std::string& key) {
    return target_.client().command({"EXISTS", key}) == RespValue::integer(1);
  }
  uint64_t sourceOffset() {
    return std::stoull(source_.client().info("replication")["master_repl_offset"]);
  }
  /** Waits until the target has applied the source's whole stream. */
  ::testing::AssertionResult caughtUp(std::chrono::milliseconds timeout = 30s) {
    nlohmann::json last;
    if (waitUntil(
            [&] {
              last = pipeline();
              return last.value("state", "") == "streaming" &&
                     last.value("applied_offset", uint64_t{0}) >= sourceOffset();
            },
            timeout)) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "not caught up: " << last.dump();
  }
  void sighup(const std::string& new_config) {
    writeFileText(config_, new_config);
    ASSERT_EQ(::kill(agent_->pid(), SIGHUP), 0);
  }

  TempDir dir_{"xdcr-operator"};
  RedisServer source_{{"--repl-diskless-sync-delay", "0"}};
  RedisServer target_;
  uint16_t source_port_ = 0;  // where the agent reads the source, when not source_'s port
  std::string admin_, config_;
  std::unique_ptr<AgentProcess> agent_;
};

// ---- honest lag and backlog (finding 2) ---------------------------------------------------------

TEST_F(OperatorTest, LagAndBacklogCountTheSourceWhileTheTargetIsDown) {
  startAgent(yaml(""));
  ASSERT_TRUE(caughtUp());
  target_.stop();
  const auto down_at = Clock::now();
  write("down:", 2000, 1000);  // about 2 MB the target does not get
  ASSERT_FALSE(HasFatalFailure());
  double backlog = 0, lag = 0;
  const bool seen = waitForLagAndBacklog(2e6, 3, 20s, backlog, lag);
  std::printf("[ operator ] target down %.1f s: backlog %.0f B, lag %.1f s, eta %g s\n",
              std::chrono::duration<double>(Clock::now() - down_at).count(), backlog, lag,
              metric("xdcr_catchup_eta_seconds{" + p() + "}"));
  EXPECT_TRUE(seen) << "backlog " << backlog << " B, lag " << lag << " s\n" << agent_->logTail();
  // Nothing is applied: the ETA is unbounded, not 0.
  EXPECT_TRUE(std::isinf(metric("xdcr_catchup_eta_seconds{" + p() + "}")));
  EXPECT_EQ(metric("xdcr_pipeline_up{" + p() + "}"), 0);
  // The target is back (empty: the agent sees it lost data and syncs it again); all caught up.
  target_.restart();
  ASSERT_TRUE(caughtUp(60s)) << agent_->logTail();
  EXPECT_TRUE(waitUntil([&] { return metric("xdcr_backlog_bytes{" + p() + "}") == 0; }, 10s));
  EXPECT_TRUE(
      waitUntil([&] { return metric("xdcr_replication_lag_seconds{" + p() + "}") < 2; }, 10s));
  EXPECT_TRUE(onTarget("down:1999"));
}

TEST_F(OperatorTest, LagAndBacklogCountTheSourceWhilePaused) {
  startAgent(yaml(""));
  ASSERT_TRUE(caughtUp());
  ASSERT_EQ(request("POST", std::string("/pipelines/") + kPipeline + "/pause").first, 200);
  ASSERT_TRUE(waitUntil([&] { return pipeline()["state"] == "paused"; }, 10s));
  const double applied_before = metric("xdcr_applied_bytes_total{" + p() + "}");
  write("paused:", 3000, 1000);  // about 3 MB
  ASSERT_FALSE(HasFatalFailure());
  double backlog = 0, lag = 0;
  const bool seen = waitForLagAndBacklog(3e6, 2, 15s, backlog, lag);
  std::printf("[ operator ] paused: backlog %.0f B (source %llu ahead), lag %.1f s\n", backlog,
              static_cast<unsigned long long>(sourceOffset() -
                                              pipeline()["applied_offset"].get<uint64_t>()),
              lag);
  EXPECT_TRUE(seen) << "backlog " << backlog << " B, lag " << lag << " s";
  EXPECT_FALSE(onTarget("paused:0"));
  ASSERT_EQ(request("POST", std::string("/pipelines/") + kPipeline + "/resume").first, 200);
  ASSERT_TRUE(caughtUp()) << agent_->logTail();
  EXPECT_TRUE(onTarget("paused:2999"));
  EXPECT_TRUE(waitUntil([&] { return metric("xdcr_backlog_bytes{" + p() + "}") == 0; }, 10s));
  // Each applied unit's latency is in the histogram, the paused ones among the slowest.
  const double count = metric("xdcr_apply_latency_seconds_count{" + p() + "}");
  EXPECT_GT(count, 0);
  EXPECT_EQ(metric("xdcr_apply_latency_seconds_bucket{" + p() + ",le=\"+Inf\"}"), count);
  // What the resume applied is counted (the paused writes, 3 MB and their framing).
  EXPECT_TRUE(waitUntil(
      [&] { return metric("xdcr_applied_bytes_total{" + p() + "}") - applied_before >= 3e6; }, 10s))
      << metric("xdcr_applied_bytes_total{" + p() + "}") << " - " << applied_before;
}

// ---- durable pause, resync, counters (finding 3; counters of finding 2) -------------------------

TEST_F(OperatorTest, APauseOutlivesARestartAndAReload) {
  startAgent(yaml(""));
  ASSERT_TRUE(caughtUp());
  ASSERT_EQ(request("POST", std::string("/pipelines/") + kPipeline + "/pause").first, 200);
  const std::string pause_file = dir_.file("state") + "/" + kPipeline + ".paused";
  EXPECT_TRUE(std::filesystem::exists(pause_file));
  ASSERT_EQ(agent_->terminate().code, 0) << agent_->logTail();

  startAgent(yaml(""), false);
  ASSERT_TRUE(waitUntil([&] { return pipeline().value("state", "") == "paused"; }, 30s))
      << pipeline().dump() << agent_->logTail();
  EXPECT_EQ(pipeline()["paused_reason"], "operator");
  write("after-restart:", 10, 10);
  std::this_thread::sleep_for(2s);
  EXPECT_FALSE(onTarget("after-restart:0")) << "a restart dropped the pause";

  // A reload that changes the pipeline restarts it: still paused.
  sighup(yaml("\"^tmp:\""));
  ASSERT_TRUE(
      waitUntil([&] { return agent_->logText().find("restarting it") != std::string::npos; }, 10s));
  ASSERT_TRUE(waitUntil([&] { return pipeline().value("state", "") == "paused"; }, 30s))
      << pipeline().dump();
  std::this_thread::sleep_for(2s);
  EXPECT_FALSE(onTarget("after-restart:0")) << "a reload dropped the pause";

  ASSERT_EQ(request("POST", std::string("/pipelines/") + kPipeline + "/resume").first, 200);
  EXPECT_FALSE(std::filesystem::exists(pause_file));
  ASSERT_TRUE(caughtUp()) << agent_->logTail();
  EXPECT_TRUE(onTarget("after-restart:9"));
}

TEST_F(OperatorTest, AResyncCopiesWhatAWidenedFilterNowSelects) {
  startAgent(yaml("\"^tmp:\""));
  write("tmp:", 5, 10);
  write("k:", 5, 10);
  ASSERT_TRUE(caughtUp());
  EXPECT_TRUE(onTarget("k:4"));
  EXPECT_FALSE(onTarget("tmp:4"));

  // Widened: the pipeline restarts from its checkpoint; what it filtered out before stays out.
  sighup(yaml(""));
  ASSERT_TRUE(
      waitUntil([&] { return agent_->logText().find("restarting it") != std::string::npos; }, 10s));
  write("k2:", 1, 10);
  ASSERT_TRUE(caughtUp()) << agent_->logTail();
  EXPECT_TRUE(onTarget("k2:0"));
  EXPECT_FALSE(onTarget("tmp:4"));
  EXPECT_EQ(metric("xdcr_full_syncs_total{" + p() + "}"), 1) << "counters reset by the reload";
  EXPECT_EQ(metric("xdcr_partial_syncs_total{" + p() + "}"), 1);

  auto [code, body] = request("POST", std::string("/pipelines/") + kPipeline + "/resync");
  ASSERT_EQ(code, 202) << body;
  ASSERT_TRUE(waitUntil([&] { return onTarget("tmp:4"); }, 30s)) << agent_->logTail();
  ASSERT_TRUE(caughtUp());
  EXPECT_EQ(metric("xdcr_full_syncs_total{" + p() + "}"), 2);
  EXPECT_EQ(metric("xdcr_partial_syncs_total{" + p() + "}"), 1);
  EXPECT_FALSE(std::filesystem::exists(dir_.file("state") + "/" + kPipeline + ".resync"));
  // An unknown pipeline is named as such.
  EXPECT_EQ(request("POST", "/pipelines/nope/resync").first, 404);
}

TEST_F(OperatorTest, TheCommandLinePausesResumesAndResyncs) {
  startAgent(yaml(""));
  ASSERT_TRUE(caughtUp());
  auto cli = [&](const std::string& action, const std::string& name) {
    return runAgentCommand({action, "-c", config_, "-p", name}, dir_.file("cli.out"), 30s);
  };
  auto r = cli("pause", kPipeline);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(waitUntil([&] { return pipeline().value("state", "") == "paused"; }, 10s));
  r = cli("pause", "nope");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("no pipeline named \"nope\""), std::string::npos) << r.output;
  r = cli("resume", kPipeline);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(waitUntil([&] { return pipeline().value("state", "") == "streaming"; }, 10s));
  r = cli("resync", kPipeline);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(waitUntil([&] { return metric("xdcr_full_syncs_total{" + p() + "}") == 2; }, 30s))
      << agent_->logTail();

  // No agent running: recorded in the state directory; the next start honours it.
  ASSERT_EQ(agent_->terminate().code, 0);
  r = cli("pause", kPipeline);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("no agent is running"), std::string::npos) << r.output;
  startAgent(yaml(""), false);
  ASSERT_TRUE(waitUntil([&] { return pipeline().value("state", "") == "paused"; }, 30s))
      << agent_->logTail();
  write("cli:", 1, 10);
  std::this_thread::sleep_for(1s);
  EXPECT_FALSE(onTarget("cli:0"));
  r = cli("resume", kPipeline);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(caughtUp());
  EXPECT_TRUE(onTarget("cli:0"));
}

// ---- reloads (finding 6) and the watched file (finding 1) ---------------------------------------

TEST_F(OperatorTest, AFailedReloadShowsInMetricsAndConfig) {
  startAgent(yaml(""));
  EXPECT_EQ(metric("xdcr_config_last_reload_successful"), 1);
  const double started = metric("xdcr_config_last_reload_success_timestamp_seconds");
  EXPECT_GT(started, 1.7e9);
  EXPECT_GT(metric("process_resident_memory_bytes"), 1e6);
  EXPECT_GE(metric("process_open_fds"), 5);
  EXPECT_GT(metric("process_start_time_seconds"), 1.7e9);

  sighup("pipelines: [\n");
  ASSERT_TRUE(waitUntil([&] { return metric("xdcr_config_last_reload_successful") == 0; }, 10s))
      << agent_->logTail();
  EXPECT_EQ(metric("xdcr_config_reloads_total{result=\"failure\"}"), 1);
  EXPECT_EQ(metric("xdcr_config_last_reload_success_timestamp_seconds"), started);
  auto config = nlohmann::json::parse(get("/config").second);
  EXPECT_EQ(config["running"]["file_matches_running"], false) << config.dump(2);
  EXPECT_EQ(config["running"]["last_reload_successful"], false);
  EXPECT_NE(config["running"]["last_reload_error"].get<std::string>(), "");
  EXPECT_EQ(config["pipelines"][0]["name"], kPipeline) << "not what runs";

  std::this_thread::sleep_for(1100ms);  // a later timestamp
  sighup(yaml("\"^tmp:\""));
  ASSERT_TRUE(waitUntil([&] { return metric("xdcr_config_last_reload_successful") == 1; }, 10s));
  EXPECT_EQ(metric("xdcr_config_reloads_total{result=\"success\"}"), 1);
  EXPECT_GT(metric("xdcr_config_last_reload_success_timestamp_seconds"), started);
  config = nlohmann::json::parse(get("/config").second);
  EXPECT_EQ(config["running"]["file_matches_running"], true);
  EXPECT_EQ(config["running"]["last_reload_error"], "");
}

TEST_F(OperatorTest, AWatchedConfigFileIsAppliedWithoutASignal) {
  startAgent(yaml("", ", watch_config: 200ms"));
  ASSERT_TRUE(caughtUp());
  // Edited in place (as a ConfigMap's file changes): no SIGHUP.
  writeFileText(config_, yaml("\"^tmp:\"", ", watch_config: 200ms"));
  ASSERT_TRUE(
      waitUntil([&] { return metric("xdcr_config_reloads_total{result=\"success\"}") == 1; }, 10s))
      << agent_->logTail();
  ASSERT_TRUE(waitUntil([&] { return pipeline().value("state", "") == "streaming"; }, 30s));
  write("tmp:", 1, 10);
  write("k:", 1, 10);
  ASSERT_TRUE(caughtUp());
  EXPECT_TRUE(onTarget("k:0"));
  EXPECT_FALSE(onTarget("tmp:0")) << "the edited filter is not in effect";
  // An invalid edit is rejected once (not every 200 ms) and the running config stays.
  writeFileText(config_, "pipelines: [\n");
  ASSERT_TRUE(waitUntil([&] { return metric("xdcr_config_last_reload_successful") == 0; }, 10s));
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(metric("xdcr_config_reloads_total{result=\"failure\"}"), 1);
  EXPECT_EQ(pipeline().value("state", ""), "streaming");
}

// ---- a full sync is never silent (finding 9) ----------------------------------------------------

TEST_F(OperatorTest, AFullSyncIsNeverSilentForMoreThanFiveSeconds) {
  write("big:", 12'000, 1000);  // 12 MB through a 1 MB/s link: about 12 s, plus a stall
  ASSERT_FALSE(HasFatalFailure());
  auto link = WanProxy::start(source_.port(), {.rate = 1'000'000, .name = "source"});
  source_port_ = link->port();
  startAgent(yaml(""), false);
  nlohmann::json during;
  ASSERT_TRUE(waitUntil(
      [&] {
        during = pipeline();
        return during.contains("full_sync") && during["full_sync"]["active"] == true &&
               during["full_sync"]["bytes_done"].get<uint64_t>() > 1'000'000;
      },
      30s, 100ms))
      << during.dump() << agent_->logTail();
  // The time so far, the rate and what remains, while it runs.
  EXPECT_GT(during["full_sync"]["seconds"].get<double>(), 0.1) << during["full_sync"].dump();
  EXPECT_GT(during["full_sync"]["bytes_per_second"].get<double>(), 0);
  EXPECT_GT(during["full_sync"]["progress"].get<double>(), 0);
  EXPECT_LT(during["full_sync"]["progress"].get<double>(), 1);
  EXPECT_GT(metric("xdcr_full_sync_progress_ratio{" + p() + "}"), 0);
  // The link passes nothing for 8 s (silently, connections open): the full sync stalls, and
  // says so.
  const auto utc = [] {
    const auto t = std::chrono::system_clock::now();
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch());
    const std::time_t s = std::chrono::system_clock::to_time_t(t);
    char buf[32];
    std::strftime(buf, sizeof buf, "%H:%M:%S", std::gmtime(&s));
    return fmt::format("{}.{:03d}", buf, ms.count() % 1000);
  };
  const std::string from = utc();
  link->blackhole();
  std::this_thread::sleep_for(8s);
  link->heal();
  std::printf("[ operator ] black hole %s - %s\n", from.c_str(), utc().c_str());
  ASSERT_TRUE(caughtUp(60s)) << agent_->logTail();
  // Every progress line, from the first to the end: never more than 5 s (+ slack) apart.
  const std::string log = agent_->logText();
  std::regex line_re(R"((\d\d):(\d\d):(\d\d)\.(\d\d\d)Z [^\n]*full sync: [^\n]*)");
  std::vector<double> at;
  bool stalled_said = false;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), line_re);
       it != std::sregex_iterator(); ++it) {
    const auto& m = *it;
    at.push_back(std::stoi(m[1]) * 3600 + std::stoi(m[2]) * 60 + std::stoi(m[3]) +
                 std::stoi(m[4]) / 1000.0);
    stalled_said = stalled_said || m[0].str().find("stalled") != std::string::npos;
  }
  ASSERT_GE(at.size(), 2U) << log;
  double widest = 0;
  for (size_t i = 1; i < at.size(); ++i) widest = std::max(widest, at[i] - at[i - 1]);
  std::printf("[ operator ] %zu progress lines, widest gap %.1f s, stall said: %s\n", at.size(),
              widest, stalled_said ? "yes" : "no");
  EXPECT_LE(widest, 6.5) << log;
  EXPECT_TRUE(stalled_said) << log;
  EXPECT_TRUE(onTarget("big:11999"));
}

}  // namespace
}  // namespace xdcr::test
