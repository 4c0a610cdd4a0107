// End-to-end foundation test of xdcr-agent: a real source redis-server, a real target
// redis-server and the agent between them (it attaches to the source as a replica via PSYNC and
// writes RESP to the target).
//
// What it shows (expiry-semantics.md §4 and §9 vectors 1–9, 12–16):
//   A. Every key written to the source arrives on the target with the same value and with the
//      deadline that rule 4 ("the clamp") gives it under the target's maxTTL, compared as an
//      absolute deadline (PEXPIRETIME, never PTTL).
//   B. After SIGTERM the agent exits 0 with a checkpoint in state_dir, and a restart resumes with
//      a partial resync (PSYNC +CONTINUE, no full sync), carrying on with the same results.
//
// The expected deadlines come from a model of the rules written here, independently of the agent's
// code: the test states the spec a second time instead of trusting the implementation's reading.

#include <fnmatch.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
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

constexpr int64_t kMsPerSecond = 1000;
// How far a target deadline may be from the model's. It absorbs the replication lag between the
// test's write to the source and the agent's write to the target (rule 4 uses the target's clock
// at the agent's write) and the few ms a pipelined batch takes on the source.
constexpr int64_t kToleranceMs = 1000;
constexpr auto kConvergeTimeout = 60s;
constexpr auto kAttachTimeout = 30s;
constexpr auto kTerminateTimeout = 30s;
// Vector 16 needs the second write far enough after the first that "deadline untouched" and
// "deadline extended to now+M" differ by more than the tolerance.
constexpr auto kVector16Gap = 3s;
// Batch size for writes to the source: small enough that one timestamp per batch is a good
// estimate of every command's execution time in it.
constexpr size_t kFlushEvery = 400;
constexpr size_t kMaxReportedMismatches = 10;

// ---------------------------------------------------------------------------------------------
// The target's maxTTL configuration (expiry-semantics.md §3). The agent's YAML is generated from
// this table and the model reads the same table, so the two cannot disagree about the config.

const std::vector<BucketSpec>& targetBuckets() {
  static const std::vector<BucketSpec> kBuckets = {
      // B = 600 s: vectors 2-7; c1000 is a collection maxTTL above the bucket's (vector 9's rule);
      // c0 has max_ttl 0, which inherits the bucket's 600 s (it does not mean "unlimited").
      {0, 600, {{"c60", "c60:*", 60}, {"c1000", "c1000:*", 1000}, {"c0", "c0:*", 0}}},
      // B = 0: no clamp in the default collection (vectors 1, 12, 14); s60 gives vectors 13,
      // 15, 16; s1000 vector 8. Keys named c60:* here are in the default collection: patterns
      // belong to their bucket.
      {1, 0, {{"s60", "s60:*", 60}, {"s1000", "s1000:*", 1000}}},
      // Vector 9 exactly: B = 60 s, C = 1000 s.
      {2, 60, {{"big", "big:*", 1000}}},
  };
  return kBuckets;
}

std::string agentConfigYaml(const std::string& state_dir, uint16_t source_port,
                            uint16_t target_port) {
  return pipelineConfigYaml(state_dir, source_port, target_port, targetBuckets());
}

// ---------------------------------------------------------------------------------------------
// The model of expiry-semantics.md §3–§4.

MaxTtlOf maxTtlOf(int db, const std::string& key) {
  return test::maxTtlOf(targetBuckets(), db, key);
}

/** The last write that set a key's target deadline: specClamp(e, m, now) for a `now` in a
 * window. The clamp is non-decreasing in `now`, so the window's ends bound the deadline. */
struct TargetWrite {
  int64_t e = 0;
  int64_t m = 0;
  int64_t now_lo = 0;
  // The write was held in the source's backlog while the agent was stopped: the target's `now`
  // is some time after the restart and before the test reads the key.
  bool now_until_read = false;
  // Written while the agent is down; now_lo is set when the agent restarts.
  bool held = false;
};

struct KeyModel {
  int db = 0;
  std::string key;
  bool is_hash = false;
  std::string value;
  std::map<std::string, std::string> fields;
  int64_t source_deadline = 0;  // the source's current deadline for the key (0 = none)
  TargetWrite target;
  std::string history;    // the commands written, for failure messages
  std::set<int> vectors;  // the spec vectors (§9) this key exercises
};

enum class OpType { Set, SetEx, SetPx, Expire, PexpireAt, Persist, Hset };

