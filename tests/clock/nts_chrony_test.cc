// The NTS client against real chronyd NTS servers on 127.0.0.1 (clock-notes §6), with a
// throw-away CA made by the openssl CLI: an authenticated offset near 0 (same host clock) and
// cookie reuse; certificates that must be refused (unknown CA, wrong name); an NTS-KE server
// that is not one (no ALPN); replies tampered with by a UDP relay in this test; an NTS NAK.
//
// Safety as in the SNTP chrony test: chronyd runs with -x (never controls the clock), binds
// 127.0.0.1 only and is stopped by its PID (tests/support/chrony_server.h); the kernel clock's
// discipline state is compared before and after.

#include <gtest/gtest.h>
#include <sys/timex.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/udp.hpp>
#include <csignal>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "clock/nts.h"
#include "tests/support/chrony_server.h"
#include "tests/support/run_sync.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_ca.h"
#include "tests/support/wait.h"

namespace xdcr::clock {
namespace {

namespace net = boost::asio;
constexpr int64_t kMs = 1'000'000;

Result<SntpResult> runQuery(NtsClient& client) {
  return test::runSync(client.query());
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

struct timex readClockState() {
  struct timex tx {};
  tx.modes = 0;  // read only
  adjtimex(&tx);
  return tx;
}

/**
 * A UDP relay on 127.0.0.1 between the client and chronyd's NTP port. With `tamper` it flips one
 * byte inside the ciphertext of each reply's authenticator EF, as a man in the middle would.
 * Datagrams from chronyd go to the last client; everything else goes to chronyd.
 */
class TamperingRelay {
 public:
  TamperingRelay(net::ip::udp::endpoint upstream, bool tamper)
      : upstream_(upstream),
        tamper_(tamper),
        sock_(io_, net::ip::udp::endpoint(net::ip::make_address("127.0.0.1"), 0)) {
    thread_ = std::thread([this] { run(); });
  }
  ~TamperingRelay() {
    stop_ = true;
    // Wake the blocking receive with a datagram to ourselves.
    boost::system::error_code ec;
    net::ip::udp::socket s(io_, net::ip::udp::v4());
    char x = 0;
    s.send_to(net::buffer(&x, 1), sock_.local_endpoint(), 0, ec);
    thread_.join();
  }
  HostPort address() const { return {"127.0.0.1", sock_.local_endpoint().port()}; }
  int forwarded() const { return forwarded_.load(); }
  int tampered() const { return tampered_.load(); }
  int returned() const { return returned_.load(); }
  void setTamper(bool on) { tamper_ = on; }
  /** Sizes of the datagrams forwarded to chronyd and of its replies, in order. */
  std::vector<size_t> requestSizes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return request_sizes_;
  }
  std::vector<size_t> replySizes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return reply_sizes_;
  }

 private:
  void run() {
    std::array<uint8_t, 4096> buf{};
    net::ip::udp::endpoint client;
    for (;;) {
      net::ip::udp::endpoint from;
      boost::system::error_code ec;
      size_t n = sock_.receive_from(net::buffer(buf), from, 0, ec);
      if (stop_ || ec) {
        return;
      }
      if (from == upstream_) {
        if (tamper_.load() && flipCiphertextByte(std::span<uint8_t>(buf.data(), n))) {
          ++tampered_;
        }
        // Counted before sending: the client may have finished by the time send_to returns.
        ++returned_;
        record(reply_sizes_, n);
        sock_.send_to(net::buffer(buf.data(), n), client, 0, ec);
      } else {
        client = from;
        ++forwarded_;
        record(request_sizes_, n);
        sock_.send_to(net::buffer(buf.data(), n), upstream_, 0, ec);
      }
    }
  }

  void record(std::vector<size_t>& sizes, size_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    sizes.push_back(n);
  }

