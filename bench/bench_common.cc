#include "bench/bench_common.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

namespace xdcr::bench {

namespace {

volatile std::sig_atomic_t g_interrupted = 0;
const Clock::time_point g_program_start = Clock::now();

void onSignal(int) {
  g_interrupted = 1;
}

}  // namespace

void installSignalHandlers() {
  struct sigaction action {};
  action.sa_handler = onSignal;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  // A peer that closes while we write must be an error, not the end of the program.
  ::signal(SIGPIPE, SIG_IGN);
}

bool interrupted() {
  return g_interrupted != 0;
}

void checkInterrupted() {
  if (g_interrupted != 0) {
    throw Interrupted();
  }
}

void sleepFor(std::chrono::nanoseconds d) {
  const auto until = Clock::now() + d;
  while (true) {
    checkInterrupted();
    const auto now = Clock::now();
    if (now >= until) {
      return;
    }
    std::this_thread::sleep_for(
        std::min<std::chrono::nanoseconds>(until - now, std::chrono::milliseconds(50)));
  }
}

std::optional<double> median(std::vector<double> values) {
  if (values.empty()) {
    return std::nullopt;
  }
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2.0;
}

std::optional<double> quantileSorted(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) {
    return std::nullopt;
  }
  // Nearest rank: the smallest value with at least q of the samples at or below it.
  const double rank = std::ceil(q * static_cast<double>(sorted.size()));
  const size_t index = rank < 1 ? 0 : std::min(sorted.size() - 1, static_cast<size_t>(rank) - 1);
  return sorted[index];
}

std::string cell(const std::optional<double>& value, int precision) {
  if (!value) {
    return "-";
  }
  char buffer[48];
  std::snprintf(buffer, sizeof(buffer), "%.*f", precision, *value);
  return buffer;
}

nlohmann::json jsonOrNull(const std::optional<double>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void progress(const std::string& text) {
  char stamp[32];
  std::snprintf(stamp, sizeof(stamp), "[%7.1f s] ", secondsSince(g_program_start));
  std::cerr << stamp << text << std::endl;
}

std::string makeValue(size_t size) {
  std::string value(size, 'x');
  uint64_t state = 0x9e3779b97f4a7c15ULL;
  for (auto& c : value) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    c = static_cast<char>('!' + (state >> 58));
  }
  return value;
}

namespace {

/** The fields of /proc/PID/stat the benchmarks read, in clock ticks. */
struct ProcStat {
  pid_t ppid = 0;
  unsigned long long utime = 0, stime = 0, cutime = 0, cstime = 0;
};

std::optional<ProcStat> readProcStat(pid_t pid) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(file, text)) {
    return std::nullopt;
  }
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so count fields after
  // the last ')'. ppid is field 4 (1-based), utime, stime, cutime, cstime fields 14 to 17, i.e.
  // the 2nd and the 12th to 15th after the state.
  const size_t close = text.rfind(')');
  if (close == std::string::npos || close + 2 > text.size()) {
    return std::nullopt;
  }
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  ProcStat st;
  try {
    for (int i = 1; i <= 15 && rest >> field; ++i) {  // field 1 = state (field 3 of the file)
      if (i == 2) st.ppid = static_cast<pid_t>(std::stol(field));
      if (i == 12) st.utime = std::stoull(field);
      if (i == 13) st.stime = std::stoull(field);
      if (i == 14) st.cutime = std::stoull(field);
      if (i == 15) st.cstime = std::stoull(field);
    }
  } catch (const std::logic_error&) {
    return std::nullopt;
  }
  if (!rest) {
    return std::nullopt;
  }
  return st;
}

double ticks(unsigned long long n) {
  return static_cast<double>(n) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

}  // namespace

std::optional<double> cpuSeconds(pid_t pid) {
  const auto st = readProcStat(pid);
  if (!st) {
    return std::nullopt;
  }
  return ticks(st->utime + st->stime);
}

std::optional<double> cpuSecondsWithChildren(pid_t pid) {
  const auto st = readProcStat(pid);
  if (!st) {
    return std::nullopt;
  }
  unsigned long long sum = st->utime + st->stime + st->cutime + st->cstime;
  if (DIR* proc = ::opendir("/proc")) {
    while (const dirent* entry = ::readdir(proc)) {
      const char* name = entry->d_name;
      if (*name < '1' || *name > '9') continue;
      const auto child = readProcStat(static_cast<pid_t>(std::atol(name)));
      if (child && child->ppid == pid) sum += child->utime + child->stime;
    }
    ::closedir(proc);
  }
  return ticks(sum);
}

