#include "replicator/metrics.h"

#include <fmt/format.h>

#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <sstream>
#include <type_traits>

#include "common/version.h"

namespace xdcr::replicator {
namespace {

/** Writes one metric family: HELP, TYPE, then its samples. */
class Family {
 public:
  Family(std::string& out, std::string_view name, std::string_view type, std::string_view help)
      : out_(out), name_(name) {
    fmt::format_to(std::back_inserter(out_), "# HELP {} {}\n# TYPE {} {}\n", name, help, name,
                   type);
  }
  /** A histogram's series: the family's name + `suffix` (_bucket, _sum, _count). */
  void sample(std::string_view suffix, std::string_view labels, double value) {
    suffixed_ = std::string(name_) + std::string(suffix);
    const std::string_view name = name_;
    name_ = suffixed_;
    sample(labels, value);
    name_ = name;
  }
  /** `labels` is the inside of {...}, already escaped. */
  void sample(std::string_view labels, double value) {
    // The exposition format spells the special values +Inf, -Inf and NaN.
    const std::string v = std::isnan(value)   ? "NaN"
                          : std::isinf(value) ? (value > 0 ? "+Inf" : "-Inf")
                                              : fmt::format("{}", value);
    if (labels.empty()) {
      fmt::format_to(std::back_inserter(out_), "{} {}\n", name_, v);
    } else {
      fmt::format_to(std::back_inserter(out_), "{}{{{}}} {}\n", name_, labels, v);
    }
  }

