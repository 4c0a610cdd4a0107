// The expiry contract end to end: the test vectors 1–26 of expiry-semantics.md §9, each run
// against a real source redis-server, a real target redis-server and the agent between them.
//
// The vectors are a table (vectorRows()). Each row names its bucket max_ttl B, its collection
// max_ttl C, the commands written (to the source, and where a vector needs it to the target),
// and the state the target must hold afterwards: value and absolute deadline (PEXPIRETIME,
// within kToleranceMs), or no key at all. Rows that share a configuration (filters, clock.on_skew,
// the simulated skew) form a group and share one source, one target and one agent:
//   - every row has its own keys, "v<N>:<name>";
//   - every distinct B of a group is one bucket (a db of its own), and a row with C > 0 has a
//     collection "v<N>:*" with max_ttl C in that bucket; a row with C = 0 is in the bucket's
//     default collection;
//   - the rows' steps are interleaved, so the pauses some vectors need (a mutation seconds after
//     the first, an expiry to pass) overlap instead of adding up.
// "now" of a row is the test's wall clock when it wrote the row's decisive command (the agent
// writes to the target a few ms later); expected deadlines are offsets from it.
//
// One more group shows §3's "a changed max_ttl acts only at a document's next mutation" across an
// agent restart that resumes by partial resync.
//
// Every row prints "vector N: ok" or what it expected and found; a failing row does not stop the
// others.

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
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

constexpr int64_t kSecondMs = 1000;
// How far a target deadline may be from the expected one: absorbs the time between the test's
// clock reading and the agent's write (rule 4 uses the target's clock at the agent's write).
constexpr int64_t kToleranceMs = 1000;
constexpr auto kAttachTimeout = 30s;
constexpr auto kSyncTimeout = 30s;
constexpr auto kAwaitTimeout = 10s;
constexpr auto kLogTimeout = 15s;
constexpr auto kTerminateTimeout = 30s;
// Deadline of the keys whose expiry vectors 19 and 22 classify. Long enough to make the target
// side's PERSIST (which gives the target copy a longer life) before the target's own copy expires,
// short enough to keep the test quick.
constexpr int64_t kShortLifeMs = 2000;
// Pause after which such a key has surely passed its deadline on the source.
constexpr int64_t kPastShortLifeMs = kShortLifeMs + 200;
// Gap between two writes whose target deadlines must differ by more than the tolerance
// (vectors 13, 15, 16: "extended by the mutation", not left at the first write's clamp).
constexpr int64_t kMutationGapMs = 3000;
// The clock skew of vectors 24–26: the target redis-server runs under libfaketime (with the
// ftshim preload) 30 s ahead of the source's clock, and the agent measures it with TIME.
constexpr int64_t kSkewMs = 30 * kSecondMs;

// ---------------------------------------------------------------------------------------------
// The table.

enum class StepKind {
  Source,         // a command on the source (in the row's db)
  Target,         // a command on the target (in the row's db): the target's own write
  AwaitOnTarget,  // wait until the key exists on the target (the agent has written it)
  Pause,          // the row's next step comes at least this long after its previous one
};

/**
 * One step of a row. In `args`, "$x" stands for the row's key "v<N>:x", and "@+N" / "@-N" for the
 * test's wall clock when the step runs plus / minus N ms (an absolute deadline).
 */
struct Step {
  StepKind kind = StepKind::Source;
  std::vector<std::string> args;
  // The reply the command must get (RespValue::toString()); unset: anything but an error. A
  // setup command that does not take effect would make the row test something else.
  std::optional<std::string> reply;
  // The row's "now" is the test's clock when this step ran.
  bool mark = false;
  int64_t pause_ms = 0;
};

Step source(std::vector<std::string> args, std::optional<std::string> reply = std::nullopt) {
  return {StepKind::Source, std::move(args), std::move(reply), false, 0};
}
/** A source command that sets the row's "now". */
Step sourceNow(std::vector<std::string> args, std::optional<std::string> reply = std::nullopt) {
  return {StepKind::Source, std::move(args), std::move(reply), true, 0};
}
Step target(std::vector<std::string> args, std::optional<std::string> reply = std::nullopt) {
  return {StepKind::Target, std::move(args), std::move(reply), false, 0};
}
Step awaitOnTarget(std::string key) {
  return {StepKind::AwaitOnTarget, {std::move(key)}, std::nullopt, false, 0};
}
Step pause(int64_t ms) {
  return {StepKind::Pause, {}, std::nullopt, false, ms};
}

/** An expected target deadline: none (PEXPIRETIME -1), or the row's "now" + an offset. */
struct Deadline {
  bool none = true;
  int64_t after_now_ms = 0;
};
constexpr Deadline kNoDeadline{};
constexpr Deadline nowPlus(int64_t ms) {
  return {false, ms};
}
constexpr Deadline nowPlusSeconds(int64_t s) {
  return {false, s * kSecondMs};
}

