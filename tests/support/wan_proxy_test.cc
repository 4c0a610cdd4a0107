// Tests of the user-space WAN simulator (wan_proxy.h) against a real redis-server: the delay a
// round trip gains, the bandwidth cap per direction (shared by connections), a cut with resets, a
// silent black hole that holds and then delivers, FIN forwarding, and the proxy's own throughput
// (printed, so a bench that uses it knows it is not measuring the proxy). Tests that use the
// proxy to model a WAN rely on these properties; every wait here is bounded.

#include "tests/support/wan_proxy.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "tests/support/net.h"
#include "tests/support/redis_server.h"
#include "tests/support/resp_client.h"
#include "tests/support/wait.h"

namespace xdcr::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

double millisSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

/** A plain TCP connection to 127.0.0.1:port, for what RespClient cannot show: a reply that does
 * not come while the connection stays open, a FIN, a reset. */
class RawConnection {
 public:
  enum class Read { Data, Timeout, Closed, Reset };

  explicit RawConnection(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
    timeval tv{10, 0};  // bounds connect and send
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      int err = errno;
      ::close(fd_);
      throw std::runtime_error(std::string("connect: ") + std::strerror(err));
    }
  }
  ~RawConnection() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  int fd() const { return fd_; }

  /** False when the connection failed (reset, closed) or a send timed out. */
  bool send(std::string_view data) {
    while (!data.empty()) {
      ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  /** Appends to `out` until it holds `want` bytes (Data), the peer closes (Closed) or resets
   * (Reset), or `timeout` passes (Timeout). */
  Read read(std::string& out, size_t want, std::chrono::milliseconds timeout) {
    auto deadline = Clock::now() + timeout;
    char buffer[64 * 1024];
    while (out.size() < want) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left <= 0ms) return Read::Timeout;
      pollfd pfd{fd_, POLLIN, 0};
      int ready = ::poll(&pfd, 1, static_cast<int>(left.count()));
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) return Read::Timeout;
      ssize_t n = ::recv(fd_, buffer, sizeof(buffer), MSG_DONTWAIT);
      if (n > 0) {
        out.append(buffer, static_cast<size_t>(n));
      } else if (n == 0) {
        return Read::Closed;
      } else if (errno == ECONNRESET || errno == EPIPE) {
        return Read::Reset;
      } else if (errno != EAGAIN && errno != EINTR) {
        throw std::runtime_error(std::string("recv: ") + std::strerror(errno));
      }
    }
    return Read::Data;
  }

 private:
  int fd_ = -1;
};

const char* toString(RawConnection::Read read) {
  switch (read) {
    case RawConnection::Read::Data:
      return "data";
    case RawConnection::Read::Timeout:
      return "timeout";
    case RawConnection::Read::Closed:
      return "closed";
    case RawConnection::Read::Reset:
      return "reset";
  }
  return "?";
}

/** The server's connected clients, the asking connection included. */
int64_t connectedClients(const RedisServer& server) {
  return std::stoll(server.client().info("clients").at("connected_clients"));
}

/** True when a new connection through `port` answers PING within 2 s. */
bool pingsThrough(uint16_t port) {
  try {
    RespClient client(port, 2s);
    return client.command({"PING"}).str() == "PONG";
  } catch (const RespIoError&) {
    return false;
  }
}

class WanProxyTest : public ::testing::Test {
 protected:
  std::unique_ptr<WanProxy> startProxy(WanProxy::Options options = {}) {
    options.name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    return WanProxy::start(server_.port(), options);
  }

  RedisServer server_;
};

TEST_F(WanProxyTest, ForwardsCountsAndForwardsTheEndOfAConnection) {
  auto proxy = startProxy();
  EXPECT_NE(proxy->port(), server_.port());
  EXPECT_EQ(proxy->upstreamPort(), server_.port());
  {
    RespClient client(proxy->port(), 5s);
    EXPECT_EQ(client.command({"SET", "k", "v"}).str(), "OK");
    EXPECT_EQ(client.command({"GET", "k"}).str(), "v");
    EXPECT_EQ(proxy->connectionsAccepted(), 1u);
    EXPECT_EQ(proxy->openConnections(), 1u);
    // *3 $3 SET $1 k $1 v + *2 $3 GET $1 k; +OK and $1 v back. Counted when the proxy's write
    // completes, which may be a moment after the client read the reply.
    EXPECT_TRUE(waitUntil([&] { return proxy->bytesUp() == 27u + 20u; }, 5s, 1ms))
        << proxy->bytesUp();
    EXPECT_TRUE(waitUntil([&] { return proxy->bytesDown() == 5u + 7u; }, 5s, 1ms))
        << proxy->bytesDown();
  }
  // The client's FIN reaches Redis, which closes; its FIN comes back and the pair is done.
  EXPECT_TRUE(waitUntil([&] { return proxy->openConnections() == 0; }, 5s));

  // The server ends the connection (QUIT): the client reads the reply, then the end.
  {
    RawConnection raw(proxy->port());
    ASSERT_TRUE(raw.send("QUIT\r\n"));
    std::string got;
    EXPECT_EQ(raw.read(got, 5, 5s), RawConnection::Read::Data);
    EXPECT_EQ(got, "+OK\r\n");
    got.clear();
    EXPECT_EQ(raw.read(got, 1, 5s), RawConnection::Read::Closed) << got;
    // Half closed: the pair lives until the client's end has gone through too.
    EXPECT_EQ(proxy->openConnections(), 1u);
  }
  EXPECT_TRUE(waitUntil([&] { return proxy->openConnections() == 0; }, 5s));
  EXPECT_EQ(proxy->stats().connections_accepted, 2u);
}

