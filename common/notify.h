#pragma once
// A wake-up for ONE waiting coroutine on the same strand: notify() resumes it (or makes its next
// wait() return at once). A steady_timer that never expires, cancelled to wake.

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace xdcr {

class Notify {
 public:
  explicit Notify(boost::asio::any_io_executor ex) : timer_(std::move(ex)) {}
  void notify() {
    pending_ = true;
    timer_.cancel();
  }
  boost::asio::awaitable<void> wait() {
    if (!pending_) {
      timer_.expires_at(boost::asio::steady_timer::time_point::max());
      co_await timer_.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
    }
    pending_ = false;
  }
  /** Waits at most `d`. */
  boost::asio::awaitable<void> waitFor(std::chrono::steady_clock::duration d) {
    if (!pending_) {
      timer_.expires_after(d);
      co_await timer_.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
    }
    pending_ = false;
  }

 private:
  boost::asio::steady_timer timer_;
  bool pending_ = false;
};

}  // namespace xdcr
