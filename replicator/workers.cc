#include "replicator/workers.h"

#include <spdlog/spdlog.h>
#include <boost/asio/post.hpp>

#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>

namespace xdcr::replicator {

Workers::Workers(net::io_context& main, int threads) : main_(main) {
  for (int i = 1; i < threads; ++i) {
    auto w = std::make_unique<Worker>();
    net::io_context& ioc = w->ioc;
    w->thread = std::thread([&ioc, i] {
      try {
        ioc.run();
      } catch (const std::exception& e) {
        // As on the first thread, where an exception out of run() ends the process.
        spdlog::critical("thread {}: {}", i, e.what());
        std::abort();
      }
    });
    workers_.push_back(std::move(w));
  }
}

Workers::~Workers() {
  stop();
}

net::any_io_executor Workers::next(int* index) {
  if (workers_.empty()) {
    if (index != nullptr) *index = 0;
    return main_.get_executor();
  }
  const size_t i = next_++ % workers_.size();
  if (index != nullptr) *index = static_cast<int>(i) + 1;
  return workers_[i]->ioc.get_executor();
}

void Workers::exclusive(const std::function<void()>& f) {
  size_t running = 0;
  for (const auto& w : workers_) running += w->thread.joinable() ? 1 : 0;
  if (running == 0 || inside_) {  // (inside: the threads are parked already)
    f();
    return;
  }
  // Each thread runs one handler that waits here until `f` has returned: a mutex hand-over both
  // ways, so what `f` wrote is seen by the threads afterwards, and what they wrote before by `f`.
  struct Park {
    std::mutex m;
    std::condition_variable cv;
    size_t parked = 0;
    bool released = false;
  };
  auto park = std::make_shared<Park>();
  for (const auto& w : workers_) {
    if (!w->thread.joinable()) continue;
    net::post(w->ioc, [park] {
      std::unique_lock lock(park->m);
      ++park->parked;
      park->cv.notify_all();
      park->cv.wait(lock, [&] { return park->released; });
    });
  }
  {
    std::unique_lock lock(park->m);
    park->cv.wait(lock, [&] { return park->parked == running; });
  }
  struct Release {  // also when f throws
    std::shared_ptr<Park> park;
    ~Release() {
      {
        std::lock_guard lock(park->m);
        park->released = true;
      }
      park->cv.notify_all();
    }
  } release{park};
  inside_ = true;
  struct Leave {
    bool& inside;
    ~Leave() { inside = false; }
  } leave{inside_};
  f();
}

void Workers::stop() {
  for (const auto& w : workers_) {
    w->work.reset();
    w->ioc.stop();
  }
  for (const auto& w : workers_) {
    if (w->thread.joinable()) w->thread.join();
  }
}

}  // namespace xdcr::replicator