  // Past the 16-byte SIV tag, inside C: the tag no longer matches what the S2C key computes.
  static bool flipCiphertextByte(std::span<uint8_t> reply) {
    auto efs = parseExtensionFields(reply, kNtpPacketSize);
    if (!efs || efs->empty() || efs->back().type != kEfNtsAuthenticator) {
      return false;
    }
    const auto& auth = efs->back();
    const size_t nonce_len = (reply[auth.offset + 4] << 8) | reply[auth.offset + 5];
    const size_t ct_len = (reply[auth.offset + 6] << 8) | reply[auth.offset + 7];
    const size_t ct_at = auth.offset + 8 + ((nonce_len + 3) & ~size_t{3});
    if (ct_len <= kAesSivTagSize + 3 || ct_at + ct_len > reply.size()) {
      return false;
    }
    reply[ct_at + kAesSivTagSize + 3] ^= 0x20;
    return true;
  }

  net::io_context io_;
  net::ip::udp::endpoint upstream_;
  std::atomic<bool> tamper_;
  net::ip::udp::socket sock_;
  std::atomic<bool> stop_{false};
  std::atomic<int> forwarded_{0}, tampered_{0}, returned_{0};
  mutable std::mutex mu_;
  std::vector<size_t> request_sizes_, reply_sizes_;
  std::thread thread_;
};

/**
 * Shared by all tests (chronyd takes ~2 s to stop): a CA, a server certificate for
 * localhost/127.0.0.1 and one for other names only, a second unrelated CA, and two chronyd NTS
 * servers, `good` with the right certificate and `misnamed` with the other.
 */
class clock_nts_Chrony : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (test::findChronyd().empty()) {
      skip_ = "chronyd not installed (Debian package chrony)";
      return;
    }
    if (!test::opensslAvailable()) {
      skip_ = "openssl CLI not installed (Debian package openssl)";
      return;
    }
    clock_before_ = readClockState();
    dir_ = std::make_unique<test::TempDir>("xdcr-nts");
    ca_ = std::make_unique<test::TestCa>(dir_->file("ca"));
    other_ca_ = std::make_unique<test::TestCa>(dir_->file("other-ca"));
    const test::IssuedCert good = ca_->issueServer("localhost", {"DNS:localhost", "IP:127.0.0.1"});
    const test::IssuedCert misnamed =
        ca_->issueServer("elsewhere", {"DNS:ntp.elsewhere.example", "IP:127.0.0.9"});
    good_cert_ = good;

    test::ChronyOptions o;
    o.address = "127.0.0.1";
    o.nts_cert_file = good.cert_file;
    o.nts_key_file = good.key_file;
    // NTS-KE in the main chronyd process. With the default helper process (ntsprocesses 1) the
    // helper outlives the main process for a moment and is reaped by PID 1, not by the harness,
    // which therefore cannot wait for it; one process is all a test needs anyway.
    o.extra_lines = {"ntsprocesses 0"};
    good_ = std::make_unique<test::ChronyServer>(o);
    o.nts_cert_file = misnamed.cert_file;
    o.nts_key_file = misnamed.key_file;
    misnamed_ = std::make_unique<test::ChronyServer>(o);
    for (auto* s : {good_.get(), misnamed_.get()}) {
      if (!s->waitReady(std::chrono::seconds(10))) {
        setup_error_ = "chronyd " + s->ntpAddress() + " never answered; log:\n" + s->logTail();
        return;
      }
    }
  }

  static void TearDownTestSuite() {
    auto statuses = test::stopAll({good_.get(), misnamed_.get()});
    for (const auto& st : statuses) {
      EXPECT_FALSE(st.forced) << "chronyd had to be killed: " << st.describe();
    }
    good_.reset();
    misnamed_.reset();
    ca_.reset();
    other_ca_.reset();
    dir_.reset();
    if (skip_.empty()) {
      const struct timex after = readClockState();
      EXPECT_EQ(clock_before_.freq, after.freq) << "the kernel clock frequency changed";
      EXPECT_EQ(clock_before_.offset, after.offset) << "the kernel clock offset changed";
      EXPECT_EQ(clock_before_.status, after.status) << "the kernel clock status changed";
    }
  }

  void SetUp() override {
    if (!skip_.empty()) {
      GTEST_SKIP() << skip_;
    }
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
  }

  static NtsOptions options(const std::string& ca_file) {
    NtsOptions o;
    o.ca_file = ca_file;
    o.samples = 4;
    o.spacing = std::chrono::milliseconds(50);
    o.timeout = std::chrono::milliseconds(2000);
    return o;
  }

  static std::string goodKe() { return good_->ntsKeAddress(); }
  static std::string goodKeByName() { return "localhost:" + std::to_string(good_->ntsPort()); }

  static inline std::string skip_;
  static inline std::string setup_error_;
  static inline struct timex clock_before_ {};
  static inline std::unique_ptr<test::TempDir> dir_;
  static inline std::unique_ptr<test::TestCa> ca_, other_ca_;
  static inline test::IssuedCert good_cert_;
  static inline std::unique_ptr<test::ChronyServer> good_, misnamed_;
};

