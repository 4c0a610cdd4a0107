// Stream benchmarks (measurements, not tests): the agent against a native Redis replica of the
// same source, on the same machine, in the same run. Three consumers are measured each time
// (drain, lag, cost):
//   native     a fresh redis-server, REPLICAOF the source (Redis defaults);
//   agent-on   the agent, the target's maxTTL clamp ON: collections key:* and lag:* with
//              max_ttl 10m, shorter than the 1 h deadlines written, so every write is clamped;
//   agent-off  the agent, no buckets: no clamp.
// and two for the fan-out part:
//   native x2  two fresh redis-servers, each REPLICAOF the source;
//   agent x2   ONE agent with two pipelines of the source (so one replication link) into two
//              fresh targets, the first with the clamp on (as agent-on), the second without.
// Every measurement gets a fresh source and a fresh consumer (no full sync of earlier data); the
// consumer is shown to stream (agent: /readyz 200; native: master_link_status:up; both: a warm-up
// key written on the source is seen on the target) before anything is timed.
//
//   drain  N x `SET key:<i> <value> PXAT <now+1h>` (distinct keys, pipelined 256 a batch) and a
//          sentinel key last, written while the consumer is SIGSTOPped; then SIGCONT and the time
//          until the sentinel exists on the target (EXISTS every 1 ms; both consumers apply in
//          order). ops/s = N / that time; also the consumer's CPU seconds (utime+stime, delta over
//          the drain) per million events and its peak RSS (VmHWM). R runs, the order of the three
//          consumers rotated each run; medians and every run.
//   lag    a paced load (RATE/1000 commands every 1 ms, `SET lag:<seq> <value> PXAT <now+1h>`) for
//          S seconds; the target's keyspace notifications (notify-keyspace-events K$, PSUBSCRIBE
//          __keyspace@0__:lag:* on its own connection and thread) give each key's visibility
//          time; lag = visibility - send time of its batch, one steady clock. p50/p90/p99/p99.9/
//          max, and how many writes were seen (all must be).
//   fanout the drain (as above, the same code) of native x2 against agent x2: every consuming
//          process (both replicas; the agent) is SIGSTOPped while the backlog is written, and the
//          time runs until the sentinel is on BOTH targets (the slower one); each target's own
//          time is kept too. CPU s of the consumers (the agent; both replicas) and of the agent's
//          two targets. Before and after each drain the source must list exactly one replica
//          for the agent and two for native x2 (INFO replication connected_slaves, each online),
//          or the measurement fails. R runs, the order rotated; medians.
//   cost   the drain twice on one consumer (keys 0..N-1, then N..2N-1): CPU s per million events
//          of each phase, VmRSS once caught up on an empty expiry index, after N and after 2N
//          tracked deadlines (each read 2 s after the drain, past a checkpoint), hence RSS growth
//          per million deadlines (the second million with the buffers already grown), the peak
//          RSS, and the agent's xdcr_expiry_index_entries / _bytes gauges when it exports them.
//   catchup (issue 27, expiry-semantics.md §12) the agent (clamp off) streams N sessions
//          `SET sess:<i> <value> PX <ttl>`; it is SIGSTOPped for 20 s while every session is
//          renewed every 2 s (`PEXPIRE sess:<i> <ttl>`, 10 rounds), then a sentinel is written and
//          the agent SIGCONTed. Two variants of the same stream: "expired", ttl 10 s: every copy
//          on the target reaches its deadline during the stop, so the first renewal of each finds
//          it gone and the document is read back from the source and restored; "alive", ttl 60
//          s: nothing expires, nothing to restore. The catch-up time runs from SIGCONT until the
//          sentinel is on the target and the target holds all N sessions (DBSIZE; "alive" holds
//          them throughout). Also the agent's CPU seconds over the catch-up and its restore
//          counter (N for "expired", 0 for "alive", or the measurement fails). R runs of each,
//          alternating; medians and the ratio expired/alive.
//
// Across a WAN (--wan-delay-ms D > 0; issue 17): the kernel here has no netem, so the WAN is the
// user-space proxy of tests/support/wan_proxy.h, which delivers every byte D ms after it read it,
// both directions (a round trip gains 2 x D). The drain and the lag part then measure, instead of
// the three consumers above (and recorded under wan_drain / wan_lag, not drain / lag):
//   native_across        a fresh redis-server, REPLICAOF the source THROUGH a proxy (its master
//                        is 127.0.0.1:<proxy port>): Redis's own replication across the link;
//   agent_reads_across   the agent (clamp off) in the target's datacenter: its `src` address is a
//                        proxy in front of the source, its target is local;
//   agent_writes_across  the agent (clamp off) in the source's datacenter: the source is local,
//                        its `dst` address is a proxy in front of the target.
// (--placement reads|writes picks one agent; default both). Each consumer gets its own fresh
// proxy (a thread of this process, counted as ours in "other load"). The load is written to the
// source and the target is polled / subscribed to directly, so every figure includes the link
// exactly once: lag p50 >= D for every consumer (a lag below D, or a drain whose stream the proxy
// did not carry, fails the measurement). Ratios agent/native over the same link: drain ops/s
// (ratio_reads, ratio_writes); lag p50/p99 side by side. cost and fanout do not take a delay.
//
// Every process is a child stopped by its PID (RAII, also on errors and on SIGINT/SIGTERM;
// PR_SET_PDEATHSIG if this process is killed); a SIGSTOPped consumer is SIGCONTed on the way out.
//
//   stream_bench [--only drain,lag,cost,fanout,catchup] [--ops N] [--runs R] [--lag-seconds S]
//                [--lag-rate W] [--value-size B] [--json FILE] [--agent PATH] [--timeout S]
//                [--quiet-wait S] [--wan-delay-ms D [--placement reads|writes|both]]

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_common.h"
#include "tests/support/harness.h"
#include "tests/support/wan_proxy.h"

