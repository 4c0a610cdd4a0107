#pragma once
// Key-by-key checks of a target against what a test's model expects: presence, type, logical
// contents (as readKeyStates() renders them) and an absolute deadline within a window. The model
// (which keys a pipeline passes, whose contents, which deadline rule) stays in each test, stated
// there; this only compares and reports.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/dataset.h"

namespace xdcr::test {

/** What a target must hold for one key. */
struct ExpectedKey {
  bool present = false;
  std::string type;      // TYPE, when present
  std::string contents;  // KeyState::contents, when present
  /** Inclusive range for PEXPIRETIME when present; nullopt: no deadline (-1). */
  std::optional<std::pair<int64_t, int64_t>> deadline;
  /** The model's reasoning, shown with a mismatch ("M=1800s, E=none, written now+0..1s"). */
  std::string why;
};

/** A key the target must not hold. */
ExpectedKey absentKey(std::string why);

/**
 * A key the target must hold as `source` holds it (type and contents), with the deadline that
 * rule 4 (specClamp) gives the source deadline `e` (0 = none) under the maxTTL `m_ms`, for a
 * target write at some `now` in [now_lo, now_hi]: the clamp is non-decreasing in `now`, so the
 * window's ends bound it. The range is widened by `tolerance_ms` on both sides.
 */
ExpectedKey replicatedKey(const KeyState& source, int64_t e, int64_t m_ms, int64_t now_lo,
                          int64_t now_hi, int64_t tolerance_ms, std::string why = {});

struct KeyCheckReport {
  int64_t checked = 0;
  int64_t missing = 0;               // expected present, absent
  int64_t unexpected = 0;            // expected absent, present
  int64_t contents = 0;              // present as expected, other type or contents
  int64_t deadlines = 0;             // present as expected, PEXPIRETIME outside the expected range
  std::vector<std::string> details;  // the first `max_details` mismatches

  bool ok() const { return checked > 0 && missing + unexpected + contents + deadlines == 0; }
  /** One line of counts, then the details, one per line. */
  std::string summary() const;
};

/**
 * Compares `actual[i]` (readKeyStates() of the target) with `expected[i]` for `keys[i]`; the
 * three vectors have the same length. `read_ms` (when the target was read) only serves to show
 * deadlines as "now+Ns".
 */
KeyCheckReport checkKeys(const std::vector<const DatasetKey*>& keys,
                         const std::vector<ExpectedKey>& expected,
                         const std::vector<KeyState>& actual, int64_t read_ms,
                         size_t max_details = 20);

/**
 * Every key of one key space (a standalone server's db, or a whole cluster) with its state, read
 * by readKeyStatesOfAnyType() between `read_started_ms` and `read_ended_ms`. Keys that vanished
 * between the listing and the read (expired, deleted) are left out and counted in `vanished`.
 */
struct KeySpaceSnapshot {
  std::map<std::string, KeyState> keys;
  int64_t read_started_ms = 0;
  int64_t read_ended_ms = 0;
  int64_t vanished = 0;
};

/** Reads `keys` through `run` (pipelined) into a snapshot. */
KeySpaceSnapshot snapshotKeys(const RespPipeline& run, const std::vector<std::string>& keys);
/**
 * Every key of db `db` of a standalone server (SCAN, bounded), without the agent's marker keys
 * (isAgentMarkerKey). A cluster has its own (cluster_client.h).
 */
KeySpaceSnapshot snapshotKeySpace(RespClient& client, int db = 0);

/** How compareKeySpaces() judges a target key against its source key. */
struct KeySpaceCompareOptions {
  /** A target deadline may differ by this much from the expected one (either way). */
  int64_t deadline_tolerance_ms = 0;
  /**
   * 0: the target deadline must be the source's (none when the source has none). Otherwise a
   * maxTTL clamp: the target deadline must be min(source deadline, write + max_ttl_ms) (rule 4,
   * specClamp) for a target write at some time in [write_lo_ms, write_hi_ms].
   */
  int64_t max_ttl_ms = 0;
  int64_t write_lo_ms = 0;
  int64_t write_hi_ms = 0;
  /**
   * Compare the node-local bookkeeping of stream consumer groups too: consumers' seen-time (each
   * node sets it from its own clock when it applies a read) and groups' entries-read / lag
   * (Redis 7.0 does not replicate entries-read: a replica, or a promoted one, shows nil where
   * its master counted). Off by default: a replica, a promoted replica or a replication target
   * differs there without any data being lost; DUMP/RESTORE, MIGRATE and RDB copies keep them.
   */
  bool stream_node_local = false;
  /** Which keys take part (both sides); default every key. */
  std::function<bool(const std::string&)> include;
  size_t max_details = 20;
};

/**
 * Compares two key spaces key by key: `missing` = in the source, not in the target;
 * `unexpected` = in the target only (extra); `contents` = other type or contents (TYPE and the
 * canonical reads, never DUMP payloads, which differ across versions and encodings); `deadlines`
 * = PEXPIRETIME outside the expected range (see KeySpaceCompareOptions). `checked` counts the
 * keys of both sides together; comparing two empty key spaces is not ok() (nothing was proven).
 */
KeyCheckReport compareKeySpaces(const KeySpaceSnapshot& source, const KeySpaceSnapshot& target,
                                const KeySpaceCompareOptions& options = {});

/** "1712345678901 (now+600.0s)": an absolute deadline and its distance from `now_ms`. */
std::string describeDeadline(int64_t deadline_ms, int64_t now_ms);

/**
 * A key's contents as readKeyStates renders them (dataset.h), with a stream's node-local fields
 * (consumers' seen-time, groups' entries-read and lag) replaced by "*" and consumers' active-time
 * removed: what a stream written through the replication stream (XREADGROUP arrives as XCLAIM,
 * which sets seen-time from the applying node's clock) may differ in without any data lost.
 * Other contents are returned as they are.
 */
std::string withoutNodeLocalFields(std::string contents);

}  // namespace xdcr::test
