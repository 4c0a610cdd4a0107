// The skew-simulation suite (expiry-semantics.md §7): real chronyd NTP servers on loopback
// (honest ones, skewed ones by the chained-offset method, a falseticker, an NTS server with a test
// CA) and a target redis-server whose clock runs ahead under libfaketime (with the ftshim
// preload), the agent between a real-clock source and that target.
//
//  - compensate: 1,000 deadlines arrive translated by exactly the measured skew, and documents
//    vanish from both servers at the same true instant;
//  - warn: deadlines unchanged, the skew exported and logged;
//  - pause: nothing reaches the target while the skew is over max_skew, the pipeline resumes by
//    itself once the skew is removed at run time, and the target converges;
//  - thresholds: 250 ms flagged with max_skew 100ms, 20 ms not (cluster pair and NTP);
//  - 4 NTP servers with a 30 s falseticker: the consensus stays with the honest three;
//  - NTS: authenticated offset; an untrusted CA is refused.

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <thread>

#include "replicator/admin_server.h"
#include "tests/support/harness.h"

namespace xdcr::test {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

constexpr double kSkewS = 30;

// ---------------------------------------------------------------------------------------------
// NTP servers

/** A reference chronyd serving this host's clock, and chained servers that follow it with an
 * exact offset (clock-notes §3). Stopped together (chronyd takes ~2 s to stop). */
class NtpFleet {
 public:
  /** `offsets` of the chained servers, on 127.0.0.2, .3, …; the reference is 127.0.0.1. */
  explicit NtpFleet(const std::vector<double>& offsets) {
    ref_ = std::make_unique<ChronyServer>(ChronyOptions{});
    for (size_t i = 0; i < offsets.size(); ++i) {
      ChronyOptions o;
      o.address = "127.0.0." + std::to_string(i + 2);
      o.reference = ref_->ntpAddress();
      o.offset_s = offsets[i];
      chained_.push_back(std::make_unique<ChronyServer>(o));
    }
  }
  ~NtpFleet() {
    std::vector<ChronyServer*> all = {ref_.get()};
    for (auto& c : chained_) all.push_back(c.get());
    stopAll(all);
  }
  /** Waits until every server serves synchronised time; fails with the log of the one that
   * does not. */
  ::testing::AssertionResult waitReady() {
    if (!ref_->waitReady(10s)) return ::testing::AssertionFailure() << ref_->logTail();
    for (auto& c : chained_) {
      if (!c->waitReady(15s)) {
        return ::testing::AssertionFailure()
               << "chained chronyd " << c->ntpAddress() << " not ready:\n"
               << c->logTail();
      }
    }
    return ::testing::AssertionSuccess();
  }
  std::string reference() const { return ref_->ntpAddress(); }
  std::string chained(size_t i) const { return chained_.at(i)->ntpAddress(); }
  std::vector<std::string> all() const {
    std::vector<std::string> out = {reference()};
    for (const auto& c : chained_) out.push_back(c->ntpAddress());
    return out;
  }

 private:
  std::unique_ptr<ChronyServer> ref_;
  std::vector<std::unique_ptr<ChronyServer>> chained_;
};

// ---------------------------------------------------------------------------------------------
// Config, agent, admin

struct ClockSettings {
  std::string on_skew = "warn";
  std::string max_skew = "500ms";
  std::string check_interval = "500ms";
  std::vector<std::string> ntp_servers;
  bool nts = false;
  std::string nts_ca_file;
  std::string filters;  // YAML flow mapping or ""
};

std::string yamlList(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", \"" : "\"") + items[i] + "\"";
  return out + "]";
}

std::string configYaml(const std::string& state_dir, const std::string& admin, uint16_t source_port,
                       uint16_t target_port, const ClockSettings& c) {
  std::ostringstream y;
  y << "agent: {state_dir: \"" << state_dir << "\", admin_listen: \"" << admin << "\"}\n"
    << "clock:\n"
    << "  ntp_servers: " << yamlList(c.ntp_servers) << "\n"
    << "  nts: " << (c.nts ? "true" : "false") << "\n";
  if (!c.nts_ca_file.empty()) y << "  nts_ca_file: \"" << c.nts_ca_file << "\"\n";
  y << "  check_interval: " << c.check_interval << "\n"
    << "  max_skew: " << c.max_skew << "\n"
    << "  on_skew: " << c.on_skew << "\n"
    << "clusters:\n"
    << "  src: {type: redis, address: \"127.0.0.1:" << source_port << "\"}\n"
    << "  dst: {type: redis, address: \"127.0.0.1:" << target_port << "\"}\n"
    << "pipelines:\n"
    << "  - name: p\n"
    << "    source: src\n"
    << "    target: dst\n";
  if (!c.filters.empty()) y << "    filters: " << c.filters << "\n";
  return y.str();
}

