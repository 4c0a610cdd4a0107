// Cluster benchmark (a measurement, not a test; issue 15): the drain of a Redis Cluster source
// into a Redis Cluster target by the agent, against native replicas of the same shards, on the
// same machine, in the same run. Two consumers are measured each run, each on a fresh source
// cluster of S masters (default 3, no replicas; equal slot ranges, as redis-cli --cluster create):
//   native_replicas  S plain (non-cluster) redis-servers, replica i REPLICAOF source master i;
//                    a cluster master takes a non-cluster replica as any other (its INFO
//                    replication lists it, CLUSTER NODES does not; checked on 7.0.15);
//   agent_cluster    the agent, ONE pipeline src -> dst, src and dst type redis_cluster (dst a
//                    fresh cluster of S masters, the same slot ranges), no buckets (no clamp); the
//                    agent runs one replication link per source shard, on --agent-threads
//                    threads (default 1: all on one).
// Each consumer is shown to stream first: every source master lists exactly one replica, online
// (the agent's link of that shard, or native replica i), and a warm-up key written into each
// shard is seen where that shard's writes land.
//
//   drain  N x `SET key:<i> <value> PXAT <now+1h>` (distinct keys, so spread over all slots by
//          CRC16; pipelined 256 a batch per source master), then one sentinel key per shard,
//          hash-tagged into that shard's first slot and written last on that master's
//          connection, all while every consuming process is SIGSTOPped (the agent; each
//          replica); then SIGCONT and the time until every shard's sentinel is where that shard
//          lands (EXISTS every 1 ms: replica i, or the target master owning the slot; a shard is
//          applied in order, so its sentinel comes last). ops/s = N / the slowest shard's time;
//          each shard's own time is kept. Then the counts are checked: every replica holds its
//          master's DBSIZE; the target masters hold the sources' DBSIZE sum plus the agent's
//          own keys (__xdcr_marker__:*, counted with SCAN); the first and last bench key of each
//          shard has the source's deadline exactly. CPU s of the consumers (utime+stime over the
//          drain: the agent; the replicas summed) per million events, and the agent's per shard
//          (its total / S); CPU s of the agent's target masters
//          and of the source masters; peak RSS (VmHWM); the agent's per-shard event counters
//          (xdcr_source_events_total{shard=...}). R runs, the order rotated each run; medians.
//
// Every process is a child stopped by its PID (RAII, also on errors and on SIGINT/SIGTERM); a
// SIGSTOPped consumer is SIGCONTed on the way out.
//
//   cluster_bench [--ops N] [--runs R] [--shards S] [--value-size B] [--json FILE]
//                 [--agent PATH] [--agent-threads T] [--timeout S] [--quiet-wait S]

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_common.h"
#include "common/cluster_slot.h"
#include "tests/support/harness.h"

namespace xdcr::bench {
namespace {

using namespace std::chrono_literals;
using test::AgentProcess;
using test::RedisCluster;
using test::RedisClusterOptions;
using test::RedisServer;
using test::RespClient;
using test::RespValue;
using test::TempDir;

#ifndef XDCR_AGENT_BINARY
#error "XDCR_AGENT_BINARY must be defined by bench/CMakeLists.txt"
#endif

constexpr int64_t kHourMs = 3600 * 1000;
constexpr size_t kBatch = 256;  // commands per pipelined round trip, per source master
constexpr const char* kPipeline = "p";

std::string defaultAgent() {
  const char* from_env = std::getenv("XDCR_AGENT_BINARY");
  return from_env != nullptr && *from_env != '\0' ? from_env : XDCR_AGENT_BINARY;
}

struct Options {
  int64_t ops = 1000000;
  int runs = 3;
  int shards = 3;
  size_t value_size = 256;
  std::string json_path;
  std::string agent = defaultAgent();
  int timeout_s = 300;
  int quiet_wait_s = 0;
  int agent_threads = 1;  // agent.threads
};

[[noreturn]] void usage(const std::string& error) {
  if (!error.empty()) {
    std::cerr << "cluster_bench: " << error << "\n";
  }
  std::cerr
      << "usage: cluster_bench [--ops N] [--runs R] [--shards S] [--value-size B]\n"
         "                     [--json FILE] [--agent PATH] [--agent-threads T] [--timeout S]\n"
         "                     [--quiet-wait S]\n"
         "  --ops N           commands of one drain, over all shards (default 1000000)\n"
         "  --runs R          runs of each consumer (default 3); medians\n"
         "  --shards S        masters of the source and of the target cluster (default 3)\n"
         "  --value-size B    bytes of each value (default 256)\n"
         "  --json FILE       also write the results as JSON\n"
         "  --agent PATH      the xdcr-agent binary (default: $XDCR_AGENT_BINARY, else this\n"
         "                    build's)\n"
         "  --agent-threads T the agent's agent.threads (default 1)\n"
         "  --timeout S       bound on each drain (default 300)\n"
         "  --quiet-wait S    before each measurement, wait for other processes to leave the\n"
         "                    machine (< 0.25 cores), at most S seconds in all (default 0)\n";
  std::exit(2);
}

Options parseOptions(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        usage(arg + " needs a value");
      }
      return argv[++i];
    };
    try {
      if (arg == "--ops") {
        options.ops = std::stoll(value());
      } else if (arg == "--runs") {
        options.runs = std::stoi(value());
      } else if (arg == "--shards") {
        options.shards = std::stoi(value());
      } else if (arg == "--value-size") {
        options.value_size = static_cast<size_t>(std::stoul(value()));
      } else if (arg == "--json") {
        options.json_path = value();
      } else if (arg == "--agent") {
        options.agent = value();
      } else if (arg == "--agent-threads") {
        options.agent_threads = std::atoi(value().c_str());
      } else if (arg == "--timeout") {
        options.timeout_s = std::stoi(value());
      } else if (arg == "--quiet-wait") {
        options.quiet_wait_s = std::stoi(value());
      } else if (arg == "-h" || arg == "--help") {
        usage("");
      } else {
        usage("unknown option " + arg);
      }
    } catch (const std::logic_error&) {
      usage("bad number for " + arg);
    }
  }
  if (options.ops <= 0 || options.runs <= 0 || options.timeout_s <= 0 || options.shards < 1 ||
      options.shards > 16 || options.value_size == 0 || options.value_size > 1000000 ||
      options.agent_threads < 1 || options.agent_threads > 64) {
    usage(
        "--ops, --runs, --timeout must be > 0, --shards in 1..16, --value-size in 1..1000000, "
        "--agent-threads in 1..64");
  }
  return options;
}

