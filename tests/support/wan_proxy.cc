#include "tests/support/wan_proxy.h"

// Design: one io_context thread. A connection (Session) is two sockets and two Pipes, up (client
// to upstream) and down. A Pipe reads its source 256 KiB at a time into a queue of chunks, each
// stamped with the time it is due (read time + delay, later when the direction's token bucket is
// in debt), and writes the due chunks at the head of the queue to its destination. pump() is the
// whole state machine of a Pipe: it starts the write or read that can start now and arms the
// Pipe's one timer for the next moment something becomes possible (the head chunk falls due, the
// bucket's debt is paid). Every completion handler ends in pump(). Reading stops while the queue
// is over its bound or the link is in debt, so the proxy's memory is bounded and the sender feels
// the bottleneck through its own TCP window, as it would on a real link.

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

namespace xdcr::test {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

// One read takes up to this much; a full buffer moves into the queue as it is.
constexpr size_t kReadSize = 256 * 1024;
// A read shorter than this is copied into a buffer of its size, so many small chunks waiting in
// a queue do not each hold kReadSize bytes.
constexpr size_t kSmallRead = kReadSize / 4;
// One write gathers at most this many due chunks, and stops adding chunks past kMaxWriteBytes.
constexpr size_t kMaxGather = 64;
constexpr size_t kMaxWriteBytes = 4 * kReadSize;
// Full-size read buffers kept for reuse.
constexpr size_t kPoolSize = 64;

/** A token bucket: the bandwidth of one direction, shared by all connections. */
struct Link {
  uint64_t rate = 0;  // bytes per second; 0 = unlimited
  double tokens = 0;  // may go negative: a read is never split, the debt delays what follows
  Clock::time_point last = Clock::now();

  double burst() const { return std::max(static_cast<double>(rate) / 20.0, 64.0 * 1024.0); }

  void refill(Clock::time_point now) {
    if (rate == 0) return;
    double elapsed = std::chrono::duration<double>(now - last).count();
    tokens = std::min(burst(), tokens + elapsed * static_cast<double>(rate));
    last = now;
  }

  /** How long until the bucket is out of debt (call refill first). */
  Clock::duration debtWait() const {
    if (rate == 0 || tokens >= 0) return Clock::duration::zero();
    return std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(-tokens / static_cast<double>(rate)));
  }

  void setRate(uint64_t new_rate, Clock::time_point now) {
    refill(now);
    bool was_unlimited = rate == 0;
    rate = new_rate;
    last = now;
    if (was_unlimited) tokens = burst();
    tokens = std::min(tokens, burst());
  }

  /** Takes `bytes` read at `now`; returns how long after now they have passed the link. */
  Clock::duration take(size_t bytes, Clock::time_point now) {
    if (rate == 0) return Clock::duration::zero();
    refill(now);
    tokens -= static_cast<double>(bytes);
    return debtWait();
  }
};

using Buffer = std::unique_ptr<char[]>;

struct Chunk {
  Buffer data;
  size_t capacity = 0;  // of data: kReadSize for a read buffer moved in whole
  size_t size = 0;
  size_t offset = 0;  // bytes of it already written
  Clock::time_point due;
  bool eof = false;  // the source's FIN: shut down the destination's write side
};

struct Session;

/** One direction of a connection. */
struct Pipe {
  Pipe(asio::io_context& io, tcp::socket& source, tcp::socket& sink, Link& bucket,
       std::atomic<uint64_t>& counter)
      : from(source), to(sink), link(bucket), forwarded(counter), timer(io) {}

  tcp::socket& from;
  tcp::socket& to;
  Link& link;
  std::atomic<uint64_t>& forwarded;
  std::deque<Chunk> queue;
  uint64_t queued = 0;  // bytes in `queue` not yet written
  Buffer buffer;        // the read buffer (kReadSize), taken from the pool when needed
  bool reading = false;
  bool writing = false;
  bool read_eof = false;    // the source sent FIN: read no more
  bool write_shut = false;  // the FIN was forwarded: write no more
  asio::steady_timer timer;
  std::optional<Clock::time_point> timer_at;  // when the pending wait fires, if one is pending
  uint64_t timer_generation = 0;              // tells a stale wake-up from the current one
};

