#pragma once
// A blocking, cluster-aware RESP client for tests: routes each command to the master of its key's
// slot (common/cluster_slot.h), follows MOVED (and refreshes its slot map with CLUSTER SLOTS) and
// ASK (ASKING + the command on the named node), and retries TRYAGAIN, CLUSTERDOWN and lost
// connections for a bounded time. Pointed at a standalone server (CLUSTER SLOTS refused) it sends
// everything there, so one load generator or comparison serves both topologies.
//
// Redis error replies come back as Error values, as with RespClient; exceptions mean the client
// could not get an answer at all (RespIoError: no node answered within the retry budget;
// std::runtime_error: a redirection loop). Every loop is bounded in count and time.

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/dataset.h"
#include "tests/support/key_check.h"
#include "tests/support/resp_client.h"

namespace xdcr::test {

/** The port of "127.0.0.1:P" (tests only use 127.0.0.1); throws std::invalid_argument. */
uint16_t portOfAddress(const std::string& address);

struct ClusterClientOptions {
  /** Bounds the connect and every send/recv on one node (a SIGSTOPped node costs this much). */
  std::chrono::milliseconds io_timeout{2000};
  /** MOVED/ASK redirections followed for one command before giving up. */
  int max_redirects = 16;
  /** Total time one command may spend retrying TRYAGAIN, CLUSTERDOWN and connection errors. */
  std::chrono::milliseconds retry_timeout{10000};
  /** Pause between those retries. */
  std::chrono::milliseconds retry_interval{20};
};

/** What happened to one command (or transaction, or pipeline) on its way: see lastTrace(). */
struct CommandTrace {
  int moved = 0;
  int ask = 0;
  int tryagain = 0;     // TRYAGAIN replies (multi-key command on a slot being migrated)
  int clusterdown = 0;  // CLUSTERDOWN replies
  int io_errors = 0;    // connections lost or timed out: the command may have run where it went

  CommandTrace& operator+=(const CommandTrace& other);
};

/** Totals since the client was made. */
struct ClusterClientStats {
  int64_t commands = 0;  // commands, transactions and pipelined commands sent by the caller
  CommandTrace redirects;
  int64_t slot_refreshes = 0;  // CLUSTER SLOTS reads
};

class ClusterClient {
 public:
  /**
   * `seeds`: "127.0.0.1:P" addresses of any nodes (tests only use 127.0.0.1). Reads the slot map
   * from the first seed that answers CLUSTER SLOTS; a seed that answers "cluster support
   * disabled" makes the client standalone (everything goes to that seed). Throws RespIoError
   * when no seed answers.
   */
  explicit ClusterClient(std::vector<std::string> seeds, ClusterClientOptions options = {});
  ClusterClient(ClusterClient&&) noexcept = default;
  ClusterClient& operator=(ClusterClient&&) noexcept = default;
  ClusterClient(const ClusterClient&) = delete;
  ClusterClient& operator=(const ClusterClient&) = delete;
  ~ClusterClient();

  /** False when pointed at a standalone server. */
  bool clusterMode() const { return cluster_mode_; }

  /**
   * The index of the key that routes `args` (a small table: 1 for the usual commands, 2 for
   * OBJECT/XINFO/XGROUP/MEMORY, 3 for EVAL/FCALL with keys, the first stream of XREAD[GROUP]),
   * or nullopt for a keyless command (PING, INFO, FLUSHALL, SCAN, CLUSTER ..., CONFIG ...).
   */
  static std::optional<size_t> keyIndex(const RespCommand& args);

  /** Runs `args` on the master of its key's slot (keyIndex), or on any master if keyless. */
  RespValue command(const RespCommand& args);
  /** Runs `args` on the master of the slot of args[key_index]. */
  RespValue commandAt(const RespCommand& args, size_t key_index);
  /** Runs `args` on the master of `slot` (redirections followed as for any command). */
  RespValue commandOnSlot(int slot, const RespCommand& args);
  /**
   * MULTI, `commands`, EXEC as one unit on the node of their slot (ASKING first after an ASK) and
   * returns EXEC's reply: an array of the commands' replies, an error (EXECABORT, CROSSSLOT, a
   * TRYAGAIN that outlived the retry budget), or nil. Every command must have a key, all in one
   * slot (use a hash tag); throws std::invalid_argument otherwise.
   */
  RespValue transaction(const std::vector<RespCommand>& commands);
  /**
   * Sends `commands` pipelined, one batch per node (keyless ones to any master), and returns the
   * replies in order. Commands redirected or refused with TRYAGAIN/CLUSTERDOWN, and those of a
   * node whose connection failed (they may have run there: lastTrace().io_errors says so), are
   * then run again one by one through command(): the order of commands on different keys is not
   * kept across such retries, the order within one node is.
   */
  std::vector<RespValue> pipeline(const std::vector<RespCommand>& commands);
  /** A RespPipeline (dataset.h) that runs through this client. */
  RespPipeline pipelineFunction();

  /** Every key on every master (SCAN ... MATCH `match`, bounded), sorted, without duplicates. */
  std::vector<std::string> scanAll(const std::string& match = "*");
  /** Runs `args` on every master (FLUSHALL, DBSIZE, ...): (address, reply) per master. */
  std::vector<std::pair<std::string, RespValue>> forEachMaster(const RespCommand& args);

  /** Reads CLUSTER SLOTS again (from a known node that answers). Throws if none does. */
  void refreshSlots();
  /** "127.0.0.1:P" of the master the client's map names for `slot` ("" if none). */
  std::string nodeForSlot(int slot) const;
  /** "127.0.0.1:P" of every master in the client's map, sorted by port. */
  std::vector<std::string> masterAddresses() const;

  /** What the last command(), transaction() or pipeline() went through. */
  const CommandTrace& lastTrace() const { return last_trace_; }
  const ClusterClientStats& stats() const { return stats_; }

 private:
  struct Redirect {
    bool ask = false;
    int slot = 0;
    uint16_t port = 0;
  };
  static std::optional<Redirect> parseRedirect(const RespValue& reply);
  static bool isRetryLater(const RespValue& reply);

  RespValue run(std::optional<int> slot, const RespCommand& args);
  RespClient& connection(uint16_t port);
  void dropConnection(uint16_t port);
  uint16_t ownerOf(std::optional<int> slot) const;
  /** refreshSlots() that swallows failures (the retry loops call it between attempts). */
  bool tryRefreshSlots(std::string* why = nullptr);
  /** The CLUSTER SLOTS reply of one node into the map; false if the reply is not a map. */
  bool loadSlots(const RespValue& reply);
  static std::string addressOf(uint16_t port);

  std::vector<uint16_t> seeds_;
  std::vector<uint16_t> known_nodes_;  // seeds and every node CLUSTER SLOTS named, masters first
  uint16_t last_good_node_ = 0;        // the node that answered the last CLUSTER SLOTS
  ClusterClientOptions options_;
  bool cluster_mode_ = true;
  uint16_t standalone_port_ = 0;
  std::array<uint16_t, 16384> slots_{};  // 0 = no owner known
  std::map<uint16_t, RespClient> connections_;
  CommandTrace last_trace_;
  ClusterClientStats stats_;
};

/**
 * Every key of a cluster (scanAll) or of the standalone server the client points at, read
 * through the client (readKeyStatesOfAnyType), without the agent's marker keys. Compare two with
 * compareKeySpaces() (key_check.h).
 */
KeySpaceSnapshot snapshotKeySpace(ClusterClient& client, const std::string& match = "*");

}  // namespace xdcr::test
