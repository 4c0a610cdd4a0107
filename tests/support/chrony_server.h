#pragma once
// A real chronyd (Debian package chrony) serving NTP, and optionally NTS, on a loopback address,
// with its own temporary directory (config, pid/drift files, log). Facts in clock-notes §0–§6.
//
// Safety: chronyd always runs with -x (it never controls the system clock; started as root it
// drops to _chrony without capabilities), binds 127.x.y.z only (-4, bindaddress), has no command
// port or socket, and is stopped by its PID.
//
// Two kinds of server:
//  - reference (no `reference`): `local stratum 8`, serves the host clock (true offset 0) and
//    answers as soon as its socket is bound;
//  - chained (`reference = "127.0.0.1:port"`): follows that server with
//    `server REF iburst minpoll -2 maxpoll -2 offset <offset_s>` and serves true time +
//    offset_s (any size, exact to ~0.1 ms) at stratum 9 once synchronised (0.35 s after start
//    here; clock-notes say 1–1.5 s); before that it answers LI=3 stratum 0, which waitReady()
//    waits out.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace xdcr::test {

/** The chronyd binary (/usr/sbin/chronyd, ...), or "" if chrony is not installed. */
std::string findChronyd();

struct ChronyOptions {
  std::string address = "127.0.0.1";  // any 127.x.y.z
  uint16_t port = 0;                  // 0 = a free UDP port on that address
  /** "host:port" of the server to follow: chained server (no `local stratum`). */
  std::string reference;
  double offset_s = 0;  // with reference: serve true time + offset_s
  /** Set both: NTS server (ntsport/ntsservercert/ntsserverkey/ntsdumpdir). The files are copied
   * into the server's directory (and chowned to _chrony when running as root). */
  std::string nts_cert_file, nts_key_file;
  uint16_t nts_port = 0;                 // 0 = a free TCP port on `address` (when NTS)
  std::vector<std::string> extra_lines;  // appended to chrony.conf (no inline comments!)
};

/**
 * Lifetime: like every harness process, chronyd must not outlive the test. Subprocess relies on
 * PR_SET_PDEATHSIG, but the kernel clears it when chronyd (started as root) switches to
 * _chrony, so each ChronyServer also forks a tiny watchdog that stops that chronyd by its PID
 * (SIGTERM, then SIGKILL after 5 s; only while /proc/PID/cmdline still names this server's
 * config) when the test process dies without stopping it (crash, ctest timeout).
 * PR_SET_PDEATHSIG fires when the *thread* that started a child ends: create (and destroy) a
 * ChronyServer on a thread that outlives it, as with RedisServer.
 */
class ChronyServer {
 public:
  /**
   * Writes chrony.conf and starts `chronyd -4 -x -d -f CONF` in a TempDir (chowned to _chrony
   * when root; with -U when not root).
   *
   * Ports: with port 0 (or nts_port 0) it picks a random port in 20000–31999 (below the
   * ephemeral range, so no client socket sits there) and HOLDS it with a socket of its own until
   * chronyd has bound it: chronyd sets SO_REUSEADDR, so two chronyds on one UDP port would both
   * start and silently share it; the hold makes concurrent ChronyServers (threads or processes)
   * pick distinct ports. Started = this chronyd's own sockets are bound (checked in /proc) and
   * nobody else is bound to its NTP port; otherwise it is stopped and retried on new ports (5
   * attempts; a fixed port is not retried).
   *
   * Returns within ~100 ms; use waitReady() before querying. Throws std::runtime_error with the
   * config and chronyd's log tail on failure (also when chronyd is not installed: check
   * findChronyd() first and skip), std::invalid_argument for bad options (non-loopback address,
   * only one of the NTS files, offset_s without reference).
   */
  explicit ChronyServer(ChronyOptions o);
  /** stop(). */
  ~ChronyServer();
  ChronyServer(const ChronyServer&) = delete;
  ChronyServer& operator=(const ChronyServer&) = delete;

  /** "127.0.0.x:port" (UDP, NTP). */
  std::string ntpAddress() const;
  /** "127.0.0.x:ntsport" (TCP, NTS-KE); "" when this is not an NTS server. */
  std::string ntsKeAddress() const;
  const std::string& address() const { return options_.address; }
  uint16_t port() const { return port_; }
  uint16_t ntsPort() const { return nts_port_; }
  const ChronyOptions& options() const { return options_; }
  const std::string& dir() const { return dir_.path(); }

  /**
   * Polls with the project's own SNTP client (clock/sntp_client.h querySntpServer, 1 sample,
   * short timeout) until a reply with stratum != 0 and leap != 3 arrives; false on timeout or
   * when chronyd exited. Chained servers need ~1–1.5 s.
   */
  bool waitReady(std::chrono::milliseconds timeout = std::chrono::seconds(10));

  /** SIGTERM, allow ~5 s (chronyd takes 1.3–2.1 s), then SIGKILL. Safe to call twice. */
  ExitStatus stop();
  /** Sends SIGTERM and returns at once; stop() then waits. See stopAll(). */
  void requestStop();
  /** The last lines of chronyd's log (its stdout/stderr with -d). */
  std::string logTail(size_t lines = 40) const;
  pid_t pid() const { return process_.pid(); }
  bool running() { return process_.running(); }

 private:
  /** One start attempt with the current ports; on failure stops chronyd and says why. */
  bool startOnce(std::string* why);
  std::string configText() const;
  /** Forks the watchdog for the running chronyd (see the class comment). */
  void startWatchdog();
  /** Tells the watchdog chronyd was stopped by us (so it exits without acting) and reaps it. */
  void releaseWatchdog();

  ChronyOptions options_;
  TempDir dir_;
  uint16_t port_ = 0;
  uint16_t nts_port_ = 0;
  Subprocess process_;
  pid_t watchdog_pid_ = -1;
  int watchdog_fd_ = -1;  // our end of the socketpair; EOF at the watchdog = we died
};

/**
 * Stops several servers together: SIGTERM to all, then stop() each. chronyd takes up to ~2 s to
 * stop, so this is much faster than letting the destructors stop them one after another.
 */
std::vector<ExitStatus> stopAll(const std::vector<ChronyServer*>& servers);

}  // namespace xdcr::test
