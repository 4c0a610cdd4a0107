// Full sync end to end (issue 3): the source holds its keys BEFORE the agent starts, so they can
// reach the target only through the snapshot (+FULLRESYNC, RDB v10, RESTORE ... ABSTTL).
//
//   A. 200,000 keys of every type and encoding (strings int/embstr/raw/LZF/binary, listpack and
//      hashtable hashes, quicklists, intset and hashtable sets, listpack and skiplist sorted sets,
//      streams with consumer groups and PELs) in two dbs, half with deadlines, 1 % already expired
//      in the RDB. Every live key equal on the target (logical contents compared per type), every
//      deadline as the clamp gives it (expiry-semantics.md §4, "snapshot entry (full sync)"),
//      ±1 s, no expired key on the target, target keys the snapshot does not contain left alone.
//   B. The source restarts without persistence (new replication id): the agent full-syncs again
//      by itself; the old target keys stay, the new ones arrive, and keys written after that
//      full sync arrive through the stream (streams compared without their node-local
//      bookkeeping there: see StreamBookkeeping).
//   C. The agent is SIGKILLed in the middle of a full sync and restarted: a new full sync, and the
//      target converges.
//   And the comparison itself is checked against a native Redis replica (no agent): zero
//   differences, and every planted difference found.
//
// Expected deadlines come from a model of the rules written here, not from the agent's code. The
// agent applies the clamp with `now` = the moment it writes a key, some time between its start
// and the end of the sync, so a key's expected deadline is the window
// [clamp(E, M, sync start), clamp(E, M, sync end)] widened by kToleranceMs on both sides.
//
// Environment: XDCR_FULL_SYNC_TIMEOUT_S bounds each wait for a full sync (default 300).

#include <fnmatch.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/support/harness.h"