/** What one key of a row must be on the target. */
struct KeyExpect {
  std::string key;  // "$k"
  bool present = true;
  bool hash = false;
  std::string value;  // a string's value, or a hash rendered "f=v,f2=v2" (fields sorted)
  Deadline deadline;
};

KeyExpect stringKey(std::string key, std::string value, Deadline deadline) {
  return {std::move(key), true, false, std::move(value), deadline};
}
KeyExpect hashKey(std::string key, std::string fields, Deadline deadline) {
  return {std::move(key), true, true, std::move(fields), deadline};
}
KeyExpect noKey(std::string key) {
  return {std::move(key), false, false, "", kNoDeadline};
}

struct Row {
  int vector = 0;            // the number in expiry-semantics.md §9
  int64_t bucket_s = 0;      // B
  int64_t collection_s = 0;  // C (0: the bucket's default collection)
  std::string input;         // the vector's stream input, as §9 states it
  std::vector<Step> steps;
  std::vector<KeyExpect> expect;
  // A line the agent must log (case-insensitive), e.g. the skew warning of vector 25.
  std::string log_contains;
  // The row flushes the source: it runs after the group's other rows have been checked, and
  // then checks that the target still holds every key they left there.
  bool flushes_source = false;
};

Row row(int vector, int64_t bucket_s, int64_t collection_s, std::string input,
        std::vector<Step> steps, std::vector<KeyExpect> expect) {
  Row r;
  r.vector = vector;
  r.bucket_s = bucket_s;
  r.collection_s = collection_s;
  r.input = std::move(input);
  r.steps = std::move(steps);
  r.expect = std::move(expect);
  return r;
}

/** The row, and the agent must log a line containing `text`. */
Row withLogLine(Row r, std::string text) {
  r.log_contains = std::move(text);
  return r;
}

/** The row flushes the source. */
Row flushing(Row r) {
  r.flushes_source = true;
  return r;
}

