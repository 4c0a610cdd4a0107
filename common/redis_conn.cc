#include "common/redis_conn.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <fmt/format.h>

#include <mutex>
#include <tuple>
#include <unordered_set>

#include "common/rate_limiter.h"
#include "common/tls.h"

namespace xdcr {
namespace {

using namespace net::experimental::awaitable_operators;
constexpr auto use_nothrow = net::as_tuple(net::use_awaitable);
constexpr size_t kMinReadSpace = 64 * 1024;

// The addresses that have answered at least once in this process. A reset from one of them is a
// network or server event ("after it had worked"), never a TLS misconfiguration: the TLS hint is
// only for a new address that dropped us before saying anything.
std::mutex answered_mu;
std::unordered_set<std::string>& answeredAddresses() {
  static std::unordered_set<std::string> set;
  return set;
}

}  // namespace

bool RedisConnection::addressAnswered(const std::string& address) {
  std::lock_guard lock(answered_mu);
  return answeredAddresses().contains(address);
}

char* ReadBuffer::prepare(size_t min_free, size_t& free_out) {
  if (cap_ - wpos_ < min_free) {
    size_t used = wpos_ - rpos_;
    if (rpos_ > 0 && cap_ - used >= min_free && used <= cap_ / 2) {
      std::memmove(buf_.get(), buf_.get() + rpos_, used);  // compact
    } else {
      size_t ncap = std::max<size_t>(cap_ * 2, used + min_free);
      ncap = std::max<size_t>(ncap, 256 * 1024);
      auto nbuf = std::make_unique<char[]>(ncap);
      if (used > 0) std::memcpy(nbuf.get(), buf_.get() + rpos_, used);
      buf_ = std::move(nbuf);
      cap_ = ncap;
    }
    rpos_ = 0;
    wpos_ = used;
  }
  free_out = cap_ - wpos_;
  return buf_.get() + wpos_;
}

void ReadBuffer::shrinkIfIdle(size_t keep) {
  if (cap_ > keep && size() == 0) {
    buf_.reset();
    cap_ = rpos_ = wpos_ = 0;
  }
}

struct RedisConnection::Tls {
  tls::ssl::context ctx;
  tls::ssl::stream<net::ip::tcp::socket> stream;

  Tls(tls::ssl::context c, net::ip::tcp::socket s) : ctx(std::move(c)), stream(std::move(s), ctx) {}
};

struct RedisConnection::Throttle {
  std::shared_ptr<RateLimiter> read;
  std::shared_ptr<RateLimiter> write;
  net::steady_timer read_timer;   // a read and a write may wait at once (a target's reader and
  net::steady_timer write_timer;  // writer)