TEST_F(clock_nts_Chrony, AuthenticatedOffsetNearZeroAndCookiesReused) {
  NtsClient client(goodKe(), options(ca_->caFile()));
  auto r = runQuery(client);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->valid_samples, 4);
  EXPECT_EQ(r->best.stratum, 8);
  EXPECT_LT(std::abs(r->best.offset_ns), 5 * kMs) << "offset " << r->best.offset_ns << " ns";
  EXPECT_GE(r->best.delay_ns, 0);
  EXPECT_LT(r->best.delay_ns, 10 * kMs);
  EXPECT_EQ(client.keEstablishments(), 1);
  EXPECT_GT(client.cookiesLeft(), 0u);
  EXPECT_LE(client.cookiesLeft(), kNtsMaxCookies);
  std::cout << "NTS " << goodKe() << " (NTP " << good_->ntpAddress() << "): offset "
            << r->best.offset_ns << " ns, delay " << r->best.delay_ns << " ns, "
            << client.cookiesLeft() << " cookies left\n";

  // The second query uses the cookies the first one collected: no second NTS-KE.
  auto again = runQuery(client);
  ASSERT_TRUE(again.has_value()) << again.error().message;
  EXPECT_EQ(again->valid_samples, 4);
  EXPECT_LT(std::abs(again->best.offset_ns), 5 * kMs);
  EXPECT_EQ(client.keEstablishments(), 1) << "cookies were not reused";
  std::cout << "second query: offset " << again->best.offset_ns << " ns, delay "
            << again->best.delay_ns << " ns, NTS-KE handshakes " << client.keEstablishments()
            << "\n";
}

// Whether "localhost" resolves here. Every Debian installation has it in /etc/hosts; a bare
// debootstrap chroot (the fresh-machine check) has no /etc/hosts at all.
bool localhostResolves() {
  net::io_context io;
  boost::system::error_code ec;
  net::ip::tcp::resolver(io).resolve("localhost", "4460", ec);
  return !ec;
}

// A DNS name is checked against the certificate's DNS SANs (and sent as SNI).
TEST_F(clock_nts_Chrony, DnsNameMatchingTheCertificateIsAccepted) {
  if (!localhostResolves()) GTEST_SKIP() << "\"localhost\" does not resolve (no /etc/hosts)";
  NtsOptions o = options(ca_->caFile());
  o.samples = 1;
  NtsClient client(goodKeByName(), o);
  auto r = runQuery(client);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  EXPECT_EQ(r->valid_samples, 1);
}

