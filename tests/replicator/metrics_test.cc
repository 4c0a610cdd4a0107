// The counters of the filter stage and the applier, exported with the names and labels of
// interface.md §4, after real events went through them.

#include <gtest/gtest.h>

#include <regex>
#include <sstream>

#include "clock/clock.h"
#include "filters/stream_filter.h"
#include "replicator/metrics.h"
#include "target/applier.h"

namespace xdcr::replicator {
namespace {

constexpr int64_t kNow = 1'000'000'000'000;

/** Runs commands through StreamFilter + Applier and returns the stats. */
PipelineStats run(const config::PipelineConfig& pipe, const std::vector<config::BucketConfig>& b,
                  const std::vector<std::vector<std::string>>& cmds) {
  clock::SimulatedClock clock(kNow);
  clock::ClusterClock src(clock), dst(clock);
  filters::ExpiryIndex index;
  PipelineStats stats;
  target::MaxTtlPolicy policy(b);
  filters::KeyRewriter rw(pipe.key_rewrite);
  filters::StreamFilter filter(pipe, index, src, stats);
  target::Applier applier(policy, rw, filter, dst, stats);
  for (const auto& c : cmds) {
    std::vector<std::string_view> v(c.begin(), c.end());
    source::Entry e{v, 1};
    source::Change ch;
    applier.beginUnit(false);
    filter.process(e, ch);
    applier.apply(ch);
    std::string out;
    applier.finishUnit(out);
  }
  return stats;
}

std::string n(int64_t v) { return std::to_string(v); }

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

TEST(Metrics, LabelValuesAreEscaped) {
  EXPECT_EQ(escapeLabel("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

}  // namespace
}  // namespace xdcr::replicator