const std::vector<Row>& vectorRows() {
  // clang-format off
  static const std::vector<Row> kRows = {
      //  #    B     C
      row(1,   0,    0, "SET k v",
          {sourceNow({"SET", "$k", "v"}, "OK")},
          {stringKey("$k", "v", kNoDeadline)}),
      row(2, 600,    0, "SET k v",
          {sourceNow({"SET", "$k", "v"}, "OK")},
          {stringKey("$k", "v", nowPlusSeconds(600))}),
      row(3, 600,   60, "SET k v",
          {sourceNow({"SET", "$k", "v"}, "OK")},
          {stringKey("$k", "v", nowPlusSeconds(60))}),
      row(4, 600,   60, "SET k v PXAT now+30s",
          {sourceNow({"SET", "$k", "v", "PXAT", "@+30000"}, "OK")},
          {stringKey("$k", "v", nowPlusSeconds(30))}),
      row(5, 600,   60, "SET k v PXAT now+300s",
          {sourceNow({"SET", "$k", "v", "PXAT", "@+300000"}, "OK")},
          {stringKey("$k", "v", nowPlusSeconds(60))}),
      row(6, 600,    0, "SET k v PXAT now+300s",
          {sourceNow({"SET", "$k", "v", "PXAT", "@+300000"}, "OK")},
          {stringKey("$k", "v", nowPlusSeconds(300))}),
      row(7, 600,    0, "SET k v PXAT now+900s",
          {sourceNow({"SET", "$k", "v", "PXAT", "@+900000"}, "OK")},
          {stringKey("$k", "v", nowPlusSeconds(600))}),
      row(8,   0, 1000, "SET k v PXAT now+900s",
          {sourceNow({"SET", "$k", "v", "PXAT", "@+900000"}, "OK")},
          {stringKey("$k", "v", nowPlusSeconds(900))}),
      row(9,  60, 1000, "SET k v PXAT now+900s (the collection overrides the bucket)",
          {sourceNow({"SET", "$k", "v", "PXAT", "@+900000"}, "OK")},
          {stringKey("$k", "v", nowPlusSeconds(900))}),
      row(10,  0,    0, "SET k v PXAT now+300s, strip_ttl",
          {sourceNow({"SET", "$k", "v", "PXAT", "@+300000"}, "OK")},
          {stringKey("$k", "v", kNoDeadline)}),
      row(11, 600,   0, "SET k v PXAT now+300s, strip_ttl",
          {sourceNow({"SET", "$k", "v", "PXAT", "@+300000"}, "OK")},
          {stringKey("$k", "v", nowPlusSeconds(600))}),
      row(12,  0,    0, "PEXPIREAT k now+50s on an existing key",
          {source({"SET", "$k", "v"}, "OK"),
           sourceNow({"PEXPIREAT", "$k", "@+50000"}, "(integer) 1")},
          {stringKey("$k", "v", nowPlusSeconds(50))}),
      row(13,  0,   60, "PERSIST k (k had a deadline): now+60s, never persistent",
          {source({"SET", "$k", "v", "PXAT", "@+500000"}, "OK"),
           pause(kMutationGapMs),
           sourceNow({"PERSIST", "$k"}, "(integer) 1")},
          {stringKey("$k", "v", nowPlusSeconds(60))}),
      row(14,  0,    0, "PERSIST k (k had a deadline)",
          {source({"SET", "$k", "v", "PXAT", "@+500000"}, "OK"),
           sourceNow({"PERSIST", "$k"}, "(integer) 1")},
          {stringKey("$k", "v", kNoDeadline)}),
      row(15,  0,   60, "HSET k f v, source deadline of k = now+500s",
          {source({"HSET", "$k", "f", "v"}, "(integer) 1"),
           source({"PEXPIRE", "$k", "500000"}, "(integer) 1"),
           pause(kMutationGapMs),
           sourceNow({"HSET", "$k", "f2", "v2"}, "(integer) 1")},
          {hashKey("$k", "f=v,f2=v2", nowPlusSeconds(60))}),
      row(16,  0,   60, "HSET k f v, no source deadline, target deadline from a write 3 s before",
          {source({"HSET", "$k", "f", "v"}, "(integer) 1"),
           awaitOnTarget("$k"),
           pause(kMutationGapMs),
           sourceNow({"HSET", "$k", "f2", "v2"}, "(integer) 1")},
          {hashKey("$k", "f=v,f2=v2", nowPlusSeconds(60))}),
      row(17,  0,    0, "SET k v PXAT now-1s (expired on arrival)",
          {sourceNow({"SET", "$k", "v", "PXAT", "@-1000"}, "OK")},
          {noKey("$k")}),
      row(18,  0,   60, "SET k v2 KEEPTTL, target deadline now+40s",
          {sourceNow({"SET", "$k", "v", "PXAT", "@+40000"}, "OK"),
           awaitOnTarget("$k"),
           source({"SET", "$k", "v2", "KEEPTTL"}, "OK")},
          {stringKey("$k", "v2", nowPlusSeconds(40))}),
      // 19 and 22 need the source's active expiry off (group setup): the key stays until the test
      // touches it, so its expiry DEL comes when the agent knows the deadline has passed. Before
      // that, the target's own PERSIST gives its copy a longer life, which drop_expirations must
      // protect.
      row(19,  0,    0, "DEL k from the source's expiry (D < source_now), drop_expirations",
          {sourceNow({"SET", "$k", "v", "PX", std::to_string(kShortLifeMs)}, "OK"),
           awaitOnTarget("$k"),
           target({"PERSIST", "$k"}, "(integer) 1"),
           pause(kPastShortLifeMs),
           source({"GET", "$k"}, "(nil)")},  // lazy expiry: DEL k on the stream
          {stringKey("$k", "v", kNoDeadline)}),
      row(20,  0,    0, "DEL k with D = source_now+10s (a deletion), drop_expirations",
          {source({"SET", "$k", "v", "PXAT", "@+10000"}, "OK"),
           sourceNow({"DEL", "$k"}, "(integer) 1")},
          {noKey("$k")}),
      row(21,  0,    0, "DEL k, no source deadline, drop_deletions",
          {source({"SET", "$k", "v"}, "OK"),
           awaitOnTarget("$k"),
           sourceNow({"DEL", "$k"}, "(integer) 1")},
          {stringKey("$k", "v", kNoDeadline)}),
      row(22,  0,    0, "DEL a b, a past its deadline (MULTI, DEL a, DEL a b, EXEC), "
                        "drop_expirations",
          {sourceNow({"SET", "$a", "v", "PX", std::to_string(kShortLifeMs)}, "OK"),
           source({"SET", "$b", "v"}, "OK"),
           awaitOnTarget("$a"),
           awaitOnTarget("$b"),
           target({"PERSIST", "$a"}, "(integer) 1"),
           pause(kPastShortLifeMs),
           source({"DEL", "$a", "$b"}, "(integer) 1")},  // only b counted: a expired lazily
          {stringKey("$a", "v", kNoDeadline), noKey("$b")}),
      flushing(row(23, 0, 0, "FLUSHALL, default filters",
          {source({"SET", "$k", "v"}, "OK"),
           awaitOnTarget("$k"),
           sourceNow({"FLUSHALL"}, "OK")},
          {stringKey("$k", "v", kNoDeadline)})),
      // 24-26: S = the row's "now" (source domain); the target's clock runs 30 s ahead
      // (libfaketime), so delta = target - source = +30 s.
      row(24,  0,    0, "SET k v PXAT S+100s, delta +30s, compensate",
          {sourceNow({"SET", "$k", "v", "PXAT", "@+100000"}, "OK")},
          {stringKey("$k", "v", nowPlus(100 * kSecondMs + kSkewMs))}),
      withLogLine(row(25, 0, 0, "SET k v PXAT S+100s, delta +30s, warn",
          {sourceNow({"SET", "$k", "v", "PXAT", "@+100000"}, "OK")},
          {stringKey("$k", "v", nowPlusSeconds(100))}), "clock skew"),
      // min(S+100s+delta, target now+60s), the target's now being S+delta: S+90s.
      row(26,  0,   60, "SET k v PXAT S+100s, delta +30s, compensate, C=60s",
          {sourceNow({"SET", "$k", "v", "PXAT", "@+100000"}, "OK")},
          {stringKey("$k", "v",
                     nowPlus(std::min(100 * kSecondMs + kSkewMs, kSkewMs + 60 * kSecondMs)))}),
  };
  // clang-format on
  return kRows;
}

