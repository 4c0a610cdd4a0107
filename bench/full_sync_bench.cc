// Full-sync benchmark (a measurement, not a test): the agent's full sync of N keys against a
// native Redis replica's full sync of the same data, on the same machine, in the same run.
//
//   native  a fresh redis-server, REPLICAOF the source; from the REPLICAOF to
//           master_link_status:up and master_sync_in_progress:0 (INFO replication every 10 ms).
//   agent   a fresh target and an empty state_dir, the agent started; from its start to the
//           "snapshot applied:" log line, and to target DBSIZE == source DBSIZE (every 10 ms).
//           "agent s" is the later of the two: both say the target holds the snapshot.
//
// Each is run R times, interleaved (odd runs native first, even runs agent first, so neither
// always gets the warmer caches); the table gives every run and the medians, the ratio is
// agent s / native s (issue 3's target: <= 1.5). Every process is a child stopped by its PID
// (RAII, also on errors and on SIGINT/SIGTERM; PR_SET_PDEATHSIG if this process is killed).
//
//   full_sync_bench [--keys N] [--runs R] [--maxttl on|off] [--json FILE] [--agent PATH]
//                   [--value-size BYTES] [--timeout SECONDS]

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
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
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/harness.h"

namespace xdcr::test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kPollInterval = 10ms;
constexpr int64_t kMinute = 60 * 1000;
constexpr int64_t kHour = 60 * kMinute;
constexpr const char* kAppliedMarker = "snapshot applied:";

#ifndef XDCR_AGENT_BINARY
#error "XDCR_AGENT_BINARY must be defined by bench/CMakeLists.txt"
#endif

volatile std::sig_atomic_t g_interrupted = 0;

void onSignal(int) { g_interrupted = 1; }

class Interrupted : public std::runtime_error {
 public:
  Interrupted() : std::runtime_error("interrupted by a signal") {}
};

void checkInterrupted() {
  if (g_interrupted != 0) {
    throw Interrupted();
  }
}

/** $XDCR_AGENT_BINARY from the environment when set, else this build's agent. */
std::string defaultAgent() {
  const char* from_env = std::getenv("XDCR_AGENT_BINARY");
  return from_env != nullptr && *from_env != '\0' ? from_env : XDCR_AGENT_BINARY;
}

struct Options {
  int64_t keys = 1000000;
  int runs = 3;
  bool maxttl = true;
  std::string json_path;
  std::string agent = defaultAgent();
  size_t value_size = 100;
  int timeout_s = 600;
};

