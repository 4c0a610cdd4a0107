#include "source/locator.h"

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

std::shared_ptr<Locator> fixedLocator(const config::ClusterConfig& cluster) {
  return std::make_shared<FixedLocator>(cluster);
}

}  // namespace xdcr::source
