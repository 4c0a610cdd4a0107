#pragma once
// One connection to a Redis server: `connect(endpoint)` = TCP connect, TLS handshake (when the
// endpoint has `tls`), AUTH (when it has a password); one-at-a-time calls for handshakes, and a
// growable read buffer for the streaming fast paths of source and target. The transport is plain
// TCP or TLS over it (common/tls.h); both read into the same buffer, without allocating.
//
// Not thread-safe: used from one coroutine strand. At most one read and one write in flight.
//
// Bandwidth limits (setRateLimits(), the pipeline option `bandwidth_limit`): a connection with a
// read limiter waits after each read while the limiter is in debt, one with a write limiter
// before each piece it writes. Without limiters (the default) nothing of that runs.

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/redis_endpoint.h"
#include "common/resp.h"
#include "common/resp_value.h"

namespace xdcr {

namespace net = boost::asio;

class RateLimiter;

/** A contiguous byte buffer: data is appended at the end and consumed from the front. */
class ReadBuffer {
 public:
  std::string_view data() const { return {buf_.get() + rpos_, wpos_ - rpos_}; }
  size_t size() const { return wpos_ - rpos_; }
  void consume(size_t n) {
    rpos_ += n;
    if (rpos_ == wpos_) rpos_ = wpos_ = 0;
  }
  /** Makes room for at least `min_free` bytes at the end; may move the data (invalidates views). */
  char* prepare(size_t min_free, size_t& free_out);
  void commit(size_t n) { wpos_ += n; }
  size_t capacity() const { return cap_; }
  /** Gives memory back after a large value passed through. */
  void shrinkIfIdle(size_t keep);

 private:
  std::unique_ptr<char[]> buf_;
  size_t cap_ = 0;
  size_t rpos_ = 0;
  size_t wpos_ = 0;
};

class RedisConnection {
 public:
  /** `label` names the peer in every error message, e.g. "source east (127.0.0.1:7001)". */
  RedisConnection(net::any_io_executor ex, std::string label);
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  /**
   * TCP connect, then with `endpoint.tls` the TLS handshake (certificate and name checked before
   * anything is sent), then `AUTH [username] password` when the endpoint has a password (a TLS
   * session without one is confirmed with a PING, so a server that refuses our client
   * certificate after a TLS 1.3 handshake is reported here). `timeout` bounds each step. Every
   * error names the connection (its label), what failed and what to change; never the password.
   */
  net::awaitable<Status> connect(const RedisEndpoint& endpoint, std::chrono::milliseconds timeout);
  /** Sends one command and waits for its reply. For handshakes, not for the fast path. */
  net::awaitable<Result<resp::ReplyInfo>> call(std::vector<std::string_view> args,
                                               std::chrono::milliseconds timeout,
                                               bool collect_elements = false);
  /**
   * Sends the commands pipelined (one write) and returns their replies in order, as whole values.
   * For tools (verify), not for the fast path. An error reply is a value, not a failure.
   */
  net::awaitable<Result<std::vector<resp::Value>>> callMany(
      const std::vector<std::vector<std::string>>& commands, std::chrono::milliseconds timeout);
  /**
   * One `SCAN cursor COUNT count` call in the selected db: the keys, and `cursor` advanced
   * ("0" once the scan is complete).
   */
  net::awaitable<Result<std::vector<std::string>>> scanPage(std::string& cursor, int count,
                                                            std::chrono::milliseconds timeout);
  /**
   * Reads the next whole reply without sending anything: a message pushed to a subscriber
   * (SUBSCRIBE), or the reply to a command written with writeAll(). Fails after `timeout` without
   * a complete reply (what was read stays buffered).
   */
  net::awaitable<Result<resp::Value>> readValue(std::chrono::milliseconds timeout);
  /** Reads one CRLF line (without CRLF), skipping bare "\n" keepalives before it. */
  net::awaitable<Result<std::string>> readLine(std::chrono::milliseconds timeout);

  /** Reads whatever is available (at least one byte) into the buffer. */
  net::awaitable<Result<size_t>> readSome();
  net::awaitable<Status> writeAll(std::string_view data);

  /**
   * Bandwidth limits (common/rate_limiter.h); nullptr: none. readSome() reads at most a burst
   * of `read` at a time and, after reading, waits while `read` is in debt; writeAll() writes in
   * pieces of at most a burst of `write`, each after the wait `write` asks for. close() and
   * cancel() end a wait as they end a pending read or write. Kept across connect().
   */
  void setRateLimits(std::shared_ptr<RateLimiter> read, std::shared_ptr<RateLimiter> write);

  ReadBuffer& buffer() { return buf_; }
  const ReadBuffer& buffer() const { return buf_; }
  const std::string& label() const { return label_; }
  /** Closes the socket; pending operations complete with an error. Idempotent. */
  void close();
  /** Cancels pending operations without closing. */
  void cancel();
  uint64_t bytesRead() const { return bytes_read_; }
  /** The address ("host:port") this connection was last connected to. */
  std::string address() const { return endpoint_.address(); }
  /** Whether a connection to `address` ("host:port") has ever had an answer in this process. */
  static bool addressAnswered(const std::string& address);
  /** True when the connection runs over TLS. */
  bool tls() const { return tls_ != nullptr; }

 private:
  struct Tls;       // the SSL context and stream (redis_conn.cc), only when TLS is on
  struct Throttle;  // the rate limiters and their timers, only when setRateLimits() set one

  net::awaitable<Status> connectTcp(const RedisEndpoint& endpoint,
                                    std::chrono::milliseconds timeout);
  net::awaitable<Status> handshake(const RedisEndpoint& endpoint,
                                   std::chrono::milliseconds timeout);
  /** AUTH [username] password; a clear error on a wrong password or a missing ACL user. */
  net::awaitable<Status> auth(const RedisEndpoint& endpoint, std::chrono::milliseconds timeout);
  net::awaitable<Result<size_t>> readSomeWithTimeout(std::chrono::milliseconds timeout);
  /** The message of a failed read or write, with a TLS explanation or a "not TLS?" hint. */
  std::string describeIoError(const boost::system::error_code& ec, bool reading) const;
  net::ip::tcp::socket& tcp();
  /** The write itself, without limits. */
  net::awaitable<Status> writeRaw(std::string_view data);
  net::awaitable<Status> writeThrottled(std::string_view data);
  /** Waits `wait` (the read's or the write's timer); false when close() or cancel() ended it. */
  net::awaitable<bool> throttleWait(bool reading, std::chrono::steady_clock::duration wait);

  net::ip::tcp::socket socket_;  // plain TCP; moved into tls_ once TLS starts
  std::unique_ptr<Tls> tls_;
  RedisEndpoint endpoint_;  // for messages (password cleared after AUTH)
  std::string label_;
  ReadBuffer buf_;
  uint64_t bytes_read_ = 0;
  std::unique_ptr<Throttle> throttle_;
  bool closed_ = false;  // close() since the last connect(): a throttle wait ends at once
};

}  // namespace xdcr