struct Op {
  OpType type = OpType::Set;
  std::string key;
  std::string a;  // SET*: value; HSET: field
  std::string b;  // HSET: value
  int64_t n = 0;  // EX: seconds; PX: ms; EXPIRE: seconds; PEXPIREAT: absolute ms
};

Op setOp(std::string key, std::string value) {
  return {OpType::Set, std::move(key), std::move(value), "", 0};
}
Op setExOp(std::string key, std::string value, int64_t seconds) {
  return {OpType::SetEx, std::move(key), std::move(value), "", seconds};
}
Op setPxOp(std::string key, std::string value, int64_t ms) {
  return {OpType::SetPx, std::move(key), std::move(value), "", ms};
}
Op expireOp(std::string key, int64_t seconds) {
  return {OpType::Expire, std::move(key), "", "", seconds};
}
Op pexpireAtOp(std::string key, int64_t deadline_ms) {
  return {OpType::PexpireAt, std::move(key), "", "", deadline_ms};
}
Op persistOp(std::string key) {
  return {OpType::Persist, std::move(key), "", "", 0};
}
Op hsetOp(std::string key, std::string field, std::string value) {
  return {OpType::Hset, std::move(key), std::move(field), std::move(value), 0};
}

RespCommand commandOf(const Op& op) {
  switch (op.type) {
    case OpType::Set:
      return {"SET", op.key, op.a};
    case OpType::SetEx:
      return {"SET", op.key, op.a, "EX", std::to_string(op.n)};
    case OpType::SetPx:
      return {"SET", op.key, op.a, "PX", std::to_string(op.n)};
    case OpType::Expire:
      return {"EXPIRE", op.key, std::to_string(op.n)};
    case OpType::PexpireAt:
      return {"PEXPIREAT", op.key, std::to_string(op.n)};
    case OpType::Persist:
      return {"PERSIST", op.key};
    case OpType::Hset:
      return {"HSET", op.key, op.a, op.b};
  }
  return {};
}

std::string describeOp(const Op& op) {
  switch (op.type) {
    case OpType::Set:
      return "SET";
    case OpType::SetEx:
      return "SET EX " + std::to_string(op.n);
    case OpType::SetPx:
      return "SET PX " + std::to_string(op.n);
    case OpType::Expire:
      return "EXPIRE " + std::to_string(op.n);
    case OpType::PexpireAt:
      return "PEXPIREAT " + std::to_string(op.n);
    case OpType::Persist:
      return "PERSIST";
    case OpType::Hset:
      return "HSET " + op.a;
  }
  return "?";
}

/** Checks a source reply: every command must have taken effect, or nothing was propagated and
 * the model would expect a write that never reached the stream. */
bool replyTookEffect(const Op& op, const RespValue& reply) {
  if (reply.isError()) {
    return false;
  }
  switch (op.type) {
    case OpType::Set:
    case OpType::SetEx:
    case OpType::SetPx:
      return reply.type() == RespValue::Type::SimpleString && reply.str() == "OK";
    case OpType::Expire:
    case OpType::PexpireAt:
    case OpType::Persist:
      return reply.isInteger() && reply.integer() == 1;
    case OpType::Hset:
      return reply.isInteger();
  }
  return false;
}

/**
 * Writes commands to the source in pipelined batches and keeps the model of what the target must
 * hold. One timestamp per batch, taken when its replies are in: the source executed the batch
 * just before it, and the agent writes it to the target just after.
 */
class Workload {
 public:
  explicit Workload(RedisServer& source) : source_(source) {}

  void add(int db, Op op, const std::set<int>& vectors = {}) {
    auto& model = keys_[{db, op.key}];
    model.vectors.insert(vectors.begin(), vectors.end());
    queue_.push_back({db, std::move(op)});
    if (queue_.size() >= kFlushEvery) {
      flush();
    }
  }

  /** Sends everything queued; throws if the source rejects or ignores a command. */
  void flush() {
    if (queue_.empty()) {
      return;
    }
    std::map<int, std::vector<size_t>> by_db;
    for (size_t i = 0; i < queue_.size(); ++i) {
      by_db[queue_[i].first].push_back(i);
    }
    for (const auto& [db, indexes] : by_db) {
      std::vector<RespCommand> commands;
      for (size_t i : indexes) {
        commands.push_back(commandOf(queue_[i].second));
      }
      auto replies = clientFor(db).pipeline(commands);
      for (size_t j = 0; j < indexes.size(); ++j) {
        const Op& op = queue_[indexes[j]].second;
        if (!replyTookEffect(op, replies[j])) {
          throw std::runtime_error("source db " + std::to_string(db) + ": " + describeOp(op) + " " +
                                   op.key + " answered " + replies[j].toString());
        }
      }
    }
    const int64_t now = unixTimeMs();
    for (const auto& [db, op] : queue_) {
      apply(db, op, now);
    }
    queue_.clear();
    last_flush_ms_ = now;
  }

