// Full-sync benchmark (a measurement, not a test): the agent's full sync of N keys against a
// native Redis replica's full sync of the same data, on the same machine, in the same run.
//
//   native  a fresh redis-server, REPLICAOF the source; from the REPLICAOF to
//           master_link_status:up and master_sync_in_progress:0 (INFO replication every 10 ms).
//   agent   a fresh target and an empty state_dir, the agent started; from its start to the
//           "snapshot applied:" log line, and to the target holding as many keys as the source
//           (DBSIZE every 10 ms, the agent's __xdcr_marker__ keys not counted). "agent s" is the
//           later of the two: both say the target holds the snapshot. Also the agent's CPU
//           seconds and peak RSS (VmHWM) at that point.
//
// Each is run R times, interleaved: with --maxttl both, every run measures native, agent with
// the clamp and agent without it, the order rotated from run to run (so none always gets the
// warmer caches); with on|off odd runs go native first, even runs agent first. The source is
// filled once. The table gives every run and the medians; the ratio is agent s / native s of the
// same run (issue 3's target: <= 1.5). Every process is a child stopped by its PID (RAII, also
// on errors and on SIGINT/SIGTERM; PR_SET_PDEATHSIG if this process is killed).
//
//   full_sync_bench [--keys N] [--runs R] [--maxttl on|off|both] [--json FILE] [--agent PATH]
//                   [--value-size BYTES] [--timeout SECONDS] [--quiet-wait SECONDS]

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_common.h"
#include "tests/support/harness.h"

