#pragma once
// Runs one coroutine to completion on a fresh io_context, for tests of the agent's async code
// (NTP/NTS clients, probes). An exception escaping the coroutine is rethrown here.

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <exception>
#include <optional>
#include <utility>

namespace xdcr::test {

template <class T>
T runSync(boost::asio::awaitable<T> task) {
  boost::asio::io_context ctx;
  std::optional<T> out;
  std::exception_ptr error;
  boost::asio::co_spawn(ctx, std::move(task), [&](std::exception_ptr e, T r) {
    if (e) {
      error = e;
    } else {
      out = std::move(r);
    }
  });
  ctx.run();
  if (error) std::rethrow_exception(error);
  return std::move(*out);
}

}  // namespace xdcr::test