// ---- the source cluster ----

/** One source shard: its master, its slots and the agent's label for it (the first range). */
struct Shard {
  RedisServer* master = nullptr;
  std::vector<std::pair<int, int>> slots;
  int slot = 0;       // its first slot: where its sentinel and warm-up keys go
  std::string label;  // "0-5460": the `shard` label of the agent's metrics (ShardView::label)
  std::string tag;    // a hash tag of `slot`
};

std::string shardLabel(const std::vector<std::pair<int, int>>& slots) {
  if (slots.empty()) return "?";
  return std::to_string(slots[0].first) + "-" + std::to_string(slots[0].second) +
         (slots.size() > 1 ? "+" : "");
}

/** A cluster of `masters` masters, no replicas, as the benchmark needs it. */
std::unique_ptr<RedisCluster> startCluster(int masters, bool source) {
  RedisClusterOptions o;
  o.masters = masters;
  o.replicas_per_master = 0;
  if (source) {
    // As stream_bench's source: diskless syncs that start at once (the fixture sets the delay to
    // 0), a backlog that holds a whole drain.
    o.extra_args = {"--repl-diskless-sync", "yes", "--repl-backlog-size", "1gb"};
  }
  auto cluster = std::make_unique<RedisCluster>(o);
  if (source) {
    // A stopped consumer's output buffer is never cut off.
    for (RedisServer* m : cluster->masters()) {
      RespValue reply =
          m->client(30s).command({"CONFIG", "SET", "client-output-buffer-limit", "replica 0 0 0"});
      if (reply.isError()) {
        throw std::runtime_error("CONFIG SET client-output-buffer-limit: " + reply.toString());
      }
    }
  }
  return cluster;
}

std::vector<Shard> shardsOf(RedisCluster& cluster) {
  std::vector<Shard> out;
  for (const auto& s : cluster.shards()) {
    if (s.slots.empty()) continue;
    Shard shard;
    shard.master = s.master;
    shard.slots = s.slots;
    shard.slot = s.slots[0].first;
    shard.label = shardLabel(s.slots);
    shard.tag = std::string(cluster::slotTag(shard.slot));
    out.push_back(std::move(shard));
  }
  std::sort(out.begin(), out.end(), [](const Shard& a, const Shard& b) { return a.slot < b.slot; });
  return out;
}

/** The index in `shards` of every slot's owner. */
std::vector<uint8_t> slotOwners(const std::vector<Shard>& shards) {
  std::vector<uint8_t> owner(cluster::kSlots, 0xff);
  for (size_t i = 0; i < shards.size(); ++i) {
    for (const auto& [first, last] : shards[i].slots) {
      for (int s = first; s <= last; ++s) owner[static_cast<size_t>(s)] = static_cast<uint8_t>(i);
    }
  }
  for (int s = 0; s < cluster::kSlots; ++s) {
    if (owner[static_cast<size_t>(s)] == 0xff) {
      throw std::runtime_error("slot " + std::to_string(s) + " has no master in the source");
    }
  }
  return owner;
}

