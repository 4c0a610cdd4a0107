#pragma once
// The agent's threads (agent.threads, issue 15 point 6). The first thread runs the agent's
// io_context: discovery of Redis Cluster sources, the migration guards, the clock monitor, the
// admin server, signals, reloads. Each further thread runs an io_context of its own, and each
// source link — with its pipelines and their targets — lives on one thread for its whole life,
// so the hot path (reading a shard's stream, filtering, writing the target) takes no lock.
//
// What crosses threads, and how (docs/architecture.md, "Threads"):
//  - the first thread touches a link's pipelines (pause, resume, stop, a clock report, the admin
//    server's reads, deleting a finished one) only inside exclusive(): every other thread is
//    parked in a handler meanwhile, so nothing runs on them;
//  - a link reaches the first thread's objects (a shard's locator, the migration guard) through
//    their awaitable calls, which run on the first thread's executor (co_spawn there), and
//    tells the agent a pipeline finished by posting to it;
//  - the migration guard reads other pipelines' checkpoint progress from atomics.
// With threads: 1 there is no other thread: exclusive() runs its function at once.

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>

#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace xdcr::replicator {

namespace net = boost::asio;

class Workers {
 public:
  /** `main`: the first thread's io_context (run by the caller); `threads` counts it. */
  Workers(net::io_context& main, int threads);
  ~Workers();
  Workers(const Workers&) = delete;
  Workers& operator=(const Workers&) = delete;

  /** The number of threads, the first included. */
  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  /** The executor of the first thread. */
  net::any_io_executor main() const { return main_.get_executor(); }
  /** The executor a new link runs on: the other threads in turn (the first with threads: 1).
   *  `index` is set to its thread's number (0: the first). */
  net::any_io_executor next(int* index = nullptr);
  /**
   * Runs `f` on the calling thread (the first one) while every other thread is parked in a
   * handler: `f` may touch anything a link owns. Must not be called from another thread.
   * Waits for each thread's current handler to return (handlers do not block). Called again
   * from inside `f` (a callback of something `f` did), it runs its function at once.
   */
  void exclusive(const std::function<void()>& f);
  /** Stops the other threads' io_contexts and joins them (idempotent). Their pending handlers
   *  are destroyed with the io_contexts, in the destructor. */
  void stop();

 private:
  struct Worker {
    net::io_context ioc{1};
    net::executor_work_guard<net::io_context::executor_type> work{ioc.get_executor()};
    std::thread thread;
  };
  net::io_context& main_;
  std::vector<std::unique_ptr<Worker>> workers_;
  size_t next_ = 0;
  bool inside_ = false;  // in exclusive()'s function
};

}  // namespace xdcr::replicator
