#pragma once
// A real redis-server (Debian's) whose wall clock is skewed, for clock-skew tests: libfaketime
// (Debian package faketime / libfaketime) preloaded together with the ftshim preload
// (tests/support/ftshim/ftshim.c, CMake target xdcr_ftshim), without which libfaketime hangs
// jemalloc-linked redis-server at start-up (redis-replication-notes §10.2).
//
// The skew lives in a timestamp file that libfaketime re-reads on every clock read
// (FAKETIME_TIMESTAMP_FILE + FAKETIME_NO_CACHE=1), so setSkew() changes it while the server runs.
// CLOCK_MONOTONIC is left alone (FAKETIME_DONT_FAKE_MONOTONIC=1): Redis schedules serverCron and
// its timers on it, and faking it stalls active expiry and SIGTERM after a backward jump.

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/redis_server.h"
#include "tests/support/temp_dir.h"

namespace xdcr::test {

/** libfaketime.so.1 (/usr/lib/<multiarch>/faketime/), or "" when not installed. */
std::string libfaketimePath();
/** The ftshim preload built by this project (target xdcr_ftshim), or "" when missing. */
std::string ftshimPath();
/** True when libfaketime is installed and the ftshim preload was built: tests skip otherwise. */
bool fakeTimeAvailable();

/** The libfaketime relative-offset text for `seconds`: "+30", "-0.25", "+0" (µs precision). */
std::string fakeTimeOffsetText(double seconds);

/**
 * The environment that gives a child process a wall clock skewed by the offset written in
 * `timestamp_file` (LD_PRELOAD="<ftshim> <libfaketime>", FAKETIME_TIMESTAMP_FILE,
 * FAKETIME_NO_CACHE=1, FAKETIME_DONT_FAKE_MONOTONIC=1). Throws when fakeTimeAvailable() is false.
 */
std::vector<std::pair<std::string, std::string>> fakeTimeEnvironment(
    const std::string& timestamp_file);

/** Writes `fakeTimeOffsetText(seconds)` to `path` atomically (temporary file + rename). */
void writeFakeTimeFile(const std::string& path, double seconds);

/** A RedisServer (127.0.0.1, free port, stopped by PID) whose clock runs `skew` seconds ahead
 * (negative: behind) of the host's. */
class FakeTimeRedis {
 public:
  /** Throws std::runtime_error (with the log tail) when the server does not start, and when
   * fakeTimeAvailable() is false: check it first and skip. */
  explicit FakeTimeRedis(double skew_s, std::vector<std::string> extra_args = {},
                         std::chrono::milliseconds start_timeout = std::chrono::seconds(10));
  FakeTimeRedis(const FakeTimeRedis&) = delete;
  FakeTimeRedis& operator=(const FakeTimeRedis&) = delete;

  /** Changes the server's skew while it runs; it applies from the server's next clock read. */
  void setSkew(double seconds);
  double skew() const { return skew_s_; }
  /** FAKETIME_TIMESTAMP_FILE. */
  const std::string& timestampFile() const { return timestamp_file_; }

  RedisServer& server() { return server_; }
  const RedisServer& server() const { return server_; }
  RedisServer* operator->() { return &server_; }
  const RedisServer* operator->() const { return &server_; }

 private:
  TempDir dir_;                 // holds the timestamp file; outlives the server (declared first)
  std::string timestamp_file_;  // dir_/faketime.rc
  double skew_s_;
  RedisServer server_;
};

}  // namespace xdcr::test