std::optional<double> statusBytes(pid_t pid, const std::string& field) {
  std::ifstream file("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  const std::string prefix = field + ":";
  while (std::getline(file, line)) {
    if (line.rfind(prefix, 0) == 0) {
      std::istringstream in(line.substr(prefix.size()));
      double kb = 0;
      if (in >> kb) {
        return kb * 1024.0;
      }
    }
  }
  return std::nullopt;
}

std::optional<double> machineBusySeconds() {
  std::ifstream file("/proc/stat");
  std::string cpu;
  unsigned long long user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0,
                     steal = 0;
  if (!(file >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal) ||
      cpu != "cpu") {
    return std::nullopt;
  }
  return static_cast<double>(user + nice + system + irq + softirq + steal) /
         static_cast<double>(::sysconf(_SC_CLK_TCK));
}

ForeignLoad::ForeignLoad(std::vector<pid_t> ours)
    : ours_(std::move(ours)),
      start_(Clock::now()),
      busy0_(machineBusySeconds()),
      ours0_(oursNow()) {}

double ForeignLoad::oursNow() const {
  double sum = cpuSeconds(::getpid()).value_or(0);
  for (pid_t pid : ours_) sum += cpuSecondsWithChildren(pid).value_or(0);
  return sum;
}

std::optional<double> ForeignLoad::cores() const {
  const auto busy1 = machineBusySeconds();
  const double wall = secondsSince(start_);
  if (!busy0_ || !busy1 || wall <= 0) {
    return std::nullopt;
  }
  const double foreign = (*busy1 - *busy0_) - (oursNow() - ours0_);
  return std::max(0.0, foreign / wall);
}

namespace {
std::chrono::nanoseconds g_quiet_budget{0};
}  // namespace

void setQuietBudget(std::chrono::seconds budget) {
  g_quiet_budget = budget;
}

std::optional<double> waitForQuiet() {
  constexpr double kQuiet = 0.25;
  bool said = false;
  while (true) {
    const ForeignLoad load({});
    sleepFor(std::chrono::seconds(1));
    const auto cores = load.cores();
    if (!cores || *cores < kQuiet) {
      if (said) progress("the machine is quiet again");
      return cores;
    }
    if (g_quiet_budget <= std::chrono::nanoseconds::zero()) {
      if (said) progress("waited long enough: measuring on a busy machine (flagged)");
      return cores;
    }
    if (!said) {
      progress("other processes use " + cell(cores, 2) +
               " cores; waiting for a quiet machine (budget left " +
               cell(std::chrono::duration<double>(g_quiet_budget).count(), 0) + " s)");
      said = true;
    }
    g_quiet_budget -= std::chrono::seconds(1);
  }
}

// ---- sockets ----

namespace {

void setTimeouts(int fd, std::chrono::milliseconds timeout) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(timeout.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((timeout.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

int connectLoopback(uint16_t port, std::chrono::milliseconds timeout) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  }
  setTimeouts(fd, timeout);
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int e = errno;
    ::close(fd);
    throw std::runtime_error("connect 127.0.0.1:" + std::to_string(port) + ": " + std::strerror(e));
  }
  return fd;
}

}  // namespace

Socket::Socket(uint16_t port, std::chrono::milliseconds timeout)
    : fd_(connectLoopback(port, timeout)) {}

Socket::~Socket() {
  if (fd_ >= 0) {
    ::close(fd_);
  }
}

void Socket::sendAll(std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) {
        checkInterrupted();
        continue;
      }
      throw std::runtime_error(std::string("send: ") + std::strerror(errno));
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
}

bool Socket::receiveSome(std::string& buffer) {
  char chunk[65536];
  while (true) {
    const ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
    if (n > 0) {
      buffer.append(chunk, static_cast<size_t>(n));
      return true;
    }
    if (n == 0) {
      throw std::runtime_error("connection closed by the server");
    }
    if (errno == EINTR) {
      checkInterrupted();
      continue;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return false;
    }
    throw std::runtime_error(std::string("recv: ") + std::strerror(errno));
  }
}

void appendCommand(std::string& out, std::initializer_list<std::string_view> args) {
  out += '*';
  out += std::to_string(args.size());
  out += "\r\n";
  for (std::string_view a : args) {
    out += '$';
    out += std::to_string(a.size());
    out += "\r\n";
    out.append(a.data(), a.size());
    out += "\r\n";
  }
}

std::pair<int, std::string> httpGet(const std::string& address, const std::string& path,
                                    std::chrono::milliseconds timeout) {
  try {
    const size_t colon = address.rfind(':');
    if (colon == std::string::npos) {
      return {-1, "bad address " + address};
    }
    Socket socket(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))), timeout);
    socket.sendAll("GET " + path + " HTTP/1.1\r\nHost: " + address +
                   "\r\nConnection: close\r\n\r\n");
    std::string response;
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      try {
        if (!socket.receiveSome(response)) {
          break;
        }
      } catch (const Interrupted&) {
        throw;
      } catch (const std::exception&) {
        break;  // closed: the response is complete
      }
    }
    const size_t head_end = response.find("\r\n\r\n");
    if (response.rfind("HTTP/1.", 0) != 0 || head_end == std::string::npos) {
      return {-1, "no HTTP response"};
    }
    const int status = std::stoi(response.substr(9, 3));
    return {status, response.substr(head_end + 4)};
  } catch (const Interrupted&) {
    throw;
  } catch (const std::exception& e) {
    return {-1, e.what()};
  }
}

