#include "target/slot_map.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/redis_conn.h"

namespace xdcr::target {

Result<SlotMap> SlotMap::fromClusterSlots(const resp::Value& reply,
                                          const std::string& fallback_host) {
  auto bad = [&](const std::string& what) {
    return fail(
        Error::protocol("unexpected CLUSTER SLOTS reply (" + what + "): " + reply.describe()));
  };
  if (reply.type != resp::ReplyType::Array) return bad("not an array");
  SlotMap map;
  for (const resp::Value& range : reply.elements) {
    if (range.type != resp::ReplyType::Array || range.elements.size() < 3) return bad("a range");
    const resp::Value& lo = range.elements[0];
    const resp::Value& hi = range.elements[1];
    const resp::Value& node = range.elements[2];
    if (lo.type != resp::ReplyType::Integer || hi.type != resp::ReplyType::Integer ||
        lo.integer < 0 || hi.integer >= cluster::kSlots || lo.integer > hi.integer) {
      return bad("slot numbers");
    }
    if (node.type != resp::ReplyType::Array || node.elements.size() < 2 ||
        node.elements[1].type != resp::ReplyType::Integer) {
      return bad("a node");
    }
    ClusterNode n;
    n.host = node.elements[0].str;
    if (n.host.empty() || n.host == "?") n.host = fallback_host;
    n.port = static_cast<uint16_t>(node.elements[1].integer);
    if (node.elements.size() > 2) n.id = node.elements[2].str;
    n.replicas = range.elements.size() - 3;
    int index = map.find(n.host, n.port);
    if (index < 0) {
      index = static_cast<int>(map.masters_.size());
      map.masters_.push_back(std::move(n));
    }
    for (int64_t s = lo.integer; s <= hi.integer; ++s) {
      int16_t& o = map.owner_[static_cast<size_t>(s)];
      if (o >= 0 && o != index) return bad(fmt::format("slot {} owned twice", s));
      o = static_cast<int16_t>(index);
    }
  }
  if (map.masters_.empty()) return bad("no slot is assigned");
  return map;
}

int SlotMap::lowestSlot(size_t m) const {
  for (int s = 0; s < cluster::kSlots; ++s) {
    if (owner_[static_cast<size_t>(s)] == static_cast<int>(m)) return s;
  }
  return -1;
}

size_t SlotMap::uncovered() const {
  size_t n = 0;
  for (int16_t o : owner_) n += o < 0 ? 1 : 0;
  return n;
}

int SlotMap::find(const std::string& host, uint16_t port) const {
  for (size_t i = 0; i < masters_.size(); ++i) {
    if (masters_[i].port == port && masters_[i].host == host) return static_cast<int>(i);
  }
  return -1;
}

net::awaitable<Result<SlotMap>> loadSlotMap(const config::ClusterConfig& cluster,
                                            const std::vector<config::NodeAddress>& known,
                                            std::chrono::milliseconds timeout) {
  std::vector<config::NodeAddress> tried = known;
  for (const auto& s : cluster.seeds) {
    if (std::find(tried.begin(), tried.end(), s) == tried.end()) tried.push_back(s);
  }
  std::string why;
  for (const auto& node : tried) {
    RedisConnection conn(co_await net::this_coro::executor,
                         fmt::format("target {} node {}", cluster.name, node.str()));
    const RedisEndpoint endpoint = cluster.endpointAt(node.host, node.port);
    Status s = co_await conn.connect(endpoint, timeout);
    if (!s) {
      why += fmt::format("; {}: {}", node.str(), s.error().message);
      continue;
    }
    const std::vector<std::vector<std::string>> cmd = {{"CLUSTER", "SLOTS"}};
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
      why += fmt::format("; {}: CLUSTER SLOTS refused: {}", node.str(), v.str);
      continue;
    }
    auto map = SlotMap::fromClusterSlots(v, node.host);
    if (!map) {
      why += fmt::format("; {}: {}", node.str(), map.error().message);
      continue;
    }
    co_return map;
  }
  co_return fail(Error::io(fmt::format(
      "cannot read the slot map of cluster {} from any node{}; check the addresses and that "
      "the cluster is up",
      cluster.name, why)));
}

}  // namespace xdcr::target
