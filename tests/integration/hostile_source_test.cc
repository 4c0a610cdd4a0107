// A hostile or broken source: a fake master on 127.0.0.1 that completes the replication
// handshake with a real RDB (taken from a real redis-server), streams a few valid commands, then
// something malformed. The agent must fail the session with a clear error naming the problem,
// reconnect, keep its memory bounded (an absurd declared length allocates nothing), and never
// write a partial command to the target.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/support/harness.h"

namespace xdcr::test {
namespace {

using namespace std::chrono_literals;

/** An empty-keyspace RDB written by a real redis-server 7.0 (SAVE). */
std::string realEmptyRdb() {
  RedisServer r;
  r.client().command({"SAVE"});
  return readFileText(r.dir() + "/dump.rdb");
}

/**
 * Accepts replica connections one after another; to each it answers the handshake, sends
 * `rdb` as the full-sync payload, then `stream`, and keeps the connection open until the agent
 * closes it (or 30 s). Counts the connections.
 */
class FakeMaster {
 public:
  FakeMaster(std::string rdb, std::string stream)
      : rdb_(std::move(rdb)), stream_(std::move(stream)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd_, 4) != 0) {
      throw std::runtime_error("fake master: cannot listen on 127.0.0.1");
    }
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~FakeMaster() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
    for (auto& t : clients_) t.join();
  }
  uint16_t port() const { return port_; }
  /** Replication sessions begun (PSYNC received); the agent's clock probes do not count. */
  int connections() const { return psyncs_; }

