#pragma once
// What the one-shot commands (`verify`, `explain`, `pause`|`resume`|`resync`) share: the message
// for a pipeline name the config lacks, and running a command's coroutine to its end on an
// io_context of its own.

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include <exception>
#include <iostream>
#include <string>

#include "config/config.h"

namespace xdcr::replicator {

/** `no pipeline named "NAME" in FILE (pipelines: a, b)`. */
inline std::string noSuchPipeline(const config::Config& config, const std::string& name) {
  std::string names;
  for (const auto& p : config.pipelines) names += (names.empty() ? "" : ", ") + p.name;
  return "no pipeline named \"" + name + "\" in " + config.path + " (pipelines: " + names + ")";
}

/** Runs `task` on `ioc` until it ends: its exit status, or 2 (said on stderr, naming `command`)
 *  when it threw. */
inline int runOneShot(const char* command, boost::asio::io_context& ioc,
                      boost::asio::awaitable<int> task) {
  int code = 2;
  boost::asio::co_spawn(ioc, std::move(task), [&](std::exception_ptr e, int c) {
    if (!e) {
      code = c;
      return;
    }
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      std::cerr << command << ": unexpected failure: " << ex.what() << "\n";
    }
    code = 2;
  });
  ioc.run();
  return code;
}

}  // namespace xdcr::replicator