const Row& rowOf(int vector) {
  for (const Row& r : vectorRows()) {
    if (r.vector == vector) {
      return r;
    }
  }
  throw std::logic_error("no row for vector " + std::to_string(vector));
}

/** A configuration shared by some rows: one source, one target, one agent. */
struct Group {
  std::string name{};
  std::vector<int> vectors{};
  std::string filters{};  // YAML flow mapping, "" = default filters
  std::string on_skew = "warn";
  int64_t skew_ms = 0;  // the target's clock runs this far ahead (libfaketime); 0 = real clock
  bool active_expiry_off = false;
};

std::string prefixOf(int vector) {
  return "v" + std::to_string(vector) + ":";
}

// ---------------------------------------------------------------------------------------------
// Running a group.

/** The target's maxTTL layout of a group: one bucket (db) per distinct B. */
struct Layout {
  struct Collection {
    std::string name, pattern;
    int64_t max_ttl_s;
  };
  struct Bucket {
    int db;
    int64_t max_ttl_s;
    std::vector<Collection> collections;
  };
  std::vector<Bucket> buckets;
  std::map<int, int> db_of_vector;

  static Layout of(const std::vector<const Row*>& rows) {
    Layout layout;
    for (const Row* row : rows) {
      auto it = std::find_if(layout.buckets.begin(), layout.buckets.end(),
                             [&](const Bucket& b) { return b.max_ttl_s == row->bucket_s; });
      if (it == layout.buckets.end()) {
        layout.buckets.push_back({static_cast<int>(layout.buckets.size()), row->bucket_s, {}});
        it = layout.buckets.end() - 1;
      }
      if (row->collection_s > 0) {
        it->collections.push_back(
            {"v" + std::to_string(row->vector), prefixOf(row->vector) + "*", row->collection_s});
      }
      layout.db_of_vector[row->vector] = it->db;
    }
    return layout;
  }
};

std::string yamlSeconds(int64_t s) {
  return s == 0 ? "0" : std::to_string(s) + "s";
}

