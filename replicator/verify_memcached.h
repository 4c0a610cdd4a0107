#pragma once
// `xdcr-agent verify` against a memcached target (docs/expiry-semantics.md §11): the target side
// and the pure rule of what the memcached sink does with one source key.
//
// memcached cannot list its keys cheaply, so verify reads the target per SOURCE key: `mg <key>
// v t f` (a key with bytes other than printable ASCII in base64 with `b`), pipelined, then
// `stats` for `STAT time`. memcached's `t` is its stored exptime minus its own current time and
// `STAT time` is that current time on its timeline (both whole seconds, one clock tick), so
// STAT time + t is the absolute exptime it holds — the `T` the sink sent. Extra keys (on the
// target with no source key) are not counted.

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/redis_conn.h"
#include "config/config.h"

namespace xdcr::replicator::verify {

/** One item as `mg <key> v t f` read it. */
struct McItem {
  bool present = false;
  std::string value;
  int64_t deadline_ms = -1;  // STAT time + t, in ms on memcached's timeline; -1 none
  uint32_t flags = 0;
};

/** What the memcached sink does with a source key (interface.md §6.1): written, or not. */
struct McExpectation {
  enum class Kind {
    Written,  // an `ms` with `flags` and a deadline the DeadlineRules check
    Expired,  // expired on arrival: deleted there (absent is right; present expires itself)
    Refused,  // refused by the rules and counted; the old value deleted: absent is right
  };
  Kind kind = Kind::Written;
  std::string reason;  // Refused: xdcr_target_write_failures_total's reason
  std::string why;     // Refused: a sentence for the report
  uint32_t flags = 0;  // Written: the client flags (0 string, 1 DUMP payload, 2 JSON)
};

/** The facts the rule needs about one source key. */
struct McExpectInput {
  std::string target_key;      // after key_rewrite
  std::string type;            // TYPE on the source ("string", "hash", ...)
  size_t value_size = 0;       // the bytes memcached would store (a string, its JSON, DUMP)
  int64_t deadline_ms = 0;     // the deadline after strip_ttl and the shift; 0 none
  int64_t max_ttl_ms = 0;      // the key's effective max_ttl; 0 none
  int64_t target_now_ms = 0;   // memcached's clock now
  uint64_t item_size_max = 0;  // `stats settings`
  config::NonStrings non_strings = config::NonStrings::Refuse;
};

/** The memcached sink's decision for one key, in the sink's order (key, type, deadline, size). */
McExpectation expectOnMemcached(const McExpectInput& in);

/** A memcached target as verify reads it. */
class MemcachedVerifyTarget {
 public:
  MemcachedVerifyTarget(net::any_io_executor ex, const config::ClusterConfig& cluster,
                        std::chrono::milliseconds timeout);
  const std::string& label() const { return label_; }
  /** Connects and reads `stats settings` (item_size_max). */
  net::awaitable<Status> connect();
  uint64_t itemSizeMax() const { return item_size_max_; }
  /** The connection the clock is probed on (`stats`). */
  RedisConnection& clockConnection() { return conn_; }
  /** Each key (a key memcached cannot take is not asked: absent); `stat_time_s`: STAT time. */
  net::awaitable<Result<std::vector<McItem>>> read(const std::vector<std::string>& keys,
                                                   int64_t& stat_time_s);

 private:
  const config::ClusterConfig& cluster_;
  std::string label_;
  std::chrono::milliseconds timeout_;
  RedisConnection conn_;
  uint64_t item_size_max_ = 1 << 20;
};

}  // namespace xdcr::replicator::verify