namespace xdcr::test {
namespace {

using namespace std::chrono_literals;

constexpr int64_t kKeysA = 200000;
constexpr int64_t kKeysB = 5000;
constexpr int64_t kNewKeysB = 1000;
// Test B: keys written after the new history's full sync, so they reach the target through the
// stream only (streams among them arrive as XADD/XGROUP/XCLAIM, not RESTORE).
constexpr int64_t kStreamedKeysB = 500;
// Test C: enough for a full sync of more than a second on a 2-core machine.
constexpr int64_t kKeysC = 400000;
constexpr size_t kValueSizeC = 200;
constexpr double kDeadlineFraction = 0.5;
constexpr double kExpiredFraction = 0.01;
constexpr int64_t kToleranceMs = 1000;
constexpr int64_t kMinute = 60 * 1000;
constexpr int64_t kHour = 60 * kMinute;
// Test C kills the agent once this share of the snapshot's keys is on the target (polled every
// 5 ms, so the kill lands well before the end of a sync that takes a second or more).
constexpr double kKillAtFraction = 0.4;
// Test C: pause between the kill and the restart, so that a deadline clamped by the first run
// (`now` before the kill) is told apart from one clamped by the second run.
constexpr auto kPauseAfterKill = 2500ms;
// Keys compared per round trip group (memory stays bounded whatever the data set).
constexpr size_t kCompareChunk = 2000;
constexpr size_t kMaxDetails = 25;
constexpr const char* kAppliedMarker = "snapshot applied:";

// ---------------------------------------------------------------------------------------------
// The target's maxTTL configuration (expiry-semantics.md §3). The agent's YAML is generated from
// this table and the model reads the same table.

const std::vector<BucketSpec>& targetBuckets() {
  static const std::vector<BucketSpec> kBuckets = {
      // B = 0: keys outside c:* keep their deadline (or none). c:* (40 % of db 0) has M = 1 h:
      // source deadlines of +1..2 h are shortened to now+1h, keys without one get now+1h.
      {0, 0, {{"capped", "c:*", kHour / 1000}}},
      // B = 30 min: most deadlines are shortened, keys without one get now+30m. long:* has a
      // collection max_ttl above the bucket's: it overrides it (deadlines <= 2 h kept, none ->
      // now+3h).
      {1, 30 * kMinute / 1000, {{"long", "long:*", 3 * kHour / 1000}}},
  };
  return kBuckets;
}

/** Where data-set key number i goes: 10 % in db 1, the rest in db 0; collection prefixes. */
std::pair<int, std::string> placeKey(int64_t i) {
  if (i % 10 == 7) {
    return {1, (i / 10) % 3 == 0 ? "long:" : "k:"};
  }
  return {0, (i / 10) % 5 < 2 ? "c:" : "k:"};
}

std::string agentConfigYaml(const std::string& state_dir, uint16_t source_port,
                            uint16_t target_port) {
  return pipelineConfigYaml(state_dir, source_port, target_port, targetBuckets());
}

/** Effective maxTTL M of a key on the target: its collection's if > 0, else its bucket's. */
int64_t effectiveMaxTtlMs(int db, const std::string& key) {
  return maxTtlOf(targetBuckets(), db, key).effectiveMs();
}

DatasetOptions datasetOptions(int64_t keys, const std::string& tag) {
  DatasetOptions options;
  options.keys = keys;
  options.mix = DatasetMix::EveryType;
  options.tag = tag;
  options.placement = placeKey;
  options.deadline_fraction = kDeadlineFraction;
  options.expired_fraction = kExpiredFraction;
  options.min_deadline_ms = 10 * kMinute;
  options.max_deadline_ms = 2 * kHour;
  return options;
}

// ---------------------------------------------------------------------------------------------
// Servers, waits, small readers.

/** The source: debug commands (to switch active expiry off), immediate diskless syncs, and a
 * backlog large enough that nothing written during a sync is lost to it. */
std::vector<std::string> sourceArgs() {
  return {"--enable-debug-command", "local", "--repl-diskless-sync-delay", "0",
          "--repl-backlog-size",    "256mb"};
}

std::chrono::seconds fullSyncTimeout() {
  const char* text = std::getenv("XDCR_FULL_SYNC_TIMEOUT_S");
  if (text != nullptr && *text != '\0') {
    const long seconds = std::strtol(text, nullptr, 10);
    if (seconds > 0) {
      return std::chrono::seconds(seconds);
    }
  }
  return 300s;
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int64_t infoInt(RespClient& client, const std::string& section, const std::string& key) {
  auto info = client.info(section);
  auto it = info.find(key);
  return it == info.end() ? -1 : std::stoll(it->second);
}

/** Expired keys stay in the keyspace (and in the RDB) only while nothing expires them. */
void disableActiveExpiry(RedisServer& server) {
  RespValue reply = server.client().command({"DEBUG", "SET-ACTIVE-EXPIRE", "0"});
  ASSERT_FALSE(reply.isError()) << reply.toString();
}

std::map<int, int64_t> dbSizes(RedisServer& server, const std::set<int>& dbs) {
  RespClient client = server.client();
  std::map<int, int64_t> sizes;
  for (int db : dbs) {
    client.select(db);
    sizes[db] = dataDbSize(client);
  }
  return sizes;
}

std::string describeSizes(const std::map<int, int64_t>& sizes) {
  std::string out;
  for (const auto& [db, n] : sizes) {
    out += (out.empty() ? "" : ", ") + std::string("db") + std::to_string(db) + "=" +
           std::to_string(n);
  }
  return out;
}

std::set<int> dbsOf(const std::map<int, int64_t>& sizes) {
  std::set<int> dbs;
  for (const auto& [db, n] : sizes) {
    dbs.insert(db);
  }
  return dbs;
}

/** Waits until the agent has logged `count` lines with "snapshot applied:" (a full sync ended);
 * fails fast if the agent exits. */
::testing::AssertionResult waitSnapshotApplied(AgentProcess& agent, LogWatcher& watcher,
                                               size_t count, std::chrono::seconds timeout) {
  bool exited = false;
  const bool seen = waitUntil(
      [&] {
        if (watcher.poll() >= count) {
          return true;
        }
        exited = !agent.running();
        return exited;
      },
      timeout, 100ms);
  if (seen && !exited) {
    return ::testing::AssertionSuccess();
  }
  watcher.poll();
  return ::testing::AssertionFailure()
         << "the agent did not log \"" << kAppliedMarker << "\" " << count << " time(s) within "
         << timeout.count() << " s (seen " << watcher.matches().size()
         << "); agent: " << agent.describeState() << "\nagent log tail:\n"
         << agent.logTail(40);
}

/** Waits until the target's DBSIZE equals `expected` in every db listed. */
::testing::AssertionResult waitDbSizes(RedisServer& target, const std::map<int, int64_t>& expected,
                                       std::chrono::seconds timeout) {
  std::map<int, int64_t> last;
  const bool equal = waitUntil(
      [&] {
        try {
          last = dbSizes(target, dbsOf(expected));
        } catch (const std::exception&) {
          return false;
        }
        return last == expected;
      },
      timeout, 100ms);
  if (equal) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "target DBSIZE " << describeSizes(last) << ", expected " << describeSizes(expected)
         << " (after " << timeout.count() << " s)";
}

/** Reads the states of keys from several dbs, in the order given. */
std::vector<KeyState> readStates(RespClient& client, const std::vector<const DatasetKey*>& keys) {
  std::map<int, std::vector<size_t>> by_db;
  for (size_t i = 0; i < keys.size(); ++i) {
    by_db[keys[i]->db].push_back(i);
  }
  std::vector<KeyState> states(keys.size());
  for (const auto& [db, positions] : by_db) {
    std::vector<const DatasetKey*> sub;
    sub.reserve(positions.size());
    for (size_t p : positions) {
      sub.push_back(keys[p]);
    }
    std::vector<KeyState> got = readKeyStates(client, db, sub);
    for (size_t j = 0; j < positions.size(); ++j) {
      states[positions[j]] = std::move(got[j]);
    }
  }
  return states;
}

/** The keys among `keys` that EXISTS finds on `server`. */
std::vector<std::string> existingKeys(RedisServer& server,
                                      const std::vector<const DatasetKey*>& keys) {
  RespClient client = server.client();
  std::map<int, std::vector<const DatasetKey*>> by_db;
  for (const DatasetKey* k : keys) {
    by_db[k->db].push_back(k);
  }
  std::vector<std::string> found;
  for (const auto& [db, list] : by_db) {
    client.select(db);
    std::vector<RespCommand> commands;
    for (const DatasetKey* k : list) {
      commands.push_back({"EXISTS", k->key});
    }
    std::vector<RespValue> replies = client.pipeline(commands);
    for (size_t i = 0; i < list.size(); ++i) {
      if (!replies[i].isInteger() || replies[i].integer() != 0) {
        found.push_back("db" + std::to_string(db) + " " + list[i]->key + " (EXISTS " +
                        replies[i].toString() + ")");
      }
    }
  }
  return found;
}

std::string joinFirst(const std::vector<std::string>& items, size_t max) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < max; ++i) {
    out += "\n  " + items[i];
  }
  if (items.size() > max) {
    out += "\n  ... and " + std::to_string(items.size() - max) + " more";
  }
  return out;
}

std::string relative(int64_t deadline, int64_t now) {
  if (deadline <= 0) {
    return std::to_string(deadline);
  }
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(1);
  out << deadline << " (now" << (deadline >= now ? "+" : "")
      << static_cast<double>(deadline - now) / 1000.0 << "s)";
  return out.str();
}

// ---------------------------------------------------------------------------------------------
// Comparing a target (or a replica) with the source, key by key.

/** The deadline a target key may have: nullopt = none (PEXPIRETIME -1), else [lo, hi]. */
using DeadlineRange = std::optional<std::pair<int64_t, int64_t>>;
/** From a key and its source deadline E (0 = none). */
using DeadlineRule = std::function<DeadlineRange(const DatasetKey&, int64_t)>;

/** The agent's clamp, applied at some `now` in [from_ms, to_ms]; ± kToleranceMs. */
DeadlineRule clampRule(int64_t from_ms, int64_t to_ms) {
  return [=](const DatasetKey& k, int64_t e) -> DeadlineRange {
    const int64_t m = effectiveMaxTtlMs(k.db, k.key);
    const int64_t lo = specClamp(e, m, from_ms);
    const int64_t hi = specClamp(e, m, to_ms);
    if (hi == 0) {
      return std::nullopt;
    }
    return std::make_pair(lo - kToleranceMs, hi + kToleranceMs);
  };
}

/** A native replica: the source's deadline, exactly (no clamp). */
DeadlineRule exactRule() {
  return [](const DatasetKey&, int64_t e) -> DeadlineRange {
    if (e == 0) {
      return std::nullopt;
    }
    return std::make_pair(e, e);
  };
}

struct CompareReport {
  int64_t compared = 0;
  int64_t content_mismatches = 0;   // type or logical value differs
  int64_t deadline_mismatches = 0;  // PEXPIRETIME outside the expected range
  int64_t dataset_mismatches = 0;   // the source is not what the data set wrote (a test bug)
  std::map<std::string, int64_t> by_kind;
  std::set<std::string> mismatched_keys;
  std::vector<std::string> details;  // the first kMaxDetails

