#include "replicator/clock_report.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <cstdio>
#include <iostream>
#include <optional>

#include <fmt/format.h>

#include "clock/skew_monitor.h"

namespace xdcr::replicator {
namespace {

double seconds(int64_t ns) {
  return double(ns) / 1e9;
}

const char* actionName(config::SkewAction a) {
  switch (a) {
    case config::SkewAction::Warn:
      return "warn";
    case config::SkewAction::Pause:
      return "pause";
    case config::SkewAction::Compensate:
      return "compensate";
  }
  return "warn";
}

}  // namespace

nlohmann::json clockReportJson(const clock::ClockReport* r, const config::ClockConfig& cc) {
  nlohmann::json j;
  j["measured"] = r != nullptr;
  j["check_interval_ms"] = cc.check_interval.count();
  j["max_skew_ms"] = cc.max_skew.count();
  j["on_skew"] = actionName(cc.on_skew);
  if (r == nullptr) return j;
  j["check"] = r->check;
  j["checked_at_ms"] = r->at_ms;
  nlohmann::json ntp = {{"configured", r->ntp.configured}, {"nts", cc.nts}};
  if (r->ntp.configured) {
    ntp["majority"] = r->ntp.ok;
    ntp["error"] = r->ntp.error;
    if (r->ntp.ok) {
      // This host against NTP time, and the interval the majority agrees it lies in.
      ntp["local_offset_seconds"] = seconds(*r->ntp.localErrorNs());
      ntp["local_offset_interval_seconds"] = {seconds(-r->ntp.high_ns), seconds(-r->ntp.low_ns)};
      ntp["truechimers"] = r->ntp.truechimers;
    }
    auto& servers = ntp["servers"] = nlohmann::json::array();
    for (const auto& s : r->ntp.servers) {
      nlohmann::json sj = {{"server", s.server}, {"ok", s.ok}, {"truechimer", s.truechimer}};
      if (s.ok) {
        sj["offset_seconds"] = seconds(s.offset_ns);
        sj["delay_seconds"] = seconds(s.delay_ns);
        sj["stratum"] = s.stratum;
        sj["authenticated"] = s.authenticated;
      } else {
        sj["error"] = s.error;
      }
      servers.push_back(std::move(sj));
    }
  }
  j["ntp"] = std::move(ntp);
  auto& clusters = j["clusters"] = nlohmann::json::object();
  for (const auto& [name, c] : r->clusters) {
    nlohmann::json cj = {{"measured", c.measured}, {"error", c.error}};
    if (c.measured) {
      cj["offset_vs_local_seconds"] = seconds(c.offset_ns);
      cj["bound_seconds"] = seconds(c.bound_ns);
      cj["rtt_seconds"] = seconds(c.rtt_ns);
      if (c.grain_ns != 0) cj["grain_seconds"] = seconds(c.grain_ns);  // memcached: 2 s
      cj["measured_at_ms"] = c.measured_at_ms;
      if (auto e = r->clusterErrorNs(name)) cj["offset_vs_ntp_seconds"] = seconds(*e);
    }
    clusters[name] = std::move(cj);
  }
  return j;
}

nlohmann::json pipelineSkewJson(const clock::PipelineSkew& s, int64_t compensation_ms) {
  nlohmann::json j = {{"measured", s.measured}, {"exceeded", s.exceeded}, {"reason", s.reason}};
  if (s.measured) j["skew_seconds"] = seconds(s.delta_ns);
  j["compensation_ms"] = compensation_ms;
  return j;
}

int runClockCommand(const config::ConfigConstSharedPtr& config, bool as_json) {
  namespace net = boost::asio;
  net::io_context ioc(1);
  clock::SkewMonitor monitor(ioc.get_executor(), config);
  std::optional<clock::ClockReport> report;
  net::co_spawn(ioc, monitor.checkOnce(), [&](std::exception_ptr e, clock::ClockReport r) {
    if (!e) report = std::move(r);
  });
  ioc.run();
  if (!report) {
    std::cerr << "xdcr-agent clock: the clock check failed unexpectedly\n";
    return 1;
  }
  const auto& cc = config->clock;
  const int64_t max_ns = cc.max_skew.count() * 1'000'000;
  int status = 0;
  std::vector<std::string> problems;

  for (const auto& [name, c] : report->clusters) {
    if (!c.measured) {
      problems.push_back(fmt::format("cluster {}: clock not measured: {}", name, c.error));
    } else if (auto e = report->clusterErrorNs(name); e && std::llabs(*e) > max_ns + c.grain_ns) {
      problems.push_back(fmt::format("cluster {} is {} from NTP time (max_skew {} ms)", name,
                                     clock::formatOffset(*e), cc.max_skew.count()));
    }
  }
  nlohmann::json pipelines = nlohmann::json::object();
  std::vector<std::pair<std::string, clock::PipelineSkew>> skews;
  for (const auto& p : config->pipelines) {
    auto s = clock::evaluateSkew(*report, p.source, p.target, max_ns);
    // A coarse clock (memcached's 1 s STAT time) is over max_skew only beyond its grain, as
    // the agent judges it (evaluateSkew).
    int64_t grain_ns = 0;
    for (const std::string* c : {&p.source, &p.target}) {
      if (const auto* r = report->cluster(*c)) grain_ns += r->grain_ns;
    }
    if (s.measured && std::llabs(s.delta_ns) > max_ns + grain_ns) {
      problems.push_back(fmt::format("pipeline {}: {}", p.name, s.reason));
    }
    pipelines[p.name] = pipelineSkewJson(s, 0);
    skews.emplace_back(p.name, std::move(s));
  }
  if (!problems.empty()) status = 1;
  if (report->ntp.configured && !report->ntp.ok) status = 2;

  if (as_json) {
    nlohmann::json j = clockReportJson(&*report, cc);
    j["pipelines"] = std::move(pipelines);
    j["problems"] = problems;
    j["exit_status"] = status;
    std::cout << j.dump(2) << "\n";
    return status;
  }

  const auto& ntp = report->ntp;
  if (!ntp.configured) {
    std::printf(
        "NTP: no servers configured (clock.ntp_servers): clusters are compared with "
        "each other and with this host only\n");
  } else {
    std::printf("NTP servers (%s)\n", cc.nts ? "NTS-authenticated" : "SNTP, unauthenticated");
    std::printf("  %-28s %14s %12s %7s  %s\n", "SERVER", "OFFSET", "DELAY", "STRATUM", "VERDICT");
    for (const auto& s : ntp.servers) {
      if (s.ok) {
        std::printf("  %-28s %14s %12s %7d  %s\n", s.server.c_str(),
                    clock::formatOffset(s.offset_ns).c_str(),
                    clock::formatOffset(s.delay_ns).substr(1).c_str(), s.stratum,
                    !ntp.ok        ? "-"
                    : s.truechimer ? "truechimer"
                                   : "falseticker");
      } else {
        std::printf("  %-28s %14s %12s %7s  error: %s\n", s.server.c_str(), "-", "-", "-",
                    s.error.c_str());
      }
    }
    if (ntp.ok) {
      std::printf("  this host is %s from NTP time (%zu of %zu servers agree)\n",
                  clock::formatOffset(*ntp.localErrorNs()).c_str(), ntp.truechimers,
                  ntp.servers.size());
    } else {
      std::printf("  NO USABLE MAJORITY: %s\n", ntp.error.c_str());
    }
  }
  std::printf("CLUSTERS\n  %-20s %-24s %14s %14s %10s\n", "CLUSTER", "ADDRESS", "VS_THIS_HOST",
              "VS_NTP", "RTT");
  for (const auto& [name, c] : report->clusters) {
    const auto* cfg = config->cluster(name);
    const std::string addr = cfg != nullptr ? cfg->address() : "";
    if (!c.measured) {
      std::printf("  %-20s %-24s %14s %14s %10s  error: %s\n", name.c_str(), addr.c_str(), "-", "-",
                  "-", c.error.c_str());
      continue;
    }
    auto e = report->clusterErrorNs(name);
    std::printf("  %-20s %-24s %14s %14s %10s\n", name.c_str(), addr.c_str(),
                clock::formatOffset(c.offset_ns).c_str(), e ? clock::formatOffset(*e).c_str() : "-",
                clock::formatOffset(c.rtt_ns).substr(1).c_str());
  }
  std::printf("PIPELINES (max_skew %lld ms, on_skew %s)\n  %-24s %14s  %s\n",
              static_cast<long long>(cc.max_skew.count()), actionName(cc.on_skew), "PIPELINE",
              "TARGET-SOURCE", "VERDICT");
  for (const auto& [name, s] : skews) {
    std::printf("  %-24s %14s  %s\n", name.c_str(),
                s.measured ? clock::formatOffset(s.delta_ns).c_str() : "-",
                !s.measured  ? s.reason.c_str()
                : s.exceeded ? ("OVER: " + s.reason).c_str()
                             : "ok");
  }
  for (const auto& p : problems) std::printf("problem: %s\n", p.c_str());
  std::printf("clock: %s\n", status == 0   ? "all within max_skew"
                             : status == 1 ? "skew beyond max_skew (or a clock not measured)"
                                           : "no usable NTP majority");
  return status;
}

}  // namespace xdcr::replicator
