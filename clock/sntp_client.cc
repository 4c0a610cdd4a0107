#include "clock/sntp_client.h"

#include <fmt/format.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/udp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <charconv>
#include <optional>
#include <random>

namespace xdcr::clock {
namespace {

namespace net = boost::asio;
using namespace net::experimental::awaitable_operators;
constexpr auto use_nothrow = net::as_tuple(net::use_awaitable);

// Cookies must be unpredictable to an off-path attacker; a per-thread generator seeded from the
// OS is enough for that (chrony uses its own PRNG the same way).
uint64_t randomCookie() {
  thread_local std::mt19937_64 gen([] {
    std::random_device rd;
    std::seed_seq seq{rd(), rd(), rd(), rd()};
    return std::mt19937_64(seq);
  }());
  uint64_t v = 0;
  while (v == 0) {  // 0 means "no timestamp" and would make the origin check meaningless
    v = gen();
  }
  return v;
}

// Outcome of one exchange.
struct Exchange {
  std::optional<NtpSample> sample;
  std::optional<NtpRejection> rejection;  // set when the server answered but was not usable
  std::string problem;                    // set when not usable, for the report
};

}  // namespace

int64_t systemNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

WallClockNs wallClockFrom(const Clock& clock) {
  return [&clock] { return clock.nowMs() * 1'000'000; };
}

void addSample(SntpResult& result, const NtpSample& sample) {
  if (result.valid_samples == 0 || sample.delay_ns < result.best.delay_ns) result.best = sample;
  ++result.valid_samples;
}

std::string joinProblems(const std::vector<std::string>& problems) {
  std::string out;
  for (const auto& p : problems) {
    out += out.empty() ? "" : "; ";
    out += p;
  }
  return out;
}

bool isBackOffKiss(const NtpRejection& r) {
  return r.reason == NtpReject::KissOfDeath &&
         (r.kiss_code == "DENY" || r.kiss_code == "RSTR" || r.kiss_code == "RATE");
}

std::string formatHostPort(const std::string& host, uint16_t port) {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port)
                                             : fmt::format("{}:{}", host, port);
}

Result<net::ip::udp::socket> openConnectedUdp(const net::any_io_executor& ex,
                                              const net::ip::udp::endpoint& ep) {
  net::ip::udp::socket sock(ex);
  boost::system::error_code ec;
  sock.open(ep.protocol(), ec);
  if (!ec) sock.connect(ep, ec);
  if (ec) return fail(Error::io(fmt::format("cannot open a UDP socket to it: {}", ec.message())));
  return sock;
}

net::awaitable<Result<std::optional<size_t>>> receiveBefore(
    net::ip::udp::socket& sock, net::mutable_buffer buf,
    std::chrono::steady_clock::time_point deadline) {
  net::steady_timer timer(sock.get_executor(), deadline);
  auto r = co_await (sock.async_receive(buf, use_nothrow) || timer.async_wait(use_nothrow));
  if (r.index() == 1) co_return std::optional<size_t>();
  auto [ec, n] = std::get<0>(r);
  if (ec) {
    // E.g. ICMP port unreachable surfaces as connection_refused on a connected socket.
    co_return fail(Error::io(fmt::format("receive failed: {}", ec.message())));
  }
  co_return std::optional<size_t>(n);
}

Result<HostPort> parseHostPort(const std::string& spec, uint16_t default_port) {
  HostPort hp;
  hp.port = default_port;
  std::string port_text;
  if (!spec.empty() && spec.front() == '[') {
    auto close = spec.find(']');
    if (close == std::string::npos) {
      return fail(Error::protocol(fmt::format("NTP server \"{}\": missing ']'", spec)));
    }
    hp.host = spec.substr(1, close - 1);
    if (close + 1 < spec.size()) {
      if (spec[close + 1] != ':') {
        return fail(
            Error::protocol(fmt::format("NTP server \"{}\": expected ':' after ']'", spec)));
      }
      port_text = spec.substr(close + 2);
    }
  } else if (auto colon = spec.find(':');
             colon != std::string::npos && spec.find(':', colon + 1) == std::string::npos) {
    hp.host = spec.substr(0, colon);
    port_text = spec.substr(colon + 1);
  } else {
    hp.host = spec;  // a name, an IPv4 address or a bare IPv6 address
  }
  if (hp.host.empty()) {
    return fail(Error::protocol(fmt::format("NTP server \"{}\": empty host", spec)));
  }
  if (!port_text.empty() || (spec.size() > 0 && spec.back() == ':')) {
    unsigned v = 0;
    auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), v);
    if (ec != std::errc() || p != port_text.data() + port_text.size() || v == 0 || v > 65535) {
      return fail(Error::protocol(
          fmt::format("NTP server \"{}\": port \"{}\" is not a number 1-65535", spec, port_text)));
    }
    hp.port = static_cast<uint16_t>(v);
  }
  return hp;
}

