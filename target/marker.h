#pragma once
// The target-loss marker (issue: reliability). At every checkpoint the pipeline writes, in order
// after the data it covers, `SET __xdcr_marker__:<pipeline> <token>` into the target's db 0, and
// the checkpoint records that token and the next one. On reconnect the pipeline reads the marker:
// if it is neither, the target lost data the checkpoint counts as written (restarted empty or
// from an older snapshot, failed over to a replica that lagged), and the pipeline starts a full
// resync instead of resuming — as Couchbase XDCR checks the target vbucket's UUID.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace xdcr::target {

inline constexpr std::string_view kMarkerPrefix = "__xdcr_marker__:";

inline std::string markerKey(std::string_view pipeline) {
  return std::string(kMarkerPrefix) + std::string(pipeline);
}
/**
 * The replay stamp: "<replid>:<offset>" of the last unit holding a command whose replay is not
 * idempotent (INCR, RPUSH, …), written in the same MULTI/EXEC as that unit. After a crash the
 * replay from the checkpoint skips every unit up to it: the target applied them, in order.
 */
inline std::string appliedStampKey(std::string_view pipeline) {
  return markerKey(pipeline) + ":applied";
}
inline bool isMarkerKey(std::string_view key) {
  return key.substr(0, kMarkerPrefix.size()) == kMarkerPrefix;
}

/**
 * A fresh token: "<this process's start, epoch ms, hex>.<16 random hex digits>". The start time
 * tells which of two agents writing one pipeline's marker came later (markerWriterIsNewer).
 */
std::string newMarkerToken();

/**
 * Of two agents writing the same pipeline's marker, true when the one that wrote `theirs`
 * started after the one that wrote `ours` (so `ours` keeps replicating and `theirs` must stop).
 * Tokens of earlier versions (no start time) count as oldest.
 */
bool markerWriterIsNewer(std::string_view theirs, std::string_view ours);

/**
 * A master of a Redis Cluster target holding no marker the checkpoint accepts, as the marker
 * check read it. A reshard carries marker keys with their slots (MIGRATE): a checkpoint writes
 * each master's marker into its lowest slot, and a reshard usually starts there, so after a
 * reshard and a crash before the next checkpoint the master that gave the slots away has none.
 */
struct UnmarkedMaster {
  std::string address;
  int64_t uptime_ms = -1;  // INFO server uptime_in_seconds x 1000 (-1: not known)
  bool promoted = false;   // INFO replication second_repl_offset is not -1: a former replica
};

/** Uptime beyond the checkpoint's age that proves a master ran through it: the second-grained
 *  uptime, and clocks of two hosts measuring the two durations. */
inline constexpr int64_t kUnmarkedUptimeMarginMs = 2000;

/**
 * Why a master without an accepted marker lost nothing the checkpoint counts, or nullopt (a
 * target loss: the pipeline resyncs). Both must hold:
 *  - its marker is on the target, moved: for an accepted token, `keys_by_token` (this pipeline's
 *    marker keys holding it, over all `masters` masters now) has at least one per master — a
 *    FLUSHALL or a restart of the master itself would have removed one;
 *  - it has run since before the checkpoint was written (`checkpoint_age_ms` ago), as a master
 *    from its own start (never promoted: a replica may have lagged behind its master), so it
 *    kept what it held then.
 */
std::optional<std::string> markerMovedAway(const UnmarkedMaster& master, size_t masters,
                                           const std::map<std::string, int64_t>& keys_by_token,
                                           int64_t checkpoint_age_ms);

}  // namespace xdcr::target
