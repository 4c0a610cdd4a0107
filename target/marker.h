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
inline bool isMarkerKey(std::string_view key) { return key.substr(0, kMarkerPrefix.size()) == kMarkerPrefix; }

/** A fresh random token (16 hex digits). */
std::string newMarkerToken();

}  // namespace xdcr::target