[[noreturn]] void usage(const std::string& error) {
  if (!error.empty()) {
    std::cerr << "full_sync_bench: " << error << "\n";
  }
  std::cerr << "usage: full_sync_bench [--keys N] [--runs R] [--maxttl on|off] [--json FILE]\n"
               "                       [--agent PATH] [--value-size BYTES] [--timeout SECONDS]\n"
               "  --keys N          keys on the source (default 1000000)\n"
               "  --runs R          native and agent full syncs, each (default 3)\n"
               "  --maxttl on|off   a target collection (c:*, half the keys) with max_ttl 1h\n"
               "                    that clamps, or no maxTTL at all (default on)\n"
               "  --json FILE       also write the results as JSON\n"
               "  --agent PATH      the xdcr-agent binary (default: $XDCR_AGENT_BINARY, else\n"
               "                    this build's)\n"
               "  --value-size B    size of the string values, 80 % of the keys (default 100)\n"
               "  --timeout S       bound on each full sync (default 600)\n";
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
        if (v != "on" && v != "off") {
          usage("--maxttl takes on or off");
        }
        options.maxttl = v == "on";
      } else if (arg == "--json") {
        options.json_path = value();
      } else if (arg == "--agent") {
        options.agent = value();
      } else if (arg == "--value-size") {
        options.value_size = static_cast<size_t>(std::stoul(value()));
      } else if (arg == "--timeout") {
        options.timeout_s = std::stoi(value());
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

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

int64_t dbSize(RespClient& client) { return client.command({"DBSIZE"}).integer(); }

std::string agentConfigYaml(const std::string& state_dir, uint16_t source_port,
                            uint16_t target_port, bool maxttl) {
  std::vector<BucketSpec> buckets;
  if (maxttl) buckets = {{0, 0, {{"capped", "c:*", kHour / 1000}}}};
  return pipelineConfigYaml(state_dir, source_port, target_port, buckets);
}

/** A native replica's full sync: REPLICAOF until the link is up and no sync is in progress. */
double measureNative(RedisServer& source, int64_t source_keys, const Options& options) {
  RedisServer replica({}, std::chrono::seconds(30));
  RespClient client = replica.client(std::chrono::seconds(30));
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
  const double elapsed = secondsSince(start);
  const int64_t keys = dbSize(client);
  if (keys != source_keys) {
    throw std::runtime_error("native replica holds " + std::to_string(keys) + " keys, the source " +
                             std::to_string(source_keys));
  }
  return elapsed;  // ~RedisServer stops the replica by PID
}

struct AgentTimes {
  double log_s = 0;     // "snapshot applied:" logged
  double dbsize_s = 0;  // target DBSIZE == source DBSIZE
};

/** The agent's full sync onto a fresh target with an empty state_dir. */
AgentTimes measureAgent(RedisServer& source, int64_t source_keys, const Options& options,
                        std::string* applied_line) {
  RedisServer target({}, std::chrono::seconds(30));
  TempDir dir("xdcr-bench");
  const std::string config = dir.file("xdcr.yaml");
  writeFileText(config,
                agentConfigYaml(dir.file("state"), source.port(), target.port(), options.maxttl));
  RespClient client = target.client(std::chrono::seconds(30));
  const auto start = Clock::now();
  AgentProcess agent(config, dir.file("agent.log"), {}, options.agent);
  LogWatcher watcher(agent.logPath(), kAppliedMarker);
  std::optional<double> log_s;
  std::optional<double> dbsize_s;
  const auto deadline = start + std::chrono::seconds(options.timeout_s);
  while (!log_s || !dbsize_s) {
    checkInterrupted();
    if (!log_s && watcher.poll() > 0) {
      log_s = secondsSince(start);
      *applied_line = watcher.matches().front();
    }
    if (!dbsize_s && dbSize(client) == source_keys) {
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
                               (log_s ? "" : "no \"snapshot applied:\" line; ") + "target DBSIZE " +
                               std::to_string(dbSize(client)) + " of " +
                               std::to_string(source_keys) + ")\n" + agent.logTail(30));
    }
    std::this_thread::sleep_for(kPollInterval);
  }
  agent.terminate(std::chrono::seconds(30));
  return {*log_s, *dbsize_s};  // ~TempDir, ~RedisServer: the target is stopped by PID
}

struct RunResult {
  int run = 0;
  std::string order;
  std::optional<double> native_s;
  std::optional<AgentTimes> agent;
  std::string applied_line;
  std::string error;

  std::optional<double> agentSeconds() const {
    if (!agent) {
      return std::nullopt;
    }
    return std::max(agent->log_s, agent->dbsize_s);
  }
  std::optional<double> ratio() const {
    if (!native_s || !agent || *native_s <= 0) {
      return std::nullopt;
    }
    return *agentSeconds() / *native_s;
  }
};

std::optional<double> median(std::vector<double> values) {
  if (values.empty()) {
    return std::nullopt;
  }
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2.0;
}

std::string cell(const std::optional<double>& value, int precision = 3) {
  if (!value) {
    return "-";
  }
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.*f", precision, *value);
  return buffer;
}

