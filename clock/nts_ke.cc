// NTS-KE (RFC 8915 §4) over Boost.Asio TLS: connect, TLS 1.3 handshake with certificate and
// name checks and ALPN "ntske/1", one request, the response up to End of Message, keys from the
// TLS exporter. Every step is bounded by one deadline.

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <cstring>
#include <vector>

#include "clock/nts.h"
#include "common/openssl_error.h"

namespace xdcr::clock {
namespace {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
using namespace net::experimental::awaitable_operators;
constexpr auto use_nothrow = net::as_tuple(net::use_awaitable);

// ALPN in wire form: length-prefixed protocol names.
constexpr unsigned char kAlpn[] = {7, 'n', 't', 's', 'k', 'e', '/', '1'};
constexpr std::string_view kAlpnName = "ntske/1";

// What an operator should do about a certificate that did not verify.
std::string verifyHint(long result, const std::string& host, const std::string& ca_file) {
  switch (result) {
    case X509_V_ERR_HOSTNAME_MISMATCH:
    case X509_V_ERR_IP_ADDRESS_MISMATCH:
      return fmt::format(
          ": the server's certificate is not valid for the name \"{}\" we connected to; use a "
          "name or address listed in its subjectAltName, or have it reissued",
          host);
    case X509_V_ERR_CERT_HAS_EXPIRED:
    case X509_V_ERR_CERT_NOT_YET_VALID:
      return ": check the certificate's validity dates and this host's clock (NTS-KE checks "
             "them against the local clock)";
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
    case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
    case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
    case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
    case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
      return ca_file.empty()
                 ? ": the certificate does not chain to a CA in the system trust store; set "
                   "ca_file to the CA that issued it"
                 : fmt::format(
                       ": the certificate does not chain to the CA in ca_file \"{}\"; "
                       "point ca_file at the CA that issued the server's certificate",
                       ca_file);
  }
  return {};
}

}  // namespace

net::awaitable<Result<NtsKeResult>> ntsKeyExchange(HostPort server, std::string ca_file,
                                                   std::chrono::milliseconds timeout) {
  auto ex = co_await net::this_coro::executor;
  const std::string who = "NTS-KE server " + formatHostPort(server.host, server.port);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto timedOut = [&](const char* stage) {
    return fail(
        Error::io(fmt::format("{}: no answer within {} ms while {}", who, timeout.count(), stage)));
  };
  ERR_clear_error();

  // --- TLS context: TLS 1.3 at least (RFC 8915 §4), peer verification, ALPN.
  ssl::context ctx(ssl::context::tls_client);
  SSL_CTX* raw_ctx = ctx.native_handle();
  if (SSL_CTX_set_min_proto_version(raw_ctx, TLS1_3_VERSION) != 1) {
    co_return fail(Error::io(fmt::format("{}: cannot require TLS 1.3: {}", who, opensslReason())));
  }
  boost::system::error_code ec;
  if (ca_file.empty()) {
    ctx.set_default_verify_paths(ec);
  } else {
    ctx.load_verify_file(ca_file, ec);
  }
  if (ec) {
    co_return fail(Error::io(
        ca_file.empty()
            ? fmt::format("{}: cannot load the system trust store: {}", who, ec.message())
            : fmt::format("{}: cannot load ca_file \"{}\": {} (it must be a readable PEM file of "
                          "CA certificates)",
                          who, ca_file, ec.message())));
  }
  ctx.set_verify_mode(ssl::verify_peer, ec);
  // Unlike most OpenSSL calls this one returns 0 on success.
  if (ec || SSL_CTX_set_alpn_protos(raw_ctx, kAlpn, sizeof kAlpn) != 0) {
    co_return fail(Error::io(
        fmt::format("{}: cannot configure TLS: {}", who, ec ? ec.message() : opensslReason())));
  }

  // --- Where to connect. An IP literal needs no resolver (which cannot be cancelled in Boost
  // 1.81, so a name lookup is bounded only by the system resolver's own timeout).
  std::vector<net::ip::tcp::endpoint> endpoints;
  boost::system::error_code addr_ec;
  const auto literal = net::ip::make_address(server.host, addr_ec);
  const bool is_ip = !addr_ec;
  if (is_ip) {
    endpoints.emplace_back(literal, server.port);
  } else {
    net::ip::tcp::resolver resolver(ex);
    auto [rec, results] =
        co_await resolver.async_resolve(server.host, std::to_string(server.port), use_nothrow);
    if (rec || results.empty()) {
      co_return fail(Error::io(fmt::format("{}: cannot resolve \"{}\": {}", who, server.host,
                                           rec ? rec.message() : "no address")));
    }
    for (const auto& entry : results) {
      endpoints.push_back(entry.endpoint());
    }
  }

  ssl::stream<net::ip::tcp::socket> stream(ex, ctx);
  SSL* ssl_handle = stream.native_handle();
  // The name check: an IP literal against the certificate's IP SANs; a DNS name against its DNS
  // SANs (no partial wildcards), and sent as SNI so a server with several names picks the right
  // certificate.
  if (is_ip) {
    if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl_handle), server.host.c_str()) != 1) {
      co_return fail(
          Error::io(fmt::format("{}: cannot set the address to verify: {}", who, opensslReason())));
    }
  } else {
    SSL_set_hostflags(ssl_handle, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if (SSL_set1_host(ssl_handle, server.host.c_str()) != 1 ||
        SSL_set_tlsext_host_name(ssl_handle, server.host.c_str()) != 1) {
      co_return fail(Error::io(
          fmt::format("{}: cannot set the host name to verify: {}", who, opensslReason())));
    }
  }

  // --- TCP.
  net::ip::tcp::endpoint connected;
  {
    net::steady_timer timer(ex, deadline);
    auto r = co_await (net::async_connect(stream.next_layer(), endpoints, use_nothrow) ||
                       timer.async_wait(use_nothrow));
    if (r.index() == 1) {
      co_return timedOut("connecting");
    }
    auto [cec, ep] = std::get<0>(r);
    if (cec) {
      co_return fail(Error::io(fmt::format("{}: cannot connect: {}", who, cec.message())));
    }
    connected = ep;
  }

  // --- TLS handshake.
  {
    net::steady_timer timer(ex, deadline);
    auto r = co_await (stream.async_handshake(ssl::stream_base::client, use_nothrow) ||
                       timer.async_wait(use_nothrow));
    if (r.index() == 1) {
      co_return timedOut("in the TLS handshake");
    }
    auto [hec] = std::get<0>(r);
    if (hec) {
      const long verify = SSL_get_verify_result(ssl_handle);
      ERR_clear_error();
      if (verify != X509_V_OK) {
        co_return fail(Error::auth(fmt::format(
            "{}: TLS handshake failed: certificate verify failed: {}{}", who,
            X509_verify_cert_error_string(verify), verifyHint(verify, server.host, ca_file))));
      }
      std::string why = hec.message();
      if (why.find("no application protocol") != std::string::npos) {
        why += " (the server does not speak NTS-KE, ALPN \"ntske/1\")";
      } else if (why.find("protocol version") != std::string::npos) {
        why += " (NTS-KE needs TLS 1.3; the server offers an older version)";
      }
      co_return fail(Error::io(fmt::format("{}: TLS handshake failed: {}", who, why)));
    }
  }

  // --- ALPN: a TLS server that ignores ALPN completes the handshake without selecting one.
  {
    const unsigned char* selected = nullptr;
    unsigned selected_len = 0;
    SSL_get0_alpn_selected(ssl_handle, &selected, &selected_len);
    std::string_view got(reinterpret_cast<const char*>(selected), selected ? selected_len : 0);
    if (got != kAlpnName) {
      co_return fail(Error::protocol(fmt::format(
          "{}: ALPN: the server selected {} instead of \"ntske/1\": not an NTS-KE server", who,
          got.empty() ? std::string("no protocol") : fmt::format("\"{}\"", got))));
    }
  }

  // --- Request, then the response up to End of Message.
  const NtsBytes request = makeNtsKeRequest();
  {
    net::steady_timer timer(ex, deadline);
    auto r = co_await (net::async_write(stream, net::buffer(request), use_nothrow) ||
                       timer.async_wait(use_nothrow));
    if (r.index() == 1) {
      co_return timedOut("sending the NTS-KE request");
    }
    if (auto [wec, n] = std::get<0>(r); wec) {
      co_return fail(
          Error::io(fmt::format("{}: sending the NTS-KE request failed: {}", who, wec.message())));
    }
  }
  NtsBytes received;
  std::optional<NtsKeResponse> response;
  std::array<uint8_t, 4096> buf{};
  while (!response) {
    net::steady_timer timer(ex, deadline);
    auto r = co_await (stream.async_read_some(net::buffer(buf), use_nothrow) ||
                       timer.async_wait(use_nothrow));
    if (r.index() == 1) {
      co_return timedOut("waiting for the NTS-KE response");
    }
    auto [rec, n] = std::get<0>(r);
    received.insert(received.end(), buf.begin(), buf.begin() + static_cast<ptrdiff_t>(n));
    if (rec && n == 0) {
      co_return fail(Error::protocol(
          fmt::format("{}: KE protocol: connection ended after {} bytes, before End of Message: {}",
                      who, received.size(), rec.message())));
    }
    auto parsed = parseNtsKeResponse(received);
    if (!parsed) {
      Error e = parsed.error();
      e.message = fmt::format("{}: KE protocol: {}", who, e.message);
      co_return fail(std::move(e));
    }
    response = std::move(*parsed);
  }

  // --- Keys (RFC 8915 §5.1): both directions from the exporter, context = protocol, AEAD, dir.
  NtsKeResult result;
  for (bool s2c : {false, true}) {
    auto context = ntsExporterContext(s2c);
    auto& key = s2c ? result.keys.s2c : result.keys.c2s;
    if (SSL_export_keying_material(ssl_handle, key.data(), key.size(), kNtsExporterLabel,
                                   std::strlen(kNtsExporterLabel), context.data(), context.size(),
                                   1) != 1) {
      co_return fail(
          Error::io(fmt::format("{}: cannot derive the NTS keys: {}", who, opensslReason())));
    }
  }
  result.response = std::move(*response);
  result.ke_address = connected.address().to_string();
  // No TLS close_notify exchange: the server closes after End of Message and we have all we
  // need; waiting for its close_notify would only add a round trip that can hang.
  stream.next_layer().close(ec);
  co_return result;
}

}  // namespace xdcr::clock
