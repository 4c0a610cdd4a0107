// The token bucket of bandwidth_limit (common/rate_limiter.h) on simulated time: the rate held
// over a long run, the burst, debt paid in proportion, a bucket shared by several limiters, the
// rate of the last seconds; RedisConnection with limiters on a loopback socket: reads and
// writes at the rate, and close() ending a throttled read or write at once; and who gets which
// limiter: a pipeline its write limiter (one bucket for its instances), a link the smallest
// limit of its members for its reads, and what /status and /metrics show of them.

#include <gtest/gtest.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "clock/clock.h"
#include "common/rate_limiter.h"
#include "common/redis_conn.h"
#include "config/config.h"
#include "replicator/pipeline.h"
#include "replicator/source_link.h"
#include "replicator/status.h"

namespace xdcr {
namespace {

using namespace std::chrono_literals;
using Clock = RateLimiter::Clock;

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

/** Simulated time: a caller that takes `bytes` and then waits what take() said. */
struct Sim {
  Clock::time_point now{};  // the epoch: like clock::SimulatedClock
  void pass(Clock::duration d) { now += d; }
};

TEST(RateLimiter, BurstIsATwentiethOfTheRateAtLeast64KiB) {
  EXPECT_EQ(RateLimiter(20'000'000).burst(), 1'000'000u);
  EXPECT_EQ(RateLimiter(2'000'000).burst(), 100'000u);
  EXPECT_EQ(RateLimiter(100'000).burst(), 64u * 1024);
  EXPECT_EQ(RateLimiter(1).burst(), 64u * 1024);
}

TEST(RateLimiter, HoldsTheRateOverALongRunWithinTwoPercent) {
  // Transfers of random sizes (a read's 1 B .. 256 KiB) for 10 simulated minutes, each after
  // the wait the previous ones left: what passed is rate × time, to 2 %.
  for (const uint64_t rate : {64'000ULL, 2'000'000ULL, 20'000'000ULL, 1'000'000'000ULL}) {
    RateLimiter limit(rate);
    Sim sim;
    std::mt19937_64 rng(rate);
    std::uniform_int_distribution<uint64_t> size(1, 256 * 1024);
    uint64_t sent = 0;
    const auto end = sim.now + 600s;
    while (sim.now < end) {
      const uint64_t n = size(rng);
      sim.pass(limit.take(n, sim.now));
      sent += n;
    }
    const double elapsed = seconds(sim.now - Clock::time_point{});
    const double measured = double(sent) / elapsed;
    EXPECT_NEAR(measured, double(rate), 0.02 * double(rate)) << "rate " << rate;
    EXPECT_EQ(limit.bytes(), sent);
    // Nearly all of the time was spent waiting (the transfers themselves take none here).
    EXPECT_NEAR(limit.throttledSeconds(), elapsed, 0.02 * elapsed) << "rate " << rate;
  }
}

TEST(RateLimiter, AFullBucketLetsABurstThroughWithoutWaiting) {
  RateLimiter limit(2'000'000);  // burst 100,000
  Sim sim;
  EXPECT_EQ(limit.take(60'000, sim.now), Clock::duration::zero());
  EXPECT_EQ(limit.take(40'000, sim.now), Clock::duration::zero());  // exactly the burst
  // One byte more is debt: 1 / 2,000,000 s.
  EXPECT_NEAR(seconds(limit.take(1, sim.now)), 0.5e-6, 2e-9);
  EXPECT_EQ(limit.throttledSeconds(), seconds(limit.debt(sim.now)));
}

TEST(RateLimiter, IdleTimeRefillsNoMoreThanTheBurst) {
  RateLimiter limit(2'000'000);
  Sim sim;
  limit.take(100'000, sim.now);  // empty
  sim.pass(1h);                  // would be 7.2 GB of credit without the cap
  EXPECT_EQ(limit.take(100'000, sim.now), Clock::duration::zero());
  EXPECT_NEAR(seconds(limit.take(2'000'000, sim.now)), 1.0, 1e-9);
}

TEST(RateLimiter, ALargeTransferWaitsInProportionAndTheNextOneWaitsForItsDebt) {
  RateLimiter limit(1'000'000);  // burst 64 KiB
  Sim sim;
  const uint64_t burst = limit.burst();
  // 10 MB at once: not split, not refused; the wait is what it costs beyond the burst.
  const auto wait = limit.take(10'000'000 + burst, sim.now);
  EXPECT_NEAR(seconds(wait), 10.0, 1e-6);
  EXPECT_NEAR(seconds(limit.debt(sim.now)), 10.0, 1e-6);
  // Another caller at the same moment waits behind that debt.
  EXPECT_NEAR(seconds(limit.take(500'000, sim.now)), 10.5, 1e-6);
  // Half-way the debt is half paid.
  sim.pass(5250ms);
  EXPECT_NEAR(seconds(limit.debt(sim.now)), 5.25, 1e-6);
  sim.pass(5250ms);
  EXPECT_EQ(limit.debt(sim.now), Clock::duration::zero());
  EXPECT_NEAR(limit.throttledSeconds(), 20.5, 1e-6);
}

TEST(RateLimiter, TimeGoingBackDoesNotAddCredit) {
  RateLimiter limit(1'000'000);
  Sim sim;
  sim.pass(10s);
  limit.take(limit.burst(), sim.now);
  EXPECT_NEAR(seconds(limit.take(1'000'000, sim.now - 5s)), 1.0, 1e-6);
}

TEST(RateLimiter, LimitersOverASharedBucketWaitTogetherAndCountApart) {
  auto bucket = std::make_shared<RateLimiter>(1'000'000);
  RateLimiter a(bucket);
  RateLimiter b(bucket);
  EXPECT_EQ(a.rate(), 1'000'000u);
  EXPECT_EQ(a.burst(), bucket->burst());
  Sim sim;
  // Two connections taking in turn get the rate between them, not twice it.
  uint64_t sent = 0;
  while (sim.now < Clock::time_point{} + 100s) {
    sim.pass(std::max(a.take(50'000, sim.now), b.take(50'000, sim.now)));
    sent += 100'000;
  }
  EXPECT_NEAR(double(sent) / 100.0, 1'000'000.0, 20'000.0);
  EXPECT_EQ(a.bytes() + b.bytes(), bucket->bytes());
  EXPECT_EQ(a.bytes(), b.bytes());
  EXPECT_NEAR(a.throttledSeconds() + b.throttledSeconds(), bucket->throttledSeconds(), 1e-6);
}

TEST(RateLimiter, SharedFindsTheBucketOfAKeyWhileItIsHeldAndReplacesAnotherRate) {
  auto one = RateLimiter::shared("test pipeline p", 1'000'000);
  auto again = RateLimiter::shared("test pipeline p", 1'000'000);
  EXPECT_EQ(one, again);
  EXPECT_NE(RateLimiter::shared("test pipeline q", 1'000'000), one);
  auto faster = RateLimiter::shared("test pipeline p", 2'000'000);  // a reloaded config
  EXPECT_NE(faster, one);
  EXPECT_EQ(faster->rate(), 2'000'000u);
  one.reset();
  again.reset();
  faster.reset();
  // Nothing holds it any more: a new one.
  auto fresh = RateLimiter::shared("test pipeline p", 1'000'000);
  EXPECT_EQ(fresh->bytes(), 0u);
}

TEST(RateLimiter, RecentRateIsTheAverageOfTheLastFiveWholeSeconds) {
  RateLimiter limit(10'000'000);
  Sim sim;
  sim.pass(100s);
  EXPECT_EQ(limit.recentRate(sim.now), 0.0);
  // 1 MB in each of 10 seconds, in 10 pieces.
  for (int s = 0; s < 10; ++s) {
    for (int i = 0; i < 10; ++i) {
      limit.take(100'000, sim.now);
      sim.pass(100ms);
    }
  }
  EXPECT_NEAR(limit.recentRate(sim.now), 1'000'000.0, 1.0);
  sim.pass(3s);  // quiet: 2 of the last 5 seconds carried 1 MB
  EXPECT_NEAR(limit.recentRate(sim.now), 400'000.0, 1.0);
  sim.pass(10s);
  EXPECT_EQ(limit.recentRate(sim.now), 0.0);
}

// ---- RedisConnection with limiters, on a loopback socket --------------------------------------

namespace net = boost::asio;
using tcp = net::ip::tcp;
constexpr auto use_nothrow = net::as_tuple(net::use_awaitable);

/** A loopback server that sends `send` bytes to its first client, or counts what it reads. */
class Peer {
 public:
  Peer(net::io_context& ioc, size_t send) : acceptor_(ioc, tcp::endpoint(tcp::v4(), 0)) {
    net::co_spawn(ioc, serve(send), net::detached);
  }
  uint16_t port() const { return acceptor_.local_endpoint().port(); }
  size_t received() const { return received_; }
  RedisEndpoint endpoint() const {
    RedisEndpoint e;
    e.cluster = "test";
    e.host = "127.0.0.1";
    e.port = port();
    return e;
  }

 private:
  net::awaitable<void> serve(size_t send) {
    auto [ec, socket] = co_await acceptor_.async_accept(use_nothrow);
    if (ec) co_return;
    socket_ = std::make_unique<tcp::socket>(std::move(socket));
    if (send > 0) {
      std::string data(send, 'x');
      co_await net::async_write(*socket_, net::buffer(data), use_nothrow);
      co_return;
    }
    std::vector<char> buf(1 << 16);
    for (;;) {
      auto [rec, n] = co_await socket_->async_read_some(net::buffer(buf), use_nothrow);
      if (rec) co_return;
      received_ += n;
    }
  }

  tcp::acceptor acceptor_;
  std::unique_ptr<tcp::socket> socket_;
  size_t received_ = 0;
};

/** Runs `body` on `ioc` until it returns (bounded). */
template <class F>
void run(net::io_context& ioc, F body) {
  bool done = false;
  net::co_spawn(ioc, body(), [&](std::exception_ptr e) {
    done = true;
    ioc.stop();  // the peer may still wait for bytes
    if (e) std::rethrow_exception(e);
  });
  ioc.run_for(20s);
  ASSERT_TRUE(done) << "did not finish within 20 s";
}

/** Connects `conn` to `peer` and reads `bytes` from it (no read over `max_read`): what arrived,
 *  and in how many seconds from the connection. */
std::pair<size_t, double> readFromPeer(net::io_context& ioc, RedisConnection& conn, Peer& peer,
                                       size_t bytes, size_t max_read) {
  size_t got = 0;
  double elapsed = 0;
  run(ioc, [&]() -> net::awaitable<void> {
    auto s = co_await conn.connect(peer.endpoint(), 2000ms);
    EXPECT_TRUE(s) << s.error().message;
    const auto start = Clock::now();
    while (got < bytes) {
      auto r = co_await conn.readSome();
      if (!r) break;
      got += *r;
      EXPECT_LE(*r, max_read);
      conn.buffer().consume(conn.buffer().size());
    }
    elapsed = seconds(Clock::now() - start);
  });
  return {got, elapsed};
}

TEST(RateLimitedConnection, ReadsAtTheRate) {
  net::io_context ioc;
  constexpr size_t kBytes = 600'000;
  Peer peer(ioc, kBytes);
  RedisConnection conn(ioc.get_executor(), "test");
  auto limit = std::make_shared<RateLimiter>(1'000'000);  // burst 64 KiB
  conn.setRateLimits(limit, nullptr);
  const auto [got, elapsed] = readFromPeer(ioc, conn, peer, kBytes, limit->burst());
  EXPECT_EQ(got, kBytes);
  // The first burst is free; the rest comes at 1 MB/s.
  const double least = double(kBytes - limit->burst()) / 1e6;
  std::printf("read %zu bytes at 1 MB/s in %.3f s (at least %.3f s)\n", got, elapsed, least);
  EXPECT_GE(elapsed, least * 0.98);
  EXPECT_LE(elapsed, least + 1.0);
  EXPECT_EQ(limit->bytes(), kBytes);
  EXPECT_GT(limit->throttledSeconds(), least * 0.9);
}

TEST(RateLimitedConnection, WritesAtTheRateInPieces) {
  net::io_context ioc;
  Peer peer(ioc, 0);
  RedisConnection conn(ioc.get_executor(), "test");
  auto limit = std::make_shared<RateLimiter>(1'000'000);
  conn.setRateLimits(nullptr, limit);
  constexpr size_t kBytes = 600'000;
  double elapsed = 0;
  run(ioc, [&]() -> net::awaitable<void> {
    auto s = co_await conn.connect(peer.endpoint(), 2000ms);
    EXPECT_TRUE(s) << s.error().message;
    const auto start = Clock::now();
    std::string data(kBytes, 'y');
    auto w = co_await conn.writeAll(data);
    EXPECT_TRUE(w) << w.error().message;
    elapsed = seconds(Clock::now() - start);
    // Let the peer read the rest.
    net::steady_timer t(co_await net::this_coro::executor, 200ms);
    co_await t.async_wait(use_nothrow);
  });
  const double least = double(kBytes - limit->burst()) / 1e6;
  std::printf("wrote %zu bytes at 1 MB/s in %.3f s (at least %.3f s)\n", kBytes, elapsed, least);
  EXPECT_GE(elapsed, least * 0.98);
  EXPECT_LE(elapsed, least + 1.0);
  EXPECT_EQ(peer.received(), kBytes);
}

TEST(RateLimitedConnection, CloseEndsAThrottledReadAndWriteAtOnce) {
  net::io_context ioc;
  Peer peer(ioc, 1'000'000);
  RedisConnection conn(ioc.get_executor(), "test");
  // 64 KiB/s: after the free burst, every read of 64 KiB owes a second.
  auto read = std::make_shared<RateLimiter>(64 * 1024);
  auto write = std::make_shared<RateLimiter>(64 * 1024);
  conn.setRateLimits(read, write);
  double read_ended = -1, write_ended = -1;
  std::optional<Error> next_read;
  run(ioc, [&]() -> net::awaitable<void> {
    auto ex = co_await net::this_coro::executor;
    auto s = co_await conn.connect(peer.endpoint(), 2000ms);
    EXPECT_TRUE(s) << s.error().message;
    // Empty both buckets, so the next read and write must wait about a second each.
    read->take(read->burst(), Clock::now());
    write->take(write->burst(), Clock::now());
    const auto start = Clock::now();
    // (named: a coroutine lambda's captures live in the lambda, which must outlive it)
    auto writer = [&]() -> net::awaitable<void> {
      std::string data(64 * 1024, 'z');
      auto w = co_await conn.writeAll(data);
      EXPECT_FALSE(w);  // ended by close(), before writing
      write_ended = seconds(Clock::now() - start);
    };
    auto reader = [&]() -> net::awaitable<void> {
      auto r = co_await conn.readSome();  // reads, then owes ~1 s: ended by close()
      EXPECT_TRUE(r);
      read_ended = seconds(Clock::now() - start);
      auto again = co_await conn.readSome();  // closed: fails at once
      if (!again) next_read = again.error();
    };
    net::co_spawn(ex, writer(), net::detached);
    net::co_spawn(ex, reader(), net::detached);
    net::steady_timer t(ex, 150ms);
    co_await t.async_wait(use_nothrow);
    conn.close();
    t.expires_after(100ms);
    co_await t.async_wait(use_nothrow);
  });
  std::printf("read ended after %.3f s, write after %.3f s (closed at 0.150 s)\n", read_ended,
              write_ended);
  EXPECT_GE(read_ended, 0.14);
  EXPECT_LT(read_ended, 0.5);
  EXPECT_GE(write_ended, 0.14);
  EXPECT_LT(write_ended, 0.5);
  ASSERT_TRUE(next_read.has_value());
}

TEST(RateLimitedConnection, WithoutLimitersNothingWaits) {
  net::io_context ioc;
  constexpr size_t kBytes = 4'000'000;
  Peer peer(ioc, kBytes);
  RedisConnection conn(ioc.get_executor(), "test");
  conn.setRateLimits(nullptr, nullptr);
  const auto [got, elapsed] = readFromPeer(ioc, conn, peer, kBytes, SIZE_MAX);
  EXPECT_EQ(got, kBytes);
  EXPECT_LT(elapsed, 2.0);
}

// ---- pipelines and links ---------------------------------------------------------------------

constexpr char kFanOut[] = R"(clusters:
  src: {type: redis, address: "127.0.0.1:1"}
  src2: {type: redis, address: "127.0.0.1:2"}
  dst: {type: redis, address: "127.0.0.1:3"}
  dst2: {type: redis, address: "127.0.0.1:4"}
  dst3: {type: redis, address: "127.0.0.1:5"}
pipelines:
  - {name: a, source: src, target: dst, bandwidth_limit: 20MB}
  - {name: b, source: src, target: dst2, bandwidth_limit: 5MB}
  - {name: c, source: src, target: dst3}
  - {name: d, source: src2, target: dst}
)";

struct FanOut {
  config::ConfigConstSharedPtr config;
  net::io_context ioc;
  clock::SimulatedClock clk{1'000'000'000'000};
  std::vector<std::unique_ptr<replicator::Pipeline>> ps;

  FanOut() {
    auto loaded = config::loadConfigString(kFanOut, "t.yaml");
    EXPECT_TRUE(loaded.ok()) << loaded.diagnostics.at(0).format();
    config = loaded.config;
    for (const auto& pc : config->pipelines) {
      ps.push_back(std::make_unique<replicator::Pipeline>(ioc.get_executor(), config, pc, clk));
    }
  }
  /** Another instance of pipeline `i` (a shard of a Redis Cluster source). */
  std::unique_ptr<replicator::Pipeline> instance(size_t i, const std::string& shard) {
    return std::make_unique<replicator::Pipeline>(
        ioc.get_executor(), config, config->pipelines[i], clk, Limits{}, nullptr,
        replicator::Pipeline::Shard{config->pipelines[i].name + "@" + shard, shard});
  }
};

TEST(Bandwidth, APipelineWritesThroughItsLimitAndALinkReadsThroughItsSmallestMembers) {
  FanOut f;
  auto& ps = f.ps;
  EXPECT_EQ(ps[0]->bandwidthLimit(), 20'000'000u);
  ASSERT_NE(ps[0]->writeLimiter(), nullptr);
  EXPECT_EQ(ps[0]->writeLimiter()->rate(), 20'000'000u);
  EXPECT_EQ(ps[1]->writeLimiter()->rate(), 5'000'000u);
  EXPECT_EQ(ps[2]->writeLimiter(), nullptr) << "no limit: no limiter, nothing to pay";
  EXPECT_EQ(ps[0]->readLimiter(), nullptr) << "on no link";
  auto noop = [](replicator::Pipeline*) {};
  {
    replicator::SourceLink shared(f.ioc.get_executor(), f.config,
                                  {ps[0].get(), ps[1].get(), ps[2].get()}, f.clk, noop, noop);
    replicator::SourceLink own(f.ioc.get_executor(), f.config, {ps[3].get()}, f.clk, noop, noop);
    ASSERT_NE(shared.readLimiter(), nullptr);
    EXPECT_EQ(shared.readLimiter()->rate(), 5'000'000u) << "the smallest limit of its members";
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(ps[i]->readLimiter(), shared.readLimiter());
    EXPECT_EQ(own.readLimiter(), nullptr);
    EXPECT_EQ(ps[3]->readLimiter(), nullptr);

    // What the link waited for shows on each of its members.
    const auto now = Clock::now();
    shared.readLimiter()->take(shared.readLimiter()->burst() + 5'000'000, now);
    ps[0]->writeLimiter()->take(ps[0]->writeLimiter()->burst() + 10'000'000, now);
    const auto b0 = ps[0]->bandwidth(now);
    EXPECT_NEAR(b0.read_throttled_seconds, 1.0, 1e-6);
    EXPECT_NEAR(b0.write_throttled_seconds, 0.5, 1e-6);
    EXPECT_NEAR(ps[2]->bandwidth(now).read_throttled_seconds, 1.0, 1e-6);
    EXPECT_EQ(ps[2]->bandwidth(now).write_throttled_seconds, 0.0);

    const nlohmann::json s = replicator::statusJson(ps, false, nullptr, *f.config);
    const auto& a = s["pipelines"][0];
    EXPECT_EQ(a["bandwidth_limit"], 20'000'000) << a.dump(2);
    EXPECT_NEAR(a["bandwidth_throttled_seconds"]["read"].get<double>(), 1.0, 1e-6);
    EXPECT_NEAR(a["bandwidth_throttled_seconds"]["write"].get<double>(), 0.5, 1e-6);
    EXPECT_TRUE(a["bandwidth_bytes_per_second"].contains("read")) << a.dump(2);
    EXPECT_TRUE(a["bandwidth_bytes_per_second"].contains("write")) << a.dump(2);
    EXPECT_EQ(s["pipelines"][2]["bandwidth_limit"], 0);

    std::vector<replicator::PipelineMetrics> pm;
    for (const auto& p : ps) pm.push_back(replicator::metricsOf(*p));
    const std::string text = replicator::renderMetrics(pm);
    EXPECT_NE(text.find("xdcr_bandwidth_limit_bytes_per_second{pipeline=\"a\"} 20000000\n"
                        "xdcr_bandwidth_limit_bytes_per_second{pipeline=\"b\"} 5000000\n"
                        "xdcr_bandwidth_limit_bytes_per_second{pipeline=\"c\"} 0\n"),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("xdcr_bandwidth_throttled_seconds_total{pipeline=\"a\",direction=\"read\"} "
                        "1\n"),
              std::string::npos)
        << text;
  }
  // Off the link: no read limiter, and what was waited on it stays counted.
  EXPECT_EQ(ps[0]->readLimiter(), nullptr);
  EXPECT_NEAR(ps[0]->bandwidth(Clock::now()).read_throttled_seconds, 1.0, 1e-6);
}

TEST(Bandwidth, TheInstancesOfAPipelineShareOneBucketEachWayAndCountApart) {
  // A Redis Cluster source: one instance of each pipeline per shard, one link per shard.
  FanOut f;
  auto a1 = f.instance(0, "s1"), a2 = f.instance(0, "s2");
  auto b1 = f.instance(1, "s1"), b2 = f.instance(1, "s2");
  const auto now = Clock::now();
  // Writes: what one instance takes, the other waits for.
  a1->writeLimiter()->take(a1->writeLimiter()->burst() + 20'000'000, now);
  EXPECT_NEAR(seconds(a2->writeLimiter()->debt(now)), 1.0, 1e-6);
  EXPECT_NEAR(a1->bandwidth(now).write_throttled_seconds, 1.0, 1e-6);
  EXPECT_EQ(a2->bandwidth(now).write_throttled_seconds, 0.0);
  // Reads: the links of the same pipelines share their bucket.
  auto noop = [](replicator::Pipeline*) {};
  replicator::SourceLink l1(f.ioc.get_executor(), f.config, {a1.get(), b1.get()}, f.clk, noop,
                            noop);
  replicator::SourceLink l2(f.ioc.get_executor(), f.config, {a2.get(), b2.get()}, f.clk, noop,
                            noop);
  ASSERT_NE(l1.readLimiter(), nullptr);
  ASSERT_NE(l1.readLimiter(), l2.readLimiter()) << "counters of each link's own";
  l1.readLimiter()->take(l1.readLimiter()->burst() + 5'000'000, now);
  EXPECT_NEAR(seconds(l2.readLimiter()->debt(now)), 1.0, 1e-6) << "one bucket";
  // Other pipelines: another bucket.
  auto c1 = f.instance(2, "s1");
  replicator::SourceLink l3(f.ioc.get_executor(), f.config, {c1.get(), b2.get()}, f.clk, noop,
                            noop);
  EXPECT_EQ(l3.readLimiter()->debt(now), Clock::duration::zero());
}

}  // namespace
}  // namespace xdcr
