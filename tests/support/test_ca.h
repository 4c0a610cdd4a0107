#pragma once
// A throw-away certificate authority for TLS tests (NTS-KE, Redis over TLS), made with the
// `openssl` CLI (Debian package openssl) as in clock-notes §6.1: a self-signed EC P-256 CA,
// server certificates with chosen subjectAltNames and the serverAuth extended key usage, client
// certificates (clientAuth) for mutual TLS, and certificates with chosen validity dates (an
// expired one) through `openssl ca`.

#include <string>
#include <vector>

namespace xdcr::test {

/** True when the `openssl` CLI is on PATH. */
bool opensslAvailable();

struct IssuedCert {
  std::string cert_file;  // PEM certificate
  std::string key_file;   // PEM private key (unencrypted)
};

struct CertOptions {
  enum class Usage { Server, Client };
  Usage usage = Usage::Server;  // extendedKeyUsage serverAuth or clientAuth
  /** Validity as openssl writes it ("20200101000000Z"); both empty = now .. now + 825 days. */
  std::string not_before;
  std::string not_after;
};

class TestCa {
 public:
  /**
   * Creates `dir` if needed and a new CA in it (ca.key, ca.crt; CN "Test CA", 10 years,
   * basicConstraints critical CA:TRUE, keyUsage critical keyCertSign,cRLSign). `dir` must
   * outlive the object's use (e.g. a TempDir's path). Throws std::runtime_error with openssl's
   * output on failure.
   */
  explicit TestCa(std::string dir);

  /** The CA certificate (PEM), for the client's trust store. */
  const std::string& caFile() const { return ca_crt_; }
  const std::string& dir() const { return dir_; }

  /**
   * Issues a server certificate signed by this CA: CN = `name`, subjectAltName = `sans` (each
   * as openssl writes it: "DNS:localhost", "IP:127.0.0.1"), basicConstraints CA:FALSE, keyUsage
   * critical digitalSignature, extendedKeyUsage serverAuth, 825 days. Files are
   * DIR/<name>.crt and DIR/<name>.key (`name` is sanitised for the file name). Throws
   * std::runtime_error with openssl's output on failure.
   */
  IssuedCert issueServer(const std::string& name, const std::vector<std::string>& sans);
  /**
   * As issueServer(), with a usage and, when given, explicit validity dates (then signed with
   * `openssl ca`, the only way openssl 3.0 sets a start date in the past). `sans` may be empty
   * for a client certificate.
   */
  IssuedCert issue(const std::string& name, const std::vector<std::string>& sans,
                   const CertOptions& options);
  /** A client certificate (CN = name, clientAuth) for mutual TLS. */
  IssuedCert issueClient(const std::string& name);
  // One issue*() at a time: openssl keeps the serial number in DIR/ca.srl (and DIR/ca-db/).

 private:
  std::string dir_;
  std::string ca_key_;
  std::string ca_crt_;
};

}  // namespace xdcr::test