  /** Writes from now on stay in the source's backlog until the agent is started again. */
  void setAgentDown(bool down) { agent_down_ = down; }

  /** The agent was started at `t`: every held write reaches the target between `t` and a read. */
  void agentRestarted(int64_t t) {
    for (auto& [id, model] : keys_) {
      if (model.target.held) {
        model.target.held = false;
        model.target.now_lo = t;
        model.target.now_until_read = true;
      }
    }
    agent_down_ = false;
  }

  const std::map<std::pair<int, std::string>, KeyModel>& keys() const { return keys_; }
  int64_t lastFlushMs() const { return last_flush_ms_; }

 private:
  RespClient& clientFor(int db) {
    auto it = clients_.find(db);
    if (it == clients_.end()) {
      RespClient client = source_.client();
      client.select(db);
      it = clients_.emplace(db, std::move(client)).first;
    }
    return it->second;
  }

  /** The model's reading of one command (expiry-semantics.md §4 table). */
  void apply(int db, const Op& op, int64_t now) {
    KeyModel& k = keys_[{db, op.key}];
    k.db = db;
    k.key = op.key;
    k.history += (k.history.empty() ? "" : "; ") + describeOp(op);
    const int64_t m = maxTtlOf(db, op.key).effectiveMs();
    // The deadline the agent computes for this write: rule 4 with E and the target's `now`.
    auto setTarget = [&](int64_t e) {
      k.target = TargetWrite{e, m, now, /*now_until_read=*/false, /*held=*/agent_down_};
    };
    switch (op.type) {
      case OpType::Set:  // E = 0: now+M if M > 0, else none
        k.is_hash = false;
        k.value = op.a;
        k.fields.clear();
        k.source_deadline = 0;
        setTarget(0);
        break;
      case OpType::SetEx:  // on the stream: SET k v PXAT <source now + n s>
        k.is_hash = false;
        k.value = op.a;
        k.fields.clear();
        k.source_deadline = now + op.n * kMsPerSecond;
        setTarget(k.source_deadline);
        break;
      case OpType::SetPx:  // on the stream: SET k v PXAT <source now + n ms>
        k.is_hash = false;
        k.value = op.a;
        k.fields.clear();
        k.source_deadline = now + op.n;
        setTarget(k.source_deadline);
        break;
      case OpType::Expire:  // on the stream: PEXPIREAT k <source now + n s>
        k.source_deadline = now + op.n * kMsPerSecond;
        setTarget(k.source_deadline);
        break;
      case OpType::PexpireAt:
        k.source_deadline = op.n;
        setTarget(k.source_deadline);
        break;
      case OpType::Persist:  // E = 0: now+M if M > 0 (never persistent under a maxTTL), else none
        k.source_deadline = 0;
        setTarget(0);
        break;
      case OpType::Hset:  // in-place write: E = the key's current source deadline
        if (!k.is_hash) {
          k.is_hash = true;
          k.value.clear();
        }
        k.fields[op.a] = op.b;
        if (m > 0) {
          setTarget(k.source_deadline);
        }
        // M == 0: forwarded, the target's deadline untouched (a new key has none).
        break;
    }
  }

  RedisServer& source_;
  std::map<int, RespClient> clients_;
  std::vector<std::pair<int, Op>> queue_;
  std::map<std::pair<int, std::string>, KeyModel> keys_;
  bool agent_down_ = false;
  int64_t last_flush_ms_ = 0;
};

// ---------------------------------------------------------------------------------------------
// The data set: a deterministic mix across buckets and collections.

struct Scope {
  int db;
  const char* prefix;
};

constexpr Scope kScopes[] = {
    {0, "c60:"}, {0, "c1000:"}, {0, "c0:"}, {0, "d:"},    // B=600: C=60, 1000, 0 (inherit), default
    {1, "s60:"}, {1, "s1000:"}, {1, "d:"},  {1, "c60:"},  // B=0:   C=60, 1000, default, default
    {2, "big:"}, {2, "d:"},                               // B=60:  C=1000, default
};
constexpr int kScopeCount = sizeof(kScopes) / sizeof(kScopes[0]);