namespace xdcr::bench {
namespace {

using namespace std::chrono_literals;
using test::AgentProcess;
using test::RedisServer;
using test::RespClient;
using test::RespValue;
using test::TempDir;

#ifndef XDCR_AGENT_BINARY
#error "XDCR_AGENT_BINARY must be defined by bench/CMakeLists.txt"
#endif

constexpr int64_t kHourMs = 3600 * 1000;
constexpr int64_t kClampS = 600;  // the clamp-on collections' max_ttl: 10 min < the 1 h deadlines
constexpr size_t kBatch = 256;    // commands per pipelined round trip of the load writer
constexpr const char* kPipeline = "p";

std::string defaultAgent() {
  const char* from_env = std::getenv("XDCR_AGENT_BINARY");
  return from_env != nullptr && *from_env != '\0' ? from_env : XDCR_AGENT_BINARY;
}

struct Options {
  std::set<std::string> only = {"drain", "lag", "cost", "fanout", "catchup"};
  int64_t ops = 1000000;
  int64_t sessions = 10000;  // catchup: sessions renewed while the agent is stopped
  int runs = 3;
  int lag_seconds = 30;
  int64_t lag_rate = 50000;
  size_t value_size = 256;
  std::string json_path;
  std::string agent = defaultAgent();
  int timeout_s = 300;
  int quiet_wait_s = 0;
  int wan_delay_ms = 0;    // > 0: drain and lag across a WAN proxy (wan_drain, wan_lag)
  bool wan_reads = true;   // --placement: the agent reading the source across
  bool wan_writes = true;  // the agent writing its target across
  bool wants(const std::string& part) const { return only.count(part) > 0; }
  bool wan() const { return wan_delay_ms > 0; }
  std::string placement() const {
    return wan_reads && wan_writes ? "both" : wan_reads ? "reads" : "writes";
  }
};

[[noreturn]] void usage(const std::string& error) {
  if (!error.empty()) {
    std::cerr << "stream_bench: " << error << "\n";
  }
  std::cerr
      << "usage: stream_bench [--only drain,lag,cost,fanout,catchup] [--ops N] [--runs R]\n"
         "                    [--lag-seconds S] [--lag-rate W] [--value-size B] [--json FILE]\n"
         "                    [--agent PATH] [--timeout S] [--quiet-wait S]\n"
         "                    [--wan-delay-ms D [--placement reads|writes|both]]\n"
         "  --only LIST       parts to run, comma-separated or repeated (default all; with\n"
         "                    --wan-delay-ms: drain,lag)\n"
         "  --ops N           commands of one drain (default 1000000); cost drains 3 x N\n"
         "  --sessions N      catchup: sessions renewed while the agent is stopped (10000)\n"
         "  --runs R          drain, fan-out and catch-up runs of each (default 3); medians\n"
         "  --lag-seconds S   length of the paced load (default 30)\n"
         "  --lag-rate W      writes per second of the paced load (default 50000)\n"
         "  --value-size B    bytes of each value (default 256)\n"
         "  --json FILE       also write the results as JSON\n"
         "  --agent PATH      the xdcr-agent binary (default: $XDCR_AGENT_BINARY, else this\n"
         "                    build's)\n"
         "  --timeout S       bound on each drain / on the lag load's tail (default 300)\n"
         "  --quiet-wait S    before each measurement, wait for other processes to leave the\n"
         "                    machine (< 0.25 cores), at most S seconds in all (default 0)\n"
         "  --wan-delay-ms D  > 0: drain and lag across a WAN proxy delaying each direction D ms:\n"
         "                    a native replica reading its master through it against the agent\n"
         "                    reading the source (reads) or writing its target (writes) through\n"
         "                    it; JSON keys wan_drain, wan_lag (default 0: no proxy)\n"
         "  --placement P     with --wan-delay-ms: reads, writes or both (default both)\n";
  std::exit(2);
}

Options parseOptions(int argc, char** argv) {
  Options options;
  bool only_given = false;
  bool placement_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        usage(arg + " needs a value");
      }
      return argv[++i];
    };
    try {
      if (arg == "--only") {
        if (!only_given) {
          options.only.clear();
          only_given = true;
        }
        std::stringstream list(value());
        std::string part;
        while (std::getline(list, part, ',')) {
          if (part != "drain" && part != "lag" && part != "cost" && part != "fanout" &&
              part != "catchup") {
            usage(
                "--only takes drain, lag, cost, fanout or catchup (full sync is full_sync_bench)");
          }
          options.only.insert(part);
        }
      } else if (arg == "--ops") {
        options.ops = std::stoll(value());
      } else if (arg == "--sessions") {
        options.sessions = std::stoll(value());
      } else if (arg == "--runs") {
        options.runs = std::stoi(value());
      } else if (arg == "--lag-seconds") {
        options.lag_seconds = std::stoi(value());
      } else if (arg == "--lag-rate") {
        options.lag_rate = std::stoll(value());
      } else if (arg == "--value-size") {
        options.value_size = static_cast<size_t>(std::stoul(value()));
      } else if (arg == "--json") {
        options.json_path = value();
      } else if (arg == "--agent") {
        options.agent = value();
      } else if (arg == "--timeout") {
        options.timeout_s = std::stoi(value());
      } else if (arg == "--quiet-wait") {
        options.quiet_wait_s = std::stoi(value());
      } else if (arg == "--wan-delay-ms") {
        options.wan_delay_ms = std::stoi(value());
      } else if (arg == "--placement") {
        const std::string p = value();
        if (p != "reads" && p != "writes" && p != "both") {
          usage("--placement takes reads, writes or both");
        }
        placement_given = true;
        options.wan_reads = p != "writes";
        options.wan_writes = p != "reads";
      } else if (arg == "-h" || arg == "--help") {
        usage("");
      } else {
        usage("unknown option " + arg);
      }
    } catch (const std::logic_error&) {
      usage("bad number for " + arg);
    }
  }
  if (options.sessions <= 0 || options.sessions > 10000000) usage("--sessions in 1..10000000");
  if (options.ops <= 0 || options.runs <= 0 || options.lag_seconds <= 0 || options.lag_rate <= 0 ||
      options.lag_rate > 1000000 || options.timeout_s <= 0 || options.value_size == 0 ||
      options.value_size > 1000000) {
    usage(
        "--ops, --runs, --lag-seconds, --timeout must be > 0, --lag-rate in 1..1000000, "
        "--value-size in 1..1000000");
  }
  if (options.wan_delay_ms < 0 || options.wan_delay_ms > 10000) {
    usage("--wan-delay-ms must be in 0..10000");
  }
  if (!options.wan()) {
    if (placement_given) usage("--placement needs --wan-delay-ms > 0");
  } else if (!only_given) {
    options.only = {"drain", "lag"};
  } else if (options.wants("cost") || options.wants("fanout") || options.wants("catchup")) {
    usage("--wan-delay-ms applies to drain and lag only (run cost, fanout, catchup without it)");
  }
  return options;
}

// ---- consumers ----

// The drain, lag and cost parts compare one native replica with one agent pipeline (clamp on,
// clamp off); the fan-out part compares two native replicas of one source with ONE agent running
// two pipelines of that source (one link) into two targets, the first with the clamp on. Across
// a WAN (--wan-delay-ms) a native replica and the clamp-off agent each get a proxy: in front of
// the source for the replica and for the agent that reads across, in front of the target for the
// agent that writes across.
enum class Kind {
  Native,
  AgentOn,
  AgentOff,
  NativeFanout,
  AgentFanout,
  NativeAcross,
  AgentReadsAcross,
  AgentWritesAcross
};
constexpr std::array<Kind, 3> kKinds = {Kind::Native, Kind::AgentOn, Kind::AgentOff};
constexpr std::array<Kind, 2> kFanoutKinds = {Kind::NativeFanout, Kind::AgentFanout};

std::string kindName(Kind kind) {
  switch (kind) {
    case Kind::Native:
      return "native";
    case Kind::AgentOn:
      return "agent_clamp_on";
    case Kind::AgentOff:
      return "agent_clamp_off";
    case Kind::NativeFanout:
      return "native_2_replicas";
    case Kind::AgentFanout:
      return "agent_2_pipelines";
    case Kind::NativeAcross:
      return "native_across";
    case Kind::AgentReadsAcross:
      return "agent_reads_across";
    case Kind::AgentWritesAcross:
      return "agent_writes_across";
  }
  return "?";
}

bool isAgentKind(Kind kind) {
  return kind != Kind::Native && kind != Kind::NativeFanout && kind != Kind::NativeAcross;
}

/** Whether the consumer's stream crosses a WAN proxy (--wan-delay-ms). */
bool isAcross(Kind kind) {
  return kind == Kind::NativeAcross || kind == Kind::AgentReadsAcross ||
         kind == Kind::AgentWritesAcross;
}

/** The consumers of the WAN drain and lag: the native replica first, then the placements. */
std::vector<Kind> acrossKinds(const Options& options) {
  std::vector<Kind> kinds = {Kind::NativeAcross};
  if (options.wan_reads) kinds.push_back(Kind::AgentReadsAcross);
  if (options.wan_writes) kinds.push_back(Kind::AgentWritesAcross);
  return kinds;
}

/** The consumer's targets, in order: whether each has the maxTTL clamp on. */
std::vector<bool> targetClamps(Kind kind) {
  switch (kind) {
    case Kind::Native:
    case Kind::AgentOff:
    case Kind::NativeAcross:
    case Kind::AgentReadsAcross:
    case Kind::AgentWritesAcross:
      return {false};
    case Kind::AgentOn:
      return {true};
    case Kind::NativeFanout:
      return {false, false};
    case Kind::AgentFanout:
      return {true, false};
  }
  return {};
}

/** A source redis-server as the benchmarks need it. */
std::unique_ptr<RedisServer> startSource() {
  // Diskless syncs that start at once (Debian's default delay is 5 s); a backlog that holds a
  // whole drain; a stopped consumer's output buffer is never cut off.
  auto source = std::make_unique<RedisServer>(
      std::vector<std::string>{"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0",
                               "--repl-backlog-size", "1gb"},
      std::chrono::seconds(30));
  RespClient client = source->client(30s);
  RespValue reply =
      client.command({"CONFIG", "SET", "client-output-buffer-limit", "replica 0 0 0"});
  if (reply.isError()) {
    throw std::runtime_error("CONFIG SET client-output-buffer-limit: " + reply.toString());
  }
  return source;
}

/** The name of the agent's i-th pipeline and of its target cluster. */
std::string pipelineName(size_t i) {
  return i == 0 ? kPipeline : kPipeline + std::to_string(i + 1);
}
std::string targetClusterName(size_t i) {
  return i == 0 ? "dst" : "dst" + std::to_string(i + 1);
}

/**
 * The agent's configuration: cluster `src`, one target cluster and one pipeline of `src` per
 * target (pipeline p -> dst, p2 -> dst2, ...: one shared link when there are several), a 1 s
 * checkpoint interval, the admin server on `admin`. A target with the clamp on has db 0's
 * collections key:* and lag:* at max_ttl kClampS.
 */
