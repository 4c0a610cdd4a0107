#include "replicator/admin_server.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <spdlog/spdlog.h>

#include <array>
#include <cctype>

namespace xdcr::replicator {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
constexpr auto use_nothrow = net::as_tuple(net::use_awaitable);

using Digest = std::array<unsigned char, 32>;

Digest sha256(std::string_view data) {
  Digest out{};
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), out.data(), &len, EVP_sha256(), nullptr);
  return out;
}

}  // namespace

bool bearerTokenMatches(std::string_view authorization, std::string_view token) {
  if (token.empty()) return false;
  constexpr std::string_view kScheme = "bearer ";
  if (authorization.size() < kScheme.size()) return false;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != kScheme[i]) return false;
  }
  std::string_view presented = authorization.substr(kScheme.size());
  while (!presented.empty() && presented.front() == ' ') presented.remove_prefix(1);
  while (!presented.empty() && presented.back() == ' ') presented.remove_suffix(1);
  // Hashing first makes the comparison independent of where the strings differ and of their
  // lengths; CRYPTO_memcmp does not stop at the first difference.
  const Digest a = sha256(presented);
  const Digest b = sha256(token);
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

struct AdminServer::Impl : std::enable_shared_from_this<AdminServer::Impl> {
  Impl(net::any_io_executor ex, AdminHandler h) : acceptor(ex), handler(std::move(h)) {}

  net::awaitable<void> acceptLoop() {
    auto self = shared_from_this();  // outlives the AdminServer while the loop runs
    for (;;) {
      auto [ec, socket] = co_await acceptor.async_accept(use_nothrow);
      if (ec) {
        if (ec == net::error::operation_aborted || !acceptor.is_open()) co_return;
        spdlog::warn("admin server: accept failed: {}", ec.message());
        continue;
      }
      net::co_spawn(acceptor.get_executor(), session(std::move(socket)), net::detached);
    }
  }

  net::awaitable<void> session(tcp::socket socket) {
    auto self = shared_from_this();
    beast::tcp_stream stream(std::move(socket));
    beast::flat_buffer buffer;
    for (;;) {
      stream.expires_after(std::chrono::seconds(30));
      http::request_parser<http::string_body> parser;
      parser.body_limit(64 * 1024);
      parser.header_limit(16 * 1024);
      auto [rec, n] = co_await http::async_read(stream, buffer, parser, use_nothrow);
      if (rec) break;  // closed, timed out or malformed: nothing to answer
      const auto& req = parser.get();
      AdminRequest ar;
      ar.method = std::string(req.method_string());
      // HEAD: what GET would answer, without the body (monitors and load balancers probe so).
      const bool head = req.method() == http::verb::head;
      if (head) ar.method = "GET";
      std::string_view target = req.target();
      ar.path = std::string(target.substr(0, target.find('?')));
      if (auto it = req.find(http::field::authorization); it != req.end()) {
        ar.authorization = std::string(it->value());
      }
      AdminReply reply;
      try {
        reply = handler(ar);
      } catch (const std::exception& e) {
        reply = AdminReply{500, "text/plain; charset=utf-8", std::string("error: ") + e.what(), {}};
      }
      http::response<http::string_body> res{static_cast<http::status>(reply.status), req.version()};
      res.set(http::field::server, "xdcr-agent");
      res.set(http::field::content_type, reply.content_type);
      for (const auto& [name, value] : reply.headers) res.set(name, value);
      res.keep_alive(req.keep_alive());
      res.body() = std::move(reply.body);
      res.prepare_payload();
      if (head) res.body().clear();  // (Content-Length stays that of the GET)
      auto [wec, wn] = co_await http::async_write(stream, res, use_nothrow);
      if (wec || !res.keep_alive()) break;
    }
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
  }

  tcp::acceptor acceptor;
  AdminHandler handler;
};

AdminServer::AdminServer(net::any_io_executor ex, AdminHandler handler)
    : impl_(std::make_shared<Impl>(std::move(ex), std::move(handler))) {}

AdminServer::~AdminServer() {
  stop();
}

Status AdminServer::start(const std::string& listen) {
  auto colon = listen.rfind(':');
  if (colon == std::string::npos) {
    return fail(Error::io(fmt::format("admin_listen \"{}\": use host:port", listen)));
  }
  std::string host = listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  boost::system::error_code ec;
  auto addr = net::ip::make_address(host, ec);
  if (ec) {
    return fail(
        Error::io(fmt::format("admin_listen \"{}\": \"{}\" is not an IP address", listen, host)));
  }
  tcp::endpoint ep(addr, static_cast<uint16_t>(std::stoi(listen.substr(colon + 1))));
  auto& a = impl_->acceptor;
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return fail(
        Error::io(fmt::format("admin server cannot listen on {}: {}; choose another "
                              "agent.admin_listen",
                              listen, ec.message())));
  }
  net::co_spawn(a.get_executor(), impl_->acceptLoop(), net::detached);
  spdlog::info("admin server listening on http://{}", address());
  return Status{};
}

std::string AdminServer::address() const {
  boost::system::error_code ec;
  auto ep = impl_->acceptor.local_endpoint(ec);
  if (ec) return "";
  return fmt::format("{}:{}", ep.address().to_string(), ep.port());
}

void AdminServer::stop() {
  boost::system::error_code ignored;
  impl_->acceptor.close(ignored);
}

Result<std::pair<int, std::string>> adminRequest(const std::string& raw_address,
                                                 const std::string& method, const std::string& path,
                                                 std::chrono::milliseconds timeout,
                                                 const std::string& bearer_token) {
  // The URL the agent logs ("http://HOST:PORT", maybe with a '/') is accepted as well.
  std::string address = raw_address;
  if (address.rfind("http://", 0) == 0) address.erase(0, 7);
  while (!address.empty() && address.back() == '/') address.pop_back();
  auto colon = address.rfind(':');
  if (colon == std::string::npos) {
    return fail(Error::io(fmt::format("--admin \"{}\": use host:port", address)));
  }
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  beast::error_code ec;
  tcp::resolver resolver(ioc);
  auto results = resolver.resolve(address.substr(0, colon), address.substr(colon + 1), ec);
  if (!ec) {
    stream.expires_after(timeout);
    stream.connect(results, ec);
  }
  if (ec) {
    return fail(
        Error::io(fmt::format("cannot reach the agent's admin server at {}: {}; is the "
                              "agent running with agent.admin_listen set to it?",
                              address, ec.message())));
  }
  http::request<http::empty_body> req{http::string_to_verb(method), path, 11};
  req.set(http::field::host, address);
  if (!bearer_token.empty()) req.set(http::field::authorization, "Bearer " + bearer_token);
  http::write(stream, req, ec);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.skip(method == "HEAD");  // a HEAD reply has a Content-Length but no body
  if (!ec) http::read(stream, buffer, parser, ec);
  if (ec) {
    return fail(Error::io(fmt::format("admin server at {}: {}", address, ec.message())));
  }
  return std::pair<int, std::string>{parser.get().result_int(), parser.get().body()};
}

}  // namespace xdcr::replicator