enum Recipe {
  kSetPlain,          // SET k v
  kSetEx,             // SET k v EX n
  kSetPx,             // SET k v PX n
  kSetThenExpire,     // SET k v; EXPIRE k n
  kSetExThenPersist,  // SET k v EX n; PERSIST k
  kHsetPlain,         // HSET k f v (no source deadline)
  kHsetWithTtl,       // HSET k f1 v; EXPIRE k n; HSET k f2 v (in-place write under a deadline)
  kSetThenPexpireAt,  // SET k v; PEXPIREAT k <now + n>
  kHsetTwice,         // HSET k f1 v; ≥3 s later HSET k f2 v (vector 16)
  kRecipeCount,
};

// TTLs in seconds, all at least 40 s so no key expires while a test runs, and none within 7 s of
// a maxTTL (60, 600, 1000), so "below" and "above" M are clear-cut.
constexpr int64_t kTtls[] = {40, 50, 300, 500, 900, 1500, 3000};
constexpr int kTtlCount = sizeof(kTtls) / sizeof(kTtls[0]);

/** The §9 vectors a (scope, recipe, ttl) combination exercises. */
std::set<int> vectorsOf(const std::string& key, int db, Recipe recipe, int64_t ttl) {
  const MaxTtlOf mt = maxTtlOf(db, key);
  const int64_t b = mt.bucket_s;
  const int64_t c = mt.collection_s;
  std::set<int> v;
  switch (recipe) {
    case kSetPlain:
      if (b == 0 && c == 0) v.insert(1);
      if (b == 600 && c == 0) v.insert(2);
      if (b == 600 && c == 60) v.insert(3);
      break;
    case kSetEx:
    case kSetPx:
      if (b == 600 && c == 60) v.insert(ttl < 60 ? 4 : 5);
      if (b == 600 && c == 0) v.insert(ttl < 600 ? 6 : 7);
      if (b == 0 && c == 1000 && ttl < 1000) v.insert(8);
      if (b > 0 && c == 1000 && ttl > b && ttl < 1000) v.insert(9);
      break;
    case kSetThenExpire:
    case kSetThenPexpireAt:
      if (b == 0 && c == 0) v.insert(12);
      break;
    case kSetExThenPersist:
      if (b == 0 && c == 60) v.insert(13);
      if (b == 0 && c == 0) v.insert(14);
      break;
    case kHsetWithTtl:
      if (b == 0 && c == 60 && ttl > 60) v.insert(15);
      break;
    case kHsetTwice:
      if (b == 0 && c == 60) v.insert(16);
      break;
    default:
      break;
  }
  return v;
}

struct KeyRef {
  int db;
  std::string key;
};

/**
 * Queues `count` keys named <prefix><tag>:<i>. Keys of recipe kHsetTwice get only their first
 * HSET here; they are returned in `second_hset` for the caller to write later.
 */
void writeMix(Workload& w, const std::string& tag, int count, std::vector<KeyRef>* second_hset) {
  for (int i = 0; i < count; ++i) {
    const Scope& scope = kScopes[i % kScopeCount];
    const auto recipe = static_cast<Recipe>((i / kScopeCount) % kRecipeCount);
    const int64_t ttl = kTtls[(i / (kScopeCount * kRecipeCount)) % kTtlCount] + i % 7;
    char number[16];
    std::snprintf(number, sizeof(number), "%06d", i);
    const std::string key = std::string(scope.prefix) + tag + ":" + number;
    const std::string value = "v-" + tag + "-" + number;
    const int db = scope.db;
    const std::set<int> vectors = vectorsOf(key, db, recipe, ttl);
    switch (recipe) {
      case kSetPlain:
        w.add(db, setOp(key, value), vectors);
        break;
      case kSetEx:
        w.add(db, setExOp(key, value, ttl), vectors);
        break;
      case kSetPx:
        w.add(db, setPxOp(key, value, ttl * kMsPerSecond + 37 * (i % 10)), vectors);
        break;
      case kSetThenExpire:
        w.add(db, setOp(key, value), vectors);
        w.add(db, expireOp(key, ttl));
        break;
      case kSetExThenPersist:
        w.add(db, setExOp(key, value, ttl), vectors);
        w.add(db, persistOp(key));
        break;
      case kHsetPlain:
        w.add(db, hsetOp(key, "f1", value), vectors);
        break;
      case kHsetWithTtl:
        w.add(db, hsetOp(key, "f1", value), vectors);
        w.add(db, expireOp(key, ttl));
        w.add(db, hsetOp(key, "f2", value + "-2"));
        break;
      case kSetThenPexpireAt:
        w.add(db, setOp(key, value), vectors);
        w.add(db, pexpireAtOp(key, unixTimeMs() + ttl * kMsPerSecond));
        break;
      case kHsetTwice:
        w.add(db, hsetOp(key, "f1", value), vectors);
        second_hset->push_back({db, key});
        break;
      default:
        break;
    }
  }
  w.flush();
}

