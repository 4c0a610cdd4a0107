// Selection across several real NTP servers (clock-notes §3–§4): one chronyd serving the host
// clock on 127.0.0.1 (`local stratum 8`, true offset 0) and chained chronyds on 127.0.0.2–.5 that
// follow it with `offset X`, i.e. serve true time + X exactly, for any X. The project's SNTP
// client measures each one and selectServers() must find the truechimers, flag the falsetickers
// and refuse to answer without a majority. All servers run with -x (no clock control), bind
// loopback addresses only and are stopped by PID (tests/support/chrony_server.h).

#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "clock/ntp_selection.h"
#include "clock/sntp_client.h"
#include "tests/support/chrony_server.h"

namespace xdcr::clock {
namespace {

namespace net = boost::asio;
using test::ChronyOptions;
using test::ChronyServer;
constexpr int64_t kMs = 1'000'000;

/** A chained server's spec: its address and the offset it serves. */
struct Chained {
  std::string address;
  double offset_s;
};

/**
 * The reference on 127.0.0.1 plus chained servers, all started together: chained servers
 * synchronise in ~1–1.5 s, in parallel. Stopped together too (chronyd needs up to ~2 s each).
 */
class ServerSet {
 public:
  explicit ServerSet(const std::vector<Chained>& chained) {
    reference_ = std::make_unique<ChronyServer>(ChronyOptions{});
    for (const auto& c : chained) {
      ChronyOptions o;
      o.address = c.address;
      o.reference = reference_->ntpAddress();
      o.offset_s = c.offset_s;
      chained_.push_back(std::make_unique<ChronyServer>(std::move(o)));
    }
  }
  ~ServerSet() { stop(); }

  /** Waits until every server answers synchronised; the failure names the first that did not. */
  ::testing::AssertionResult waitReady(std::chrono::milliseconds timeout) {
    // waitReady() polls one server; the others keep synchronising meanwhile, so waiting for
    // them one after the other costs no more than the slowest.
    for (ChronyServer* s : all()) {
      if (!s->waitReady(timeout)) {
        return ::testing::AssertionFailure()
               << "chronyd on " << s->ntpAddress() << " (pid " << s->pid() << ") not ready within "
               << timeout.count() << " ms; log:\n"
               << s->logTail();
      }
    }
    return ::testing::AssertionSuccess();
  }

  std::vector<ChronyServer*> all() {
    std::vector<ChronyServer*> out = {reference_.get()};
    for (auto& c : chained_) {
      out.push_back(c.get());
    }
    return out;
  }
  std::vector<std::string> addresses() {
    std::vector<std::string> out;
    for (ChronyServer* s : all()) {
      out.push_back(s->ntpAddress());
    }
    return out;
  }

  void stop() {
    for (const auto& st : test::stopAll(all())) {
      EXPECT_FALSE(st.forced) << "a chronyd did not stop on SIGTERM: " << st.describe();
    }
  }

 private:
  std::unique_ptr<ChronyServer> reference_;
  std::vector<std::unique_ptr<ChronyServer>> chained_;
};

/** Queries all servers concurrently (4 samples each, 100 ms apart). */
std::vector<Result<SntpResult>> queryAll(const std::vector<std::string>& servers) {
  net::io_context ctx;
  std::vector<std::optional<Result<SntpResult>>> out(servers.size());
  SntpOptions opt;
  opt.samples = 4;
  opt.spacing = std::chrono::milliseconds(100);
  opt.timeout = std::chrono::milliseconds(1000);
  for (size_t i = 0; i < servers.size(); ++i) {
    net::co_spawn(ctx, querySntpServer(servers[i], opt),
                  [&out, i](std::exception_ptr e, Result<SntpResult> r) {
                    out[i] = e ? fail(Error::io("exception escaped the client")) : std::move(r);
                  });
  }
  ctx.run();
  std::vector<Result<SntpResult>> results;
  for (auto& r : out) {
    results.push_back(std::move(*r));
  }
  return results;
}

/** Every server answered with 4 valid samples; their best samples for selectServers(). */
std::vector<ServerSample> samplesOf(const std::vector<Result<SntpResult>>& results,
                                    const std::vector<std::string>& servers) {
  std::vector<ServerSample> samples;
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    if (!r.has_value()) {
      ADD_FAILURE() << servers[i] << ": " << r.error().message;
      continue;
    }
    EXPECT_EQ(r->valid_samples, 4) << servers[i];
    std::printf("  %-16s offset %+.6f s  delay %.6f s  stratum %d  root distance %.6f s\n",
                servers[i].c_str(), r->best.offset_ns / 1e9, r->best.delay_ns / 1e9,
                r->best.stratum, r->best.root_distance_ns / 1e9);
    samples.push_back(
        ServerSample{servers[i], r->best.offset_ns, r->best.delay_ns, r->best.root_distance_ns});
  }
  return samples;
}

void printSelection(const Selection& s) {
  std::printf("  selected offset %+.6f s, intersection [%+.6f, %+.6f], %zu truechimers\n",
              s.offset_ns / 1e9, s.low_ns / 1e9, s.high_ns / 1e9, s.truechimers);
}

#define SKIP_WITHOUT_CHRONYD()                                       \
  if (test::findChronyd().empty()) {                                 \
    GTEST_SKIP() << "chronyd not installed (Debian package chrony; " \
                    "scripts/install-deps.sh --test)";               \
  }

constexpr auto kReady = std::chrono::seconds(10);

// (a) Reference + two honest chained servers + one chained falseticker 30 s ahead.
TEST(clock_NtpServers, OneFalsetickerAmongFour) {
  SKIP_WITHOUT_CHRONYD();
  ServerSet set({{"127.0.0.2", 0}, {"127.0.0.3", 0}, {"127.0.0.4", 30}});
  ASSERT_TRUE(set.waitReady(kReady));
  const auto servers = set.addresses();
  const auto samples = samplesOf(queryAll(servers), servers);
  ASSERT_EQ(samples.size(), 4u);
  EXPECT_NEAR(samples[3].offset_ns / 1e9, 30.0, 0.002) << "the +30 s server";

  auto sel = selectServers(samples);
  ASSERT_TRUE(sel.has_value()) << sel.error().message;
  printSelection(*sel);
  EXPECT_EQ(sel->truechimers, 3u);
  ASSERT_EQ(sel->servers.size(), 4u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(sel->servers[i].truechimer) << servers[i];
    EXPECT_NEAR(static_cast<double>(sel->offset_ns), static_cast<double>(samples[i].offset_ns),
                1.0 * kMs)
        << "selected offset vs " << servers[i];
  }
  EXPECT_FALSE(sel->servers[3].truechimer) << servers[3] << " (+30 s) must be a falseticker";
  EXPECT_EQ(sel->servers[3].name, servers[3]);
}

// (b) Good servers a few ms apart (0, +20 ms, −15 ms) stay truechimers with the default 50 ms
// tolerance; +30 s and −45 s are falsetickers.
TEST(clock_NtpServers, ThreeGoodTwoFalsetickers) {
  SKIP_WITHOUT_CHRONYD();
  ServerSet set(
      {{"127.0.0.2", 0.020}, {"127.0.0.3", -0.015}, {"127.0.0.4", 30}, {"127.0.0.5", -45}});
  ASSERT_TRUE(set.waitReady(kReady));
  const auto servers = set.addresses();
  const auto samples = samplesOf(queryAll(servers), servers);
  ASSERT_EQ(samples.size(), 5u);
  const double expected[] = {0, 0.020, -0.015, 30, -45};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_NEAR(samples[i].offset_ns / 1e9, expected[i], 0.002) << servers[i];
  }

