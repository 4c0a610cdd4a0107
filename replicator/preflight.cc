#include "replicator/preflight.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/this_coro.hpp>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/redis_conn.h"
#include "common/sentinel.h"

namespace xdcr::replicator {
namespace {

namespace net = boost::asio;

constexpr int kExitConfig = 78;  // EX_CONFIG, as for an invalid file

/** The `run_id:` field of an INFO server reply, or "". */
std::string runIdOf(const std::string& info) {
  constexpr std::string_view kField = "run_id:";
  size_t at = info.find(kField);
  while (at != std::string::npos && at != 0 && info[at - 1] != '\n') {
    at = info.find(kField, at + 1);
  }
  if (at == std::string::npos) return "";
  const size_t begin = at + kField.size();
  const size_t end = info.find_first_of("\r\n", begin);
  return info.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

net::awaitable<void> readRunId(const config::ClusterConfig& cluster,
                               std::chrono::milliseconds timeout, std::string& run_id) {
  RedisConnection conn(co_await net::this_coro::executor,
                       fmt::format("cluster {} ({})", cluster.name, cluster.address()));
  const std::vector<std::vector<std::string>> info = {{"INFO", "server"}};
  std::string why;
  // A Sentinel-managed cluster: the master its Sentinels name (the Sentinel's own run_id would
  // say nothing about the data).
  auto node = co_await sentinel::resolveEndpoint(cluster, timeout);
  if (!node) {
    why = node.error().message;
  } else if (auto s = co_await conn.connect(*node, timeout); !s) {
    why = s.error().message;
  } else if (auto r = co_await conn.callMany(info, timeout); !r) {
    why = r.error().message;
  } else if ((*r)[0].isError()) {
    why = "INFO server refused: " + (*r)[0].str +
          "; grant the cluster's user +info (README, "
          "Minimal ACLs) so that this check can run";
  } else {
    run_id = runIdOf((*r)[0].str);
    if (run_id.empty()) why = "INFO server has no run_id";
  }
  conn.close();
  if (!why.empty()) {
    spdlog::warn(
        "start check: cannot read the run_id of cluster {} ({}), so it is not compared "
        "with the other clusters: {}",
        cluster.name, cluster.address(), why);
  }
}

}  // namespace

int checkDistinctServers(const config::Config& config, std::chrono::milliseconds timeout) {
  std::set<std::string> used;
  for (const auto& p : config.pipelines) {
    used.insert(p.source);
    used.insert(p.target);
  }
  std::map<std::string, std::string> run_ids;  // cluster name -> run_id ("" = unknown)
  net::io_context ioc(1);
  for (const auto& name : used) {
    const config::ClusterConfig* cluster = config.cluster(name);
    if (cluster == nullptr) continue;  // validation refused it already
    if (cluster->isMemcached()) {
      // memcached has no run_id (nor INFO), and it is only ever a target: no replication
      // cycle runs through it, and two pipelines writing one memcached meet at their markers.
      spdlog::info(
          "start check: cluster {} ({}) is a memcached server: it has no run_id, so it is not "
          "compared with the other clusters",
          name, cluster->address());
      continue;
    }
    net::co_spawn(ioc, readRunId(*cluster, timeout, run_ids[name]), net::detached);
  }
  ioc.run();

  std::map<std::string, std::string> first_with;  // run_id -> the first cluster name seen with it
  int code = 0;
  for (const auto& [name, run_id] : run_ids) {
    if (run_id.empty()) continue;
    auto [it, inserted] = first_with.emplace(run_id, name);
    if (inserted) continue;
    const config::ClusterConfig& a = *config.cluster(it->second);
    const config::ClusterConfig& b = *config.cluster(name);
    spdlog::critical(
        "clusters \"{}\" ({}) and \"{}\" ({}) are one Redis server (run_id {}): a pipeline "
        "between them would replicate the server onto itself, and a replication cycle through "
        "them would go unnoticed, because the config's checks compare names and addresses; name "
        "each server once under clusters: (a dbs map copies between the databases of one server)",
        a.name, a.address(), b.name, b.address(), run_id);
    code = kExitConfig;
  }
  return code;
}

}  // namespace xdcr::replicator
