#include "tests/support/server_matrix.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <regex>

namespace xdcr::test {

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
  return s;
}

bool matrixRequired() {
  const char* v = std::getenv("XDCR_MATRIX_REQUIRED");
  return v != nullptr && std::string(v) == "1";
}

}  // namespace xdcr::test