/** The proxy's state, all of it the io thread's except the atomics (WanProxy::Impl is this). */
struct Core {
  using Options = WanProxy::Options;
  using State = WanProxy::State;

  Core(uint16_t upstream, Options opts) : upstream_port(upstream), options(std::move(opts)) {
    delay_mirror = options.delay;
    rate_mirror = options.rate;
    up_link.setRate(options.rate, Clock::now());
    down_link.setRate(options.rate, Clock::now());
  }

  /** Runs `f` on the io thread and waits for it (directly when already on it). */
  template <typename F>
  void run(F&& f) {
    if (io.get_executor().running_in_this_thread()) {
      f();
      return;
    }
    std::promise<void> done;
    asio::post(io, [&] {
      f();
      done.set_value();
    });
    done.get_future().wait();
  }

  void accept();
  void onAccepted(tcp::socket socket);
  void connectUpstream(const std::shared_ptr<Session>& session);
  void pumpAll();
  void remove(Session* session);

  Buffer takeBuffer() {
    if (pool.empty()) return Buffer(new char[kReadSize]);
    Buffer buffer = std::move(pool.back());
    pool.pop_back();
    return buffer;
  }
  void giveBuffer(Buffer buffer, size_t capacity) {
    if (capacity == kReadSize && pool.size() < kPoolSize) pool.push_back(std::move(buffer));
  }

  // Declared first, destroyed last: the sockets and timers below belong to it.
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_retry{io};
  std::thread thread;
  uint16_t upstream_port;
  uint16_t port = 0;
  Options options;  // delay and rate are the io thread's
  Link up_link;
  Link down_link;
  State state = State::Normal;  // the io thread's
  bool stopping = false;
  std::map<Session*, std::shared_ptr<Session>> sessions;

  /** The sessions, copied: closing one erases it from `sessions`. */
  std::vector<std::shared_ptr<Session>> allSessions() const {
    std::vector<std::shared_ptr<Session>> all;
    all.reserve(sessions.size());
    for (const auto& entry : sessions) all.push_back(entry.second);
    return all;
  }
  std::vector<Buffer> pool;

  std::atomic<uint64_t> bytes_up{0};
  std::atomic<uint64_t> bytes_down{0};
  std::atomic<uint64_t> accepted{0};
  std::atomic<uint64_t> refused{0};
  std::atomic<uint64_t> open{0};
  std::atomic<State> state_mirror{State::Normal};
  std::atomic<std::chrono::milliseconds> delay_mirror{std::chrono::milliseconds(0)};
  std::atomic<uint64_t> rate_mirror{0};
  mutable std::mutex healed_mutex;
  std::optional<Clock::time_point> last_healed;
};

struct Session : std::enable_shared_from_this<Session> {
  Session(Core& owner, tcp::socket accepted)
      : proxy(owner),
        client(std::move(accepted)),
        server(owner.io),
        up(owner.io, client, server, owner.up_link, owner.bytes_up),
        down(owner.io, server, client, owner.down_link, owner.bytes_down) {}

  Core& proxy;  // outlives every session that can still run a handler
  tcp::socket client;
  tcp::socket server;
  Pipe up;
  Pipe down;
  bool connecting = false;
  bool connected = false;
  bool closed = false;

  bool held() const { return proxy.state == WanProxy::State::Blackhole; }

  uint64_t queueLimit(const Pipe& p) const {
    auto delay_s = std::chrono::duration<double>(proxy.options.delay).count();
    return proxy.options.max_queued_bytes +
           static_cast<uint64_t>(static_cast<double>(p.link.rate) * delay_s);
  }