std::string agentYaml(const std::string& state_dir, const std::string& admin, uint16_t source_port,
                      const std::vector<uint16_t>& target_ports, const std::vector<bool>& clamps) {
  std::ostringstream yaml;
  yaml << "agent:\n"
       << "  state_dir: \"" << state_dir << "\"\n"
       << "  admin_listen: \"" << admin << "\"\n"
       << "  log_level: info\n"
       << "clusters:\n"
       << "  src: {type: redis, address: \"127.0.0.1:" << source_port << "\"}\n";
  for (size_t i = 0; i < target_ports.size(); ++i) {
    yaml << "  " << targetClusterName(i) << ":\n"
         << "    type: redis\n"
         << "    address: \"127.0.0.1:" << target_ports[i] << "\"\n";
    if (clamps[i]) {
      yaml << "    buckets:\n"
           << "      - db: 0\n"
           << "        max_ttl: 0\n"
           << "        collections:\n"
           << "          - {name: bench, keys: \"key:*\", max_ttl: " << kClampS << "s}\n"
           << "          - {name: lag, keys: \"lag:*\", max_ttl: " << kClampS << "s}\n";
    }
  }
  yaml << "pipelines:\n";
  for (size_t i = 0; i < target_ports.size(); ++i) {
    yaml << "  - {name: " << pipelineName(i) << ", source: src, target: " << targetClusterName(i)
         << ", checkpoint_interval: 1s}\n";
  }
  return yaml.str();
}

/**
 * The consumer side of a source, streaming: native replicas (each target is a replica itself,
 * REPLICAOF the source), or one agent with a fresh state_dir and one fresh target per pipeline.
 * Across a WAN, one fresh proxy (options.wan_delay_ms each way) in front of the source (the
 * native replica's master, the src of the agent that reads across) or of the target (the dst of
 * the agent that writes across). The members are declared so that the agent is stopped first,
 * then the proxy, then the targets, then the directory is removed.
 */
class Consumer {
 public:
  Consumer(Kind kind, RedisServer& source, const Options& options)
      : kind_(kind), clamps_(targetClamps(kind)) {
    std::vector<uint16_t> ports;
    for (size_t i = 0; i < clamps_.size(); ++i) {
      targets_.push_back(
          std::make_unique<RedisServer>(std::vector<std::string>{}, std::chrono::seconds(30)));
      ports.push_back(targets_.back()->port());
    }
    uint16_t source_port = source.port();
    if (isAcross(kind_)) {
      if (!options.wan()) throw std::logic_error(kindName(kind_) + " needs --wan-delay-ms > 0");
      uint16_t& across = kind_ == Kind::AgentWritesAcross ? ports.front() : source_port;
      proxy_ =
          test::WanProxy::start(across, {.delay = std::chrono::milliseconds(options.wan_delay_ms),
                                         .name = "wan-" + kindName(kind_)});
      across = proxy_->port();
    }
    if (!isAgent()) {
      for (auto& target : targets_) {
        RespClient client = target->client(30s);
        RespValue reply = client.command({"REPLICAOF", "127.0.0.1", std::to_string(source_port)});
        if (reply.isError()) {
          throw std::runtime_error("REPLICAOF: " + reply.toString());
        }
        waitFor("the native replica's link", 60s, [&] {
          auto info = client.info("replication");
          return info["master_link_status"] == "up" && info["master_sync_in_progress"] == "0";
        });
      }
    } else {
      dir_ = std::make_unique<TempDir>("xdcr-bench");
      admin_ = "127.0.0.1:" + std::to_string(test::freePort());
      const std::string config = dir_->file("xdcr.yaml");
      test::writeFileText(config,
                          agentYaml(dir_->file("state"), admin_, source_port, ports, clamps_));
      agent_ = std::make_unique<AgentProcess>(config, dir_->file("agent.log"),
                                              std::vector<std::string>{}, options.agent);
      waitFor("the agent's /readyz", 60s,
              [&] { return httpGet(admin_, "/readyz", 2s).first == 200; });
    }
    // Streaming, shown end to end: a key written on the source now reaches every target.
    RespClient src = source.client(30s);
    src.command({"SET", "warmup", "1"});
    for (auto& target : targets_) {
      RespClient dst = target->client(30s);
      waitFor("the warm-up key on the target", 30s, [&] {
        return dst.command({"EXISTS", "warmup"}).integer() == 1;
      });
    }
  }

  Kind kind() const { return kind_; }
  bool isAgent() const { return isAgentKind(kind_); }
  /** The processes that consume the stream: the agent, or each native replica. */
  std::vector<pid_t> pids() const {
    if (agent_) return {agent_->pid()};
    std::vector<pid_t> out;
    for (const auto& t : targets_) out.push_back(t->pid());
    return out;
  }
  /** The first (for the lag part, the only) consuming process. */
  pid_t pid() const { return pids().front(); }
  size_t targetCount() const { return targets_.size(); }
  RedisServer& target(size_t i = 0) { return *targets_.at(i); }
  /** Whether target i has the maxTTL clamp on. */
  bool clamped(size_t i) const { return clamps_.at(i); }
  std::vector<pid_t> targetPids() const {
    std::vector<pid_t> out;
    for (const auto& t : targets_) out.push_back(t->pid());
    return out;
  }
  /** How many replicas the source must list for this consumer: the agent ONE, whatever its
   * number of pipelines (they share one link); each native replica one. */
  int64_t expectedReplicas() const { return isAgent() ? 1 : static_cast<int64_t>(targets_.size()); }

  /** Throws with the agent's log tail if it has ended. */
  void checkAlive() {
    if (agent_ && !agent_->running()) {
      throw std::runtime_error("the agent " + agent_->describeState() + "\n" + agent_->logTail(30));
    }
    for (auto& target : targets_) {
      if (!target->running()) {
        throw std::runtime_error("a target/replica redis-server ended\n" + target->logTail(20));
      }
    }
  }
  std::string logTail() const {
    return agent_ ? agent_->logTail(30) : targets_.front()->logTail(20);
  }
  /**
   * Bytes the WAN proxy delivered in the stream's direction (source to consumer, or for the
   * agent that writes across, agent to target); nullopt without a proxy.
   */
  std::optional<uint64_t> wanStreamBytes() const {
    if (!proxy_) return std::nullopt;
    return kind_ == Kind::AgentWritesAcross ? proxy_->bytesUp() : proxy_->bytesDown();
  }

  /** The agent's /metrics, "" for native replicas or when it cannot be read. */
  std::string metrics() const {
    if (!agent_) {
      return "";
    }
    auto [status, body] = httpGet(admin_, "/metrics", 5s);
    return status == 200 ? body : "";
  }

 private:
  template <class Pred>
  void waitFor(const std::string& what, std::chrono::milliseconds timeout, Pred pred) {
    const auto deadline = Clock::now() + timeout;
    while (true) {
      checkInterrupted();
      checkAlive();
      if (pred()) {
        return;
      }
      if (Clock::now() > deadline) {
        throw std::runtime_error("timed out waiting for " + what + "\n" + logTail());
      }
      std::this_thread::sleep_for(20ms);
    }
  }

  Kind kind_;
  std::vector<bool> clamps_;
  std::unique_ptr<TempDir> dir_;
  std::vector<std::unique_ptr<RedisServer>> targets_;
  std::string admin_;
  std::unique_ptr<test::WanProxy> proxy_;
  std::unique_ptr<AgentProcess> agent_;
};

/**
 * The replicas the source lists (INFO replication): exactly consumer.expectedReplicas(), each
 * online, or this throws. For the agent with two pipelines that is ONE: they share one link.
 */
int64_t checkSourceReplicas(RedisServer& source, const Consumer& consumer,
                            const std::string& when) {
  auto info = source.client(10s).info("replication");
  const int64_t expected = consumer.expectedReplicas();
  int64_t connected = -1;
  try {
    connected = std::stoll(info["connected_slaves"]);
  } catch (const std::logic_error&) {
  }
  int64_t online = 0;
  std::string listed;
  for (int64_t i = 0; i < std::max<int64_t>(connected, 0); ++i) {
    const std::string line = info["slave" + std::to_string(i)];
    listed += "\n  slave" + std::to_string(i) + ":" + line;
    if (line.find("state=online") != std::string::npos) ++online;
  }
  if (connected != expected || online != expected) {
    throw std::runtime_error("the source lists " + std::to_string(connected) + " replica(s), " +
                             std::to_string(online) + " online, " + when + "; " +
                             kindName(consumer.kind()) + " must be exactly " +
                             std::to_string(expected) + " (INFO replication):" + listed);
  }
  return connected;
}

// ---- the load ----

/** SET <prefix><i> value PXAT <now+1h> for i in [first, first+count), pipelined, then SET
 * sentinel 1. Returns the seconds it took. */
