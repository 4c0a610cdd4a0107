#include "clock/skew_monitor.h"

#include "clock/memcached_time.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "clock/ntp_selection.h"
#include "clock/nts.h"
#include "clock/redis_time.h"
#include "common/sentinel.h"

namespace xdcr::clock {
namespace {

namespace net = boost::asio;

/** Runs the tasks concurrently on this coroutine's executor and returns when all have ended. */
net::awaitable<void> runConcurrently(std::vector<net::awaitable<void>> tasks) {
  if (tasks.empty()) co_return;
  auto ex = co_await net::this_coro::executor;
  auto remaining = std::make_shared<size_t>(tasks.size());
  auto done = std::make_shared<net::steady_timer>(ex, net::steady_timer::time_point::max());
  for (auto& t : tasks) {
    net::co_spawn(ex, std::move(t), [remaining, done](std::exception_ptr) {
      if (--*remaining == 0) done->cancel();
    });
  }
  if (*remaining > 0) co_await done->async_wait(net::as_tuple(net::use_awaitable));
}

}  // namespace

SkewMonitor::SkewMonitor(net::any_io_executor ex, config::ConfigConstSharedPtr config,
                         SkewMonitorOptions options)
    : ex_(ex), config_(std::move(config)), options_(std::move(options)), wake_(ex) {}

SkewMonitor::~SkewMonitor() = default;

void SkewMonitor::setConfig(config::ConfigConstSharedPtr config) {
  // Applied at the start of the next check: a check in flight holds references into the maps.
  pending_config_ = std::move(config);
}

void SkewMonitor::stop() {
  stopping_ = true;
  wake_.notify();
}

net::awaitable<void> SkewMonitor::run() {
  while (!stopping_) {
    try {
      co_await checkOnce();
    } catch (const std::exception& e) {
      spdlog::error("clock check failed unexpectedly: {}", e.what());
    }
    if (stopping_) break;
    co_await wake_.waitFor(config_->clock.check_interval);
  }
}

net::awaitable<ClockReport> SkewMonitor::checkOnce() {
  if (pending_config_) {
    // Forget the clusters that are gone or now elsewhere; the others keep their last offset.
    // Connections and NTS sessions are redone: addresses, credentials or the CA may have changed.
    for (auto it = clusters_.begin(); it != clusters_.end();) {
      const auto* before = config_->cluster(it->first);
      const auto* after = pending_config_->cluster(it->first);
      const bool same =
          before != nullptr && after != nullptr && before->address() == after->address();
      it = same ? std::next(it) : clusters_.erase(it);
    }
    connections_.clear();
    nts_clients_.clear();
    config_ = std::move(pending_config_);
    pending_config_.reset();
  }
  // A SIGHUP while we wait only sets pending_config_: this one stays valid for the whole check.
  config::ConfigConstSharedPtr cfg = config_;
  ClockReport report;
  std::vector<net::awaitable<void>> tasks;
  for (const auto& [name, cluster] : cfg->clusters) {
    ClusterClockReport& slot = clusters_[name];
    slot.cluster = name;
    tasks.push_back(checkCluster(cluster, slot));
  }
  // NTP runs beside the TIME probes; its result lands in `report` directly.
  tasks.push_back([](SkewMonitor* self, const config::ClockConfig& clock,
                     NtpReport& out) -> net::awaitable<void> {
    out = co_await self->checkNtp(clock);
  }(this, cfg->clock, report.ntp));
  co_await runConcurrently(std::move(tasks));

  report.clusters = clusters_;
  report.check = ++checks_;
  report.at_ms = options_.now_ns() / 1'000'000;
  logChanges(report);
  latest_ = report;
  if (listener_) listener_(report);
  co_return report;
}

void SkewMonitor::logChanges(const ClockReport& now) const {
  // Log transitions only: a check every few seconds must not repeat the same line.
  const ClockReport* before = latest_ ? &*latest_ : nullptr;
  if (now.ntp.configured) {
    const bool was_ok = before == nullptr || before->ntp.ok;
    if (!now.ntp.ok && (was_ok || before->ntp.error != now.ntp.error)) {
      spdlog::warn("clock: no usable NTP time: {}; clusters are compared with each other only",
                   now.ntp.error);
    } else if (now.ntp.ok && before != nullptr && !before->ntp.ok) {
      spdlog::info("clock: NTP time usable again: this host is {} from it ({} servers agree)",
                   formatOffset(-now.ntp.offset_ns), now.ntp.truechimers);
    }
  }
  for (const auto& [name, c] : now.clusters) {
    const ClusterClockReport* b = before != nullptr ? before->cluster(name) : nullptr;
    const std::string previous = b != nullptr ? b->error : "";
    if (!c.error.empty() && c.error != previous) {
      spdlog::warn("clock: cannot read the clock of cluster {}: {}{}", name, c.error,
                   c.measured
                       ? fmt::format(" (keeping its last offset, {})", formatOffset(c.offset_ns))
                       : std::string());
    } else if (c.error.empty() && !previous.empty()) {
      spdlog::info("clock: cluster {} measured again: {} from this host", name,
                   formatOffset(c.offset_ns));
    }
  }
}

net::awaitable<void> SkewMonitor::checkCluster(const config::ClusterConfig& cluster,
                                               ClusterClockReport& out) {
  auto& conn = connections_[cluster.name];
  const std::string label =
      fmt::format("cluster {} ({}) clock probe", cluster.name, cluster.address());
  Status ready;
  if (!conn) {
    conn = std::make_unique<RedisConnection>(ex_, label);
    // A Sentinel itself has no TIME: the master its Sentinels name (kept until a probe fails).
    auto node = co_await sentinel::resolveEndpoint(cluster, options_.redis_timeout);
    if (node) {
      ready = co_await conn->connect(*node, options_.redis_timeout);  // TLS, AUTH
    } else {
      ready = fail(node.error());
    }
  }
  // (No co_await inside ?: — GCC 12 destroys the temporaries of such an expression twice.)
  Result<RedisTimeSample> sample = fail(Error::io("not probed"));
  if (ready && cluster.isMemcached()) {
    sample = co_await probeMemcachedTime(*conn, 3, options_.redis_timeout, options_.now_ns);
  } else if (ready) {
    sample = co_await probeRedisTime(*conn, options_.time_samples, options_.redis_timeout,
                                     options_.now_ns);
  } else {
    sample = fail(ready.error());
  }
  if (!sample) {
    // Reconnect next time; keep the last offset (a clock does not jump because a probe failed).
    if (conn) conn->close();
    conn.reset();
    out.error = sample.error().message;
    co_return;
  }
  out.measured = true;
  out.offset_ns = sample->offset_ns;
  out.bound_ns = sample->bound_ns;
  out.rtt_ns = sample->rtt_ns;
  out.grain_ns = cluster.isMemcached() ? kMemcachedGrainNs : 0;
  out.measured_at_ms = options_.now_ns() / 1'000'000;
  out.error.clear();
}

net::awaitable<NtpReport> SkewMonitor::checkNtp(const config::ClockConfig& clock) {
  NtpReport report;
  report.configured = !clock.ntp_servers.empty();
  if (!report.configured) co_return report;

  const size_t n = clock.ntp_servers.size();
  report.servers.resize(n);
  std::vector<std::optional<SntpResult>> results(n);
  std::vector<net::awaitable<void>> tasks;
  for (size_t i = 0; i < n; ++i) {
    report.servers[i].server = clock.ntp_servers[i];
    tasks.push_back([](SkewMonitor* self, const config::ClockConfig& clock, size_t i,
                       NtpServerReport& server,
                       std::optional<SntpResult>& result) -> net::awaitable<void> {
      const std::string& spec = clock.ntp_servers[i];
      Result<SntpResult> r = fail(Error::io("not queried"));
      if (clock.nts) {
        auto& client = self->nts_clients_[spec];
        if (!client) {
          NtsOptions o;
          o.ca_file = clock.nts_ca_file;
          o.samples = self->options_.ntp_samples;
          o.spacing = self->options_.ntp_spacing;
          o.timeout = std::max(self->options_.ntp_timeout, std::chrono::milliseconds(2000));
          o.now_ns = self->options_.now_ns;
          client = std::make_unique<NtsClient>(spec, std::move(o));
        }
        r = co_await client->query();
      } else {
        SntpOptions o;
        o.samples = self->options_.ntp_samples;
        o.spacing = self->options_.ntp_spacing;
        o.timeout = self->options_.ntp_timeout;
        o.now_ns = self->options_.now_ns;
        r = co_await querySntpServer(spec, std::move(o));
      }
      if (!r) {
        server.error = r.error().message;
        co_return;
      }
      server.ok = true;
      server.authenticated = clock.nts;
      server.offset_ns = r->best.offset_ns;
      server.delay_ns = r->best.delay_ns;
      server.stratum = r->best.stratum;
      result = std::move(*r);
    }(this, clock, i, report.servers[i], results[i]));
  }
  co_await runConcurrently(std::move(tasks));

  std::vector<ServerSample> samples;
  std::vector<size_t> index;  // samples[k] is server index[k]
  for (size_t i = 0; i < n; ++i) {
    if (!results[i]) continue;
    const NtpSample& b = results[i]->best;
    samples.push_back({clock.ntp_servers[i], b.offset_ns, b.delay_ns, b.root_distance_ns});
    index.push_back(i);
  }
  if (samples.empty()) {
    report.error = fmt::format("none of the {} NTP{} server(s) gave a usable time sample", n,
                               clock.nts ? "/NTS" : "");
    co_return report;
  }
  SelectionParams params;
  params.servers_queried = n;  // a silent server never helps a minority win
  auto sel = selectServers(samples, params);
  if (!sel) {
    report.error = sel.error().message;
    co_return report;
  }
  report.ok = true;
  report.offset_ns = sel->offset_ns;
  report.low_ns = sel->low_ns;
  report.high_ns = sel->high_ns;
  report.truechimers = sel->truechimers;
  for (size_t k = 0; k < sel->servers.size(); ++k) {
    report.servers[index[k]].truechimer = sel->servers[k].truechimer;
  }
  co_return report;
}

}  // namespace xdcr::clock