  /** Starts what can start now on `p` and arms its timer for what can start later. */
  void pump(Pipe& p) {
    if (closed || !connected || held()) return;
    auto now = Clock::now();
    std::optional<Clock::time_point> wake;

    if (!p.writing && !p.write_shut && !p.queue.empty()) {
      const Chunk& head = p.queue.front();
      if (head.due > now) {
        wake = head.due;
      } else if (head.eof) {
        boost::system::error_code ignored;
        p.to.shutdown(tcp::socket::shutdown_send, ignored);
        p.write_shut = true;
        p.queue.pop_front();
        if (finishIfDone()) return;
      } else {
        startWrite(p, now);
      }
    }

    if (!p.reading && !p.read_eof && p.queued < queueLimit(p)) {
      // A full queue resumes reading when a write completes; a link in debt when it is paid.
      p.link.refill(now);
      auto debt = p.link.debtWait();
      if (debt > Clock::duration::zero()) {
        wake = wake ? std::min(*wake, now + debt) : now + debt;
      } else {
        startRead(p);
      }
    }

    if (wake) arm(p, *wake);
  }

  void arm(Pipe& p, Clock::time_point when) {
    if (p.timer_at && *p.timer_at <= when) return;  // an earlier wake-up is pending: enough
    p.timer_at = when;
    uint64_t generation = ++p.timer_generation;
    p.timer.expires_at(when);  // cancels the pending wait, if any
    p.timer.async_wait([self = shared_from_this(), &p, generation](boost::system::error_code ec) {
      if (ec == asio::error::operation_aborted || generation != p.timer_generation) return;
      p.timer_at.reset();
      self->pump(p);
    });
  }

  void startRead(Pipe& p) {
    if (!p.buffer) p.buffer = proxy.takeBuffer();
    p.reading = true;
    p.from.async_read_some(asio::buffer(p.buffer.get(), kReadSize),
                           [self = shared_from_this(), &p](boost::system::error_code ec, size_t n) {
                             self->onRead(p, ec, n);
                           });
  }

  void onRead(Pipe& p, boost::system::error_code ec, size_t n) {
    p.reading = false;
    if (closed) return;
    auto now = Clock::now();
    Clock::time_point floor = p.queue.empty() ? now : p.queue.back().due;
    if (n > 0) {
      Chunk chunk;
      chunk.size = n;
      chunk.due = std::max(floor, now + proxy.options.delay + p.link.take(n, now));
      if (n < kSmallRead) {
        chunk.data = Buffer(new char[n]);
        chunk.capacity = n;
        std::copy_n(p.buffer.get(), n, chunk.data.get());
      } else {
        chunk.data = std::move(p.buffer);
        chunk.capacity = kReadSize;
      }
      floor = chunk.due;
      p.queued += n;
      p.queue.push_back(std::move(chunk));
    }
    if (ec == asio::error::eof) {
      p.read_eof = true;
      Chunk fin;
      fin.eof = true;
      fin.due = std::max(floor, now + proxy.options.delay);
      p.queue.push_back(std::move(fin));
    } else if (ec && ec != asio::error::operation_aborted) {
      // A reset or another error on one side closes the pair (operation_aborted: blackhole()
      // cancelled the read, which then resumes on heal()).
      close(true);
      return;
    }
    pump(p);
  }

  void startWrite(Pipe& p, Clock::time_point now) {
    std::vector<asio::const_buffer> buffers;
    size_t total = 0;
    for (const Chunk& chunk : p.queue) {
      if (chunk.eof || chunk.due > now || buffers.size() == kMaxGather || total >= kMaxWriteBytes) {
        break;
      }
      buffers.emplace_back(chunk.data.get() + chunk.offset, chunk.size - chunk.offset);
      total += chunk.size - chunk.offset;
    }
    p.writing = true;
    // (async_write copies the buffer sequence; the chunks stay queued until onWritten)
    asio::async_write(p.to, buffers,
                      [self = shared_from_this(), &p](boost::system::error_code ec, size_t n) {
                        self->onWritten(p, ec, n);
                      });
  }

  void onWritten(Pipe& p, boost::system::error_code ec, size_t n) {
    p.writing = false;
    if (closed) return;
    p.forwarded.fetch_add(n, std::memory_order_relaxed);
    p.queued -= n;
    while (n > 0) {
      Chunk& head = p.queue.front();
      size_t part = std::min(n, head.size - head.offset);
      head.offset += part;
      n -= part;
      if (head.offset == head.size) {
        proxy.giveBuffer(std::move(head.data), head.capacity);
        p.queue.pop_front();
      }
    }
    if (ec && ec != asio::error::operation_aborted) {
      close(true);
      return;
    }
    pump(p);
  }