TEST_F(WanProxyTest, NothingUpstreamResetsTheClient) {
  auto proxy = WanProxy::start(freePort());
  RawConnection raw(proxy->port());
  std::string got;
  auto start = Clock::now();
  auto read = raw.read(got, 1, 5s);
  EXPECT_TRUE(read == RawConnection::Read::Reset || read == RawConnection::Read::Closed)
      << toString(read);
  EXPECT_LT(millisSince(start), 1000);
}

TEST_F(WanProxyTest, DelayAddsTwiceTheOneWayDelayToARoundTrip) {
  WanProxy::Options options;
  options.delay = 40ms;
  auto proxy = startProxy(options);
  RespClient client(proxy->port(), 5s);
  ASSERT_EQ(client.command({"PING"}).str(), "PONG");  // the connection is up

  std::vector<double> rtts;
  for (int i = 0; i < 7; ++i) {
    auto start = Clock::now();
    ASSERT_EQ(client.command({"PING"}).str(), "PONG");
    rtts.push_back(millisSince(start));
  }
  std::vector<double> sorted = rtts;
  std::sort(sorted.begin(), sorted.end());
  double median = sorted[sorted.size() / 2];
  std::printf(
      "PING round trip with a 40 ms one-way delay: min %.1f ms, median %.1f ms, max %.1f ms\n",
      sorted.front(), median, sorted.back());
  EXPECT_GE(sorted.front(), 80.0);
  EXPECT_LT(median, 200.0);

  // A run-time change applies to what is read from then on.
  proxy->setDelay(0ms);
  EXPECT_EQ(proxy->delay(), 0ms);
  auto start = Clock::now();
  ASSERT_EQ(client.command({"PING"}).str(), "PONG");
  double fast = millisSince(start);
  proxy->setDelay(100ms);
  start = Clock::now();
  ASSERT_EQ(client.command({"PING"}).str(), "PONG");
  double slow = millisSince(start);
  std::printf("PING round trip after setDelay(0): %.1f ms, after setDelay(100ms): %.1f ms\n", fast,
              slow);
  EXPECT_LT(fast, 40.0);
  EXPECT_GE(slow, 200.0);
  EXPECT_LT(slow, 400.0);
}

