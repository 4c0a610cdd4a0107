#include "source/cluster_topology.h"

#include <algorithm>
#include <sstream>

#include <fmt/format.h>

#include "common/redis_conn.h"

namespace xdcr::source {

namespace net = boost::asio;

const ShardNode* ShardView::master() const {
  for (const auto& n : nodes) {
    if (n.master && n.online) return &n;
  }
  return nullptr;
}

const ShardNode* ShardView::onlineReplica() const {
  for (const auto& n : nodes) {
    if (!n.master && n.online) return &n;
  }
  return nullptr;
}

std::string ShardView::label() const {
  if (slots.empty()) {
    const ShardNode* m = master();
    return "no slots @" + (m ? m->address() : std::string("?"));
  }
  return fmt::format("{}-{}{}", slots[0].first, slots[0].second, slots.size() > 1 ? "+" : "");
}

bool ShardView::sameShard(const ShardView& other) const {
  for (const auto& a : nodes) {
    for (const auto& b : other.nodes) {
      if (!a.id.empty() && a.id == b.id) return true;
    }
  }
  return false;
}

namespace {

/** The value after `key` in a flat key/value array, nullptr when absent. */
const resp::Value* field(const resp::Value& map, std::string_view key) {
  for (size_t i = 0; i + 1 < map.elements.size(); i += 2) {
    if (map.elements[i].str == key) return &map.elements[i + 1];
  }
  return nullptr;
}

}  // namespace

Result<std::vector<ShardView>> parseClusterShards(const resp::Value& reply,
                                                  const std::string& fallback_host) {
  auto bad = [&](const std::string& what) {
    return fail(
        Error::protocol("unexpected CLUSTER SHARDS reply (" + what + "): " + reply.describe()));
  };
  if (reply.type != resp::ReplyType::Array) return bad("not an array");
  std::vector<ShardView> out;
  for (const resp::Value& shard : reply.elements) {
    if (shard.type != resp::ReplyType::Array) return bad("a shard");
    ShardView view;
    const resp::Value* slots = field(shard, "slots");
    const resp::Value* nodes = field(shard, "nodes");
    if (slots == nullptr || nodes == nullptr) return bad("slots or nodes missing");
    for (size_t i = 0; i + 1 < slots->elements.size(); i += 2) {
      view.slots.emplace_back(static_cast<int>(slots->elements[i].integer),
                              static_cast<int>(slots->elements[i + 1].integer));
    }
    std::sort(view.slots.begin(), view.slots.end());
    for (const resp::Value& n : nodes->elements) {
      ShardNode node;
      if (const resp::Value* v = field(n, "id")) node.id = v->str;
      const resp::Value* port = field(n, "port");
      if (port == nullptr) port = field(n, "tls-port");
      if (port == nullptr) return bad("a node without a port");
      node.port = static_cast<uint16_t>(port->integer);
      if (const resp::Value* v = field(n, "endpoint")) node.host = v->str;
      if (node.host.empty() || node.host == "?") {
        if (const resp::Value* v = field(n, "ip")) node.host = v->str;
      }
      if (node.host.empty() || node.host == "?") node.host = fallback_host;
      if (const resp::Value* v = field(n, "role")) node.master = v->str == "master";
      if (const resp::Value* v = field(n, "health")) node.online = v->str == "online";
      if (const resp::Value* v = field(n, "replication-offset")) node.offset = v->integer;
      view.nodes.push_back(std::move(node));
    }
    out.push_back(std::move(view));
  }
  return out;
}

net::awaitable<Result<std::vector<ShardView>>> discoverShards(
    const config::ClusterConfig& cluster, const std::vector<config::NodeAddress>& known,
    std::chrono::milliseconds timeout, config::NodeAddress* answered) {
  std::vector<config::NodeAddress> tried = known;
  for (const auto& s : cluster.seeds) {
    if (std::find(tried.begin(), tried.end(), s) == tried.end()) tried.push_back(s);
  }
  std::string why;
  for (const auto& node : tried) {
    RedisConnection conn(co_await net::this_coro::executor,
                         fmt::format("source {} node {}", cluster.name, node.str()));
    const RedisEndpoint endpoint = cluster.endpointAt(node.host, node.port);
    Status s = co_await conn.connect(endpoint, timeout);
    if (!s) {
      why += fmt::format("; {}: {}", node.str(), s.error().message);
      continue;
    }
    const std::vector<std::vector<std::string>> cmd = {{"CLUSTER", "SHARDS"}};
    auto r = co_await conn.callMany(cmd, timeout);
    conn.close();
    if (!r) {
      why += fmt::format("; {}: {}", node.str(), r.error().message);
      continue;
    }
    const resp::Value& v = (*r)[0];
    if (v.isError()) {
      if (v.str.find("cluster support disabled") != std::string::npos) {
        co_return fail(Error::refused(fmt::format(
            "cluster {} is type redis_cluster, but {} is not in cluster mode ({}); use type: "
            "redis with address: for a standalone server",
            cluster.name, node.str(), v.str)));
      }
      why += fmt::format("; {}: CLUSTER SHARDS refused: {} (Redis 7.0 or later is needed)",
                         node.str(), v.str);
      continue;
    }
    auto shards = parseClusterShards(v, node.host);
    if (!shards) {
      why += fmt::format("; {}: {}", node.str(), shards.error().message);
      continue;
    }
    if (answered != nullptr) *answered = node;
    co_return shards;
  }
  co_return fail(Error::io(fmt::format(
      "cannot discover the shards of cluster {} from any node{}; check the addresses and that "
      "the cluster is up",
      cluster.name, why)));
}

net::awaitable<Result<ReplicationIds>> replicationIds(const RedisEndpoint& node,
                                                      std::chrono::milliseconds timeout) {
  RedisConnection conn(co_await net::this_coro::executor,
                       fmt::format("source {} node {}", node.cluster, node.address()));
  if (Status s = co_await conn.connect(node, timeout); !s) co_return fail(s.error());
  const std::vector<std::vector<std::string>> cmd = {{"INFO", "replication"}};
  auto r = co_await conn.callMany(cmd, timeout);
  conn.close();
  if (!r) co_return fail(r.error());
  const resp::Value& v = (*r)[0];
  if (v.isError()) {
    co_return fail(
        Error::refused(fmt::format("{}: INFO replication refused: {}", node.address(), v.str)));
  }
  ReplicationIds ids;
  std::istringstream in(v.str);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, colon), value = line.substr(colon + 1);
    if (key == "master_replid") ids.replid = value;
    if (key == "master_replid2") ids.replid2 = value;
    if (key == "role") ids.role = value;
  }
  co_return ids;
}

}  // namespace xdcr::source