/**
 * Every source master lists exactly one replica, online (the agent's link of its shard, or
 * native replica i), or this throws. Returns connected_slaves of each master.
 */
std::vector<int64_t> checkSourceReplicas(const std::vector<Shard>& shards, const std::string& who,
                                         const std::string& when) {
  std::vector<int64_t> out;
  for (const Shard& s : shards) {
    auto info = s.master->client(10s).info("replication");
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
    if (connected != 1 || online != 1) {
      std::string why = "source master ";
      for (const std::string& part :
           {s.master->address(), std::string(" (shard "), s.label, std::string(") lists "),
            std::to_string(connected), std::string(" replica(s), "), std::to_string(online),
            std::string(" online, "), when, std::string("; "), who,
            std::string(" must be exactly 1 (INFO replication):"), listed}) {
        why += part;
      }
      throw std::runtime_error(why);
    }
    out.push_back(connected);
  }
  return out;
}

// ---- consumers ----

enum class Kind { Native, Agent };
constexpr std::array<Kind, 2> kKinds = {Kind::Native, Kind::Agent};

std::string kindName(Kind kind) {
  return kind == Kind::Native ? "native_replicas" : "agent_cluster";
}

std::string agentYaml(const std::string& state_dir, const std::string& admin,
                      const std::vector<std::string>& source_seeds,
                      const std::vector<std::string>& target_seeds, int threads) {
  auto list = [](const std::vector<std::string>& seeds) {
    std::string out;
    for (const auto& s : seeds) out += (out.empty() ? "\"" : ", \"") + s + "\"";
    return "[" + out + "]";
  };
  std::ostringstream yaml;
  yaml << "agent:\n"
       << "  state_dir: \"" << state_dir << "\"\n"
       << "  admin_listen: \"" << admin << "\"\n"
       << "  log_level: info\n"
       << "  threads: " << threads << "\n"
       << "clusters:\n"
       << "  src: {type: redis_cluster, addresses: " << list(source_seeds) << "}\n"
       << "  dst: {type: redis_cluster, addresses: " << list(target_seeds) << "}\n"
       << "pipelines:\n"
       << "  - {name: " << kPipeline << ", source: src, target: dst, checkpoint_interval: 1s}\n";
  return yaml.str();
}

/**
 * The consumer side of a source cluster, streaming: one native replica per source master, or the
 * agent with a fresh state_dir and a fresh target cluster of as many masters. Members are
 * declared so that the agent is stopped first, then the target nodes, then the directory removed.
 */
class Consumer {
 public:
  Consumer(Kind kind, RedisCluster& source, const std::vector<Shard>& shards,
           const Options& options)
      : kind_(kind), shards_(shards) {
    if (kind_ == Kind::Native) {
      for (const Shard& s : shards_) {
        replicas_.push_back(
            std::make_unique<RedisServer>(std::vector<std::string>{}, std::chrono::seconds(30)));
        RespClient client = replicas_.back()->client(30s);
        RespValue reply =
            client.command({"REPLICAOF", "127.0.0.1", std::to_string(s.master->port())});
        if (reply.isError()) {
          throw std::runtime_error("REPLICAOF " + s.master->address() + ": " + reply.toString());
        }
        waitFor("native replica of " + s.master->address() + ": its link", 60s, [&] {
          auto info = client.info("replication");
          return info["master_link_status"] == "up" && info["master_sync_in_progress"] == "0";
        });
      }
    } else {
      target_ = startCluster(static_cast<int>(shards_.size()), /*source=*/false);
      dir_ = std::make_unique<TempDir>("xdcr-cluster-bench");
      admin_ = "127.0.0.1:" + std::to_string(test::freePort());
      const std::string config = dir_->file("xdcr.yaml");
      test::writeFileText(config, agentYaml(dir_->file("state"), admin_, source.seeds(),
                                            target_->seeds(), options.agent_threads));
      agent_ = std::make_unique<AgentProcess>(config, dir_->file("agent.log"),
                                              std::vector<std::string>{}, options.agent);
      waitFor("the agent's /readyz", 60s,
              [&] { return httpGet(admin_, "/readyz", 2s).first == 200; });
    }
    // Streaming, shown end to end for every shard: a key written into it now lands.
    for (size_t i = 0; i < shards_.size(); ++i) {
      const std::string key = "warmup:{" + shards_[i].tag + "}";
      RespValue reply = shards_[i].master->client(30s).command({"SET", key, "1"});
      if (reply.isError()) {
        throw std::runtime_error("SET " + key + ": " + reply.toString());
      }
      RespClient dst = lands(i).client(30s);
      waitFor("the warm-up key of shard " + shards_[i].label, 60s, [&] {
        return dst.command({"EXISTS", key}).integer() == 1;
      });
    }
  }