  /** Both FINs forwarded: the connection ended cleanly on both sides. */
  bool finishIfDone() {
    if (!up.write_shut || !down.write_shut) return false;
    close(false);
    return true;
  }

  /** Stops reading and writing both sockets (blackhole); pump() resumes after heal(). */
  void hold() {
    boost::system::error_code ignored;
    client.cancel(ignored);
    // Not while connecting: that would abort the connect. It completes, and nothing flows.
    if (connected) server.cancel(ignored);
  }

  /** Closes both sockets, with RST when `reset`, and forgets the session. */
  void close(bool reset) {
    if (closed) return;
    closed = true;
    boost::system::error_code ignored;
    for (tcp::socket* socket : {&client, &server}) {
      if (!socket->is_open()) continue;
      if (reset) socket->set_option(asio::socket_base::linger(true, 0), ignored);
      socket->close(ignored);
    }
    up.timer.cancel();
    down.timer.cancel();
    // The queues stay until the session is destroyed: an aborted write may still refer to them.
    proxy.remove(this);
  }
};

void resetAndClose(tcp::socket& socket) {
  boost::system::error_code ignored;
  socket.set_option(asio::socket_base::linger(true, 0), ignored);
  socket.close(ignored);
}

void Core::accept() {
  acceptor.async_accept([this](boost::system::error_code ec, tcp::socket socket) {
    if (stopping || ec == asio::error::operation_aborted) return;
    if (!ec) {
      onAccepted(std::move(socket));
      accept();
      return;
    }
    // Errors such as EMFILE: the connection stays in the backlog; try again a little later.
    accept_retry.expires_after(std::chrono::milliseconds(10));
    accept_retry.async_wait([this](boost::system::error_code wait_ec) {
      if (!wait_ec && !stopping) accept();
    });
  });
}

void Core::onAccepted(tcp::socket socket) {
  if (state == State::Cut) {
    refused.fetch_add(1, std::memory_order_relaxed);
    resetAndClose(socket);
    return;
  }
  boost::system::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  auto session = std::make_shared<Session>(*this, std::move(socket));
  sessions.emplace(session.get(), session);
  accepted.fetch_add(1, std::memory_order_relaxed);
  open.fetch_add(1, std::memory_order_relaxed);
  // During a black hole the client waits, connected to the proxy only, until heal().
  if (state == State::Normal) connectUpstream(session);
}

void Core::connectUpstream(const std::shared_ptr<Session>& session) {
  session->connecting = true;
  tcp::endpoint upstream(asio::ip::address_v4::loopback(), upstream_port);
  session->server.async_connect(upstream, [session](boost::system::error_code ec) {
    session->connecting = false;
    if (session->closed) return;
    if (ec) {
      // The upstream refused or is gone: the client sees its connection reset.
      session->close(true);
      return;
    }
    boost::system::error_code ignored;
    session->server.set_option(tcp::no_delay(true), ignored);
    session->connected = true;
    session->pump(session->up);
    session->pump(session->down);
  });
}

void Core::pumpAll() {
  for (const auto& session : allSessions()) {
    if (!session->connected && !session->connecting && state == State::Normal) {
      connectUpstream(session);
      continue;
    }
    session->pump(session->up);
    session->pump(session->down);
  }
}

void Core::remove(Session* session) {
  // Whoever called close() holds a reference of its own: erasing this one here is safe.
  if (sessions.erase(session) > 0) open.fetch_sub(1, std::memory_order_relaxed);
}

}  // namespace

struct WanProxy::Impl : Core {
  using Core::Core;
};

WanProxy::WanProxy(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<WanProxy> WanProxy::start(uint16_t upstream_port, Options options) {
  auto impl = std::make_unique<Impl>(upstream_port, std::move(options));
  try {
    tcp::endpoint endpoint(asio::ip::address_v4::loopback(), impl->options.listen_port);
    impl->acceptor.open(endpoint.protocol());
    impl->acceptor.set_option(tcp::acceptor::reuse_address(true));
    impl->acceptor.bind(endpoint);
    impl->acceptor.listen(asio::socket_base::max_listen_connections);
    impl->port = impl->acceptor.local_endpoint().port();
  } catch (const boost::system::system_error& e) {
    throw std::runtime_error(fmt::format("WAN proxy {}: cannot listen on 127.0.0.1:{}: {}",
                                         impl->options.name, impl->options.listen_port, e.what()));
  }
  impl->accept();
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->io.run(); });
  return std::unique_ptr<WanProxy>(new WanProxy(std::move(impl)));
}

