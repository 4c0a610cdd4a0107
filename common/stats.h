#pragma once
// Per-pipeline counters and gauges (interface.md §4). Plain integers: a pipeline and its
// counters live on one thread (the agent's io_context); the admin server reads them on the same
// thread. Labels are fixed enums so that incrementing is an array index, not a map lookup.

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace xdcr {

/** xdcr_source_events_total{kind} */
enum class EventKind : uint8_t { Mutation, Deletion, Expiration, ExpiryChange, Flush, Other, kCount };
/** xdcr_target_writes_total{op} */
enum class WriteOp : uint8_t { Set, Restore, Delete, Expire, Persist, Other, kCount };
/** xdcr_filtered_total{reason} */
enum class FilterReason : uint8_t { Expiration, Deletion, Key, Flush, kCount };

inline constexpr std::array<std::string_view, 6> kEventKindNames = {
    "mutation", "deletion", "expiration", "expiry_change", "flush", "other"};
inline constexpr std::array<std::string_view, 6> kWriteOpNames = {"set",    "restore", "delete",
                                                                  "expire", "persist", "other"};
inline constexpr std::array<std::string_view, 4> kFilterReasonNames = {"expiration", "deletion",
                                                                       "key", "flush"};

template <class E>
constexpr size_t idx(E e) {
  return static_cast<size_t>(e);
}

struct PipelineStats {
  std::array<uint64_t, idx(EventKind::kCount)> source_events{};
  std::array<uint64_t, idx(WriteOp::kCount)> target_writes{};
  std::array<uint64_t, idx(FilterReason::kCount)> filtered{};
  uint64_t expiry_stripped = 0;
  uint64_t expiry_clamped = 0;
  uint64_t expired_on_arrival = 0;
  uint64_t unknown_commands = 0;  // forwarded verbatim (counted, never dropped in silence)
  uint64_t filter_splits = 0;     // commands whose keys fall on both sides of the filters
  uint64_t full_syncs = 0;
  uint64_t partial_syncs = 0;
  uint64_t target_loss_resyncs = 0;  // the target's marker showed it lost checkpointed data
  uint64_t stale_keys_deleted = 0;   // full_sync.delete_stale_keys
  uint64_t checkpoints = 0;
  uint64_t checkpoint_failures = 0;
  uint64_t target_errors = 0;
  std::map<std::string, uint64_t> target_errors_by_kind;  // first word of the error reply
  uint64_t reconnects = 0;
  uint64_t snapshot_keys_restored = 0;
  uint64_t snapshot_keys_expired = 0;
  uint64_t snapshot_keys_failed = 0;

  void count(EventKind k) { ++source_events[idx(k)]; }
  void count(WriteOp op) { ++target_writes[idx(op)]; }
  void count(FilterReason r) { ++filtered[idx(r)]; }
};

}  // namespace xdcr