void writeSecondHsets(Workload& w, const std::vector<KeyRef>& keys) {
  for (const auto& ref : keys) {
    w.add(ref.db, hsetOp(ref.key, "f2", "second"));
  }
  w.flush();
}

/** Fails the test unless every vector the test is meant to cover is hit at least `min` times. */
void expectVectorCoverage(const Workload& w, int min) {
  std::map<int, int> counts;
  for (const auto& [id, k] : w.keys()) {
    for (int v : k.vectors) {
      ++counts[v];
    }
  }
  std::ostringstream summary;
  for (int v : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 14, 15, 16}) {
    summary << " v" << v << "=" << counts[v];
    EXPECT_GE(counts[v], min) << "spec vector " << v << " is not exercised enough";
  }
  std::cout << "[ vectors  ]" << summary.str() << "\n";
}

// ---------------------------------------------------------------------------------------------
// Comparing the target with the model.

std::string relative(int64_t deadline, int64_t now) {
  if (deadline == 0) {
    return "none";
  }
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(1);
  out << "now" << (deadline >= now ? "+" : "") << static_cast<double>(deadline - now) / 1000.0
      << "s (" << deadline << ")";
  return out.str();
}

std::string describeValue(const KeyModel& k) {
  if (!k.is_hash) {
    return "\"" + k.value + "\"";
  }
  std::string out = "{";
  for (const auto& [f, v] : k.fields) {
    out += (out.size() > 1 ? ", " : "") + f + ": " + v;
  }
  return out + "}";
}

struct VerifyReport {
  bool ok = false;
  size_t keys = 0;
  size_t mismatches = 0;
  std::string summary;  // DBSIZE per db, counts
  std::string details;  // the first mismatching keys

  std::string text() const { return summary + details; }
};

/**
 * Reads every modelled key from the target (value and PEXPIRETIME, pipelined) and compares.
 * A key whose expected deadline has passed may be gone (the target or a source DEL removed it);
 * in a normal run no deadline is that close, and every key must be there.
 */
