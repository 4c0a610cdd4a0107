#include "tests/support/chrony_server.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "clock/sntp_client.h"
#include "tests/support/wait.h"

namespace xdcr::test {
namespace {

constexpr int kStartAttempts = 5;
// How long one attempt may take until chronyd has bound its sockets (it does so within ~50 ms).
constexpr auto kBindTimeout = std::chrono::seconds(5);
// SIGTERM takes chronyd 1.3-2.1 s for chained servers (clock-notes §1.2).
constexpr auto kStopGrace = std::chrono::seconds(5);
// Ports are picked below Linux's default ephemeral range (32768-60999) so that no client socket
// (ours or another job's) sits on them by chance.
constexpr uint16_t kPortLow = 20000;
constexpr uint16_t kPortHigh = 32000;

std::string errnoText(int err) {
  return std::strerror(err);
}

in_addr parseLoopback(const std::string& address) {
  in_addr a{};
  if (::inet_pton(AF_INET, address.c_str(), &a) != 1 || (ntohl(a.s_addr) >> 24) != 127) {
    throw std::invalid_argument("ChronyServer: address '" + address +
                                "' is not an IPv4 loopback address (127.x.y.z)");
  }
  return a;
}

/**
 * A port held for chronyd until it has bound it. The socket is bound WITHOUT SO_REUSEADDR (so
 * it fails when anybody has the port, chronyd included: chronyd sets SO_REUSEADDR, so two
 * chronyds on one UDP port both start and silently share it), then SO_REUSEADDR is set on it so
 * that chronyd (which sets it too) can bind next to it. While it is held, no other ChronyServer,
 * in this process or another, can pick the same port. Closed once chronyd's socket is there.
 */
class PortReservation {
 public:
  PortReservation() = default;
  ~PortReservation() { release(); }
  PortReservation(const PortReservation&) = delete;
  PortReservation& operator=(const PortReservation&) = delete;
  PortReservation(PortReservation&& o) noexcept : fd_(o.fd_), port_(o.port_) { o.fd_ = -1; }
  PortReservation& operator=(PortReservation&& o) noexcept {
    if (this != &o) {
      release();
      fd_ = o.fd_;
      port_ = o.port_;
      o.fd_ = -1;
    }
    return *this;
  }

  /** Tries to hold `port` (type SOCK_DGRAM or SOCK_STREAM) on `addr`. */
  static std::optional<PortReservation> tryHold(in_addr addr, uint16_t port, int type) {
    int fd = ::socket(AF_INET, type | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      throw std::runtime_error("ChronyServer: socket(): " + errnoText(errno));
    }
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr = addr;
    sa.sin_port = htons(port);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
      ::close(fd);
      return std::nullopt;
    }
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    PortReservation r;
    r.fd_ = fd;
    r.port_ = port;
    return r;
  }

  /** A random free port in [kPortLow, kPortHigh) held on `addr`. */
  static PortReservation holdFree(in_addr addr, int type) {
    static std::mutex mu;
    static std::mt19937 rng(std::random_device{}());
    for (int i = 0; i < 200; ++i) {
      uint16_t port;
      {
        std::lock_guard<std::mutex> lock(mu);
        port =
            static_cast<uint16_t>(std::uniform_int_distribution<int>(kPortLow, kPortHigh - 1)(rng));
      }
      if (auto r = tryHold(addr, port, type)) {
        return std::move(*r);
      }
    }
    throw std::runtime_error("ChronyServer: no free port found in 200 tries");
  }

