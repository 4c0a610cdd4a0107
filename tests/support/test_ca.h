#pragma once
// A throw-away certificate authority for TLS tests (NTS-KE), made with the `openssl` CLI
// (Debian package openssl) exactly as in clock-notes §6.1: a self-signed EC P-256 CA and server
// certificates with chosen subjectAltNames and the serverAuth extended key usage.

#include <string>
#include <vector>

namespace xdcr::test {

/** True when the `openssl` CLI is on PATH. */
bool opensslAvailable();

struct IssuedCert {
  std::string cert_file;  // PEM certificate
  std::string key_file;   // PEM private key (unencrypted)
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
  // One issueServer() at a time: openssl keeps the serial number in DIR/ca.srl.

 private:
  std::string dir_;
  std::string ca_key_;
  std::string ca_crt_;
};

}  // namespace xdcr::test
