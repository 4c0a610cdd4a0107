// The NTS client: NTS-KE when it has no cookies, then NTS-protected NTPv4 exchanges over UDP,
// each reply authenticated before any of its content is believed.

#include "clock/nts.h"

#include <fmt/format.h>
#include <openssl/rand.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace xdcr::clock {
namespace {

namespace net = boost::asio;
using namespace net::experimental::awaitable_operators;
constexpr auto use_nothrow = net::as_tuple(net::use_awaitable);

// Unique identifiers, nonces and the transmit cookie must be unpredictable even to an on-path
// observer of earlier requests: the OS-seeded CSPRNG, not a general-purpose generator.
Result<NtsRequestIds> randomIds() {
  NtsRequestIds ids;
  if (RAND_bytes(ids.uid.data(), static_cast<int>(ids.uid.size())) != 1 ||
      RAND_bytes(ids.nonce.data(), static_cast<int>(ids.nonce.size())) != 1) {
    return fail(Error::io("no random bytes from OpenSSL for the NTS request"));
  }
  while (ids.transmit_cookie == 0) {  // 0 means "no timestamp": the origin check would be void
    std::array<uint8_t, 8> b{};
    if (RAND_bytes(b.data(), static_cast<int>(b.size())) != 1) {
      return fail(Error::io("no random bytes from OpenSSL for the NTS request"));
    }
    for (uint8_t x : b) {
      ids.transmit_cookie = (ids.transmit_cookie << 8) | x;
    }
  }
  return ids;
}

net::awaitable<Result<net::ip::udp::endpoint>> resolveUdp(const std::string& host, uint16_t port) {
  boost::system::error_code ec;
  auto addr = net::ip::make_address(host, ec);
  if (!ec) {
    co_return net::ip::udp::endpoint(addr, port);
  }
  net::ip::udp::resolver resolver(co_await net::this_coro::executor);
  auto [rec, results] = co_await resolver.async_resolve(host, std::to_string(port), use_nothrow);
  if (rec || results.empty()) {
    co_return fail(Error::io(fmt::format("cannot resolve NTP server \"{}\": {}", host,
                                         rec ? rec.message() : "no address")));
  }
  co_return results.begin()->endpoint();
}

// Outcome of one exchange.
struct Exchange {
  std::optional<NtpSample> sample;
  std::optional<NtpRejection> rejection;  // authentic reply, header not usable
  std::vector<NtsBytes> cookies;          // from an authentic reply
  bool nak = false;                       // NTS NAK: the server could not use our cookie
  bool auth_failed = false;               // some reply failed authentication
  std::string problem;                    // set when no sample, for the report
};

net::awaitable<Exchange> exchangeOnce(net::ip::udp::endpoint ep, const NtsKeys& keys,
                                      NtsBytes cookie, int extra_placeholders,
                                      const NtsOptions& opt) {
  auto ex = co_await net::this_coro::executor;
  Exchange out;
  auto ids = randomIds();
  if (!ids) {
    out.problem = ids.error().message;
    co_return out;
  }
  auto request = buildNtsRequest(*ids, cookie, extra_placeholders, keys.c2s);
  if (!request) {
    out.problem = "cannot build the request: " + request.error().message;
    co_return out;
  }
  auto opened = openConnectedUdp(ex, ep);
  if (!opened) {
    out.problem = opened.error().message;
    co_return out;
  }
  net::ip::udp::socket& sock = *opened;
  std::array<uint8_t, 4096> buf{};
  const int64_t t1 = opt.now_ns();
  auto [sec, sent] = co_await sock.async_send(net::buffer(*request), use_nothrow);
  if (sec) {
    out.problem = fmt::format("send failed: {}", sec.message());
    co_return out;
  }
  const auto deadline = std::chrono::steady_clock::now() + opt.timeout;
  // Keep reading until an authentic reply arrives or the time is up: a forged or tampered packet
  // must not end the exchange, or whoever can inject one could suppress our measurement.
  int ignored = 0;
  std::string last_ignored;
  for (;;) {
    auto got = co_await receiveBefore(sock, net::buffer(buf), deadline);
    const int64_t t4 = opt.now_ns();
    if (!got) {
      out.problem = got.error().message;
      co_return out;
    }
    if (!*got) {
      out.problem =
          ignored == 0
              ? fmt::format("no reply within {} ms", opt.timeout.count())
              : fmt::format(
                    "no authentic reply within {} ms; ignored {} repl{}, the last "
                    "because: {}",
                    opt.timeout.count(), ignored, ignored == 1 ? "y" : "ies", last_ignored);
      co_return out;
    }
    const size_t n = **got;
    ByteSpan reply(buf.data(), n);
    auto ignore = [&](std::string why) {
      ++ignored;
      last_ignored = std::move(why);
    };
    // Cheap filters first: a reply that does not answer this request is noise, whatever it says.
    auto header = decodePacket(reply);
    if (!header) {
      ignore(header.error().message);
      continue;
    }
    if (header->mode != kModeServer || header->origin_ts != ids->transmit_cookie) {
      ignore("not a server reply to this request (mode or origin timestamp differ)");
      continue;
    }
    // An NTS NAK cannot be authenticated (the server could not recover our keys), so it only
    // counts if it echoes our Unique Identifier, which an off-path attacker cannot know.
    if (header->stratum == 0 && refIdText(header->reference_id) == "NTSN") {
      if (!ntsReplyEchoesUid(reply, ids->uid)) {
        ignore("NTS NAK without our Unique Identifier");
        continue;
      }
      out.nak = true;
      out.problem =
          "NTS NAK (kiss code NTSN): the server could not use our cookie (restarted or rotated "
          "its keys?); the cookies are dropped and NTS-KE is redone on the next query";
      co_return out;
    }
    auto opened = openNtsReply(reply, ids->uid, keys.s2c);
    if (!opened) {
      if (opened.error().kind == Error::Kind::Auth) {
        out.auth_failed = true;
      }
      ignore(opened.error().message);
      continue;
    }
    // Authentic from here on: its cookies are good even if its time is not usable.
    out.cookies = std::move(opened->cookies);
    auto checked = checkReply(reply, ids->transmit_cookie, t1, t4, opt.limits);
    if (checked) {
      out.sample = *checked;
    } else {
      out.problem = checked.error().message;
      out.rejection = checked.error();
    }
    co_return out;
  }
}

}  // namespace

