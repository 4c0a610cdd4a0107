#pragma once
// A bounded, deterministic mixed write load for a cluster (or a standalone server) in its own
// thread: SET with EX, HSET + EXPIRE, INCR counters, MULTI/EXEC on one slot ({tag}:a SET +
// {tag}:b INCR), and EXPIRE / PERSIST / DEL on keys it wrote before. The sequence of operations
// depends only on the seed; it ends at max_ops, at max_duration or at stop(), whichever first.
//
// It writes through a ClusterClient, so it survives resharding (ASK, TRYAGAIN) and failover
// (MOVED, lost connections) by retrying, bounded. Nothing is hidden: an operation is `ok`
// (every reply as expected), `failed` (an error reply, or no answer within the client's retry
// budget: not, or not fully, written) or `uncertain` (answered, but only after a lost
// connection: it may have run twice, or on a master that then lost it). The load keeps a model
// of what each key must hold; verify() compares the server with it, skipping keys an
// uncertain or failed operation touched. A reply that contradicts the model (e.g. DEL answering
// 0 for a key the model holds) is counted in `unexpected_replies`: a lost write seen live.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/support/cluster_client.h"

namespace xdcr::test {

struct ClusterLoadOptions {
  uint64_t seed = 1;
  int64_t max_ops = 1000000;
  std::chrono::milliseconds max_duration{60000};
  /** Distinct keys per kind (strings, hashes, counters, transaction tags), spread evenly over
   * all 16384 slots (each key carries a hash tag of its slot, common/cluster_slot.h). */
  int keys_per_kind = 1000;
  /** Every key starts with `prefix` + ":". */
  std::string prefix = "load";
  /** EX / EXPIRE seconds: long enough that nothing expires during a test. */
  int64_t ttl_s = 3600;
  /** Optional: this share of the operations goes to keys in these slots (inclusive), e.g. the
   * slots a test reshards, so migrating slots see traffic. */
  std::optional<std::pair<int, int>> focus_slots;
  double focus_share = 0.5;
  /** Pause between operations (0: as fast as one connection goes). */
  std::chrono::microseconds pause{0};
  ClusterClientOptions client{std::chrono::milliseconds(1000), 16, std::chrono::milliseconds(20000),
                              std::chrono::milliseconds(20)};
};

struct ClusterLoadStats {
  int64_t ops = 0;
  int64_t ok = 0;
  int64_t failed = 0;
  int64_t uncertain = 0;
  int64_t unexpected_replies = 0;
  // Operations by kind.
  int64_t strings = 0;
  int64_t hashes = 0;
  int64_t counters = 0;
  int64_t transactions = 0;
  int64_t expiry_ops = 0;  // EXPIRE, PERSIST, DEL
  /** What the operations went through (MOVED, ASK, TRYAGAIN, CLUSTERDOWN, lost connections). */
  CommandTrace redirects;
  /** The first errors and unexpected replies, as text. */
  std::vector<std::string> errors;
  std::chrono::milliseconds elapsed{0};
  bool finished = false;  // the thread has ended

  std::string summary() const;
};

struct LoadVerifyReport {
  int64_t checked = 0;
  int64_t mismatched = 0;
  int64_t skipped = 0;  // keys touched by a failed or uncertain operation
  std::vector<std::string> details;

  bool ok() const { return checked > 0 && mismatched == 0; }
  std::string summary() const;
};

class ClusterLoad {
 public:
  /** `seeds`: node addresses (a standalone server's address makes it a standalone load). */
  ClusterLoad(std::vector<std::string> seeds, ClusterLoadOptions options = {});
  /** stop(). */
  ~ClusterLoad();
  ClusterLoad(const ClusterLoad&) = delete;
  ClusterLoad& operator=(const ClusterLoad&) = delete;

  /** Starts the thread (once). */
  void start();
  /** Asks the thread to end after its current operation, joins it, returns the totals. */
  ClusterLoadStats stop();
  /** The totals so far. */
  ClusterLoadStats stats() const;
  /** Waits (bounded) until at least `ops` operations ran; false on timeout or if the load ended
   * before. */
  bool waitForOps(int64_t ops, std::chrono::milliseconds timeout) const;
  /**
   * After stop(): reads every key the model is sure about (TYPE, PEXPIRETIME, GET / HGETALL)
   * through `reader` and reports those that differ (value, type, presence, deadline or not).
   */
  LoadVerifyReport verify(ClusterClient& reader, size_t max_details = 20) const;
  /** How many keys the model holds (written at least once). */
  size_t modelSize() const;

 private:
  struct Expected {
    enum class Kind { Absent, String, Hash, Counter };
    Kind kind = Kind::Absent;
    std::string value;                          // String
    std::map<std::string, std::string> fields;  // Hash
    int64_t counter = 0;                        // Counter
    bool has_deadline = false;
    bool certain = true;
  };
  enum class KeyKind { String = 0, Hash = 1, Counter = 2, Tag = 3 };

  void run();
  /** The name of key `index` of `kind` (index >= keys_per_kind: a key in the focus slots). */
  std::string keyName(KeyKind kind, int index) const;
  /** Records an operation's outcome; `doubt` (the keys it touched whose state it does not fully
   * define) become uncertain unless it was ok without a lost connection. */
  void finish(const std::string& what, bool answered_ok, bool unexpected, const CommandTrace& trace,
              const std::vector<std::string>& doubt, const std::string& error);

  std::vector<std::string> seeds_;
  ClusterLoadOptions options_;
  std::thread thread_;
  std::atomic<bool> stop_requested_{false};
  mutable std::mutex mutex_;  // guards stats_
  ClusterLoadStats stats_;
  // The model; only the load thread touches it until stop() joined.
  std::map<std::string, Expected> model_;
  std::vector<std::string> written_;  // keys in first-write order: EXPIRE/PERSIST/DEL pick here
};

}  // namespace xdcr::test
