#include "common/redis_conn.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include <fmt/format.h>

namespace xdcr {
namespace {

using namespace net::experimental::awaitable_operators;
constexpr auto use_nothrow = net::as_tuple(net::use_awaitable);
constexpr size_t kMinReadSpace = 64 * 1024;

}  // namespace

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

RedisConnection::RedisConnection(net::any_io_executor ex, std::string label)
    : socket_(std::move(ex)), label_(std::move(label)) {}

net::awaitable<Status> RedisConnection::connect(const std::string& host, uint16_t port,
                                                std::chrono::milliseconds timeout) {
  auto ex = co_await net::this_coro::executor;
  net::ip::tcp::resolver resolver(ex);
  auto [rec, results] =
      co_await resolver.async_resolve(host, std::to_string(port), use_nothrow);
  if (rec) {
    co_return fail(Error::io(fmt::format("{}: cannot resolve host \"{}\": {}", label_, host,
                                         rec.message())));
  }
  net::steady_timer timer(ex, timeout);
  auto r = co_await (net::async_connect(socket_, results, use_nothrow) ||
                     timer.async_wait(use_nothrow));
  if (r.index() == 1) {
    close();
    co_return fail(Error::io(fmt::format(
        "{}: connect timed out after {} ms; check that the server runs and the address is right",
        label_, timeout.count())));
  }
  auto [ec, ep] = std::get<0>(r);
  if (ec) {
    close();
    co_return fail(Error::io(fmt::format("{}: cannot connect: {}; check that the server runs and "
                                         "the address is right",
                                         label_, ec.message())));
  }
  boost::system::error_code ignored;
  socket_.set_option(net::ip::tcp::no_delay(true), ignored);
  co_return Status{};
}

net::awaitable<Result<size_t>> RedisConnection::readSome() {
  size_t free = 0;
  char* p = buf_.prepare(kMinReadSpace, free);
  auto [ec, n] = co_await socket_.async_read_some(net::buffer(p, free), use_nothrow);
  if (ec) {
    if (ec == net::error::operation_aborted) co_return fail(Error::cancelled());
    co_return fail(Error::io(fmt::format("{}: connection lost: {}", label_,
                                         ec == net::error::eof ? "closed by peer" : ec.message())));
  }
  buf_.commit(n);
  bytes_read_ += n;
  co_return n;
}

net::awaitable<Result<size_t>> RedisConnection::readSomeWithTimeout(
    std::chrono::milliseconds timeout) {
  net::steady_timer timer(co_await net::this_coro::executor, timeout);
  auto r = co_await (readSome() || timer.async_wait(use_nothrow));
  if (r.index() == 1) {
    co_return fail(Error::io(fmt::format("{}: no answer within {} ms", label_, timeout.count())));
  }
  co_return std::get<0>(r);
}

net::awaitable<Status> RedisConnection::writeAll(std::string_view data) {
  auto [ec, n] = co_await net::async_write(socket_, net::buffer(data), use_nothrow);
  if (ec) {
    if (ec == net::error::operation_aborted) co_return fail(Error::cancelled());
    co_return fail(Error::io(fmt::format("{}: write failed: {}", label_, ec.message())));
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
      co_return fail(Error::protocol(fmt::format("{}: reply line longer than {} bytes", label_,
                                                 resp::kMaxLineLength)));
    }
    auto r = co_await readSomeWithTimeout(timeout);
    if (!r) co_return fail(r.error());
  }
}

net::awaitable<Result<resp::ReplyInfo>> RedisConnection::call(
    std::vector<std::string_view> args, std::chrono::milliseconds timeout, bool collect_elements) {
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
  std::vector<resp::Value> replies(commands.size());
  for (auto& v : replies) {
    for (;;) {
      auto pr = resp::parseValue(buf_.data(), v);
      if (pr.status == resp::ParseStatus::Complete) {
        buf_.consume(pr.consumed);
        break;
      }
      if (pr.status == resp::ParseStatus::Error) {
        co_return fail(Error::protocol(fmt::format("{}: malformed reply: {}", label_, pr.error)));
      }
      auto r = co_await readSomeWithTimeout(timeout);
      if (!r) co_return fail(r.error());
    }
  }
  co_return replies;
}

net::awaitable<Result<std::vector<std::string>>> RedisConnection::scanPage(
    std::string& cursor, int count, std::chrono::milliseconds timeout) {
  const std::vector<std::vector<std::string>> scan = {
      {"SCAN", cursor, "COUNT", std::to_string(count)}};
  auto r = co_await callMany(scan, timeout);
  if (!r) co_return fail(r.error());
  resp::Value& v = (*r)[0];
  if (v.type != resp::ReplyType::Array || v.elements.size() != 2) {
    co_return fail(Error::protocol(fmt::format("{}: unexpected SCAN reply: {}", label_,
                                               v.describe())));
  }
  cursor = v.elements[0].str;
  std::vector<std::string> keys;
  keys.reserve(v.elements[1].elements.size());
  for (auto& e : v.elements[1].elements) keys.push_back(std::move(e.str));
  co_return keys;
}

net::awaitable<Status> RedisConnection::auth(const std::string& username,
                                             const std::string& password,
                                             std::chrono::milliseconds timeout) {
  std::vector<std::string_view> args;
  args.push_back("AUTH");
  if (!username.empty()) args.push_back(username);
  args.push_back(password);
  auto r = co_await call(std::move(args), timeout);
  if (!r) co_return fail(r.error());
  if (r->has_error) {
    // The reply text never contains the password; Redis says WRONGPASS or NOAUTH.
    co_return fail(Error::auth(fmt::format(
        "{}: authentication{} failed: {}; check the cluster's username and password", label_,
        username.empty() ? "" : fmt::format(" as user \"{}\"", username), r->text)));
  }
  co_return Status{};
}

void RedisConnection::close() {
  boost::system::error_code ignored;
  socket_.shutdown(net::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
}

void RedisConnection::cancel() {
  boost::system::error_code ignored;
  socket_.cancel(ignored);
}

}  // namespace xdcr
