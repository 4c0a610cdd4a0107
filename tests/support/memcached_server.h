#pragma once
// A real memcached (Debian package memcached) on 127.0.0.1, a free port found at run time,
// stopped by its PID: `memcached -l 127.0.0.1 -p PORT -U 0 -m 64 -I 1m -t 1` (+ `-u nobody` as
// root; `-u root` under libfaketime), optionally under libfaketime (faketime.h) for a skewed clock.
// memcached reads its wall clock ONCE at start, so a skew must be in place before it starts.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace xdcr::test {

/** True when a memcached binary is on PATH (tests skip otherwise). */
bool memcachedAvailable();

/** One item as `mg <key> v t f` sees it. */
struct MemcachedItem {
  bool present = false;
  std::string value;
  int64_t ttl_s = -1;  // remaining seconds, -1 = no deadline
  uint32_t flags = 0;
};

class MemcachedServer {
 public:
  /** Starts it (retrying on another port when the bind fails) and waits until it answers
   *  `version`. `env`: extra environment (libfaketime). Throws std::runtime_error with the log. */
  explicit MemcachedServer(std::vector<std::pair<std::string, std::string>> env = {},
                           std::chrono::milliseconds start_timeout = std::chrono::seconds(10));
  ~MemcachedServer();
  MemcachedServer(const MemcachedServer&) = delete;
  MemcachedServer& operator=(const MemcachedServer&) = delete;

  uint16_t port() const { return port_; }
  pid_t pid() const { return process_.pid(); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  ExitStatus stop();

  /** One request, the raw reply up to and including `terminator` (e.g. "\r\n" or "END\r\n").
   *  Throws on I/O errors. */
  std::string request(const std::string& text, const std::string& terminator = "\r\n");
  /** `mg <key> v t f` (a key with bytes other than printable ASCII in base64 with `b`). */
  MemcachedItem get(const std::string& key);
  /** `ms <key> <len> T<exptime>`: the reply line ("HD"). */
  std::string set(const std::string& key, const std::string& value, int64_t exptime = 0);
  /** `stats` → `STAT time`. */
  int64_t statTime();
  /** Items currently stored (`stats` → `curr_items`). */
  int64_t currItems();
  std::string logTail() const;

 private:
  bool startOn(uint16_t port, std::string* why);
  int connectFd();

  std::vector<std::pair<std::string, std::string>> env_;
  std::chrono::milliseconds start_timeout_;
  TempDir dir_;
  uint16_t port_ = 0;
  Subprocess process_;
  int fd_ = -1;
};

}  // namespace xdcr::test
