// XDCR_PIPELINE_METRICS (common/stats.h) is the one declaration of the pipeline metrics: every
// row becomes a /metrics family with HELP and TYPE, each counter's field moves exactly its own
// family, the rows that name a /status field show there with their JSON types, and /status
// shows the pipeline's replication link.

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>

#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "clock/clock.h"
#include "replicator/metrics.h"
#include "replicator/pipeline.h"
#include "replicator/source_link.h"
#include "replicator/status.h"

namespace xdcr::replicator {
namespace {

// The list's rows, counted straight from the macro.
#define XDCR_TEST_ONE_ROW(...) +1
constexpr size_t kListRows = 0 XDCR_PIPELINE_METRICS(
    XDCR_TEST_ONE_ROW, XDCR_TEST_ONE_ROW, XDCR_TEST_ONE_ROW, XDCR_TEST_ONE_ROW, XDCR_TEST_ONE_ROW,
    XDCR_TEST_ONE_ROW, XDCR_TEST_ONE_ROW);
#undef XDCR_TEST_ONE_ROW

/** For every counter row: its family and how to bump its PipelineStats field once. */
struct Bump {
  std::string_view metric;
  void (*bump)(PipelineStats& s);
};
#define XDCR_TEST_COUNTER(field, metric, ...) Bump{metric, [](PipelineStats& s) { ++s.field; }},
#define XDCR_TEST_COUNTER_BY(field, Enum, label, names, metric, ...) \
  Bump{metric, [](PipelineStats& s) { ++s.field[idx(Enum::kCount) - 1]; }},
#define XDCR_TEST_COUNTER_BY_KEY(field, label, metric, ...) \
  Bump{metric, [](PipelineStats& s) { ++s.field["ERR"]; }},
#define XDCR_TEST_COUNTER_PART(field, label, value, metric, ...) \
  Bump{metric, [](PipelineStats& s) { ++s.field; }},
#define XDCR_TEST_GAUGE(...)
const Bump kBumps[] = {XDCR_PIPELINE_METRICS(XDCR_TEST_COUNTER, XDCR_TEST_COUNTER_BY,
                                             XDCR_TEST_COUNTER_BY_KEY, XDCR_TEST_COUNTER_PART,
                                             XDCR_TEST_GAUGE, XDCR_TEST_GAUGE, XDCR_TEST_GAUGE)};
#undef XDCR_TEST_COUNTER
#undef XDCR_TEST_COUNTER_BY
#undef XDCR_TEST_COUNTER_BY_KEY
#undef XDCR_TEST_COUNTER_PART
#undef XDCR_TEST_GAUGE

/** The families of the table, in order (rows of one family are consecutive). */
std::vector<const MetricRow*> families() {
  std::vector<const MetricRow*> out;
  for (const MetricRow& row : pipelineMetricRows()) {
    if (out.empty() || out.back()->metric != row.metric) out.push_back(&row);
  }
  return out;
}

/** The sample lines of `text` whose family is `metric`, in order. */
std::vector<std::string> samplesOf(const std::string& text, std::string_view metric) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(std::string(metric) + "{", 0) == 0 ||
        line.rfind(std::string(metric) + " ", 0) == 0) {
      out.push_back(line);
    }
  }
  return out;
}

