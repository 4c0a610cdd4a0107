#include "replicator/link_probe.h"

#include "common/redis_conn.h"

namespace xdcr::replicator {

boost::asio::awaitable<bool> allAnswer(boost::asio::any_io_executor ex,
                                       const std::vector<RedisEndpoint>& endpoints,
                                       std::chrono::milliseconds timeout) {
  for (const auto& endpoint : endpoints) {
    RedisConnection conn(ex, "probe of cluster " + endpoint.cluster);
    Status s = co_await conn.connect(endpoint, timeout);
    if (s && endpoint.memcached) {
      // memcached's text protocol: `version` answers one line (a PING would be an ERROR).
      s = co_await conn.writeAll("version\r\n");
      if (s) {
        auto line = co_await conn.readLine(timeout);
        if (!line) s = tl::unexpected<Error>(line.error());
      }
    } else if (s) {
      std::vector<std::string_view> ping{"PING"};  // GCC 12: no temporaries in co_await
      auto r = co_await conn.call(std::move(ping), timeout);
      if (!r) s = tl::unexpected<Error>(r.error());
    }
    conn.close();
    if (!s && (s.error().kind == Error::Kind::Io || s.error().kind == Error::Kind::Cancelled)) {
      co_return false;
    }
  }
  co_return true;
}

RedisEndpoint probeEndpoint(const config::ClusterConfig& cluster) {
  // A Redis Cluster's host/port are its first seed; a Sentinel-managed master is reached through
  // its Sentinels (the node itself is probed from the link's last session, see SourceLink).
  if (cluster.isSentinel() && !cluster.sentinels.empty()) {
    return cluster.sentinelEndpoint(cluster.sentinels.front());
  }
  return cluster.endpoint();
}

}  // namespace xdcr::replicator
