// The counters of the filter stage and the applier, exported with the names and labels of
// interface.md §4, after real events went through them.

#include <gtest/gtest.h>

#include <limits>

#include <regex>
#include <sstream>

#include "clock/clock.h"
#include "filters/event_filter.h"
#include "replicator/metrics.h"
#include "source/resolver.h"
#include "target/applier.h"

namespace xdcr::replicator {
namespace {

constexpr int64_t kNow = 1'000'000'000'000;

/** Runs commands through Resolver + EventFilter + Applier and returns the stats. */
PipelineStats run(const config::PipelineConfig& pipe, const std::vector<config::BucketConfig>& b,
                  const std::vector<std::vector<std::string>>& cmds) {
  clock::SimulatedClock clock(kNow);
  clock::ClusterClock src(clock), dst(clock);
  source::ExpiryIndex index;
  PipelineStats stats;
  target::MaxTtlPolicy policy(b);
  auto keys = std::make_shared<const filters::KeySpace>(pipe);
  source::Resolver resolver(index, src);
  filters::EventFilter filter(pipe, keys, stats);
  target::Applier applier(policy, *keys, dst, stats);
  for (const auto& c : cmds) {
    std::vector<std::string_view> v(c.begin(), c.end());
    source::Entry e{v, 1};
    source::Change ch;
    applier.beginUnit(false);
    resolver.resolve(e, ch);
    filter.judge(ch);
    applier.apply(ch);
    std::string out;
    applier.finishUnit(out);
  }
  return stats;
}

std::string n(int64_t v) {
  return std::to_string(v);
}

TEST(Metrics, CountersCarryTheInterfaceNamesAndLabels) {
  config::PipelineConfig pipe;
  pipe.name = "east-to-west";
  pipe.filters.drop_expirations = true;
  pipe.filters.strip_ttl = false;
  pipe.filters.exclude_keys.push_back({"^tmp:", {}});
  std::vector<config::BucketConfig> buckets(1);
  buckets[0].max_ttl = std::chrono::seconds(60);
  PipelineStats s = run(pipe, buckets,
                        {{"SET", "a", "v", "PXAT", n(kNow + 500'000)},  // clamped
                         {"SET", "b", "v", "PXAT", n(kNow - 1000)},     // expired on arrival
                         {"SET", "c", "v", "PXAT", n(kNow - 5)},        // (deadline passed)
                         {"DEL", "c"},                                  // expiration, dropped
                         {"DEL", "a"},                                  // deletion
                         {"SET", "tmp:1", "v"},                         // key filter
                         {"FLUSHALL"},                                  // flush, not replicated
                         {"FUNCTION", "LOAD", "x"}});                   // unknown
  s.target_errors_by_kind["WRONGTYPE"] = 2;
  PipelineMetrics pm;
  pm.name = pipe.name;
  pm.stats = &s;
  pm.lag_seconds = 0.25;
  pm.expiry_index_entries = 3;
  pm.expiry_index_bytes = 1024;
  std::string text = renderMetrics({pm});

  auto has = [&](const std::string& line) {
    EXPECT_NE(text.find(line + "\n"), std::string::npos) << "missing: " << line << "\n" << text;
  };
  const std::string p = "pipeline=\"east-to-west\"";
  has("xdcr_source_events_total{" + p + ",kind=\"mutation\"} 4");
  has("xdcr_source_events_total{" + p + ",kind=\"expiration\"} 1");
  has("xdcr_source_events_total{" + p + ",kind=\"deletion\"} 1");
  has("xdcr_source_events_total{" + p + ",kind=\"flush\"} 1");
  has("xdcr_source_events_total{" + p + ",kind=\"other\"} 1");
  has("xdcr_filtered_total{" + p + ",reason=\"expiration\"} 1");
  has("xdcr_filtered_total{" + p + ",reason=\"key\"} 1");
  has("xdcr_filtered_total{" + p + ",reason=\"flush\"} 1");
  has("xdcr_filtered_total{" + p + ",reason=\"deletion\"} 0");
  has("xdcr_expiry_clamped_total{" + p + "} 1");
  has("xdcr_expired_on_arrival_total{" + p + "} 2");
  has("xdcr_target_writes_total{" + p + ",op=\"set\"} 1");
  has("xdcr_target_writes_total{" + p + ",op=\"delete\"} 3");
  has("xdcr_target_errors_total{" + p + ",kind=\"WRONGTYPE\"} 2");
  has("xdcr_unknown_commands_total{" + p + "} 1");
  has("xdcr_replication_lag_seconds{" + p + "} 0.25");
  has("# TYPE xdcr_replication_lag_seconds gauge");
  has("xdcr_expiry_index_entries{" + p + "} 3");
  has("xdcr_expiry_index_bytes{" + p + "} 1024");
  has("xdcr_checkpoint_journal_bytes{" + p + "} 0");
  has("# TYPE xdcr_expiry_stripped_total counter");

  // Every line is a comment or `name{labels} value`; counters end in _total.
  std::regex sample(R"(^xdcr_[a-z_]+\{[^}]*\} -?[0-9.e+]+$)");
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("# ", 0) == 0) {
      if (line.rfind("# TYPE ", 0) == 0 && line.find(" counter") != std::string::npos) {
        EXPECT_NE(line.find("_total counter"), std::string::npos) << line;
      }
      continue;
    }
    EXPECT_TRUE(std::regex_match(line, sample)) << line;
  }
}

TEST(Metrics, ClockMetricsFollowTheLatestCheck) {
  PipelineStats stats;
  clock::PipelineSkew skew;
  skew.measured = true;
  skew.delta_ns = 30'000'000'000;
  skew.exceeded = true;
  PipelineMetrics pm;
  pm.name = "p";
  pm.stats = &stats;
  pm.skew = &skew;
  pm.compensation_seconds = 30;

  clock::ClockReport r;
  r.check = 7;
  r.ntp.configured = true;
  r.ntp.ok = true;
  r.ntp.offset_ns = 2'000'000;  // NTP is 2 ms ahead of this host: this host is −2 ms
  r.ntp.servers = {{"127.0.0.1:123", true, false, 2'000'000, 50'000, 8, true, ""},
                   {"127.0.0.4:123", true, false, 30'000'000'000, 50'000, 9, false, ""},
                   {"127.0.0.5:123", false, false, 0, 0, 0, false, "timeout"}};
  r.clusters["src"] = {.cluster = "src",
                       .measured = true,
                       .offset_ns = 0,
                       .bound_ns = 10'000,
                       .rtt_ns = 20'000,
                       .measured_at_ms = 1,
                       .error = {}};
  r.clusters["dst"] = {.cluster = "dst",
                       .measured = true,
                       .offset_ns = 30'000'000'000,
                       .bound_ns = 10'000,
                       .rtt_ns = 20'000,
                       .measured_at_ms = 1,
                       .error = "connection refused"};
  const std::string text = renderMetrics({pm}, &r);
  auto has = [&](const std::string& line) {
    EXPECT_NE(text.find(line + "\n"), std::string::npos) << "missing: " << line << "\n" << text;
  };
  has("xdcr_clock_skew_seconds{pipeline=\"p\"} 30");
  has("xdcr_clock_skew_exceeded{pipeline=\"p\"} 1");
  has("xdcr_clock_compensation_seconds{pipeline=\"p\"} 30");
  has("xdcr_clock_offset_seconds{clock=\"local\"} -0.002");
  has("xdcr_clock_offset_seconds{clock=\"src\"} -0.002");
  has("xdcr_clock_offset_seconds{clock=\"dst\"} 29.998");
  has("xdcr_clock_cluster_offset_seconds{cluster=\"dst\"} 30");
  has("xdcr_clock_cluster_probe_ok{cluster=\"dst\"} 0");
  has("xdcr_clock_cluster_probe_ok{cluster=\"src\"} 1");
  has("xdcr_clock_ntp_majority 1");
  has("xdcr_clock_ntp_server_truechimer{server=\"127.0.0.4:123\"} 0");
  has("xdcr_clock_ntp_server_truechimer{server=\"127.0.0.1:123\"} 1");
  has("xdcr_clock_ntp_server_offset_seconds{server=\"127.0.0.4:123\"} 30");
  EXPECT_EQ(text.find("xdcr_clock_ntp_server_offset_seconds{server=\"127.0.0.5:123\"}"),
            std::string::npos)
      << "a silent server has no offset";
  has("xdcr_clock_checks_total 7");

  // Without an NTP majority nothing is said against NTP time; without a measurement no skew.
  r.ntp.ok = false;
  skew.measured = false;
  const std::string none = renderMetrics({pm}, &r);
  EXPECT_EQ(none.find("xdcr_clock_offset_seconds{"), std::string::npos) << none;
  EXPECT_EQ(none.find("xdcr_clock_skew_seconds{"), std::string::npos) << none;
  EXPECT_NE(none.find("xdcr_clock_ntp_majority 0\n"), std::string::npos) << none;
}

TEST(Metrics, ApplyLatencyIsACumulativeHistogram) {
  PipelineStats stats;
  for (double s : {0.0005, 0.003, 0.003, 0.2, 7.0, 100.0}) stats.apply_latency.observe(s);
  PipelineMetrics m;
  m.name = "p";
  m.stats = &stats;
  const std::string text = renderMetrics({m});
  EXPECT_NE(text.find("# TYPE xdcr_apply_latency_seconds histogram\n"), std::string::npos);
  for (const char* line : {"xdcr_apply_latency_seconds_bucket{pipeline=\"p\",le=\"0.001\"} 1\n",
                           "xdcr_apply_latency_seconds_bucket{pipeline=\"p\",le=\"0.005\"} 3\n",
                           "xdcr_apply_latency_seconds_bucket{pipeline=\"p\",le=\"0.1\"} 3\n",
                           "xdcr_apply_latency_seconds_bucket{pipeline=\"p\",le=\"0.5\"} 4\n",
                           "xdcr_apply_latency_seconds_bucket{pipeline=\"p\",le=\"10\"} 5\n",
                           "xdcr_apply_latency_seconds_bucket{pipeline=\"p\",le=\"60\"} 5\n",
                           "xdcr_apply_latency_seconds_bucket{pipeline=\"p\",le=\"+Inf\"} 6\n",
                           "xdcr_apply_latency_seconds_count{pipeline=\"p\"} 6\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << text;
  }
  EXPECT_NE(text.find("xdcr_apply_latency_seconds_sum{pipeline=\"p\"} 107.2065\n"),
            std::string::npos)
      << text;
}

TEST(Metrics, SpecialValuesAreSpelledAsTheFormatWants) {
  PipelineStats stats;
  PipelineMetrics m;
  m.name = "p";
  m.stats = &stats;
  m.catchup_eta_seconds = std::numeric_limits<double>::infinity();
  const std::string text = renderMetrics({m});
  EXPECT_NE(text.find("xdcr_catchup_eta_seconds{pipeline=\"p\"} +Inf\n"), std::string::npos)
      << text;
}

TEST(Metrics, LabelValuesAreEscaped) {
  EXPECT_EQ(escapeLabel("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

}  // namespace
}  // namespace xdcr::replicator