  bool ok() const {
    return compared > 0 && content_mismatches + deadline_mismatches + dataset_mismatches == 0;
  }
  std::string summary() const {
    std::ostringstream out;
    out << compared << " keys compared: " << content_mismatches << " with other contents, "
        << deadline_mismatches << " with an unexpected deadline, " << dataset_mismatches
        << " where the source differs from the data set written";
    if (!by_kind.empty()) {
      out << "\n  by kind:";
      for (const auto& [kind, n] : by_kind) {
        out << " " << kind << "=" << n;
      }
    }
    out << joinFirst(details, kMaxDetails);
    return out.str();
  }
  void add(const DatasetKey& k, const std::string& what) {
    mismatched_keys.insert("db" + std::to_string(k.db) + " " + k.key);
    ++by_kind[std::string(kindTag(k.kind))];
    if (details.size() < kMaxDetails) {
      details.push_back("db" + std::to_string(k.db) + " " + k.key + ": " + what);
    }
  }
};

/** A window of both texts around their first difference. */
std::string showDifference(const std::string& a, const std::string& b) {
  size_t p = 0;
  while (p < a.size() && p < b.size() && a[p] == b[p]) {
    ++p;
  }
  const size_t from = p > 60 ? p - 60 : 0;
  auto cut = [&](const std::string& s) {
    std::string piece = s.substr(std::min(from, s.size()), 240);
    return (from > 0 ? "..." : "") + piece + (from + 240 < s.size() ? "..." : "");
  };
  return "first difference at char " + std::to_string(p) + "\n      source: " + cut(a) +
         "\n      target: " + cut(b);
}

/** Whether a stream's node-local fields take part in a comparison (key_check.h). */
enum class StreamBookkeeping {
  Compared,  // the keys came by snapshot alone: RESTORE carries seen-time and entries-read
  Ignored,   // keys may have come through the stream: XREADGROUP arrives as XCLAIM, which sets
             // seen-time from the target's clock, and Redis 7.0 replicates no entries-read (a
             // native replica shows the same)
};

CompareReport compareWithSource(RedisServer& source, RedisServer& target,
                                const std::vector<const DatasetKey*>& keys,
                                const DeadlineRule& rule,
                                StreamBookkeeping streams = StreamBookkeeping::Compared) {
  CompareReport report;
  RespClient src = source.client(30s);
  RespClient dst = target.client(30s);
  const int64_t now = unixTimeMs();
  for (size_t begin = 0; begin < keys.size(); begin += kCompareChunk) {
    const std::vector<const DatasetKey*> chunk(
        keys.begin() + static_cast<std::ptrdiff_t>(begin),
        keys.begin() + static_cast<std::ptrdiff_t>(std::min(keys.size(), begin + kCompareChunk)));
    const std::vector<KeyState> s = readStates(src, chunk);
    const std::vector<KeyState> t = readStates(dst, chunk);
    for (size_t i = 0; i < chunk.size(); ++i) {
      const DatasetKey& k = *chunk[i];
      ++report.compared;
      // The source first: a data set that is not what the test believes proves nothing.
      const int64_t want_source = k.deadline_ms == 0 ? -1 : k.deadline_ms;
      if (s[i].type != redisTypeOf(k.kind) || s[i].pexpiretime != want_source) {
        ++report.dataset_mismatches;
        report.add(k, "SOURCE is type " + s[i].type + " with PEXPIRETIME " +
                          std::to_string(s[i].pexpiretime) + "; the data set wrote " +
                          std::string(redisTypeOf(k.kind)) + " with " +
                          std::to_string(want_source));
        continue;
      }
      const bool ignore = streams == StreamBookkeeping::Ignored && s[i].type == "stream";
      const std::string source_contents =
          ignore ? withoutNodeLocalFields(s[i].contents) : s[i].contents;
      const std::string target_contents =
          ignore ? withoutNodeLocalFields(t[i].contents) : t[i].contents;
      if (s[i].type != t[i].type || source_contents != target_contents) {
        ++report.content_mismatches;
        report.add(k, "type source " + s[i].type + " / target " + t[i].type + "; " +
                          showDifference(source_contents, target_contents));
      }
      const int64_t e = s[i].pexpiretime == -1 ? 0 : s[i].pexpiretime;
      const DeadlineRange range = rule(k, e);
      const int64_t got = t[i].pexpiretime;
      const bool deadline_ok = range ? (got >= range->first && got <= range->second) : got == -1;
      if (!deadline_ok) {
        ++report.deadline_mismatches;
        std::string want =
            range ? "in [" + relative(range->first, now) + ", " + relative(range->second, now) + "]"
                  : "-1 (none)";
        report.add(k, "target PEXPIRETIME " + relative(got, now) + ", expected " + want +
                          "; source deadline E " + relative(e, now) + ", M " +
                          std::to_string(effectiveMaxTtlMs(k.db, k.key) / 1000) + " s");
      }
    }
  }
  return report;
}

/** Every live key of a data set on the source has the encoding it was meant to have, and every
 * kind is present: the full sync is tested on every type and encoding the RDB can carry. */
void expectEveryEncoding(RedisServer& source, const Dataset& data) {
  RespClient client = source.client(30s);
  std::map<ValueKind, int64_t> seen;
  std::vector<std::string> wrong;
  std::map<int, std::vector<const DatasetKey*>> by_db;
  for (const DatasetKey* k : data.live()) {
    by_db[k->db].push_back(k);
  }
  for (const auto& [db, list] : by_db) {
    client.select(db);
    std::vector<RespCommand> commands;
    for (const DatasetKey* k : list) {
      commands.push_back({"OBJECT", "ENCODING", k->key});
    }
    std::vector<RespValue> replies = client.pipeline(commands);
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string got =
          replies[i].isError() || replies[i].isNull() ? replies[i].toString() : replies[i].str();
      if (got != encodingOf(list[i]->kind)) {
        wrong.push_back(list[i]->key + ": " + got + ", meant " +
                        std::string(encodingOf(list[i]->kind)));
      } else {
        ++seen[list[i]->kind];
      }
    }
  }
  EXPECT_TRUE(wrong.empty()) << wrong.size() << " source keys with another encoding than meant:"
                             << joinFirst(wrong, 10);
  std::string summary;
  for (int i = 0; i < kValueKindCount; ++i) {
    const auto kind = static_cast<ValueKind>(i);
    summary += " " + std::string(kindTag(kind)) + "=" + std::to_string(seen[kind]);
    EXPECT_GT(seen[kind], 0) << "no live key of kind " << kindTag(kind) << " (" << encodingOf(kind)
                             << ")";
  }
  std::cout << "[ encodings] " << summary << "\n";
}

