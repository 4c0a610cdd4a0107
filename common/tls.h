#pragma once
// TLS for Redis connections (interface.md §2 `tls:`), on OpenSSL through boost::asio::ssl: the
// client context (TLS 1.2 at least, trust anchors, client certificate), the per-connection name
// check and SNI, and errors that say what is wrong and what to do. Used by RedisConnection; the
// NTS-KE client (clock/) has its own TLS 1.3 setup.

#include <boost/asio/ssl/context.hpp>

#include <openssl/ssl.h>

#include <string>
#include <string_view>

#include "common/error.h"
#include "common/redis_endpoint.h"

namespace xdcr::tls {

namespace ssl = boost::asio::ssl;

/**
 * A client context for `endpoint.tls`: TLS 1.2 as the floor, peer verification unless
 * `verify: false`, trust anchors from ca_file (else the system store), the client certificate
 * and key for mutual TLS (never a passphrase prompt). `who` prefixes every message.
 */
Result<ssl::context> makeClientContext(const RedisEndpoint& endpoint, std::string_view who);

/**
 * Per connection, before the handshake: SNI (a DNS name only) and the name the certificate
 * must match — `server_name`, else the endpoint's host; an IP address is checked against the
 * certificate's IP subjectAltNames. Also arms the recorder that describeHandshakeFailure() reads.
 */
Status prepareSession(SSL* ssl, const RedisEndpoint& endpoint, std::string_view who);

/** The name (or IP address) the server's certificate is checked against. */
std::string checkedName(const RedisEndpoint& endpoint);

/**
 * A failed handshake explained: which check failed (CA, name, dates, client certificate, not a
 * TLS port, protocol version) and what to change in the cluster's `tls:`. Nothing was sent to
 * the server yet when this is reported.
 */
Error describeHandshakeFailure(SSL* ssl, const boost::system::error_code& ec,
                               const RedisEndpoint& endpoint, std::string_view who);

/**
 * A read or write failure on an established TLS session, explained when TLS says more than
 * "connection lost" (e.g. the server asked for a client certificate after a TLS 1.3
 * handshake); "" when there is nothing to add. `nothing_received`: no application data came
 * from the server yet on this session (a drop then is about the handshake's outcome).
 */
std::string explainSessionError(const boost::system::error_code& ec, const RedisEndpoint& endpoint,
                                SSL* ssl, bool nothing_received);

/** The server asked for a client certificate during the handshake and none was configured. */
bool clientCertificateRequested(SSL* ssl);

/** True for an error of the TLS layer (OpenSSL or the asio SSL stream). */
bool isTlsError(const boost::system::error_code& ec);

}  // namespace xdcr::tls