  uint16_t port() const { return port_; }
  /** The socket's inode, as /proc/net/{udp,tcp} list it. A forked child (the watchdog, until it
   * closes what it inherited) may keep the socket bound a moment after release(). */
  unsigned long inode() const {
    struct stat st {};
    return fd_ >= 0 && ::fstat(fd_, &st) == 0 ? static_cast<unsigned long>(st.st_ino) : 0;
  }
  void release() {
    if (fd_ >= 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

/** The socket inodes among `pid`'s open files (readable for our own children, also as root
 * for children that dropped to _chrony). */
std::set<unsigned long> socketInodes(pid_t pid) {
  std::set<unsigned long> inodes;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    return inodes;
  }
  while (dirent* e = ::readdir(d)) {
    char target[256];
    const std::string link = dir + "/" + e->d_name;
    ssize_t n = ::readlink(link.c_str(), target, sizeof(target) - 1);
    if (n <= 0) {
      continue;
    }
    target[n] = '\0';
    unsigned long inode = 0;
    if (std::sscanf(target, "socket:[%lu]", &inode) == 1) {
      inodes.insert(inode);
    }
  }
  ::closedir(d);
  return inodes;
}

/** Inodes of the sockets bound to addr:port in /proc/net/udp or /proc/net/tcp (`tcp_listen`:
 * only sockets in LISTEN state). */
std::vector<unsigned long> boundInodes(const char* table, in_addr addr, uint16_t port,
                                       bool tcp_listen) {
  std::vector<unsigned long> out;
  std::ifstream in(table);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string sl, local, remote, state, txrx, trtm, retr, uid, timeout;
    unsigned long inode = 0;
    if (!(fields >> sl >> local >> remote >> state >> txrx >> trtm >> retr >> uid >> timeout >>
          inode)) {
      continue;
    }
    const size_t colon = local.find(':');
    if (colon == std::string::npos) {
      continue;
    }
    // The address is printed as the in-memory (network order) 32-bit value in host order.
    const auto ip = static_cast<uint32_t>(std::stoul(local.substr(0, colon), nullptr, 16));
    const auto p = static_cast<uint16_t>(std::stoul(local.substr(colon + 1), nullptr, 16));
    if (ip != addr.s_addr || p != port) {
      continue;
    }
    if (tcp_listen && state != "0A") {
      continue;
    }
    out.push_back(inode);
  }
  return out;
}

std::string formatOffset(double seconds) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9f", seconds);
  return buf;
}

/** "host:port" → (host, port) for the `server` directive. */
std::pair<std::string, std::string> splitHostPort(const std::string& spec) {
  const size_t colon = spec.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == spec.size()) {
    throw std::invalid_argument("ChronyServer: reference '" + spec + "' is not host:port");
  }
  return {spec.substr(0, colon), spec.substr(colon + 1)};
}

}  // namespace

std::string findChronyd() {
  for (const char* p : {"/usr/sbin/chronyd", "/sbin/chronyd", "/usr/bin/chronyd"}) {
    if (::access(p, X_OK) == 0) {
      return p;
    }
  }
  return {};
}

