#include "common/tls.h"

#include <boost/asio/error.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ssl/error.hpp>

#include <openssl/err.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>

#include <ctime>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "common/openssl_error.h"

namespace xdcr::tls {
namespace {

namespace net = boost::asio;

/**
 * What the certificate check saw when it failed: recorded by the verify callback (the peer's
 * certificate is not kept by OpenSSL after a failed verification) and owned by the SSL object.
 */
struct VerifyRecord {
  bool client_cert_requested = false;  // the server sent a CertificateRequest; we had none
  bool failed = false;
  long error = X509_V_OK;
  int depth = 0;
  std::string subject;
  std::string sans;  // "DNS:a, IP:127.0.0.1"
  std::string not_before;
  std::string not_after;
};

void freeRecord(void* /*parent*/, void* ptr, CRYPTO_EX_DATA* /*ad*/, int /*idx*/, long /*argl*/,
                void* /*argp*/) {
  delete static_cast<VerifyRecord*>(ptr);
}

int recordIndex() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, freeRecord);
  return index;
}

std::string asn1Time(const ASN1_TIME* t) {
  std::tm tm{};
  if (t == nullptr || ASN1_TIME_to_tm(t, &tm) != 1) return "?";
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

std::string subjectOf(X509* cert) {
  char buf[512];
  if (X509_NAME_oneline(X509_get_subject_name(cert), buf, sizeof buf) == nullptr) return "?";
  return buf;
}

std::string sansOf(X509* cert) {
  std::string out;
  auto* names =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert, NID_subject_alt_name, nullptr, nullptr));
  if (names == nullptr) return out;
  for (int i = 0; i < sk_GENERAL_NAME_num(names); ++i) {
    const GENERAL_NAME* n = sk_GENERAL_NAME_value(names, i);
    std::string item;
    if (n->type == GEN_DNS) {
      const ASN1_STRING* s = n->d.dNSName;
      item = "DNS:" + std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                                  static_cast<size_t>(ASN1_STRING_length(s)));
    } else if (n->type == GEN_IPADD) {
      const ASN1_OCTET_STRING* s = n->d.iPAddress;
      const unsigned char* p = ASN1_STRING_get0_data(s);
      const int len = ASN1_STRING_length(s);
      if (len == 4) {
        net::ip::address_v4::bytes_type b{p[0], p[1], p[2], p[3]};
        item = "IP:" + net::ip::address_v4(b).to_string();
      } else if (len == 16) {
        net::ip::address_v6::bytes_type b;
        std::copy(p, p + 16, b.begin());
        item = "IP:" + net::ip::address_v6(b).to_string();
      }
    }
    if (!item.empty()) out += (out.empty() ? "" : ", ") + item;
  }
  GENERAL_NAMES_free(names);
  return out;
}

int verifyCallback(int preverify_ok, X509_STORE_CTX* store) {
  if (preverify_ok == 1) return 1;
  auto* ssl =
      static_cast<SSL*>(X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()));
  auto* rec =
      ssl != nullptr ? static_cast<VerifyRecord*>(SSL_get_ex_data(ssl, recordIndex())) : nullptr;
  if (rec != nullptr && !rec->failed) {
    rec->failed = true;
    rec->error = X509_STORE_CTX_get_error(store);
    rec->depth = X509_STORE_CTX_get_error_depth(store);
    if (X509* cert = X509_STORE_CTX_get_current_cert(store)) {
      rec->subject = subjectOf(cert);
      rec->sans = sansOf(cert);
      rec->not_before = asn1Time(X509_get0_notBefore(cert));
      rec->not_after = asn1Time(X509_get0_notAfter(cert));
    }
  }
  return 0;  // fail the handshake: nothing is sent to a server we could not verify
}

// Called by OpenSSL when the server asks for a client certificate and none is configured: note
// it (a server that requires one drops the session right after the handshake, sometimes before
// its alert can be read) and go on without one.
int clientCertCallback(SSL* ssl, X509** /*x509*/, EVP_PKEY** /*pkey*/) {
  if (auto* rec = static_cast<VerifyRecord*>(SSL_get_ex_data(ssl, recordIndex()))) {
    rec->client_cert_requested = true;
  }
  return 0;
}

bool isIpAddress(const std::string& s) {
  boost::system::error_code ec;
  net::ip::make_address(s, ec);
  return !ec;
}

