// Durations in the config file: an integer number of seconds, or an integer with a unit
// (interface.md §2). Fractions and negative values are rejected here; the loader gives negative
// values their own message because "max_ttl: -1" is a likely mistake with a specific fix.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "config/config.h"
#include "config/internal.h"

namespace xdcr::config {
namespace {

struct Unit {
  std::string_view suffix;
  int64_t ms;
};

// Longest suffix first so that "ms" is not read as "m" followed by garbage.
constexpr std::array<Unit, 5> kUnits = {{
    {"ms", 1},
    {"s", 1000},
    {"m", 60 * 1000},
    {"h", 60 * 60 * 1000},
    {"d", 24 * 60 * 60 * 1000},
}};

}  // namespace

std::optional<Duration> parseDuration(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') {
    ++digits;
  }
  if (digits == 0) {
    return std::nullopt;  // empty, a sign, a unit alone, or not a number at all
  }
  std::string_view suffix = std::string_view(text).substr(digits);
  int64_t unit_ms = 0;
  if (suffix.empty()) {
    unit_ms = 1000;  // a bare integer is seconds
  } else {
    for (const Unit& unit : kUnits) {
      if (suffix == unit.suffix) {
        unit_ms = unit.ms;
        break;
      }
    }
    if (unit_ms == 0) {
      return std::nullopt;
    }
  }
  int64_t count = 0;
  for (size_t i = 0; i < digits; ++i) {
    if (__builtin_mul_overflow(count, int64_t{10}, &count) ||
        __builtin_add_overflow(count, int64_t{text[i] - '0'}, &count)) {
      return std::nullopt;
    }
  }
  int64_t total = 0;
  if (__builtin_mul_overflow(count, unit_ms, &total)) {
    return std::nullopt;
  }
  return Duration(total);
}

namespace internal {

std::string formatDuration(Duration d) {
  int64_t ms = d.count();
  if (ms == 0) {
    return "0s";
  }
  // Walk from the largest unit down; kUnits is ordered ms, s, m, h, d.
  for (auto it = kUnits.rbegin(); it != kUnits.rend(); ++it) {
    if (ms % it->ms == 0) {
      return std::to_string(ms / it->ms) + std::string(it->suffix);
    }
  }
  return std::to_string(ms) + "ms";
}

}  // namespace internal
}  // namespace xdcr::config