std::string configYaml(const std::string& state_dir, uint16_t source_port, uint16_t target_port,
                       const Layout& layout, const std::string& filters,
                       const std::string& on_skew) {
  std::ostringstream y;
  y << "agent:\n"
    << "  state_dir: \"" << state_dir << "\"\n"
    << "  log_level: info\n"
    << "clock:\n"
    << "  max_skew: 500ms\n"
    << "  on_skew: " << on_skew << "\n"
    << "clusters:\n"
    << "  src: {type: redis, address: \"127.0.0.1:" << source_port << "\"}\n"
    << "  dst:\n"
    << "    type: redis\n"
    << "    address: \"127.0.0.1:" << target_port << "\"\n"
    << "    buckets:\n";
  for (const auto& b : layout.buckets) {
    y << "      - db: " << b.db << "\n"
      << "        max_ttl: " << yamlSeconds(b.max_ttl_s) << "\n";
    if (!b.collections.empty()) {
      y << "        collections:\n";
      for (const auto& c : b.collections) {
        y << "          - {name: " << c.name << ", keys: \"" << c.pattern
          << "\", max_ttl: " << yamlSeconds(c.max_ttl_s) << "}\n";
      }
    }
  }
  y << "pipelines:\n"
    << "  - name: p\n"
    << "    source: src\n"
    << "    target: dst\n"
    << "    checkpoint_interval: 1s\n";
  if (!filters.empty()) {
    y << "    filters: " << filters << "\n";
  }
  return y.str();
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string describeDeadline(int64_t pexpiretime, int64_t now) {
  if (pexpiretime == -1) {
    return "no deadline";
  }
  if (pexpiretime == -2) {
    return "no key";
  }
  std::ostringstream s;
  const int64_t delta = pexpiretime - now;
  s << pexpiretime << " (now" << (delta >= 0 ? "+" : "") << delta << "ms)";
  return s.str();
}

/** A key's state on the target. */
struct Observed {
  bool present = false;
  bool hash = false;
  std::string value;
  int64_t pexpiretime = -2;

  std::string describe(int64_t now) const {
    if (!present) {
      return "no key";
    }
    return (hash ? "hash {" + value + "}" : "\"" + value + "\"") + ", deadline " +
           describeDeadline(pexpiretime, now);
  }
};

Observed observe(RespClient& client, const std::string& key) {
  Observed o;
  const std::string type = client.command({"TYPE", key}).str();
  if (type == "none") {
    return o;
  }
  o.present = true;
  if (type == "hash") {
    o.hash = true;
    std::map<std::string, std::string> fields;
    const auto items = client.command({"HGETALL", key}).array();
    for (size_t i = 0; i + 1 < items.size(); i += 2) {
      fields[items[i].str()] = items[i + 1].str();
    }
    for (const auto& [f, v] : fields) {
      o.value += (o.value.empty() ? "" : ",") + f + "=" + v;
    }
  } else if (type == "string") {
    o.value = client.command({"GET", key}).str();
  } else {
    o.value = "(type " + type + ")";
  }
  o.pexpiretime = client.command({"PEXPIRETIME", key}).integer();
  return o;
}

/** "" when `o` is what `e` says, else why not. */
std::string mismatch(const KeyExpect& e, const Observed& o, int64_t now) {
  if (!e.present) {
    return o.present ? "must be absent" : "";
  }
  if (!o.present) {
    return "missing";
  }
  if (o.hash != e.hash || o.value != e.value) {
    return "value";
  }
  if (e.deadline.none) {
    return o.pexpiretime == -1 ? "" : "deadline";
  }
  const int64_t want = now + e.deadline.after_now_ms;
  return o.pexpiretime >= 0 && std::llabs(o.pexpiretime - want) <= kToleranceMs ? "" : "deadline";
}

std::string describeExpect(const KeyExpect& e, int64_t now) {
  if (!e.present) {
    return "no key";
  }
  std::string s = e.hash ? "hash {" + e.value + "}" : "\"" + e.value + "\"";
  if (e.deadline.none) {
    return s + ", no deadline";
  }
  return s + ", deadline " + std::to_string(now + e.deadline.after_now_ms) + " (now+" +
         std::to_string(e.deadline.after_now_ms) + "ms, ±" + std::to_string(kToleranceMs) + ")";
}

/** The source as the agent's attachment shows: online. */
bool waitAgentOnline(RedisServer& source) {
  return waitUntil(
      [&] {
        auto replicas = replicasOf(source.client().info("replication"));
        return !replicas.empty() && replicas.front().state == "online";
      },
      kAttachTimeout);
}

int64_t infoInt(RespClient& client, const std::string& section, const std::string& key) {
  auto info = client.info(section);
  auto it = info.find(key);
  return it == info.end() ? -1 : std::stoll(it->second);
}

class GroupRun {
 public:
  GroupRun(Group group, std::vector<const Row*> rows)
      : group_(std::move(group)),
        rows_(std::move(rows)),
        layout_(Layout::of(rows_)),
        dir_("xdcr-vectors") {
    std::vector<std::string> args = {"--repl-diskless-sync-delay", "0"};
    if (group_.active_expiry_off) {
      args.insert(args.end(), {"--enable-debug-command", "local"});
    }
    source_ = std::make_unique<RedisServer>(args);
    if (group_.skew_ms != 0) {
      skewed_target_ = std::make_unique<FakeTimeRedis>(double(group_.skew_ms) / kSecondMs);
      target_ = &skewed_target_->server();
    } else {
      plain_target_ = std::make_unique<RedisServer>();
      target_ = plain_target_.get();
    }
    if (group_.active_expiry_off) {
      RespValue r = source_->client().command({"DEBUG", "SET-ACTIVE-EXPIRE", "0"});
      if (r.isError()) {
        throw std::runtime_error("DEBUG SET-ACTIVE-EXPIRE 0: " + r.toString());
      }
    }
    config_ = dir_.file("xdcr.yaml");
    writeConfig(layout_);
  }

  void writeConfig(const Layout& layout) {
    writeFileText(config_, configYaml(dir_.file("state"), source_->port(), target_->port(), layout,
                                      group_.filters, group_.on_skew));
  }

  /** Starts the agent and waits until the source lists it online. */
  ::testing::AssertionResult startAgent() {
    ++agent_starts_;
    const std::string log = dir_.file("agent-" + std::to_string(agent_starts_) + ".log");
    agent_ = std::make_unique<AgentProcess>(config_, log);
    if (!waitAgentOnline(*source_)) {
      return ::testing::AssertionFailure()
             << "group " << group_.name << ": the agent did not come online; "
             << agent_->describeState() << "\n"
             << agent_->logTail();
    }
    return ::testing::AssertionSuccess();
  }

  ::testing::AssertionResult stopAgent() {
    ExitStatus status = agent_->terminate(kTerminateTimeout);
    if (!status.success()) {
      return ::testing::AssertionFailure() << "agent SIGTERM: " << status.describe() << "\n"
                                           << agent_->logTail();
    }
    return ::testing::AssertionSuccess();
  }

  /**
   * Waits until the agent has applied everything written to the source so far: a marker written
   * to the source last arrives on the target (the agent applies the stream in order).
   */
  ::testing::AssertionResult sync() {
    const std::string marker = std::to_string(++syncs_) + "-" + std::to_string(unixTimeMs());
    RespClient src = source_->client();
    src.command({"SET", "__sync__", marker});
    RespClient dst = target_->client();
    if (!waitUntil(
            [&] {
              RespValue v = dst.command({"GET", "__sync__"});
              return !v.isNull() && !v.isError() && v.str() == marker;
            },
            kSyncTimeout, 20ms)) {
      return ::testing::AssertionFailure()
             << "group " << group_.name << ": the agent did not apply the stream within "
             << std::chrono::duration_cast<std::chrono::seconds>(kSyncTimeout).count()
             << " s; agent " << agent_->describeState() << "\n"
             << agent_->logTail();
    }
    return ::testing::AssertionSuccess();
  }

  /** Runs the rows' steps, interleaved; a row whose setup fails stops there (setup_failed_). */
  void runRows(const std::vector<const Row*>& rows) {
    struct Cursor {
      const Row* row;
      size_t next = 0;
      int64_t ready_ms = 0;
    };
    std::vector<Cursor> cursors;
    for (const Row* row : rows) {
      cursors.push_back({row, 0, 0});
    }
    while (true) {
      Cursor* pick = nullptr;
      for (Cursor& c : cursors) {
        if (c.next < c.row->steps.size() && !setup_failed_.count(c.row->vector) &&
            (pick == nullptr || c.ready_ms < pick->ready_ms)) {
          pick = &c;
        }
      }
      if (pick == nullptr) {
        break;
      }
      const int64_t wait = pick->ready_ms - unixTimeMs();
      if (wait > 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(wait));
      }
      const Step& step = pick->row->steps[pick->next++];
      if (step.kind == StepKind::Pause) {
        pick->ready_ms = unixTimeMs() + step.pause_ms;
        continue;
      }
      try {
        runStep(*pick->row, step);
      } catch (const std::exception& e) {
        setup_failed_[pick->row->vector] = e.what();
      }
      pick->ready_ms = unixTimeMs();
    }
  }

  /** Checks each row against the target, EXPECT-style, and prints one line per row. */
  void checkRows(const std::vector<const Row*>& rows) {
    for (const Row* row : rows) {
      checkRow(*row);
    }
  }

  /** The group's rows, the source-flushing ones last. */
  void runAll() {
    std::vector<const Row*> first, last;
    for (const Row* row : rows_) {
      (row->flushes_source ? last : first).push_back(row);
    }
    for (const auto* batch : {&first, &last}) {
      if (batch->empty()) {
        continue;
      }
      runRows(*batch);
      EXPECT_TRUE(sync());
      checkRows(*batch);
    }
    if (::testing::Test::HasFailure()) {
      std::cout << "group " << group_.name << ": agent log tail\n" << agent_->logTail(80) << "\n";
    }
  }

  RedisServer& sourceServer() { return *source_; }
  RedisServer& targetServer() { return *target_; }
  const Layout& layout() const { return layout_; }
  int64_t nowOf(int vector) const {
    auto it = now_.find(vector);
    return it == now_.end() ? 0 : it->second;
  }
  int dbOf(int vector) const { return layout_.db_of_vector.at(vector); }

  /** Observes and compares one key of row `vector` against `e`; "" when it matches. */
  std::string checkKey(int vector, const KeyExpect& e, int64_t now) {
    const std::string key = expandKey(vector, e.key);
    RespClient& dst = client(*target_, dst_clients_, dbOf(vector));
    Observed o = observe(dst, key);
    const std::string why = mismatch(e, o, now);
    if (why.empty()) {
      return "";
    }
    return "  " + key + " (db " + std::to_string(dbOf(vector)) + "): " + why + "\n    expected " +
           describeExpect(e, now) + "\n    actual   " + o.describe(now) + "\n";
  }

 private:
  static std::string expandKey(int vector, const std::string& arg) {
    return arg.size() > 1 && arg[0] == '$' ? prefixOf(vector) + arg.substr(1) : arg;
  }

  RespClient& client(RedisServer& server, std::map<int, RespClient>& clients, int db) {
    auto it = clients.find(db);
    if (it == clients.end()) {
      RespClient c = server.client();
      c.select(db);
      it = clients.emplace(db, std::move(c)).first;
    }
    return it->second;
  }

  void runStep(const Row& row, const Step& step) {
    const int db = dbOf(row.vector);
    std::string& trace = traces_[row.vector];
    if (step.kind == StepKind::AwaitOnTarget) {
      const std::string key = expandKey(row.vector, step.args[0]);
      RespClient& dst = client(*target_, dst_clients_, db);
      trace += "await " + key + " on the target; ";
      if (!waitUntil(
              [&] {
                return dst.command({"EXISTS", key}).integer() == 1;
              },
              kAwaitTimeout, 10ms)) {
        throw std::runtime_error(key + " did not appear on the target within " +
                                 std::to_string(kAwaitTimeout.count()) + " s");
      }
      return;
    }
    const int64_t now = unixTimeMs();
    RespCommand command;
    for (const std::string& arg : step.args) {
      if (arg.size() > 2 && arg[0] == '@' && (arg[1] == '+' || arg[1] == '-')) {
        const int64_t offset = std::stoll(arg.substr(2));
        command.push_back(std::to_string(arg[1] == '+' ? now + offset : now - offset));
      } else {
        command.push_back(expandKey(row.vector, arg));
      }
    }
    const bool on_source = step.kind == StepKind::Source;
    RespClient& c =
        on_source ? client(*source_, src_clients_, db) : client(*target_, dst_clients_, db);
    RespValue reply = c.command(command);
    std::string rendered;
    for (const auto& a : command) {
      rendered += (rendered.empty() ? "" : " ") + a;
    }
    trace += std::string(on_source ? "source: " : "target: ") + rendered + " -> " +
             reply.toString() + "; ";
    if (step.mark) {
      now_[row.vector] = now;
    }
    if (reply.isError() || (step.reply && reply.toString() != *step.reply)) {
      throw std::runtime_error("setup command " + rendered + " answered " + reply.toString() +
                               (step.reply ? ", expected " + *step.reply : ""));
    }
  }

  void checkRow(const Row& row) {
    std::ostringstream head;
    head << "vector " << row.vector;
    std::ostringstream detail;
    detail << head.str() << " (B=" << yamlSeconds(row.bucket_s)
           << ", C=" << yamlSeconds(row.collection_s) << ", group " << group_.name
           << "): " << row.input << "\n  steps: " << traces_[row.vector] << "\n";
    bool ok = true;
    if (auto it = setup_failed_.find(row.vector); it != setup_failed_.end()) {
      ok = false;
      detail << "  setup failed: " << it->second << "\n";
    } else {
      const int64_t now = nowOf(row.vector);
      for (const KeyExpect& e : row.expect) {
        std::string why = checkKey(row.vector, e, now);
        if (!why.empty()) {
          ok = false;
          detail << why;
        }
      }
      if (!row.log_contains.empty()) {
        const std::string needle = lower(row.log_contains);
        if (!waitUntil([&] { return lower(agent_->logText()).find(needle) != std::string::npos; },
                       kLogTimeout, 200ms)) {
          ok = false;
          detail << "  the agent's log has no line containing \"" << row.log_contains << "\"\n";
        }
      }
      if (row.flushes_source) {
        // Every key the group's earlier rows left on the target is still there.
        for (const Row* other : rows_) {
          if (other->flushes_source) {
            continue;
          }
          for (const KeyExpect& e : other->expect) {
            if (!e.present) {
              continue;
            }
            const std::string key = expandKey(other->vector, e.key);
            RespClient& dst = client(*target_, dst_clients_, dbOf(other->vector));
            if (dst.command({"EXISTS", key}).integer() != 1) {
              ok = false;
              detail << "  " << key << " (vector " << other->vector
                     << ") is gone from the target after the source's FLUSHALL\n";
            }
          }
        }
      }
    }
    if (ok) {
      std::cout << head.str() << ": ok" << std::endl;
    } else {
      std::cout << head.str() << ": FAILED (expected/actual below)" << std::endl;
      ADD_FAILURE() << detail.str();
    }
  }

  Group group_;
  std::vector<const Row*> rows_;
  Layout layout_;
  TempDir dir_;
  std::unique_ptr<RedisServer> source_, plain_target_;
  std::unique_ptr<FakeTimeRedis> skewed_target_;
  RedisServer* target_ = nullptr;  // one of the two above
  std::unique_ptr<AgentProcess> agent_;
  std::string config_;
  int agent_starts_ = 0;
  int syncs_ = 0;
  std::map<int, RespClient> src_clients_, dst_clients_;
  std::map<int, int64_t> now_;
  std::map<int, std::string> traces_;
  std::map<int, std::string> setup_failed_;
};