std::string key(const RedisEndpoint& e, std::string_view field) {
  return fmt::format("clusters.{}.tls.{}", e.cluster, field);
}

/** "tls.ca_file \"PATH\"" or "the system trust store". */
std::string trustAnchors(const RedisEndpoint& e) {
  return e.tls->ca_file.empty() ? std::string("the system trust store (no tls.ca_file)")
                                : fmt::format("{} \"{}\"", key(e, "ca_file"), e.tls->ca_file);
}

std::string nowUtc() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

int sslReason(const boost::system::error_code& ec) {
  if (ec.category() != net::error::get_ssl_category()) return 0;
  const auto code = static_cast<unsigned long>(ec.value());
  if (ERR_GET_LIB(code) != ERR_LIB_SSL) return 0;
  return ERR_GET_REASON(code);
}

bool isEofLike(const boost::system::error_code& ec) {
  return ec == net::error::eof || ec == net::ssl::error::stream_truncated ||
         ec == net::error::connection_reset || ec == net::error::broken_pipe ||
         sslReason(ec) == SSL_R_UNEXPECTED_EOF_WHILE_READING;
}

std::string notTlsHint(const RedisEndpoint& e) {
  return fmt::format(
      "is {} a TLS port? If the server does not use TLS there, remove tls: from cluster {} (or "
      "point address at the server's tls-port)",
      e.address(), e.cluster);
}

}  // namespace

bool isTlsError(const boost::system::error_code& ec) {
  return ec.category() == net::error::get_ssl_category() ||
         ec.category() == net::ssl::error::get_stream_category();
}

std::string checkedName(const RedisEndpoint& e) {
  return e.tls && !e.tls->server_name.empty() ? e.tls->server_name : e.host;
}

Result<ssl::context> makeClientContext(const RedisEndpoint& e, std::string_view who) {
  const TlsOptions& o = *e.tls;
  ERR_clear_error();
  ssl::context ctx(ssl::context::tls_client);
  SSL_CTX* raw = ctx.native_handle();
  if (SSL_CTX_set_min_proto_version(raw, TLS1_2_VERSION) != 1) {
    return fail(Error::io(fmt::format("{}: cannot require TLS 1.2: {}", who, opensslReason())));
  }
  SSL_CTX_set_options(raw, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  // An encrypted key must fail to load, not prompt on the terminal for a passphrase.
  SSL_CTX_set_default_passwd_cb(raw, [](char*, int, int, void*) { return 0; });
  if (o.verify) {
    if (o.ca_file.empty()) {
      if (SSL_CTX_set_default_verify_paths(raw) != 1) {
        return fail(Error::io(fmt::format(
            "{}: cannot load the system trust store: {}; set {} to the CA that issued the "
            "server's certificate",
            who, opensslReason(), key(e, "ca_file"))));
      }
    } else if (SSL_CTX_load_verify_locations(raw, o.ca_file.c_str(), nullptr) != 1) {
      return fail(Error::io(fmt::format(
          "{}: cannot load {} \"{}\": {}; it must be a readable PEM file of CA certificates", who,
          key(e, "ca_file"), o.ca_file, opensslReason())));
    }
    SSL_CTX_set_verify(raw, SSL_VERIFY_PEER, verifyCallback);
  } else {
    SSL_CTX_set_verify(raw, SSL_VERIFY_NONE, nullptr);
  }
  if (o.cert_file.empty()) {
    SSL_CTX_set_client_cert_cb(raw, clientCertCallback);
  } else {
    if (SSL_CTX_use_certificate_chain_file(raw, o.cert_file.c_str()) != 1) {
      return fail(Error::io(fmt::format(
          "{}: cannot load {} \"{}\": {}; it must be a readable PEM certificate (chain)", who,
          key(e, "cert_file"), o.cert_file, opensslReason())));
    }
    if (SSL_CTX_use_PrivateKey_file(raw, o.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
      return fail(Error::io(fmt::format(
          "{}: cannot load {} \"{}\": {}; it must be a readable, unencrypted PEM private key "
          "(an encrypted one: `openssl pkey -in KEY -out PLAIN`)",
          who, key(e, "key_file"), o.key_file, opensslReason())));
    }
    if (SSL_CTX_check_private_key(raw) != 1) {
      return fail(Error::io(fmt::format("{}: {} \"{}\" is not the key of {} \"{}\": {}", who,
                                        key(e, "key_file"), o.key_file, key(e, "cert_file"),
                                        o.cert_file, opensslReason())));
    }
  }
  return ctx;
}

Status prepareSession(SSL* ssl, const RedisEndpoint& e, std::string_view who) {
  ERR_clear_error();
  if (SSL_set_ex_data(ssl, recordIndex(), new VerifyRecord) != 1) {
    return fail(Error::io(fmt::format("{}: cannot prepare TLS: {}", who, opensslReason())));
  }
  const std::string name = checkedName(e);
  const bool ip = isIpAddress(name);
  // SNI carries host names only (RFC 6066 §3).
  if (!ip && SSL_set_tlsext_host_name(ssl, name.c_str()) != 1) {
    return fail(Error::io(
        fmt::format("{}: cannot set the TLS server name \"{}\": {}", who, name, opensslReason())));
  }
  if (!e.tls->verify) return Status{};
  if (ip) {
    if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str()) != 1) {
      return fail(Error::io(fmt::format("{}: cannot set the address to verify \"{}\": {}", who,
                                        name, opensslReason())));
    }
  } else {
    SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if (SSL_set1_host(ssl, name.c_str()) != 1) {
      return fail(Error::io(fmt::format("{}: cannot set the host name to verify \"{}\": {}", who,
                                        name, opensslReason())));
    }
  }
  return Status{};
}

