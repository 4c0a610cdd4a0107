#pragma once
// What a Redis or Valkey server is, from its `INFO server`, and what follows from its version
// for replication: which snapshot payloads its RESTORE takes and whether it stores hash-field
// TTLs (server-versions-notes.md §3.3, §5).

#include <string>
#include <string_view>

namespace xdcr {

/** The value of `field:` in INFO text, or empty. */
std::string_view infoField(std::string_view info, std::string_view field);

struct ServerInfo {
  bool known = false;   // INFO answered with a version (a user without +info: unknown)
  bool valkey = false;  // valkey_version / server_name:valkey (Valkey 8+ also says redis_version)
  int major = 0, minor = 0, patch = 0;

  /** Parses the text of `INFO server` (or all of INFO). */
  static ServerInfo parse(std::string_view info);

  /** "Redis 8.0.6", "Valkey 9.1.2", "an unknown server". */
  std::string describe() const;
  bool atLeast(int ma, int mi) const { return major > ma || (major == ma && minor >= mi); }

  /** Hash fields can have TTLs (HPEXPIREAT, HSETEX): Redis 7.4+, Valkey 9+. Unknown: assumed. */
  bool fieldTtls() const;
  /**
   * Its RESTORE takes a payload of RDB `version` whose value has `type` in `valkey_types`'
   * numbering (a VALKEY-magic file's) or Redis's. Redis refuses a version newer than its own
   * (7.0: 10, 7.2: 11, 7.4-8.x: 12); Valkey 7.2-8.x takes up to 11, Valkey 9 up to 11 and its
   * own 80 (12-79 are "foreign", refused under the default rdb-version-check strict). Unknown:
   * assumed yes (then a refusal is counted as a failed key).
   */
  bool acceptsPayload(int version, bool valkey_types) const;
};

}  // namespace xdcr
