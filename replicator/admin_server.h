#pragma once
// The admin HTTP server (interface.md §3), on Boost.Beast, on the agent's io_context. It only
// parses HTTP and routes: what each path answers is the agent's `Handler`. Binds where
// agent.admin_listen says (the examples use 127.0.0.1). Requests are small and bounded
// (64 KiB), connections time out after 30 s of silence. With agent.admin_token the handler
// refuses POSTs without `Authorization: Bearer <token>` (bearerTokenMatches()); GETs stay open.

#include <boost/asio/any_io_executor.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"

namespace xdcr::replicator {

struct AdminRequest {
  std::string method;         // GET, POST, ...
  std::string path;           // without the query string
  std::string authorization;  // the Authorization header ("" when absent); never log it
};

struct AdminReply {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra response headers
};

/**
 * True when `authorization` is `Bearer <token>` with exactly `token` (the scheme is
 * case-insensitive). Constant time in the token's content and length: both sides are hashed
 * (SHA-256) and the digests compared with CRYPTO_memcmp. An empty `token` matches nothing.
 */
bool bearerTokenMatches(std::string_view authorization, std::string_view token);

using AdminHandler = std::function<AdminReply(const AdminRequest&)>;

class AdminServer {
 public:
  AdminServer(boost::asio::any_io_executor ex, AdminHandler handler);
  ~AdminServer();

  /** Binds and listens on `listen` (host:port; port 0 = any free port). */
  Status start(const std::string& listen);
  /** The bound address, e.g. "127.0.0.1:9464". */
  std::string address() const;
  /** Stops accepting and closes the listener. */
  void stop();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

/** A blocking HTTP request to a running agent's admin server: {status, body}. `address` is
 *  host:port, or the URL the agent logs (http://host:port/). A HEAD reply has no body. */
/** `bearer_token`, when not empty, is sent as `Authorization: Bearer <token>`. */
Result<std::pair<int, std::string>> adminRequest(const std::string& address,
                                                 const std::string& method, const std::string& path,
                                                 std::chrono::milliseconds timeout,
                                                 const std::string& bearer_token = "");
inline Result<std::pair<int, std::string>> adminGet(const std::string& address,
                                                    const std::string& path,
                                                    std::chrono::milliseconds timeout) {
  return adminRequest(address, "GET", path, timeout);
}

}  // namespace xdcr::replicator