VerifyReport verifyTarget(RedisServer& source, RedisServer& target, const Workload& w) {
  VerifyReport report;
  std::map<int, std::vector<const KeyModel*>> by_db;
  for (const auto& [id, k] : w.keys()) {
    by_db[k.db].push_back(&k);
  }
  RespClient src = source.client();
  RespClient dst = target.client();
  std::ostringstream summary;
  std::ostringstream details;
  bool ok = true;
  for (const auto& [db, keys] : by_db) {
    src.select(db);
    dst.select(db);
    std::vector<RespCommand> reads;
    for (const KeyModel* k : keys) {
      reads.push_back(k->is_hash ? RespCommand{"HGETALL", k->key} : RespCommand{"GET", k->key});
      reads.push_back({"PEXPIRETIME", k->key});
    }
    const int64_t target_dbsize = dataDbSize(dst);
    const auto replies = dst.pipeline(reads);
    const int64_t read_end = unixTimeMs();
    const int64_t source_dbsize = src.command({"DBSIZE"}).integer();

    size_t surely_present = 0;
    for (size_t i = 0; i < keys.size(); ++i) {
      const KeyModel& k = *keys[i];
      ++report.keys;
      const RespValue& value = replies[2 * i];
      const RespValue& pexpiretime = replies[2 * i + 1];
      const TargetWrite& t = k.target;
      const int64_t now_hi = t.now_until_read ? read_end : t.now_lo;
      const int64_t lo = specClamp(t.e, t.m, t.now_lo);
      const int64_t hi = specClamp(t.e, t.m, now_hi);
      const bool expect_none = lo == 0;
      const bool may_be_gone = !expect_none && lo - kToleranceMs <= read_end;
      if (!may_be_gone) {
        ++surely_present;
      }

      std::string problem;
      if (!pexpiretime.isInteger()) {
        problem = "PEXPIRETIME answered " + pexpiretime.toString();
      } else if (pexpiretime.integer() == -2) {
        if (!may_be_gone) {
          problem = "missing on the target";
        }
      } else {
        // The value.
        if (k.is_hash) {
          std::map<std::string, std::string> actual;
          if (value.isArray() && value.array().size() % 2 == 0) {
            const auto& items = value.array();
            for (size_t j = 0; j + 1 < items.size(); j += 2) {
              actual[items[j].str()] = items[j + 1].str();
            }
          }
          if (!value.isArray() || actual != k.fields) {
            problem = "value " + value.toString() + ", expected " + describeValue(k);
          }
        } else if (value.type() != RespValue::Type::Bulk || value.str() != k.value) {
          problem = "value " + value.toString() + ", expected " + describeValue(k);
        }
        // The deadline, absolute on both sides.
        const int64_t actual = pexpiretime.integer();
        std::string deadline_problem;
        if (expect_none) {
          if (actual != -1) {
            deadline_problem = "deadline " + relative(actual, read_end) + ", expected none";
          }
        } else if (actual == -1 || actual < lo - kToleranceMs || actual > hi + kToleranceMs) {
          deadline_problem = "deadline " +
                             (actual == -1 ? std::string("none") : relative(actual, read_end)) +
                             ", expected " + relative(lo, read_end) +
                             (hi != lo ? " .. " + relative(hi, read_end) : std::string()) + " ±" +
                             std::to_string(kToleranceMs) + "ms";
        }
        if (!deadline_problem.empty()) {
          problem += (problem.empty() ? "" : "; ") + deadline_problem;
        }
      }
      if (!problem.empty()) {
        ok = false;
        if (report.mismatches++ < kMaxReportedMismatches) {
          const MaxTtlOf mt = maxTtlOf(k.db, k.key);
          details << "  db" << k.db << " " << k.key << " [" << k.history << "; collection "
                  << mt.collection << " B=" << mt.bucket_s << "s C=" << mt.collection_s
                  << "s M=" << mt.effectiveMs() / kMsPerSecond << "s";
          for (int v : k.vectors) {
            details << " v" << v;
          }
          details << "]: " << problem << "\n";
        }
      }
    }

    // DBSIZE: exactly the modelled keys (which are exactly the source's while nothing expired),
    // so nothing is missing and nothing extra is on the target.
    const int64_t expected = static_cast<int64_t>(keys.size());
    bool dbsize_ok;
    if (surely_present == keys.size()) {
      dbsize_ok = target_dbsize == expected && source_dbsize == expected;
    } else {
      // Some deadlines are due (a slow run): logically expired keys may still be counted.
      dbsize_ok =
          target_dbsize >= static_cast<int64_t>(surely_present) && target_dbsize <= expected;
    }
    ok = ok && dbsize_ok;
    summary << "  db" << db << ": target DBSIZE " << target_dbsize << ", source DBSIZE "
            << source_dbsize << ", expected " << expected;
    if (surely_present != keys.size()) {
      summary << " (" << keys.size() - surely_present << " may have expired)";
    }
    summary << (dbsize_ok ? "" : "  <-- mismatch") << "\n";
  }
  summary << "  " << report.keys << " keys checked, " << report.mismatches << " mismatching"
          << (report.mismatches > kMaxReportedMismatches ? " (first ones below)" : "") << "\n";
  report.ok = ok;
  report.summary = summary.str();
  report.details = details.str();
  return report;
}

// ---------------------------------------------------------------------------------------------

class FoundationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::make_unique<TempDir>("xdcr-foundation");
    // No delay before the full sync's RDB (the agent attaches to an empty source), and a backlog
    // large enough that the writes made while the agent is stopped stay resumable.
    source_ = std::make_unique<RedisServer>(
        std::vector<std::string>{"--repl-diskless-sync-delay", "0", "--repl-backlog-size", "64mb"});
    target_ = std::make_unique<RedisServer>();
    state_dir_ = dir_->file("state");
    config_path_ = dir_->file("xdcr.yaml");
    writeFileText(config_path_, agentConfigYaml(state_dir_, source_->port(), target_->port()));
    // The agent first, so every key reaches it through the replication stream.
    ASSERT_NO_FATAL_FAILURE(startAgent("agent-1.log"));
  }

  void TearDown() override {
    if (HasFailure()) {
      std::cerr << "---- config " << config_path_ << "\n" << readFileText(config_path_);
      if (agent_) {
        std::cerr << "---- agent " << agent_->describeState() << ", log " << agent_->logPath()
                  << " (tail)\n"
                  << agent_->logTail(80) << "\n";
      }
      // A server that failed to start is null here; its exception already carries its log.
      if (source_) {
        std::cerr << "---- source redis " << source_->address() << " (tail)\n"
                  << source_->logTail(20) << "\n";
      }
      if (target_) {
        std::cerr << "---- target redis " << target_->address() << " (tail)\n"
                  << target_->logTail(20) << "\n";
      }
    }
    agent_.reset();
    target_.reset();
    source_.reset();
    dir_.reset();
  }

  void startAgent(const std::string& log_name) {
    agent_ = std::make_unique<AgentProcess>(config_path_, dir_->file(log_name));
    ASSERT_NO_FATAL_FAILURE(waitForAgentOnline());
  }

  /** Until the source lists exactly one replica, the agent, in state=online. */
  void waitForAgentOnline() {
    RespClient source = source_->client();
    std::string last;
    const bool online = waitUntil(
        [&] {
          if (!agent_->running()) {
            return true;  // reported below
          }
          auto info = source.info("replication");
          auto replicas = replicasOf(info);
          last = "connected_slaves:" + info["connected_slaves"];
          for (const auto& r : replicas) {
            last += ", " + r.name + " state=" + r.state + " offset=" + std::to_string(r.offset);
          }
          return info["connected_slaves"] == "1" && replicas.size() == 1 &&
                 replicas[0].state == "online";
        },
        kAttachTimeout, 100ms);
    ASSERT_TRUE(agent_->running())
        << "the agent ended before attaching to the source: " << agent_->describeState()
        << "\nagent log:\n"
        << agent_->logTail(40);
    ASSERT_TRUE(online) << "the agent did not come online as a replica of the source within "
                        << std::chrono::duration_cast<std::chrono::seconds>(kAttachTimeout).count()
                        << " s; source INFO replication: " << last;
  }

  /** Waits (bounded) until the target matches the model; fails with the last report if not. */
  void expectConverged(const Workload& w, const std::string& what) {
    VerifyReport report;
    int rounds = 0;
    const auto start = std::chrono::steady_clock::now();
    const bool converged = waitUntil(
        [&] {
          ++rounds;
          report = verifyTarget(*source_, *target_, w);
          return report.ok;
        },
        kConvergeTimeout, 500ms);
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - start);
    if (converged) {
      std::cout << "[ converged] " << what << " after " << took.count() << " ms (" << rounds
                << " rounds)\n"
                << report.summary;
    }
    ASSERT_TRUE(converged)
        << what << ": the target did not converge within "
        << std::chrono::duration_cast<std::chrono::seconds>(kConvergeTimeout).count()
        << " s (agent " << agent_->describeState() << ")\n"
        << report.text();
  }

  int64_t sourceStat(const std::string& name) {
    auto stats = source_->client().info("stats");
    auto it = stats.find(name);
    if (it == stats.end()) {
      ADD_FAILURE() << "INFO stats has no " << name;
      return -1;
    }
    return std::stoll(it->second);
  }

  /** Writes the mix, then (after the vector-16 gap) the second HSETs. */
  void writeFullMix(Workload& w, const std::string& tag, int count) {
    std::vector<KeyRef> second;
    writeMix(w, tag, count, &second);
    // The first HSETs are all written by now; wait the gap after the last of them.
    const int64_t wait_until = w.lastFlushMs() + std::chrono::milliseconds(kVector16Gap).count();
    while (unixTimeMs() < wait_until) {
      std::this_thread::sleep_for(50ms);
    }
    writeSecondHsets(w, second);
  }

  std::unique_ptr<TempDir> dir_;
  std::unique_ptr<RedisServer> source_;
  std::unique_ptr<RedisServer> target_;
  std::unique_ptr<AgentProcess> agent_;
  std::string state_dir_;
  std::string config_path_;
};

// A: 10,000 keys through the stream; every value and every clamped absolute deadline on the
// target as the model of rule 4 says.
TEST_F(FoundationTest, ReplicatesValuesAndClampedAbsoluteDeadlines) {
  Workload w(*source_);
  ASSERT_NO_THROW(writeFullMix(w, "a", 10000));
  ASSERT_EQ(w.keys().size(), 10000u);
  expectVectorCoverage(w, 10);

  ASSERT_NO_FATAL_FAILURE(expectConverged(w, "10,000 keys"));

  // Deadlines are absolute instants: read again later, they are the same instants (a relative TTL
  // re-applied, or a deadline rewritten after the fact, would move them).
  std::this_thread::sleep_for(2s);
  VerifyReport again = verifyTarget(*source_, *target_, w);
  EXPECT_TRUE(again.ok) << "2 s after convergence the target no longer matches:\n" << again.text();
}