namespace xdcr::test {
namespace {

using namespace std::chrono_literals;
using bench::cell;
using bench::checkInterrupted;
using bench::Clock;
using bench::Interrupted;
using bench::jsonOrNull;
using bench::median;
using bench::secondsSince;

constexpr auto kPollInterval = 10ms;
constexpr int64_t kMinute = 60 * 1000;
constexpr int64_t kHour = 60 * kMinute;
constexpr const char* kAppliedMarker = "snapshot applied:";

#ifndef XDCR_AGENT_BINARY
#error "XDCR_AGENT_BINARY must be defined by bench/CMakeLists.txt"
#endif

/** $XDCR_AGENT_BINARY from the environment when set, else this build's agent. */
std::string defaultAgent() {
  const char* from_env = std::getenv("XDCR_AGENT_BINARY");
  return from_env != nullptr && *from_env != '\0' ? from_env : XDCR_AGENT_BINARY;
}

struct Options {
  int64_t keys = 1000000;
  int runs = 3;
  std::vector<bool> maxttl = {true};  // the agent's modes: clamp on and/or off
  std::string json_path;
  std::string agent = defaultAgent();
  size_t value_size = 100;
  int timeout_s = 600;
  int quiet_wait_s = 0;
};

std::string modeName(bool maxttl) {
  return maxttl ? "on" : "off";
}

[[noreturn]] void usage(const std::string& error) {
  if (!error.empty()) {
    std::cerr << "full_sync_bench: " << error << "\n";
  }
  std::cerr << "usage: full_sync_bench [--keys N] [--runs R] [--maxttl on|off|both] [--json FILE]\n"
               "                       [--agent PATH] [--value-size BYTES] [--timeout SECONDS]\n"
               "                       [--quiet-wait SECONDS]\n"
               "  --keys N          keys on the source (default 1000000)\n"
               "  --runs R          native and agent full syncs, each (default 3)\n"
               "  --maxttl MODE     on: a target collection (c:*, half the keys) with max_ttl 1h\n"
               "                    that clamps; off: no maxTTL at all; both: each run measures\n"
               "                    the agent both ways against one native sync (default on)\n"
               "  --json FILE       also write the results as JSON\n"
               "  --agent PATH      the xdcr-agent binary (default: $XDCR_AGENT_BINARY, else\n"
               "                    this build's)\n"
               "  --value-size B    size of the string values, 80 % of the keys (default 100)\n"
               "  --timeout S       bound on each full sync (default 600)\n"
               "  --quiet-wait S    before each sync, wait for other processes to leave the\n"
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
      if (arg == "--keys") {
        options.keys = std::stoll(value());
      } else if (arg == "--runs") {
        options.runs = std::stoi(value());
      } else if (arg == "--maxttl") {
        const std::string v = value();
        if (v == "on") {
          options.maxttl = {true};
        } else if (v == "off") {
          options.maxttl = {false};
        } else if (v == "both") {
          options.maxttl = {true, false};
        } else {
          usage("--maxttl takes on, off or both");
        }
      } else if (arg == "--json") {
        options.json_path = value();
      } else if (arg == "--agent") {
        options.agent = value();
      } else if (arg == "--value-size") {
        options.value_size = static_cast<size_t>(std::stoul(value()));
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
  if (options.keys <= 0 || options.runs <= 0 || options.timeout_s <= 0 || options.value_size < 45) {
    usage("--keys, --runs and --timeout must be > 0, --value-size >= 45");
  }
  return options;
}

int64_t dbSize(RespClient& client) {
  return client.command({"DBSIZE"}).integer();
}

std::string agentConfigYaml(const std::string& state_dir, uint16_t source_port,
                            uint16_t target_port, bool maxttl) {
  std::vector<BucketSpec> buckets;
  if (maxttl) buckets = {{0, 0, {{"capped", "c:*", kHour / 1000}}}};
  return pipelineConfigYaml(state_dir, source_port, target_port, buckets);
}

std::optional<double> delta(const std::optional<double>& before,
                            const std::optional<double>& after) {
  if (!before || !after) return std::nullopt;
  return *after - *before;
}

struct NativeTimes {
  double seconds = 0;
  std::optional<double> cpu_s;          // the replica's CPU over the full sync
  std::optional<double> source_cpu_s;   // the source's
  std::optional<double> foreign_cores;  // other processes' load meanwhile
};

/** A native replica's full sync: REPLICAOF until the link is up and no sync is in progress. */
NativeTimes measureNative(RedisServer& source, int64_t source_keys, const Options& options) {
  RedisServer replica({}, std::chrono::seconds(30));
  RespClient client = replica.client(std::chrono::seconds(30));
  const auto cpu0 = bench::cpuSeconds(replica.pid());
  const auto source_cpu0 = bench::cpuSeconds(source.pid());
  const bench::ForeignLoad foreign({replica.pid(), source.pid()});
  const auto start = Clock::now();
  RespValue reply = client.command({"REPLICAOF", "127.0.0.1", std::to_string(source.port())});
  if (reply.isError()) {
    throw std::runtime_error("REPLICAOF: " + reply.toString());
  }
  const auto deadline = start + std::chrono::seconds(options.timeout_s);
  while (true) {
    checkInterrupted();
    auto info = client.info("replication");
    if (info["master_link_status"] == "up" && info["master_sync_in_progress"] == "0") {
      break;
    }
    if (Clock::now() > deadline) {
      throw std::runtime_error("native replica not in sync after " +
                               std::to_string(options.timeout_s) + " s\n" + replica.logTail(20));
    }
    std::this_thread::sleep_for(kPollInterval);
  }
  NativeTimes times;
  times.seconds = secondsSince(start);
  times.foreign_cores = foreign.cores();
  times.cpu_s = delta(cpu0, bench::cpuSeconds(replica.pid()));
  times.source_cpu_s = delta(source_cpu0, bench::cpuSeconds(source.pid()));
  const int64_t keys = dbSize(client);
  if (keys != source_keys) {
    throw std::runtime_error("native replica holds " + std::to_string(keys) + " keys, the source " +
                             std::to_string(source_keys));
  }
  return times;  // ~RedisServer stops the replica by PID
}

struct AgentTimes {
  double log_s = 0;             // "snapshot applied:" logged
  double dbsize_s = 0;          // target holds the source's number of keys (markers not counted)
  std::optional<double> cpu_s;  // the agent's utime + stime at that point
  std::optional<double> vmhwm;  // the agent's peak RSS at that point
  std::optional<double> foreign_cores;  // other processes' load meanwhile (bench::ForeignLoad)
  std::optional<double> target_cpu_s;   // the target redis-server's CPU over the full sync
  std::optional<double> source_cpu_s;   // the source's (the RDB is made while it is sent)
  std::string applied_line;

  double seconds() const { return std::max(log_s, dbsize_s); }
};

/** The agent's full sync onto a fresh target with an empty state_dir. */
AgentTimes measureAgent(RedisServer& source, int64_t source_keys, bool maxttl,
                        const Options& options) {
  RedisServer target({}, std::chrono::seconds(30));
  TempDir dir("xdcr-bench");
  const std::string config = dir.file("xdcr.yaml");
  writeFileText(config, agentConfigYaml(dir.file("state"), source.port(), target.port(), maxttl));
  RespClient client = target.client(std::chrono::seconds(30));
  const auto target_cpu0 = bench::cpuSeconds(target.pid());
  const auto source_cpu0 = bench::cpuSeconds(source.pid());
  const auto start = Clock::now();
  AgentProcess agent(config, dir.file("agent.log"), {}, options.agent);
  const bench::ForeignLoad foreign({agent.pid(), target.pid(), source.pid()});
  LogWatcher watcher(agent.logPath(), kAppliedMarker);
  AgentTimes times;
  std::optional<double> log_s;
  std::optional<double> dbsize_s;
  const auto deadline = start + std::chrono::seconds(options.timeout_s);
  while (!log_s || !dbsize_s) {
    checkInterrupted();
    if (!log_s && watcher.poll() > 0) {
      log_s = secondsSince(start);
      times.applied_line = watcher.matches().front();
    }
    // The agent also writes its target-loss marker key(s) into db 0: DBSIZE counts them, so the
    // cheap DBSIZE says "maybe", and only then the markers are counted out (KEYS is slow on a
    // million keys; it runs once or twice).
    if (!dbsize_s && dbSize(client) >= source_keys && dataDbSize(client) == source_keys) {
      dbsize_s = secondsSince(start);
    }
    if (log_s && dbsize_s) {
      break;
    }
    if (!agent.running()) {
      throw std::runtime_error("the agent " + agent.describeState() + "\n" + agent.logTail(30));
    }
    if (Clock::now() > deadline) {
      throw std::runtime_error("agent full sync not done after " +
                               std::to_string(options.timeout_s) + " s (" +
                               (log_s ? "" : "no \"snapshot applied:\" line; ") + "target keys " +
                               std::to_string(dataDbSize(client)) + " of " +
                               std::to_string(source_keys) + ")\n" + agent.logTail(30));
    }
    std::this_thread::sleep_for(kPollInterval);
  }
  times.log_s = *log_s;
  times.dbsize_s = *dbsize_s;
  times.foreign_cores = foreign.cores();
  times.cpu_s = bench::cpuSeconds(agent.pid());
  times.target_cpu_s = delta(target_cpu0, bench::cpuSeconds(target.pid()));
  times.source_cpu_s = delta(source_cpu0, bench::cpuSeconds(source.pid()));
  times.vmhwm = bench::statusBytes(agent.pid(), "VmHWM");
  agent.kill();  // measured; no need to wait for a drain and a checkpoint of a million keys
  return times;  // ~TempDir, ~RedisServer: the target is stopped by PID
}

struct RunResult {
  int run = 0;
  std::string order;
  std::optional<double> native_s;
  std::optional<NativeTimes> native;
  std::map<bool, AgentTimes> agent;  // by maxttl
  std::string error;

  std::optional<double> agentSeconds(bool maxttl) const {
    auto it = agent.find(maxttl);
    if (it == agent.end()) {
      return std::nullopt;
    }
    return it->second.seconds();
  }
  std::optional<double> ratio(bool maxttl) const {
    const auto a = agentSeconds(maxttl);
    if (!native_s || !a || *native_s <= 0) {
      return std::nullopt;
    }
    return *a / *native_s;
  }
};

int runBenchmark(const Options& options) {
  std::string modes;
  for (bool m : options.maxttl) modes += (modes.empty() ? "" : ",") + modeName(m);
  std::cout << "full_sync_bench: " << options.keys << " keys, " << options.runs << " runs, maxTTL "
            << modes << ", agent " << options.agent << std::endl;
  // The source: diskless syncs that start at once, as in the integration tests.
  RedisServer source({"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0",
                      "--repl-backlog-size", "256mb"},
                     std::chrono::seconds(30));
  DatasetOptions data_options;
  data_options.keys = options.keys;
  data_options.mix = DatasetMix::MostlyStrings;
  data_options.tag = "b";
  data_options.placement = [](int64_t i) {
    return std::pair<int, std::string>{0, i % 2 == 0 ? "c:" : "k:"};
  };
  data_options.deadline_fraction = 0.5;
  data_options.min_deadline_ms = 10 * kMinute;
  data_options.max_deadline_ms = 2 * kHour;
  data_options.string_size = options.value_size;
  const auto fill_start = Clock::now();
  const Dataset data = writeDataset(source.port(), data_options);
  const double fill_s = secondsSince(fill_start);
  RespClient source_client = source.client(std::chrono::seconds(30));
  const int64_t source_keys = dbSize(source_client);
  auto memory = source_client.info("memory");
  auto server = source_client.info("server");
  std::map<std::string, int64_t> types;  // of the data set: "mixed types", shown
  for (const auto& k : data.keys) ++types[std::string(redisTypeOf(k.kind))];
  std::string type_text;
  for (const auto& [type, n] : types) {
    type_text += (type_text.empty() ? "" : ", ") + type + " " + std::to_string(n);
  }
  std::cout << "source: " << source_keys << " keys (" << type_text << ") written in "
            << cell(fill_s, 1) << " s, used_memory " << memory["used_memory_human"] << std::endl;
  if (source_keys != options.keys) {
    throw std::runtime_error("the source holds " + std::to_string(source_keys) + " keys, not " +
                             std::to_string(options.keys));
  }

  // The steps of a run: the native sync and one agent sync per mode, rotated from run to run.
  struct Step {
    bool native;
    bool maxttl;
  };
  std::vector<Step> steps = {{true, false}};
  for (bool m : options.maxttl) steps.push_back({false, m});

  std::vector<RunResult> results;
  bool agent_failed = false;
  for (int run = 1; run <= options.runs && !agent_failed; ++run) {
    RunResult result;
    result.run = run;
    for (size_t i = 0; i < steps.size(); ++i) {
      const Step step = steps[(i + static_cast<size_t>(run - 1)) % steps.size()];
      const std::string name = step.native ? "native" : "agent-" + modeName(step.maxttl);
      result.order += (result.order.empty() ? "" : ",") + name;
      bench::progress("full sync run " + std::to_string(run) + "/" + std::to_string(options.runs) +
                      ": " + name);
      try {
        bench::waitForQuiet();
        if (step.native) {
          result.native = measureNative(source, source_keys, options);
          result.native_s = result.native->seconds;
        } else {
          result.agent[step.maxttl] = measureAgent(source, source_keys, step.maxttl, options);
        }
      } catch (const Interrupted&) {
        throw;
      } catch (const std::exception& e) {
        result.error += name + ": " + e.what() + "\n";
        agent_failed = agent_failed || !step.native;
      }
    }
    std::cout << "run " << run << " (" << result.order << "): native " << cell(result.native_s)
              << " s";
    for (bool m : options.maxttl) {
      std::cout << ", agent maxTTL " << modeName(m) << " " << cell(result.agentSeconds(m))
                << " s (ratio " << cell(result.ratio(m), 2) << ")";
    }
    std::cout << std::endl;
    for (const auto& [m, t] : result.agent) {
      std::cout << "  agent " << modeName(m) << ": " << t.applied_line << "\n";
    }
    if (!result.error.empty()) {
      std::cerr << result.error;
    }
    results.push_back(std::move(result));
  }
  if (agent_failed && static_cast<int>(results.size()) < options.runs) {
    std::cerr << "the agent failed; the remaining runs are skipped\n";
  }

  std::vector<double> natives;
  for (const auto& r : results) {
    if (r.native_s) natives.push_back(*r.native_s);
  }
  struct ModeMedians {
    std::optional<double> log_s, dbsize_s, agent_s, ratio, cpu_s, vmhwm;
    double foreign_max = 0;
  };
  std::map<bool, ModeMedians> medians;
  for (bool m : options.maxttl) {
    std::vector<double> logs, dbsizes, agents, ratios, cpus, hwms;
    for (const auto& r : results) {
      auto it = r.agent.find(m);
      if (it != r.agent.end()) {
        logs.push_back(it->second.log_s);
        dbsizes.push_back(it->second.dbsize_s);
        agents.push_back(it->second.seconds());
        if (it->second.cpu_s) cpus.push_back(*it->second.cpu_s);
        if (it->second.vmhwm) hwms.push_back(*it->second.vmhwm);
      }
      if (r.ratio(m)) ratios.push_back(*r.ratio(m));
    }
    double foreign_max = 0;
    for (const auto& r : results) {
      auto it = r.agent.find(m);
      if (it != r.agent.end() && it->second.foreign_cores) {
        foreign_max = std::max(foreign_max, *it->second.foreign_cores);
      }
    }
    medians[m] = {median(logs), median(dbsizes), median(agents), median(ratios),
                  median(cpus), median(hwms),    foreign_max};
  }

  std::printf("\n%-8s %-6s %-30s %10s %13s %16s %9s %13s %9s\n", "run", "maxttl", "order",
              "native_s", "agent_log_s", "agent_dbsize_s", "agent_s", "agent/native", "hwm_MiB");
  for (const auto& r : results) {
    for (bool m : options.maxttl) {
      auto it = r.agent.find(m);
      const AgentTimes* t = it == r.agent.end() ? nullptr : &it->second;
      std::printf(
          "%-8d %-6s %-30s %10s %13s %16s %9s %13s %9s\n", r.run, modeName(m).c_str(),
          r.order.c_str(), cell(r.native_s).c_str(),
          cell(t ? std::optional(t->log_s) : std::nullopt).c_str(),
          cell(t ? std::optional(t->dbsize_s) : std::nullopt).c_str(),
          cell(r.agentSeconds(m)).c_str(), cell(r.ratio(m), 2).c_str(),
          cell(t && t->vmhwm ? std::optional(*t->vmhwm / 1048576.0) : std::nullopt, 1).c_str());
    }
  }
  for (bool m : options.maxttl) {
    const ModeMedians& md = medians[m];
    std::printf("%-8s %-6s %-30s %10s %13s %16s %9s %13s %9s\n", "median", modeName(m).c_str(), "",
                cell(median(natives)).c_str(), cell(md.log_s).c_str(), cell(md.dbsize_s).c_str(),
                cell(md.agent_s).c_str(), cell(md.ratio, 2).c_str(),
                cell(md.vmhwm ? std::optional(*md.vmhwm / 1048576.0) : std::nullopt, 1).c_str());
  }

  if (!options.json_path.empty()) {
    nlohmann::json runs = nlohmann::json::array();
    for (const auto& r : results) {
      nlohmann::json agent = nlohmann::json::object();
      for (const auto& [m, t] : r.agent) {
        agent[modeName(m)] = {{"agent_log_s", t.log_s},
                              {"agent_dbsize_s", t.dbsize_s},
                              {"agent_s", t.seconds()},
                              {"ratio", jsonOrNull(r.ratio(m))},
                              {"agent_cpu_s", jsonOrNull(t.cpu_s)},
                              {"agent_vmhwm_bytes", jsonOrNull(t.vmhwm)},
                              {"target_cpu_s", jsonOrNull(t.target_cpu_s)},
                              {"foreign_cores", jsonOrNull(t.foreign_cores)},
                              {"source_cpu_s", jsonOrNull(t.source_cpu_s)},
                              {"agent_applied_line", t.applied_line}};
      }
      runs.push_back(
          {{"run", r.run},
           {"order", r.order},
           {"native_s", jsonOrNull(r.native_s)},
           {"native_cpu_s", jsonOrNull(r.native ? r.native->cpu_s : std::nullopt)},
           {"native_source_cpu_s", jsonOrNull(r.native ? r.native->source_cpu_s : std::nullopt)},
           {"native_foreign_cores", jsonOrNull(r.native ? r.native->foreign_cores : std::nullopt)},
           {"agent", agent},
           {"error", r.error}});
    }
    double native_foreign = 0;
    for (const auto& r : results) {
      if (r.native && r.native->foreign_cores) {
        native_foreign = std::max(native_foreign, *r.native->foreign_cores);
      }
    }
    nlohmann::json median_json = {{"native_s", jsonOrNull(median(natives))},
                                  {"native_foreign_cores_max", native_foreign}};
    for (bool m : options.maxttl) {
      const ModeMedians& md = medians[m];
      median_json[modeName(m)] = {
          {"agent_log_s", jsonOrNull(md.log_s)}, {"agent_dbsize_s", jsonOrNull(md.dbsize_s)},
          {"agent_s", jsonOrNull(md.agent_s)},   {"ratio", jsonOrNull(md.ratio)},
          {"agent_cpu_s", jsonOrNull(md.cpu_s)}, {"vmhwm_bytes", jsonOrNull(md.vmhwm)},
          {"foreign_cores_max", md.foreign_max}};
    }
    nlohmann::json out = {
        {"benchmark", "full_sync"},
        {"unix_time", static_cast<int64_t>(std::time(nullptr))},
        {"keys", options.keys},
        {"value_size", options.value_size},
        {"maxttl", modes},
        {"agent_binary", options.agent},
        {"redis_version", server["redis_version"]},
        {"cpus", static_cast<int64_t>(::sysconf(_SC_NPROCESSORS_ONLN))},
        {"source",
         {{"fill_s", fill_s},
          {"used_memory", memory["used_memory"]},
          {"types", types},
          {"keys_with_deadline", data.withDeadline(0)}}},
        {"runs", runs},
        {"median", median_json},
    };
    std::ofstream file(options.json_path);
    file << out.dump(2) << "\n";
    if (!file) {
      std::cerr << "cannot write " << options.json_path << "\n";
      return 1;
    }
    std::cout << "results: " << options.json_path << "\n";
  }
  const bool complete = static_cast<int>(results.size()) == options.runs &&
                        std::all_of(results.begin(), results.end(),
                                    [](const RunResult& r) { return r.error.empty(); });
  return complete ? 0 : 1;
}

}  // namespace
}  // namespace xdcr::test

int main(int argc, char** argv) {
  const xdcr::test::Options options = xdcr::test::parseOptions(argc, argv);
  xdcr::bench::installSignalHandlers();
  xdcr::bench::setQuietBudget(std::chrono::seconds(options.quiet_wait_s));
  try {
    return xdcr::test::runBenchmark(options);
  } catch (const std::exception& e) {
    // Every server and agent is owned by an object that stopped it during the unwinding.
    std::cerr << "full_sync_bench: " << e.what() << "\n";
    return 1;
  }
}