double writeLoad(uint16_t port, int64_t first, int64_t count, const std::string& value,
                 const std::string& sentinel) {
  PipelinedWriter writer(port, 30s);
  const auto start = Clock::now();
  std::string batch;
  batch.reserve(kBatch * (value.size() + 80));
  for (int64_t i = first; i < first + count;) {
    checkInterrupted();
    batch.clear();
    const std::string deadline = std::to_string(test::unixTimeMs() + kHourMs);
    size_t n = 0;
    for (; n < kBatch && i < first + count; ++n, ++i) {
      const std::string key = "key:" + std::to_string(i);
      appendCommand(batch, {"SET", key, value, "PXAT", deadline});
    }
    writer.roundTrip(batch, n);
  }
  batch.clear();
  appendCommand(batch, {"SET", sentinel, "1"});
  writer.roundTrip(batch, 1);
  if (writer.errors() > 0) {
    throw std::runtime_error("the source refused " + std::to_string(writer.errors()) +
                             " writes: " + writer.firstError());
  }
  return secondsSince(start);
}

// ---- drain ----

/** The sum over `pids` of a per-process reading; nullopt when any is unreadable or none given. */
template <class Read>
std::optional<double> sumOver(const std::vector<pid_t>& pids, Read read) {
  if (pids.empty()) return std::nullopt;
  double sum = 0;
  for (pid_t pid : pids) {
    const std::optional<double> v = read(pid);
    if (!v) return std::nullopt;
    sum += *v;
  }
  return sum;
}
std::optional<double> cpuOf(const std::vector<pid_t>& pids) {
  return sumOver(pids, cpuSeconds);
}
std::optional<double> statusOf(const std::vector<pid_t>& pids, const std::string& field) {
  return sumOver(pids, [&](pid_t pid) { return statusBytes(pid, field); });
}
std::optional<double> delta(const std::optional<double>& before,
                            const std::optional<double>& after) {
  if (!before || !after) return std::nullopt;
  return *after - *before;
}

/** One target of a drain: when it had everything, and the deadline it gave the last key. */
struct TargetDrain {
  bool clamp = false;
  double drain_s = 0;
  int64_t deadline_shift_ms = 0;  // target PEXPIRETIME - source's, of the last key
};

struct Phase {
  int64_t first = 0;
  int64_t count = 0;
  double write_s = 0;
  double drain_s = 0;                   // until the slowest target had everything
  std::optional<double> cpu_s;          // the consumer processes (the agent, or every replica)
  std::optional<double> target_cpu_s;   // the agent's target redis-servers (agent consumers only)
  std::optional<double> source_cpu_s;   // the source redis-server, over the drain
  std::optional<double> foreign_cores;  // other processes' CPU during the drain (ForeignLoad)
  std::optional<double> rss_before;     // VmRSS before the load (settled), summed over consumers
  std::optional<double> rss_after;      // VmRSS after the drain (settled, in cost mode)
  std::optional<double> hwm;            // VmHWM after the drain
  std::optional<double> index_entries;
  std::optional<double> index_bytes;
  std::optional<double> clamped_total;
  std::vector<TargetDrain> targets;
  int64_t source_replicas = -1;     // INFO replication connected_slaves after the drain (checked)
  std::optional<double> wan_bytes;  // across a WAN: what the proxy carried of the phase's stream

  double opsPerSecond() const { return drain_s > 0 ? static_cast<double>(count) / drain_s : 0; }
  std::optional<double> cpuPerMillion() const {
    if (!cpu_s) return std::nullopt;
    return *cpu_s / (static_cast<double>(count) / 1e6);
  }
  nlohmann::json toJson() const {
    nlohmann::json targets_json = nlohmann::json::array();
    for (const auto& t : targets) {
      targets_json.push_back(
          {{"clamp", t.clamp}, {"drain_s", t.drain_s}, {"deadline_shift_ms", t.deadline_shift_ms}});
    }
    return {
        {"first_key", first},
        {"ops", count},
        {"write_s", write_s},
        {"drain_s", drain_s},
        {"ops_per_s", opsPerSecond()},
        {"cpu_s", jsonOrNull(cpu_s)},
        {"cpu_s_per_million", jsonOrNull(cpuPerMillion())},
        {"target_cpu_s", jsonOrNull(target_cpu_s)},
        {"source_cpu_s", jsonOrNull(source_cpu_s)},
        {"foreign_cores", jsonOrNull(foreign_cores)},
        {"target_cpu_s_per_million",
         jsonOrNull(target_cpu_s ? std::optional(*target_cpu_s / (count / 1e6)) : std::nullopt)},
        {"rss_before_bytes", jsonOrNull(rss_before)},
        {"rss_after_bytes", jsonOrNull(rss_after)},
        {"vmhwm_bytes", jsonOrNull(hwm)},
        {"expiry_index_entries", jsonOrNull(index_entries)},
        {"expiry_index_bytes", jsonOrNull(index_bytes)},
        {"expiry_clamped_total", jsonOrNull(clamped_total)},
        {"deadline_shift_ms",
         targets.empty() ? nlohmann::json(nullptr) : nlohmann::json(targets[0].deadline_shift_ms)},
        {"targets", targets_json},
        {"source_replicas", source_replicas},
        {"wan_bytes", jsonOrNull(wan_bytes)}};
  }
};

void readAgentGauges(Consumer& consumer, Phase& phase) {
  const std::string text = consumer.metrics();
  const std::string label = std::string("pipeline=\"") + kPipeline + "\"";
  phase.index_entries = metricValue(text, "xdcr_expiry_index_entries", label);
  phase.index_bytes = metricValue(text, "xdcr_expiry_index_bytes", label);
  phase.clamped_total = metricValue(text, "xdcr_expiry_clamped_total", label);
}

/**
 * One drain on a streaming consumer: keys [first, first+count) written while every consuming
 * process is stopped, then the time from SIGCONT until the sentinel is on every target (each
 * target's own time is kept; the phase's is the slowest). `settle`: wait 2 s before the RSS
 * readings (a checkpoint happens in between), as the cost part does.
 */
Phase drainPhase(RedisServer& source, Consumer& consumer, int64_t first, int64_t count,
                 const std::string& value, const Options& options, bool settle) {
  Phase phase;
  phase.first = first;
  phase.count = count;
  const std::vector<pid_t> pids = consumer.pids();
  // The agent's targets do the writing; a native replica is its own target (counted in cpu_s).
  const std::vector<pid_t> target_pids =
      consumer.isAgent() ? consumer.targetPids() : std::vector<pid_t>{};
  const std::string sentinel = "sentinel:" + std::to_string(first);
  if (settle) {
    sleepFor(2s);
  }
  phase.rss_before = statusOf(pids, "VmRSS");
  std::vector<RespClient> polls;
  for (size_t i = 0; i < consumer.targetCount(); ++i) {
    polls.push_back(consumer.target(i).client(10s));
  }
  std::optional<double> cpu0;
  std::optional<double> target_cpu0;
  std::optional<double> source_cpu0;
  const std::optional<uint64_t> wan0 = consumer.wanStreamBytes();
  Clock::time_point start;
  {
    std::vector<std::unique_ptr<StoppedProcess>> stopped;
    for (pid_t pid : pids) stopped.push_back(std::make_unique<StoppedProcess>(pid));
    phase.write_s = writeLoad(source.port(), first, count, value, sentinel);
    cpu0 = cpuOf(pids);
    target_cpu0 = cpuOf(target_pids);
    source_cpu0 = cpuSeconds(source.pid());
    start = Clock::now();
    for (auto& s : stopped) s->resume();
  }
  std::vector<pid_t> ours = pids;
  ours.insert(ours.end(), target_pids.begin(), target_pids.end());
  ours.push_back(source.pid());
  const ForeignLoad foreign(ours);
  const auto deadline = start + std::chrono::seconds(options.timeout_s);
  std::vector<std::optional<double>> arrived(polls.size());
  for (uint64_t polls_done = 0;; ++polls_done) {
    size_t missing = 0;
    for (size_t i = 0; i < polls.size(); ++i) {
      if (arrived[i]) continue;
      if (polls[i].command({"EXISTS", sentinel}).integer() == 1) {
        arrived[i] = secondsSince(start);
      } else {
        ++missing;
      }
    }
    if (missing == 0) {
      break;
    }
    if (polls_done % 256 == 0) {
      checkInterrupted();
      consumer.checkAlive();
    }
    if (Clock::now() > deadline) {
      throw std::runtime_error("the sentinel " + sentinel + " is not on " +
                               std::to_string(missing) + " target(s) after " +
                               std::to_string(options.timeout_s) + " s\n" + consumer.logTail());
    }
    std::this_thread::sleep_for(1ms);
  }
  phase.foreign_cores = foreign.cores();
  phase.cpu_s = delta(cpu0, cpuOf(pids));
  phase.source_cpu_s = delta(source_cpu0, cpuSeconds(source.pid()));
  phase.target_cpu_s = delta(target_cpu0, cpuOf(target_pids));
  phase.hwm = statusOf(pids, "VmHWM");
  if (settle) {
    sleepFor(2s);
    phase.hwm = statusOf(pids, "VmHWM");
  }
  phase.rss_after = statusOf(pids, "VmRSS");
  if (consumer.isAgent()) {
    readAgentGauges(consumer, phase);
  }
  // Still one replica per native replica and ONE for the agent: no pipeline left a shared link.
  phase.source_replicas = checkSourceReplicas(source, consumer, "after the drain");
  // Across a WAN, the stream crossed the proxy: at least the values went through it.
  if (const std::optional<uint64_t> wan1 = consumer.wanStreamBytes(); wan0 && wan1) {
    phase.wan_bytes = static_cast<double>(*wan1 - *wan0);
    const double floor = static_cast<double>(count) * static_cast<double>(value.size());
    if (*phase.wan_bytes < floor) {
      throw std::runtime_error("the WAN proxy carried " + cell(phase.wan_bytes, 0) +
                               " bytes of a stream of at least " + cell(floor, 0) + ": " +
                               kindName(consumer.kind()) + " did not go through it");
    }
  }
  // Every key arrived on every target (spot checks: the first and the last), with which
  // deadline: clamp on shortens the 1 h deadline to ~10 min from now, clamp off and a native
  // replica keep it exactly.
  const std::string last = "key:" + std::to_string(first + count - 1);
  RespClient src = source.client(10s);
  const int64_t source_deadline = src.command({"PEXPIRETIME", last}).integer();
  const int64_t clamped_shift = -(kHourMs - kClampS * 1000);
  for (size_t i = 0; i < polls.size(); ++i) {
    TargetDrain t;
    t.clamp = consumer.clamped(i);
    t.drain_s = *arrived[i];
    phase.drain_s = std::max(phase.drain_s, t.drain_s);
    for (const std::string& key : {"key:" + std::to_string(first), last}) {
      if (polls[i].command({"EXISTS", key}).integer() != 1) {
        throw std::runtime_error(key + " is missing on target " + std::to_string(i + 1) +
                                 " after the sentinel arrived");
      }
    }
    t.deadline_shift_ms = polls[i].command({"PEXPIRETIME", last}).integer() - source_deadline;
    const bool ok =
        t.clamp ? t.deadline_shift_ms < clamped_shift + 5 * 60 * 1000 : t.deadline_shift_ms == 0;
    if (!ok) {
      throw std::runtime_error(
          last + " on target " + std::to_string(i + 1) +
          ": target deadline - source deadline = " + std::to_string(t.deadline_shift_ms) +
          " ms, not what " + kindName(consumer.kind()) + " must give");
    }
    phase.targets.push_back(t);
  }
  return phase;
}