std::optional<double> metricValue(const std::string& text, const std::string& name,
                                  const std::string& labels) {
  const std::string sample = labels.empty() ? name + " " : name + "{" + labels + "} ";
  size_t at = 0;
  while ((at = text.find(sample, at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n') {
      const size_t begin = at + sample.size();
      const size_t end = text.find('\n', begin);
      try {
        return std::stod(text.substr(begin, end == std::string::npos ? end : end - begin));
      } catch (const std::logic_error&) {
        return std::nullopt;
      }
    }
    at += sample.size();
  }
  return std::nullopt;
}

// ---- PipelinedWriter ----

PipelinedWriter::PipelinedWriter(uint16_t port, std::chrono::milliseconds timeout)
    : socket_(port, timeout) {}

void PipelinedWriter::roundTrip(std::string_view commands, size_t count) {
  socket_.sendAll(commands);
  size_t got = consumeReplies(count);
  while (got < count) {
    if (!socket_.receiveSome(in_)) {
      throw std::runtime_error("timed out waiting for replies (" + std::to_string(got) + " of " +
                               std::to_string(count) + ")");
    }
    got += consumeReplies(count - got);
  }
}

size_t PipelinedWriter::consumeReplies(size_t wanted) {
  size_t done = 0;
  while (done < wanted && pos_ < in_.size()) {
    const size_t eol = in_.find("\r\n", pos_);
    if (eol == std::string::npos) {
      break;
    }
    const char type = in_[pos_];
    size_t next = eol + 2;
    if (type == '$') {
      const long long len = std::stoll(in_.substr(pos_ + 1, eol - pos_ - 1));
      if (len >= 0) {
        next += static_cast<size_t>(len) + 2;
        if (next > in_.size()) {
          break;
        }
      }
    } else if (type == '-') {
      if (errors_++ == 0) {
        first_error_ = in_.substr(pos_ + 1, eol - pos_ - 1);
      }
    } else if (type != '+' && type != ':') {
      throw std::runtime_error("unexpected reply type '" + std::string(1, type) + "'");
    }
    pos_ = next;
    ++done;
  }
  if (pos_ == in_.size()) {
    in_.clear();
    pos_ = 0;
  } else if (pos_ > (1u << 20)) {
    in_.erase(0, pos_);
    pos_ = 0;
  }
  return done;
}

// ---- Subscriber ----

Subscriber::Subscriber(uint16_t port, const std::string& pattern,
                       std::chrono::milliseconds read_timeout)
    : socket_(port, read_timeout) {
  std::string command;
  appendCommand(command, {"PSUBSCRIBE", pattern});
  socket_.sendAll(command);
  // The confirmation: ["psubscribe", pattern, 1].
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (true) {
    const auto& items = next();
    if (!items.empty()) {
      if (items[0] != "psubscribe") {
        throw std::runtime_error("PSUBSCRIBE: unexpected reply " + std::string(items[0]));
      }
      return;
    }
    if (Clock::now() > deadline) {
      throw std::runtime_error("PSUBSCRIBE: no confirmation");
    }
  }
}

const std::vector<std::string_view>& Subscriber::next() {
  items_.clear();
  if (pos_ > 0 && pos_ == in_.size()) {
    in_.clear();
    pos_ = 0;
  }
  while (!parseOne()) {
    if (pos_ > (1u << 20)) {
      in_.erase(0, pos_);
      pos_ = 0;
    }
    if (!socket_.receiveSome(in_)) {
      items_.clear();
      return items_;
    }
  }
  return items_;
}

bool Subscriber::parseOne() {
  // An array of bulk strings or integers: "*N\r\n" then N of "$len\r\nbytes\r\n" / ":n\r\n".
  // Views point into in_, which is only modified in next() before the next parse.
  items_.clear();
  size_t p = pos_;
  auto line = [&](size_t& at, std::string_view* out) {
    const size_t eol = in_.find("\r\n", at);
    if (eol == std::string::npos) {
      return false;
    }
    *out = std::string_view(in_).substr(at, eol - at);
    at = eol + 2;
    return true;
  };
  std::string_view header;
  if (!line(p, &header)) {
    return false;
  }
  if (header.empty() || header[0] != '*') {
    throw std::runtime_error("pubsub: unexpected reply " + std::string(header));
  }
  const long long n = std::stoll(std::string(header.substr(1)));
  for (long long i = 0; i < n; ++i) {
    std::string_view h;
    if (!line(p, &h)) {
      return false;
    }
    if (!h.empty() && h[0] == ':') {
      items_.push_back(h.substr(1));
      continue;
    }
    if (h.empty() || h[0] != '$') {
      throw std::runtime_error("pubsub: unexpected element " + std::string(h));
    }
    const size_t len = static_cast<size_t>(std::stoll(std::string(h.substr(1))));
    if (p + len + 2 > in_.size()) {
      return false;
    }
    items_.push_back(std::string_view(in_).substr(p, len));
    p += len + 2;
  }
  pos_ = p;
  return true;
}

}  // namespace xdcr::bench
