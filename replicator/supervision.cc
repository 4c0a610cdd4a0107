#include "replicator/supervision.h"

#include <fmt/format.h>

namespace xdcr::replicator {

std::string detachReason(MemberHold& m, bool others_free, std::chrono::steady_clock::time_point now,
                         const Limits& limits) {
  if (m.failed) return "its target failed";
  if (!others_free) {
    m.held_since.reset();  // everyone waits: the source is faster than every target
    return "";
  }
  if (m.paused) return "it is paused";
  const double bound = std::chrono::duration<double>(limits.detach_after).count();
  if (m.silent_s > bound) {
    return fmt::format("its target has not answered for {:.1f} s", m.silent_s);
  }
  if (!m.over_limits) {
    m.held_since.reset();
    return "";
  }
  if (!m.held_since) m.held_since = now;
  const double held = std::chrono::duration<double>(now - *m.held_since).count();
  if (held >= bound) {
    return fmt::format(
        "its target held the others back for {:.1f} s (over its unanswered "
        "limits)",
        held);
  }
  return "";
}

}  // namespace xdcr::replicator
