#include "target/marker.h"

#include <fmt/format.h>

#include <charconv>
#include <chrono>
#include <random>

namespace xdcr::target {

namespace {

// When this process started, in the tokens it writes: of two agents writing one pipeline's
// marker, the one that started later gives way (markerWriterIsNewer).
const int64_t kProcessStartMs = std::chrono::duration_cast<std::chrono::milliseconds>(
                                    std::chrono::system_clock::now().time_since_epoch())
                                    .count();

/** The start time in a token, 0 for the plain random tokens of earlier versions. */
int64_t startOf(std::string_view token) {
  const auto dot = token.find('.');
  if (dot == std::string_view::npos) return 0;
  int64_t v = 0;
  auto [p, ec] = std::from_chars(token.data(), token.data() + dot, v, 16);
  return ec == std::errc() && p == token.data() + dot ? v : 0;
}

}  // namespace

std::string newMarkerToken() {
  thread_local std::mt19937_64 gen([] {
    std::random_device rd;
    std::seed_seq seq{rd(), rd(), rd(), rd()};
    return std::mt19937_64(seq);
  }());
  return fmt::format("{:x}.{:016x}", kProcessStartMs, gen());
}

bool markerWriterIsNewer(std::string_view theirs, std::string_view ours) {
  const int64_t a = startOf(theirs), b = startOf(ours);
  if (a != b) return a > b;
  return theirs > ours;  // started in the same millisecond: a fixed order all agents agree on
}

std::optional<std::string> markerMovedAway(const UnmarkedMaster& master, size_t masters,
                                           const std::map<std::string, int64_t>& keys_by_token,
                                           int64_t checkpoint_age_ms) {
  if (master.promoted || master.uptime_ms < 0 || checkpoint_age_ms < 0 ||
      master.uptime_ms <= checkpoint_age_ms + kUnmarkedUptimeMarginMs) {
    return std::nullopt;
  }
  for (const auto& [token, keys] : keys_by_token) {
    if (masters > 0 && keys >= static_cast<int64_t>(masters)) {
      return fmt::format(
          "its marker moved with its slot to another master (a reshard since the checkpoint): "
          "{} markers of token {} on {} masters, and it has run for {} s, since before the "
          "checkpoint ({} s ago)",
          keys, token, masters, master.uptime_ms / 1000, checkpoint_age_ms / 1000);
    }
  }
  return std::nullopt;
}

}  // namespace xdcr::target