void runGroup(const Group& group) {
  std::vector<const Row*> rows;
  for (int v : group.vectors) {
    rows.push_back(&rowOf(v));
  }
  GroupRun run(group, rows);
  ASSERT_TRUE(run.startAgent());
  run.runAll();
  EXPECT_TRUE(run.stopAgent());
}

// ---------------------------------------------------------------------------------------------
// The groups.

// Rules 3–4 (the clamp) under default filters, and rule 5's FLUSHALL (run last: it empties the
// source).
TEST(Vectors, ClampRulesAndFlush) {
  runGroup(
      {.name = "clamp", .vectors = {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 14, 15, 16, 17, 18, 23}});
}

// strip_ttl (10, 11) and drop_deletions (21) share an agent: strip_ttl does not touch deletions
// (§6), and rows 10 and 11 delete nothing.
TEST(Vectors, StripTtlAndDropDeletions) {
  runGroup({.name = "strip-ttl+drop-deletions",
            .vectors = {10, 11, 21},
            .filters = "{strip_ttl: true, drop_deletions: true}"});
}

// drop_expirations and the expiration/deletion classification (19, 20, 22); the source's active
// expiry is off so that an expiry DEL comes exactly when the test touches the key.
TEST(Vectors, DropExpirations) {
  runGroup({.name = "drop-expirations",
            .vectors = {19, 20, 22},
            .filters = "{drop_expirations: true}",
            .active_expiry_off = true});
}

