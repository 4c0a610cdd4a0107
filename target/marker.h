#pragma once
// The target-loss marker (issue: reliability). At every checkpoint the pipeline writes, in order
// after the data it covers, `SET __xdcr_marker__:<pipeline> <token>` into the target's db 0, and
// the checkpoint records that token and the next one. On reconnect the pipeline reads the marker:
// if it is neither, the target lost data the checkpoint counts as written (restarted empty or
// from an older snapshot, failed over to a replica that lagged), and the pipeline starts a full
// resync instead of resuming — as Couchbase XDCR checks the target vbucket's UUID.

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

}  // namespace xdcr::target