/** The value of one sample line of a /metrics text, or NaN when absent. */
double metric(const std::string& text, const std::string& sample) {
  const std::string escaped =
      std::regex_replace(sample, std::regex(R"([{}\[\]().*+?^$|\\])"), R"(\$&)");
  std::smatch m;
  if (std::regex_search(text, m, std::regex("(^|\n)" + escaped + " ([-0-9.e+]+)"))) {
    return std::stod(m[2]);
  }
  return std::nan("");
}

/** `xdcr-agent clock -c CONFIG -o json`. */
AgentCommandResult runClockCommand(const std::string& config, const std::string& out_path) {
  return runAgentCommand({"clock", "-c", config, "-o", "json"}, out_path, 60s);
}

/** A source with a real clock, a target whose clock runs `skew_s` ahead, and the agent. */
class SkewTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fakeTimeAvailable())
        << "libfaketime or the ftshim preload is missing: run scripts/install-deps.sh --test";
    admin_ = "127.0.0.1:" + std::to_string(freePort());
  }

  void startTarget(double skew_s) { target_ = std::make_unique<FakeTimeRedis>(skew_s); }

  std::string writeConfig(const ClockSettings& c, const std::string& name = "xdcr.yaml") {
    const std::string path = dir_.file(name);
    writeFileText(
        path, configYaml(dir_.file("state"), admin_, source_.port(), target_->server().port(), c));
    return path;
  }

  void startAgent(const ClockSettings& c) {
    config_ = writeConfig(c);
    agent_ = std::make_unique<AgentProcess>(config_, dir_.file("agent.log"));
  }

  std::pair<int, std::string> get(const std::string& path) {
    auto r = replicator::adminRequest(admin_, "GET", path, 5s);
    return r ? *r : std::pair<int, std::string>{-1, r.error().message};
  }
  Json status() {
    auto [code, body] = get("/status");
    return code == 200 ? Json::parse(body, nullptr, false) : Json();
  }
  std::string metrics() { return get("/metrics").second; }
  /** The pipeline's /status entry ({} until the admin server answers). */
  Json pipeline() {
    Json s = status();
    return s.is_object() && !s["pipelines"].empty() ? s["pipelines"][0] : Json::object();
  }
  ::testing::AssertionResult waitState(const std::string& state, std::chrono::milliseconds t) {
    if (waitUntil([&] { return pipeline().value("state", "") == state; }, t, 50ms)) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "pipeline never reached state " << state
                                         << "; status: " << get("/status").second << "\n"
                                         << agent_->logTail();
  }
  /** Waits until the target acknowledged everything the source wrote so far. */
  ::testing::AssertionResult waitCaughtUp(std::chrono::milliseconds t = 30s) {
    RespClient c = source_.client();
    const auto master = std::stoull(c.info("replication")["master_repl_offset"]);
    if (waitUntil(
            [&] {
              Json p = pipeline();
              return p.value("applied_offset", uint64_t{0}) >= master;
            },
            t, 20ms)) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "target did not catch up with source offset " << master
                                         << "; status: " << get("/status").second << "\n"
                                         << agent_->logTail();
  }
  /** Writes (on the target) since the server started: Redis counts every change. */
  int64_t targetChanges() {
    return std::stoll(
        target_->server().client().info("persistence")["rdb_changes_since_last_save"]);
  }

  /** 1,000 documents with deadlines 10–30 min ahead, in the forms a source propagates. */
  std::vector<std::string> writeDocuments(const std::string& prefix, int n = 1000) {
    RespClient c = source_.client();
    std::vector<RespCommand> w;
    std::vector<std::string> keys;
    const int64_t now = unixTimeMs();
    for (int i = 0; i < n; ++i) {
      std::string k = prefix + std::to_string(i);
      keys.push_back(k);
      switch (i % 4) {
        case 0:
          w.push_back({"SET", k, "v", "EX", std::to_string(600 + i)});
          break;
        case 1:
          w.push_back({"SET", k, "v", "PX", std::to_string(900'000 + i * 7)});
          break;
        case 2:
          w.push_back({"SET", k, "v", "PXAT", std::to_string(now + 1'200'000 + i)});
          break;
        default:
          w.push_back({"HSET", k, "f", "v"});
          w.push_back({"EXPIRE", k, std::to_string(1'800 - i)});
          break;
      }
    }
    c.pipeline(w);
    return keys;
  }

  /** target PEXPIRETIME − source PEXPIRETIME of each key (ms); fails on a missing deadline. */
  std::vector<int64_t> deadlineDifferences(const std::vector<std::string>& keys) {
    RespClient s = source_.client(), t = target_->server().client();
    std::vector<RespCommand> q;
    for (const auto& k : keys) q.push_back({"PEXPIRETIME", k});
    auto sv = s.pipeline(q), tv = t.pipeline(q);
    std::vector<int64_t> out;
    for (size_t i = 0; i < keys.size(); ++i) {
      EXPECT_GT(sv[i].integer(), 0) << keys[i] << " has no deadline on the source";
      EXPECT_GT(tv[i].integer(), 0) << keys[i] << " has no deadline on the target";
      out.push_back(tv[i].integer() - sv[i].integer());
    }
    return out;
  }

  TempDir dir_{"xdcr-skew"};
  RedisServer source_{{"--repl-diskless-sync-delay", "0"}};
  std::unique_ptr<FakeTimeRedis> target_;
  std::string admin_, config_;
  std::unique_ptr<AgentProcess> agent_;
};

// ---------------------------------------------------------------------------------------------

TEST_F(SkewTest, CompensateTranslatesDeadlinesSoDocumentsEndAtTheSameInstant) {
  NtpFleet ntp({0.0, 0.0, 30.0});  // two honest chained servers and a 30 s falseticker
  ASSERT_TRUE(ntp.waitReady());
  startTarget(kSkewS);
  ClockSettings c;
  c.on_skew = "compensate";
  c.ntp_servers = ntp.all();
  // The target must end documents by its own (compensated) deadline, not because the source's
  // expiry DEL arrived: expirations are not forwarded.
  c.filters = "{drop_expirations: true}";
  startAgent(c);
  ASSERT_TRUE(waitState("streaming", 30s));

  auto keys = writeDocuments("doc:");
  ASSERT_TRUE(waitCaughtUp());
  auto diffs = deadlineDifferences(keys);
  ASSERT_EQ(diffs.size(), 1000u);
  const auto [lo, hi] = std::minmax_element(diffs.begin(), diffs.end());
  std::cout << "target − source PEXPIRETIME over 1000 documents: " << *lo << " … " << *hi
            << " ms\n";
  for (size_t i = 0; i < diffs.size(); ++i) {
    ASSERT_NEAR(diffs[i], 30'000, 20) << keys[i];
  }

  Json p = pipeline();
  EXPECT_TRUE(p["clock"]["exceeded"].get<bool>()) << p.dump();
  EXPECT_NEAR(p["clock"]["compensation_ms"].get<double>(), 30'000, 20);
  EXPECT_NEAR(p["clock"]["skew_seconds"].get<double>(), kSkewS, 0.02);
  EXPECT_EQ(p["state"], "streaming");
  const std::string m = metrics();
  EXPECT_NEAR(metric(m, "xdcr_clock_skew_seconds{pipeline=\"p\"}"), kSkewS, 0.02) << m;
  EXPECT_NEAR(metric(m, "xdcr_clock_compensation_seconds{pipeline=\"p\"}"), kSkewS, 0.02);
  EXPECT_NEAR(metric(m, "xdcr_clock_offset_seconds{clock=\"local\"}"), 0, 0.005);
  EXPECT_NEAR(metric(m, "xdcr_clock_offset_seconds{clock=\"dst\"}"), kSkewS, 0.01);
  EXPECT_EQ(metric(m, "xdcr_clock_ntp_majority"), 1);
  EXPECT_EQ(metric(m, "xdcr_clock_ntp_server_truechimer{server=\"" + ntp.chained(2) + "\"}"), 0)
      << "the 30 s falseticker was not rejected\n"
      << m;

  // Sampled documents: both servers must drop each within 50 ms of the same true instant.
  RespClient src = source_.client();
  std::vector<RespCommand> w;
  const int kSamples = 20;
  for (int i = 0; i < kSamples; ++i) {
    w.push_back({"SET", "end:" + std::to_string(i), "v", "PX", std::to_string(1500 + 97 * i)});
  }
  src.pipeline(w);
  ASSERT_TRUE(waitCaughtUp());
  RespClient s = source_.client(), t = target_->server().client();
  using Clock = std::chrono::steady_clock;
  std::vector<std::optional<Clock::time_point>> gone_src(kSamples), gone_dst(kSamples);
  const auto deadline = Clock::now() + 15s;
  int remaining = 2 * kSamples;
  while (remaining > 0 && Clock::now() < deadline) {
    for (int i = 0; i < kSamples; ++i) {
      const std::string k = "end:" + std::to_string(i);
      if (!gone_src[i] && s.command({"EXISTS", k}).integer() == 0) {
        gone_src[i] = Clock::now();
        --remaining;
      }
      if (!gone_dst[i] && t.command({"EXISTS", k}).integer() == 0) {
        gone_dst[i] = Clock::now();
        --remaining;
      }
    }
  }
  ASSERT_EQ(remaining, 0) << "some sampled documents never ended";
  double worst = 0;
  for (int i = 0; i < kSamples; ++i) {
    const double d = std::chrono::duration<double, std::milli>(*gone_dst[i] - *gone_src[i]).count();
    worst = std::max(worst, std::abs(d));
    EXPECT_LE(std::abs(d), 50) << "end:" << i << " ended " << d << " ms later on the target";
  }
  std::cout << "sampled documents: target and source ended them at most " << worst << " ms apart\n";
}

TEST_F(SkewTest, WarnLeavesDeadlinesUnchangedAndReportsTheSkew) {
  startTarget(kSkewS);
  ClockSettings c;
  c.on_skew = "warn";
  startAgent(c);
  ASSERT_TRUE(waitState("streaming", 30s));
  auto keys = writeDocuments("doc:");
  ASSERT_TRUE(waitCaughtUp());
  auto diffs = deadlineDifferences(keys);
  for (size_t i = 0; i < diffs.size(); ++i) ASSERT_EQ(diffs[i], 0) << keys[i];

  const std::string m = metrics();
  EXPECT_NEAR(metric(m, "xdcr_clock_skew_seconds{pipeline=\"p\"}"), kSkewS, 0.02) << m;
  EXPECT_EQ(metric(m, "xdcr_clock_skew_exceeded{pipeline=\"p\"}"), 1);
  EXPECT_EQ(metric(m, "xdcr_clock_compensation_seconds{pipeline=\"p\"}"), 0);
  EXPECT_EQ(metric(m, "xdcr_pipeline_paused{pipeline=\"p\",reason=\"\"}"), 0);
  Json p = pipeline();
  EXPECT_EQ(p["state"], "streaming");
  EXPECT_TRUE(p["clock"]["exceeded"].get<bool>());
  // `xdcr-agent status` shows the skew and why it matters.
  const std::string out_path = dir_.file("status.out");
  Subprocess st = Subprocess::start({defaultAgentBinary(), "status", "--admin", admin_}, out_path);
  auto code = st.waitFor(30s);
  ASSERT_TRUE(code && code->success()) << readFileText(out_path);
  const std::string table = readFileText(out_path);
  EXPECT_NE(table.find("SKEW_S"), std::string::npos) << table;
  EXPECT_NE(table.find("+30.000"), std::string::npos) << table;
  EXPECT_NE(table.find("over max_skew 500 ms"), std::string::npos) << table;

  LogWatcher warning(agent_->logPath(), "clock skew");
  EXPECT_GE(warning.poll(), 1u) << agent_->logTail();
  EXPECT_NE(warning.matches().at(0).find("warn"), std::string::npos) << warning.matches().at(0);
  EXPECT_NE(warning.matches().at(0).find("early"), std::string::npos) << warning.matches().at(0);
}

TEST_F(SkewTest, PauseHoldsEveryWriteUntilTheSkewIsRemovedAtRunTime) {
  startTarget(kSkewS);
  ClockSettings c;
  c.on_skew = "pause";
  startAgent(c);
  ASSERT_TRUE(waitState("paused", 30s));
  EXPECT_EQ(pipeline()["paused_reason"], "clock_skew");

  auto keys = writeDocuments("doc:", 300);
  const int64_t changes_before = targetChanges();
  // Several check intervals: the pipeline stays paused and the target sees no write at all.
  const auto until = std::chrono::steady_clock::now() + 3s;
  while (std::chrono::steady_clock::now() < until) {
    ASSERT_EQ(targetChanges(), changes_before) << "a write reached the target while paused";
    RespClient t = target_->server().client();
    ASSERT_EQ(dataDbSize(t), 0);
    std::this_thread::sleep_for(100ms);
  }
  Json p = pipeline();
  EXPECT_EQ(p["state"], "paused");
  EXPECT_NE(p["paused_detail"].get<std::string>().find("max_skew"), std::string::npos) << p.dump();
  EXPECT_EQ(metric(metrics(), "xdcr_pipeline_paused{pipeline=\"p\",reason=\"clock_skew\"}"), 1);

  // The skew goes away while everything runs: the pipeline resumes by itself and converges.
  target_->setSkew(0);
  ASSERT_TRUE(waitState("streaming", 15s));
  ASSERT_TRUE(waitCaughtUp());
  for (int64_t d : deadlineDifferences(keys)) ASSERT_EQ(d, 0);
  EXPECT_EQ(metric(metrics(), "xdcr_pipeline_paused{pipeline=\"p\",reason=\"\"}"), 0);

  // And back: a skew that appears while streaming pauses again, then clears again.
  target_->setSkew(kSkewS);
  ASSERT_TRUE(waitState("paused", 15s));
  const int64_t changes_paused = targetChanges();
  auto more = writeDocuments("more:", 200);
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(targetChanges(), changes_paused) << "a write reached the target while paused";
  target_->setSkew(0);
  ASSERT_TRUE(waitState("streaming", 15s));
  ASSERT_TRUE(waitCaughtUp());
  for (int64_t d : deadlineDifferences(more)) ASSERT_EQ(d, 0);
  RespClient t = target_->server().client();
  EXPECT_EQ(dataDbSize(t), 500);
}

// 250 ms is over max_skew 100ms, 20 ms is not: for the pair of clusters (Redis TIME) in the
// running agent and in `xdcr-agent clock`.
TEST_F(SkewTest, AClusterSkewOf250msIsFlaggedAnd20msIsNot) {
  startTarget(0.25);
  ClockSettings c;
  c.max_skew = "100ms";
  startAgent(c);
  ASSERT_TRUE(waitState("streaming", 30s));
  ASSERT_TRUE(waitUntil(
      [&] { return pipeline().value("clock", Json::object()).value("measured", false); }, 10s));
  std::string m = metrics();
  EXPECT_NEAR(metric(m, "xdcr_clock_skew_seconds{pipeline=\"p\"}"), 0.25, 0.005) << m;
  EXPECT_EQ(metric(m, "xdcr_clock_skew_exceeded{pipeline=\"p\"}"), 1);
  AgentCommandResult r = runClockCommand(config_, dir_.file("clock-250.out"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NEAR(r.report["pipelines"]["p"].value("skew_seconds", 0.0), 0.25, 0.005) << r.output;

  target_->setSkew(0.02);
  ASSERT_TRUE(waitUntil(
      [&] { return metric(metrics(), "xdcr_clock_skew_exceeded{pipeline=\"p\"}") == 0; }, 10s))
      << metrics();
  m = metrics();
  EXPECT_NEAR(metric(m, "xdcr_clock_skew_seconds{pipeline=\"p\"}"), 0.02, 0.005) << m;
  r = runClockCommand(config_, dir_.file("clock-20.out"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(r.report["pipelines"]["p"].value("exceeded", true)) << r.output;
}

// The same thresholds for this host against NTP: servers 250 ms ahead make the (real-clock)
// clusters 250 ms behind NTP time; 20 ms ahead is within bounds.
TEST_F(SkewTest, AnNtpOffsetOf250msIsFlaggedAnd20msIsNot) {
  NtpFleet ntp({0.25, 0.020});
  ASSERT_TRUE(ntp.waitReady());
  startTarget(0);
  ClockSettings c;
  c.max_skew = "100ms";
  c.ntp_servers = {ntp.chained(0)};
  const std::string at250 = writeConfig(c, "ntp250.yaml");
  c.ntp_servers = {ntp.chained(1)};
  const std::string at20 = writeConfig(c, "ntp20.yaml");

  AgentCommandResult r = runClockCommand(at250, dir_.file("clock-250.out"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NEAR(r.report["ntp"].value("local_offset_seconds", 0.0), -0.25, 0.002) << r.output;
  EXPECT_NEAR(r.report["clusters"]["dst"].value("offset_vs_ntp_seconds", 0.0), -0.25, 0.002);
  EXPECT_NE(r.output.find("from NTP time"), std::string::npos) << r.output;

  r = runClockCommand(at20, dir_.file("clock-20.out"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NEAR(r.report["ntp"].value("local_offset_seconds", 0.0), -0.02, 0.002) << r.output;
}

TEST_F(SkewTest, FourNtpServersWithA30sFalsetickerAgreeWithTheHonestOnes) {
  NtpFleet ntp({0.0, 0.0, 30.0});
  ASSERT_TRUE(ntp.waitReady());
  startTarget(0);
  ClockSettings c;
  c.ntp_servers = ntp.all();
  AgentCommandResult r = runClockCommand(writeConfig(c), dir_.file("clock.out"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Json& n = r.report["ntp"];
  ASSERT_TRUE(n.value("majority", false)) << r.output;
  EXPECT_EQ(n["truechimers"], 3);
  const double consensus = -n["local_offset_seconds"].get<double>();  // NTP − this host
  for (const Json& s : n["servers"]) {
    const bool falseticker = s["server"] == ntp.chained(2);
    EXPECT_EQ(s["truechimer"].get<bool>(), !falseticker) << s.dump();
    if (falseticker) {
      EXPECT_NEAR(s["offset_seconds"].get<double>(), 30, 0.01) << s.dump();
    } else {
      EXPECT_NEAR(consensus, s["offset_seconds"].get<double>(), 0.001) << s.dump();
    }
  }
}

TEST_F(SkewTest, NtsGivesAnAuthenticatedOffsetAndRefusesAnUntrustedCertificate) {
  ASSERT_TRUE(opensslAvailable()) << "the openssl CLI is missing: scripts/install-deps.sh --test";
  TestCa ca(dir_.file("ca"));
  IssuedCert cert = ca.issueServer("localhost", {"DNS:localhost", "IP:127.0.0.1"});
  ChronyOptions o;
  o.nts_cert_file = cert.cert_file;
  o.nts_key_file = cert.key_file;
  o.extra_lines = {"ntsprocesses 0"};  // no NTS-KE helper process left behind to PID 1
  ChronyServer nts(o);
  ASSERT_TRUE(nts.waitReady()) << nts.logTail();
  startTarget(0);

  ClockSettings c;
  c.nts = true;
  c.nts_ca_file = ca.caFile();
  c.ntp_servers = {nts.ntsKeAddress()};
  AgentCommandResult r = runClockCommand(writeConfig(c, "nts.yaml"), dir_.file("nts.out"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const Json& s = r.report["ntp"]["servers"][0];
  EXPECT_TRUE(s.value("authenticated", false)) << r.output;
  EXPECT_NEAR(s.value("offset_seconds", 1.0), 0, 0.005) << r.output;

  TestCa other(dir_.file("other-ca"));
  c.nts_ca_file = other.caFile();
  r = runClockCommand(writeConfig(c, "nts-untrusted.yaml"), dir_.file("nts-untrusted.out"));
  EXPECT_EQ(r.exit_code, 2) << r.output;  // the only server failed: no usable majority
  const std::string err = r.report["ntp"]["servers"][0].value("error", "");
  EXPECT_NE(err.find("certificate"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace xdcr::test