ChronyServer::ChronyServer(ChronyOptions o) : options_(std::move(o)), dir_("xdcr-chrony") {
  const bool nts = !options_.nts_cert_file.empty() || !options_.nts_key_file.empty();
  if (nts && (options_.nts_cert_file.empty() || options_.nts_key_file.empty())) {
    throw std::invalid_argument("ChronyServer: set both nts_cert_file and nts_key_file");
  }
  if (!options_.reference.empty()) {
    splitHostPort(options_.reference);  // validates
  } else if (options_.offset_s != 0) {
    throw std::invalid_argument("ChronyServer: offset_s needs a reference server to follow");
  }
  const in_addr addr = parseLoopback(options_.address);
  if (findChronyd().empty()) {
    throw std::runtime_error("chronyd not installed (Debian package chrony)");
  }

  // As root chronyd drops to _chrony (without capabilities, clock-notes §0), which must be able
  // to write its pid/drift/dump files and read the NTS key; as another user it runs as that user.
  const passwd* chrony_user = ::geteuid() == 0 ? ::getpwnam("_chrony") : nullptr;
  auto giveToChrony = [&](const std::string& path) {
    if (chrony_user != nullptr &&
        ::chown(path.c_str(), chrony_user->pw_uid, chrony_user->pw_gid) != 0) {
      throw std::runtime_error("ChronyServer: chown " + path + " to _chrony: " + errnoText(errno));
    }
  };
  giveToChrony(dir_.path());
  if (nts) {
    namespace fs = std::filesystem;
    const std::pair<const std::string*, const char*> files[] = {
        {&options_.nts_cert_file, "server.crt"}, {&options_.nts_key_file, "server.key"}};
    for (const auto& [from, name] : files) {
      std::error_code ec;
      fs::copy_file(*from, dir_.file(name), fs::copy_options::overwrite_existing, ec);
      if (ec) {
        throw std::runtime_error("ChronyServer: cannot copy " + *from + " to " + dir_.file(name) +
                                 ": " + ec.message());
      }
      giveToChrony(dir_.file(name));
    }
  }

  std::string reasons;
  for (int attempt = 1; attempt <= kStartAttempts; ++attempt) {
    // Ports are held (PortReservation) from their choice until chronyd has bound them.
    std::optional<PortReservation> udp, tcp;
    std::string why;
    try {
      if (options_.port != 0) {
        port_ = options_.port;
      } else {
        udp = PortReservation::holdFree(addr, SOCK_DGRAM);
        port_ = udp->port();
      }
      if (nts) {
        if (options_.nts_port != 0) {
          nts_port_ = options_.nts_port;
        } else {
          tcp = PortReservation::holdFree(addr, SOCK_STREAM);
          nts_port_ = tcp->port();
        }
      }
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (why.empty()) {
      writeFileText(dir_.file("chrony.conf"), configText());
      // Each attempt's log is kept (appended) for the failure message.
      writeFileText(dir_.file("chronyd.log"),
                    readFileText(dir_.file("chronyd.log")) + "--- attempt " +
                        std::to_string(attempt) + ": " + ntpAddress() +
                        (nts ? " nts-ke " + ntsKeAddress() : std::string()) + "\n");
      if (startOnce(&why)) {
        // The reservation itself is not a foreign socket: the watchdog, forked while it was
        // open, holds it until it has closed what it inherited, which on a loaded machine can
        // be after this count.
        const unsigned long reserved = udp ? udp->inode() : 0;
        udp.reset();
        tcp.reset();
        // Nobody else may serve the NTP port on this address: a foreign SO_REUSEADDR socket
        // would silently take (some of) our datagrams.
        auto sharing = boundInodes("/proc/net/udp", addr, port_, false);
        std::erase(sharing, reserved);
        if (sharing.size() == 1) {
          return;
        }
        why = std::to_string(sharing.size()) + " sockets are bound to UDP " + ntpAddress();
        process_.stop(SIGTERM, kStopGrace);
        releaseWatchdog();
      }
    }
    reasons += "\n  attempt " + std::to_string(attempt) + ": " + why;
    // A fixed port that could not be bound will not become free by retrying at once.
    if (options_.port != 0 && (!nts || options_.nts_port != 0)) {
      break;
    }
  }
  throw std::runtime_error("chronyd on " + options_.address + " did not start:" + reasons +
                           "\nconfig:\n" + readFileText(dir_.file("chrony.conf")) + "log tail:\n" +
                           logTail());
}

ChronyServer::~ChronyServer() {
  stop();
}

std::string ChronyServer::configText() const {
  std::string c;
  auto line = [&](const std::string& l) { c += l + "\n"; };
  // No inline comments: chrony.conf rejects them (clock-notes §1.2).
  line("port " + std::to_string(port_));
  line("bindaddress " + options_.address);
  line("allow 127.0.0.0/8");
  if (options_.reference.empty()) {
    line("local stratum 8");
  } else {
    // No `local stratum` here: it would serve the unshifted clock until synchronised (§3).
    const auto [host, port] = splitHostPort(options_.reference);
    line("server " + host + " port " + port + " iburst minpoll -2 maxpoll -2 offset " +
         formatOffset(options_.offset_s));
  }
  line("cmdport 0");
  line("bindcmdaddress /");
  line("pidfile " + dir_.file("chronyd.pid"));
  line("driftfile " + dir_.file("chrony.drift"));
  if (nts_port_ != 0) {
    line("ntsport " + std::to_string(nts_port_));
    line("ntsservercert " + dir_.file("server.crt"));
    line("ntsserverkey " + dir_.file("server.key"));
    line("ntsdumpdir " + dir_.path());
  }
  for (const auto& extra : options_.extra_lines) {
    line(extra);
  }
  return c;
}

bool ChronyServer::startOnce(std::string* why) {
  std::vector<std::string> argv = {findChronyd()};
  if (::geteuid() != 0) {
    argv.push_back("-U");
  }
  for (const char* a : {"-4", "-x", "-d", "-f"}) {
    argv.push_back(a);
  }
  argv.push_back(dir_.file("chrony.conf"));
  try {
    process_ = Subprocess::start(argv, dir_.file("chronyd.log"));
    startWatchdog();
  } catch (const std::exception& e) {
    *why = e.what();
    process_.kill();
    releaseWatchdog();
    return false;
  }

  // Started = this very process has its NTP (and NTS-KE) socket bound, and nobody else shares
  // the NTP port. A bind failure does not make chronyd exit, so its sockets are checked in
  // /proc rather than trusting that it runs.
  const in_addr addr = parseLoopback(options_.address);
  bool exited = false;
  std::string state = "no socket bound yet";
  const bool bound = waitUntil(
      [&] {
        if (!process_.running()) {
          exited = true;
          return true;
        }
        const auto mine = socketInodes(process_.pid());
        auto ours = [&](const std::vector<unsigned long>& inodes) {
          for (unsigned long i : inodes) {
            if (mine.count(i) != 0) {
              return true;
            }
          }
          return false;
        };
        if (!ours(boundInodes("/proc/net/udp", addr, port_, false))) {
          state = "chronyd has not bound UDP " + ntpAddress();
          return false;
        }
        if (nts_port_ != 0 && !ours(boundInodes("/proc/net/tcp", addr, nts_port_, true))) {
          state = "chronyd does not listen on TCP " + ntsKeAddress();
          return false;
        }
        return true;
      },
      kBindTimeout, std::chrono::milliseconds(10));
  if (exited) {
    *why = "chronyd " + process_.exitStatus()->describe();
    releaseWatchdog();
    return false;
  }
  if (!bound) {
    *why = state + " within " +
           std::to_string(
               std::chrono::duration_cast<std::chrono::milliseconds>(kBindTimeout).count()) +
           " ms";
    process_.stop(SIGTERM, kStopGrace);
    releaseWatchdog();
    return false;
  }
  return true;
}

std::string ChronyServer::ntpAddress() const {
  return options_.address + ":" + std::to_string(port_);
}

std::string ChronyServer::ntsKeAddress() const {
  if (nts_port_ == 0) {
    return "";
  }
  return options_.address + ":" + std::to_string(nts_port_);
}

bool ChronyServer::waitReady(std::chrono::milliseconds timeout) {
  clock::SntpOptions probe;
  probe.samples = 1;
  probe.timeout = std::chrono::milliseconds(200);
  const std::string server = ntpAddress();
  bool exited = false;
  const bool ready = waitUntil(
      [&] {
        if (!process_.running()) {
          exited = true;
          return true;  // stop waiting: it will not become ready
        }
        boost::asio::io_context io;
        std::optional<Result<clock::SntpResult>> out;
        boost::asio::co_spawn(io, clock::querySntpServer(server, probe),
                              [&](std::exception_ptr e, Result<clock::SntpResult> r) {
                                if (!e) {
                                  out = std::move(r);
                                }
                              });
        io.run();
        return out && out->has_value() && (*out)->best.stratum != 0 && (*out)->best.leap != 3;
      },
      timeout, std::chrono::milliseconds(50));
  return ready && !exited;
}

ExitStatus ChronyServer::stop() {
  ExitStatus st = process_.stop(SIGTERM, kStopGrace);
  releaseWatchdog();
  return st;
}

namespace {

// --- watchdog child: only async-signal-safe calls (the parent may be multi-threaded) ---

/** True while /proc/<pid>/cmdline (path prepared before fork) contains `needle`. */
bool cmdlineHas(const char* cmdline_path, const char* needle, size_t needle_len) {
  char buf[4096];
  int fd = ::open(cmdline_path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return false;
  }
  ssize_t n = ::read(fd, buf, sizeof(buf));
  ::close(fd);
  for (ssize_t i = 0; n > 0 && i + static_cast<ssize_t>(needle_len) <= n; ++i) {
    if (std::memcmp(buf + i, needle, needle_len) == 0) {
      return true;
    }
  }
  return false;
}

[[noreturn]] void watchdogMain(int fd, pid_t target, const char* cmdline_path, const char* needle,
                               size_t needle_len) {
  char c = 0;
  for (;;) {
    ssize_t n = ::read(fd, &c, 1);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n == 1 && c == 'D') {
      ::_exit(0);  // stopped by the test itself
    }
    if (n <= 0) {
      break;  // EOF: the test process is gone
    }
  }
  // The test died without stopping chronyd. Stop it by PID, as long as that PID is still this
  // server's chronyd (a zombie has an empty cmdline; a reused PID has another one).
  if (cmdlineHas(cmdline_path, needle, needle_len)) {
    ::kill(target, SIGTERM);
    for (int i = 0; i < 50 && cmdlineHas(cmdline_path, needle, needle_len); ++i) {
      const timespec pause{0, 100'000'000};
      ::nanosleep(&pause, nullptr);
    }
    if (cmdlineHas(cmdline_path, needle, needle_len)) {
      ::kill(target, SIGKILL);
    }
  }
  ::_exit(0);
}

}  // namespace