NtsClient::NtsClient(std::string server, NtsOptions options)
    : server_(std::move(server)), options_(std::move(options)) {}

net::awaitable<Status> NtsClient::establish(const HostPort& ke) {
  session_.reset();
  auto r = co_await ntsKeyExchange(ke, options_.ca_file, options_.timeout);
  if (!r) {
    co_return fail(r.error());
  }
  ++ke_count_;
  Session s;
  s.keys = r->keys;
  s.cookies.assign(r->response.cookies.begin(), r->response.cookies.end());
  // RFC 8915 §4.1.7, §4.1.8: without Server/Port records, NTP goes to the address NTS-KE used,
  // port 123.
  std::string host = r->response.ntp_server.empty() ? r->ke_address : r->response.ntp_server;
  uint16_t port = r->response.ntp_port.value_or(123);
  if (options_.ntp_override) {
    host = options_.ntp_override->host;
    port = options_.ntp_override->port;
  }
  auto ep = co_await resolveUdp(host, port);
  if (!ep) {
    co_return fail(Error::io(fmt::format("NTS server {}: {}", server_, ep.error().message)));
  }
  s.ntp = *ep;
  s.ntp_name = formatHostPort(host, port);
  session_ = std::move(s);
  co_return Status{};
}

net::awaitable<Result<SntpResult>> NtsClient::query() {
  auto ex = co_await net::this_coro::executor;
  auto ke = parseHostPort(server_, kNtsKeDefaultPort);
  if (!ke) {
    co_return fail(ke.error());
  }
  SntpResult result;
  result.server = server_;
  bool auth_failures = false;
  const int samples = std::max(options_.samples, 1);
  int attempted = 0;
  for (int i = 0; i < samples; ++i) {
    if (i > 0) {
      net::steady_timer pause(ex, options_.spacing);
      co_await pause.async_wait(use_nothrow);
    }
    if (!session_ || session_->cookies.empty()) {
      auto st = co_await establish(*ke);
      if (!st) {
        if (result.valid_samples == 0) {
          co_return fail(st.error());
        }
        result.problems.push_back(fmt::format("sample {}: {}", i + 1, st.error().message));
        break;
      }
    }
    // Each cookie is used once (RFC 8915 §5.7): reusing one would let an observer link our
    // requests. Ask for enough extra cookies to get back to a full set.
    NtsBytes cookie = std::move(session_->cookies.front());
    session_->cookies.pop_front();
    const size_t have = session_->cookies.size() + 2;  // + what this reply brings at least
    const int extra = have < kNtsMaxCookies ? static_cast<int>(kNtsMaxCookies - have) : 0;
    ++attempted;
    Exchange x =
        co_await exchangeOnce(session_->ntp, session_->keys, std::move(cookie), extra, options_);
    auth_failures = auth_failures || x.auth_failed;
    for (auto& c : x.cookies) {
      if (session_->cookies.size() < kNtsMaxCookies) {
        session_->cookies.push_back(std::move(c));
      }
    }
    if (x.sample) {
      addSample(result, *x.sample);
      continue;
    }
    result.problems.push_back(fmt::format("sample {}: {}", i + 1, x.problem));
    if (x.nak) {
      session_.reset();  // keys and cookies are useless to this server now
      break;
    }
    // An authenticated kiss-o'-death is honoured like in the SNTP client.
    if (x.rejection && isBackOffKiss(*x.rejection)) {
      co_return fail(Error::refused(fmt::format("NTS server {}: {}", server_, x.problem)));
    }
  }
  if (result.valid_samples == 0) {
    std::string msg =
        fmt::format("NTS server {}{}: no authenticated, usable sample out of {}: {}", server_,
                    session_ ? fmt::format(" (NTP at {})", session_->ntp_name) : std::string(),
                    attempted, joinProblems(result.problems));
    co_return fail(auth_failures ? Error::auth(std::move(msg)) : Error::io(std::move(msg)));
  }
  co_return result;
}

}  // namespace xdcr::clock
