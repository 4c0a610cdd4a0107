#pragma once
// Bounded polling and wall-clock helpers.

#include <chrono>
#include <cstdint>
#include <functional>

namespace xdcr::test {

/**
 * Calls `predicate` until it returns true or `timeout` has passed, sleeping `interval` between
 * calls. The predicate runs at least once, and once more at the deadline, so a slow machine
 * does not turn a last-moment success into a failure. Returns the predicate's last answer.
 */
bool waitUntil(const std::function<bool()>& predicate, std::chrono::milliseconds timeout,
               std::chrono::milliseconds interval = std::chrono::milliseconds(50));

/** Unix epoch milliseconds from the wall clock (the clock Redis uses for deadlines). */
int64_t unixTimeMs();

}  // namespace xdcr::test