/** The source holds the whole data set, expired keys included (so the RDB carries them). */
void expectSourceHolds(RedisServer& source, const Dataset& data) {
  RespClient client = source.client();
  auto keyspace = client.info("keyspace");
  for (int db : data.dbs()) {
    client.select(db);
    // DBSIZE counts logically expired keys: they are still in the keyspace.
    EXPECT_EQ(client.command({"DBSIZE"}).integer(), data.count(db, /*include_expired=*/true))
        << "db " << db;
    const std::string line = keyspace["db" + std::to_string(db)];
    const std::string want_expires = "expires=" + std::to_string(data.withDeadline(db)) + ",";
    EXPECT_NE(line.find(want_expires), std::string::npos)
        << "INFO keyspace db" << db << ": " << line << " (want " << want_expires << ")";
  }
}

std::map<int, int64_t> liveCounts(const Dataset& data) {
  std::map<int, int64_t> counts;
  for (int db : data.dbs()) {
    counts[db] = data.count(db, /*include_expired=*/false);
  }
  return counts;
}

/** The counts the agent reports on its "snapshot applied:" line, when it gives them. */
std::optional<int64_t> countBefore(const std::string& line, const std::string& word) {
  std::smatch m;
  if (std::regex_search(line, m, std::regex("([0-9]+) " + word))) {
    return std::stoll(m[1].str());
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Target keys that exist before the agent starts (test A).

struct TargetSeed {
  // Keys only the target has (some in the maxTTL collection): left alone, exactly as they were.
  std::vector<DatasetKey> target_only;
  std::vector<KeyState> target_only_states;
  // Names the snapshot holds as already expired, present on the target: must be gone.
  std::vector<const DatasetKey*> stale_expired;
  // Names the snapshot holds as live keys, on the target with another type and a 5 min
  // deadline: the snapshot's value and clamped deadline replace them (compared with the rest).
  std::vector<const DatasetKey*> overwritten;
};

std::vector<const DatasetKey*> pointersTo(const std::vector<DatasetKey>& keys) {
  std::vector<const DatasetKey*> out;
  for (const auto& k : keys) {
    out.push_back(&k);
  }
  return out;
}

TargetSeed seedTarget(RedisServer& target, const Dataset& data) {
  TargetSeed seed;
  for (int i = 0; i < 300; ++i) {
    DatasetKey k;
    k.db = i % 3 == 0 ? 1 : 0;
    k.key = std::string(i % 2 == 0 ? "c:" : "t:") + "only:" + std::to_string(i);
    k.kind = ValueKind::StringEmbstr;
    seed.target_only.push_back(k);
  }
  const auto expired = data.expired();
  for (size_t i = 0; i < expired.size() && i < 200; ++i) {
    seed.stale_expired.push_back(expired[i]);
  }
  const auto live = data.live(500);
  seed.overwritten = live;

  RespClient client = target.client();
  std::map<int, std::vector<RespCommand>> commands;
  for (size_t i = 0; i < seed.target_only.size(); ++i) {
    const DatasetKey& k = seed.target_only[i];
    RespCommand set = {"SET", k.key, "target-own-" + std::to_string(i)};
    if (i % 4 < 2) {
      set.push_back("PX");
      set.push_back(std::to_string(90 * kMinute));
    }
    commands[k.db].push_back(set);
  }
  for (const DatasetKey* k : seed.stale_expired) {
    commands[k->db].push_back({"SET", k->key, "stale"});
  }
  for (const DatasetKey* k : seed.overwritten) {
    if (redisTypeOf(k->kind) == "string") {
      commands[k->db].push_back({"RPUSH", k->key, "stale"});
    } else {
      commands[k->db].push_back({"SET", k->key, "stale"});
    }
    commands[k->db].push_back({"PEXPIRE", k->key, std::to_string(5 * kMinute)});
  }
  for (auto& [db, list] : commands) {
    client.select(db);
    for (const RespValue& reply : client.pipeline(list)) {
      if (reply.isError()) {
        throw std::runtime_error("seeding the target: " + reply.toString());
      }
    }
  }
  seed.target_only_states = readStates(client, pointersTo(seed.target_only));
  return seed;
}

std::map<int, int64_t> countByDb(const std::vector<DatasetKey>& keys) {
  std::map<int, int64_t> counts;
  for (const auto& k : keys) {
    ++counts[k.db];
  }
  return counts;
}

/** Keys whose state on `server` differs from `before`. */
std::vector<std::string> changedKeys(RedisServer& server,
                                     const std::vector<const DatasetKey*>& keys,
                                     const std::vector<KeyState>& before) {
  RespClient client = server.client(30s);
  const std::vector<KeyState> now = readStates(client, keys);
  std::vector<std::string> changed;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!(now[i] == before[i])) {
      changed.push_back("db" + std::to_string(keys[i]->db) + " " + keys[i]->key + ": was " +
                        before[i].type + " PEXPIRETIME " + std::to_string(before[i].pexpiretime) +
                        " " + escapeBytes(before[i].contents, 120) + ", now " + now[i].type +
                        " PEXPIRETIME " + std::to_string(now[i].pexpiretime) + " " +
                        escapeBytes(now[i].contents, 120));
    }
  }
  return changed;
}

