#include "tests/support/wait.h"

#include <algorithm>
#include <thread>

namespace xdcr::test {

bool waitUntil(const std::function<bool()>& predicate, std::chrono::milliseconds timeout,
               std::chrono::milliseconds interval) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // Bounded in count as well as time: a predicate that returns instantly with a zero interval
  // still ends at the deadline.
  while (true) {
    if (predicate()) {
      return true;
    }
    auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      return false;
    }
    auto sleep = std::min<std::chrono::steady_clock::duration>(interval, deadline - now);
    std::this_thread::sleep_for(sleep);
    if (std::chrono::steady_clock::now() >= deadline) {
      return predicate();
    }
  }
}

int64_t unixTimeMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace xdcr::test
