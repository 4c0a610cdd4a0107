// The SNTP client against a real chronyd serving its own clock on 127.0.0.1 (clock-notes §1):
// same host clock, so the true offset is 0. chronyd (tests/support/chrony_server.h) runs with -x
// (never controls the system clock), binds 127.0.0.1 and a free UDP port only, keeps its
// pid/drift files in a temporary directory and is stopped by its PID.

#include <gtest/gtest.h>
#include <sys/timex.h>

#include <boost/asio/io_context.hpp>
#include <iostream>

#include "clock/sntp_client.h"
#include "tests/support/chrony_server.h"
#include "tests/support/run_sync.h"

namespace xdcr::clock {
namespace {

namespace net = boost::asio;
constexpr int64_t kMs = 1'000'000;

Result<SntpResult> runQuery(const std::string& server, SntpOptions opt) {
  return test::runSync(querySntpServer(server, std::move(opt)));
}

// The kernel clock's discipline state, read only (modes = 0): it must not change.
struct timex readClockState() {
  struct timex tx {};
  tx.modes = 0;
  adjtimex(&tx);
  return tx;
}

TEST(clock_SntpChrony, MeasuresALocalChronydNearZero) {
  if (test::findChronyd().empty()) {
    GTEST_SKIP() << "chronyd not installed (Debian package chrony; scripts/install-deps.sh --test)";
  }
  const struct timex before = readClockState();
  test::ChronyServer chrony(test::ChronyOptions{});  // 127.0.0.1, free port, local stratum 8
  const std::string server = chrony.ntpAddress();

  // Ready when it answers; with `local stratum 8` that is as soon as the socket is bound.
  ASSERT_TRUE(chrony.waitReady(std::chrono::seconds(5)))
      << "chronyd on " << server << " never answered; log:\n"
      << chrony.logTail();

  SntpOptions opt;
  opt.samples = 4;
  opt.spacing = std::chrono::milliseconds(100);
  auto r = runQuery(server, opt);
  ASSERT_TRUE(r.has_value()) << r.error().message << "\nlog:\n" << chrony.logTail();
  EXPECT_EQ(r->valid_samples, 4);
  EXPECT_EQ(r->best.stratum, 8);
  EXPECT_EQ(r->best.reference_id, 0x7f7f0101u);  // 127.127.1.1: the local clock
  EXPECT_LT(std::abs(r->best.offset_ns), 3 * kMs) << "offset " << r->best.offset_ns << " ns";
  EXPECT_GE(r->best.delay_ns, 0);
  EXPECT_LT(r->best.delay_ns, 10 * kMs);
  std::cout << "chronyd " << server << ": offset " << r->best.offset_ns << " ns, delay "
            << r->best.delay_ns << " ns\n";

  // SIGTERM takes chronyd 1.3-2.1 s (clock-notes §1.2); stop() allows 5 s before SIGKILL.
  auto st = chrony.stop();
  EXPECT_FALSE(st.forced) << st.describe() << "\nlog:\n" << chrony.logTail();
  const struct timex after = readClockState();
  EXPECT_EQ(before.freq, after.freq) << "the kernel clock frequency changed";
  EXPECT_EQ(before.offset, after.offset) << "the kernel clock offset changed";
  EXPECT_EQ(before.status, after.status) << "the kernel clock status changed";
}

}  // namespace
}  // namespace xdcr::clock