struct Measurement {
  Kind kind = Kind::Native;
  std::vector<Phase> phases;
  std::string error;
  nlohmann::json toJson() const {
    nlohmann::json phases_json = nlohmann::json::array();
    for (const auto& p : phases) phases_json.push_back(p.toJson());
    return {{"consumer", kindName(kind)}, {"phases", phases_json}, {"error", error}};
  }
};

Measurement measureDrain(Kind kind, int phases, const std::string& value, const Options& options) {
  Measurement m;
  m.kind = kind;
  try {
    waitForQuiet();
    auto source = startSource();
    Consumer consumer(kind, *source, options);
    checkSourceReplicas(*source, consumer, "once streaming");
    for (int i = 0; i < phases; ++i) {
      progress("  " + kindName(kind) + ": drain of keys " + std::to_string(i * options.ops) + ".." +
               std::to_string((i + 1) * options.ops - 1));
      m.phases.push_back(drainPhase(*source, consumer, i * options.ops, options.ops, value, options,
                                    /*settle=*/phases > 1));
      const Phase& p = m.phases.back();
      std::string each;
      if (p.targets.size() > 1) {
        for (const auto& t : p.targets) each += (each.empty() ? "" : " / ") + cell(t.drain_s);
        each = " (each target: " + each + " s)";
      }
      progress("  " + kindName(kind) + ": " + cell(p.opsPerSecond(), 0) + " ops/s (" +
               cell(p.drain_s) + " s" + each + ", written in " + cell(p.write_s, 2) + " s), CPU " +
               cell(p.cpu_s, 2) + " s, " + cell(p.cpuPerMillion(), 2) + " s/M" +
               (p.target_cpu_s
                    ? " (its target(s) " + cell(*p.target_cpu_s / (p.count / 1e6), 2) + " s/M)"
                    : std::string()) +
               ", VmHWM " + cell(p.hwm ? std::optional(*p.hwm / 1048576.0) : std::nullopt, 1) +
               " MiB, source replicas " + std::to_string(p.source_replicas) + ", other load " +
               cell(p.foreign_cores, 2) + " cores");
    }
  } catch (const Interrupted&) {
    throw;
  } catch (const std::exception& e) {
    m.error = e.what();
    progress("  " + kindName(kind) + " FAILED: " + m.error);
  }
  return m;
}

// ---- lag ----

struct LagResult {
  Kind kind = Kind::Native;
  int64_t sent = 0;
  int64_t seen = 0;
  double send_s = 0;            // first to last batch
  double max_send_slip_ms = 0;  // how late the sender ever was against its schedule
  std::vector<double> sorted_ms;
  nlohmann::json per_second = nlohmann::json::array();
  std::optional<double> cpu_s;
  std::optional<double> foreign_cores;
  std::string error;

  std::optional<double> q(double quantile) const { return quantileSorted(sorted_ms, quantile); }
  std::optional<double> mean() const {
    if (sorted_ms.empty()) return std::nullopt;
    double sum = 0;
    for (double v : sorted_ms) sum += v;
    return sum / static_cast<double>(sorted_ms.size());
  }
  nlohmann::json toJson() const {
    return {
        {"consumer", kindName(kind)},
        {"sent", sent},
        {"seen", seen},
        {"send_s", send_s},
        {"achieved_rate", send_s > 0 ? static_cast<double>(sent) / send_s : 0.0},
        {"max_send_slip_ms", max_send_slip_ms},
        {"consumer_cpu_s", jsonOrNull(cpu_s)},
        {"foreign_cores", jsonOrNull(foreign_cores)},
        {"p50_ms", jsonOrNull(q(0.50))},
        {"p90_ms", jsonOrNull(q(0.90))},
        {"p99_ms", jsonOrNull(q(0.99))},
        {"p999_ms", jsonOrNull(q(0.999))},
        {"max_ms", jsonOrNull(sorted_ms.empty() ? std::nullopt : std::optional(sorted_ms.back()))},
        {"mean_ms", jsonOrNull(mean())},
        {"per_second", per_second},
        {"error", error}};
  }
};

int64_t steadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