  explicit Throttle(const net::any_io_executor& ex) : read_timer(ex), write_timer(ex) {}
};

RedisConnection::RedisConnection(net::any_io_executor ex, std::string label)
    : socket_(ex), label_(std::move(label)) {}

RedisConnection::~RedisConnection() = default;

void RedisConnection::setRateLimits(std::shared_ptr<RateLimiter> read,
                                    std::shared_ptr<RateLimiter> write) {
  // Once made, the timers stay (a wait may be under way when the limits change).
  if (!throttle_ && !read && !write) return;
  if (!throttle_) throttle_ = std::make_unique<Throttle>(tcp().get_executor());
  throttle_->read = std::move(read);
  throttle_->write = std::move(write);
}

net::awaitable<bool> RedisConnection::throttleWait(bool reading,
                                                   std::chrono::steady_clock::duration wait) {
  if (closed_) co_return false;
  net::steady_timer& timer = reading ? throttle_->read_timer : throttle_->write_timer;
  timer.expires_after(wait);
  auto [ec] = co_await timer.async_wait(use_nothrow);
  co_return !ec && !closed_;
}

net::ip::tcp::socket& RedisConnection::tcp() {
  return tls_ ? tls_->stream.next_layer() : socket_;
}

net::awaitable<Status> RedisConnection::connect(const RedisEndpoint& endpoint,
                                                std::chrono::milliseconds timeout) {
  endpoint_ = endpoint;
  endpoint_.password.reset();  // kept for messages only
  close();
  closed_ = false;
  tls_.reset();
  buf_.consume(buf_.size());
  bytes_read_ = 0;
  if (auto s = co_await connectTcp(endpoint, timeout); !s) co_return s;
  if (endpoint.tls) {
    if (auto s = co_await handshake(endpoint, timeout); !s) {
      close();
      co_return s;
    }
  }
  if (endpoint.password) {
    if (auto s = co_await auth(endpoint, timeout); !s) {
      close();
      co_return s;
    }
  } else if (endpoint.tls) {
    // TLS 1.3: a server that refuses our (missing) client certificate says so only after the
    // client's side of the handshake is complete, at the first read. Find out now.
    std::vector<std::string_view> ping{"PING"};
    auto r = co_await call(std::move(ping), timeout);
    if (!r) {
      close();
      co_return fail(r.error());
    }
  }
  co_return Status{};
}

net::awaitable<Status> RedisConnection::connectTcp(const RedisEndpoint& endpoint,
                                                   std::chrono::milliseconds timeout) {
  auto ex = co_await net::this_coro::executor;
  net::ip::tcp::resolver resolver(ex);
  auto [rec, results] =
      co_await resolver.async_resolve(endpoint.host, std::to_string(endpoint.port), use_nothrow);
  if (rec) {
    co_return fail(Error::io(
        fmt::format("{}: cannot resolve host \"{}\": {}", label_, endpoint.host, rec.message())));
  }
  net::steady_timer timer(ex, timeout);
  auto r =
      co_await (net::async_connect(socket_, results, use_nothrow) || timer.async_wait(use_nothrow));
  // An address that answered before is not misconfigured: the network or the server is down.
  const std::string hint = addressAnswered(endpoint.address())
                               ? "it answered before: the network or the server is down"
                               : "check that the server runs and the address is right";
  if (r.index() == 1) {
    close();
    co_return fail(Error::io(fmt::format("{}: connect to {} timed out after {} ms; {}", label_,
                                         endpoint.address(), timeout.count(), hint)));
  }
  auto [ec, ep] = std::get<0>(r);
  if (ec) {
    close();
    co_return fail(Error::io(fmt::format("{}: cannot connect to {}: {}; {}", label_,
                                         endpoint.address(), ec.message(), hint)));
  }
  boost::system::error_code ignored;
  socket_.set_option(net::ip::tcp::no_delay(true), ignored);
  co_return Status{};
}

net::awaitable<Status> RedisConnection::handshake(const RedisEndpoint& endpoint,
                                                  std::chrono::milliseconds timeout) {
  auto ctx = tls::makeClientContext(endpoint, label_);
  if (!ctx) co_return fail(ctx.error());
  tls_ = std::make_unique<Tls>(std::move(*ctx), std::move(socket_));
  if (auto s = tls::prepareSession(tls_->stream.native_handle(), endpoint, label_); !s) {
    co_return s;
  }
  net::steady_timer timer(co_await net::this_coro::executor, timeout);
  auto r = co_await (tls_->stream.async_handshake(tls::ssl::stream_base::client, use_nothrow) ||
                     timer.async_wait(use_nothrow));
  if (r.index() == 1) {
    co_return fail(Error::io(fmt::format(
        "{}: TLS handshake timed out after {} ms (nothing was sent); is {} a TLS port? If the "
        "server does not use TLS there, remove tls: from cluster {} (or point address at the "
        "server's tls-port)",
        label_, timeout.count(), endpoint.address(), endpoint.cluster)));
  }
  auto [ec] = std::get<0>(r);
  if (ec) {
    co_return fail(
        tls::describeHandshakeFailure(tls_->stream.native_handle(), ec, endpoint, label_));
  }
  co_return Status{};
}

std::string RedisConnection::describeIoError(const boost::system::error_code& ec,
                                             bool reading) const {
  const std::string tls_why =
      tls_ ? tls::explainSessionError(ec, endpoint_, tls_->stream.native_handle(), bytes_read_ == 0)
           : std::string();
  if (!tls_why.empty()) {
    return fmt::format("{}: TLS session refused: {}", label_, tls_why);
  }
  const bool reset = ec == net::error::connection_reset || ec == net::error::broken_pipe;
  const bool closed = reset || ec == net::error::eof || ec == net::ssl::error::stream_truncated;
  const std::string what = !closed ? ec.message() : reset ? "reset" : "closed by the peer";
  if (bytes_read_ > 0) {
    // It worked on this very connection: a network or server event, nothing to configure.
    return fmt::format("{}: the connection to {} was {} after it had worked", label_,
                       endpoint_.address(), closed ? what : "lost (" + what + ")");
  }
  if (addressAnswered(endpoint_.address())) {
    return fmt::format(
        "{}: the connection to {} was {} before it answered (the address answered before: the "
        "network or the server, not the configuration)",
        label_, endpoint_.address(), closed ? what : "lost (" + what + ")");
  }
  if (!tls_ && closed) {
    // A TLS-only port drops a plain client at its first bytes, before any answer.
    return fmt::format(
        "{}: connection {}: {} before any answer; if the server expects TLS on "
        "this port, add a tls: section to cluster {}",
        label_, reading ? "lost" : "write failed", what, endpoint_.cluster);
  }
  if (reading) return fmt::format("{}: connection lost: {}", label_, what);
  return fmt::format("{}: write failed: {}", label_, what);
}

net::awaitable<Result<size_t>> RedisConnection::readSome() {
  // (a copy: the limits may change while this read waits)
  const std::shared_ptr<RateLimiter> limit = throttle_ ? throttle_->read : nullptr;
  if (limit != nullptr) {
    // A debt an ended wait left (its bytes were read already) is paid before reading more.
    const auto debt = limit->debt(RateLimiter::Clock::now());
    if (debt > std::chrono::milliseconds(1) && !co_await throttleWait(true, debt)) {
      co_return fail(Error::cancelled());
    }
  }
  size_t free = 0;
  char* p = buf_.prepare(kMinReadSpace, free);
  // Limited: a burst at most, so the reads (and the sender, held by TCP) follow the rate evenly.
  if (limit != nullptr) free = std::min<size_t>(free, std::max<uint64_t>(limit->burst(), 1));
  boost::system::error_code ec;
  size_t n = 0;
  if (tls_) {
    std::tie(ec, n) = co_await tls_->stream.async_read_some(net::buffer(p, free), use_nothrow);
  } else {
    std::tie(ec, n) = co_await socket_.async_read_some(net::buffer(p, free), use_nothrow);
  }
  if (ec) {
    if (ec == net::error::operation_aborted) co_return fail(Error::cancelled());
    co_return fail(Error::io(describeIoError(ec, true)));
  }
  buf_.commit(n);
  if (bytes_read_ == 0 && n > 0) {
    std::lock_guard lock(answered_mu);
    answeredAddresses().insert(endpoint_.address());
  }
  bytes_read_ += n;
  if (limit != nullptr) {
    const auto wait = limit->take(n, RateLimiter::Clock::now());
    // Ended by close() or cancel(): the bytes are in the buffer; the next read pays the rest.
    if (wait > RateLimiter::Clock::duration::zero()) co_await throttleWait(true, wait);
  }
  co_return n;
}

net::awaitable<Result<size_t>> RedisConnection::readSomeWithTimeout(
    std::chrono::milliseconds timeout) {
  net::steady_timer timer(co_await net::this_coro::executor, timeout);
  auto r = co_await (readSome() || timer.async_wait(use_nothrow));
  if (r.index() == 1) {
    if (bytes_read_ > 0) {
      co_return fail(
          Error::io(fmt::format("{}: the connection to {} timed out after it had "
                                "worked: no answer within {} ms",
                                label_, endpoint_.address(), timeout.count())));
    }
    co_return fail(Error::io(fmt::format("{}: no answer within {} ms", label_, timeout.count())));
  }
  co_return std::get<0>(r);
}

net::awaitable<Status> RedisConnection::writeAll(std::string_view data) {
  if (throttle_ && throttle_->write) co_return co_await writeThrottled(data);
  co_return co_await writeRaw(data);
}

net::awaitable<Status> RedisConnection::writeThrottled(std::string_view data) {
  // Pieces of a burst: the target receives (and answers) at the rate, evenly, rather than a
  // whole batch after a long wait (its silence would look like a stalled target).
  const std::shared_ptr<RateLimiter> limit = throttle_->write;
  const size_t piece = std::max<uint64_t>(limit->burst(), 1);
  while (!data.empty()) {
    const std::string_view now = data.substr(0, piece);
    const auto wait = limit->take(now.size(), RateLimiter::Clock::now());
    if (wait > RateLimiter::Clock::duration::zero() && !co_await throttleWait(false, wait)) {
      co_return fail(Error::cancelled());
    }
    if (auto s = co_await writeRaw(now); !s) co_return s;
    data.remove_prefix(now.size());
  }
  co_return Status{};
}

net::awaitable<Status> RedisConnection::writeRaw(std::string_view data) {
  boost::system::error_code ec;
  size_t n = 0;
  if (tls_) {
    std::tie(ec, n) = co_await net::async_write(tls_->stream, net::buffer(data), use_nothrow);
  } else {
    std::tie(ec, n) = co_await net::async_write(socket_, net::buffer(data), use_nothrow);
  }
  if (ec) {
    if (ec == net::error::operation_aborted) co_return fail(Error::cancelled());
    co_return fail(Error::io(describeIoError(ec, false)));
  }
  co_return Status{};
}

net::awaitable<Result<std::string>> RedisConnection::readLine(std::chrono::milliseconds timeout) {
  for (;;) {
    auto d = buf_.data();
    size_t skip = 0;
    while (skip < d.size() && d[skip] == '\n') ++skip;  // keepalive newlines
    if (skip > 0) {
      buf_.consume(skip);
      continue;
    }
    auto crlf = d.find("\r\n");
    if (crlf != std::string_view::npos) {
      std::string line(d.substr(0, crlf));
      buf_.consume(crlf + 2);
      co_return line;
    }
    if (d.size() > resp::kMaxLineLength) {
      co_return fail(Error::protocol(
          fmt::format("{}: reply line longer than {} bytes", label_, resp::kMaxLineLength)));
    }
    auto r = co_await readSomeWithTimeout(timeout);
    if (!r) co_return fail(r.error());
  }
}

net::awaitable<Result<resp::ReplyInfo>> RedisConnection::call(std::vector<std::string_view> args,
                                                              std::chrono::milliseconds timeout,
                                                              bool collect_elements) {
  std::string out;
  resp::appendCommand(out, args);
  if (auto w = co_await writeAll(out); !w) co_return fail(w.error());
  resp::ReplyInfo info;
  info.collect = collect_elements;
  for (;;) {
    auto pr = resp::parseReply(buf_.data(), info);
    if (pr.status == resp::ParseStatus::Complete) {
      buf_.consume(pr.consumed);
      co_return info;
    }
    if (pr.status == resp::ParseStatus::Error) {
      co_return fail(Error::protocol(fmt::format("{}: malformed reply: {}", label_, pr.error)));
    }
    auto r = co_await readSomeWithTimeout(timeout);
    if (!r) co_return fail(r.error());
  }
}

net::awaitable<Result<std::vector<resp::Value>>> RedisConnection::callMany(
    const std::vector<std::vector<std::string>>& commands, std::chrono::milliseconds timeout) {
  std::string out;
  std::vector<std::string_view> args;
  for (const auto& c : commands) {
    args.assign(c.begin(), c.end());
    resp::appendCommand(out, args);
  }
  if (auto w = co_await writeAll(out); !w) co_return fail(w.error());
  std::vector<resp::Value> replies;
  replies.reserve(commands.size());
  for (size_t i = 0; i < commands.size(); ++i) {
    auto v = co_await readValue(timeout);
    if (!v) co_return fail(v.error());
    replies.push_back(std::move(*v));
  }
  co_return replies;
}

net::awaitable<Result<resp::Value>> RedisConnection::readValue(std::chrono::milliseconds timeout) {
  resp::Value v;
  for (;;) {
    auto pr = resp::parseValue(buf_.data(), v);
    if (pr.status == resp::ParseStatus::Complete) {
      buf_.consume(pr.consumed);
      co_return v;
    }
    if (pr.status == resp::ParseStatus::Error) {
      co_return fail(Error::protocol(fmt::format("{}: malformed reply: {}", label_, pr.error)));
    }
    auto r = co_await readSomeWithTimeout(timeout);
    if (!r) co_return fail(r.error());
  }
}

net::awaitable<Result<std::vector<std::string>>> RedisConnection::scanPage(
    std::string& cursor, int count, std::chrono::milliseconds timeout) {
  const std::vector<std::vector<std::string>> scan = {
      {"SCAN", cursor, "COUNT", std::to_string(count)}};
  auto r = co_await callMany(scan, timeout);
  if (!r) co_return fail(r.error());
  resp::Value& v = (*r)[0];
  if (v.type != resp::ReplyType::Array || v.elements.size() != 2) {
    co_return fail(
        Error::protocol(fmt::format("{}: unexpected SCAN reply: {}", label_, v.describe())));
  }
  cursor = v.elements[0].str;
  std::vector<std::string> keys;
  keys.reserve(v.elements[1].elements.size());
  for (auto& e : v.elements[1].elements) keys.push_back(std::move(e.str));
  co_return keys;
}

net::awaitable<Status> RedisConnection::auth(const RedisEndpoint& endpoint,
                                             std::chrono::milliseconds timeout) {
  const std::string& password = *endpoint.password;
  std::vector<std::string_view> args;
  args.push_back("AUTH");
  if (!endpoint.username.empty()) args.push_back(endpoint.username);
  args.push_back(password);
  auto r = co_await call(std::move(args), timeout);
  if (!r) co_return fail(r.error());
  if (r->has_error) {
    // Redis says WRONGPASS or NOAUTH and never repeats the password; a server that echoes its
    // arguments (an old Redis, a proxy) still must not put it in our message.
    std::string reply = r->text;
    if (!password.empty()) {
      constexpr std::string_view kMask = "<redacted>";
      for (size_t at = reply.find(password); at != std::string::npos;
           at = reply.find(password, at + kMask.size())) {
        reply.replace(at, password.size(), kMask);
      }
    }
    co_return fail(Error::auth(fmt::format(
        "{}: authentication to cluster {} {} failed: {}; check the cluster's username and "
        "password (the ACL user must exist, be on, and have this password)",
        label_, endpoint.cluster,
        endpoint.username.empty() ? std::string("as the default user")
                                  : fmt::format("as user \"{}\"", endpoint.username),
        reply)));
  }
  co_return Status{};
}

void RedisConnection::close() {
  boost::system::error_code ignored;
  auto& s = tcp();
  s.shutdown(net::ip::tcp::socket::shutdown_both, ignored);
  s.close(ignored);
  closed_ = true;
  if (throttle_) {
    throttle_->read_timer.cancel();
    throttle_->write_timer.cancel();
  }
}

void RedisConnection::cancel() {
  boost::system::error_code ignored;
  tcp().cancel(ignored);
  if (throttle_) {
    throttle_->read_timer.cancel();
    throttle_->write_timer.cancel();
  }
}

}  // namespace xdcr
