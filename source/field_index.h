#pragma once
// The hash-field deadline index (docs/hash-field-expiry.md H6): the current source deadline of
// every hash field that has one, learned from the stream (HPEXPIREAT, HSETEX, HPERSIST, HSET,
// HDEL, ...) and the snapshot (hashes with field TTLs), so that the HDEL a source propagates
// when a field reaches its deadline can be told from a user's HDEL: a single-field HDEL of a
// field whose deadline has passed on the source's clock is an expiration, which
// drop_expirations keeps from the target.
//
// Memory: only fields with a deadline, as 64-bit hashes of (key) and (field) with the deadline:
// about 40 bytes a field. At most kMaxFields; beyond that new deadlines are not recorded (said
// once): their expirations then count as deletions, as before this index. Not persisted with
// checkpoints: after a restart, fields whose deadlines were set before it are unknown until set
// again (their expirations count as deletions). Not thread-safe; owned by one Resolver.

#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace xdcr::source {

class FieldDeadlineIndex {
 public:
  static constexpr size_t kMaxFields = size_t{8} << 20;

  /** The field's deadline (epoch ms, source clock), 0 = none known. */
  int64_t get(int db, std::string_view key, std::string_view field) const;
  /** Sets the field's deadline; 0 removes it. */
  void set(int db, std::string_view key, std::string_view field, int64_t deadline_ms);
  void erase(int db, std::string_view key, std::string_view field) { set(db, key, field, 0); }
  /** The key is gone or replaced whole: every field of it. */
  void eraseKey(int db, std::string_view key);
  /** RENAME/MOVE: the fields go with the key. */
  void moveKey(int from_db, std::string_view from, int to_db, std::string_view to);
  void clearDb(int db);
  void swapDbs(int a, int b);
  void clearAll();

  size_t fields() const { return fields_; }
  bool full() const { return full_; }

 private:
  using Fields = std::vector<std::pair<uint64_t, int64_t>>;  // field hash, deadline
  using Keys = std::unordered_map<uint64_t, Fields>;         // key hash -> its fields
  std::unordered_map<int, Keys> dbs_;
  size_t fields_ = 0;
  bool full_ = false;
};

}  // namespace xdcr::source