  Kind kind() const { return kind_; }
  bool isAgent() const { return kind_ == Kind::Agent; }
  /** The server where shard i's writes land: replica i, or the target master of its slot. */
  RedisServer& lands(size_t i) {
    return isAgent() ? target_->nodeForSlot(shards_.at(i).slot) : *replicas_.at(i);
  }
  /** The consuming processes: the agent, or every replica. */
  std::vector<pid_t> pids() const {
    if (agent_) return {agent_->pid()};
    std::vector<pid_t> out;
    for (const auto& r : replicas_) out.push_back(r->pid());
    return out;
  }
  /** The agent's target masters (none for native replicas: they are their own targets). */
  std::vector<pid_t> targetPids() const {
    std::vector<pid_t> out;
    if (target_) {
      for (const auto& n : target_->nodes()) out.push_back(n->pid());
    }
    return out;
  }
  /** The agent's target masters (empty for native replicas). */
  std::vector<RedisServer*> targetMasters() {
    return target_ ? target_->masters() : std::vector<RedisServer*>{};
  }

  /** Throws with a log tail if the agent or a replica/target node has ended. */
  void checkAlive() {
    if (agent_ && !agent_->running()) {
      throw std::runtime_error("the agent " + agent_->describeState() + "\n" + agent_->logTail(30));
    }
    for (auto& r : replicas_) {
      if (!r->running()) {
        throw std::runtime_error("a native replica ended\n" + r->logTail(20));
      }
    }
    if (target_) {
      for (const auto& n : target_->nodes()) {
        if (!n->running()) {
          throw std::runtime_error("a target cluster node ended\n" + n->logTail(20));
        }
      }
    }
  }
  std::string logTail() const {
    if (agent_) return agent_->logTail(30);
    return replicas_.empty() ? "" : replicas_.front()->logTail(20);
  }
  /** The agent's /metrics, "" for native replicas or when it cannot be read. */
  std::string metrics() const {
    if (!agent_) return "";
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
      if (pred()) return;
      if (Clock::now() > deadline) {
        throw std::runtime_error("timed out waiting for " + what + "\n" + logTail());
      }
      std::this_thread::sleep_for(20ms);
    }
  }

  Kind kind_;
  std::vector<Shard> shards_;
  std::vector<std::unique_ptr<RedisServer>> replicas_;
  std::unique_ptr<RedisCluster> target_;
  std::unique_ptr<TempDir> dir_;
  std::string admin_;
  std::unique_ptr<AgentProcess> agent_;
};

// ---- the load ----

/** What one shard got of a drain's load. */
struct ShardLoad {
  int64_t keys = 0;
  int64_t first_key = -1;  // the lowest and highest i of key:<i> in this shard
  int64_t last_key = -1;
  std::string sentinel;
};

/**
 * SET key:<i> value PXAT <now+1h> for i in [0, count), each on its slot's master (one pipelined
 * connection per master, batches of kBatch), then one sentinel per shard, last on its master's
 * connection. Returns the seconds it took.
 */
double writeLoad(const std::vector<Shard>& shards, const std::vector<uint8_t>& owner, int64_t count,
                 const std::string& value, std::vector<ShardLoad>& loads) {
  const size_t n = shards.size();
  std::vector<std::unique_ptr<PipelinedWriter>> writers;
  for (const Shard& s : shards) {
    writers.push_back(std::make_unique<PipelinedWriter>(s.master->port(), 30s));
  }
  std::vector<std::string> batches(n);
  std::vector<size_t> queued(n, 0);
  for (auto& b : batches) b.reserve(kBatch * (value.size() + 80));
  loads.assign(n, ShardLoad{});
  const auto start = Clock::now();
  std::string deadline;
  for (int64_t i = 0; i < count; ++i) {
    if ((i & 0xfff) == 0) {
      checkInterrupted();
      deadline = std::to_string(test::unixTimeMs() + kHourMs);
    }
    const std::string key = "key:" + std::to_string(i);
    const size_t s = owner[static_cast<size_t>(cluster::keySlot(key))];
    appendCommand(batches[s], {"SET", key, value, "PXAT", deadline});
    ShardLoad& load = loads[s];
    if (load.first_key < 0) load.first_key = i;
    load.last_key = i;
    ++load.keys;
    if (++queued[s] == kBatch) {
      writers[s]->roundTrip(batches[s], queued[s]);
      batches[s].clear();
      queued[s] = 0;
    }
  }
  for (size_t s = 0; s < n; ++s) {
    loads[s].sentinel = "sentinel:{" + shards[s].tag + "}";
    appendCommand(batches[s], {"SET", loads[s].sentinel, "1"});
    writers[s]->roundTrip(batches[s], queued[s] + 1);
  }
  for (size_t s = 0; s < n; ++s) {
    if (writers[s]->errors() > 0) {
      throw std::runtime_error("source master " + shards[s].master->address() + " refused " +
                               std::to_string(writers[s]->errors()) +
                               " writes: " + writers[s]->firstError());
    }
  }
  return secondsSince(start);
}

