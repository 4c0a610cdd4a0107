#pragma once
// Shared by the benchmarks of bench/ (programs that measure, never tests): Ctrl-C handling,
// statistics and formatting, /proc readings of a child's CPU time and memory, a minimal HTTP GET
// for the agent's admin server, a pipelined RESP writer and a keyspace-notification reader on
// raw sockets (fast enough for 50,000 commands a second; the test harness's RespClient builds a
// vector of strings per command). Everything talks to 127.0.0.1 only and every wait is bounded.

#include <sys/types.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tests/support/subprocess.h"

namespace xdcr::bench {

using Clock = std::chrono::steady_clock;

// ---- interruption (SIGINT/SIGTERM): the benchmark unwinds, every child is stopped by PID ----

class Interrupted : public std::runtime_error {
 public:
  Interrupted() : std::runtime_error("interrupted by a signal") {}
};

/** Installs handlers for SIGINT and SIGTERM that only set a flag (see checkInterrupted()). */
void installSignalHandlers();
bool interrupted();
/** Throws Interrupted once SIGINT or SIGTERM was received. */
void checkInterrupted();
/** Sleeps `d` in slices of at most 50 ms, checking for an interruption. */
void sleepFor(std::chrono::nanoseconds d);

// ---- statistics and formatting ----

std::optional<double> median(std::vector<double> values);
/** The q-quantile (0..1) of `sorted` (nearest rank); nullopt when empty. */
std::optional<double> quantileSorted(const std::vector<double>& sorted, double q);
/** "%.Nf" of the value, or "-". */
std::string cell(const std::optional<double>& value, int precision = 3);
nlohmann::json jsonOrNull(const std::optional<double>& value);
double secondsSince(Clock::time_point start);
/** Progress on stderr, with the time since the program started: "[  12.3 s] text". */
void progress(const std::string& text);

/** `size` printable bytes, not compressible, the same every call: a benchmark's value, as an
 * application's payload. */
std::string makeValue(size_t size);

// ---- /proc ----

/** utime + stime of the whole process (every thread), in seconds; nullopt if unreadable. */
std::optional<double> cpuSeconds(pid_t pid);
/**
 * cpuSeconds() plus that of the process's children: those it has waited for (cutime + cstime)
 * and those still running (every thread). A source redis-server forks a child for the RDB of a
 * full sync; without this, that child's CPU counted as another process's load.
 */
std::optional<double> cpuSecondsWithChildren(pid_t pid);
/** A "Vm...:" line of /proc/PID/status (VmRSS, VmHWM, ...) in bytes; nullopt if unreadable. */
std::optional<double> statusBytes(pid_t pid, const std::string& field);

/** CPU seconds the whole machine spent busy (user+nice+system+irq+softirq+steal, /proc/stat). */
std::optional<double> machineBusySeconds();

/**
 * How much of the machine something else used while a measurement ran: busy CPU of the whole
 * machine minus that of this process and of `ours` (its children, each with its own children:
 * cpuSecondsWithChildren), per second of wall time, in cores. The benchmarks share the machine
 * with whatever else runs (a compiler, another test suite); a figure measured under 0.5 foreign
 * cores of a 2-core machine says more about that than about the agent, so every measurement
 * reports it.
 */
class ForeignLoad {
 public:
  explicit ForeignLoad(std::vector<pid_t> ours);
  /** Cores used by other processes since construction; nullopt if /proc was unreadable. */
  std::optional<double> cores() const;

 private:
  double oursNow() const;
  std::vector<pid_t> ours_;
  Clock::time_point start_;
  std::optional<double> busy0_;
  double ours0_ = 0;
};

/**
 * The machine may be shared (a compiler, another test suite). waitForQuiet() samples the load of
 * other processes for 1 s at a time and returns once it is under 0.25 cores, or when the total
 * waiting budget of the program (setQuietBudget, default 0: never wait) is spent. Returns the
 * last sample. Called before each measurement; each measurement still reports its own
 * ForeignLoad, so a noisy figure is flagged either way.
 */
void setQuietBudget(std::chrono::seconds budget);
std::optional<double> waitForQuiet();

/** SIGSTOP for a scope, SIGCONT on every exit: the test harness's (tests/support). */
using test::StoppedProcess;

// ---- the agent's admin server ----

/** GET http://ADDRESS/path (ADDRESS = 127.0.0.1:port), Connection: close. {status, body};
 * status -1 with the reason as body when the request failed. */
std::pair<int, std::string> httpGet(const std::string& address, const std::string& path,
                                    std::chrono::milliseconds timeout);
/** The value of the Prometheus sample `name{labels}` (labels as written, e.g.
 * `pipeline="p"`; empty for none) in a /metrics text; nullopt when absent. */
std::optional<double> metricValue(const std::string& text, const std::string& name,
                                  const std::string& labels);

// ---- raw RESP over TCP ----

/** A blocking TCP connection to 127.0.0.1:port with a timeout on every send and receive. */
class Socket {
 public:
  Socket(uint16_t port, std::chrono::milliseconds timeout);
  ~Socket();
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  void sendAll(std::string_view data);
  /** Appends what is available (at least one byte) to `buffer`; false when the receive timed
   * out; throws on EOF or an error. */
  bool receiveSome(std::string& buffer);
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

/** Appends one command as a RESP array of bulk strings. */
void appendCommand(std::string& out, std::initializer_list<std::string_view> args);

/**
 * Sends pre-encoded pipelined commands and consumes their replies: simple strings, integers and
 * bulk strings are counted, an error reply is remembered (the first one) and counted.
 */
class PipelinedWriter {
 public:
  PipelinedWriter(uint16_t port, std::chrono::milliseconds timeout);
  /** Sends `commands` (holding `count` commands) and reads their `count` replies. */
  void roundTrip(std::string_view commands, size_t count);
  uint64_t errors() const { return errors_; }
  const std::string& firstError() const { return first_error_; }

 private:
  /** Consumes complete replies from the buffer; returns how many. */
  size_t consumeReplies(size_t wanted);

  Socket socket_;
  std::string in_;
  size_t pos_ = 0;
  uint64_t errors_ = 0;
  std::string first_error_;
};

/**
 * A PSUBSCRIBE connection: next() parses one pushed message (an array of bulk strings) and
 * returns its elements as views valid until the next call, or an empty vector when nothing
 * complete arrived before the read timeout.
 */
class Subscriber {
 public:
  Subscriber(uint16_t port, const std::string& pattern, std::chrono::milliseconds read_timeout);
  /** Blocks until one message is complete or a read times out (then returns {}). */
  const std::vector<std::string_view>& next();

 private:
  bool parseOne();

  Socket socket_;
  std::string in_;
  size_t pos_ = 0;
  std::vector<std::string_view> items_;
};

}  // namespace xdcr::bench