LagResult measureLag(Kind kind, const std::string& value, const Options& options) {
  LagResult r;
  r.kind = kind;
  const int64_t total = options.lag_rate * options.lag_seconds;
  const int64_t ticks = int64_t{options.lag_seconds} * 1000;
  std::vector<int64_t> send_ns(static_cast<size_t>(total), 0);
  std::vector<int64_t> recv_ns(static_cast<size_t>(total), 0);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> seen{0};
  std::exception_ptr reader_error;
  std::unique_ptr<Subscriber> subscriber;  // outlives the reader thread, which uses it
  std::thread reader;
  auto joinReader = [&] {
    stop = true;
    if (reader.joinable()) reader.join();
  };
  try {
    waitForQuiet();
    auto source = startSource();
    Consumer consumer(kind, *source, options);
    RespClient dst = consumer.target().client(10s);
    RespValue reply = dst.command({"CONFIG", "SET", "notify-keyspace-events", "K$"});
    if (reply.isError()) {
      throw std::runtime_error("CONFIG SET notify-keyspace-events: " + reply.toString());
    }
    subscriber =
        std::make_unique<Subscriber>(consumer.target().port(), "__keyspace@0__:lag:*", 200ms);
    reader = std::thread([&, sub = subscriber.get()] {
      try {
        constexpr std::string_view kPrefix = "__keyspace@0__:lag:";
        while (!stop) {
          const auto& items = sub->next();
          if (items.size() != 4 || items[0] != "pmessage") continue;
          const int64_t now = steadyNs();
          std::string_view channel = items[2];
          if (channel.substr(0, kPrefix.size()) != kPrefix) continue;
          channel.remove_prefix(kPrefix.size());
          int64_t seq = 0;
          for (char c : channel) seq = seq * 10 + (c - '0');
          if (seq >= 0 && seq < total && recv_ns[static_cast<size_t>(seq)] == 0) {
            recv_ns[static_cast<size_t>(seq)] = now;
            seen.fetch_add(1, std::memory_order_relaxed);
          }
        }
      } catch (...) {
        reader_error = std::current_exception();
        stop = true;
      }
    });

    progress("  " + kindName(kind) + ": " + std::to_string(options.lag_rate) + " writes/s for " +
             std::to_string(options.lag_seconds) + " s");
    const pid_t pid = consumer.pid();
    const auto cpu0 = cpuSeconds(pid);
    const ForeignLoad foreign({pid, consumer.target().pid(), source->pid()});
    PipelinedWriter writer(source->port(), 10s);
    std::string batch;
    int64_t seq = 0;
    const auto start = Clock::now();
    int64_t first_send = 0;
    int64_t last_send = 0;
    for (int64_t tick = 0; tick < ticks; ++tick) {
      const auto due = start + std::chrono::milliseconds(tick);
      std::this_thread::sleep_until(due);
      if ((tick & 255) == 0) {
        checkInterrupted();
        if (stop) break;  // the reader failed
        if (tick % 5000 == 0) consumer.checkAlive();
      }
      const int64_t upto = options.lag_rate * (tick + 1) / 1000;
      if (upto <= seq) continue;
      batch.clear();
      const std::string deadline = std::to_string(test::unixTimeMs() + kHourMs);
      const int64_t begin = seq;
      for (; seq < upto; ++seq) {
        appendCommand(batch, {"SET", "lag:" + std::to_string(seq), value, "PXAT", deadline});
      }
      const int64_t now = steadyNs();
      r.max_send_slip_ms =
          std::max(r.max_send_slip_ms,
                   std::chrono::duration<double, std::milli>(Clock::now() - due).count());
      for (int64_t s = begin; s < seq; ++s) send_ns[static_cast<size_t>(s)] = now;
      if (first_send == 0) first_send = now;
      last_send = now;
      writer.roundTrip(batch, static_cast<size_t>(seq - begin));
      r.sent = seq;  // sent and acknowledged by the source
    }
    r.send_s = static_cast<double>(last_send - first_send) / 1e9;
    if (writer.errors() > 0) {
      throw std::runtime_error("the source refused writes: " + writer.firstError());
    }
    // The tail: until every write was seen, or the bound.
    const auto tail_deadline = Clock::now() + std::chrono::seconds(std::min(options.timeout_s, 60));
    while (seen.load() < r.sent && !stop && Clock::now() < tail_deadline) {
      sleepFor(10ms);
      consumer.checkAlive();
    }
    const auto cpu1 = cpuSeconds(pid);
    if (cpu0 && cpu1) r.cpu_s = *cpu1 - *cpu0;
    r.foreign_cores = foreign.cores();
    joinReader();
    if (reader_error) std::rethrow_exception(reader_error);
  } catch (const Interrupted&) {
    joinReader();
    throw;
  } catch (const std::exception& e) {
    joinReader();
    r.error = e.what();
    progress("  " + kindName(kind) + " FAILED: " + r.error);
  }
  r.seen = seen.load();
  r.sorted_ms.reserve(static_cast<size_t>(r.seen));
  for (int64_t s = 0; s < r.sent; ++s) {
    const size_t i = static_cast<size_t>(s);
    if (recv_ns[i] != 0 && send_ns[i] != 0) {
      r.sorted_ms.push_back(static_cast<double>(recv_ns[i] - send_ns[i]) / 1e6);
    }
  }
  std::sort(r.sorted_ms.begin(), r.sorted_ms.end());
  // Per second of the load (by send time): does the lag drift as the target and the agent's
  // expiry index grow, or come in periodic spikes (checkpoints)?
  if (r.sent > 0 && send_ns[0] != 0) {
    std::vector<std::vector<double>> seconds(static_cast<size_t>(options.lag_seconds) + 1);
    for (int64_t s = 0; s < r.sent; ++s) {
      const size_t i = static_cast<size_t>(s);
      if (recv_ns[i] == 0 || send_ns[i] == 0) continue;
      const size_t bucket =
          std::min(seconds.size() - 1, static_cast<size_t>((send_ns[i] - send_ns[0]) / 1000000000));
      seconds[bucket].push_back(static_cast<double>(recv_ns[i] - send_ns[i]) / 1e6);
    }
    for (size_t b = 0; b < seconds.size(); ++b) {
      auto& v = seconds[b];
      if (v.empty()) continue;
      std::sort(v.begin(), v.end());
      r.per_second.push_back({{"second", b},
                              {"count", v.size()},
                              {"p50_ms", jsonOrNull(quantileSorted(v, 0.5))},
                              {"p99_ms", jsonOrNull(quantileSorted(v, 0.99))},
                              {"max_ms", v.back()}});
    }
  }
  if (r.error.empty() && r.seen < r.sent) {
    r.error = "only " + std::to_string(r.seen) + " of " + std::to_string(r.sent) +
              " writes were seen on the target";
  }
  // Across a WAN every write crosses the proxy once: none can be visible sooner than its delay.
  if (r.error.empty() && isAcross(kind) && !r.sorted_ms.empty() &&
      r.sorted_ms.front() < options.wan_delay_ms) {
    r.error = "a write was visible after " + cell(r.sorted_ms.front(), 2) + " ms, under the " +
              std::to_string(options.wan_delay_ms) + " ms of the WAN proxy: it did not cross it";
  }
  progress("  " + kindName(kind) + ": seen " + std::to_string(r.seen) + "/" +
           std::to_string(r.sent) + ", p50 " + cell(r.q(0.5), 2) + " ms, p99 " +
           cell(r.q(0.99), 2) + " ms, max " +
           cell(r.sorted_ms.empty() ? std::nullopt : std::optional(r.sorted_ms.back()), 2) +
           " ms, sender late by up to " + cell(r.max_send_slip_ms, 1) + " ms, other load " +
           cell(r.foreign_cores, 2) + " cores");
  return r;
}

// ---- the report ----

std::optional<double> mib(const std::optional<double>& bytes) {
  if (!bytes) return std::nullopt;
  return *bytes / 1048576.0;
}

std::optional<double> diffPerMillion(const std::optional<double>& after,
                                     const std::optional<double>& before, int64_t count) {
  if (!after || !before || count <= 0) return std::nullopt;
  return (*after - *before) / (static_cast<double>(count) / 1e6);
}

/**
 * The drain and fan-out parts: options.runs runs, each measuring every kind of `kinds` once on a
 * fresh source (a 1-phase measureDrain), the order rotated each run; per run the ratio of each
 * kind named in `ratio_keys` to `reference` (ops/s); medians of everything over the runs.
 * Clears `ok` when a measurement failed.
 */
nlohmann::json runDrains(const std::string& part, const std::vector<Kind>& kinds, Kind reference,
                         const std::map<Kind, std::string>& ratio_keys, const std::string& value,
                         const Options& options, bool& ok) {
  nlohmann::json runs = nlohmann::json::array();
  std::map<Kind, std::vector<double>> ops, cpu, cpu_per_m, hwm, target_cpu, target_cpu_per_m;
  std::map<Kind, std::vector<std::vector<double>>> target_s;  // [kind][target] -> runs
  std::map<std::string, std::vector<double>> ratios;
  std::map<Kind, double> foreign_max;
  std::map<Kind, int64_t> replicas, errors;
  for (int run = 1; run <= options.runs; ++run) {
    std::map<Kind, Measurement> results;
    std::string order;
    for (size_t step = 0; step < kinds.size(); ++step) {
      const Kind kind = kinds[(step + static_cast<size_t>(run - 1)) % kinds.size()];
      order += (order.empty() ? "" : ",") + kindName(kind);
      progress(part + " run " + std::to_string(run) + "/" + std::to_string(options.runs) + ": " +
               kindName(kind));
      results[kind] = measureDrain(kind, 1, value, options);
    }
    nlohmann::json run_json = {{"run", run}, {"order", order}};
    for (auto& [kind, m] : results) {
      run_json[kindName(kind)] = m.toJson();
      if (!m.error.empty()) {
        ok = false;
        ++errors[kind];
      }
      if (m.phases.empty()) continue;
      const Phase& p = m.phases[0];
      const double millions = static_cast<double>(p.count) / 1e6;
      ops[kind].push_back(p.opsPerSecond());
      if (p.cpu_s) cpu[kind].push_back(*p.cpu_s);
      if (p.cpuPerMillion()) cpu_per_m[kind].push_back(*p.cpuPerMillion());
      if (p.hwm) hwm[kind].push_back(*p.hwm);
      if (p.foreign_cores) foreign_max[kind] = std::max(foreign_max[kind], *p.foreign_cores);
      if (p.target_cpu_s) {
        target_cpu[kind].push_back(*p.target_cpu_s);
        target_cpu_per_m[kind].push_back(*p.target_cpu_s / millions);
      }
      auto& per_target = target_s[kind];
      per_target.resize(std::max(per_target.size(), p.targets.size()));
      for (size_t i = 0; i < p.targets.size(); ++i) per_target[i].push_back(p.targets[i].drain_s);
      replicas[kind] = p.source_replicas;
    }
    std::string said;
    for (const auto& [kind, key] : ratio_keys) {
      const auto& a = results[kind];
      const auto& n = results[reference];
      std::optional<double> r;
      if (!a.phases.empty() && !n.phases.empty() && n.phases[0].opsPerSecond() > 0) {
        r = a.phases[0].opsPerSecond() / n.phases[0].opsPerSecond();
        ratios[key].push_back(*r);
      }
      run_json[key] = jsonOrNull(r);
      said += (said.empty() ? "" : ", ") + kindName(kind) + "/" + kindName(reference) + " " +
              cell(r, 2);
    }
    progress(part + " run " + std::to_string(run) + ": " + said);
    runs.push_back(run_json);
  }
  nlohmann::json med;
  for (Kind kind : kinds) {
    nlohmann::json per_target = nlohmann::json::array();
    for (const auto& times : target_s[kind]) per_target.push_back(jsonOrNull(median(times)));
    med[kindName(kind)] = {
        {"ops_per_s", jsonOrNull(median(ops[kind]))},
        {"cpu_s", jsonOrNull(median(cpu[kind]))},
        {"cpu_s_per_million", jsonOrNull(median(cpu_per_m[kind]))},
        {"vmhwm_bytes", jsonOrNull(median(hwm[kind]))},
        {"target_cpu_s", jsonOrNull(median(target_cpu[kind]))},
        {"target_cpu_s_per_million", jsonOrNull(median(target_cpu_per_m[kind]))},
        {"target_drain_s", per_target},
        {"foreign_cores_max", foreign_max[kind]},
        {"source_replicas", replicas.count(kind) ? nlohmann::json(replicas[kind]) : nullptr},
        {"errors", errors[kind]}};
  }
  for (const auto& [kind, key] : ratio_keys) med[key] = jsonOrNull(median(ratios[key]));
  return {{"ops", options.ops}, {"runs", runs}, {"median", med}};
}