// ---- one measurement ----

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
std::optional<double> delta(const std::optional<double>& before,
                            const std::optional<double>& after) {
  if (!before || !after) return std::nullopt;
  return *after - *before;
}

int64_t dbsize(const RedisServer& server) {
  return server.client(30s).command({"DBSIZE"}).integer();
}

/** Keys of `server` matching `pattern` (SCAN, COUNT 10000). */
int64_t countMatching(const RedisServer& server, const std::string& pattern) {
  RespClient client = server.client(30s);
  std::string cursor = "0";
  int64_t found = 0;
  do {
    checkInterrupted();
    RespValue reply = client.command({"SCAN", cursor, "MATCH", pattern, "COUNT", "10000"});
    if (!reply.isArray() || reply.array().size() != 2) {
      throw std::runtime_error("SCAN on " + server.address() + ": " + reply.toString());
    }
    cursor = reply.array()[0].str();
    found += static_cast<int64_t>(reply.array()[1].array().size());
  } while (cursor != "0");
  return found;
}

struct ShardResult {
  std::string label;
  std::string source;                     // the source master's address
  int64_t keys = 0;                       // bench keys written into it
  double drain_s = 0;                     // until its sentinel landed
  std::optional<double> agent_mutations;  // xdcr_source_events_total{shard,kind="mutation"}
  nlohmann::json toJson() const {
    return {{"shard", label},
            {"source", source},
            {"keys", keys},
            {"drain_s", drain_s},
            {"agent_mutation_events", jsonOrNull(agent_mutations)}};
  }
};

struct Measurement {
  Kind kind = Kind::Native;
  int64_t count = 0;
  double write_s = 0;
  double drain_s = 0;                   // until the slowest shard had landed
  std::optional<double> cpu_s;          // the consumers: the agent, or every replica summed
  std::optional<double> target_cpu_s;   // the agent's target masters
  std::optional<double> source_cpu_s;   // the source masters, over the drain
  std::optional<double> foreign_cores;  // other processes' CPU during the drain
  std::optional<double> hwm;            // VmHWM of the consumers, summed
  std::vector<ShardResult> shards;
  std::vector<int64_t> source_replicas;  // per source master, after the drain (checked: 1)
  int64_t source_keys = 0;               // DBSIZE summed over the source masters
  int64_t landed_keys = 0;               // the same over the replicas / target masters,
  int64_t agent_keys = 0;                // less the agent's own keys (__xdcr_marker__:*)
  std::optional<double> redirects;       // xdcr_target_redirects_total, every kind and shard
  std::string error;

  double opsPerSecond() const { return drain_s > 0 ? static_cast<double>(count) / drain_s : 0; }
  std::optional<double> cpuPerMillion() const {
    if (!cpu_s || count <= 0) return std::nullopt;
    return *cpu_s / (static_cast<double>(count) / 1e6);
  }
  /** The consumers' CPU divided by the number of shards (the agent: one thread, S links). */
  std::optional<double> cpuPerShard() const {
    if (!cpu_s || shards.empty()) return std::nullopt;
    return *cpu_s / static_cast<double>(shards.size());
  }
  std::optional<double> targetCpuPerMillion() const {
    if (!target_cpu_s || count <= 0) return std::nullopt;
    return *target_cpu_s / (static_cast<double>(count) / 1e6);
  }
  nlohmann::json toJson() const {
    nlohmann::json shards_json = nlohmann::json::array();
    for (const auto& s : shards) shards_json.push_back(s.toJson());
    return {{"consumer", kindName(kind)},
            {"ops", count},
            {"write_s", write_s},
            {"drain_s", drain_s},
            {"ops_per_s", opsPerSecond()},
            {"cpu_s", jsonOrNull(cpu_s)},
            {"cpu_s_per_million", jsonOrNull(cpuPerMillion())},
            {"cpu_s_per_shard", jsonOrNull(cpuPerShard())},
            {"target_cpu_s", jsonOrNull(target_cpu_s)},
            {"target_cpu_s_per_million", jsonOrNull(targetCpuPerMillion())},
            {"source_cpu_s", jsonOrNull(source_cpu_s)},
            {"foreign_cores", jsonOrNull(foreign_cores)},
            {"vmhwm_bytes", jsonOrNull(hwm)},
            {"shards", shards_json},
            {"source_replicas", source_replicas},
            {"source_keys", source_keys},
            {"landed_keys", landed_keys},
            {"agent_keys", agent_keys},
            {"target_redirects", jsonOrNull(redirects)},
            {"error", error}};
  }
};

/** The sum of every sample of `name` in a /metrics text whose labels contain `labels_part`. */
std::optional<double> metricSum(const std::string& text, const std::string& name,
                                const std::string& labels_part) {
  std::optional<double> sum;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + "{", 0) != 0 || line.find(labels_part) == std::string::npos) continue;
    const size_t space = line.rfind(' ');
    try {
      sum = sum.value_or(0) + std::stod(line.substr(space + 1));
    } catch (const std::logic_error&) {
    }
  }
  return sum;
}