TEST_F(clock_nts_Chrony, CertificateFromAnUntrustedCaIsRejected) {
  for (const std::string& ca : {other_ca_->caFile(), std::string()}) {
    NtsClient client(goodKe(), options(ca));
    auto r = runQuery(client);
    ASSERT_FALSE(r.has_value()) << "accepted with ca_file \"" << ca << "\"";
    const std::string& m = r.error().message;
    EXPECT_EQ(r.error().kind, Error::Kind::Auth) << m;
    EXPECT_TRUE(contains(m,
                         "TLS handshake failed: certificate verify failed: unable to get "
                         "local issuer certificate"))
        << m;
    EXPECT_TRUE(contains(m, ca.empty() ? "system trust store" : ca)) << m;
    EXPECT_EQ(client.keEstablishments(), 0);
    std::cout << "untrusted CA (" << (ca.empty() ? "system store" : "other CA") << "): " << m
              << "\n";
  }
}

TEST_F(clock_nts_Chrony, CertificateForOtherNamesIsRejected) {
  const std::string port = std::to_string(misnamed_->ntsPort());
  struct Case {
    std::string server;
    std::string name;
    std::string openssl_says;
  };
  std::vector<Case> cases = {{"127.0.0.1:" + port, "127.0.0.1", "IP address mismatch"}};
  if (localhostResolves()) {
    cases.push_back({"localhost:" + port, "localhost", "hostname mismatch"});
  } else {
    std::cout << "\"localhost\" does not resolve here (no /etc/hosts): DNS-name case skipped\n";
  }
  for (const Case& c : cases) {
    NtsClient client(c.server, options(ca_->caFile()));
    auto r = runQuery(client);
    ASSERT_FALSE(r.has_value()) << c.server << " accepted";
    const std::string& m = r.error().message;
    EXPECT_EQ(r.error().kind, Error::Kind::Auth) << m;
    EXPECT_TRUE(contains(m, "certificate verify failed: " + c.openssl_says)) << m;
    EXPECT_TRUE(contains(m, "\"" + c.name + "\"")) << m;
    std::cout << "wrong name (" << c.name << "): " << m << "\n";
  }
}