void ChronyServer::startWatchdog() {
  releaseWatchdog();
  const pid_t target = process_.pid();
  // Prepared before fork(): the child may not allocate.
  const std::string cmdline_path = "/proc/" + std::to_string(target) + "/cmdline";
  const std::string needle = dir_.file("chrony.conf");
  int sv[2];
  // A socketpair rather than a pipe: send(MSG_NOSIGNAL) cannot raise SIGPIPE in the test.
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    throw std::runtime_error("ChronyServer: socketpair: " + errnoText(errno));
  }
  const pid_t w = ::fork();
  if (w < 0) {
    const int err = errno;
    ::close(sv[0]);
    ::close(sv[1]);
    throw std::runtime_error("ChronyServer: fork (watchdog): " + errnoText(err));
  }
  if (w == 0) {
    // No PR_SET_PDEATHSIG here: the watchdog must survive the test. Keep only our end: any
    // other descriptor (another watchdog's socket, a listening socket) would otherwise be held
    // open by this process.
    ::dup2(sv[1], STDIN_FILENO);
    ::close_range(STDOUT_FILENO, ~0U, 0);
    sigset_t empty;
    sigemptyset(&empty);
    ::sigprocmask(SIG_SETMASK, &empty, nullptr);
    watchdogMain(STDIN_FILENO, target, cmdline_path.c_str(), needle.c_str(), needle.size());
  }
  ::close(sv[1]);
  watchdog_fd_ = sv[0];
  watchdog_pid_ = w;
}