// ---------------------------------------------------------------------------------------------
// A. Every type and encoding, deadlines clamped, expired keys dropped.

TEST(FullSync, EveryTypeAndEncodingArrivesWithClampedDeadlines) {
  TempDir dir("xdcr-fullsync-a");
  RedisServer source(sourceArgs());
  RedisServer target;
  ASSERT_NO_FATAL_FAILURE(disableActiveExpiry(source));

  auto fill_start = std::chrono::steady_clock::now();
  const Dataset data = writeDataset(source.port(), datasetOptions(kKeysA, "a"));
  std::cout << "[ data     ] " << data.keys.size() << " keys (" << data.expiredCount()
            << " expired) written in " << secondsSince(fill_start) << " s; source used_memory "
            << source.client().info("memory")["used_memory_human"] << "\n";
  expectSourceHolds(source, data);
  expectEveryEncoding(source, data);
  ASSERT_FALSE(HasFailure()) << "the source does not hold the data set the test needs";
  const TargetSeed seed = seedTarget(target, data);

  std::map<int, int64_t> expected = liveCounts(data);
  for (const auto& [db, n] : countByDb(seed.target_only)) {
    expected[db] += n;
  }

  const std::string config = dir.file("xdcr.yaml");
  writeFileText(config, agentConfigYaml(dir.file("state"), source.port(), target.port()));
  const int64_t sync_from = unixTimeMs();
  const auto start = std::chrono::steady_clock::now();
  AgentProcess agent(config, dir.file("agent.log"));
  LogWatcher applied(agent.logPath(), kAppliedMarker);

  const auto applied_ok = waitSnapshotApplied(agent, applied, 1, fullSyncTimeout());
  EXPECT_TRUE(applied_ok);
  const double applied_s = secondsSince(start);
  const auto sizes_ok = waitDbSizes(target, expected, applied_ok ? 60s : 10s);
  EXPECT_TRUE(sizes_ok) << "\nagent log tail:\n" << agent.logTail(20);
  const int64_t sync_to = unixTimeMs();
  if (applied_ok) {
    std::cout << "[ timing   ] snapshot applied after " << applied_s
              << " s, target converged after " << secondsSince(start) << " s\n";
  }
  if (!applied.matches().empty()) {
    const std::string& line = applied.matches().front();
    std::cout << "[ agent    ] " << line << "\n";
    // The counts are checked when the line gives them ("N expired", "N failed").
    if (auto n = countBefore(line, "expired")) {
      EXPECT_EQ(*n, data.expiredCount()) << line;
    }
    if (auto n = countBefore(line, "failed")) {
      EXPECT_EQ(*n, 0) << line;
    }
  }

  // Every live key (the overwritten ones among them): contents per type, clamped deadline.
  const CompareReport report =
      compareWithSource(source, target, data.live(), clampRule(sync_from, sync_to));
  EXPECT_TRUE(report.ok()) << report.summary();
  EXPECT_EQ(report.compared, static_cast<int64_t>(data.live().size()));
  std::cout << "[ compare  ] " << report.compared << " keys, " << report.content_mismatches
            << " content and " << report.deadline_mismatches << " deadline mismatches\n";

  // No key that was already expired in the snapshot, including those the target had before.
  const std::vector<std::string> present = existingKeys(target, data.expired());
  EXPECT_TRUE(present.empty()) << present.size() << " of " << data.expiredCount()
                               << " keys already expired in the snapshot exist on the target"
                               << " (" << seed.stale_expired.size()
                               << " such names were put on the target before the sync):"
                               << joinFirst(present, 10);

  // Target keys the snapshot does not contain are left alone: same value, same deadline.
  const auto only = pointersTo(seed.target_only);
  const std::vector<std::string> changed = changedKeys(target, only, seed.target_only_states);
  EXPECT_TRUE(changed.empty()) << changed.size()
                               << " target-only keys changed:" << joinFirst(changed, 10);

  EXPECT_EQ(dbSizes(target, dbsOf(expected)), expected)
      << "target DBSIZE " << describeSizes(dbSizes(target, dbsOf(expected))) << ", expected "
      << describeSizes(expected);

  // After the snapshot the agent carries on with the stream.
  source.client().command({"SET", "c:after-snapshot", "v"});
  EXPECT_TRUE(waitUntil(
      [&] {
        return target.client().command({"GET", "c:after-snapshot"}) == RespValue::bulk("v");
      },
      15s))
      << "a write after the snapshot did not arrive\n"
      << agent.logTail(20);
  EXPECT_TRUE(agent.running()) << agent.describeState();
  EXPECT_TRUE(agent.terminate().success()) << agent.logTail(20);
}