// B: SIGTERM → exit 0 with a checkpoint; writes made while the agent is down; the restart resumes
// with one partial resync (no full sync) and the target matches for old and new keys, including
// in-place writes to old keys whose source deadline the agent must remember across the restart.
TEST_F(FoundationTest, ResumesWithPartialResyncAfterSigterm) {
  Workload w(*source_);
  ASSERT_NO_THROW(writeFullMix(w, "a", 2000));
  ASSERT_NO_FATAL_FAILURE(expectConverged(w, "2,000 keys before the restart"));

  const ExitStatus status = agent_->terminate(kTerminateTimeout);
  ASSERT_TRUE(status.success())
      << "after SIGTERM the agent " << status.describe()
      << " (expected a clean exit with status 0 within "
      << std::chrono::duration_cast<std::chrono::seconds>(kTerminateTimeout).count() << " s)";

  std::vector<std::string> state_files;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(state_dir_, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file() && it->file_size() > 0) {
      state_files.push_back(it->path().string());
    }
  }
  ASSERT_FALSE(state_files.empty()) << "no checkpoint file under state_dir " << state_dir_;
  // The full sync's end wrote a whole image (.ckpt); the checkpoints of the stream after it,
  // the SIGTERM's included, are journal records (.journal): the restart below needs both.
  auto has_suffix = [&](const std::string& suffix) {
    return std::any_of(state_files.begin(), state_files.end(), [&](const std::string& f) {
      return f.size() > suffix.size() &&
             f.compare(f.size() - suffix.size(), suffix.size(), suffix) == 0;
    });
  };
  EXPECT_TRUE(has_suffix(".ckpt")) << "no whole-image checkpoint under " << state_dir_;
  EXPECT_TRUE(has_suffix(".journal")) << "no checkpoint journal under " << state_dir_;
  std::cout << "[ state    ] " << state_files.size() << " file(s) under state_dir, e.g. "
            << state_files.front() << "\n";

  // The source must have noticed the replica is gone before the stats are read.
  RespClient source = source_->client();
  ASSERT_TRUE(
      waitUntil([&] { return source.info("replication")["connected_slaves"] == "0"; }, 10s, 50ms))
      << "the source still lists a replica after the agent exited";
  const int64_t full_before = sourceStat("sync_full");
  const int64_t partial_before = sourceStat("sync_partial_ok");

  // Writes while the agent is down: 1,000 new keys, and in-place writes / expiry changes on old
  // keys (the in-place HSETs need the source deadline the agent learned before the restart).
  w.setAgentDown(true);
  // The new keys' second HSETs follow at once: both reach the target only after the restart,
  // where the second one sets now+M at the agent's write like any other held write.
  std::vector<KeyRef> second;
  ASSERT_NO_THROW(writeMix(w, "b", 1000, &second));
  ASSERT_NO_THROW(writeSecondHsets(w, second));
  const int64_t now = unixTimeMs();
  std::vector<std::pair<int, Op>> old_key_ops;
  int i = 0;
  for (const auto& [id, k] : w.keys()) {
    // Old keys only (tag "a"), every fifth, and none whose source deadline is near.
    if (k.key.find(":a:") == std::string::npos || i++ % 5 != 0 ||
        (k.source_deadline != 0 && k.source_deadline < now + 30 * kMsPerSecond)) {
      continue;
    }
    if (k.is_hash) {
      old_key_ops.push_back({k.db, hsetOp(k.key, "f3", "after-restart")});
    } else if (k.source_deadline != 0) {
      old_key_ops.push_back({k.db, persistOp(k.key)});
    } else {
      old_key_ops.push_back({k.db, expireOp(k.key, 700 + i % 7)});
    }
  }
  for (auto& [db, op] : old_key_ops) {
    w.add(db, std::move(op));
  }
  ASSERT_NO_THROW(w.flush());

  const int64_t restart_ms = unixTimeMs();
  w.agentRestarted(restart_ms);
  ASSERT_NO_FATAL_FAILURE(startAgent("agent-2.log"));

  EXPECT_EQ(sourceStat("sync_full"), full_before) << "the restart caused a full resync";
  EXPECT_EQ(sourceStat("sync_partial_ok"), partial_before + 1)
      << "the restart did not resume with exactly one partial resync (PSYNC +CONTINUE)";

  ASSERT_NO_FATAL_FAILURE(expectConverged(w, "3,000 keys and " +
                                                 std::to_string(old_key_ops.size()) +
                                                 " changes to old keys after the restart"));
  EXPECT_EQ(sourceStat("sync_full"), full_before) << "a full resync happened after the restart";

  const ExitStatus second_stop = agent_->terminate(kTerminateTimeout);
  EXPECT_TRUE(second_stop.success())
      << "after SIGTERM the restarted agent " << second_stop.describe();
}

}  // namespace
}  // namespace xdcr::test
