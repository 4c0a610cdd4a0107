#include "clock/skew.h"

#include <fmt/format.h>

#include <cstdlib>

namespace xdcr::clock {

std::optional<int64_t> ClockReport::clusterErrorNs(const std::string& name) const {
  const ClusterClockReport* c = cluster(name);
  if (c == nullptr || !c->measured || !ntp.ok) return std::nullopt;
  return c->offset_ns - ntp.offset_ns;
}

std::string formatOffset(int64_t ns) {
  const char sign = ns < 0 ? '-' : '+';
  const double a = std::abs(static_cast<double>(ns));
  if (a >= 1e9) return fmt::format("{}{:.3f} s", sign, a / 1e9);
  if (a >= 1e6) return fmt::format("{}{:.1f} ms", sign, a / 1e6);
  return fmt::format("{}{:.0f} µs", sign, a / 1e3);
}

PipelineSkew evaluateSkew(const ClockReport& report, const std::string& source,
                          const std::string& target, int64_t max_skew_ns) {
  PipelineSkew out;
  const ClusterClockReport* s = report.cluster(source);
  const ClusterClockReport* t = report.cluster(target);
  for (const auto* c : {s, t}) {
    if (c == nullptr || !c->measured) {
      const std::string& name = c == s ? source : target;
      out.reason = fmt::format("the clock of cluster {} is not measured yet{}", name,
                               c != nullptr && !c->error.empty() ? " (" + c->error + ")" : "");
      return out;
    }
  }
  out.measured = true;
  out.source_offset_ns = s->offset_ns;
  out.target_offset_ns = t->offset_ns;
  out.delta_ns = t->offset_ns - s->offset_ns;
  std::vector<std::string> why;
  // A coarse clock (memcached's 1 s grain) can only be said to be off by more than its grain.
  const int64_t grain = s->grain_ns + t->grain_ns;
  if (std::llabs(out.delta_ns) > max_skew_ns + grain) {
    why.push_back(
        fmt::format("target {} is {} from source {} (Δ = target − source), over "
                    "max_skew {}",
                    target, formatOffset(out.delta_ns), source,
                    fmt::format("{:g} ms", double(max_skew_ns) / 1e6)));
  }
  for (const std::string* name : {&source, &target}) {
    const int64_t own_grain = (*name == source ? s : t)->grain_ns;
    if (auto err = report.clusterErrorNs(*name);
        err && std::llabs(*err) > max_skew_ns + own_grain) {
      why.push_back(fmt::format("cluster {} is {} from NTP time, over max_skew {}", *name,
                                formatOffset(*err),
                                fmt::format("{:g} ms", double(max_skew_ns) / 1e6)));
    }
  }
  out.exceeded = !why.empty();
  for (size_t i = 0; i < why.size(); ++i) {
    out.reason += (i == 0 ? "" : "; ") + why[i];
  }
  return out;
}

}  // namespace xdcr::clock