// ---------------------------------------------------------------------------------------------
// B. A new source history (restart without persistence) -> a new full sync, by itself.

TEST(FullSync, SourceRestartedWithNewHistoryIsFullSyncedAgain) {
  TempDir dir("xdcr-fullsync-b");
  RedisServer source(sourceArgs());
  RedisServer target;
  ASSERT_NO_FATAL_FAILURE(disableActiveExpiry(source));
  const Dataset first = writeDataset(source.port(), datasetOptions(kKeysB, "b1"));

  const std::string config = dir.file("xdcr.yaml");
  writeFileText(config, agentConfigYaml(dir.file("state"), source.port(), target.port()));
  const int64_t first_from = unixTimeMs();
  AgentProcess agent(config, dir.file("agent.log"));
  LogWatcher applied(agent.logPath(), kAppliedMarker);
  ASSERT_TRUE(waitSnapshotApplied(agent, applied, 1, fullSyncTimeout()));
  ASSERT_TRUE(waitDbSizes(target, liveCounts(first), 60s));
  const CompareReport first_report =
      compareWithSource(source, target, first.live(), clampRule(first_from, unixTimeMs()));
  ASSERT_TRUE(first_report.ok()) << "first full sync: " << first_report.summary();

  // A few writes through the stream.
  std::vector<DatasetKey> few = {
      {0, "c:few:string", ValueKind::StringEmbstr, 0, false},
      {0, "k:few:hash", ValueKind::HashSmall, 0, false},
      {0, "k:few:list", ValueKind::List, 0, false},
      {1, "k:few:set", ValueKind::SetIntset, 0, false},
      {0, "c:few:stream", ValueKind::Stream, 0, false},
  };
  {
    RespClient src = source.client();
    src.command({"SET", "c:few:string", "s", "PX", std::to_string(20 * kMinute)});
    src.command({"HSET", "k:few:hash", "f", "v"});
    src.command({"RPUSH", "k:few:list", "a", "b"});
    src.command({"XADD", "c:few:stream", "*", "f", "v"});
    src.select(1);
    src.command({"SADD", "k:few:set", "1", "2", "3"});
  }
  ASSERT_TRUE(waitUntil(
      [&] {
        RespClient dst = target.client();
        dst.select(1);
        return dst.command({"EXISTS", "k:few:set"}).integer() == 1;
      },
      15s))
      << agent.logTail(20);
  std::map<int, int64_t> old_counts = liveCounts(first);
  for (const auto& [db, n] : countByDb(few)) {
    old_counts[db] += n;
  }
  ASSERT_TRUE(waitDbSizes(target, old_counts, 15s));
  std::vector<const DatasetKey*> old_keys = first.live();
  for (const auto& k : few) {
    old_keys.push_back(&k);
  }
  std::vector<KeyState> old_states;
  {
    RespClient dst = target.client(30s);
    old_states = readStates(dst, old_keys);
  }

  // The source comes back empty with a new replication id.
  const int64_t second_from = unixTimeMs();
  source.restart();
  const Dataset second = writeDataset(source.port(), [] {
    DatasetOptions options = datasetOptions(kNewKeysB, "b2");
    options.expired_fraction = 0;  // the new process has active expiry on
    return options;
  }());

  RespClient src = source.client();
  EXPECT_TRUE(waitUntil([&] { return infoInt(src, "stats", "sync_full") >= 1; }, 60s))
      << "the agent did not ask the restarted source for a full sync\n"
      << agent.logTail(20);
  ASSERT_TRUE(waitSnapshotApplied(agent, applied, 2, fullSyncTimeout()));
  std::map<int, int64_t> expected = old_counts;
  for (const auto& [db, n] : liveCounts(second)) {
    expected[db] += n;
  }
  EXPECT_TRUE(waitDbSizes(target, expected, 60s));
  const int64_t second_to = unixTimeMs();
  EXPECT_EQ(infoInt(src, "stats", "sync_full"), 1);
  std::cout << "[ resync   ] after the source restart: " << applied.matches().back()
            << "\n[ resync   ] target converged " << (second_to - second_from) / 1000.0
            << " s after the restart began; source sync_full " << infoInt(src, "stats", "sync_full")
            << "\n";

  // Some of these keys may have come through the stream: the agent's session may begin while
  // they are being written (72 of the 1,000 did on a loaded fresh machine, and a stream among
  // them differed in seen-time alone).
  const CompareReport report = compareWithSource(
      source, target, second.live(), clampRule(second_from, second_to), StreamBookkeeping::Ignored);
  EXPECT_TRUE(report.ok()) << "after the source restart: " << report.summary();

  // Keys written once the new history's full sync is over: through the stream alone, after a
  // snapshot of a new history. A fence key written last says when the stream has brought
  // everything before it.
  const int64_t third_from = unixTimeMs();
  const Dataset third = writeDataset(source.port(), [] {
    DatasetOptions options = datasetOptions(kStreamedKeysB, "b3");
    options.expired_fraction = 0;
    options.seed = 3;
    return options;
  }());
  src.select(0);
  src.command({"SET", "k:b3:fence", "1"});
  EXPECT_TRUE(waitUntil(
      [&] {
        return target.client().command({"EXISTS", "k:b3:fence"}).integer() == 1;
      },
      60s))
      << agent.logTail(20);
  const CompareReport streamed =
      compareWithSource(source, target, third.live(), clampRule(third_from, unixTimeMs()),
                        StreamBookkeeping::Ignored);
  EXPECT_TRUE(streamed.ok()) << "written after the full sync: " << streamed.summary();
  const std::vector<std::string> changed = changedKeys(target, old_keys, old_states);
  EXPECT_TRUE(changed.empty()) << changed.size() << " of " << old_keys.size()
                               << " keys from before the restart changed on the target:"
                               << joinFirst(changed, 10);
  EXPECT_TRUE(agent.running()) << agent.describeState();
  EXPECT_TRUE(agent.terminate().success()) << agent.logTail(20);
}