void drain(Measurement& m, const std::vector<Shard>& shards, Consumer& consumer,
           const std::string& value, const Options& options) {
  const std::vector<uint8_t> owner = slotOwners(shards);
  const std::vector<pid_t> pids = consumer.pids();
  const std::vector<pid_t> target_pids = consumer.targetPids();
  std::vector<pid_t> source_pids;
  for (const Shard& s : shards) source_pids.push_back(s.master->pid());
  std::vector<RespClient> polls;
  for (size_t i = 0; i < shards.size(); ++i) polls.push_back(consumer.lands(i).client(10s));

  std::vector<ShardLoad> loads;
  std::optional<double> cpu0, target_cpu0, source_cpu0;
  Clock::time_point start;
  {
    std::vector<std::unique_ptr<StoppedProcess>> stopped;
    for (pid_t pid : pids) stopped.push_back(std::make_unique<StoppedProcess>(pid));
    m.write_s = writeLoad(shards, owner, options.ops, value, loads);
    cpu0 = cpuOf(pids);
    target_cpu0 = cpuOf(target_pids);
    source_cpu0 = cpuOf(source_pids);
    start = Clock::now();
    for (auto& s : stopped) s->resume();
  }
  std::vector<pid_t> ours = pids;
  ours.insert(ours.end(), target_pids.begin(), target_pids.end());
  ours.insert(ours.end(), source_pids.begin(), source_pids.end());
  const ForeignLoad foreign(ours);
  const auto deadline = start + std::chrono::seconds(options.timeout_s);
  std::vector<std::optional<double>> arrived(shards.size());
  for (uint64_t polls_done = 0;; ++polls_done) {
    size_t missing = 0;
    for (size_t i = 0; i < polls.size(); ++i) {
      if (arrived[i]) continue;
      if (polls[i].command({"EXISTS", loads[i].sentinel}).integer() == 1) {
        arrived[i] = secondsSince(start);
      } else {
        ++missing;
      }
    }
    if (missing == 0) break;
    if (polls_done % 256 == 0) {
      checkInterrupted();
      consumer.checkAlive();
    }
    if (Clock::now() > deadline) {
      throw std::runtime_error(std::to_string(missing) + " shard sentinel(s) missing after " +
                               std::to_string(options.timeout_s) + " s\n" + consumer.logTail());
    }
    std::this_thread::sleep_for(1ms);
  }
  m.foreign_cores = foreign.cores();
  m.cpu_s = delta(cpu0, cpuOf(pids));
  m.target_cpu_s = delta(target_cpu0, cpuOf(target_pids));
  m.source_cpu_s = delta(source_cpu0, cpuOf(source_pids));
  m.hwm = sumOver(pids, [](pid_t pid) { return statusBytes(pid, "VmHWM"); });
  m.count = options.ops;

  const std::string metrics = consumer.metrics();
  for (size_t i = 0; i < shards.size(); ++i) {
    ShardResult r;
    r.label = shards[i].label;
    r.source = shards[i].master->address();
    r.keys = loads[i].keys;
    r.drain_s = *arrived[i];
    if (consumer.isAgent()) {
      r.agent_mutations = metricValue(metrics, "xdcr_source_events_total",
                                      std::string("pipeline=\"") + kPipeline + "\",shard=\"" +
                                          r.label + "\",kind=\"mutation\"");
    }
    m.drain_s = std::max(m.drain_s, r.drain_s);
    m.shards.push_back(r);
  }
  if (consumer.isAgent() && !metrics.empty()) {
    // The family lists only the kinds that happened: none is 0.
    m.redirects = metricSum(metrics, "xdcr_target_redirects_total", "pipeline=\"").value_or(0);
  }

  // Still one replica per source master: the agent's link of that shard, or replica i.
  m.source_replicas = checkSourceReplicas(shards, kindName(consumer.kind()), "after the drain");

  // Everything landed: the key counts, and the first and last key of each shard with the
  // source's deadline exactly (no clamp).
  for (size_t i = 0; i < shards.size(); ++i) {
    const int64_t src = dbsize(*shards[i].master);
    m.source_keys += src;
    if (!consumer.isAgent()) {
      const int64_t dst = dbsize(consumer.lands(i));
      m.landed_keys += dst;
      if (dst != src) {
        throw std::runtime_error("native replica of " + shards[i].master->address() + " holds " +
                                 std::to_string(dst) + " keys, its master " + std::to_string(src));
      }
    }
    if (loads[i].keys == 0) continue;
    RespClient source_client = shards[i].master->client(10s);
    for (int64_t k : {loads[i].first_key, loads[i].last_key}) {
      const std::string key = "key:" + std::to_string(k);
      const int64_t want = source_client.command({"PEXPIRETIME", key}).integer();
      const int64_t got = polls[i].command({"PEXPIRETIME", key}).integer();
      if (got != want) {
        throw std::runtime_error(key + " (shard " + shards[i].label + "): PEXPIRETIME " +
                                 std::to_string(got) + " where it landed, " + std::to_string(want) +
                                 " on the source");
      }
    }
  }
  if (consumer.isAgent()) {
    int64_t total = 0;
    for (RedisServer* t : consumer.targetMasters()) {
      total += dbsize(*t);
      m.agent_keys += countMatching(*t, "__xdcr_marker__:*");
    }
    m.landed_keys = total - m.agent_keys;
    if (m.landed_keys != m.source_keys) {
      throw std::runtime_error("the target cluster holds " + std::to_string(m.landed_keys) +
                               " keys (and " + std::to_string(m.agent_keys) +
                               " of the agent's), the source cluster " +
                               std::to_string(m.source_keys));
    }
  }
}

