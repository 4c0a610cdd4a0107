#pragma once
// A user-space WAN between two local endpoints: a TCP proxy on 127.0.0.1 that adds one-way delay,
// caps the bandwidth per direction, and can partition the link with resets (cut) or silently
// (blackhole). The kernel of the test machines has no netem (tc qdisc ... netem), so tests and
// benches that need a slow, far or broken link between the agent and a Redis put this proxy in
// between instead. It runs one io_context thread with large reads and one timer per direction
// per connection, so on a 2-core machine it is not the bottleneck of what it measures.
//
// xdcr-wan-proxy (wan_proxy_main.cc) is the same proxy as a standalone program for bench scripts.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace xdcr::test {

/** How a WanProxy shapes its link (WanProxy::Options). */
struct WanProxyOptions {
  /** One-way delay: each byte is delivered this long after the proxy read it, in order, in
   * both directions, so a round trip through the proxy gains 2 * delay. */
  std::chrono::milliseconds delay{0};
  /** Bandwidth of each direction in bytes per second, shared by all connections of that
   * direction (a link, not a per-connection cap); 0 = unlimited. Token bucket with a burst of
   * max(rate / 20, 64 KiB). */
  uint64_t rate = 0;
  /** Used in messages and the program's output. */
  std::string name = "wan";
  /** The port to listen on; 0 = a free one chosen by the kernel (see port()). */
  uint16_t listen_port = 0;
  /** A direction of a connection stops reading its source while more than this plus
   * rate * delay bytes wait in its delay queue (bounds the proxy's memory). Without a rate, one
   * connection hence carries at most this much per delay: 8 MiB / 40 ms = 200 MiB/s. */
  uint64_t max_queued_bytes = 8u << 20;
};

class WanProxy {
 public:
  using Options = WanProxyOptions;

  enum class State { Normal, Cut, Blackhole };

  /** Counters, all since start(). Up = client to upstream, down = upstream to client. */
  struct Stats {
    uint64_t bytes_up = 0;              // bytes written to the upstream side
    uint64_t bytes_down = 0;            // bytes written to the client side
    uint64_t connections_accepted = 0;  // proxied connections (not those refused by a cut)
    uint64_t connections_refused = 0;   // accepted and reset because of a cut
    uint64_t open_connections = 0;
    State state = State::Normal;
  };

  /**
   * Listens on 127.0.0.1 (Options::listen_port, or a free port) and forwards each accepted
   * connection to 127.0.0.1:upstream_port, on a thread of its own. Throws std::runtime_error when
   * it cannot listen.
   */
  static std::unique_ptr<WanProxy> start(uint16_t upstream_port, Options options = {});
  /** Stops the thread and closes the listener and every connection. */
  ~WanProxy();
  WanProxy(const WanProxy&) = delete;
  WanProxy& operator=(const WanProxy&) = delete;

  /** The port clients connect to (127.0.0.1). */
  uint16_t port() const;
  uint16_t upstreamPort() const;
  const std::string& name() const;

  // Every control method below runs on the proxy's thread and returns once it took effect; they
  // may be called from any thread.

  /** Changes the one-way delay of bytes read from now on (bytes already queued keep theirs). */
  void setDelay(std::chrono::milliseconds delay);
  /** Changes the bandwidth per direction (0 = unlimited). */
  void setRate(uint64_t bytes_per_second);

  /**
   * A partition with resets: closes every connection on both sides with RST (SO_LINGER 0), and
   * until heal() resets every new connection as soon as it is accepted (the client's connect may
   * succeed, its first read or write fails with ECONNRESET or EPIPE).
   */
  void cut();
  /**
   * A silent partition: connections stay open and nothing is delivered either way. The proxy
   * stops reading both sides (so the senders' TCP windows fill) and holds what its delay queues
   * hold; new connections are accepted but not connected upstream. No RST, no FIN. heal() lets
   * everything held continue in order, like TCP retransmission after a link comes back.
   */
  void blackhole();
  /** Back to normal after cut() or blackhole(); records lastHealed(). A no-op when normal. */
  void heal();

  State state() const;
  std::chrono::milliseconds delay() const;
  uint64_t rate() const;
  /** When heal() last ended a cut or black hole, to measure recovery from it. */
  std::optional<std::chrono::steady_clock::time_point> lastHealed() const;

  uint64_t bytesUp() const;
  uint64_t bytesDown() const;
  uint64_t connectionsAccepted() const;
  uint64_t openConnections() const;
  Stats stats() const;

 private:
  struct Impl;
  explicit WanProxy(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/** "normal", "cut", "blackhole". */
const char* toString(WanProxy::State state);

}  // namespace xdcr::test
