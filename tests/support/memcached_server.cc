#include "tests/support/memcached_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <stdexcept>
#include <thread>

#include "target/memcached_encoder.h"
#include "tests/support/net.h"
#include "tests/support/wait.h"

namespace xdcr::test {
namespace {

constexpr int kStartAttempts = 5;

bool onPath(const std::string& name) {
  const char* path = std::getenv("PATH");
  std::string p = path != nullptr ? path : "/usr/bin:/bin";
  size_t at = 0;
  while (at <= p.size()) {
    size_t end = p.find(':', at);
    if (end == std::string::npos) end = p.size();
    if (access((p.substr(at, end - at) + "/" + name).c_str(), X_OK) == 0) return true;
    at = end + 1;
  }
  return false;
}

}  // namespace

bool memcachedAvailable() {
  return onPath("memcached");
}

MemcachedServer::MemcachedServer(std::vector<std::pair<std::string, std::string>> env,
                                 std::chrono::milliseconds start_timeout)
    : env_(std::move(env)), start_timeout_(start_timeout) {
  std::string reasons;
  for (int attempt = 1; attempt <= kStartAttempts; ++attempt) {
    std::string why;
    if (startOn(freePort(), &why)) return;
    reasons += "\n  attempt " + std::to_string(attempt) + ": " + why;
  }
  throw std::runtime_error("memcached did not start:" + reasons + "\nlog:\n" + logTail());
}

MemcachedServer::~MemcachedServer() {
  stop();
}

ExitStatus MemcachedServer::stop() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  return process_.stop(SIGTERM, std::chrono::seconds(5));
}

std::string MemcachedServer::logTail() const {
  return lastLines(readFileText(dir_.file("memcached.log")), 30);
}

bool MemcachedServer::startOn(uint16_t port, std::string* why) {
  port_ = port;
  std::vector<std::string> argv = {"memcached", "-l", "127.0.0.1", "-p", std::to_string(port),
                                   "-U",        "0",  "-m",        "64", "-I",
                                   "1m",        "-t", "1"};
  // As root memcached must be told a user. Under libfaketime it stays root: it drops privileges
  // before it reads its start time, and libfaketime (FAKETIME_NO_CACHE) re-reads the timestamp
  // file on every clock read, which `nobody` cannot open in a test's 0700 directory — memcached
  // then silently runs on the host's clock (measured: STAT time − host = 0 instead of +30).
  if (geteuid() == 0) argv.insert(argv.end(), {"-u", env_.empty() ? "nobody" : "root"});
  try {
    process_ = Subprocess::start(argv, dir_.file("memcached.log"), env_);
  } catch (const std::exception& e) {
    *why = e.what();
    return false;
  }
  std::string last = "no answer";
  const bool up = waitUntil(
      [&] {
        if (!process_.running()) return true;
        try {
          if (fd_ >= 0) ::close(fd_);
          fd_ = -1;
          const std::string v = request("version\r\n");
          return v.rfind("VERSION ", 0) == 0;
        } catch (const std::exception& e) {
          last = e.what();
          return false;
        }
      },
      start_timeout_, std::chrono::milliseconds(20));
  if (!up || !process_.running()) {
    *why = process_.running() ? "no `version` answer: " + last : "it exited (port taken?)";
    process_.stop(SIGTERM, std::chrono::seconds(5));
    return false;
  }
  return true;
}

int MemcachedServer::connectFd() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port_);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    throw std::runtime_error("cannot connect to memcached at " + address());
  }
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

std::string MemcachedServer::request(const std::string& text, const std::string& terminator) {
  if (fd_ < 0) fd_ = connectFd();
  size_t sent = 0;
  while (sent < text.size()) {
    ssize_t n = ::send(fd_, text.data() + sent, text.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) throw std::runtime_error("send to memcached failed");
    sent += static_cast<size_t>(n);
  }
  std::string reply;
  char buf[65536];
  for (;;) {
    // A VA reply: the line, then <len> bytes and CRLF.
    const size_t eol = reply.find("\r\n");
    if (eol != std::string::npos) {
      if (reply.rfind("VA ", 0) == 0) {
        const size_t len = std::stoul(reply.substr(3));
        if (reply.size() >= eol + 2 + len + 2) return reply;
      } else if (terminator == "\r\n" || reply.find("ERROR") == 0 ||
                 (reply.size() >= terminator.size() &&
                  reply.compare(reply.size() - terminator.size(), terminator.size(), terminator) ==
                      0)) {
        return reply;
      }
    }
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) throw std::runtime_error("memcached closed the connection or timed out");
    reply.append(buf, static_cast<size_t>(n));
  }
}

MemcachedItem MemcachedServer::get(const std::string& key) {
  auto wk = target::mc::wireKey(key);
  if (!wk) throw std::runtime_error("key too long for memcached");
  const std::string r = request("mg " + wk->text + " v t f" + (wk->base64 ? " b" : "") + "\r\n");
  MemcachedItem item;
  if (r.rfind("VA ", 0) != 0) return item;
  target::mc::Reply reply;
  std::string error;
  target::mc::parseReply(r, reply, error);
  item.present = true;
  item.value = reply.value;
  item.ttl_s = target::mc::flagValue(reply.text, 't').value_or(-2);
  item.flags = static_cast<uint32_t>(target::mc::flagValue(reply.text, 'f').value_or(0));
  return item;
}

std::string MemcachedServer::set(const std::string& key, const std::string& value,
                                 int64_t exptime) {
  auto wk = target::mc::wireKey(key);
  if (!wk) throw std::runtime_error("key too long for memcached");
  std::string out;
  target::mc::appendSet(out, *wk, value, exptime);
  std::string r = request(out);
  return r.substr(0, r.find("\r\n"));
}

int64_t MemcachedServer::statTime() {
  const std::string r = request("stats\r\n", "END\r\n");
  const size_t at = r.find("STAT time ");
  if (at == std::string::npos) throw std::runtime_error("no STAT time");
  return std::stoll(r.substr(at + 10));
}

int64_t MemcachedServer::currItems() {
  const std::string r = request("stats\r\n", "END\r\n");
  const size_t at = r.find("STAT curr_items ");
  if (at == std::string::npos) throw std::runtime_error("no STAT curr_items");
  return std::stoll(r.substr(at + 16));
}

}  // namespace xdcr::test
