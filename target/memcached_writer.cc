#include "target/memcached_writer.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <charconv>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace xdcr::target {

using namespace net::experimental::awaitable_operators;

namespace {
constexpr auto kConnectTimeout = std::chrono::seconds(10);
constexpr auto use_nothrow = net::as_tuple(net::use_awaitable);
}  // namespace

MemcachedWriter::MemcachedWriter(net::any_io_executor ex, const config::ClusterConfig& cluster,
                                 std::string label, PipelineStats& stats, const clock::Clock& clock)
    : cluster_(cluster),
      clock_(clock),
      conn_(ex, std::move(label)),
      stats_(stats),
      ledger_(clock, stats.apply_latency),
      writer_wake_(ex),
      progress_(ex) {}

net::awaitable<Result<std::vector<mc::Reply>>> MemcachedWriter::call(
    RedisConnection& conn, std::string_view request, size_t replies,
    std::chrono::milliseconds timeout) {
  if (auto s = co_await conn.writeAll(request); !s) co_return fail(s.error());
  std::vector<mc::Reply> out;
  net::steady_timer timer(co_await net::this_coro::executor, timeout);
  for (;;) {
    auto& buf = conn.buffer();
    for (;;) {
      mc::Reply reply;
      std::string error;
      auto n = mc::parseReply(buf.data(), reply, error);
      if (!n) {
        co_return fail(
            Error::protocol(fmt::format("{}: not a memcached reply: {}", conn.label(), error)));
      }
      if (*n == 0) break;
      buf.consume(*n);
      const bool end = reply.kind == mc::Reply::Kind::End;
      if (!end || replies != 0) out.push_back(std::move(reply));
      if (replies == 0 ? end || out.back().isError() : out.size() == replies) co_return out;
    }
    auto r = co_await (conn.readSome() || timer.async_wait(use_nothrow));
    if (r.index() == 1) {
      co_return fail(
          Error::io(fmt::format("{}: no answer within {} ms", conn.label(), timeout.count())));
    }
    if (auto& got = std::get<0>(r); !got) co_return fail(got.error());
  }
}

net::awaitable<Status> MemcachedWriter::connect() {
  if (auto s = co_await conn_.connect(cluster_.endpoint(), kConnectTimeout); !s) co_return s;
  auto r = co_await call(conn_, "stats settings\r\nversion\r\n", 0, kConnectTimeout);
  if (!r) co_return fail(r.error());
  for (const auto& reply : *r) {
    if (reply.isError()) {
      co_return fail(Error::protocol(
          fmt::format("{}: `stats settings` refused ({}): is this a memcached server?",
                      conn_.label(), reply.text)));
    }
    if (reply.kind == mc::Reply::Kind::Stat && reply.text.rfind("item_size_max ", 0) == 0) {
      uint64_t v = 0;
      const std::string_view num = std::string_view(reply.text).substr(14);
      auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), v);
      if (ec == std::errc() && v > 0) item_size_max_ = v;
    }
  }
  // `version` answers one line: "VERSION 1.6.18" (not a meta reply: read it as a raw line).
  auto line = co_await conn_.readLine(kConnectTimeout);
  if (!line) co_return fail(line.error());
  if (line->rfind("VERSION ", 0) != 0) {
    co_return fail(Error::protocol(fmt::format(
        "{}: `version` answered \"{}\": is this a memcached server?", conn_.label(), *line)));
  }
  version_ = line->substr(8);
  co_return Status{};
}

void MemcachedWriter::commit(uint64_t source_offset) {
  ledger_.commit(uncommitted_, source_offset);
  if (uncommitted_ > 0) writer_wake_.notify();
  uncommitted_ = 0;
}

void MemcachedWriter::resetOffset(uint64_t source_offset) {
  ledger_.reset(source_offset);
}

net::awaitable<Status> MemcachedWriter::runWriter() {
  for (;;) {
    while (pending_.empty()) {
      if (closing_) co_return Status{};
      co_await writer_wake_.wait();
    }
    std::swap(pending_, writing_);
    auto r = co_await conn_.writeAll(writing_);
    if (!r) co_return r;
    writing_.clear();
    if (writing_.capacity() > (64u << 20)) writing_.shrink_to_fit();
  }
}

net::awaitable<Status> MemcachedWriter::runReader() {
  mc::Reply reply;
  std::string error;
  for (;;) {
    auto& buf = conn_.buffer();
    bool progressed = false;
    for (;;) {
      auto n = mc::parseReply(buf.data(), reply, error);
      if (!n) {
        co_return fail(Error::protocol(fmt::format("{}: {}", conn_.label(), error)));
      }
      if (*n == 0) break;
      buf.consume(*n);
      if (ledger_.drained() || ops_.empty()) {
        co_return fail(Error::protocol(
            fmt::format("{}: a reply nothing was sent for ({})", conn_.label(), reply.text)));
      }
      const Op op = ops_.front();
      ops_.pop_front();
      if (reply.isError()) {
        if (auto s = onReplyError(op, reply); !s) co_return s;
      } else {
        switch (op) {
          case Op::Set:
            stats_.count(WriteOp::Set);
            break;
          case Op::Expire:
            stats_.count(WriteOp::Expire);
            break;
          case Op::Persist:
            stats_.count(WriteOp::Persist);
            break;
          case Op::Delete:
            stats_.count(WriteOp::Delete);
            break;
          case Op::Marker:
          case Op::Get:
            break;
        }
      }
      if (!expects_.empty() && expects_.front().seq == ledger_.replied() + 1) {
        Expect e = std::move(expects_.front());
        expects_.pop_front();
        if (auto s = e.fn(reply); !s) co_return s;
      }
      ledger_.answered();
      progressed = true;
    }
    if (progressed) {
      ledger_.progressed();
      progress_.notify();
    }
    auto r = co_await conn_.readSome();
    if (!r) co_return fail(r.error());
  }
}

Status MemcachedWriter::onReplyError(Op op, const mc::Reply& reply) {
  using K = mc::Reply::Kind;
  const std::string kind = reply.kind == K::ServerError   ? "SERVER_ERROR"
                           : reply.kind == K::ClientError ? "CLIENT_ERROR"
                                                          : "ERROR";
  ++stats_.target_errors;
  ++stats_.target_errors_by_kind[kind];
  const std::string text = reply.text.empty() ? kind : kind + " " + reply.text;
  if (reply.kind == K::ServerError && reply.text.rfind("object too large", 0) != 0) {
    // Out of memory and the like: not acknowledged; sent again after reconnecting.
    return fail(Error::refused(fmt::format(
        "{}: memcached refused a write: {}; will retry from the last acknowledged offset",
        conn_.label(), text)));
  }
  if (op != Op::Marker && op != Op::Get) ++stats_.target_write_failures["rejected"];
  uint64_t suppressed = 0;
  if (error_log_.allow(suppressed)) {
    spdlog::warn(
        "{}: memcached refused a write: {} (not applied; counted in "
        "xdcr_target_write_failures_total{{reason=\"rejected\"}}){}",
        conn_.label(), text, suppressed ? fmt::format("; {} more suppressed", suppressed) : "");
  }
  return Status{};
}

double MemcachedWriter::stalledSeconds() const {
  return ledger_.stalledSeconds();
}

}  // namespace xdcr::target