/** One catch-up after the agent was stopped while every session was renewed (the catchup part). */
struct CatchUp {
  bool expired = false;  // the variant: copies expire during the stop (ttl 10 s) or not (60 s)
  int64_t sessions = 0;
  std::optional<double> seconds;   // SIGCONT until the sentinel and every session
  std::optional<double> cpu_s;     // the agent's, over the catch-up
  std::optional<double> restored;  // xdcr_target_copies_restored_total, expired_before_write
  std::optional<double> target_at_resume;  // sessions the target held at SIGCONT
  std::optional<double> foreign_cores;
  std::string error;
  nlohmann::json toJson() const {
    return {{"variant", expired ? "expired" : "alive"},
            {"sessions", sessions},
            {"seconds", jsonOrNull(seconds)},
            {"cpu_s", jsonOrNull(cpu_s)},
            {"restored", jsonOrNull(restored)},
            {"target_sessions_at_resume", jsonOrNull(target_at_resume)},
            {"foreign_cores", jsonOrNull(foreign_cores)},
            {"error", error}};
  }
};

CatchUp measureCatchUp(bool expired, const std::string& value, const Options& options) {
  CatchUp r;
  r.expired = expired;
  r.sessions = options.sessions;
  waitForQuiet();
  std::unique_ptr<RedisServer> source = startSource();
  Consumer consumer(Kind::AgentOff, *source, options);
  const int64_t ttl_ms = expired ? 10000 : 60000;
  const int64_t n = options.sessions;
  auto round = [&](bool create) {
    RespClient c = source->client(60s);
    std::vector<test::RespCommand> batch;
    for (int64_t i = 0; i < n; ++i) {
      const std::string key = "sess:" + std::to_string(i);
      if (create) {
        batch.push_back({"SET", key, value, "PX", std::to_string(ttl_ms)});
      } else {
        batch.push_back({"PEXPIRE", key, std::to_string(ttl_ms)});
      }
      if (batch.size() == kBatch || i + 1 == n) {
        for (const RespValue& v : c.pipeline(batch)) {
          if (v.isError() || (!create && v.integer() != 1)) {
            throw std::runtime_error("a session write was refused or found no key: " +
                                     v.toString());
          }
        }
        batch.clear();
      }
    }
  };
  round(true);
  RespClient target = consumer.target().client(30s);
  const int64_t want = n + 1;  // the sessions and the warm-up key
  {
    const auto deadline = Clock::now() + 60s;
    while (target.command({"DBSIZE"}).integer() < want) {
      consumer.checkAlive();
      if (Clock::now() > deadline)
        throw std::runtime_error("the sessions never reached the target");
      std::this_thread::sleep_for(10ms);
    }
  }
  Clock::time_point start;
  std::optional<double> cpu0;
  {
    StoppedProcess stopped(consumer.pid());
    auto next = Clock::now();
    for (int k = 0; k < 10; ++k) {  // 20 s of renewals every 2 s
      next += 2s;
      std::this_thread::sleep_until(next);
      checkInterrupted();
      round(false);
    }
    source->client(10s).command({"SET", "sentinel:catchup", "1"});
    r.target_at_resume = static_cast<double>(target.command({"DBSIZE"}).integer() - 1);
    cpu0 = cpuOf({consumer.pid()});
    start = Clock::now();
    stopped.resume();
  }
  const ForeignLoad foreign({consumer.pid(), consumer.target().pid(), source->pid()});
  const auto deadline = start + std::chrono::seconds(options.timeout_s);
  // Caught up: the sentinel is on the target and, where copies expired, every one was restored
  // (DBSIZE would count expired copies the target has not evicted yet). The restore counter
  // grows when a restore is sent; the check below reads every session afterwards.
  const std::string labels =
      std::string("pipeline=\"") + kPipeline + "\",reason=\"expired_before_write\"";
  const double want_restored = expired ? static_cast<double>(n) : 0;
  for (uint64_t polls = 0;; ++polls) {
    if (target.command({"EXISTS", "sentinel:catchup"}).integer() == 1) {
      r.restored = metricValue(consumer.metrics(), "xdcr_target_copies_restored_total", labels);
      if (r.restored && *r.restored >= want_restored) break;
    }
    if (polls % 256 == 0) consumer.checkAlive();
    if (Clock::now() > deadline) {
      r.error = "not caught up after " + std::to_string(options.timeout_s) + " s (restored " +
                cell(r.restored, 0) + ")\n" + consumer.logTail();
      return r;
    }
    std::this_thread::sleep_for(1ms);
  }
  r.seconds = secondsSince(start);
  r.cpu_s = delta(cpu0, cpuOf({consumer.pid()}));
  r.foreign_cores = foreign.cores();
  std::this_thread::sleep_for(1s);  // (nothing is timed from here)
  r.restored = metricValue(consumer.metrics(), "xdcr_target_copies_restored_total", labels);
  if (!r.restored || *r.restored != want_restored) {
    r.error = "restored " + cell(r.restored, 0) + " copies, not " + cell(want_restored, 0);
  }
  // Every session is on the target, alive.
  int64_t present = 0;
  std::vector<test::RespCommand> batch;
  for (int64_t i = 0; i < n; ++i) {
    batch.push_back({"PTTL", "sess:" + std::to_string(i)});
    if (batch.size() == kBatch || i + 1 == n) {
      for (const RespValue& v : target.pipeline(batch)) present += v.integer() > 0 ? 1 : 0;
      batch.clear();
    }
  }
  if (present != n && r.error.empty()) {
    r.error = std::to_string(n - present) + " sessions missing on the target after the catch-up";
  }
  return r;
}