TEST(MetricsTable, EveryFamilyIsRenderedWithHelpAndTypeOnce) {
  const auto rows = pipelineMetricRows();
  ASSERT_EQ(rows.size(), kListRows) << "the table is the list, row for row";

  // A family's rows are consecutive and agree on everything but their samples.
  std::set<std::string_view> seen;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i > 0 && rows[i].metric == rows[i - 1].metric) {
      EXPECT_EQ(rows[i].type, rows[i - 1].type) << rows[i].metric;
      EXPECT_EQ(rows[i].help, rows[i - 1].help) << rows[i].metric;
      EXPECT_EQ(rows[i].status, rows[i - 1].status) << rows[i].metric;
      continue;
    }
    EXPECT_TRUE(seen.insert(rows[i].metric).second) << rows[i].metric << " is split";
    EXPECT_EQ(rows[i].metric.rfind("xdcr_", 0), 0u) << rows[i].metric;
    EXPECT_FALSE(rows[i].help.empty()) << rows[i].metric;
    if (rows[i].type == "counter") {
      EXPECT_TRUE(rows[i].metric.ends_with("_total")) << rows[i].metric;
    } else {
      EXPECT_EQ(rows[i].type, "gauge") << rows[i].metric;
      EXPECT_FALSE(rows[i].metric.ends_with("_total")) << rows[i].metric;
    }
  }

  // One pipeline with something in every family (an error kind, a failover, a measured skew).
  PipelineStats stats;
  stats.target_errors_by_kind["WRONGTYPE"] = 1;
  stats.target_redirects_by_kind["moved"] = 1;
  stats.target_write_failures["cross_slot"] = 1;
  stats.source_failovers["127.0.0.1:7322"] = 1;
  stats.full_syncs_aborted["output_buffer_limit"] = 1;
  clock::PipelineSkew skew;
  skew.measured = true;
  PipelineMetrics pm;
  pm.name = "p";
  pm.stats = &stats;
  pm.skew = &skew;
  const std::string text = renderMetrics({pm});

  std::map<std::string, int> help, type;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# HELP ", 0) == 0) ++help[line.substr(7, line.find(' ', 7) - 7)];
    if (line.rfind("# TYPE ", 0) == 0) ++type[line.substr(7, line.find(' ', 7) - 7)];
  }
  const auto fams = families();
  // Without a clock report the families not from the table are xdcr_build_info and the
  // xdcr_apply_latency_seconds histogram.
  EXPECT_EQ(type.size(), fams.size() + 2) << text;
  EXPECT_EQ(help.size(), fams.size() + 2) << text;
  for (const MetricRow* f : fams) {
    const std::string name(f->metric);
    EXPECT_EQ(help[name], 1) << name;
    EXPECT_EQ(type[name], 1) << name;
    EXPECT_NE(text.find("# HELP " + name + " " + std::string(f->help) + "\n# TYPE " + name + " " +
                        std::string(f->type) + "\n"),
              std::string::npos)
        << name << "\n"
        << text;
    const auto samples = samplesOf(text, name);
    ASSERT_FALSE(samples.empty()) << name << "\n" << text;
    for (const auto& s : samples) {
      EXPECT_EQ(s.rfind(name + "{pipeline=\"p\"", 0), 0u) << s;
    }
  }
}

TEST(MetricsTable, EachCounterFieldMovesOnlyItsOwnFamily) {
  // A counter is one line of the list: its field, its family and its samples come from it.
  ASSERT_GT(std::size(kBumps), 0u);
  for (const Bump& b : kBumps) {
    PipelineStats stats;
    PipelineMetrics pm;
    pm.name = "p";
    pm.stats = &stats;
    const std::string before = renderMetrics({pm});
    b.bump(stats);
    const std::string after = renderMetrics({pm});
    for (const MetricRow* f : families()) {
      if (f->metric == b.metric) {
        EXPECT_NE(samplesOf(before, f->metric), samplesOf(after, f->metric)) << f->metric;
      } else {
        EXPECT_EQ(samplesOf(before, f->metric), samplesOf(after, f->metric))
            << "bumping " << b.metric << " moved " << f->metric;
      }
    }
  }
}

TEST(MetricsTable, LinkDetachmentsIsACounterOfItsOwn) {
  PipelineStats stats;
  stats.link_detachments = 3;
  PipelineMetrics pm;
  pm.name = "east-to-west";
  pm.stats = &stats;
  const std::string text = renderMetrics({pm});
  EXPECT_NE(text.find("# TYPE xdcr_link_detachments_total counter\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nxdcr_link_detachments_total{pipeline=\"east-to-west\"} 3\n"),
            std::string::npos)
      << text;
}