Measurement measure(Kind kind, const std::string& value, const Options& options) {
  Measurement m;
  m.kind = kind;
  try {
    waitForQuiet();
    auto source = startCluster(options.shards, /*source=*/true);
    const std::vector<Shard> shards = shardsOf(*source);
    if (static_cast<int>(shards.size()) != options.shards) {
      throw std::runtime_error("the source cluster has " + std::to_string(shards.size()) +
                               " shards with slots: " + source->describe());
    }
    Consumer consumer(kind, *source, shards, options);
    checkSourceReplicas(shards, kindName(kind), "once streaming");
    progress("  " + kindName(kind) + ": drain of " + std::to_string(options.ops) + " keys over " +
             std::to_string(shards.size()) + " shards");
    drain(m, shards, consumer, value, options);
    std::string each;
    for (const auto& s : m.shards) {
      each += (each.empty() ? "" : " / ") + cell(s.drain_s) + " s (" + std::to_string(s.keys) + ")";
    }
    progress("  " + kindName(kind) + ": " + cell(m.opsPerSecond(), 0) + " ops/s (" +
             cell(m.drain_s) + " s; each shard: " + each + "; written in " + cell(m.write_s, 2) +
             " s), CPU " + cell(m.cpu_s, 2) + " s, " + cell(m.cpuPerMillion(), 2) + " s/M, " +
             cell(m.cpuPerShard(), 2) + " s per shard" +
             (m.target_cpu_s ? ", its target masters " + cell(m.targetCpuPerMillion(), 2) + " s/M"
                             : std::string()) +
             ", VmHWM " + cell(m.hwm ? std::optional(*m.hwm / 1048576.0) : std::nullopt, 1) +
             " MiB, keys " + std::to_string(m.landed_keys) + "/" + std::to_string(m.source_keys) +
             ", other load " + cell(m.foreign_cores, 2) + " cores");
  } catch (const Interrupted&) {
    throw;
  } catch (const std::exception& e) {
    m.error = e.what();
    progress("  " + kindName(kind) + " FAILED: " + m.error);
  }
  return m;
}

// ---- the runs ----