int runBenchmark(const Options& options) {
  const std::string value = makeValue(options.value_size);
  nlohmann::json out = {{"benchmark", "stream"},
                        {"unix_time", static_cast<int64_t>(std::time(nullptr))},
                        {"cpus", static_cast<int64_t>(::sysconf(_SC_NPROCESSORS_ONLN))},
                        {"agent_binary", options.agent},
                        {"value_size", options.value_size},
                        {"clamp_on", "collections key:* and lag:* max_ttl " +
                                         std::to_string(kClampS) + "s, deadlines now+1h"}};
  {
    RedisServer probe({}, std::chrono::seconds(30));
    out["redis_version"] = probe.client(10s).info("server")["redis_version"];
  }
  bool ok = true;

  if (options.wan()) {
    // Across a WAN: the same drain and lag, other consumers, other keys (drain and lag stay
    // what they are without a delay).
    const std::vector<Kind> kinds = acrossKinds(options);
    std::string names;
    for (Kind kind : kinds) names += (names.empty() ? "" : ", ") + kindName(kind);
    const std::string across = std::to_string(options.wan_delay_ms) + " ms each way";
    if (options.wants("drain")) {
      progress("drain across a WAN (" + across + "): " + std::to_string(options.ops) +
               " SET PXAT, " + std::to_string(options.runs) + " runs x " + names);
      std::map<Kind, std::string> ratio_keys;
      if (options.wan_reads) ratio_keys[Kind::AgentReadsAcross] = "ratio_reads";
      if (options.wan_writes) ratio_keys[Kind::AgentWritesAcross] = "ratio_writes";
      out["wan_drain"] =
          runDrains("wan drain", kinds, Kind::NativeAcross, ratio_keys, value, options, ok);
      out["wan_drain"]["delay_ms"] = options.wan_delay_ms;
      out["wan_drain"]["placement"] = options.placement();
    }
    if (options.wants("lag")) {
      progress("lag across a WAN (" + across + "): " + std::to_string(options.lag_rate) +
               " writes/s for " + std::to_string(options.lag_seconds) + " s, " + names);
      nlohmann::json lag = {{"rate", options.lag_rate},
                            {"seconds", options.lag_seconds},
                            {"delay_ms", options.wan_delay_ms},
                            {"placement", options.placement()}};
      for (Kind kind : kinds) {
        LagResult r = measureLag(kind, value, options);
        if (!r.error.empty()) ok = false;
        lag[kindName(kind)] = r.toJson();
      }
      out["wan_lag"] = lag;
    }
  }

  if (options.wants("drain") && !options.wan()) {
    progress("drain: " + std::to_string(options.ops) + " SET PXAT, " +
             std::to_string(options.runs) + " runs x native, agent clamp on, agent clamp off");
    out["drain"] =
        runDrains("drain", {kKinds.begin(), kKinds.end()}, Kind::Native,
                  {{Kind::AgentOn, "ratio_on"}, {Kind::AgentOff, "ratio_off"}}, value, options, ok);
  }

  if (options.wants("lag") && !options.wan()) {
    progress("lag: " + std::to_string(options.lag_rate) + " writes/s for " +
             std::to_string(options.lag_seconds) + " s, each consumer");
    nlohmann::json lag = {{"rate", options.lag_rate}, {"seconds", options.lag_seconds}};
    for (Kind kind : kKinds) {
      LagResult r = measureLag(kind, value, options);
      if (!r.error.empty()) ok = false;
      lag[kindName(kind)] = r.toJson();
    }
    out["lag"] = lag;
  }

  if (options.wants("cost")) {
    progress("cost: 3 x " + std::to_string(options.ops) + " tracked deadlines, each consumer");
    nlohmann::json cost = {{"ops_per_phase", options.ops}};
    for (Kind kind : kKinds) {
      Measurement m = measureDrain(kind, 3, value, options);
      if (!m.error.empty()) ok = false;
      nlohmann::json j = m.toJson();
      if (m.phases.size() == 3) {
        // A third million: are the first two still warming buffers up, or is it per deadline?
        const Phase& b2 = m.phases[1];
        const Phase& c = m.phases[2];
        j["rss_3_bytes"] = jsonOrNull(c.rss_after);
        j["rss_growth_third_per_million"] =
            jsonOrNull(diffPerMillion(c.rss_after, b2.rss_after, c.count));
        progress("  " + kindName(kind) + ": third million: RSS growth/M " +
                 cell(diffPerMillion(c.rss_after, b2.rss_after, c.count), 1) + " B");
      }
      if (m.phases.size() >= 2) {
        const Phase& a = m.phases[0];
        const Phase& b = m.phases[1];
        j["rss_empty_bytes"] = jsonOrNull(a.rss_before);
        j["rss_1_bytes"] = jsonOrNull(a.rss_after);
        j["rss_2_bytes"] = jsonOrNull(b.rss_after);
        j["rss_growth_first_per_million"] =
            jsonOrNull(diffPerMillion(a.rss_after, a.rss_before, a.count));
        j["rss_growth_second_per_million"] =
            jsonOrNull(diffPerMillion(b.rss_after, a.rss_after, b.count));
        j["vmhwm_bytes"] = jsonOrNull(b.hwm);
        j["cpu_s_per_million_first"] = jsonOrNull(a.cpuPerMillion());
        j["cpu_s_per_million_second"] = jsonOrNull(b.cpuPerMillion());
        j["ops_per_s_second"] = b.opsPerSecond();
        j["foreign_cores_max"] = std::max(a.foreign_cores.value_or(0), b.foreign_cores.value_or(0));
        if (b.index_entries && b.index_bytes && *b.index_entries > 0) {
          j["index_bytes_per_entry"] = *b.index_bytes / *b.index_entries;
        } else {
          j["index_bytes_per_entry"] = nullptr;
        }
        progress("  " + kindName(kind) + ": RSS " + cell(mib(a.rss_before), 1) + " -> " +
                 cell(mib(a.rss_after), 1) + " -> " + cell(mib(b.rss_after), 1) +
                 " MiB; growth/M " + cell(diffPerMillion(a.rss_after, a.rss_before, a.count), 0) +
                 " B, then " + cell(diffPerMillion(b.rss_after, a.rss_after, b.count), 0) + " B");
      }
      cost[kindName(kind)] = j;
    }
    out["cost"] = cost;
  }

  if (options.wants("fanout")) {
    progress("fan-out: " + std::to_string(options.ops) + " SET PXAT into 2 targets, " +
             std::to_string(options.runs) +
             " runs x 2 native replicas, 1 agent with 2 pipelines (target 1 clamp on, 2 off)");
    out["fanout"] =
        runDrains("fan-out", {kFanoutKinds.begin(), kFanoutKinds.end()}, Kind::NativeFanout,
                  {{Kind::AgentFanout, "ratio"}}, value, options, ok);
    out["fanout"]["targets"] = 2;
  }

  if (options.wants("catchup")) {
    progress("catch-up: " + std::to_string(options.sessions) +
             " sessions renewed every 2 s while the agent is stopped 20 s, " +
             std::to_string(options.runs) + " runs x copies expired / alive");
    nlohmann::json runs = nlohmann::json::array();
    std::vector<double> expired_s, alive_s, expired_cpu, alive_cpu;
    for (int run = 1; run <= options.runs; ++run) {
      for (bool expired :
           run % 2 == 1 ? std::vector<bool>{true, false} : std::vector<bool>{false, true}) {
        CatchUp c = measureCatchUp(expired, value, options);
        if (!c.error.empty()) ok = false;
        progress("  run " + std::to_string(run) + " " + (expired ? "expired" : "alive  ") + ": " +
                 cell(c.seconds, 3) + " s, agent CPU " + cell(c.cpu_s, 2) + " s, restored " +
                 cell(c.restored, 0) + ", target held " + cell(c.target_at_resume, 0) +
                 " at resume; other load " + cell(c.foreign_cores, 2) + " cores" +
                 (c.error.empty() ? "" : "; ERROR " + c.error));
        if (c.seconds) (expired ? expired_s : alive_s).push_back(*c.seconds);
        if (c.cpu_s) (expired ? expired_cpu : alive_cpu).push_back(*c.cpu_s);
        runs.push_back(c.toJson());
      }
    }
    const std::optional<double> me = median(expired_s), ma = median(alive_s);
    out["catchup"] = {{"sessions", options.sessions},
                      {"stopped_s", 20},
                      {"runs", runs},
                      {"expired_seconds_median", jsonOrNull(me)},
                      {"alive_seconds_median", jsonOrNull(ma)},
                      {"expired_cpu_s_median", jsonOrNull(median(expired_cpu))},
                      {"alive_cpu_s_median", jsonOrNull(median(alive_cpu))},
                      {"ratio", me && ma && *ma > 0 ? nlohmann::json(*me / *ma) : nullptr}};
    progress("  medians: expired " + cell(me, 3) + " s, alive " + cell(ma, 3) + " s");
  }

  if (!options.json_path.empty()) {
    std::ofstream file(options.json_path);
    file << out.dump(2) << "\n";
    if (!file) {
      std::cerr << "cannot write " << options.json_path << "\n";
      return 1;
    }
    progress("results: " + options.json_path);
  } else {
    std::cout << out.dump(2) << "\n";
  }
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace xdcr::bench

int main(int argc, char** argv) {
  const xdcr::bench::Options options = xdcr::bench::parseOptions(argc, argv);
  xdcr::bench::installSignalHandlers();
  xdcr::bench::setQuietBudget(std::chrono::seconds(options.quiet_wait_s));
  try {
    return xdcr::bench::runBenchmark(options);
  } catch (const std::exception& e) {
    // Every server and agent is owned by an object that stopped it during the unwinding.
    std::cerr << "stream_bench: " << e.what() << "\n";
    return 1;
  }
}