Error describeHandshakeFailure(SSL* ssl, const boost::system::error_code& ec,
                               const RedisEndpoint& e, std::string_view who) {
  const auto* rec = static_cast<const VerifyRecord*>(SSL_get_ex_data(ssl, recordIndex()));
  const long verify = SSL_get_verify_result(ssl);
  ERR_clear_error();
  constexpr std::string_view kNothingSent = " (refused before anything was sent to the server)";
  if (e.tls->verify && (verify != X509_V_OK || (rec != nullptr && rec->failed))) {
    const long code = rec != nullptr && rec->failed ? rec->error : verify;
    std::string what;
    switch (code) {
      case X509_V_ERR_HOSTNAME_MISMATCH:
      case X509_V_ERR_IP_ADDRESS_MISMATCH:
        what = fmt::format(
            "the server's certificate is not valid for the name \"{}\" (it lists {}); set {} to "
            "a name the certificate lists, or have the certificate reissued for \"{}\"",
            checkedName(e),
            rec != nullptr && !rec->sans.empty() ? rec->sans : std::string("no subjectAltName"),
            key(e, "server_name"), checkedName(e));
        break;
      case X509_V_ERR_CERT_HAS_EXPIRED:
        what = fmt::format(
            "the certificate {}expired on {} (now {}); renew the server's certificate (or fix "
            "this host's clock)",
            rec != nullptr && !rec->subject.empty() ? "\"" + rec->subject + "\" " : "",
            rec != nullptr ? rec->not_after : "?", nowUtc());
        break;
      case X509_V_ERR_CERT_NOT_YET_VALID:
        what = fmt::format(
            "the certificate {}is not valid before {} (now {}); check this host's clock and the "
            "certificate's dates",
            rec != nullptr && !rec->subject.empty() ? "\"" + rec->subject + "\" " : "",
            rec != nullptr ? rec->not_before : "?", nowUtc());
        break;
      case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY:
      case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT:
      case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
      case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
      case X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE:
      case X509_V_ERR_CERT_SIGNATURE_FAILURE:
        what = fmt::format(
            "the server's certificate{} is not issued by a CA in {}; check {}: it must hold the "
            "CA that issued the server's certificate",
            rec != nullptr && !rec->subject.empty() ? " \"" + rec->subject + "\"" : "",
            trustAnchors(e), key(e, "ca_file"));
        break;
      case X509_V_ERR_INVALID_PURPOSE:
        what =
            "the server's certificate is not for TLS servers (extendedKeyUsage lacks "
            "serverAuth); have it reissued";
        break;
      default:
        what = fmt::format("check the server's certificate against {}", trustAnchors(e));
    }
    return Error::auth(fmt::format("{}: TLS: certificate verify failed: {}: {}{}", who,
                                   X509_verify_cert_error_string(code), what, kNothingSent));
  }
  const int reason = sslReason(ec);
  const bool has_cert = !e.tls->cert_file.empty();
  switch (reason) {
    case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
      return Error::auth(
          fmt::format("{}: TLS: the server requires a client certificate (mutual TLS, Redis "
                      "tls-auth-clients): set {} and {}",
                      who, key(e, "cert_file"), key(e, "key_file")));
    case SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE:
      if (!has_cert) {
        return Error::auth(fmt::format(
            "{}: TLS handshake refused by the server (handshake failure alert): it probably "
            "requires a client certificate (mutual TLS): set {} and {}",
            who, key(e, "cert_file"), key(e, "key_file")));
      }
      break;
    case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
    case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED:
    case SSL_R_TLSV1_ALERT_ACCESS_DENIED:
    case SSL_R_TLSV1_ALERT_DECRYPT_ERROR:
      if (has_cert) {
        return Error::auth(fmt::format(
            "{}: TLS: the server rejected our client certificate {} \"{}\" ({}); it must be "
            "valid and issued by a CA the server trusts (Redis tls-ca-cert-file)",
            who, key(e, "cert_file"), e.tls->cert_file, ec.message()));
      }
      return Error::auth(fmt::format(
          "{}: TLS: the server refused the handshake ({}); if it requires a client certificate, "
          "set {} and {}",
          who, ec.message(), key(e, "cert_file"), key(e, "key_file")));
    case SSL_R_UNSUPPORTED_PROTOCOL:
    case SSL_R_TLSV1_ALERT_PROTOCOL_VERSION:
    case SSL_R_NO_PROTOCOLS_AVAILABLE:
      return Error::io(fmt::format(
          "{}: TLS: no common protocol version ({}); the agent requires TLS 1.2 or later: enable "
          "it on the server",
          who, ec.message()));
    case SSL_R_WRONG_VERSION_NUMBER:
    case SSL_R_PACKET_LENGTH_TOO_LONG:
    case SSL_R_UNEXPECTED_MESSAGE:
    case SSL_R_SSLV3_ALERT_UNEXPECTED_MESSAGE:
      return Error::io(
          fmt::format("{}: TLS handshake failed: the server did not answer with TLS "
                      "({}); {}",
                      who, ec.message(), notTlsHint(e)));
    default:
      break;
  }
  if (isEofLike(ec)) {
    return Error::io(
        fmt::format("{}: TLS handshake failed: the server closed the connection "
                    "({}); {}",
                    who, ec.message(), notTlsHint(e)));
  }
  return Error::io(
      fmt::format("{}: TLS handshake failed: {} ({})", who, ec.message(), notTlsHint(e)));
}