nlohmann::json runAll(const std::string& value, const Options& options, bool& ok) {
  nlohmann::json runs = nlohmann::json::array();
  std::map<Kind, std::vector<double>> ops, drain_s, cpu, cpu_per_m, cpu_per_shard, hwm, target_cpu,
      target_cpu_per_m, source_cpu;
  std::map<Kind, std::vector<std::vector<double>>> shard_s;  // [kind][shard] -> runs
  std::map<Kind, double> foreign_max;
  std::map<Kind, int64_t> errors;
  std::map<Kind, std::vector<int64_t>> replicas;
  std::vector<double> ratios, cpu_ratios;
  std::vector<std::string> labels;
  for (int run = 1; run <= options.runs; ++run) {
    std::map<Kind, Measurement> results;
    std::string order;
    for (size_t step = 0; step < kKinds.size(); ++step) {
      const Kind kind = kKinds[(step + static_cast<size_t>(run - 1)) % kKinds.size()];
      order += (order.empty() ? "" : ",") + kindName(kind);
      progress("cluster run " + std::to_string(run) + "/" + std::to_string(options.runs) + ": " +
               kindName(kind));
      results[kind] = measure(kind, value, options);
    }
    nlohmann::json run_json = {{"run", run}, {"order", order}};
    for (auto& [kind, m] : results) {
      run_json[kindName(kind)] = m.toJson();
      if (!m.error.empty()) {
        ok = false;
        ++errors[kind];
        continue;
      }
      ops[kind].push_back(m.opsPerSecond());
      drain_s[kind].push_back(m.drain_s);
      if (m.cpu_s) cpu[kind].push_back(*m.cpu_s);
      if (m.cpuPerMillion()) cpu_per_m[kind].push_back(*m.cpuPerMillion());
      if (m.cpuPerShard()) cpu_per_shard[kind].push_back(*m.cpuPerShard());
      if (m.hwm) hwm[kind].push_back(*m.hwm);
      if (m.target_cpu_s) target_cpu[kind].push_back(*m.target_cpu_s);
      if (m.targetCpuPerMillion()) target_cpu_per_m[kind].push_back(*m.targetCpuPerMillion());
      if (m.source_cpu_s) source_cpu[kind].push_back(*m.source_cpu_s);
      if (m.foreign_cores) foreign_max[kind] = std::max(foreign_max[kind], *m.foreign_cores);
      auto& per_shard = shard_s[kind];
      per_shard.resize(std::max(per_shard.size(), m.shards.size()));
      for (size_t i = 0; i < m.shards.size(); ++i) per_shard[i].push_back(m.shards[i].drain_s);
      if (labels.empty()) {
        for (const auto& s : m.shards) labels.push_back(s.label);
      }
      replicas[kind] = m.source_replicas;
    }
    const Measurement& a = results[Kind::Agent];
    const Measurement& n = results[Kind::Native];
    std::optional<double> ratio, cpu_ratio;
    if (a.error.empty() && n.error.empty() && n.opsPerSecond() > 0) {
      ratio = a.opsPerSecond() / n.opsPerSecond();
      ratios.push_back(*ratio);
      if (a.cpu_s && n.cpu_s && *n.cpu_s > 0) {
        cpu_ratio = *a.cpu_s / *n.cpu_s;
        cpu_ratios.push_back(*cpu_ratio);
      }
    }
    run_json["ratio"] = jsonOrNull(ratio);
    run_json["cpu_ratio"] = jsonOrNull(cpu_ratio);
    progress("cluster run " + std::to_string(run) + ": agent/native ops/s " + cell(ratio, 2) +
             ", CPU " + cell(cpu_ratio, 2));
    runs.push_back(run_json);
  }
  nlohmann::json med;
  for (Kind kind : kKinds) {
    nlohmann::json per_shard = nlohmann::json::array();
    for (const auto& times : shard_s[kind]) per_shard.push_back(jsonOrNull(median(times)));
    med[kindName(kind)] = {
        {"ops_per_s", jsonOrNull(median(ops[kind]))},
        {"drain_s", jsonOrNull(median(drain_s[kind]))},
        {"shard_drain_s", per_shard},
        {"cpu_s", jsonOrNull(median(cpu[kind]))},
        {"cpu_s_per_million", jsonOrNull(median(cpu_per_m[kind]))},
        {"cpu_s_per_shard", jsonOrNull(median(cpu_per_shard[kind]))},
        {"vmhwm_bytes", jsonOrNull(median(hwm[kind]))},
        {"target_cpu_s", jsonOrNull(median(target_cpu[kind]))},
        {"target_cpu_s_per_million", jsonOrNull(median(target_cpu_per_m[kind]))},
        {"source_cpu_s", jsonOrNull(median(source_cpu[kind]))},
        {"foreign_cores_max", foreign_max[kind]},
        {"source_replicas", replicas.count(kind) ? nlohmann::json(replicas[kind]) : nullptr},
        {"errors", errors[kind]}};
  }
  med["ratio"] = jsonOrNull(median(ratios));
  med["cpu_ratio"] = jsonOrNull(median(cpu_ratios));
  return {{"ops", options.ops},
          {"shards", options.shards},
          {"shard_labels", labels},
          {"agent_threads", options.agent_threads},
          {"cpu_per_shard",
           "the consumers' CPU s / shards (the agent serves every shard's link "
           "on agent_threads threads; the native side is one process per shard)"},
          {"runs", runs},
          {"median", med}};
}

int runBenchmark(const Options& options) {
  const std::string value = makeValue(options.value_size);
  nlohmann::json out = {{"benchmark", "cluster"},
                        {"unix_time", static_cast<int64_t>(std::time(nullptr))},
                        {"cpus", static_cast<int64_t>(::sysconf(_SC_NPROCESSORS_ONLN))},
                        {"agent_binary", options.agent},
                        {"value_size", options.value_size}};
  {
    RedisServer probe({}, std::chrono::seconds(30));
    out["redis_version"] = probe.client(10s).info("server")["redis_version"];
  }
  bool ok = true;
  progress("cluster: " + std::to_string(options.ops) + " SET PXAT over a " +
           std::to_string(options.shards) + "-master source cluster, " +
           std::to_string(options.runs) + " runs x " + std::to_string(options.shards) +
           " native replicas, the agent into a " + std::to_string(options.shards) +
           "-master target cluster");
  out["cluster"] = runAll(value, options, ok);
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
    std::cerr << "cluster_bench: " << e.what() << "\n";
    return 1;
  }
}
