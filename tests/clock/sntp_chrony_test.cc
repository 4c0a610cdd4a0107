// The SNTP client against a real chronyd serving its own clock on 127.0.0.1 (clock-notes §1):
// same host clock, so the true offset is 0. chronyd runs with -x (never controls the system
// clock), binds 127.0.0.1 and a free UDP port only, keeps its pid/drift files in a temporary
// directory and is stopped by its PID.

#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/timex.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/udp.hpp>
#include <csignal>
#include <filesystem>
#include <thread>

#include "clock/sntp_client.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace xdcr::clock {
namespace {

namespace net = boost::asio;
constexpr int64_t kMs = 1'000'000;

std::string findChronyd() {
  for (const char* p : {"/usr/sbin/chronyd", "/sbin/chronyd", "/usr/bin/chronyd"}) {
    if (access(p, X_OK) == 0) {
      return p;
    }
  }
  return {};
}

// A UDP port free on 127.0.0.1 a moment ago. chronyd may still lose a race for it; the test
// then fails with chronyd's log, which says so.
uint16_t freeUdpPort() {
  net::io_context io;
  net::ip::udp::socket s(io, net::ip::udp::endpoint(net::ip::make_address("127.0.0.1"), 0));
  return s.local_endpoint().port();
}

Result<SntpResult> runQuery(const std::string& server, SntpOptions opt) {
  net::io_context ctx;
  std::optional<Result<SntpResult>> out;
  net::co_spawn(ctx, querySntpServer(server, std::move(opt)),
                [&](std::exception_ptr e, Result<SntpResult> r) {
                  out = e ? fail(Error::io("exception escaped the client")) : std::move(r);
                });
  ctx.run();
  return std::move(*out);
}

// The kernel clock's discipline state, read only (modes = 0): it must not change.
struct timex readClockState() {
  struct timex tx {};
  tx.modes = 0;
  adjtimex(&tx);
  return tx;
}

TEST(clock_SntpChrony, MeasuresALocalChronydNearZero) {
  const std::string chronyd = findChronyd();
  if (chronyd.empty()) {
    GTEST_SKIP() << "chronyd not installed (Debian package chrony; scripts/install-deps.sh)";
  }
  test::TempDir dir("xdcr-chrony");
  const uint16_t port = freeUdpPort();
  test::writeFileText(dir.file("chrony.conf"), "port " + std::to_string(port) +
                                                   "\n"
                                                   "bindaddress 127.0.0.1\n"
                                                   "allow 127.0.0.0/8\n"
                                                   "local stratum 8\n"
                                                   "cmdport 0\n"
                                                   "bindcmdaddress /\n"
                                                   "pidfile " +
                                                   dir.file("chronyd.pid") +
                                                   "\n"
                                                   "driftfile " +
                                                   dir.file("chrony.drift") + "\n");
  // As root chronyd drops to _chrony (without capabilities, clock-notes §0), which must be able
  // to write its files; as another user it needs -U to start at all.
  std::vector<std::string> argv = {chronyd};
  if (geteuid() == 0) {
    if (const passwd* pw = getpwnam("_chrony"); pw != nullptr) {
      ASSERT_EQ(chown(dir.path().c_str(), pw->pw_uid, pw->pw_gid), 0);
    }
  } else {
    argv.push_back("-U");
  }
  for (const char* a : {"-4", "-x", "-d", "-f"}) {
    argv.push_back(a);
  }
  argv.push_back(dir.file("chrony.conf"));

  const struct timex before = readClockState();
  auto proc = test::Subprocess::start(argv, dir.file("chronyd.log"));
  const std::string server = "127.0.0.1:" + std::to_string(port);

  // Ready when it answers; with `local stratum 8` that is as soon as the socket is bound.
  SntpOptions probe;
  probe.samples = 1;
  probe.timeout = std::chrono::milliseconds(200);
  bool ready = false;
  for (int i = 0; i < 50 && !ready; ++i) {
    ready = runQuery(server, probe).has_value();
    if (!ready) {
      ASSERT_TRUE(proc.running()) << "chronyd exited: "
                                  << test::readFileText(dir.file("chronyd.log"));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ASSERT_TRUE(ready) << "chronyd on " << server << " never answered; log:\n"
                     << test::readFileText(dir.file("chronyd.log"));

  SntpOptions opt;
  opt.samples = 4;
  opt.spacing = std::chrono::milliseconds(100);
  auto r = runQuery(server, opt);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->valid_samples, 4);
  EXPECT_EQ(r->best.stratum, 8);
  EXPECT_EQ(r->best.reference_id, 0x7f7f0101u);  // 127.127.1.1: the local clock
  EXPECT_LT(std::abs(r->best.offset_ns), 3 * kMs) << "offset " << r->best.offset_ns << " ns";
  EXPECT_GE(r->best.delay_ns, 0);
  EXPECT_LT(r->best.delay_ns, 10 * kMs);
  std::cout << "chronyd " << server << ": offset " << r->best.offset_ns << " ns, delay "
            << r->best.delay_ns << " ns\n";

  // SIGTERM takes chronyd 1.3-2.1 s (clock-notes §1.2).
  auto st = proc.stop(SIGTERM, std::chrono::seconds(5));
  EXPECT_FALSE(st.forced) << st.describe();
  const struct timex after = readClockState();
  EXPECT_EQ(before.freq, after.freq) << "the kernel clock frequency changed";
  EXPECT_EQ(before.offset, after.offset) << "the kernel clock offset changed";
  EXPECT_EQ(before.status, after.status) << "the kernel clock status changed";
}

}  // namespace
}  // namespace xdcr::clock