nlohmann::json jsonOrNull(const std::optional<double>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

int runBenchmark(const Options& options) {
  std::cout << "full_sync_bench: " << options.keys << " keys, " << options.runs << " runs, maxTTL "
            << (options.maxttl ? "on" : "off") << ", agent " << options.agent << "\n";
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
  std::cout << "source: " << source_keys << " keys written in " << cell(fill_s, 1)
            << " s, used_memory " << memory["used_memory_human"] << "\n";
  if (source_keys != options.keys) {
    throw std::runtime_error("the source holds " + std::to_string(source_keys) + " keys, not " +
                             std::to_string(options.keys));
  }

  std::vector<RunResult> results;
  bool agent_failed = false;
  for (int run = 1; run <= options.runs && !agent_failed; ++run) {
    RunResult result;
    result.run = run;
    const bool native_first = run % 2 == 1;
    result.order = native_first ? "native,agent" : "agent,native";
    for (int step = 0; step < 2; ++step) {
      const bool native = (step == 0) == native_first;
      try {
        if (native) {
          result.native_s = measureNative(source, source_keys, options);
        } else {
          result.agent = measureAgent(source, source_keys, options, &result.applied_line);
        }
      } catch (const Interrupted&) {
        throw;
      } catch (const std::exception& e) {
        result.error += std::string(native ? "native: " : "agent: ") + e.what() + "\n";
        agent_failed = agent_failed || !native;
      }
    }
    std::cout << "run " << run << " (" << result.order << "): native " << cell(result.native_s)
              << " s, agent " << cell(result.agentSeconds()) << " s, ratio "
              << cell(result.ratio(), 2) << "\n";
    if (!result.applied_line.empty()) {
      std::cout << "  agent: " << result.applied_line << "\n";
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
  std::vector<double> logs;
  std::vector<double> dbsizes;
  std::vector<double> agents;
  std::vector<double> ratios;
  for (const auto& r : results) {
    if (r.native_s) {
      natives.push_back(*r.native_s);
    }
    if (r.agent) {
      logs.push_back(r.agent->log_s);
      dbsizes.push_back(r.agent->dbsize_s);
      agents.push_back(*r.agentSeconds());
    }
    if (r.ratio()) {
      ratios.push_back(*r.ratio());
    }
  }

  std::printf("\n%-8s %-14s %10s %13s %16s %9s %13s\n", "run", "order", "native_s", "agent_log_s",
              "agent_dbsize_s", "agent_s", "agent/native");
  for (const auto& r : results) {
    std::printf("%-8d %-14s %10s %13s %16s %9s %13s\n", r.run, r.order.c_str(),
                cell(r.native_s).c_str(),
                cell(r.agent ? std::optional(r.agent->log_s) : std::nullopt).c_str(),
                cell(r.agent ? std::optional(r.agent->dbsize_s) : std::nullopt).c_str(),
                cell(r.agentSeconds()).c_str(), cell(r.ratio(), 2).c_str());
  }
  std::printf("%-8s %-14s %10s %13s %16s %9s %13s\n", "median", "", cell(median(natives)).c_str(),
              cell(median(logs)).c_str(), cell(median(dbsizes)).c_str(),
              cell(median(agents)).c_str(), cell(median(ratios), 2).c_str());

  if (!options.json_path.empty()) {
    nlohmann::json runs = nlohmann::json::array();
    for (const auto& r : results) {
      runs.push_back(
          {{"run", r.run},
           {"order", r.order},
           {"native_s", jsonOrNull(r.native_s)},
           {"agent_log_s", jsonOrNull(r.agent ? std::optional(r.agent->log_s) : std::nullopt)},
           {"agent_dbsize_s",
            jsonOrNull(r.agent ? std::optional(r.agent->dbsize_s) : std::nullopt)},
           {"agent_s", jsonOrNull(r.agentSeconds())},
           {"ratio", jsonOrNull(r.ratio())},
           {"agent_applied_line", r.applied_line},
           {"error", r.error}});
    }
    nlohmann::json out = {
        {"benchmark", "full_sync"},
        {"unix_time", static_cast<int64_t>(std::time(nullptr))},
        {"keys", options.keys},
        {"value_size", options.value_size},
        {"maxttl", options.maxttl ? "on" : "off"},
        {"agent_binary", options.agent},
        {"redis_version", server["redis_version"]},
        {"cpus", static_cast<int64_t>(::sysconf(_SC_NPROCESSORS_ONLN))},
        {"source",
         {{"fill_s", fill_s},
          {"used_memory", memory["used_memory"]},
          {"keys_with_deadline", data.withDeadline(0)}}},
        {"runs", runs},
        {"median",
         {{"native_s", jsonOrNull(median(natives))},
          {"agent_log_s", jsonOrNull(median(logs))},
          {"agent_dbsize_s", jsonOrNull(median(dbsizes))},
          {"agent_s", jsonOrNull(median(agents))},
          {"ratio", jsonOrNull(median(ratios))}}},
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
  struct sigaction action {};
  action.sa_handler = xdcr::test::onSignal;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  try {
    return xdcr::test::runBenchmark(options);
  } catch (const std::exception& e) {
    // Every server and agent is owned by an object that stopped it during the unwinding.
    std::cerr << "full_sync_bench: " << e.what() << "\n";
    return 1;
  }
}