namespace {

net::awaitable<Exchange> exchangeOnce(net::ip::udp::endpoint ep, const SntpOptions& opt) {
  auto ex = co_await net::this_coro::executor;
  Exchange out;
  // A fresh socket, hence a fresh ephemeral port, per exchange: a late reply to an earlier
  // request cannot arrive on it.
  auto opened = openConnectedUdp(ex, ep);
  if (!opened) {
    out.problem = opened.error().message;
    co_return out;
  }
  net::ip::udp::socket& sock = *opened;
  uint64_t cookie = randomCookie();
  NtpBytes request = encodePacket(makeClientRequest(cookie));
  std::array<uint8_t, 1024> buf{};

  int64_t t1 = opt.now_ns();
  auto [sec, sent] = co_await sock.async_send(net::buffer(request), use_nothrow);
  if (sec) {
    out.problem = fmt::format("send failed: {}", sec.message());
    co_return out;
  }
  auto deadline = std::chrono::steady_clock::now() + opt.timeout;
  // Keep reading until a reply carries our cookie or the time is up: a bogus packet must not
  // end the exchange, or anyone able to send us one could suppress our measurement.
  std::string bogus;
  for (;;) {
    auto got = co_await receiveBefore(sock, net::buffer(buf), deadline);
    const int64_t t4 = opt.now_ns();
    if (!got) {
      out.problem = got.error().message;
      co_return out;
    }
    if (!*got) {
      out.problem = fmt::format("no valid reply within {} ms{}", opt.timeout.count(), bogus);
      co_return out;
    }
    const size_t n = **got;
    auto checked = checkReply(std::span<const uint8_t>(buf.data(), n), cookie, t1, t4, opt.limits);
    if (checked) {
      out.sample = *checked;
      co_return out;
    }
    if (checked.error().reason == NtpReject::BogusOrigin ||
        checked.error().reason == NtpReject::Malformed) {
      bogus = fmt::format(" (ignored a reply: {})", checked.error().message);
      continue;
    }
    out.problem = checked.error().message;
    out.rejection = checked.error();
    co_return out;
  }
}

}  // namespace

net::awaitable<Result<SntpResult>> querySntpServer(std::string server, SntpOptions options) {
  auto ex = co_await net::this_coro::executor;
  auto hp = parseHostPort(server);
  if (!hp) {
    co_return fail(hp.error());
  }
  net::ip::udp::resolver resolver(ex);
  std::string port_text = std::to_string(hp->port);
  auto [rec, results] = co_await resolver.async_resolve(hp->host, port_text, use_nothrow);
  if (rec || results.empty()) {
    co_return fail(Error::io(fmt::format("NTP server {}: cannot resolve host \"{}\": {}", server,
                                         hp->host, rec ? rec.message() : "no address")));
  }
  net::ip::udp::endpoint ep = results.begin()->endpoint();

  SntpResult result;
  result.server = server;
  int samples = std::max(options.samples, 1);
  for (int i = 0; i < samples; ++i) {
    if (i > 0) {
      net::steady_timer pause(ex, options.spacing);
      co_await pause.async_wait(use_nothrow);
    }
    Exchange x = co_await exchangeOnce(ep, options);
    if (x.sample) {
      addSample(result, *x.sample);
      continue;
    }
    result.problems.push_back(fmt::format("sample {}: {}", i + 1, x.problem));
    if (x.rejection && isBackOffKiss(*x.rejection)) {
      co_return fail(Error::refused(fmt::format("NTP server {}: {}", server, x.problem)));
    }
  }
  if (result.valid_samples == 0) {
    co_return fail(Error::io(fmt::format("NTP server {}: no usable sample out of {}: {}", server,
                                         samples, joinProblems(result.problems))));
  }
  co_return result;
}

}  // namespace xdcr::clock
