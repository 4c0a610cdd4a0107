#include "source/locator.h"

#include <spdlog/spdlog.h>

#include "common/sentinel.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace xdcr::source {

namespace net = boost::asio;

net::awaitable<Result<NodeChoice>> FixedLocator::locate() {
  NodeChoice c;
  c.endpoint = cluster_.endpoint();
  c.role.clear();  // a standalone source is whatever it is (a chained replica works too)
  co_return c;
}

net::awaitable<void> FixedLocator::watch(const NodeChoice& /*attached*/) {
  net::steady_timer t(co_await net::this_coro::executor);
  for (;;) {
    t.expires_after(std::chrono::hours(24));
    auto [ec] = co_await t.async_wait(net::as_tuple(net::use_awaitable));
    if (ec) co_return;  // cancelled: the session ends
  }
}

net::awaitable<Result<NodeChoice>> SentinelLocator::locate() {
  // Each step of the discovery (connect, ask, check the master's ROLE) within 10 s.
  auto master = co_await sentinel::discoverMaster(cluster_, std::chrono::seconds(10));
  if (!master) co_return fail(master.error());
  NodeChoice c;
  c.endpoint = *master;
  c.role = "master";
  co_return c;
}

net::awaitable<void> SentinelLocator::watch(const NodeChoice& attached) {
  // Never stay attached to a node the Sentinels no longer call master: the old master keeps
  // streaming bytes of a history the new one never has (cluster-notes.md §3.6).
  const std::string current = attached.endpoint.address();
  const std::string who = "source " + cluster_.name;  // (lvalues: GCC 12)
  Error moved = co_await sentinel::untilMasterMoves(cluster_, current, who);
  spdlog::info("{}", moved.message);
}

std::shared_ptr<Locator> fixedLocator(const config::ClusterConfig& cluster) {
  if (cluster.isSentinel()) return std::make_shared<SentinelLocator>(cluster);
  return std::make_shared<FixedLocator>(cluster);
}

}  // namespace xdcr::source
