#pragma once
// A small blocking RESP2 client for tests: one TCP connection to 127.0.0.1:port, socket timeouts
// on every read and write so a test never hangs on a server that stopped answering.

#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace xdcr::test {

/** A connection-level failure (refused, reset, timed out, malformed reply). */
class RespIoError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/** One RESP2 reply. */
class RespValue {
 public:
  enum class Type { SimpleString, Error, Integer, Bulk, Null, Array };

  RespValue() = default;
  static RespValue simpleString(std::string text);
  static RespValue error(std::string text);
  static RespValue integer(int64_t value);
  static RespValue bulk(std::string bytes);
  static RespValue null();
  static RespValue array(std::vector<RespValue> items);

  Type type() const { return type_; }
  bool isNull() const { return type_ == Type::Null; }
  bool isError() const { return type_ == Type::Error; }
  bool isInteger() const { return type_ == Type::Integer; }
  bool isArray() const { return type_ == Type::Array; }
  /**
   * The text of a simple string, bulk string or error; throws std::logic_error otherwise. On a
   * temporary (`client.command(...).str()`) it returns the text by value, so a reference to it
   * (a `const auto&`, a range-for) cannot outlive the reply.
   */
  const std::string& str() const&;
  std::string str() &&;
  /** The value of an integer reply; throws std::logic_error otherwise. */
  int64_t integer() const;
  /** The items of an array reply; throws std::logic_error otherwise. By value on a temporary. */
  const std::vector<RespValue>& array() const&;
  std::vector<RespValue> array() &&;
  /** redis-cli-like rendering for messages: "v", (integer) 5, (error) ERR x, (nil), [a, b]. */
  std::string toString() const;

  bool operator==(const RespValue& other) const = default;

 private:
  Type type_ = Type::Null;
  std::string text_;
  int64_t integer_ = 0;
  std::vector<RespValue> items_;
};

using RespCommand = std::vector<std::string>;

class RespClient {
 public:
  /**
   * Connects to 127.0.0.1:port. `io_timeout` bounds the connect and every single send/recv call.
   * Throws RespIoError when the connection cannot be made.
   */
  explicit RespClient(uint16_t port,
                      std::chrono::milliseconds io_timeout = std::chrono::seconds(10));
  /**
   * Connects to a Unix domain socket (redis-server --unixsocket): the plain control channel of
   * a server whose TCP port speaks only TLS. Throws RespIoError when it cannot connect.
   */
  static RespClient unixSocket(const std::string& path,
                               std::chrono::milliseconds io_timeout = std::chrono::seconds(10));
  ~RespClient();
  RespClient(RespClient&& other) noexcept;
  RespClient& operator=(RespClient&& other) noexcept;
  RespClient(const RespClient&) = delete;
  RespClient& operator=(const RespClient&) = delete;

  uint16_t port() const { return port_; }

  /** Sends one command and reads its reply. Redis errors come back as an Error value. */
  RespValue command(const RespCommand& args);
  /**
   * Sends many commands and returns their replies in order. Commands are written in chunks and
   * each chunk's replies are read before the next is written, so neither side's buffers can fill
   * up and deadlock the exchange.
   */
  std::vector<RespValue> pipeline(const std::vector<RespCommand>& commands);
  /** INFO [section] as a map of its `key:value` lines. */
  std::map<std::string, std::string> info(const std::string& section = "");
  /** SELECT db; throws RespIoError if the server refuses. */
  void select(int db);

 private:
  RespClient(std::chrono::milliseconds io_timeout, std::string unix_path);
  void close();
  void sendAll(const std::string& data);
  void appendCommand(std::string& out, const RespCommand& args) const;
  RespValue readValue(int depth = 0);
  std::string readLine();
  void fill();
  [[noreturn]] void fail(const std::string& what);
  /** socket(domain) with the I/O timeouts set (SO_SNDTIMEO also bounds connect on Linux). */
  void openSocket(int domain);
  /** connect(), retried on EINTR; fails the test otherwise. */
  void connectTo(const sockaddr* addr, socklen_t len);

  uint16_t port_ = 0;
  std::string unix_path_;  // set for a Unix socket connection (then port_ is 0)
  int fd_ = -1;
  std::chrono::milliseconds io_timeout_;
  std::string buffer_;
  size_t read_pos_ = 0;
};

/**
 * The agent writes a target-loss marker key per pipeline into the target's db 0
 * (target/marker.h): bookkeeping, not replicated data. Comparisons leave it out.
 */
bool isAgentMarkerKey(std::string_view key);
/** DBSIZE of the selected db without the agent's marker keys. */
int64_t dataDbSize(RespClient& client);

}  // namespace xdcr::test