// Clock skew (§7): the target's redis-server runs 30 s ahead (libfaketime), so the agent
// measures Δ = target − source = +30 s.
TEST(Vectors, SkewCompensate) {
  runGroup({.name = "skew-compensate",
            .vectors = {24, 26},
            .on_skew = "compensate",
            .skew_ms = kSkewMs});
}

TEST(Vectors, SkewWarn) {
  runGroup({.name = "skew-warn", .vectors = {25}, .on_skew = "warn", .skew_ms = kSkewMs});
}

// §3: a changed max_ttl acts only at a document's next mutation. With C = 60 s, k gets its own
// now+50s and k2 now+60s; the agent stops, the config says C = 10 s, the agent resumes (partial
// resync): both keep their deadlines until k2 is written again, which gives k2 now+10s.
TEST(Vectors, MaxTtlChangeActsAtTheNextMutation) {
  // A row of its own (not in §9, numbered 0), B = 0, C = 60 s; its keys are v0:k and v0:k2.
  const Row change_row = row(0, 0, 60, "max_ttl change", {}, {});
  GroupRun run({.name = "max-ttl-change"}, {&change_row});
  ASSERT_TRUE(run.startAgent());
  RedisServer& source = run.sourceServer();
  RespClient src = source.client();
  auto key = [](const std::string& name) { return prefixOf(0) + name; };

  const int64_t t_k = unixTimeMs();
  ASSERT_EQ(
      src.command({"SET", key("k"), "v", "PXAT", std::to_string(t_k + 50 * kSecondMs)}).toString(),
      "OK");
  const int64_t t_k2 = unixTimeMs();
  ASSERT_EQ(src.command({"SET", key("k2"), "v"}).toString(), "OK");
  ASSERT_TRUE(run.sync());
  const KeyExpect k_expect = stringKey("$k", "v", nowPlusSeconds(50));
  const KeyExpect k2_expect = stringKey("$k2", "v", nowPlusSeconds(60));
  auto report = [](const std::string& what, const std::string& failures) {
    if (failures.empty()) {
      std::cout << what << ": ok" << std::endl;
    } else {
      std::cout << what << ": FAILED (expected/actual below)" << std::endl;
      ADD_FAILURE() << what << "\n" << failures;
    }
  };
  report("max_ttl change, before (C=60s)",
         run.checkKey(0, k_expect, t_k) + run.checkKey(0, k2_expect, t_k2));

  ASSERT_TRUE(run.stopAgent());
  Layout changed = run.layout();
  changed.buckets.at(0).collections.at(0).max_ttl_s = 10;
  run.writeConfig(changed);
  const int64_t full_before = infoInt(src, "stats", "sync_full");
  const int64_t partial_before = infoInt(src, "stats", "sync_partial_ok");
  ASSERT_TRUE(run.startAgent());
  ASSERT_TRUE(run.sync());
  EXPECT_EQ(infoInt(src, "stats", "sync_full"), full_before) << "the restart full-synced";
  EXPECT_EQ(infoInt(src, "stats", "sync_partial_ok"), partial_before + 1)
      << "the restart did not resume by partial resync";
  report("max_ttl change, after the restart with C=10s (no new write)",
         run.checkKey(0, k_expect, t_k) + run.checkKey(0, k2_expect, t_k2));

  const int64_t t_k2_again = unixTimeMs();
  ASSERT_EQ(src.command({"SET", key("k2"), "v2"}).toString(), "OK");
  ASSERT_TRUE(run.sync());
  report("max_ttl change, after SET k2 v2 (C=10s)",
         run.checkKey(0, k_expect, t_k) +
             run.checkKey(0, stringKey("$k2", "v2", nowPlusSeconds(10)), t_k2_again));
  EXPECT_TRUE(run.stopAgent());
}

}  // namespace
}  // namespace xdcr::test