TEST(MetricsTable, BandwidthIsALimitGaugeAndAThrottledCounterByDirection) {
  PipelineStats stats;
  PipelineMetrics pm;
  pm.name = "east-to-west";
  pm.stats = &stats;
  pm.bandwidth_limit = 20'000'000;
  pm.read_throttled_seconds = 0.5;
  pm.write_throttled_seconds = 3;
  const std::string text = renderMetrics({pm});
  EXPECT_NE(
      text.find("# TYPE xdcr_bandwidth_limit_bytes_per_second gauge\n"
                "xdcr_bandwidth_limit_bytes_per_second{pipeline=\"east-to-west\"} 20000000\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE xdcr_bandwidth_throttled_seconds_total counter\n"
                      "xdcr_bandwidth_throttled_seconds_total{pipeline=\"east-to-west\","
                      "direction=\"read\"} 0.5\n"
                      "xdcr_bandwidth_throttled_seconds_total{pipeline=\"east-to-west\","
                      "direction=\"write\"} 3\n"),
            std::string::npos)
      << text;
}

TEST(MetricsTable, TheSpoolIsAGauge) {
  PipelineStats stats;
  PipelineMetrics pm;
  pm.name = "east-to-west";
  pm.stats = &stats;
  pm.spool_bytes = 123'456'789;
  const std::string text = renderMetrics({pm});
  EXPECT_NE(text.find("# TYPE xdcr_spool_bytes gauge\n"
                      "xdcr_spool_bytes{pipeline=\"east-to-west\"} 123456789\n"),
            std::string::npos)
      << text;
}

TEST(MetricsStatus, FiguresComeFromTheTableWithTheirJsonTypes) {
  PipelineStats stats;
  stats.link_detachments = 2;
  stats.full_syncs = 5;               // not a /status field
  stats.copies_restored_clamped = 3;  // a family of parts: one object
  PipelineMetrics pm;
  pm.name = "p";
  pm.stats = &stats;
  pm.lag_seconds = 0.5;
  pm.backlog_bytes = 7;
  pm.bandwidth_limit = 2'000'000;
  pm.write_throttled_seconds = 1.25;
  const nlohmann::json j = statusFigures(pm);
  EXPECT_EQ(j, nlohmann::json::parse(R"({"lag_seconds": 0.5, "backlog_bytes": 7,
                                         "apply_rate_bytes_per_second": 0.0,
                                         "catchup_eta_seconds": 0.0,
                                         "link_detachments": 2, "bandwidth_limit": 2000000,
                                         "bandwidth_throttled_seconds":
                                           {"read": 0.0, "write": 1.25},
                                         "copies_restored": {"expired_before_write": 0,
                                           "clamped_before_write": 3,
                                           "field_expired_before_write": 0,
                                           "unconfirmed_before_restart": 0},
                                         "copies_unrecoverable": 0})"))
      << j.dump();
  EXPECT_TRUE(j["bandwidth_limit"].is_number_unsigned());
  EXPECT_TRUE(j["bandwidth_throttled_seconds"]["read"].is_number_float());
  EXPECT_TRUE(j["lag_seconds"].is_number_float());
  EXPECT_TRUE(j["backlog_bytes"].is_number_unsigned());
  EXPECT_TRUE(j["link_detachments"].is_number_unsigned());
  size_t with_status = 0;
  for (const MetricRow* f : families()) with_status += !f->status.empty();
  EXPECT_EQ(j.size(), with_status);
  // Seconds stay numbers even when whole (as before: `lag_seconds: 0.0`).
  pm.lag_seconds = 0;
  pm.bandwidth_limit = 0;
  pm.write_throttled_seconds = 0;
  EXPECT_EQ(statusFigures(pm).dump(), R"({"apply_rate_bytes_per_second":0.0,"backlog_bytes":7,)"
                                      R"("bandwidth_limit":0,)"
                                      R"("bandwidth_throttled_seconds":{"read":0.0,"write":0.0},)"
                                      R"("catchup_eta_seconds":0.0,)"
                                      R"("copies_restored":{"clamped_before_write":3,)"
                                      R"("expired_before_write":0,"field_expired_before_write":0,)"
                                      R"("unconfirmed_before_restart":0},)"
                                      R"("copies_unrecoverable":0,)"
                                      R"("lag_seconds":0.0,"link_detachments":2})");
}

