#include "clock/ntp_selection.h"

#include <fmt/format.h>

#include <algorithm>

namespace xdcr::clock {
namespace {

// Edge types in the RFC 5905 §11.2.1 sort; at equal values lower edges sort first, so intervals
// that only touch still share a point.
enum EdgeType : int { kLow = -1, kMid = 0, kHigh = 1 };

struct Edge {
  int64_t value;
  int type;
  bool operator<(const Edge& o) const { return value != o.value ? value < o.value : type < o.type; }
};

std::string describe(const std::vector<ServerVerdict>& v) {
  std::string s;
  for (const auto& x : v) {
    if (!s.empty()) {
      s += ", ";
    }
    s += fmt::format("{} {:+.6f} s ± {:.6f} s", x.name, static_cast<double>(x.offset_ns) / 1e9,
                     static_cast<double>(x.lambda_ns) / 1e9);
  }
  return s;
}

}  // namespace

int64_t correctnessHalfWidth(const ServerSample& s, int64_t tolerance_ns) {
  return std::max(s.delay_ns / 2 + s.root_distance_ns, tolerance_ns);
}

tl::expected<Selection, SelectionFailure> selectServers(std::span<const ServerSample> samples,
                                                        const SelectionParams& params) {
  const size_t m = samples.size();
  const size_t n = std::max(params.servers_queried, m);
  std::vector<ServerVerdict> verdicts;
  verdicts.reserve(m);
  std::vector<Edge> edges;
  edges.reserve(3 * m);
  for (const auto& s : samples) {
    int64_t lambda = correctnessHalfWidth(s, params.tolerance_ns);
    verdicts.push_back(ServerVerdict{s.name, s.offset_ns, lambda, false});
    edges.push_back({s.offset_ns - lambda, kLow});
    edges.push_back({s.offset_ns, kMid});
    edges.push_back({s.offset_ns + lambda, kHigh});
  }
  std::sort(edges.begin(), edges.end());

  if (m == 0) {
    return tl::unexpected<SelectionFailure>(SelectionFailure{
        fmt::format("no majority: none of the {} NTP servers gave a usable sample", n), {}});
  }

  // Try f = 0, 1, … assumed falsetickers while the remaining m − f still are a majority of all
  // servers asked. For each f find the lowest point l covered by m − f intervals and the highest
  // point u covered by m − f intervals, counting midpoints left outside (d); accept when d ≤ f
  // and l ≤ u.
  for (size_t f = 0; 2 * (m - f) > n; ++f) {
    const auto need = static_cast<int64_t>(m - f);
    int64_t c = 0;
    size_t d = 0;
    bool have_low = false;
    bool have_high = false;
    int64_t low = 0;
    int64_t high = 0;
    for (const auto& e : edges) {
      c -= e.type;
      if (c >= need) {
        low = e.value;
        have_low = true;
        break;
      }
      if (e.type == kMid) {
        ++d;
      }
    }
    c = 0;
    for (auto it = edges.rbegin(); it != edges.rend(); ++it) {
      c += it->type;
      if (c >= need) {
        high = it->value;
        have_high = true;
        break;
      }
      if (it->type == kMid) {
        ++d;
      }
    }
    if (!have_low || !have_high || d > f || low > high) {
      continue;
    }
    // Truechimers: intervals that overlap the intersection (as ntpd's clock_select does); the
    // true time lies in [l, u] and each of them may contain it.
    std::vector<int64_t> offsets;
    for (auto& v : verdicts) {
      v.truechimer = v.offset_ns + v.lambda_ns >= low && v.offset_ns - v.lambda_ns <= high;
      if (v.truechimer) {
        offsets.push_back(v.offset_ns);
      }
    }
    if (2 * offsets.size() <= n) {
      continue;  // cannot happen with d ≤ f, but never report a minority as the answer
    }
    std::sort(offsets.begin(), offsets.end());
    size_t k = offsets.size();
    int64_t median = k % 2 == 1 ? offsets[k / 2]
                                : offsets[k / 2 - 1] + (offsets[k / 2] - offsets[k / 2 - 1]) / 2;
    return Selection{median, low, high, k, std::move(verdicts)};
  }
  for (auto& v : verdicts) {
    v.truechimer = false;
  }
  std::string msg = fmt::format(
      "no majority: no group of more than half of the {} NTP servers agree on the time "
      "(tolerance {:.3f} s){}{}",
      n, static_cast<double>(params.tolerance_ns) / 1e9, m > 0 ? "; intervals: " : "",
      describe(verdicts));
  if (n > m) {
    msg += fmt::format("; {} server(s) gave no usable sample", n - m);
  }
  return tl::unexpected<SelectionFailure>(SelectionFailure{std::move(msg), std::move(verdicts)});
}

}  // namespace xdcr::clock