 private:
  void run() {
    while (!stop_) {
      timeval tv{0, 200'000};
      fd_set set;
      FD_ZERO(&set);
      FD_SET(fd_, &set);
      if (::select(fd_ + 1, &set, nullptr, nullptr, &tv) <= 0) continue;
      int c = ::accept(fd_, nullptr, nullptr);
      if (c < 0) continue;
      clients_.emplace_back([this, c] {
        serve(c);
        ::close(c);
      });
    }
  }
  // Reads one command's first word (enough to answer the handshake).
  static std::string readCommand(int c, std::string& buf) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    for (;;) {
      // *N\r\n$len\r\nWORD\r\n…: complete when N bulk strings are buffered.
      size_t pos = 0;
      auto line = [&](std::string& out) {
        size_t e = buf.find("\r\n", pos);
        if (e == std::string::npos) return false;
        out = buf.substr(pos, e - pos);
        pos = e + 2;
        return true;
      };
      std::string head, first;
      bool complete = false;
      if (line(head) && !head.empty() && head[0] == '*') {
        int n = std::atoi(head.c_str() + 1);
        complete = true;
        for (int i = 0; i < n && complete; ++i) {
          std::string len;
          if (!line(len)) {
            complete = false;
            break;
          }
          size_t l = std::strtoul(len.c_str() + 1, nullptr, 10);
          if (buf.size() < pos + l + 2) {
            complete = false;
            break;
          }
          if (i == 0) first = buf.substr(pos, l);
          pos += l + 2;
        }
      }
      if (complete) {
        buf.erase(0, pos);
        return first;
      }
      if (std::chrono::steady_clock::now() > deadline) return "";
      char tmp[4096];
      timeval tv{0, 200'000};
      ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      ssize_t n = ::recv(c, tmp, sizeof tmp, 0);
      if (n == 0) return "";
      if (n > 0) buf.append(tmp, size_t(n));
    }
  }
  static void sendAll(int c, const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      ssize_t n = ::send(c, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += size_t(n);
    }
  }
  void serve(int c) {
    std::string buf;
    for (int i = 0; i < 64 && !stop_; ++i) {
      const std::string cmd = readCommand(c, buf);
      if (cmd.empty()) return;
      if (cmd == "PING" || cmd == "ping") {
        sendAll(c, "+PONG\r\n");
      } else if (cmd == "REPLCONF" || cmd == "replconf") {
        sendAll(c, "+OK\r\n");
      } else if (cmd == "TIME" || cmd == "time") {  // the agent's clock probe
        const auto now = std::chrono::system_clock::now().time_since_epoch();
        const auto us = std::chrono::duration_cast<std::chrono::microseconds>(now).count();
        const std::string sec = std::to_string(us / 1'000'000),
                          micro = std::to_string(us % 1'000'000);
        sendAll(c, "*2\r\n$" + std::to_string(sec.size()) + "\r\n" + sec + "\r\n$" +
                       std::to_string(micro.size()) + "\r\n" + micro + "\r\n");
      } else if (cmd == "PSYNC" || cmd == "psync") {
        ++psyncs_;
        sendAll(c, "+FULLRESYNC 0123456789012345678901234567890123456789 0\r\n");
        sendAll(c, "$" + std::to_string(rdb_.size()) + "\r\n" + rdb_);
        sendAll(c, stream_);
        break;
      } else {
        sendAll(c, "-ERR unknown command\r\n");
      }
    }
    // Hold the connection until the agent drops it (it must, on the malformed input).
    const auto until = std::chrono::steady_clock::now() + 30s;
    char tmp[4096];
    while (!stop_ && std::chrono::steady_clock::now() < until) {
      timeval tv{0, 200'000};
      ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      if (::recv(c, tmp, sizeof tmp, 0) == 0) return;
    }
  }

  std::string rdb_, stream_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> psyncs_{0};
  std::thread thread_;
  std::vector<std::thread> clients_;  // touched by the accept thread only, joined at the end
};

std::string command(std::initializer_list<std::string> args) {
  std::string out = "*" + std::to_string(args.size()) + "\r\n";
  for (const auto& a : args) out += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
  return out;
}

int64_t rssKb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return -1;
}

/** A one-pipeline config from the fake master to `target`; returns its path. */
std::string writeConfig(TempDir& dir, const FakeMaster& master, const RedisServer& target) {
  const std::string config = dir.file("xdcr.yaml");
  writeFileText(config, "agent: {state_dir: \"" + dir.file("state") +
                            "\"}\n"
                            "clusters:\n"
                            "  src: {type: redis, address: \"127.0.0.1:" +
                            std::to_string(master.port()) +
                            "\"}\n"
                            "  dst: {type: redis, address: \"127.0.0.1:" +
                            std::to_string(target.port()) +
                            "\"}\n"
                            "pipelines:\n  - {name: p, source: src, target: dst}\n");
  return config;
}

struct Case {
  const char* name;
  std::string tail;       // sent after the valid commands
  const char* error_has;  // the agent's log must say this
};

class HostileSourceTest : public ::testing::TestWithParam<int> {};

std::vector<Case> cases() {
  return {
      {"absurd bulk length", "*3\r\n$3\r\nSET\r\n$1\r\nb\r\n$99999999999\r\n", "malformed"},
      {"absurd array length", "*9999999999\r\n$3\r\nSET\r\n", "malformed"},
      {"not RESP", "hello world\r\n\r\n", "malformed"},
      {"bulk not terminated", "*3\r\n$3\r\nSET\r\n$1\r\nc\r\n$1\r\nvXX", "malformed"},
  };
}

TEST_P(HostileSourceTest, FailsCleanlyReconnectsAndWritesNoPartialCommand) {
  const Case c = cases()[GetParam()];
  const std::string stream = command({"SELECT", "0"}) + command({"SET", "a", "1"}) + c.tail;
  FakeMaster master(realEmptyRdb(), stream);
  RedisServer target;
  TempDir dir("xdcr-hostile");
  AgentProcess agent(writeConfig(dir, master, target), dir.file("agent.log"));
  // It fails the session and comes back: a second connection.
  ASSERT_TRUE(waitUntil([&] { return master.connections() >= 2; }, 20s))
      << c.name << ": no reconnect; " << agent.describeState() << "\n"
      << agent.logTail();
  EXPECT_TRUE(agent.running()) << agent.describeState();
  const std::string log = agent.logText();
  EXPECT_NE(log.find(c.error_has), std::string::npos) << c.name << ":\n" << agent.logTail();
  EXPECT_NE(log.find("reconnecting in"), std::string::npos) << agent.logTail();
  RespClient t = target.client();
  EXPECT_EQ(t.command({"GET", "a"}).toString(), "\"1\"") << "the valid command before it";
  EXPECT_EQ(t.command({"EXISTS", "b"}).integer(), 0) << "a partial command reached the target";
  EXPECT_EQ(t.command({"EXISTS", "c"}).integer(), 0) << "a partial command reached the target";
  const int64_t hwm = rssKb(agent.pid());
  std::cout << c.name << ": agent peak RSS " << hwm << " kB\n";
  EXPECT_LT(hwm, 200 * 1024) << "an absurd declared length must not be allocated";
  EXPECT_TRUE(agent.terminate().success()) << agent.logTail();
}

INSTANTIATE_TEST_SUITE_P(Inputs, HostileSourceTest, ::testing::Range(0, 4));

TEST(HostileSource, ABadRdbChecksumFailsTheFullSyncAndReconnects) {
  std::string rdb = realEmptyRdb();
  ASSERT_GT(rdb.size(), 8u);
  rdb[rdb.size() - 1] = char(rdb[rdb.size() - 1] ^ 0x5a);  // the CRC64 trailer
  FakeMaster master(rdb, command({"SET", "a", "1"}));
  RedisServer target;
  TempDir dir("xdcr-hostile");
  AgentProcess agent(writeConfig(dir, master, target), dir.file("agent.log"));
  ASSERT_TRUE(waitUntil([&] { return master.connections() >= 2; }, 20s)) << agent.logTail();
  const std::string log = agent.logText();
  EXPECT_TRUE(log.find("CRC") != std::string::npos || log.find("checksum") != std::string::npos)
      << agent.logTail();
  EXPECT_EQ(target.client().command({"EXISTS", "a"}).integer(), 0)
      << "the stream after a snapshot that failed its checksum was applied";
  EXPECT_FALSE(std::filesystem::exists(dir.file("state") + "/p.ckpt"))
      << "a checkpoint was written for a snapshot that failed its checksum";
  EXPECT_TRUE(agent.terminate().success()) << agent.logTail();
}

}  // namespace
}  // namespace xdcr::test
