#pragma once
// A real redis-server (Debian's, from PATH, or another server binary: the server matrix's
// wrappers, tests/support/server_matrix.h) on 127.0.0.1 with its own temporary directory.

#include <gtest/gtest.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/resp_client.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace xdcr::test {

/** One `slaveN:ip=...,port=...,state=...,offset=...,lag=...` line of INFO replication. */
struct ReplicaInfo {
  std::string name;  // "slave0"
  std::string ip;
  int port = 0;
  std::string state;  // wait_bgsave, send_bulk, online, ...
  int64_t offset = 0;
  int64_t lag = 0;
};

/** The replicas a master lists in its INFO replication (as returned by RespClient::info()). */
std::vector<ReplicaInfo> replicasOf(const std::map<std::string, std::string>& replication_info);

class RedisServer;

/**
 * Waits (bounded) until `replica` has a link up to its master and has processed the master's
 * whole replication stream as of the call (slave_repl_offset >= the master's
 * master_repl_offset, read first). WAIT on a fresh connection does not do this: it only waits
 * for that connection's own writes. False on timeout.
 */
bool waitReplicaCaughtUp(const RedisServer& master, const RedisServer& replica,
                         std::chrono::milliseconds timeout = std::chrono::seconds(10));

/**
 * Waits (bounded, polling every `poll`) until the first replica `source` lists — the agent — is
 * online and has acknowledged the source's whole stream (its offset equals master_repl_offset,
 * both read in one INFO): the load must have stopped. The failure says how far it got.
 */
::testing::AssertionResult waitAgentAcknowledgedAll(
    const RedisServer& source, std::chrono::milliseconds timeout,
    std::chrono::milliseconds poll = std::chrono::milliseconds(100));

/** TLS for a test server (see RedisServer::startTls). */
struct RedisTls {
  std::string cert_file;  // the server's certificate (PEM)
  std::string key_file;
  std::string ca_file;        // tls-ca-cert-file: the CA that client certificates must chain to
  bool auth_clients = false;  // tls-auth-clients yes: a client certificate is required
};

class RedisServer {
 public:
  /**
   * Starts `redis-server --bind 127.0.0.1 --port P --save '' --appendonly no --dir DIR
   * --daemonize no --logfile DIR/redis.log <extra_args>` on a free port, retrying with another
   * port when the start fails (the port can be taken between freePort() and the bind), and waits
   * until this very process (checked by INFO process_id) answers PING. Throws std::runtime_error
   * with the server's log tail when no attempt succeeds within `start_timeout` each.
   */
  explicit RedisServer(std::vector<std::string> extra_args = {},
                       std::chrono::milliseconds start_timeout = std::chrono::seconds(10));
  /** As above, with extra environment variables (NAME, value) for the server process only, e.g.
   * LD_PRELOAD for a skewed clock (faketime.h); kept for restart(). */
  RedisServer(std::vector<std::string> extra_args, std::chrono::milliseconds start_timeout,
              std::vector<std::pair<std::string, std::string>> env);
  /**
   * A server whose only TCP port speaks TLS: `--port 0 --tls-port P` with `tls`'s files, plus a
   * plain Unix socket in its directory for the test's own commands (client() uses it, so a test
   * drives it like any other server). port() and address() are the TLS port's.
   */
  static std::unique_ptr<RedisServer> startTls(
      const RedisTls& tls, std::vector<std::string> extra_args = {},
      std::chrono::milliseconds start_timeout = std::chrono::seconds(10));
  /**
   * A Sentinel: `redis-server DIR/sentinel.conf --sentinel` followed by the usual arguments (the
   * command line's --bind, --port, --dir and --logfile win over the file) and `extra_args`.
   * `config_lines` (e.g. "sentinel monitor m 127.0.0.1 6379 2") are written to the file once,
   * before the first start: Sentinel rewrites its file as it learns about replicas and other
   * Sentinels, so restart() keeps what it learned. client() talks to the Sentinel; readiness is
   * checked as for a server (PING and INFO's process_id).
   */
  /** As the first constructor, with another server binary (e.g. a server matrix wrapper that
   *  execs valkey-server in a chroot): `binary` replaces "redis-server". */
  static std::unique_ptr<RedisServer> startBinary(
      const std::string& binary, std::vector<std::string> extra_args = {},
      std::chrono::milliseconds start_timeout = std::chrono::seconds(10),
      std::vector<std::pair<std::string, std::string>> env = {});
  static std::unique_ptr<RedisServer> startSentinel(
      const std::vector<std::string>& config_lines, std::vector<std::string> extra_args = {},
      std::chrono::milliseconds start_timeout = std::chrono::seconds(10));
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  uint16_t port() const { return port_; }
  pid_t pid() const { return process_.pid(); }
  /** "127.0.0.1:<port>". */
  std::string address() const;
  const std::string& dir() const { return dir_.path(); }
  bool running() { return process_.running(); }

  /** SIGTERM, wait up to `grace`, then SIGKILL. Safe to call twice. */
  ExitStatus stop(std::chrono::milliseconds grace = std::chrono::seconds(10));
  /** stop() then start again on the same port with the same arguments (the data set is lost:
   * there is no persistence). Throws if it does not come back within the start timeout. */
  void restart();

  /** True for a server made by startTls(). */
  bool tls() const { return tls_.has_value(); }
  /** The Unix socket of a TLS server ("" otherwise). */
  std::string unixSocket() const;

  /** True for a server made by startSentinel(). */
  bool sentinel() const { return sentinel_; }
  /** The configuration file of a Sentinel ("" otherwise). */
  std::string sentinelConfigFile() const;

  /** A new client connection to this server (its Unix socket for a TLS server). */
  RespClient client(std::chrono::milliseconds io_timeout = std::chrono::seconds(10)) const;
  /** The last lines of redis.log (and of the captured stdout/stderr, when not empty). */
  std::string logTail(size_t lines = 40) const;

 private:
  RedisServer(RedisTls tls, std::vector<std::string> extra_args,
              std::chrono::milliseconds start_timeout);
  struct SentinelMode {
    std::vector<std::string> config_lines;
  };
  struct Binary {
    std::string path;
    std::vector<std::pair<std::string, std::string>> env;
  };
  RedisServer(const Binary& binary, std::vector<std::string> extra_args,
              std::chrono::milliseconds start_timeout);
  RedisServer(const SentinelMode& mode, std::vector<std::string> extra_args,
              std::chrono::milliseconds start_timeout);
  /** One start attempt on `port`; on failure stops the process and explains why in `why`. */
  bool startOn(uint16_t port, std::string* why);
  /** The constructors' start loop: free ports, kStartAttempts tries. */
  void startOnFreePort();

  TempDir dir_;
  std::string binary_ = "redis-server";
  std::vector<std::string> extra_args_;
  std::chrono::milliseconds start_timeout_;
  std::vector<std::pair<std::string, std::string>> env_;
  std::optional<RedisTls> tls_;
  bool sentinel_ = false;
  uint16_t port_ = 0;
  Subprocess process_;
};

}  // namespace xdcr::test