TEST_F(WanProxyTest, RateCapsEachDirectionAndIsSharedByConnections) {
  constexpr uint64_t kRate = 5'000'000;
  const std::string value(10'000'000, 'x');
  auto proxy = startProxy();
  RespClient client(proxy->port(), 20s);

  auto start = Clock::now();
  ASSERT_EQ(client.command({"SET", "big", value}).str(), "OK");
  double unlimited = millisSince(start);

  proxy->setRate(kRate);
  EXPECT_EQ(proxy->rate(), kRate);
  start = Clock::now();
  ASSERT_EQ(client.command({"SET", "big", value}).str(), "OK");
  double up = millisSince(start);
  start = Clock::now();
  ASSERT_EQ(client.command({"GET", "big"}).str().size(), value.size());
  double down = millisSince(start);
  std::printf(
      "SET of 10 MB: unlimited %.0f ms; at 5 MB/s: SET %.0f ms (%.2f MB/s), GET %.0f ms "
      "(%.2f MB/s)\n",
      unlimited, up, 10'000.0 / up, down, 10'000.0 / down);
  EXPECT_LT(unlimited, 1000.0);
  EXPECT_GE(up, 1800.0);
  EXPECT_LT(up, 4000.0);
  EXPECT_GE(down, 1800.0);
  EXPECT_LT(down, 4000.0);

  // Two connections share the link: 2 x 5 MB up take as long as 10 MB on one.
  const std::string half(5'000'000, 'y');
  std::atomic<int> ok{0};
  start = Clock::now();
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      try {
        RespClient c(proxy->port(), 20s);
        if (c.command({"SET", fmt::format("half{}", i), half}).str() == "OK") ++ok;
      } catch (const std::exception& e) {
        std::printf("connection %d: %s\n", i, e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  double shared = millisSince(start);
  std::printf("two concurrent SETs of 5 MB at 5 MB/s: %.0f ms\n", shared);
  EXPECT_EQ(ok.load(), 2);
  EXPECT_GE(shared, 1800.0);
  EXPECT_LT(shared, 4000.0);
}

TEST_F(WanProxyTest, CutResetsConnectionsAndRefusesNewOnesUntilHeal) {
  auto proxy = startProxy();
  RespClient client(proxy->port(), 2s);
  ASSERT_EQ(client.command({"PING"}).str(), "PONG");
  EXPECT_EQ(connectedClients(server_), 2);  // the proxied client and the asking one
  EXPECT_FALSE(proxy->lastHealed().has_value());

  proxy->cut();
  EXPECT_EQ(proxy->state(), WanProxy::State::Cut);
  auto start = Clock::now();
  EXPECT_THROW(client.command({"PING"}), RespIoError);
  EXPECT_LT(millisSince(start), 1000);
  EXPECT_EQ(proxy->openConnections(), 0u);
  // The upstream side was reset too.
  EXPECT_TRUE(waitUntil([&] { return connectedClients(server_) == 1; }, 5s));

  start = Clock::now();
  EXPECT_FALSE(pingsThrough(proxy->port()));
  EXPECT_LT(millisSince(start), 1000);
  EXPECT_FALSE(pingsThrough(proxy->port()));
  EXPECT_GE(proxy->stats().connections_refused, 2u);
  EXPECT_EQ(proxy->connectionsAccepted(), 1u);

  proxy->heal();
  EXPECT_EQ(proxy->state(), WanProxy::State::Normal);
  ASSERT_TRUE(proxy->lastHealed().has_value());
  EXPECT_LE(*proxy->lastHealed(), Clock::now());
  EXPECT_TRUE(pingsThrough(proxy->port()));
}

TEST_F(WanProxyTest, BlackholeHoldsEverythingSilentlyUntilHeal) {
  auto proxy = startProxy();
  RawConnection before(proxy->port());
  std::string got;
  ASSERT_TRUE(before.send("PING\r\n"));
  ASSERT_EQ(before.read(got, 7, 5s), RawConnection::Read::Data);
  ASSERT_EQ(got, "+PONG\r\n");
  // A subscriber: what Redis sends during the black hole must be held, then delivered.
  RawConnection subscriber(proxy->port());
  ASSERT_TRUE(subscriber.send("SUBSCRIBE ch\r\n"));
  std::string sub;
  ASSERT_EQ(subscriber.read(sub, 31, 5s), RawConnection::Read::Data) << sub;
  sub.clear();
  EXPECT_EQ(connectedClients(server_), 3);

  proxy->blackhole();
  EXPECT_EQ(proxy->state(), WanProxy::State::Blackhole);
  got.clear();
  ASSERT_TRUE(before.send("PING\r\n"));
  RawConnection during(proxy->port());  // accepted, not connected upstream
  ASSERT_TRUE(during.send("PING\r\n"));
  EXPECT_EQ(server_.client().command({"PUBLISH", "ch", "held"}).integer(), 1);

  std::string got_during;
  auto start = Clock::now();
  EXPECT_EQ(before.read(got, 1, 1s), RawConnection::Read::Timeout) << got;
  EXPECT_EQ(during.read(got_during, 1, 10ms), RawConnection::Read::Timeout) << got_during;
  EXPECT_EQ(subscriber.read(sub, 1, 10ms), RawConnection::Read::Timeout) << sub;
  EXPECT_GE(millisSince(start), 990);
  EXPECT_EQ(proxy->openConnections(), 3u);
  EXPECT_EQ(connectedClients(server_), 3);  // the new one is not connected upstream

  proxy->heal();
  auto healed = proxy->lastHealed();
  ASSERT_TRUE(healed.has_value());
  EXPECT_EQ(before.read(got, 7, 5s), RawConnection::Read::Data);
  double recovery = millisSince(*healed);
  EXPECT_EQ(got, "+PONG\r\n");
  EXPECT_EQ(during.read(got_during, 7, 5s), RawConnection::Read::Data);
  EXPECT_EQ(got_during, "+PONG\r\n");
  // *3 $7 message $2 ch $4 held
  EXPECT_EQ(subscriber.read(sub, 35, 5s), RawConnection::Read::Data) << sub;
  EXPECT_NE(sub.find("held"), std::string::npos) << sub;
  std::printf("first reply %.1f ms after heal()\n", recovery);
  EXPECT_EQ(connectedClients(server_), 4);
}

TEST_F(WanProxyTest, BlackholeHoldsWhatTheDelayQueueHolds) {
  WanProxy::Options options;
  options.delay = 300ms;
  auto proxy = startProxy(options);
  RawConnection raw(proxy->port());
  std::string got;
  ASSERT_TRUE(raw.send("PING\r\n"));
  ASSERT_EQ(raw.read(got, 7, 5s), RawConnection::Read::Data);
  got.clear();

  ASSERT_TRUE(raw.send("PING\r\n"));
  // The proxy has read the PING (it reads at once) and holds it for 300 ms: a black hole now
  // catches it in the queue.
  std::this_thread::sleep_for(50ms);
  proxy->blackhole();
  EXPECT_EQ(raw.read(got, 1, 1s), RawConnection::Read::Timeout) << got;
  EXPECT_EQ(proxy->bytesUp(), 6u);  // only the first inline PING went through
  proxy->heal();
  auto start = Clock::now();
  // Its due time passed: the PING goes out at once, the reply takes the 300 ms way back.
  EXPECT_EQ(raw.read(got, 7, 5s), RawConnection::Read::Data);
  EXPECT_EQ(got, "+PONG\r\n");
  double back = millisSince(start);
  std::printf("reply %.1f ms after heal() with a 300 ms one-way delay\n", back);
  EXPECT_GE(back, 290.0);
  EXPECT_LT(back, 1000.0);
}

TEST_F(WanProxyTest, ThroughputWithoutDelayOrRate) {
  constexpr size_t kTotal = 200u << 20;
  // A sink on 127.0.0.1 that counts what it reads until EOF, then closes (see run below).
  int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(listener, 8), 0);
  ASSERT_EQ(::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  uint16_t sink_port = ntohs(addr.sin_port);

  // Sends kTotal bytes to `port`, half-closes, and waits for the far end to close: the time from
  // the first byte until every byte was read by the sink.
  auto transfer = [&](uint16_t port, std::atomic<size_t>& received) {
    RawConnection raw(port);
    std::string chunk(1 << 20, 'z');
    auto start = Clock::now();
    for (size_t sent = 0; sent < kTotal; sent += chunk.size()) {
      if (!raw.send(chunk)) return -1.0;
    }
    ::shutdown(raw.fd(), SHUT_WR);
    std::string rest;
    if (raw.read(rest, 1, 30s) != RawConnection::Read::Closed) return -1.0;
    double ms = millisSince(start);
    return received.load() == kTotal ? ms : -1.0;
  };

  // One transfer to `port`, with the sink on a thread of its own.
  auto run = [&](uint16_t port) {
    std::atomic<size_t> received{0};
    std::thread thread([listener, &received] {
      pollfd pfd{listener, POLLIN, 0};
      if (::poll(&pfd, 1, 10'000) != 1) return;
      int fd = ::accept(listener, nullptr, nullptr);
      if (fd < 0) return;
      timeval tv{30, 0};
      ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      std::vector<char> buffer(1 << 20);
      while (true) {
        ssize_t n = ::recv(fd, buffer.data(), buffer.size(), 0);
        if (n <= 0) break;
        received += static_cast<size_t>(n);
      }
      ::close(fd);
    });
    double ms = transfer(port, received);
    thread.join();
    return ms;
  };

  double direct = run(sink_port);
  auto proxy = WanProxy::start(sink_port);
  double proxied = run(proxy->port());
  ::close(listener);
  ASSERT_GT(direct, 0) << "the direct transfer failed";
  ASSERT_GT(proxied, 0) << "the transfer through the proxy failed";
  double mb = static_cast<double>(kTotal) / 1e6;
  std::printf(
      "200 MiB one way: direct %.0f ms (%.0f MB/s), through the proxy %.0f ms (%.0f MB/s)\n",
      direct, mb / direct * 1000, proxied, mb / proxied * 1000);
  EXPECT_EQ(proxy->bytesUp(), kTotal);
  EXPECT_EQ(proxy->bytesDown(), 0u);
  EXPECT_TRUE(waitUntil([&] { return proxy->openConnections() == 0; }, 5s));
  // Sanity only: a proxy slower than 50 MB/s would be the bottleneck of any bench using it.
  EXPECT_GT(mb / proxied * 1000, 50.0);
}

}  // namespace
}  // namespace xdcr::test