  auto sel = selectServers(samples);
  ASSERT_TRUE(sel.has_value()) << sel.error().message;
  printSelection(*sel);
  EXPECT_EQ(sel->truechimers, 3u);
  ASSERT_EQ(sel->servers.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(sel->servers[i].truechimer, i < 3) << servers[i];
  }
  // The median of 0, +20 ms and −15 ms is the reference's 0.
  EXPECT_NEAR(static_cast<double>(sel->offset_ns), static_cast<double>(samples[0].offset_ns),
              1.0 * kMs);
}

// (c) Two good servers of four: no majority, and the caller is told so.
TEST(clock_NtpServers, TwoGoodOfFourIsNoMajority) {
  SKIP_WITHOUT_CHRONYD();
  ServerSet set({{"127.0.0.2", 0.020}, {"127.0.0.3", 30}, {"127.0.0.4", -45}});
  ASSERT_TRUE(set.waitReady(kReady));
  const auto servers = set.addresses();
  const auto samples = samplesOf(queryAll(servers), servers);
  ASSERT_EQ(samples.size(), 4u);

  auto sel = selectServers(samples);
  ASSERT_FALSE(sel.has_value()) << "selected " << sel->offset_ns << " ns with " << sel->truechimers
                                << " truechimers";
  std::cout << "  " << sel.error().message << "\n";
  EXPECT_NE(sel.error().message.find("no majority"), std::string::npos) << sel.error().message;
  ASSERT_EQ(sel.error().servers.size(), 4u);
  for (const auto& v : sel.error().servers) {
    EXPECT_FALSE(v.truechimer) << v.name;
  }
}

// (d) Chained servers serve exactly the configured offset, small or sub-second.
TEST(clock_NtpServers, ChainedOffsetsAreExact) {
  SKIP_WITHOUT_CHRONYD();
  ServerSet set({{"127.0.0.2", 0.25}, {"127.0.0.3", 0.020}});
  ASSERT_TRUE(set.waitReady(kReady));
  const auto servers = set.addresses();
  const auto samples = samplesOf(queryAll(servers), servers);
  ASSERT_EQ(samples.size(), 3u);
  EXPECT_NEAR(samples[0].offset_ns / 1e6, 0.0, 2.0) << servers[0] << " (reference), ms";
  EXPECT_NEAR(samples[1].offset_ns / 1e6, 250.0, 2.0) << servers[1] << ", ms";
  EXPECT_NEAR(samples[2].offset_ns / 1e6, 20.0, 2.0) << servers[2] << ", ms";
}

// Several servers on one address get distinct ports, and each answers as itself.
TEST(clock_NtpServers, SeveralServersOnOneAddress) {
  SKIP_WITHOUT_CHRONYD();
  ServerSet set({{"127.0.0.1", 0.5}, {"127.0.0.1", -0.5}});
  ASSERT_TRUE(set.waitReady(kReady));
  const auto servers = set.addresses();
  EXPECT_NE(servers[0], servers[1]);
  EXPECT_NE(servers[1], servers[2]);
  const auto samples = samplesOf(queryAll(servers), servers);
  ASSERT_EQ(samples.size(), 3u);
  EXPECT_NEAR(samples[1].offset_ns / 1e6, 500.0, 2.0) << servers[1];
  EXPECT_NEAR(samples[2].offset_ns / 1e6, -500.0, 2.0) << servers[2];
}

}  // namespace
}  // namespace xdcr::clock