// ---------------------------------------------------------------------------------------------
// C. SIGKILL in the middle of a full sync; the restarted agent syncs again and converges.

TEST(FullSync, AgentKilledDuringFullSyncConvergesAfterRestart) {
  TempDir dir("xdcr-fullsync-c");
  RedisServer source(sourceArgs());
  RedisServer target;
  ASSERT_NO_FATAL_FAILURE(disableActiveExpiry(source));
  DatasetOptions options = datasetOptions(kKeysC, "c");
  options.mix = DatasetMix::MostlyStrings;
  options.string_size = kValueSizeC;
  auto fill_start = std::chrono::steady_clock::now();
  const Dataset data = writeDataset(source.port(), options);
  std::cout << "[ data     ] " << data.keys.size() << " keys written in "
            << secondsSince(fill_start) << " s\n";
  const std::map<int, int64_t> expected = liveCounts(data);
  int64_t live_total = 0;
  for (const auto& [db, n] : expected) {
    live_total += n;
  }
  const int64_t kill_at = static_cast<int64_t>(static_cast<double>(live_total) * kKillAtFraction);

  const std::string config = dir.file("xdcr.yaml");
  writeFileText(config, agentConfigYaml(dir.file("state"), source.port(), target.port()));
  int64_t keys_at_kill = 0;
  std::string replica_state;
  {
    const auto start = std::chrono::steady_clock::now();
    AgentProcess agent(config, dir.file("agent-1.log"));
    LogWatcher applied(agent.logPath(), kAppliedMarker);
    RespClient dst = target.client();
    RespClient src = source.client();
    bool too_late = false;
    const bool reached = waitUntil(
        [&] {
          int64_t total = 0;
          for (const auto& [db, n] : expected) {
            dst.select(db);
            total += dataDbSize(dst);
          }
          keys_at_kill = total;
          if (total >= kill_at) {
            too_late = applied.poll() > 0;
            auto replicas = replicasOf(src.info("replication"));
            replica_state = replicas.empty() ? "(none)" : replicas.front().state;
            return true;
          }
          return !agent.running();
        },
        fullSyncTimeout(), 5ms);
    const double elapsed = secondsSince(start);
    const std::string state_at_kill = agent.describeState();
    agent.kill();
    ASSERT_TRUE(reached && keys_at_kill >= kill_at)
        << "only " << keys_at_kill << " of " << live_total << " snapshot keys reached the target"
        << " within " << fullSyncTimeout().count() << " s; agent " << state_at_kill
        << "\nagent log tail:\n"
        << agent.logTail(30);
    std::cout << "[ kill     ] SIGKILL after " << elapsed << " s with " << keys_at_kill << " of "
              << live_total << " keys on the target; source shows the agent as " << replica_state
              << "\n";
    applied.poll();
    ASSERT_FALSE(too_late || !applied.matches().empty() || keys_at_kill >= live_total)
        << "the kill came after the snapshot was applied: make kKeysC bigger";
  }
  std::this_thread::sleep_for(kPauseAfterKill);

  const int64_t sync_from = unixTimeMs();
  const auto start = std::chrono::steady_clock::now();
  AgentProcess agent(config, dir.file("agent-2.log"));
  LogWatcher applied(agent.logPath(), kAppliedMarker);
  ASSERT_TRUE(waitSnapshotApplied(agent, applied, 1, fullSyncTimeout()));
  const double applied_s = secondsSince(start);
  EXPECT_TRUE(waitDbSizes(target, expected, 60s));
  const int64_t sync_to = unixTimeMs();
  std::cout << "[ timing   ] restarted agent: snapshot of " << live_total << " keys applied after "
            << applied_s << " s, target converged after " << secondsSince(start) << " s\n";
  if (!applied.matches().empty()) {
    std::cout << "[ agent    ] " << applied.matches().front() << "\n";
  }
  RespClient src = source.client();
  EXPECT_EQ(infoInt(src, "stats", "sync_full"), 2)
      << "the restarted agent must start a new full sync (no checkpoint is valid mid-sync)";

  // Every 10th key: contents and a deadline clamped by the second run.
  const CompareReport report =
      compareWithSource(source, target, data.live(10), clampRule(sync_from, sync_to));
  EXPECT_TRUE(report.ok()) << report.summary();
  const std::vector<std::string> present = existingKeys(target, data.expired(1));
  EXPECT_TRUE(present.empty()) << present.size()
                               << " expired keys on the target:" << joinFirst(present, 10);
  EXPECT_EQ(dbSizes(target, dbsOf(expected)), expected);
  EXPECT_TRUE(agent.terminate().success()) << agent.logTail(20);
}

// ---------------------------------------------------------------------------------------------
// The comparison itself, on a native Redis replica: no difference on a faithful copy, and every
// planted difference found. (No agent involved.)

