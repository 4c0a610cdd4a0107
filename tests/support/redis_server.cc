#include "tests/support/redis_server.h"

#include <signal.h>

#include <stdexcept>

#include "tests/support/net.h"
#include "tests/support/wait.h"

namespace xdcr::test {
namespace {

constexpr int kStartAttempts = 5;

}  // namespace

std::vector<ReplicaInfo> replicasOf(const std::map<std::string, std::string>& replication_info) {
  std::vector<ReplicaInfo> replicas;
  for (const auto& [key, value] : replication_info) {
    // slave0, slave1, ...; "slave_read_only" and friends are not replica lines.
    if (key.size() <= 5 || key.compare(0, 5, "slave") != 0 ||
        key.find_first_not_of("0123456789", 5) != std::string::npos) {
      continue;
    }
    ReplicaInfo replica;
    replica.name = key;
    size_t pos = 0;
    while (pos <= value.size()) {
      size_t end = value.find(',', pos);
      if (end == std::string::npos) {
        end = value.size();
      }
      std::string item = value.substr(pos, end - pos);
      pos = end + 1;
      size_t eq = item.find('=');
      if (eq == std::string::npos) {
        continue;
      }
      std::string field = item.substr(0, eq);
      std::string text = item.substr(eq + 1);
      try {
        if (field == "ip") {
          replica.ip = text;
        } else if (field == "port") {
          replica.port = std::stoi(text);
        } else if (field == "state") {
          replica.state = text;
        } else if (field == "offset") {
          replica.offset = std::stoll(text);
        } else if (field == "lag") {
          replica.lag = std::stoll(text);
        }
      } catch (const std::exception&) {
        // A malformed number leaves the default; the state field is what tests look at.
      }
    }
    replicas.push_back(replica);
  }
  return replicas;
}

bool waitReplicaCaughtUp(const RedisServer& master, const RedisServer& replica,
                         std::chrono::milliseconds timeout) {
  return waitUntil(
      [&] {
        try {
          RespClient m = master.client(std::chrono::seconds(2));
          const int64_t wanted = std::stoll(m.info("replication")["master_repl_offset"]);
          RespClient r = replica.client(std::chrono::seconds(2));
          auto info = r.info("replication");
          return info["master_link_status"] == "up" &&
                 std::stoll(info["slave_repl_offset"]) >= wanted;
        } catch (const std::exception&) {
          return false;  // not answering, or a field missing: not yet
        }
      },
      timeout, std::chrono::milliseconds(10));
}

::testing::AssertionResult waitAgentAcknowledgedAll(const RedisServer& source,
                                                    std::chrono::milliseconds timeout,
                                                    std::chrono::milliseconds poll) {
  int64_t master = -1, acked = -1;
  std::string state = "not listed";
  const bool ok = waitUntil(
      [&] {
        try {
          RespClient c = source.client(std::chrono::seconds(5));
          auto info = c.info("replication");
          master = std::stoll(info["master_repl_offset"]);
          auto r = replicasOf(info);
          acked = r.empty() ? -1 : r.front().offset;
          state = r.empty() ? "not listed" : r.front().state;
          return !r.empty() && r.front().state == "online" && acked == master;
        } catch (const std::exception&) {
          return false;  // not answering: not yet
        }
      },
      timeout, poll);
  if (ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "the agent (replica state " << state << ") acknowledged " << acked
         << " of the source's " << master << " bytes of stream";
}

RedisServer::RedisServer(std::vector<std::string> extra_args,
                         std::chrono::milliseconds start_timeout)
    : dir_("xdcr-redis"), extra_args_(std::move(extra_args)), start_timeout_(start_timeout) {
  startOnFreePort();
}

RedisServer::RedisServer(std::vector<std::string> extra_args,
                         std::chrono::milliseconds start_timeout,
                         std::vector<std::pair<std::string, std::string>> env)
    : dir_("xdcr-redis"),
      extra_args_(std::move(extra_args)),
      start_timeout_(start_timeout),
      env_(std::move(env)) {
  startOnFreePort();
}

RedisServer::RedisServer(RedisTls tls, std::vector<std::string> extra_args,
                         std::chrono::milliseconds start_timeout)
    : dir_("xdcr-redis"),
      extra_args_(std::move(extra_args)),
      start_timeout_(start_timeout),
      tls_(std::move(tls)) {
  startOnFreePort();
}

RedisServer::RedisServer(const SentinelMode& mode, std::vector<std::string> extra_args,
                         std::chrono::milliseconds start_timeout)
    : dir_("xdcr-sentinel"),
      extra_args_(std::move(extra_args)),
      start_timeout_(start_timeout),
      sentinel_(true) {
  std::string text;
  for (const auto& line : mode.config_lines) {
    text += line + "\n";
  }
  writeFileText(sentinelConfigFile(), text);
  startOnFreePort();
}

RedisServer::RedisServer(const Binary& binary, std::vector<std::string> extra_args,
                         std::chrono::milliseconds start_timeout)
    : dir_("xdcr-redis"),
      binary_(binary.path),
      extra_args_(std::move(extra_args)),
      start_timeout_(start_timeout),
      env_(binary.env) {
  startOnFreePort();
}

std::unique_ptr<RedisServer> RedisServer::startBinary(
    const std::string& binary, std::vector<std::string> extra_args,
    std::chrono::milliseconds start_timeout, std::vector<std::pair<std::string, std::string>> env) {
  return std::unique_ptr<RedisServer>(
      new RedisServer(Binary{binary, std::move(env)}, std::move(extra_args), start_timeout));
}

std::unique_ptr<RedisServer> RedisServer::startSentinel(
    const std::vector<std::string>& config_lines, std::vector<std::string> extra_args,
    std::chrono::milliseconds start_timeout) {
  return std::unique_ptr<RedisServer>(
      new RedisServer(SentinelMode{config_lines}, std::move(extra_args), start_timeout));
}

std::string RedisServer::sentinelConfigFile() const {
  return sentinel_ ? dir_.file("sentinel.conf") : "";
}

std::unique_ptr<RedisServer> RedisServer::startTls(const RedisTls& tls,
                                                   std::vector<std::string> extra_args,
                                                   std::chrono::milliseconds start_timeout) {
  return std::unique_ptr<RedisServer>(new RedisServer(tls, std::move(extra_args), start_timeout));
}

std::string RedisServer::unixSocket() const {
  return tls_ ? dir_.file("redis.sock") : "";
}

void RedisServer::startOnFreePort() {
  std::string reasons;
  for (int attempt = 1; attempt <= kStartAttempts; ++attempt) {
    std::string why;
    if (startOn(freePort(), &why)) {
      return;
    }
    reasons += "\n  attempt " + std::to_string(attempt) + ": " + why;
  }
  throw std::runtime_error(binary_ + " did not start after " + std::to_string(kStartAttempts) +
                           " attempts:" + reasons + "\nlog tail:\n" + logTail());
}

RedisServer::~RedisServer() {
  stop();
}

std::string RedisServer::address() const {
  return "127.0.0.1:" + std::to_string(port_);
}

bool RedisServer::startOn(uint16_t port, std::string* why) {
  port_ = port;
  // clang-format off
  std::vector<std::string> argv = {binary_};
  if (sentinel_) {
    // The file must come first; Sentinel mode needs a writable one (it rewrites it).
    argv.insert(argv.end(), {sentinelConfigFile(), "--sentinel"});
  }
  argv.insert(argv.end(), {"--bind", "127.0.0.1",
                           "--port", tls_ ? "0" : std::to_string(port),
                           "--save", "",
                           "--appendonly", "no",
                           "--dir", dir_.path(),
                           "--daemonize", "no",
                           "--logfile", dir_.file("redis.log")});
  if (tls_) {
    argv.insert(argv.end(), {"--tls-port", std::to_string(port),
                             "--tls-cert-file", tls_->cert_file,
                             "--tls-key-file", tls_->key_file,
                             "--tls-ca-cert-file", tls_->ca_file,
                             "--tls-auth-clients", tls_->auth_clients ? "yes" : "no",
                             "--unixsocket", unixSocket(),
                             "--unixsocketperm", "700"});
  }
  // clang-format on
  argv.insert(argv.end(), extra_args_.begin(), extra_args_.end());
  try {
    process_ = Subprocess::start(argv, dir_.file("redis.stdout"), env_);
  } catch (const std::exception& e) {
    *why = e.what();
    return false;
  }

  std::string last_error = "no PING answer yet";
  bool exited = false;
  // Ready = the process we started is alive AND the server answering on the port is that process.
  // A port taken by someone else in the meantime would otherwise answer PING for us.
  const bool ready = waitUntil(
      [&] {
        if (!process_.running()) {
          exited = true;
          return true;  // stop waiting; reported below
        }
        try {
          RespClient client = tls_ ? RespClient::unixSocket(unixSocket(), std::chrono::seconds(1))
                                   : RespClient(port, std::chrono::milliseconds(1000));
          RespValue pong = client.command({"PING"});
          if (pong.isError() || pong.str() != "PONG") {
            last_error = "PING answered " + pong.toString();
            return false;
          }
          auto server = client.info("server");
          if (server["process_id"] != std::to_string(process_.pid())) {
            last_error = (tls_ ? unixSocket() : "port " + std::to_string(port)) +
                         " is served by process_id " + server["process_id"] + ", not by our pid " +
                         std::to_string(process_.pid());
            return false;
          }
          return true;
        } catch (const std::exception& e) {
          last_error = e.what();
          return false;
        }
      },
      start_timeout_, std::chrono::milliseconds(20));
  if (ready && !exited) {
    return true;
  }
  if (exited) {
    *why = binary_ + " on port " + std::to_string(port) + " " + process_.exitStatus()->describe() +
           " during start-up";
  } else {
    *why = binary_ + " on port " + std::to_string(port) + " not ready within " +
           std::to_string(start_timeout_.count()) + " ms: " + last_error;
  }
  process_.kill();
  return false;
}

ExitStatus RedisServer::stop(std::chrono::milliseconds grace) {
  return process_.stop(SIGTERM, grace);
}

void RedisServer::restart() {
  stop();
  std::string reasons;
  // Same port: whoever points at this server (the agent's config) must find it again. The
  // listening socket of the old process is gone once it was reaped, so a few retries suffice.
  for (int attempt = 1; attempt <= kStartAttempts; ++attempt) {
    std::string why;
    if (startOn(port_, &why)) {
      return;
    }
    reasons += "\n  attempt " + std::to_string(attempt) + ": " + why;
  }
  throw std::runtime_error("redis-server did not restart on port " + std::to_string(port_) + ":" +
                           reasons + "\nlog tail:\n" + logTail());
}

RespClient RedisServer::client(std::chrono::milliseconds io_timeout) const {
  if (tls_) return RespClient::unixSocket(unixSocket(), io_timeout);
  return RespClient(port_, io_timeout);
}

std::string RedisServer::logTail(size_t lines) const {
  std::string out = lastLines(readFileText(dir_.file("redis.log")), lines);
  std::string captured = lastLines(readFileText(dir_.file("redis.stdout")), lines);
  if (!captured.empty()) {
    out += "\n[stdout/stderr]\n" + captured;
  }
  return out;
}

}  // namespace xdcr::test
