// Tests of the clock-test harness itself: ChronyServer (real chronyd on loopback addresses, free
// ports without races, NTS-KE) and TestCa (openssl CLI). Skipped when chronyd or openssl is
// missing (scripts/install-deps.sh --test).

#include <gtest/gtest.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <latch>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "clock/sntp_client.h"
#include "tests/support/chrony_server.h"
#include "tests/support/run_sync.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_ca.h"
#include "tests/support/wait.h"

namespace xdcr::test {
namespace {

using namespace std::chrono_literals;

#define SKIP_WITHOUT_CHRONYD()                                                               \
  if (findChronyd().empty()) {                                                               \
    GTEST_SKIP() << "chronyd not installed (Debian package chrony; scripts/install-deps.sh " \
                    "--test)";                                                               \
  }
#define SKIP_WITHOUT_OPENSSL()                                            \
  if (!opensslAvailable()) {                                              \
    GTEST_SKIP() << "openssl CLI not installed (Debian package openssl; " \
                    "scripts/install-deps.sh --test)";                    \
  }

/** Runs `openssl args...` (bounded); returns its exit status and puts its output in `out`. */
ExitStatus runOpenssl(const std::vector<std::string>& args, const TempDir& dir, std::string* out) {
  static int n = 0;
  const std::string log = dir.file("openssl-" + std::to_string(++n) + ".log");
  std::vector<std::string> argv = {"openssl"};
  argv.insert(argv.end(), args.begin(), args.end());
  Subprocess p = Subprocess::start(argv, log);
  auto st = p.waitFor(30s);
  if (!st) {
    st = p.kill();
  }
  *out = readFileText(log);
  return *st;
}

/** The PIDs of `pid`'s children (chronyd forks one NTS-KE helper). */
std::vector<pid_t> childrenOf(pid_t pid) {
  std::vector<pid_t> out;
  const std::string task_dir = "/proc/" + std::to_string(pid) + "/task";
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(task_dir, ec)) {
    std::istringstream in(readFileText(task.path().string() + "/children"));
    pid_t child;
    while (in >> child) {
      out.push_back(child);
    }
  }
  return out;
}

bool processGone(pid_t pid) {
  // Gone, or a zombie waiting for its new parent (init) to reap it.
  const std::string stat = readFileText("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = stat.rfind(')');
  return stat.empty() ||
         (close != std::string::npos && stat.size() > close + 2 && stat[close + 2] == 'Z');
}

TEST(TestCaTest, IssuesAServerCertificateWithSansAndServerAuth) {
  SKIP_WITHOUT_OPENSSL();
  TempDir dir("xdcr-testca");
  TestCa ca(dir.file("ca"));
  ASSERT_TRUE(std::filesystem::exists(ca.caFile()));
  IssuedCert cert = ca.issueServer("localhost", {"DNS:localhost", "IP:127.0.0.1", "IP:127.0.0.2"});
  ASSERT_TRUE(std::filesystem::exists(cert.cert_file));
  ASSERT_TRUE(std::filesystem::exists(cert.key_file));

  std::string out;
  ExitStatus st = runOpenssl({"verify", "-CAfile", ca.caFile(), cert.cert_file}, dir, &out);
  EXPECT_TRUE(st.success()) << out;
  EXPECT_NE(out.find(": OK"), std::string::npos) << out;

  st = runOpenssl({"x509", "-in", cert.cert_file, "-noout", "-subject", "-ext",
                   "subjectAltName,extendedKeyUsage,basicConstraints"},
                  dir, &out);
  ASSERT_TRUE(st.success()) << out;
  EXPECT_NE(out.find("CN = localhost"), std::string::npos) << out;
  EXPECT_NE(out.find("DNS:localhost, IP Address:127.0.0.1, IP Address:127.0.0.2"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("TLS Web Server Authentication"), std::string::npos) << out;
  EXPECT_NE(out.find("CA:FALSE"), std::string::npos) << out;

  // A second certificate from the same CA, and one from another CA that must not verify.
  IssuedCert other = ca.issueServer("other name/with slash", {"DNS:example.test"});
  EXPECT_TRUE(std::filesystem::exists(other.cert_file)) << other.cert_file;
  st = runOpenssl({"x509", "-in", other.cert_file, "-noout", "-subject"}, dir, &out);
  EXPECT_NE(out.find("CN = other name/with slash"), std::string::npos) << out;
  TestCa stranger(dir.file("stranger"));
  st = runOpenssl({"verify", "-CAfile", stranger.caFile(), cert.cert_file}, dir, &out);
  EXPECT_FALSE(st.success()) << out;
}

TEST(TestCaTest, OpensslErrorsAreReported) {
  SKIP_WITHOUT_OPENSSL();
  TempDir dir("xdcr-testca");
  TestCa ca(dir.path());
  try {
    ca.issueServer("bad", {"NOTATYPE:foo"});
    FAIL() << "an invalid subjectAltName was accepted";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("openssl x509"), std::string::npos) << what;
    EXPECT_NE(what.find("exited with status"), std::string::npos) << what;
  }
}

TEST(ChronyServerTest, ServesTheHostClockAndStops) {
  SKIP_WITHOUT_CHRONYD();
  ChronyServer s(ChronyOptions{});
  EXPECT_EQ(s.address(), "127.0.0.1");
  EXPECT_EQ(s.ntpAddress(), "127.0.0.1:" + std::to_string(s.port()));
  EXPECT_EQ(s.ntsKeAddress(), "");
  EXPECT_TRUE(s.waitReady(5s)) << s.logTail();
  const std::string conf = readFileText(s.dir() + "/chrony.conf");
  EXPECT_NE(conf.find("local stratum 8"), std::string::npos) << conf;
  EXPECT_NE(conf.find("bindaddress 127.0.0.1"), std::string::npos) << conf;
  ExitStatus st = s.stop();
  EXPECT_FALSE(st.forced) << st.describe();
  EXPECT_FALSE(s.running());
  EXPECT_FALSE(s.waitReady(200ms)) << "a stopped server cannot be ready";
  // stop() twice is harmless.
  EXPECT_FALSE(s.stop().forced);
}

TEST(ChronyServerTest, ManyServersOnOneAddressStartedConcurrentlyGetDistinctPorts) {
  SKIP_WITHOUT_CHRONYD();
  constexpr int kServers = 6;
  std::vector<ChronyServer*> servers(kServers, nullptr);
  std::vector<std::string> errors(kServers);
  std::latch started(kServers);
  std::latch finish(1);
  std::vector<std::thread> threads;
  // Each thread keeps its server until the end: a child is killed when the thread that started
  // it ends (PR_SET_PDEATHSIG), so the servers must not outlive their threads.
  for (int i = 0; i < kServers; ++i) {
    threads.emplace_back([&, i] {
      std::unique_ptr<ChronyServer> mine;
      try {
        ChronyOptions o;
        o.address = i % 2 == 0 ? "127.0.0.1" : "127.0.0.3";
        mine = std::make_unique<ChronyServer>(std::move(o));
        servers[i] = mine.get();
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
      started.count_down();
      finish.wait();
    });
  }
  started.wait();
  std::set<std::string> addresses;
  std::vector<ChronyServer*> all;
  for (int i = 0; i < kServers; ++i) {
    if (servers[i] == nullptr) {
      ADD_FAILURE() << errors[i];
      continue;
    }
    EXPECT_TRUE(servers[i]->waitReady(5s)) << servers[i]->logTail();
    addresses.insert(servers[i]->ntpAddress());
    all.push_back(servers[i]);
  }
  EXPECT_EQ(addresses.size(), static_cast<size_t>(kServers));
  const auto start = std::chrono::steady_clock::now();
  for (const auto& st : stopAll(all)) {
    EXPECT_FALSE(st.forced) << st.describe();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 6s) << "stopAll() stops in parallel";
  finish.count_down();
  for (auto& t : threads) {
    t.join();
  }
}

// Run by ChronydDoesNotOutliveACrashedTest in a child process: starts a server, reports its
// PID and directory, and dies at once without stopping it (as a crash or a ctest timeout would).
TEST(ChronyServerCrashHelper, StartsChronydThenDies) {
  const char* report = std::getenv("XDCR_CHRONY_CRASH_HELPER");
  if (report == nullptr) {
    GTEST_SKIP() << "only run by ChronyServerTest.ChronydDoesNotOutliveACrashedTest";
  }
  auto* s = new ChronyServer(ChronyOptions{});  // never destroyed
  ASSERT_TRUE(s->waitReady(5s)) << s->logTail();
  writeFileText(report, std::to_string(s->pid()) + " " + s->dir() + "\n");
  ::kill(::getpid(), SIGKILL);
}

TEST(ChronyServerTest, ChronydDoesNotOutliveACrashedTest) {
  SKIP_WITHOUT_CHRONYD();
  TempDir dir("xdcr-chrony-crash");
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
  ASSERT_GT(n, 0);
  self[n] = '\0';
  Subprocess helper =
      Subprocess::start({self, "--gtest_filter=ChronyServerCrashHelper.StartsChronydThenDies"},
                        dir.file("log"), {{"XDCR_CHRONY_CRASH_HELPER", dir.file("report")}});
  auto st = helper.waitFor(20s);
  ASSERT_TRUE(st.has_value()) << readFileText(dir.file("log"));
  EXPECT_EQ(st->signal, SIGKILL) << st->describe() << "\n" << readFileText(dir.file("log"));
  std::istringstream report(readFileText(dir.file("report")));
  pid_t chronyd = 0;
  std::string chrony_dir;
  ASSERT_TRUE(report >> chronyd >> chrony_dir) << readFileText(dir.file("log"));
  const std::string conf = chrony_dir + "/chrony.conf";
  auto stillOurs = [&] {
    const std::string cmdline = readFileText("/proc/" + std::to_string(chronyd) + "/cmdline");
    return cmdline.find(conf) != std::string::npos;
  };
  const bool gone = waitUntil([&] { return !stillOurs(); }, 10s, 50ms);
  EXPECT_TRUE(gone) << "chronyd " << chronyd << " outlived the crashed test";
  if (!gone) {
    ::kill(chronyd, SIGKILL);  // checked above: still that chronyd
  }
  std::error_code ignored;
  std::filesystem::remove_all(chrony_dir, ignored);
}

TEST(ChronyServerTest, RefusesToShareAFixedPort) {
  SKIP_WITHOUT_CHRONYD();
  ChronyServer first(ChronyOptions{});
  ChronyOptions o;
  o.port = first.port();
  // chronyd sets SO_REUSEADDR, so a second one would start and silently share the UDP port.
  try {
    ChronyServer second(o);
    FAIL() << "a second chronyd was started on " << first.ntpAddress();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("sockets are bound to UDP " + first.ntpAddress()),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(first.waitReady(5s)) << first.logTail();
}

TEST(ChronyServerTest, BadConfigurationThrowsWithTheLog) {
  SKIP_WITHOUT_CHRONYD();
  ChronyOptions o;
  o.extra_lines = {"thisisnotadirective 1"};
  try {
    ChronyServer s(o);
    FAIL() << "chronyd started with an invalid directive";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("thisisnotadirective"), std::string::npos) << what;  // chronyd's message
    EXPECT_NE(what.find("exited with status"), std::string::npos) << what;
  }
  ChronyOptions not_loopback;
  not_loopback.address = "10.0.0.1";
  EXPECT_THROW(ChronyServer{not_loopback}, std::invalid_argument);
  ChronyOptions half;
  half.nts_cert_file = "/nonexistent.crt";
  EXPECT_THROW(ChronyServer{half}, std::invalid_argument);
}

TEST(ChronyServerTest, ChainedServerServesItsOffset) {
  SKIP_WITHOUT_CHRONYD();
  ChronyOptions ro;
  ro.address = "127.0.0.2";
  ChronyServer ref(ro);
  ChronyOptions o;
  o.address = "127.0.0.2";
  o.reference = ref.ntpAddress();
  o.offset_s = -0.3;
  ChronyServer chained(o);
  const std::string conf = readFileText(chained.dir() + "/chrony.conf");
  EXPECT_EQ(conf.find("local stratum"), std::string::npos) << conf;
  EXPECT_NE(conf.find("server 127.0.0.2 port " + std::to_string(ref.port()) +
                      " iburst minpoll -2 maxpoll -2 offset -0.300000000"),
            std::string::npos)
      << conf;
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(chained.waitReady(10s)) << chained.logTail();
  std::printf("chained server ready after %lld ms\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                         std::chrono::steady_clock::now() - start)
                                         .count()));
  // It serves true time − 0.3 s, measured with the project's SNTP client.
  std::optional<Result<clock::SntpResult>> r =
      runSync(clock::querySntpServer(chained.ntpAddress()));
  ASSERT_TRUE(r && r->has_value()) << (r ? (*r).error().message : "exception");
  EXPECT_NEAR((*r)->best.offset_ns / 1e6, -300.0, 2.0) << "ms";
  EXPECT_EQ((*r)->best.stratum, 9);
  for (const auto& st : stopAll({&chained, &ref})) {
    EXPECT_FALSE(st.forced) << st.describe();
  }
}

TEST(ChronyServerTest, NtsServerListensOnLoopbackWithTheTestCertificate) {
  SKIP_WITHOUT_CHRONYD();
  SKIP_WITHOUT_OPENSSL();
  TempDir dir("xdcr-nts-harness");
  TestCa ca(dir.path());
  IssuedCert cert = ca.issueServer("localhost", {"DNS:localhost", "IP:127.0.0.4"});
  ChronyOptions o;
  o.address = "127.0.0.4";
  o.nts_cert_file = cert.cert_file;
  o.nts_key_file = cert.key_file;
  ChronyServer s(o);
  ASSERT_NE(s.ntsPort(), 0);
  EXPECT_EQ(s.ntsKeAddress(), "127.0.0.4:" + std::to_string(s.ntsPort()));
  ASSERT_TRUE(s.waitReady(5s)) << s.logTail();

  // A TLS 1.3 handshake with the test CA and the IP SAN succeeds (ALPN ntske/1 offered).
  std::string out;
  ExitStatus st =
      runOpenssl({"s_client", "-connect", s.ntsKeAddress(), "-alpn", "ntske/1", "-CAfile",
                  ca.caFile(), "-verify_return_error", "-verify_ip", "127.0.0.4", "-brief"},
                 dir, &out);
  EXPECT_TRUE(st.success()) << out << "\nchronyd log:\n" << s.logTail();
  EXPECT_NE(out.find("Verification: OK"), std::string::npos) << out;
  EXPECT_NE(out.find("TLSv1.3"), std::string::npos) << out;

  // The NTS-KE helper process chronyd forked ends with it.
  const std::vector<pid_t> helpers = childrenOf(s.pid());
  EXPECT_FALSE(s.stop().forced);
  for (pid_t h : helpers) {
    EXPECT_TRUE(waitUntil([&] { return processGone(h); }, 5s)) << "NTS-KE helper " << h;
  }
}

}  // namespace
}  // namespace xdcr::test