bool clientCertificateRequested(SSL* ssl) {
  const auto* rec = static_cast<const VerifyRecord*>(SSL_get_ex_data(ssl, recordIndex()));
  return rec != nullptr && rec->client_cert_requested;
}

std::string explainSessionError(const boost::system::error_code& ec, const RedisEndpoint& e,
                                SSL* ssl, bool nothing_received) {
  if (!e.tls) return {};
  if (nothing_received && ssl != nullptr && e.tls->cert_file.empty() &&
      clientCertificateRequested(ssl)) {
    // A TLS 1.3 server checks the client's certificate after our side of the handshake is
    // complete; it asked for one, we had none, and it dropped the session at once.
    return fmt::format(
        "the server asked for a client certificate and dropped the session without one ({}): it "
        "requires a client certificate (mutual TLS, Redis tls-auth-clients): set {} and {}",
        ec.message(), key(e, "cert_file"), key(e, "key_file"));
  }
  switch (sslReason(ec)) {
    case SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED:
      return fmt::format(
          "the server requires a client certificate (mutual TLS, Redis tls-auth-clients): set "
          "{} and {}",
          key(e, "cert_file"), key(e, "key_file"));
    case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
    case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED:
    case SSL_R_TLSV1_ALERT_ACCESS_DENIED:
      return fmt::format(
          "the server rejected our client certificate {} \"{}\" ({}); it must be valid and "
          "issued by a CA the server trusts (Redis tls-ca-cert-file)",
          key(e, "cert_file"), e.tls->cert_file, ec.message());
    default:
      break;
  }
  if (nothing_received && !e.tls->cert_file.empty() && isEofLike(ec)) {
    return fmt::format(
        "the server dropped the session right after the handshake ({}): it may have rejected our "
        "client certificate {} \"{}\" (it must be valid and issued by a CA the server trusts, "
        "Redis tls-ca-cert-file)",
        ec.message(), key(e, "cert_file"), e.tls->cert_file);
  }
  return {};
}

}  // namespace xdcr::tls