WanProxy::~WanProxy() {
  try {
    impl_->run([this] {
      Impl& impl = *impl_;
      impl.stopping = true;
      boost::system::error_code ignored;
      impl.acceptor.close(ignored);
      impl.accept_retry.cancel();
      for (const auto& session : impl.allSessions()) session->close(false);
      impl.work.reset();
    });
  } catch (const std::exception&) {
    // The thread is stopped below either way; nothing else to do in a destructor.
  }
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
  // The io_context's destructor now destroys the handlers that never ran, and the last
  // references to the sessions with them.
}

uint16_t WanProxy::port() const {
  return impl_->port;
}
uint16_t WanProxy::upstreamPort() const {
  return impl_->upstream_port;
}
const std::string& WanProxy::name() const {
  return impl_->options.name;
}

void WanProxy::setDelay(std::chrono::milliseconds delay) {
  impl_->run([&] {
    impl_->options.delay = delay;
    impl_->delay_mirror = delay;
    impl_->pumpAll();
  });
}

void WanProxy::setRate(uint64_t bytes_per_second) {
  impl_->run([&] {
    auto now = Clock::now();
    impl_->options.rate = bytes_per_second;
    impl_->rate_mirror = bytes_per_second;
    impl_->up_link.setRate(bytes_per_second, now);
    impl_->down_link.setRate(bytes_per_second, now);
    impl_->pumpAll();
  });
}

void WanProxy::cut() {
  impl_->run([this] {
    Impl& impl = *impl_;
    impl.state = State::Cut;
    impl.state_mirror = State::Cut;
    for (const auto& session : impl.allSessions()) session->close(true);
  });
}

void WanProxy::blackhole() {
  impl_->run([this] {
    Impl& impl = *impl_;
    impl.state = State::Blackhole;
    impl.state_mirror = State::Blackhole;
    for (const auto& entry : impl.sessions) entry.second->hold();
  });
}

void WanProxy::heal() {
  impl_->run([this] {
    Impl& impl = *impl_;
    if (impl.state == State::Normal) return;
    impl.state = State::Normal;
    impl.state_mirror = State::Normal;
    {
      std::lock_guard lock(impl.healed_mutex);
      impl.last_healed = Clock::now();
    }
    impl.pumpAll();
  });
}

WanProxy::State WanProxy::state() const {
  return impl_->state_mirror.load();
}
std::chrono::milliseconds WanProxy::delay() const {
  return impl_->delay_mirror.load();
}
uint64_t WanProxy::rate() const {
  return impl_->rate_mirror.load();
}

std::optional<std::chrono::steady_clock::time_point> WanProxy::lastHealed() const {
  std::lock_guard lock(impl_->healed_mutex);
  return impl_->last_healed;
}

uint64_t WanProxy::bytesUp() const {
  return impl_->bytes_up.load();
}
uint64_t WanProxy::bytesDown() const {
  return impl_->bytes_down.load();
}
uint64_t WanProxy::connectionsAccepted() const {
  return impl_->accepted.load();
}
uint64_t WanProxy::openConnections() const {
  return impl_->open.load();
}

WanProxy::Stats WanProxy::stats() const {
  Stats stats;
  stats.bytes_up = impl_->bytes_up.load();
  stats.bytes_down = impl_->bytes_down.load();
  stats.connections_accepted = impl_->accepted.load();
  stats.connections_refused = impl_->refused.load();
  stats.open_connections = impl_->open.load();
  stats.state = impl_->state_mirror.load();
  return stats;
}

const char* toString(WanProxy::State state) {
  switch (state) {
    case WanProxy::State::Normal:
      return "normal";
    case WanProxy::State::Cut:
      return "cut";
    case WanProxy::State::Blackhole:
      return "blackhole";
  }
  return "?";
}

}  // namespace xdcr::test