TEST(FullSyncComparison, NativeReplicaMatchesAndPlantedDifferencesAreFound) {
  RedisServer source(sourceArgs());
  ASSERT_NO_FATAL_FAILURE(disableActiveExpiry(source));
  const Dataset data = writeDataset(source.port(), datasetOptions(kKeysA, "n"));
  RedisServer replica;
  RespClient rc = replica.client();
  ASSERT_FALSE(rc.command({"REPLICAOF", "127.0.0.1", std::to_string(source.port())}).isError());
  std::map<int, int64_t> all;
  for (int db : data.dbs()) {
    all[db] = data.count(db, /*include_expired=*/true);  // a replica keeps them until a DEL
  }
  ASSERT_TRUE(waitUntil(
      [&] {
        auto info = rc.info("replication");
        return info["master_link_status"] == "up" && info["master_sync_in_progress"] == "0";
      },
      120s, 10ms));
  ASSERT_TRUE(waitDbSizes(replica, all, 30s));

  const CompareReport report = compareWithSource(source, replica, data.live(), exactRule());
  EXPECT_TRUE(report.ok()) << report.summary();
  EXPECT_EQ(report.compared, static_cast<int64_t>(data.live().size()));
  std::cout << "[ native   ] " << report.compared << " keys, " << report.content_mismatches
            << " content and " << report.deadline_mismatches << " deadline mismatches\n";
  const std::vector<std::string> present = existingKeys(replica, data.expired());
  EXPECT_TRUE(present.empty()) << joinFirst(present, 10);

  // Plant one difference per kind (and a deadline change, and a deletion) on the replica.
  ASSERT_FALSE(rc.command({"REPLICAOF", "NO", "ONE"}).isError());
  std::map<ValueKind, const DatasetKey*> first_of;
  const DatasetKey* second_stream = nullptr;
  for (const DatasetKey* k : data.live()) {
    if (first_of.count(k->kind) == 0) {
      first_of[k->kind] = k;
    } else if (k->kind == ValueKind::Stream && second_stream == nullptr) {
      second_stream = k;
    }
  }
  ASSERT_EQ(first_of.size(), static_cast<size_t>(kValueKindCount));
  ASSERT_NE(second_stream, nullptr);
  std::set<std::string> planted;
  auto plant = [&](const DatasetKey* k, RespCommand cmd) {
    rc.select(k->db);
    RespValue reply = rc.command(cmd);
    ASSERT_FALSE(reply.isError()) << k->key << ": " << reply.toString();
    planted.insert("db" + std::to_string(k->db) + " " + k->key);
  };
  for (const auto& [kind, k] : first_of) {
    switch (kind) {
      case ValueKind::StringInt:
        plant(k, {"INCR", k->key});
        break;
      case ValueKind::StringEmbstr:
      case ValueKind::StringRaw:
      case ValueKind::StringLzf:
      case ValueKind::StringBinary:
        plant(k, {"APPEND", k->key, "x"});
        break;
      case ValueKind::HashSmall:
      case ValueKind::HashLarge:
      case ValueKind::HashLongValue:
        plant(k, {"HSET", k->key, "field:0", "planted"});
        break;
      case ValueKind::List:
      case ValueKind::ListLarge:
        plant(k, {"LSET", k->key, "-1", "planted"});
        break;
      case ValueKind::SetIntset:
      case ValueKind::SetLargeInts:
        plant(k, {"SADD", k->key, "999999999"});
        break;
      case ValueKind::SetStrings:
        plant(k, {"SADD", k->key, "planted"});
        break;
      case ValueKind::ZsetSmall:
      case ValueKind::ZsetLarge:
        plant(k, {"ZADD", k->key, "42", "planted"});
        break;
      case ValueKind::Stream: {
        // A PEL difference only: acknowledge one pending entry.
        rc.select(k->db);
        RespValue pending = rc.command({"XPENDING", k->key, "g1", "-", "+", "1"});
        ASSERT_TRUE(pending.isArray() && !pending.array().empty()) << pending.toString();
        plant(k, {"XACK", k->key, "g1", pending.array()[0].array()[0].str()});
        break;
      }
      case ValueKind::StreamEmpty:
        plant(k, {"XGROUP", "CREATECONSUMER", k->key, "g0", "planted"});
        break;
    }
  }
  plant(second_stream, {"XADD", second_stream->key, "*", "planted", "1"});
  const DatasetKey* deadline_key = nullptr;
  const DatasetKey* deleted_key = nullptr;
  for (const DatasetKey* k : data.live()) {
    if (planted.count("db" + std::to_string(k->db) + " " + k->key) != 0) {
      continue;
    }
    if (deadline_key == nullptr && k->deadline_ms != 0) {
      deadline_key = k;
    } else if (deleted_key == nullptr) {
      deleted_key = k;
    }
  }
  ASSERT_NE(deadline_key, nullptr);
  ASSERT_NE(deleted_key, nullptr);
  plant(deadline_key,
        {"PEXPIREAT", deadline_key->key, std::to_string(deadline_key->deadline_ms + 5000)});
  plant(deleted_key, {"DEL", deleted_key->key});

  const CompareReport planted_report = compareWithSource(source, replica, data.live(), exactRule());
  EXPECT_EQ(planted_report.mismatched_keys, planted) << planted_report.summary();
  // Every planted key but the PEXPIREAT one has other contents; PEXPIREAT and DEL show as
  // deadline differences (in-place writes keep a key's deadline).
  EXPECT_EQ(planted_report.content_mismatches, static_cast<int64_t>(planted.size()) - 1)
      << planted_report.summary();
  EXPECT_EQ(planted_report.deadline_mismatches, 2) << planted_report.summary();
}

}  // namespace
}  // namespace xdcr::test