TEST(MetricsStatus, LinkShowsThePipelinesSharingTheReplicationLink) {
  auto loaded = config::loadConfigString(
      "clusters:\n"
      "  src: {type: redis, address: \"127.0.0.1:1\"}\n"
      "  src2: {type: redis, address: \"127.0.0.1:2\"}\n"
      "  dst: {type: redis, address: \"127.0.0.1:3\"}\n"
      "  dst2: {type: redis, address: \"127.0.0.1:4\"}\n"
      "pipelines:\n"
      "  - {name: a, source: src, target: dst}\n"
      "  - {name: b, source: src, target: dst2}\n"
      "  - {name: c, source: src2, target: dst}\n",
      "t.yaml");
  ASSERT_TRUE(loaded.ok()) << loaded.diagnostics.at(0).format();
  boost::asio::io_context ioc;
  clock::SimulatedClock clk(1'000'000'000'000);
  std::vector<std::unique_ptr<Pipeline>> ps;
  for (const auto& pc : loaded.config->pipelines) {
    ps.push_back(std::make_unique<Pipeline>(ioc.get_executor(), loaded.config, pc, clk));
  }
  auto link = [&](const nlohmann::json& status, size_t i) {
    return status["pipelines"][i]["link"];
  };
  // Not on a link (stopped, or between links): no members. "thread": the agent's thread it runs
  // on (agent.threads; the agent gives each link one).
  ps[2]->setThread(1);
  auto s = statusJson(ps, false, nullptr, *loaded.config);
  EXPECT_EQ(link(s, 2), nlohmann::json::parse(R"({"source": "src2", "shared": false,
                                                  "pipelines": [], "thread": 1})"));
  EXPECT_TRUE(ps[0]->linkMembers().empty());

  auto noop = [](Pipeline*) {};
  {
    SourceLink shared(ioc.get_executor(), loaded.config, {ps[0].get(), ps[1].get()}, clk, noop,
                      noop);
    SourceLink own(ioc.get_executor(), loaded.config, {ps[2].get()}, clk, noop, noop);
    EXPECT_EQ(shared.memberNames(), (std::vector<std::string>{"a", "b"}));
    ps[1]->countDetachment();
    s = statusJson(ps, false, nullptr, *loaded.config);
    const auto both = nlohmann::json::parse(R"({"source": "src", "shared": true,
                                                "pipelines": ["a", "b"], "thread": 0})");
    EXPECT_EQ(link(s, 0), both) << s.dump(2);
    EXPECT_EQ(link(s, 1), both) << s.dump(2);
    EXPECT_EQ(link(s, 2), nlohmann::json::parse(R"({"source": "src2", "shared": false,
                                                    "pipelines": ["c"], "thread": 1})"));
    EXPECT_EQ(s["pipelines"][0]["link_detachments"], 0);
    EXPECT_EQ(s["pipelines"][1]["link_detachments"], 1);
    EXPECT_EQ(ps[1]->detachments(), 1u);

    // /metrics says the same through the same table.
    std::vector<PipelineMetrics> pm;
    for (const auto& p : ps) pm.push_back(metricsOf(*p));
    const std::string text = renderMetrics(pm);
    EXPECT_NE(text.find("xdcr_link_detachments_total{pipeline=\"a\"} 0\n"
                        "xdcr_link_detachments_total{pipeline=\"b\"} 1\n"
                        "xdcr_link_detachments_total{pipeline=\"c\"} 0\n"),
              std::string::npos)
        << text;
  }
  EXPECT_TRUE(ps[0]->linkMembers().empty()) << "a link that is gone leaves no members behind";
}

}  // namespace
}  // namespace xdcr::replicator
