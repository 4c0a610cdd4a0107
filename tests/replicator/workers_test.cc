// The agent's threads (replicator/workers.h): links spread over the other threads in turn, and
// exclusive() runs its function while none of them runs a handler.
#include "replicator/workers.h"

#include <gtest/gtest.h>
#include <boost/asio/post.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <set>
#include <thread>

namespace xdcr::replicator {
namespace {

using namespace std::chrono_literals;

/** The id of the thread that runs `ex`'s handlers. */
std::thread::id threadOf(const net::any_io_executor& ex) {
  std::promise<std::thread::id> id;
  net::post(ex, [&] { id.set_value(std::this_thread::get_id()); });
  auto f = id.get_future();
  EXPECT_EQ(f.wait_for(10s), std::future_status::ready);
  return f.get();
}

TEST(Workers, OneThreadRunsEverythingOnTheFirst) {
  net::io_context main;
  Workers w(main, 1);
  EXPECT_EQ(w.threads(), 1);
  int index = -1;
  EXPECT_TRUE(w.next(&index) == net::any_io_executor(main.get_executor()));
  EXPECT_EQ(index, 0);
  bool ran = false;
  w.exclusive([&] { ran = true; });
  EXPECT_TRUE(ran);
}

TEST(Workers, LinksTakeTheOtherThreadsInTurn) {
  net::io_context main;
  Workers w(main, 3);
  EXPECT_EQ(w.threads(), 3);
  std::vector<int> indices;
  std::set<std::thread::id> ids;
  for (int i = 0; i < 4; ++i) {
    int index = -1;
    const net::any_io_executor ex = w.next(&index);
    indices.push_back(index);
    ids.insert(threadOf(ex));
  }
  EXPECT_EQ(indices, (std::vector<int>{1, 2, 1, 2}));
  // Two threads of their own, neither the caller's (which would run the first io_context).
  EXPECT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids.count(std::this_thread::get_id()), 0u);
}

TEST(Workers, ExclusiveRunsWhileNoOtherThreadRunsAHandler) {
  net::io_context main;
  Workers w(main, 3);
  // Each thread keeps running short handlers, each one counting.
  std::atomic<uint64_t> ticks = 0;
  std::atomic<bool> done = false;
  std::function<void(net::any_io_executor)> tick = [&](net::any_io_executor ex) {
    ++ticks;
    if (!done) net::post(ex, [&tick, ex] { tick(ex); });
  };
  for (int i = 0; i < 2; ++i) {
    net::any_io_executor ex = w.next();
    net::post(ex, [&tick, ex] { tick(ex); });
  }
  auto advances = [&] {
    const uint64_t before = ticks;
    for (int i = 0; i < 1000 && ticks == before; ++i) std::this_thread::sleep_for(1ms);
    return ticks != before;
  };
  ASSERT_TRUE(advances());
  for (int round = 0; round < 3; ++round) {
    uint64_t inside_before = 0, inside_after = 0;
    bool nested = false;
    w.exclusive([&] {
      inside_before = ticks;
      std::this_thread::sleep_for(30ms);
      w.exclusive([&] { nested = true; });  // a callback of what f did: runs at once
      inside_after = ticks;
    });
    EXPECT_EQ(inside_before, inside_after) << "a handler ran during exclusive(), round " << round;
    EXPECT_TRUE(nested);
    EXPECT_TRUE(advances()) << "the threads did not resume after exclusive(), round " << round;
  }
  done = true;
  w.stop();
  // Stopped: nothing to park, the function runs at once.
  bool ran = false;
  w.exclusive([&] { ran = true; });
  EXPECT_TRUE(ran);
}

}  // namespace
}  // namespace xdcr::replicator