void ChronyServer::releaseWatchdog() {
  if (watchdog_fd_ >= 0) {
    const char done = 'D';
    ssize_t ignored = ::send(watchdog_fd_, &done, 1, MSG_NOSIGNAL);
    (void)ignored;
    ::close(watchdog_fd_);
    watchdog_fd_ = -1;
  }
  if (watchdog_pid_ > 0) {
    // It exits as soon as it reads the byte; bounded anyway, then SIGKILL (it is our child and
    // not yet reaped, so the PID is still ours).
    int raw = 0;
    bool reaped = false;
    for (int i = 0; i < 200 && !reaped; ++i) {
      const pid_t r = ::waitpid(watchdog_pid_, &raw, WNOHANG);
      reaped = r == watchdog_pid_ || (r < 0 && errno != EINTR);
      if (!reaped) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    if (!reaped) {
      ::kill(watchdog_pid_, SIGKILL);
      ::waitpid(watchdog_pid_, &raw, 0);
    }
    watchdog_pid_ = -1;
  }
}

void ChronyServer::requestStop() {
  process_.sendSignal(SIGTERM);
}

std::vector<ExitStatus> stopAll(const std::vector<ChronyServer*>& servers) {
  for (ChronyServer* s : servers) {
    if (s != nullptr) {
      s->requestStop();
    }
  }
  std::vector<ExitStatus> out;
  for (ChronyServer* s : servers) {
    out.push_back(s != nullptr ? s->stop() : ExitStatus{});
  }
  return out;
}

std::string ChronyServer::logTail(size_t lines) const {
  return lastLines(readFileText(dir_.file("chronyd.log")), lines);
}

}  // namespace xdcr::test
