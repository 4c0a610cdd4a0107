#include "tests/support/server_matrix.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <regex>

#include "tests/support/faketime.h"

namespace xdcr::test {

void PrintTo(const ServerPair& p, std::ostream* os) {
  *os << p.source << " -> " << p.target;
}

std::string serverPairName(const ServerPair& p) {
  std::string out = p.source + "_to_" + p.target;
  for (char& c : out) {
    if (c == '-' || c == '.') c = '_';
  }
  return out;
}

const std::vector<std::string>& matrixServerNames() {
  static const std::vector<std::string> kNames = {"redis-7.0",  "valkey-8.0", "redis-8.0",
                                                  "valkey-8.1", "redis-8",    "valkey-9"};
  return kNames;
}

namespace {

std::string serversDir() {
  if (const char* d = std::getenv("XDCR_SERVERS_DIR"); d != nullptr && *d != '\0') return d;
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : "/root") + "/.cache/xdcr-servers";
}

/** The first line `command` prints (empty when it cannot run). */
std::string firstLine(const std::string& command) {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) return {};
  char buf[512];
  std::string out;
  if (std::fgets(buf, sizeof buf, pipe.get()) != nullptr) out = buf;
  return out;
}

}  // namespace

std::optional<MatrixServer> findMatrixServer(const std::string& name, std::string* why) {
  MatrixServer s;
  s.name = name;
  s.binary = serversDir() + "/bin/" + name;
  s.valkey = name.rfind("valkey", 0) == 0;
  struct stat st {};
  if (::stat(s.binary.c_str(), &st) != 0) {
    if (why != nullptr) {
      *why = s.binary + " does not exist: run `bash scripts/servers.sh provision` (as root)";
    }
    return std::nullopt;
  }
  // "Redis server v=7.0.15 sha=..." / "Valkey server v=9.1.2 sha=..."
  const std::string line = firstLine(s.binary + " --version 2>/dev/null");
  std::smatch m;
  if (!std::regex_search(line, m, std::regex("v=([0-9.]+)"))) {
    if (why != nullptr) {
      *why = s.binary + " --version printed \"" + line +
             "\": not runnable (are the chroot mounts there? `bash scripts/servers.sh provision`)";
    }
    return std::nullopt;
  }
  s.version = m[1];
  // The wrapper is "exec chroot ROOT BINARY" for a chroot's server (scripts/servers.sh).
  std::ifstream wrapper(s.binary);
  const std::string text((std::istreambuf_iterator<char>(wrapper)),
                         std::istreambuf_iterator<char>());
  if (std::regex_search(text, m, std::regex("exec chroot (\\S+) "))) s.root = m[1];
  return s;
}

std::optional<std::vector<std::pair<std::string, std::string>>> matrixFakeTimeEnvironment(
    const MatrixServer& server, const std::string& timestamp_file, const std::string& dir,
    std::string* why) {
  if (!fakeTimeAvailable()) {
    if (why != nullptr) *why = "libfaketime or the ftshim preload is missing on the host";
    return std::nullopt;
  }
  const std::string lib = libfaketimePath();
  struct stat st {};
  if (!server.root.empty() && ::stat((server.root + lib).c_str(), &st) != 0) {
    if (why != nullptr) {
      *why = server.root + lib +
             " does not exist: libfaketime is not installed in the chroot (run `bash "
             "scripts/servers.sh provision` again)";
    }
    return std::nullopt;
  }
  // The same path outside and inside the chroot: `dir` is under /tmp, shared with the chroots.
  const std::string shim = dir + "/libxdcr_ftshim.so";
  std::filesystem::copy_file(ftshimPath(), shim, std::filesystem::copy_options::overwrite_existing);
  auto env = fakeTimeEnvironment(timestamp_file);
  std::string preload = shim;
  preload += ' ';
  preload += lib;
  for (auto& [name, value] : env) {
    if (name == "LD_PRELOAD") value = preload;
  }
  return env;
}

bool matrixRequired() {
  const char* v = std::getenv("XDCR_MATRIX_REQUIRED");
  return v != nullptr && std::string(v) == "1";
}

}  // namespace xdcr::test