// A TLS server that is not an NTS-KE server: `openssl s_server` with a valid certificate but no
// ALPN. The handshake succeeds, the ALPN check must not.
TEST_F(clock_nts_Chrony, TlsServerWithoutNtsAlpnIsRejected) {
  const uint16_t port = [] {
    net::io_context io;
    net::ip::tcp::acceptor a(io, net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
    return a.local_endpoint().port();
  }();
  // s_server keeps accepting after a failed or finished connection, so the client itself can
  // probe until it listens.
  auto server = test::Subprocess::start(
      {"openssl", "s_server", "-accept", "127.0.0.1:" + std::to_string(port), "-cert",
       good_cert_.cert_file, "-key", good_cert_.key_file, "-tls1_3", "-quiet"},
      dir_->file("s_server.log"));
  Result<SntpResult> r = fail(Error::io("not run"));
  test::waitUntil(
      [&] {
        NtsOptions o = options(ca_->caFile());
        o.timeout = std::chrono::milliseconds(1000);
        NtsClient client("127.0.0.1:" + std::to_string(port), o);
        r = runQuery(client);
        return r.has_value() || !contains(r.error().message, "cannot connect");
      },
      std::chrono::seconds(10), std::chrono::milliseconds(50));
  server.stop(SIGTERM, std::chrono::seconds(2));
  ASSERT_FALSE(!r.has_value() && contains(r.error().message, "cannot connect"))
      << "openssl s_server never listened: " << test::readFileText(dir_->file("s_server.log"));
  ASSERT_FALSE(r.has_value());
  EXPECT_TRUE(contains(r.error().message, "ALPN")) << r.error().message;
  EXPECT_TRUE(contains(r.error().message, "not an NTS-KE server")) << r.error().message;
  std::cout << "no ALPN: " << r.error().message << "\n";
}

TEST_F(clock_nts_Chrony, TamperedRepliesAreRejectedAndGiveNoSample) {
  const net::ip::udp::endpoint chronyd(net::ip::make_address("127.0.0.1"), good_->port());
  // Control: the same relay without tampering passes authentic replies, so what fails below
  // fails because of the flipped byte.
  {
    TamperingRelay relay(chronyd, false);
    NtsOptions o = options(ca_->caFile());
    o.samples = 2;
    o.ntp_override = relay.address();
    NtsClient client(goodKe(), o);
    auto r = runQuery(client);
    ASSERT_TRUE(r.has_value()) << r.error().message;
    EXPECT_EQ(r->valid_samples, 2);
    EXPECT_EQ(relay.returned(), 2);
  }
  TamperingRelay relay(chronyd, true);
  NtsOptions o = options(ca_->caFile());
  o.samples = 3;
  o.timeout = std::chrono::milliseconds(500);
  o.ntp_override = relay.address();
  NtsClient client(goodKe(), o);
  auto r = runQuery(client);
  ASSERT_FALSE(r.has_value()) << "a sample came through a tampering relay: offset "
                              << r->best.offset_ns;
  EXPECT_EQ(r.error().kind, Error::Kind::Auth) << r.error().message;
  EXPECT_TRUE(contains(r.error().message, kNtsAuthFailed)) << r.error().message;
  EXPECT_TRUE(contains(r.error().message, "no authenticated, usable sample out of 3"))
      << r.error().message;
  EXPECT_EQ(relay.forwarded(), 3);
  EXPECT_EQ(relay.tampered(), 3);
  EXPECT_EQ(client.keEstablishments(), 1);
  std::cout << "tampered: " << r.error().message << "\n";

  // The three cookies sent are spent, and the tampered replies' cookies unusable. The next
  // request asks for the missing ones with Cookie Placeholders (each as long as a cookie), and
  // chronyd answers each with a cookie: the reply grows by as much as the request did.
  EXPECT_EQ(client.cookiesLeft(), kNtsMaxCookies - 3);
  relay.setTamper(false);
  auto healed = runQuery(client);
  ASSERT_TRUE(healed.has_value()) << healed.error().message;
  EXPECT_EQ(healed->valid_samples, 3);
  EXPECT_EQ(client.cookiesLeft(), kNtsMaxCookies);
  EXPECT_EQ(client.keEstablishments(), 1);
  const auto requests = relay.requestSizes();
  const auto replies = relay.replySizes();
  ASSERT_GE(requests.size(), 4u);
  ASSERT_GE(replies.size(), 4u);
  // requests[0]: 7 cookies left after it, no placeholder; requests[3]: 4 left, 2 placeholders.
  EXPECT_GT(requests[3], requests[0]);
  EXPECT_EQ(replies[3] - replies[0], requests[3] - requests[0])
      << "requests " << requests[0] << " and " << requests[3] << " bytes, replies " << replies[0]
      << " and " << replies[3] << " bytes";
  std::cout << "after tampering: request " << requests[3] << " bytes (plain " << requests[0]
            << "), reply " << replies[3] << " bytes (plain " << replies[0] << ")\n";
}

// Cookies from one server sent to another server's NTP port: that server cannot open them and
// answers with an NTS NAK (kiss code NTSN). The client drops its cookies and keys and does
// NTS-KE again on the next query.
TEST_F(clock_nts_Chrony, NtsNakDropsTheCookiesAndRedoesNtsKe) {
  NtsOptions o = options(ca_->caFile());
  o.ntp_override = HostPort{"127.0.0.1", misnamed_->port()};
  NtsClient client(goodKe(), o);
  auto r = runQuery(client);
  ASSERT_FALSE(r.has_value());
  EXPECT_TRUE(contains(r.error().message, "NTSN")) << r.error().message;
  EXPECT_EQ(client.keEstablishments(), 1);
  EXPECT_EQ(client.cookiesLeft(), 0u);
  auto again = runQuery(client);
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(client.keEstablishments(), 2) << "NTS-KE was not redone after the NAK";
  std::cout << "NAK: " << r.error().message << "\n";
}

}  // namespace
}  // namespace xdcr::clock
