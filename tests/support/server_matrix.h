#pragma once
// The server matrix (issue 16): the Redis and Valkey versions scripts/servers.sh provides, each
// behind a wrapper in $XDCR_SERVERS_DIR/bin (default ~/.cache/xdcr-servers/bin) that execs the
// server (in a chroot for the newer ones). Tests start them with RedisServer::startBinary().

#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace xdcr::test {

struct MatrixServer {
  std::string name;     // "redis-7.0", "valkey-9", ... (scripts/servers.sh)
  std::string binary;   // the wrapper
  std::string version;  // what `<binary> --version` says, e.g. "9.1.2"
  bool valkey = false;
  std::string root;  // the chroot it runs in ("" for the host's own server)
};

/** A source and a target of the matrix: the parameter of the tests that run on pairs. */
struct ServerPair {
  std::string source;
  std::string target;
};
void PrintTo(const ServerPair& p, std::ostream* os);
/** "valkey_9_to_redis_8": the pair as a test name's suffix. */
std::string serverPairName(const ServerPair& p);

/** Every server name scripts/servers.sh provisions, oldest first. */
const std::vector<std::string>& matrixServerNames();

/** The server `name` when provisioned and runnable (its --version answers); nullopt otherwise,
 *  with the reason in `why`. */
std::optional<MatrixServer> findMatrixServer(const std::string& name, std::string* why = nullptr);

/** XDCR_MATRIX_REQUIRED=1 (scripts/test.sh sets it after provisioning): a missing server fails
 *  the test instead of skipping it. */
bool matrixRequired();

/**
 * The environment that skews `server`'s wall clock by the offset in `timestamp_file`
 * (faketime.h), for a server in a chroot too: libfaketime must be installed inside it
 * (scripts/servers.sh installs it in the sid chroot), and the ftshim preload is copied into
 * `dir` (under /tmp, which the chroots share with the host). nullopt, with the reason in `why`,
 * when that cannot be done.
 */
std::optional<std::vector<std::pair<std::string, std::string>>> matrixFakeTimeEnvironment(
    const MatrixServer& server, const std::string& timestamp_file, const std::string& dir,
    std::string* why);

}  // namespace xdcr::test
