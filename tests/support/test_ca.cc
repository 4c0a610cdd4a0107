#include "tests/support/test_ca.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace xdcr::test {
namespace {

// Key generation on a busy 2-core machine is well under a second; the bound is generous.
constexpr auto kOpensslTimeout = std::chrono::seconds(30);

/** Runs `openssl args...` with its output in `log`; throws with that output unless it exits 0. */
void runOpenssl(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> argv = {"openssl"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string command;
  for (const auto& a : argv) {
    command += (command.empty() ? "" : " ") + a;
  }
  writeFileText(log, "");
  Subprocess p = Subprocess::start(argv, log);
  auto status = p.waitFor(kOpensslTimeout);
  if (!status) {
    p.kill();
    throw std::runtime_error("TestCa: `" + command + "` did not finish within 30 s; output:\n" +
                             readFileText(log));
  }
  if (!status->success()) {
    throw std::runtime_error("TestCa: `" + command + "` " + status->describe() + "; output:\n" +
                             readFileText(log));
  }
}

std::string sanitise(const std::string& name) {
  std::string out;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    out += ok ? c : '_';
  }
  if (out.empty() || out[0] == '.') {
    out = "cert" + out;
  }
  return out;
}

/** `text` as an RDN value for `openssl -subj` ("/CN=..."), where '/' separates RDNs. */
std::string subjectValue(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '/' || c == '\\' || c == '+' || c == '=') {
      out += '\\';
    }
    out += c;
  }
  return out;
}

}  // namespace

bool opensslAvailable() {
  return findInPath("openssl").has_value();
}

TestCa::TestCa(std::string dir) : dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) {
    throw std::runtime_error("TestCa: cannot create " + dir_ + ": " + ec.message());
  }
  ca_key_ = dir_ + "/ca.key";
  ca_crt_ = dir_ + "/ca.crt";
  // clock-notes §6.1
  runOpenssl(
      {"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days",
       "3650", "-subj", "/CN=Test CA", "-keyout", ca_key_, "-out", ca_crt_, "-addext",
       "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"},
      dir_ + "/openssl-ca.log");
}

IssuedCert TestCa::issueServer(const std::string& name, const std::vector<std::string>& sans) {
  return issue(name, sans, CertOptions{});
}

IssuedCert TestCa::issueClient(const std::string& name) {
  CertOptions options;
  options.usage = CertOptions::Usage::Client;
  return issue(name, {}, options);
}

IssuedCert TestCa::issue(const std::string& name, const std::vector<std::string>& sans,
                         const CertOptions& options) {
  const bool server = options.usage == CertOptions::Usage::Server;
  if (sans.empty() && server) {
    throw std::invalid_argument("TestCa::issueServer: no subjectAltName given");
  }
  if (options.not_before.empty() != options.not_after.empty()) {
    throw std::invalid_argument("TestCa::issue: give both not_before and not_after, or neither");
  }
  const std::string base = dir_ + "/" + sanitise(name);
  IssuedCert out{base + ".crt", base + ".key"};
  const std::string csr = base + ".csr";
  const std::string ext = base + ".ext";
  const std::string log = base + "-openssl.log";
  std::string san_line;
  for (const auto& s : sans) {
    san_line += (san_line.empty() ? "" : ",") + s;
  }
  runOpenssl({"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj",
              "/CN=" + subjectValue(name), "-keyout", out.key_file, "-out", csr},
             log);
  writeFileText(ext, (san_line.empty() ? "" : "subjectAltName=" + san_line + "\n") +
                         "basicConstraints=CA:FALSE\n"
                         "keyUsage=critical,digitalSignature\n"
                         "extendedKeyUsage=" +
                         (server ? "serverAuth" : "clientAuth") + "\n");
  if (options.not_before.empty()) {
    // -CAcreateserial keeps a serial file next to the CA; -set_serial with a random value would
    // do as well, but this is the command verified in clock-notes §6.1.
    runOpenssl({"x509", "-req", "-in", csr, "-CA", ca_crt_, "-CAkey", ca_key_, "-CAcreateserial",
                "-days", "825", "-extfile", ext, "-out", out.cert_file},
               log);
    return out;
  }
  // `openssl ca` takes explicit dates; it needs a database, a serial and a policy.
  const std::string db = dir_ + "/ca-db";
  std::error_code ec;
  std::filesystem::create_directories(db + "/new", ec);
  if (ec) {
    throw std::runtime_error("TestCa: cannot create " + db + ": " + ec.message());
  }
  if (!std::filesystem::exists(db + "/serial")) {
    writeFileText(db + "/index.txt", "");
    writeFileText(db + "/serial", "1000\n");
  }
  const std::string cnf = db + "/ca.cnf";
  writeFileText(cnf,
                "[ca]\ndefault_ca = test_ca\n"
                "[test_ca]\n"
                "database = " +
                    db +
                    "/index.txt\n"
                    "new_certs_dir = " +
                    db +
                    "/new\n"
                    "serial = " +
                    db +
                    "/serial\n"
                    "default_md = sha256\n"
                    "policy = test_policy\n"
                    "unique_subject = no\n"
                    "copy_extensions = none\n"
                    "[test_policy]\ncommonName = supplied\n");
  runOpenssl({"ca", "-batch", "-config", cnf, "-cert", ca_crt_, "-keyfile", ca_key_, "-in", csr,
              "-out", out.cert_file, "-startdate", options.not_before, "-enddate",
              options.not_after, "-extfile", ext, "-notext"},
             log);
  return out;
}

}  // namespace xdcr::test