 private:
  std::string& out_;
  std::string_view name_;
  std::string suffixed_;
};

std::string pl(const PipelineMetrics& p) {
  // A Redis Cluster source: one instance per source shard, told apart by `shard`.
  if (!p.shard.empty()) {
    return "pipeline=\"" + escapeLabel(p.name) + "\",shard=\"" + escapeLabel(p.shard) + "\"";
  }
  return "pipeline=\"" + escapeLabel(p.name) + "\"";
}

std::string quoted(std::string_view label, std::string_view value) {
  return fmt::format("{}=\"{}\"", label, escapeLabel(value));
}

/** The agent-wide clock metrics (interface.md §4), from the latest completed check. */
void renderClockMetrics(std::string& out, const clock::ClockReport& r) {
  {
    Family f(out, "xdcr_clock_offset_seconds", "gauge",
             "Clock minus NTP consensus time: clock=local is this host, otherwise a cluster. "
             "Absent without an NTP majority.");
    if (auto local = r.ntp.localErrorNs()) {
      f.sample(quoted("clock", "local"), double(*local) / 1e9);
      for (const auto& [name, c] : r.clusters) {
        if (auto e = r.clusterErrorNs(name)) f.sample(quoted("clock", name), double(*e) / 1e9);
      }
    }
  }
  {
    Family f(out, "xdcr_clock_cluster_offset_seconds", "gauge",
             "A cluster's clock minus this host's (Redis TIME, minimum-RTT sample).");
    for (const auto& [name, c] : r.clusters) {
      if (c.measured) f.sample(quoted("cluster", name), double(c.offset_ns) / 1e9);
    }
  }
  {
    Family f(out, "xdcr_clock_cluster_probe_ok", "gauge",
             "1 if the latest TIME probe of the cluster succeeded.");
    for (const auto& [name, c] : r.clusters) f.sample(quoted("cluster", name), c.error.empty());
  }
  if (r.ntp.configured) {
    {
      Family f(out, "xdcr_clock_ntp_majority", "gauge",
               "1 if a majority of the NTP servers agreed at the latest check, 0 if not.");
      f.sample("", r.ntp.ok ? 1 : 0);
    }
    {
      Family f(out, "xdcr_clock_ntp_server_offset_seconds", "gauge",
               "An NTP server's time minus this host's (minimum-delay sample).");
      for (const auto& s : r.ntp.servers) {
        if (s.ok) f.sample(quoted("server", s.server), double(s.offset_ns) / 1e9);
      }
    }
    {
      Family f(out, "xdcr_clock_ntp_server_truechimer", "gauge",
               "1 if the server is in the majority, 0 if a falseticker or silent.");
      for (const auto& s : r.ntp.servers) f.sample(quoted("server", s.server), s.truechimer);
    }
  }
  {
    Family f(out, "xdcr_clock_checks_total", "counter", "Completed clock checks.");
    f.sample("", double(r.check));
  }
}

}  // namespace

std::string escapeLabel(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out.push_back('\\');
      out.push_back(c);
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::optional<double> PipelineMetrics::clockSkewSeconds() const {
  if (skew == nullptr || !skew->measured) return std::nullopt;
  return double(skew->delta_ns) / 1e9;
}

std::optional<bool> PipelineMetrics::clockSkewExceeded() const {
  if (skew == nullptr || !skew->measured) return std::nullopt;
  return skew->exceeded;
}

namespace {

template <class T>
MetricValue valueOf(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return double(v);
  } else {
    return uint64_t(v);
  }
}

template <class T>
void addSample(std::vector<MetricSample>& out, std::string_view label, std::string_view label_value,
               const T& v) {
  out.push_back({label, label_value, valueOf(v)});
}

template <class T>
void addSample(std::vector<MetricSample>& out, std::string_view label, std::string_view label_value,
               const std::optional<T>& v) {
  if (v) out.push_back({label, label_value, valueOf(*v)});
}

// One MetricRow per row of XDCR_PIPELINE_METRICS; each kind of row knows where its samples are.
using Samples = std::vector<MetricSample>;
#define XDCR_ROW_COUNTER(field, metric, status, help)                                     \
  MetricRow{metric, "counter", status, help, [](const PipelineMetrics& p, Samples& out) { \
              addSample(out, {}, {}, p.stats->field);                                     \
            }},
#define XDCR_ROW_COUNTER_BY(field, Enum, label, names, metric, status, help)              \
  MetricRow{metric, "counter", status, help, [](const PipelineMetrics& p, Samples& out) { \
              for (size_t i = 0; i < (names).size(); ++i) {                               \
                addSample(out, label, (names)[i], p.stats->field[i]);                     \
              }                                                                           \
            }},
#define XDCR_ROW_COUNTER_BY_KEY(field, label, metric, status, help)                       \
  MetricRow{metric, "counter", status, help, [](const PipelineMetrics& p, Samples& out) { \
              for (const auto& [key, n] : p.stats->field) addSample(out, label, key, n);  \
            }},
#define XDCR_ROW_COUNTER_PART(field, label, value, metric, status, help)                  \
  MetricRow{metric, "counter", status, help, [](const PipelineMetrics& p, Samples& out) { \
              addSample(out, label, value, p.stats->field);                               \
            }},
#define XDCR_ROW_GAUGE(member, metric, status, help)                                    \
  MetricRow{metric, "gauge", status, help, [](const PipelineMetrics& p, Samples& out) { \
              addSample(out, {}, {}, std::invoke(&PipelineMetrics::member, p));         \
            }},
#define XDCR_ROW_GAUGE_BY(member, label, label_member, metric, status, help)                   \
  MetricRow{metric, "gauge", status, help, [](const PipelineMetrics& p, Samples& out) {        \
              addSample(out, label, p.label_member, std::invoke(&PipelineMetrics::member, p)); \
            }},
#define XDCR_ROW_COUNTER_OF(member, label, value, metric, status, help)                   \
  MetricRow{metric, "counter", status, help, [](const PipelineMetrics& p, Samples& out) { \
              addSample(out, label, value, std::invoke(&PipelineMetrics::member, p));     \
            }},
constexpr MetricRow kRows[] = {XDCR_PIPELINE_METRICS(
    XDCR_ROW_COUNTER, XDCR_ROW_COUNTER_BY, XDCR_ROW_COUNTER_BY_KEY, XDCR_ROW_COUNTER_PART,
    XDCR_ROW_GAUGE, XDCR_ROW_GAUGE_BY, XDCR_ROW_COUNTER_OF)};
#undef XDCR_ROW_COUNTER
#undef XDCR_ROW_COUNTER_BY
#undef XDCR_ROW_COUNTER_BY_KEY
#undef XDCR_ROW_COUNTER_PART
#undef XDCR_ROW_GAUGE
#undef XDCR_ROW_GAUGE_BY
#undef XDCR_ROW_COUNTER_OF

/**
 * The pipeline families: HELP and TYPE once per family, then every pipeline's samples (the rows
 * of a family split over several fields, pipeline by pipeline).
 */
void renderPipelineMetrics(std::string& out, const std::vector<PipelineMetrics>& ps) {
  const std::span<const MetricRow> rows = pipelineMetricRows();
  Samples samples;
  for (size_t first = 0, end = 0; first < rows.size(); first = end) {
    end = first + 1;
    while (end < rows.size() && rows[end].metric == rows[first].metric) ++end;
    Family f(out, rows[first].metric, rows[first].type, rows[first].help);
    for (const auto& p : ps) {
      samples.clear();
      for (size_t r = first; r < end; ++r) rows[r].samples(p, samples);
      for (const auto& s : samples) {
        const double v = std::visit([](auto x) { return double(x); }, s.value);
        if (s.label.empty()) {
          f.sample(pl(p), v);
        } else {
          f.sample(fmt::format("{},{}=\"{}\"", pl(p), s.label, escapeLabel(s.label_value)), v);
        }
      }
    }
  }
}

/** xdcr_apply_latency_seconds: one histogram per pipeline (instance). */
void renderLatency(std::string& out, const std::vector<PipelineMetrics>& ps) {
  Family f(out, "xdcr_apply_latency_seconds", "histogram",
           "From a change ready to be written to the target to the target's answer.");
  for (const auto& p : ps) {
    const LatencyHistogram& h = p.stats->apply_latency;
    uint64_t cumulative = 0;
    for (size_t i = 0; i < LatencyHistogram::kBounds.size(); ++i) {
      cumulative += h.buckets[i];
      f.sample("_bucket", fmt::format("{},le=\"{}\"", pl(p), LatencyHistogram::kBounds[i]),
               double(cumulative));
    }
    f.sample("_bucket", pl(p) + ",le=\"+Inf\"", double(h.count));
    f.sample("_sum", pl(p), h.sum);
    f.sample("_count", pl(p), double(h.count));
  }
}

}  // namespace

std::span<const MetricRow> pipelineMetricRows() {
  return kRows;
}

void renderProcessMetrics(std::string& out, double process_start_unix) {
  // /proc/self/stat: fields after the command's closing parenthesis; utime and stime (14, 15)
  // in clock ticks, vsize (23) in bytes, rss (24) in pages.
  std::ifstream stat("/proc/self/stat");
  std::string line;
  if (std::getline(stat, line)) {
    const size_t close = line.rfind(')');
    std::istringstream in(close == std::string::npos ? std::string() : line.substr(close + 2));
    std::vector<std::string> f((std::istream_iterator<std::string>(in)),
                               std::istream_iterator<std::string>());
    // f[0] is field 3 (state).
    if (f.size() > 21) {
      const double ticks = double(::sysconf(_SC_CLK_TCK));
      const double cpu = (std::stod(f[11]) + std::stod(f[12])) / ticks;
      Family(out, "process_cpu_seconds_total", "counter",
             "Total user and system CPU time spent in seconds.")
          .sample("", cpu);
      Family(out, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.")
          .sample("", std::stod(f[20]));
      Family(out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.")
          .sample("", std::stod(f[21]) * double(::sysconf(_SC_PAGESIZE)));
    }
  }
  std::error_code ec;
  size_t fds = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++fds;
  }
  if (!ec) {
    Family(out, "process_open_fds", "gauge", "Number of open file descriptors.")
        .sample("", double(fds));
  }
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    Family(out, "process_max_fds", "gauge", "Maximum number of open file descriptors.")
        .sample("", rl.rlim_cur == RLIM_INFINITY ? std::numeric_limits<double>::infinity()
                                                 : double(rl.rlim_cur));
  }
  if (process_start_unix > 0) {
    Family(out, "process_start_time_seconds", "gauge",
           "Start time of the process since unix epoch in seconds.")
        .sample("", process_start_unix);
  }
}

std::string renderMetrics(const std::vector<PipelineMetrics>& ps, const clock::ClockReport* clock,
                          const AgentFigures* agent) {
  std::string out;
  renderPipelineMetrics(out, ps);
  renderLatency(out, ps);
  if (clock != nullptr) renderClockMetrics(out, *clock);
  if (agent != nullptr) {
    Family(out, "xdcr_config_last_reload_successful", "gauge",
           "1 if the last configuration reload (SIGHUP, agent.watch_config) was applied, 0 if the "
           "file was invalid and the running configuration was kept.")
        .sample("", agent->last_reload_successful ? 1 : 0);
    Family(out, "xdcr_config_last_reload_success_timestamp_seconds", "gauge",
           "Unix time of the last successful configuration load (the start counts).")
        .sample("", agent->last_reload_success_unix);
    Family f(out, "xdcr_config_reloads_total", "counter", "Configuration reloads, by result.");
    f.sample(quoted("result", "success"), double(agent->reloads_succeeded));
    f.sample(quoted("result", "failure"), double(agent->reloads_failed));
    renderProcessMetrics(out, agent->process_start_unix);
  }
  {
    Family f(out, "xdcr_build_info", "gauge", "Version and git revision of this build.");
    f.sample(fmt::format("version=\"{}\",revision=\"{}\"", escapeLabel(version()),
                         escapeLabel(gitRevision())),
             1);
  }
  return out;
}

}  // namespace xdcr::replicator
