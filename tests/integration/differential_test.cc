// Randomized differential test of xdcr-agent: fixed seeds drive a generator of source commands
// (every command kind of the §4 table, MULTI/EXEC blocks, EVAL scripts, SELECT between two dbs,
// keys expiring by themselves while the run goes on, FLUSHDB) against a real source redis-server;
// the agent replicates them to a real target redis-server under one of several configurations
// (target bucket/collection maxTTL, every pipeline filter on and off). A model written from the
// specification (expiry_model.h) predicts the target; half-way through the run and at its end,
// once the agent has acknowledged the source's whole stream, every key ever touched is compared:
// presence, value (canonical per type), deadline (±1 s), and each target db's DBSIZE.
//
// The model uses the SOURCE only as an oracle for what the specification does not define, i.e.
// Redis's own value semantics: every command is followed, in the same pipeline (inside the MULTI
// or the script for blocks), by TYPE, PEXPIRETIME, DUMP and GETRANGE of the keys it touches. The
// target's presence, name, db and deadline come from the model alone. Each command is mapped to
// the stream entry Redis 7.0 propagates for it (redis-replication-notes.md §5, re-checked with a
// raw replica): notably INCRBYFLOAT reaches the stream as `SET k v KEEPTTL`, so the model gives
// it the KEEPTTL row of the §4 table; SPOP k <count >= size>, GETDEL and EXPIRE k -1 reach it as
// DEL k (deletions); a command without effect reaches it as nothing.
//
// Where neither the source nor the specification can say what the target holds, the generator
// stays away (see DifferentialRun::makeOp): no in-place write, RENAME/COPY source or *STORE input
// whose target copy does not hold the source's value; no command on a key whose source deadline
// is within [-1 s, +2.5 s] of now (a DEL there could be an expiration or a deletion, depending
// on the agent's lag) or whose target deadline is within 2.5 s; no RENAME/COPY/*STORE between a
// replicated and a dropped key; no SET … KEEPTTL (or INCRBYFLOAT) on a key the target does not
// hold in a maxTTL collection. If such a write happens anyway the model marks the key "value
// unknown, deadline only" (TargetKey::value_known) and the run's summary counts it.
//
// Validation of the model itself: in the "plain" configuration (no maxTTL, no filters) a native
// Redis replica and the source must match the model exactly, and the DifferentialModelTest cases
// check it on the spec's vectors. (Each model rule was also broken on purpose, in a scratch copy
// of expiry_model.cc linked against this file, to see the comparison fail.)

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "replicator/admin_server.h"
#include "tests/integration/expiry_model.h"
#include "tests/support/harness.h"
#include "tests/support/wan_proxy.h"

namespace xdcr::test {
namespace {

using namespace std::chrono_literals;

// A target deadline may differ from the model's by this much: the agent writes a few ms after the
// source executed the command (rule 4 uses the target's clock at that write).
constexpr int64_t kToleranceMs = 1000;
// Keys whose expected deadline is this close to the check may or may not have expired yet.
constexpr int64_t kAmbiguousMs = 2000;
// The generator leaves a key alone while its source deadline is within [now - kHotPastMs,
// now + kHotFutureMs] or its target deadline within (now - 500 ms, now + kHotFutureMs].
constexpr int64_t kHotPastMs = 1000;
constexpr int64_t kHotFutureMs = 2500;
constexpr int kKeysPerDb = 240;
constexpr int kDbs = 2;
constexpr int kSeeds = 3;
// Source write commands per run (inside blocks included). 9 configurations x 3 seeds x 1150.
constexpr int kOpsPerRun = 1150;
// The run is paced over this long so that short deadlines (100-500 ms) and a 3 s maxTTL pass
// while it goes on.
constexpr int64_t kRunMs = 4500;
constexpr int kOpsPerBatch = 40;
constexpr auto kAttachTimeout = 30s;
constexpr auto kCatchUpTimeout = 60s;
constexpr size_t kMaxReported = 20;
constexpr size_t kHistoryShown = 14;

// ---------------------------------------------------------------------------------------------
// Configurations

struct RunConfig {
  ModelConfig model;
  bool native_replica = false;  // validate the model against a native Redis replica too
  std::vector<int> flush_dbs;   // source dbs flushed at ~85 % of the run
  // The test also writes to the TARGET: it extends the deadline of some target copies whose
  // source deadline is a few seconds away (§6: drop_expirations "protects a target whose maxTTL
  // or own writes gave a document a different life"). Without it, a target copy never outlives
  // its source deadline (the clamp only shortens) and drop_expirations could not be observed.
  bool target_own_writes = false;
  // Share of relative TTLs of 3-6 s (the rest are 20-900 s): these expire during the run.
  double few_seconds_ttl_share = 0.2;
  // How long the run's commands are spread over.
  int64_t run_ms = kRunMs;
  // The agent is stopped (SIGSTOP) this long at the start of each half of the run (0: never):
  // target copies then reach their deadlines before writes the source made earlier arrive, and
  // must end as the source's whole documents (expiry-semantics.md §12).
  int64_t agent_stopped_ms = 0;
  // The agent writes its target through a WAN proxy delaying each direction this long (0: no
  // proxy), from the moment it is attached: a lagging target. Writes the generator makes up to
  // this long before a key's deadline reach the target after its copy expired (§12).
  int64_t target_delay_ms = 0;
};

std::vector<RunConfig> runConfigs() {
  std::vector<RunConfig> configs;
  {
    // No maxTTL, no filters: the target must equal the source, and so must a native replica.
    RunConfig c;
    c.model.name = "plain";
    c.native_replica = true;
    configs.push_back(c);
  }
  {
    // maxTTL only: a bucket with short, inheriting and larger-than-bucket collections; a bucket
    // of 0 with collections (db 1), where max_ttl 0 on a collection inherits "none". The 1 s
    // collection ends target copies early while the source keeps them, so that later writes
    // (SET XX, KEEPTTL, …) meet a target without the key.
    RunConfig c;
    c.model.name = "maxttl";
    c.model.buckets = {
        {0, 60, {{"t", "t:*", 1}, {"inh", "inh:*", 0}, {"big", "big:*", 900}}},
        {1, 0, {{"t", "t:*", 3}, {"s", "s:*", 120}, {"inh", "inh:*", 0}}},
    };
    configs.push_back(c);
  }
  {
    // drop_expirations with a bucket maxTTL only (db 0), none in db 1.
    RunConfig c;
    c.model.name = "drop_expirations";
    c.model.buckets = {{0, 30, {}}};
    c.model.drop_expirations = true;
    c.target_own_writes = true;
    c.few_seconds_ttl_share = 0.5;
    configs.push_back(c);
  }
  {
    // strip_ttl + drop_expirations + include_keys, with collections inheriting.
    RunConfig c;
    c.model.name = "strip_include";
    c.model.buckets = {
        {0, 45, {{"inh", "inh:*", 0}, {"big", "big:*", 600}}},
        {1, 0, {{"t", "t:*", 3}, {"inh", "inh:*", 0}}},
    };
    c.model.strip_ttl = true;
    c.model.drop_expirations = true;
    c.model.include_keys = {"_i_", "^big:"};
    configs.push_back(c);
  }
  {
    // drop_deletions + exclude_keys + key_rewrite (s: -> sess:, a collection matched on the
    // rewritten name only) + dbs {0: 0, 1: 2} + a FLUSHDB that is not replicated.
    RunConfig c;
    c.model.name = "drop_deletions_rewrite";
    c.model.buckets = {
        {0, 0, {{"sess", "sess:*", 5}}},
        {2, 40, {{"inh", "inh:*", 0}, {"t", "t:*", 3}}},
    };
    c.model.dbs = {{0, 0}, {1, 2}};
    c.model.drop_deletions = true;
    c.model.exclude_keys = {"_x_"};
    c.model.key_rewrite = {{"s:", "sess:"}};
    c.flush_dbs = {0};
    configs.push_back(c);
  }
  {
    // The collection policies of expiry-semantics.md §8 that need no JSON value: default_ttl
    // (3 s, short enough to end copies during the run; -1; one under a bucket max_ttl, where
    // in-place writes only cap) and max_lifetime (2-4 s, alone and beside max_ttl or a
    // default), so that lifetimes end, keys start anew after deletions and expirations, and
    // in-place writes, KEEPTTL, PERSIST, PEXPIREAT, RENAME and COPY meet every rule.
    RunConfig c;
    c.model.name = "policies";
    c.model.buckets = {
        {0, 60, {{"t", "t:*", 0, 3, 0}, {"inh", "inh:*", 0, 0, 2}, {"big", "big:*", 900, 20, 4}}},
        {1, 0, {{"t", "t:*", 3, 0, 2}, {"s", "s:*", 0, -1, 0}, {"inh", "inh:*", 0, 5, 0}}},
    };
    configs.push_back(c);
  }
  {
    // replicate_flush with dbs {1: 2} (db 0 unmapped, so dropped), a rewrite into a collection.
    RunConfig c;
    c.model.name = "replicate_flush";
    c.model.buckets = {{2, 0, {{"t", "t:*", 3}, {"eu", "eu:*", 50}}}};
    c.model.dbs = {{1, 2}};
    c.model.replicate_flush = true;
    c.model.key_rewrite = {{"k:", "eu:k:"}};
    c.flush_dbs = {1, 0};
    configs.push_back(c);
  }
  {
    // As "plain", with the agent stopped 5 s at the start of each half of a 12 s run: writes
    // the generator makes to keys 2.5-6 s from their deadlines reach the target after its copy
    // expired (§12). The model does not change (without a clamp the target's copy lives as the
    // source's key does), so the target must still equal it, and the native replica too.
    RunConfig c;
    c.model.name = "plain_stopped";
    c.native_replica = true;
    c.few_seconds_ttl_share = 0.8;
    c.run_ms = 12000;
    c.agent_stopped_ms = 5000;
    configs.push_back(c);
  }
  {
    // As "plain", with the target 3.2 s behind: the generator leaves keys alone in the last
    // kHotFutureMs (2.5 s) before their source deadlines, so a write it makes 2.5-3.2 s before a
    // deadline reaches the target after its copy expired there (§12), in normal operation. The
    // model does not change, nor does the native replica (it reads the source directly).
    RunConfig c;
    c.model.name = "plain_lagging";
    c.native_replica = true;
    c.few_seconds_ttl_share = 0.8;
    c.run_ms = 12000;
    c.target_delay_ms = 3200;
    configs.push_back(c);
  }
  return configs;
}

std::string yamlQuoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
    }
    out.push_back(c);
  }
  return out + "\"";
}

std::string yamlDuration(int64_t seconds) {
  return seconds == 0 ? "0" : std::to_string(seconds) + "s";
}

std::string agentYaml(const ModelConfig& m, const std::string& state_dir, uint16_t source_port,
                      uint16_t target_port, const std::string& admin = "") {
  std::ostringstream y;
  y << "agent:\n"
    << "  state_dir: " << yamlQuoted(state_dir) << "\n"
    << "  log_level: info\n";
  if (!admin.empty()) y << "  admin_listen: " << yamlQuoted(admin) << "\n";
  y << "clusters:\n"
    << "  src: {type: redis, address: \"127.0.0.1:" << source_port << "\"}\n"
    << "  dst:\n"
    << "    type: redis\n"
    << "    address: \"127.0.0.1:" << target_port << "\"\n";
  if (!m.buckets.empty()) {
    y << "    buckets:\n";
    for (const auto& b : m.buckets) {
      y << "      - db: " << b.db << "\n"
        << "        max_ttl: " << yamlDuration(b.max_ttl_s) << "\n";
      if (!b.collections.empty()) {
        y << "        collections:\n";
        for (const auto& c : b.collections) {
          y << "          - {name: " << c.name << ", keys: " << yamlQuoted(c.glob)
            << ", max_ttl: " << yamlDuration(c.max_ttl_s);
          if (c.default_ttl_s != 0) {
            y << ", default_ttl: " << (c.default_ttl_s < 0 ? "-1" : yamlDuration(c.default_ttl_s));
          }
          if (c.max_lifetime_s != 0) y << ", max_lifetime: " << yamlDuration(c.max_lifetime_s);
          y << "}\n";
        }
      }
    }
  }
  y << "pipelines:\n"
    << "  - name: p\n"
    << "    source: src\n"
    << "    target: dst\n";
  if (!m.dbs.empty()) {
    y << "    dbs: {";
    bool first = true;
    for (const auto& [from, to] : m.dbs) {
      y << (first ? "" : ", ") << from << ": " << to;
      first = false;
    }
    y << "}\n";
  }
  auto list = [](const std::vector<std::string>& items) {
    std::string out = "[";
    for (size_t i = 0; i < items.size(); ++i) {
      out += (i == 0 ? "" : ", ") + yamlQuoted(items[i]);
    }
    return out + "]";
  };
  y << "    filters:\n"
    << "      include_keys: " << list(m.include_keys) << "\n"
    << "      exclude_keys: " << list(m.exclude_keys) << "\n"
    << "      drop_expirations: " << (m.drop_expirations ? "true" : "false") << "\n"
    << "      drop_deletions: " << (m.drop_deletions ? "true" : "false") << "\n"
    << "      strip_ttl: " << (m.strip_ttl ? "true" : "false") << "\n"
    << "      replicate_flush: " << (m.replicate_flush ? "true" : "false") << "\n";
  y << "    key_rewrite: [";
  for (size_t i = 0; i < m.key_rewrite.size(); ++i) {
    y << (i == 0 ? "" : ", ") << "{from: " << yamlQuoted(m.key_rewrite[i].from)
      << ", to: " << yamlQuoted(m.key_rewrite[i].to) << "}";
  }
  y << "]\n"
    << "    checkpoint_interval: 1s\n";
  return y.str();
}

// ---------------------------------------------------------------------------------------------
// Deterministic randomness (splitmix64): the same seed gives the same command choices.

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed * 0x9e3779b97f4a7c15ULL + 1) {}
  uint64_t next() {
    uint64_t x = (state_ += 0x9e3779b97f4a7c15ULL);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  }
  /** Uniform in [0, n). */
  int64_t below(int64_t n) { return n <= 0 ? 0 : static_cast<int64_t>(next() % n); }
  /** Uniform in [lo, hi]. */
  int64_t range(int64_t lo, int64_t hi) { return lo + below(hi - lo + 1); }
  bool chance(double p) { return static_cast<double>(below(1000000)) < p * 1000000.0; }
  std::string letters(size_t n) {
    static constexpr char kAlphabet[] = "abcdefghijklmnopqrstuvwxyz";
    std::string out(n, 'a');
    for (auto& c : out) {
      c = kAlphabet[below(26)];
    }
    return out;
  }

 private:
  uint64_t state_;
};

// ---------------------------------------------------------------------------------------------
// Key pool: every run uses the same names, spread over the prefixes the configurations give
// collections and rewrites (k: t: inh: big: s:) and the infixes the key filters match
// (_x_ excluded, _i_ included).

const std::vector<std::string>& keyNames() {
  static const std::vector<std::string> kNames = [] {
    const std::vector<std::string> prefixes = {"k:", "t:", "inh:", "big:", "s:"};
    const std::vector<std::string> tags = {"", "_x_", "_i_"};
    std::vector<std::string> names;
    for (int i = 0; i < kKeysPerDb; ++i) {
      names.push_back(prefixes[i % prefixes.size()] + tags[(i / prefixes.size()) % tags.size()] +
                      std::to_string(i));
    }
    return names;
  }();
  return kNames;
}

std::string keyText(const KeyId& id) {
  return "db" + std::to_string(id.first) + " " + id.second;
}

// ---------------------------------------------------------------------------------------------
// What the source holds, learned from the read-backs.

struct Readback {
  Value value;
  int64_t deadline = 0;  // absolute ms, 0 = none
  std::string shape = "none";
};

bool isIntText(const std::string& s) {
  if (s.empty() || s.size() > 18) {
    return false;
  }
  size_t i = s[0] == '-' ? 1 : 0;
  if (i == s.size() || (s[i] == '0' && s.size() > i + 1)) {
    return false;
  }
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') {
      return false;
    }
  }
  return s != "-0";
}

bool isFloatText(const std::string& s) {
  if (s.empty() || s.size() > 30) {
    return false;
  }
  char* end = nullptr;
  std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && s.find_first_of(" \t\r\nxXnN") == std::string::npos;
}

/** The shape the generator needs: which in-place commands a key accepts. */
std::string shapeOf(const std::string& type, const RespValue& head) {
  if (type != "string") {
    return type;
  }
  if (head.type() != RespValue::Type::Bulk) {
    return "str";
  }
  const std::string& h = head.str();
  if (h.size() >= 4 && h.compare(0, 4, "HYLL") == 0) {
    return "hll";
  }
  if (h.size() < 32 && isIntText(h)) {
    return "int";
  }
  if (h.size() < 32 && isFloatText(h)) {
    return "float";
  }
  return "str";
}

Readback parseReadback(const RespValue& type, const RespValue& pexpiretime, const RespValue& dump,
                       const RespValue& head, const std::string& context) {
  Readback r;
  if (type.type() != RespValue::Type::SimpleString || !pexpiretime.isInteger()) {
    throw std::runtime_error("read-back of " + context + ": TYPE " + type.toString() +
                             ", PEXPIRETIME " + pexpiretime.toString());
  }
  r.value.type = type.str();
  if (r.value.type != "none") {
    if (dump.type() != RespValue::Type::Bulk) {
      throw std::runtime_error("read-back of " + context + ": DUMP " + dump.toString());
    }
    r.value.payload = dump.str();
    r.deadline = pexpiretime.integer() == -1 ? 0 : pexpiretime.integer();
    if (pexpiretime.integer() == -2) {
      throw std::runtime_error("read-back of " + context + ": TYPE " + r.value.type +
                               " but PEXPIRETIME -2");
    }
  }
  r.shape = shapeOf(r.value.type, head);
  return r;
}

struct SourceKey {
  bool exists = false;
  Value value;
  int64_t deadline = 0;
  std::string shape = "none";
  int64_t last_touch_ms = 0;
  std::vector<std::string> history;
};

// ---------------------------------------------------------------------------------------------
// Commands

enum class Kind {
  SetPlain,
  SetEx,
  SetPx,
  SetExAt,
  SetPxAt,
  SetPxAtPast,
  SetNx,
  SetNxEx,
  SetXx,
  SetGet,
  SetKeepTtl,
  SetShort,
  SetExCmd,
  PSetEx,
  MSet,
  MSetNx,
  SetNxCmd,
  GetSet,
  GetExEx,
  GetExPersist,
  GetDel,
  SUnionStore,
  ZUnionStore,
  Expire,
  PExpire,
  ExpireAt,
  PExpireAt,
  PExpireShort,
  ExpirePast,
  Persist,
  Incr,
  IncrBy,
  IncrByFloat,
  Append,
  SetRange,
  HSet,
  HDel,
  HIncrBy,
  LPush,
  RPush,
  LPop,
  LSet,
  SAdd,
  SRem,
  SPop,
  SPopAll,
  ZAdd,
  ZIncrBy,
  ZRem,
  XAdd,
  PfAdd,
  RestoreTtl,
  RestoreAbs,
  RestoreZero,
  Rename,
  Copy,
  Del,
  DelMulti,
  Unlink,
  UnlinkMulti,
  FlushDb,
};

struct KindInfo {
  Kind kind;
  const char* name;
  int weight;
};

// clang-format off
const std::vector<KindInfo>& kinds() {
  static const std::vector<KindInfo> kKinds = {
      {Kind::SetPlain, "SET", 30},           {Kind::SetEx, "SET EX", 22},
      {Kind::SetPx, "SET PX", 22},           {Kind::SetExAt, "SET EXAT", 14},
      {Kind::SetPxAt, "SET PXAT", 14},       {Kind::SetPxAtPast, "SET PXAT past", 8},
      {Kind::SetNx, "SET NX", 12},           {Kind::SetNxEx, "SET NX EX", 10},
      {Kind::SetXx, "SET XX", 14},           {Kind::SetGet, "SET GET", 12},
      {Kind::SetKeepTtl, "SET KEEPTTL", 20}, {Kind::SetShort, "SET PX short", 30},
      {Kind::SetExCmd, "SETEX", 14},         {Kind::PSetEx, "PSETEX", 14},
      {Kind::MSet, "MSET", 20},              {Kind::MSetNx, "MSETNX", 12},
      {Kind::SetNxCmd, "SETNX", 12},         {Kind::GetSet, "GETSET", 12},
      {Kind::GetExEx, "GETEX EX", 14},       {Kind::GetExPersist, "GETEX PERSIST", 10},
      {Kind::GetDel, "GETDEL", 12},          {Kind::SUnionStore, "SUNIONSTORE", 14},
      {Kind::ZUnionStore, "ZUNIONSTORE", 12}, {Kind::Expire, "EXPIRE", 20},
      {Kind::PExpire, "PEXPIRE", 14},        {Kind::ExpireAt, "EXPIREAT", 12},
      {Kind::PExpireAt, "PEXPIREAT", 12},    {Kind::PExpireShort, "PEXPIRE short", 20},
      {Kind::ExpirePast, "EXPIRE past", 8},  {Kind::Persist, "PERSIST", 18},
      {Kind::Incr, "INCR", 12},              {Kind::IncrBy, "INCRBY", 10},
      {Kind::IncrByFloat, "INCRBYFLOAT", 12}, {Kind::Append, "APPEND", 12},
      {Kind::SetRange, "SETRANGE", 10},      {Kind::HSet, "HSET", 25},
      {Kind::HDel, "HDEL", 10},              {Kind::HIncrBy, "HINCRBY", 12},
      {Kind::LPush, "LPUSH", 15},            {Kind::RPush, "RPUSH", 15},
      {Kind::LPop, "LPOP", 10},              {Kind::LSet, "LSET", 8},
      {Kind::SAdd, "SADD", 20},              {Kind::SRem, "SREM", 10},
      {Kind::SPop, "SPOP", 8},               {Kind::SPopAll, "SPOP all", 6},
      {Kind::ZAdd, "ZADD", 18},              {Kind::ZIncrBy, "ZINCRBY", 10},
      {Kind::ZRem, "ZREM", 8},               {Kind::XAdd, "XADD", 12},
      {Kind::PfAdd, "PFADD", 12},            {Kind::RestoreTtl, "RESTORE ttl", 12},
      {Kind::RestoreAbs, "RESTORE ABSTTL", 12}, {Kind::RestoreZero, "RESTORE 0", 10},
      {Kind::Rename, "RENAME", 15},          {Kind::Copy, "COPY", 15},
      {Kind::Del, "DEL", 20},                {Kind::DelMulti, "DEL multi", 15},
      {Kind::Unlink, "UNLINK", 12},          {Kind::UnlinkMulti, "UNLINK multi", 10},
      {Kind::FlushDb, "FLUSHDB", 0},
  };
  return kKinds;
}
// clang-format on

const char* kindName(Kind kind) {
  for (const auto& k : kinds()) {
    if (k.kind == kind) {
      return k.name;
    }
  }
  return "?";
}

enum class Cond { None, Nx, Xx };

struct Op {
  Kind kind = Kind::SetPlain;
  int db = 0;
  RespCommand cmd;
  std::vector<std::string> keys;  // read back after the command, in this order
  int64_t arg_deadline = 0;       // an absolute deadline given in the command (ms)
  Cond cond = Cond::None;
  bool with_get = false;
  std::string past_value;  // SET … PXAT <past>: the value, the source never shows it
};

enum class BlockType { Single, Multi, Eval };

struct Block {
  BlockType type = BlockType::Single;
  int db = 0;
  std::vector<Op> ops;
};

std::string describeCommand(const RespCommand& cmd) {
  std::string out;
  for (size_t i = 0; i < cmd.size(); ++i) {
    std::string arg = cmd[i];
    if (cmd[0] == "RESTORE" && i == 3) {
      arg = "<dump " + std::to_string(cmd[i].size()) + " bytes>";
    } else {
      arg = escapeBytes(arg, 40);
    }
    out += (i == 0 ? "" : " ") + arg;
  }
  return out;
}

// The Lua interpreter behind EVAL blocks: ARGV is a list of [argc, argv..., nkeys, keys...]; it
// runs each command and reads its keys back (TYPE, PEXPIRETIME, DUMP, GETRANGE) into one flat
// array. Scripts replicate as their effects, wrapped in MULTI/EXEC; the reads are not propagated.
constexpr const char* kEvalScript = R"lua(
local out = {}
local i = 1
local n = #ARGV
while i <= n do
  local argc = tonumber(ARGV[i])
  i = i + 1
  local argv = {}
  for j = 1, argc do
    argv[j] = ARGV[i + j - 1]
  end
  i = i + argc
  out[#out + 1] = redis.pcall(unpack(argv))
  local nkeys = tonumber(ARGV[i])
  i = i + 1
  for j = 1, nkeys do
    local k = ARGV[i]
    i = i + 1
    local t = redis.call('TYPE', k)
    out[#out + 1] = t
    out[#out + 1] = redis.call('PEXPIRETIME', k)
    out[#out + 1] = redis.call('DUMP', k)
    if t['ok'] == 'string' then
      out[#out + 1] = redis.call('GETRANGE', k, 0, 31)
    else
      out[#out + 1] = false
    end
  end
end
return out
)lua";

// ---------------------------------------------------------------------------------------------
// The run: generator, driver, interpreter of source effects into model events.

struct PlanKey {
  bool exists = false;
  std::string shape = "none";
  bool has_ttl = false;
  int64_t deadline = 0;
  bool mapped = false;
  int64_t max_ttl_ms = 0;
  bool in_sync = true;
  bool target_present = false;  // holds a copy at now + kHotFutureMs (dropped keys: true)
  bool target_has = false;      // holds a copy now (dropped keys: as the source)
  bool locked = false;
  bool expired_pending = false;  // logically expired on the source, DEL not yet seen
};

struct Difference {
  KeyId target;
  std::string problem;
};

struct CheckResult {
  int64_t keys = 0;
  int64_t present = 0;
  int64_t absent = 0;
  int64_t ambiguous = 0;
  int64_t value_unknown = 0;
  std::vector<Difference> differences;
  std::string dbsizes;
};

class DifferentialRun {
 public:
  DifferentialRun(const RunConfig& config, uint64_t seed, RedisServer& source, RedisServer& target,
                  RedisServer& scratch)
      : config_(config),
        model_(config.model),
        rng_(seed * 1000003 + std::hash<std::string>{}(config.model.name) % 1000),
        conn_(source.client()),
        target_conn_(target.client()),
        scratch_conn_(scratch.client()) {}

  /** Generates and sends every command; returns when the last one is answered. Half-way it
   * calls `checkpoint` (the run is paused meanwhile: the pause does not count for the pacing).
   * `stop_agent(true/false)` stops and continues the agent (RunConfig::agent_stopped_ms). */
  void generate(const std::function<void()>& checkpoint,
                const std::function<void(bool)>& stop_agent) {
    bool checked = false;
    int64_t paused_ms = 0;
    int64_t stopped_until = 0;  // 0: running
    auto stopFor = [&](int64_t ms) {
      if (ms <= 0) return;
      stop_agent(true);
      stopped_until = unixTimeMs() + ms;
    };
    auto continueAgent = [&] {
      if (stopped_until == 0) return;
      stop_agent(false);
      stopped_until = 0;
    };
    epoch_ = unixTimeMs();
    model_.setEpoch(epoch_);
    conn_.select(0);
    current_db_ = 0;
    bool flushed = config_.flush_dbs.empty();
    if (config_.target_own_writes) {
      writeReservedKeys();
      own_step_ = 1;
    }
    int batch_index = 0;
    const int batches = (kOpsPerRun + kOpsPerBatch - 1) / kOpsPerBatch;
    stopFor(config_.agent_stopped_ms);
    while (ops_ < kOpsPerRun) {
      // Pace: batch i starts no earlier than i/batches of the run.
      const int64_t due = epoch_ + paused_ms + config_.run_ms * batch_index / batches;
      while (unixTimeMs() < due) {
        std::this_thread::sleep_for(5ms);
      }
      ++batch_index;
      if (stopped_until != 0 && unixTimeMs() >= stopped_until) continueAgent();
      if (!checked && ops_ >= kOpsPerRun / 2) {
        checked = true;
        continueAgent();  // the check waits for the agent
        const int64_t start = unixTimeMs();
        checkpoint();
        paused_ms += unixTimeMs() - start;
        stopFor(config_.agent_stopped_ms);
      }
      if (!flushed && ops_ >= kOpsPerRun * 85 / 100) {
        flushed = true;
        for (int db : config_.flush_dbs) {
          Block b;
          b.type = BlockType::Single;
          b.db = db;
          Op op;
          op.kind = Kind::FlushDb;
          op.db = db;
          op.cmd = {"FLUSHDB"};
          b.ops.push_back(op);
          sendBatch({b});
        }
      }
      if (config_.target_own_writes && own_step_ == 1 && unixTimeMs() >= epoch_ + 1000) {
        // Before the mid-run check (it comes later than this), so that the check sees it.
        targetOwnWrites();
        own_step_ = 2;
      }
      if (config_.target_own_writes && own_step_ == 2 && unixTimeMs() >= epoch_ + 3800) {
        deleteReservedKeys();
        own_step_ = 3;
      }
      sendBatch(planBatch());
    }
    continueAgent();
  }

  /**
   * After the agent has caught up: every source key whose deadline has passed has expired (the
   * caller touched them all at `touch_ms`), those near `check_ms` may or may not have.
   */
  void settleExpirations(int64_t touch_ms, int64_t check_ms) {
    for (auto& [id, s] : source_keys_) {
      if (!s.exists || s.deadline == 0) {
        continue;
      }
      if (s.deadline <= touch_ms - 200) {
        expireNow(id, s, touch_ms, "active/lazy expiry before the check");
      } else if (s.deadline <= check_ms + 5000) {
        model_.markRemovalAmbiguous(
            id, check_ms, "source deadline " + model_.rel(s.deadline) + " near the check");
      }
    }
  }

  /** The source keys, for touching them all (lazy expiry) before the check. */
  std::vector<KeyId> sourceKeyIds() const {
    std::vector<KeyId> ids;
    for (const auto& [id, s] : source_keys_) {
      ids.push_back(id);
    }
    return ids;
  }

  const ExpiryModel& model() const { return model_; }
  ExpiryModel& model() { return model_; }
  const std::map<KeyId, SourceKey>& sourceKeys() const { return source_keys_; }
  int64_t epoch() const { return epoch_; }

  std::string summary() const {
    std::ostringstream out;
    out << ops_ << " source write commands (" << single_ops_ << " single, " << multi_blocks_
        << " MULTI/EXEC blocks with " << multi_ops_ << ", " << eval_blocks_ << " EVAL scripts with "
        << eval_ops_ << ", " << selects_ << " SELECT, " << no_effect_
        << " without effect on the source)";
    if (own_writes_ > 0) {
      out << "; " << own_writes_ << " deadline extensions written on the target itself";
    }
    return out.str();
  }

  std::string kindCounts() const {
    std::ostringstream out;
    int i = 0;
    for (const auto& k : kinds()) {
      auto it = kind_counts_.find(k.kind);
      const int64_t n = it == kind_counts_.end() ? 0 : it->second;
      out << (i++ % 8 == 0 ? "\n    " : "  ") << k.name << "=" << n;
    }
    return out.str();
  }

  /** Kinds never issued in this run (FLUSHDB only where configured). */
  std::vector<std::string> missingKinds() const {
    std::vector<std::string> missing;
    for (const auto& k : kinds()) {
      if (k.kind == Kind::FlushDb && config_.flush_dbs.empty()) {
        continue;
      }
      if (kind_counts_.find(k.kind) == kind_counts_.end()) {
        missing.push_back(k.name);
      }
    }
    return missing;
  }

  std::string probes() const {
    std::ostringstream out;
    for (const auto& [name, n] : probes_) {
      out << " " << name << "=" << n;
    }
    return probes_.empty() ? " none" : out.str();
  }
  int64_t ops() const { return ops_; }

 private:
  // Keys outside the random pool, for the target's own writes (RunConfig::target_own_writes):
  // "k:ow<i>" get a 2-2.6 s deadline at the start of the run, and "k:live<i>" none. The pool's
  // keys are touched every few hundred ms, too often to know that the agent has applied their
  // last write before the test writes to the target.
  static constexpr int kReservedKeys = 8;

  static std::string reservedName(const char* tag, int i) {
    return std::string("k:") + tag + std::to_string(i);
  }

  Op reservedOp(Kind kind, int db, RespCommand cmd, std::vector<std::string> keys) {
    Op op;
    op.kind = kind;
    op.db = db;
    op.cmd = std::move(cmd);
    op.keys = std::move(keys);
    return op;
  }

  /** Step 1 (at the start): the reserved keys on the source. */
  void writeReservedKeys() {
    std::vector<Block> batch;
    for (int db = 0; db < kDbs; ++db) {
      Block b{BlockType::Single, db, {}};
      for (int i = 0; i < kReservedKeys; ++i) {
        const std::string ow = reservedName("ow", i);
        const std::string live = reservedName("live", i);
        b.ops.push_back(reservedOp(
            Kind::SetPx, db,
            {"SET", ow, "v" + rng_.letters(6), "PX", std::to_string(rng_.range(2000, 2600))},
            {ow}));
        b.ops.push_back(
            reservedOp(Kind::SetPlain, db, {"SET", live, "v" + rng_.letters(6)}, {live}));
      }
      for (auto& op : b.ops) {
        batch.push_back(Block{BlockType::Single, db, {op}});
      }
    }
    plan_now_ = unixTimeMs();
    sendBatch(batch);
  }

  /**
   * Step 2 (1 s later, long after the agent applied step 1): on the TARGET, the even "k:ow"
   * keys get their deadline extended by 600 s, the target's own write.
   */
  void targetOwnWrites() {
    const int64_t now = unixTimeMs();
    for (int db = 0; db < kDbs; ++db) {
      for (int i = 0; i < kReservedKeys; i += 2) {
        const KeyId id{db, reservedName("ow", i)};
        auto target = model_.targetOf(id);
        const TargetKey* t = model_.targetKey(id);
        if (!target || t == nullptr || !t->presentAt(now + 500) || t->deadline == 0) {
          throw std::runtime_error("the model has no live target copy of " + keyText(id));
        }
        const int64_t deadline = t->deadline + 600000;
        target_conn_.select(target->first);
        const RespValue r =
            target_conn_.command({"PEXPIREAT", target->second, std::to_string(deadline)});
        if (!r.isInteger() || r.integer() != 1) {
          throw std::runtime_error("target PEXPIREAT " + keyText(*target) + " answered " +
                                   r.toString() + " (the model has it until " +
                                   model_.rel(t->deadline) + ")");
        }
        model_.targetOwnWrite(id, deadline, now,
                              "test, on the TARGET: PEXPIREAT " + target->second + " " +
                                  model_.rel(deadline) + " (the target's own write)");
        ++own_writes_;
      }
    }
  }

  /**
   * Step 3 (after the "k:ow" keys expired on the source): DEL/UNLINK naming expired and live
   * reserved keys together (vector 22): only the live ones are deletions.
   */
  void deleteReservedKeys() {
    std::vector<Block> batch;
    for (int db = 0; db < kDbs; ++db) {
      for (int i = 0; i + 1 < kReservedKeys; i += 2) {
        const std::string cmd = i % 4 == 0 ? "DEL" : "UNLINK";
        const std::vector<std::string> keys = {reservedName("ow", i), reservedName("ow", i + 1),
                                               reservedName("live", i)};
        RespCommand command = {cmd};
        command.insert(command.end(), keys.begin(), keys.end());
        batch.push_back(Block{
            BlockType::Single,
            db,
            {reservedOp(cmd == "DEL" ? Kind::DelMulti : Kind::UnlinkMulti, db, command, keys)}});
      }
    }
    plan_now_ = unixTimeMs();
    sendBatch(batch);
  }

  // ---- planning -------------------------------------------------------------------------

  PlanKey& plan(int db, const std::string& name) {
    auto it = plan_.find({db, name});
    if (it != plan_.end()) {
      return it->second;
    }
    PlanKey p;
    const KeyId id{db, name};
    const SourceKey& s = source_keys_[id];
    const bool due = s.exists && s.deadline != 0 && s.deadline <= plan_now_;
    const bool hot = s.exists && s.deadline != 0 && s.deadline > plan_now_ - kHotPastMs &&
                     s.deadline <= plan_now_ + kHotFutureMs;
    p.exists = s.exists && !due;
    p.expired_pending = s.exists && due;
    p.shape = p.exists ? s.shape : "none";
    p.has_ttl = p.exists && s.deadline != 0;
    p.deadline = p.exists ? s.deadline : 0;
    auto target = model_.targetOf(id);
    p.mapped = target.has_value();
    p.max_ttl_ms = target ? model_.maxTtlMs(*target) : 0;
    const TargetKey* t = model_.targetKey(id);
    const bool target_hot = t != nullptr && t->exists && t->deadline != 0 &&
                            t->deadline > plan_now_ - 500 &&
                            t->deadline <= plan_now_ + kHotFutureMs;
    p.in_sync = model_.inSync(id, p.exists ? s.value : Value{}, plan_now_ + kHotFutureMs);
    p.target_present = !p.mapped || (t != nullptr && t->presentAt(plan_now_ + kHotFutureMs));
    p.target_has = p.mapped ? t != nullptr && t->presentAt(plan_now_) : p.exists;
    p.locked = hot || target_hot;
    return plan_.emplace(KeyId{db, name}, p).first->second;
  }

  const std::string& randomName() { return keyNames()[rng_.below(keyNames().size())]; }

  /** A random unlocked key of `db` for which `ok` holds, or nullopt after bounded tries. */
  std::optional<std::string> pick(int db, const std::function<bool(const PlanKey&)>& ok,
                                  const std::set<std::string>& exclude = {}) {
    for (int i = 0; i < 60; ++i) {
      const std::string& name = randomName();
      if (exclude.count(name) != 0) {
        continue;
      }
      PlanKey& p = plan(db, name);
      if (!p.locked && ok(p)) {
        return name;
      }
    }
    return std::nullopt;
  }

  static bool isStringShape(const std::string& s) {
    return s == "int" || s == "float" || s == "str" || s == "hll";
  }
  static bool isPlainStringShape(const std::string& s) {
    return s == "int" || s == "float" || s == "str";
  }

  std::string stringValue(std::string* shape) {
    const int64_t r = rng_.below(10);
    if (r < 3) {
      *shape = "int";
      return std::to_string(rng_.range(-50, 5000));
    }
    if (r < 4) {
      *shape = "float";
      return std::to_string(rng_.range(0, 99)) + "." + std::to_string(rng_.range(1, 9));
    }
    *shape = "str";
    return "v" + rng_.letters(rng_.range(1, 12));
  }

  int64_t longTtlSeconds() { return rng_.range(20, 900); }
  int64_t shortTtlMs() { return rng_.range(100, 500); }
  /** Mostly long; sometimes a few seconds, so that it passes during the run. */
  int64_t ttlMs() {
    return rng_.chance(config_.few_seconds_ttl_share) ? rng_.range(3000, 6000)
                                                      : longTtlSeconds() * 1000;
  }

  /** In-place writes need the target copy to hold the source's value (both absent counts). */
  static bool inPlaceOk(const PlanKey& p) { return p.in_sync; }

  /** Prefer keys that exist (or not) with probability `p`. */
  std::function<bool(const PlanKey&)> existing(bool want, double p) {
    const bool strict = rng_.chance(p);
    return [want, strict](const PlanKey& k) { return !strict || k.exists == want; };
  }

  /** A payload to RESTORE: the value of some existing source key (any db, any type). */
  std::optional<std::string> randomPayload() {
    for (int i = 0; i < 40; ++i) {
      const KeyId id{static_cast<int>(rng_.below(kDbs)), randomName()};
      auto it = source_keys_.find(id);
      if (it != source_keys_.end() && it->second.exists && !it->second.value.payload.empty()) {
        return it->second.value.payload;
      }
    }
    return std::nullopt;
  }

  std::string expireFlag() {
    static const std::vector<std::string> kFlags = {"", "", "NX", "XX", "GT", "LT"};
    return kFlags[rng_.below(kFlags.size())];
  }

  /** One command of `kind` in `db`, or nullopt when no key fits now. */
  std::optional<Op> makeOp(Kind kind, int db) {
    Op op;
    op.kind = kind;
    op.db = db;
    std::string shape;
    auto single = [&](const std::function<bool(const PlanKey&)>& ok) -> bool {
      auto k = pick(db, ok);
      if (!k) {
        return false;
      }
      op.keys = {*k};
      return true;
    };
    const int64_t now = plan_now_;
    // A key whose target copy's presence differs from the source's: a conditional command
    // (NX, XX, RESTORE/COPY without REPLACE) is judged differently there.
    auto probe = [](const PlanKey& k) { return k.mapped && k.target_has != k.exists; };
    switch (kind) {
      case Kind::SetPlain:
      case Kind::SetEx:
      case Kind::SetPx:
      case Kind::SetExAt:
      case Kind::SetPxAt:
      case Kind::SetShort:
      case Kind::SetPxAtPast: {
        if (!single([](const PlanKey&) { return true; })) {
          return std::nullopt;
        }
        const std::string v = stringValue(&shape);
        op.cmd = {"SET", op.keys[0], v};
        if (kind == Kind::SetEx) {
          op.cmd.insert(op.cmd.end(), {"EX", std::to_string(longTtlSeconds())});
        } else if (kind == Kind::SetPx) {
          op.cmd.insert(op.cmd.end(), {"PX", std::to_string(ttlMs())});
        } else if (kind == Kind::SetShort) {
          op.cmd.insert(op.cmd.end(), {"PX", std::to_string(shortTtlMs())});
        } else if (kind == Kind::SetExAt) {
          op.arg_deadline = (now / 1000 + longTtlSeconds()) * 1000;
          op.cmd.insert(op.cmd.end(), {"EXAT", std::to_string(op.arg_deadline / 1000)});
        } else if (kind == Kind::SetPxAt) {
          op.arg_deadline = now + ttlMs();
          op.cmd.insert(op.cmd.end(), {"PXAT", std::to_string(op.arg_deadline)});
        } else if (kind == Kind::SetPxAtPast) {
          op.arg_deadline = rng_.chance(0.5) ? 1000000 : now - rng_.range(5000, 100000);
          op.cmd.insert(op.cmd.end(), {"PXAT", std::to_string(op.arg_deadline)});
          op.past_value = v;
        }
        break;
      }
      case Kind::SetNx:
      case Kind::SetNxEx: {
        if (!(rng_.chance(0.4) && single(probe)) && !single(existing(false, 0.7))) {
          return std::nullopt;
        }
        op.cond = Cond::Nx;
        op.cmd = {"SET", op.keys[0], stringValue(&shape), "NX"};
        if (kind == Kind::SetNxEx) {
          op.cmd.insert(op.cmd.end(), {"EX", std::to_string(longTtlSeconds())});
        }
        break;
      }
      case Kind::SetXx: {
        // GET needs a string (or no key) there.
        if (!(rng_.chance(0.4) && single(probe)) &&
            !single([&](const PlanKey& k) { return k.exists || rng_.chance(0.3); })) {
          return std::nullopt;
        }
        const PlanKey& p = plan(db, op.keys[0]);
        op.cond = Cond::Xx;
        op.cmd = {"SET", op.keys[0], stringValue(&shape), "XX"};
        if (rng_.chance(0.4)) {
          op.cmd.insert(op.cmd.end(), {"PX", std::to_string(ttlMs())});
        }
        if ((!p.exists || isStringShape(p.shape)) && rng_.chance(0.5)) {
          op.cmd.push_back("GET");
          op.with_get = true;
        }
        break;
      }
      case Kind::SetGet: {
        if (!single([](const PlanKey& k) { return !k.exists || isStringShape(k.shape); })) {
          return std::nullopt;
        }
        op.with_get = true;
        op.cmd = {"SET", op.keys[0], stringValue(&shape), "GET"};
        if (rng_.chance(0.5)) {
          op.cmd.insert(op.cmd.end(), {"EX", std::to_string(longTtlSeconds())});
        }
        break;
      }
      case Kind::SetKeepTtl: {
        // The spec keeps the target's deadline; where the target has no copy in a maxTTL
        // collection it does not say whether the key may be created without one.
        if (!single([](const PlanKey& k) { return k.target_present || k.max_ttl_ms == 0; })) {
          return std::nullopt;
        }
        op.cmd = {"SET", op.keys[0], stringValue(&shape), "KEEPTTL"};
        if (rng_.chance(0.3) && isStringShape(plan(db, op.keys[0]).shape)) {
          op.cmd.push_back("GET");
          op.with_get = true;
        }
        break;
      }
      case Kind::SetExCmd:
      case Kind::PSetEx: {
        if (!single([](const PlanKey&) { return true; })) {
          return std::nullopt;
        }
        if (kind == Kind::SetExCmd) {
          op.cmd = {"SETEX", op.keys[0], std::to_string(longTtlSeconds()), stringValue(&shape)};
        } else {
          op.cmd = {"PSETEX", op.keys[0], std::to_string(ttlMs()), stringValue(&shape)};
        }
        break;
      }
      case Kind::MSet:
      case Kind::MSetNx: {
        const int n = static_cast<int>(rng_.range(2, 4));
        std::set<std::string> used;
        op.cmd = {kind == Kind::MSet ? "MSET" : "MSETNX"};
        for (int i = 0; i < n; ++i) {
          auto k = kind == Kind::MSet ? pick(
                                            db, [](const PlanKey&) { return true; }, used)
                   : i == 0 && rng_.chance(0.4)
                       ? pick(
                             db, [](const PlanKey& p) { return !p.exists && p.target_has; }, used)
                       : pick(db, existing(false, 0.85), used);
          if (!k) {
            break;
          }
          used.insert(*k);
          op.keys.push_back(*k);
          op.cmd.push_back(*k);
          op.cmd.push_back(stringValue(&shape));
        }
        if (op.keys.size() < 2) {
          return std::nullopt;
        }
        break;
      }
      case Kind::SetNxCmd: {
        if (!(rng_.chance(0.4) && single(probe)) && !single(existing(false, 0.7))) {
          return std::nullopt;
        }
        op.cmd = {"SETNX", op.keys[0], stringValue(&shape)};
        break;
      }
      case Kind::GetSet: {
        if (!single([](const PlanKey& k) { return !k.exists || isStringShape(k.shape); })) {
          return std::nullopt;
        }
        op.cmd = {"GETSET", op.keys[0], stringValue(&shape)};
        break;
      }
      case Kind::GetExEx: {
        if (!single([](const PlanKey& k) { return k.exists && isStringShape(k.shape); })) {
          return std::nullopt;
        }
        const int64_t r = rng_.below(4);
        if (r == 0) {
          op.cmd = {"GETEX", op.keys[0], "EX", std::to_string(longTtlSeconds())};
        } else if (r == 1) {
          op.cmd = {"GETEX", op.keys[0], "PX", std::to_string(ttlMs())};
        } else if (r == 2) {
          op.arg_deadline = (now / 1000 + longTtlSeconds()) * 1000;
          op.cmd = {"GETEX", op.keys[0], "EXAT", std::to_string(op.arg_deadline / 1000)};
        } else {
          op.arg_deadline = now + ttlMs();
          op.cmd = {"GETEX", op.keys[0], "PXAT", std::to_string(op.arg_deadline)};
        }
        break;
      }
      case Kind::GetExPersist: {
        if (!single([](const PlanKey& k) { return k.exists && isStringShape(k.shape); })) {
          return std::nullopt;
        }
        op.cmd = {"GETEX", op.keys[0], "PERSIST"};
        break;
      }
      case Kind::GetDel: {
        if (!single([](const PlanKey& k) { return k.exists && isStringShape(k.shape); })) {
          return std::nullopt;
        }
        op.cmd = {"GETDEL", op.keys[0]};
        break;
      }
      case Kind::SUnionStore:
      case Kind::ZUnionStore: {
        // The target computes the union from its own copies of the inputs: they must hold the
        // source's values, and the destination must share their fate (all replicated or none).
        const bool zset = kind == Kind::ZUnionStore;
        auto input_ok = [zset](const PlanKey& k) {
          return k.exists && k.in_sync && k.target_present &&
                 (k.shape == "set" || (zset && k.shape == "zset"));
        };
        auto first = pick(db, input_ok);
        if (!first) {
          return std::nullopt;
        }
        const bool mapped = plan(db, *first).mapped;
        std::vector<std::string> inputs = {*first};
        if (rng_.chance(0.6)) {
          auto second = pick(
              db, [&](const PlanKey& k) { return input_ok(k) && k.mapped == mapped; }, {*first});
          if (second) {
            inputs.push_back(*second);
          }
        }
        std::set<std::string> used(inputs.begin(), inputs.end());
        // Prefer a destination that exists with a deadline (an overwriting *STORE).
        const bool want_ttl = rng_.chance(0.6);
        auto dst = pick(
            db, [&](const PlanKey& k) { return k.mapped == mapped && (!want_ttl || k.has_ttl); },
            used);
        if (!dst) {
          dst = pick(
              db, [&](const PlanKey& k) { return k.mapped == mapped; }, used);
        }
        if (!dst) {
          return std::nullopt;
        }
        op.keys = {*dst};
        if (zset) {
          op.cmd = {"ZUNIONSTORE", *dst, std::to_string(inputs.size())};
        } else {
          op.cmd = {"SUNIONSTORE", *dst};
        }
        op.cmd.insert(op.cmd.end(), inputs.begin(), inputs.end());
        break;
      }
      case Kind::Expire:
      case Kind::PExpire:
      case Kind::ExpireAt:
      case Kind::PExpireAt:
      case Kind::PExpireShort: {
        if (!single([](const PlanKey& k) { return k.exists; })) {
          return std::nullopt;
        }
        const std::string& k = op.keys[0];
        if (kind == Kind::Expire) {
          op.cmd = {"EXPIRE", k, std::to_string(longTtlSeconds())};
        } else if (kind == Kind::PExpire) {
          op.cmd = {"PEXPIRE", k, std::to_string(ttlMs())};
        } else if (kind == Kind::ExpireAt) {
          op.arg_deadline = (now / 1000 + longTtlSeconds()) * 1000;
          op.cmd = {"EXPIREAT", k, std::to_string(op.arg_deadline / 1000)};
        } else if (kind == Kind::PExpireAt) {
          op.arg_deadline = now + ttlMs();
          op.cmd = {"PEXPIREAT", k, std::to_string(op.arg_deadline)};
        } else {
          op.cmd = {"PEXPIRE", k, std::to_string(shortTtlMs())};
        }
        if (kind != Kind::PExpireShort) {
          const std::string flag = expireFlag();
          if (!flag.empty()) {
            op.cmd.push_back(flag);
          }
        }
        break;
      }
      case Kind::ExpirePast: {
        if (!single([](const PlanKey& k) { return k.exists; })) {
          return std::nullopt;
        }
        if (rng_.chance(0.5)) {
          op.cmd = {"EXPIRE", op.keys[0], "-1"};
        } else {
          op.cmd = {"PEXPIREAT", op.keys[0], std::to_string(now - rng_.range(5000, 50000))};
        }
        break;
      }
      case Kind::Persist: {
        if (!single(
                [&](const PlanKey& k) { return k.exists && (k.has_ttl || rng_.chance(0.2)); })) {
          return std::nullopt;
        }
        op.cmd = {"PERSIST", op.keys[0]};
        break;
      }
      case Kind::Incr:
      case Kind::IncrBy: {
        if (!single(
                [](const PlanKey& k) { return inPlaceOk(k) && (!k.exists || k.shape == "int"); })) {
          return std::nullopt;
        }
        op.cmd = kind == Kind::Incr
                     ? RespCommand{"INCR", op.keys[0]}
                     : RespCommand{"INCRBY", op.keys[0], std::to_string(rng_.range(-20, 100))};
        break;
      }
      case Kind::IncrByFloat: {
        // On the stream: SET k <new> KEEPTTL (redis-replication-notes.md §5; checked by hand).
        if (!single([](const PlanKey& k) {
              return inPlaceOk(k) && (k.exists ? k.shape == "int" || k.shape == "float"
                                               : k.max_ttl_ms == 0 || !k.mapped);
            })) {
          return std::nullopt;
        }
        op.cmd = {"INCRBYFLOAT", op.keys[0],
                  std::to_string(rng_.range(1, 9)) + "." + std::to_string(rng_.range(1, 9))};
        break;
      }
      case Kind::Append:
      case Kind::SetRange: {
        if (!single([](const PlanKey& k) {
              return inPlaceOk(k) && (!k.exists || isPlainStringShape(k.shape));
            })) {
          return std::nullopt;
        }
        if (kind == Kind::Append) {
          op.cmd = {"APPEND", op.keys[0], rng_.letters(rng_.range(1, 5))};
        } else {
          op.cmd = {"SETRANGE", op.keys[0], std::to_string(rng_.range(0, 6)),
                    rng_.letters(rng_.range(1, 4))};
        }
        break;
      }
      case Kind::HSet:
      case Kind::HIncrBy:
      case Kind::HDel: {
        const bool del = kind == Kind::HDel;
        if (!single([del](const PlanKey& k) {
              return inPlaceOk(k) &&
                     (del ? k.exists && k.shape == "hash" : !k.exists || k.shape == "hash");
            })) {
          return std::nullopt;
        }
        if (kind == Kind::HSet) {
          op.cmd = {"HSET", op.keys[0]};
          const int n = static_cast<int>(rng_.range(1, 3));
          for (int i = 0; i < n; ++i) {
            op.cmd.push_back("f" + std::to_string(rng_.below(6)));
            op.cmd.push_back(rng_.letters(rng_.range(1, 8)));
          }
        } else if (kind == Kind::HIncrBy) {
          op.cmd = {"HINCRBY", op.keys[0], "n" + std::to_string(rng_.below(3)),
                    std::to_string(rng_.range(1, 50))};
        } else {
          op.cmd = {"HDEL", op.keys[0], "f" + std::to_string(rng_.below(6)),
                    "n" + std::to_string(rng_.below(3))};
        }
        break;
      }
      case Kind::LPush:
      case Kind::RPush:
      case Kind::LPop:
      case Kind::LSet: {
        const bool need = kind == Kind::LPop || kind == Kind::LSet;
        if (!single([need](const PlanKey& k) {
              return inPlaceOk(k) &&
                     (need ? k.exists && k.shape == "list" : !k.exists || k.shape == "list");
            })) {
          return std::nullopt;
        }
        if (kind == Kind::LPush || kind == Kind::RPush) {
          op.cmd = {kind == Kind::LPush ? "LPUSH" : "RPUSH", op.keys[0]};
          const int n = static_cast<int>(rng_.range(1, 3));
          for (int i = 0; i < n; ++i) {
            op.cmd.push_back(rng_.letters(rng_.range(1, 6)));
          }
        } else if (kind == Kind::LPop) {
          op.cmd = {"LPOP", op.keys[0]};
        } else {
          op.cmd = {"LSET", op.keys[0], rng_.chance(0.5) ? "0" : "-1", rng_.letters(4)};
        }
        break;
      }
      case Kind::SAdd:
      case Kind::SRem:
      case Kind::SPop:
      case Kind::SPopAll: {
        const bool need = kind != Kind::SAdd;
        if (kind == Kind::SPopAll) {
          // SPOP k <count >= size> reaches the stream as DEL k: a deletion.
          if (!single([](const PlanKey& k) { return k.exists && k.shape == "set"; })) {
            return std::nullopt;
          }
          op.cmd = {"SPOP", op.keys[0], "1000"};
          break;
        }
        if (!single([need](const PlanKey& k) {
              return inPlaceOk(k) &&
                     (need ? k.exists && k.shape == "set" : !k.exists || k.shape == "set");
            })) {
          return std::nullopt;
        }
        auto member = [&]() {
          return rng_.chance(0.8) ? std::to_string(rng_.below(16)) : "m" + rng_.letters(2);
        };
        if (kind == Kind::SAdd) {
          op.cmd = {"SADD", op.keys[0]};
          const int n = static_cast<int>(rng_.range(1, 4));
          for (int i = 0; i < n; ++i) {
            op.cmd.push_back(member());
          }
        } else if (kind == Kind::SRem) {
          op.cmd = {"SREM", op.keys[0], member(), member()};
        } else {
          op.cmd = {"SPOP", op.keys[0]};
        }
        break;
      }
      case Kind::ZAdd:
      case Kind::ZIncrBy:
      case Kind::ZRem: {
        const bool need = kind == Kind::ZRem;
        if (!single([need](const PlanKey& k) {
              return inPlaceOk(k) &&
                     (need ? k.exists && k.shape == "zset" : !k.exists || k.shape == "zset");
            })) {
          return std::nullopt;
        }
        const std::string member = "z" + std::to_string(rng_.below(6));
        if (kind == Kind::ZAdd) {
          // CH: the reply counts changed members too, so it tells whether anything propagated.
          op.cmd = {"ZADD", op.keys[0], "CH", std::to_string(rng_.range(0, 20)), member};
        } else if (kind == Kind::ZIncrBy) {
          op.cmd = {"ZINCRBY", op.keys[0], std::to_string(rng_.range(1, 5)), member};
        } else {
          op.cmd = {"ZREM", op.keys[0], member, "z" + std::to_string(rng_.below(6))};
        }
        break;
      }
      case Kind::XAdd: {
        if (!single([](const PlanKey& k) {
              return inPlaceOk(k) && (!k.exists || k.shape == "stream");
            })) {
          return std::nullopt;
        }
        op.cmd = {"XADD", op.keys[0], "*", "f", rng_.letters(3)};
        break;
      }
      case Kind::PfAdd: {
        if (!single(
                [](const PlanKey& k) { return inPlaceOk(k) && (!k.exists || k.shape == "hll"); })) {
          return std::nullopt;
        }
        op.cmd = {"PFADD", op.keys[0]};
        const int n = static_cast<int>(rng_.range(1, 4));
        for (int i = 0; i < n; ++i) {
          op.cmd.push_back("e" + std::to_string(rng_.below(40)));
        }
        break;
      }
      case Kind::RestoreTtl:
      case Kind::RestoreAbs:
      case Kind::RestoreZero: {
        auto payload = randomPayload();
        if (!payload || (!(rng_.chance(0.3) && single(probe)) &&
                         !single([](const PlanKey&) { return true; }))) {
          return std::nullopt;
        }
        const PlanKey& p = plan(db, op.keys[0]);
        std::string ttl = "0";
        if (kind == Kind::RestoreTtl) {
          ttl = std::to_string(rng_.chance(0.2) ? shortTtlMs() : ttlMs());
        } else if (kind == Kind::RestoreAbs) {
          op.arg_deadline = now + ttlMs();
          ttl = std::to_string(op.arg_deadline);
        }
        op.cmd = {"RESTORE", op.keys[0], ttl, *payload};
        // REPLACE where the source has the key (else BUSYKEY); sometimes where it has not.
        if (p.exists || rng_.chance(0.3)) {
          op.cmd.push_back("REPLACE");
        }
        if (kind == Kind::RestoreAbs) {
          op.cmd.push_back("ABSTTL");
        }
        break;
      }
      case Kind::Rename:
      case Kind::Copy: {
        auto from =
            pick(db, [](const PlanKey& k) { return k.exists && k.in_sync && k.target_present; });
        if (!from) {
          return std::nullopt;
        }
        const bool mapped = plan(db, *from).mapped;
        std::optional<std::string> to;
        if (kind == Kind::Copy && rng_.chance(0.3)) {
          to = pick(db, [&](const PlanKey& k) { return k.mapped == mapped && probe(k); }, {*from});
        }
        if (!to) {
          to = pick(db, [&](const PlanKey& k) { return k.mapped == mapped; }, {*from});
        }
        if (!to) {
          return std::nullopt;
        }
        op.keys = {*from, *to};
        if (kind == Kind::Rename) {
          op.cmd = {"RENAME", *from, *to};
        } else {
          op.cmd = {"COPY", *from, *to};
          if (plan(db, *to).exists || rng_.chance(0.3)) {
            op.cmd.push_back("REPLACE");
          }
        }
        break;
      }
      case Kind::Del:
      case Kind::Unlink: {
        // Sometimes a key whose deadline has passed: the DEL is then the source's expiration.
        if (!single([&](const PlanKey& k) { return k.exists || k.expired_pending; })) {
          return std::nullopt;
        }
        op.cmd = {kind == Kind::Del ? "DEL" : "UNLINK", op.keys[0]};
        break;
      }
      case Kind::DelMulti:
      case Kind::UnlinkMulti: {
        op.cmd = {kind == Kind::DelMulti ? "DEL" : "UNLINK"};
        std::set<std::string> used;
        // Vector 22: a key past its deadline together with live ones.
        if (rng_.chance(0.6)) {
          auto k = pick(db, [](const PlanKey& p) { return p.expired_pending; });
          if (k) {
            used.insert(*k);
            op.keys.push_back(*k);
          }
        }
        const int n = static_cast<int>(rng_.range(2, 4));
        while (static_cast<int>(op.keys.size()) < n) {
          auto k = pick(db, existing(true, 0.8), used);
          if (!k) {
            break;
          }
          used.insert(*k);
          op.keys.push_back(*k);
        }
        if (op.keys.size() < 2) {
          return std::nullopt;
        }
        op.cmd.insert(op.cmd.end(), op.keys.begin(), op.keys.end());
        break;
      }
      case Kind::FlushDb:
        return std::nullopt;
    }
    return op;
  }

  /** After a command is planned: what later commands of the same block may assume. */
  void planTouch(const Op& op, bool in_block) {
    // (*STORE inputs are only read: they stay usable.)
    auto lock = [&]() {
      for (const auto& k : op.keys) {
        plan(op.db, k).locked = true;
      }
    };
    if (!in_block) {
      lock();
      return;
    }
    // Inside a block the next commands may touch the key again, where its state is
    // predictable; everything else is locked for the rest of the block.
    auto setLike = [&](const std::string& key, bool ttl, bool short_ttl) {
      PlanKey& p = plan(op.db, key);
      p.exists = true;
      p.shape = shapeOfValue(op, key);
      p.has_ttl = ttl;
      p.in_sync = true;
      p.target_present = true;
      p.expired_pending = false;
      if (short_ttl) {
        p.locked = true;
      }
    };
    switch (op.kind) {
      case Kind::SetPlain:
      case Kind::SetExCmd:
      case Kind::GetSet:
        setLike(op.keys[0], op.kind == Kind::SetExCmd, false);
        break;
      case Kind::SetEx:
      case Kind::SetExAt:
      case Kind::SetPxAt:
      case Kind::SetPx:
      case Kind::PSetEx: {
        // A PX of a few seconds could pass while the block is being planned: lock those.
        const bool few_seconds =
            op.kind == Kind::SetPx || op.kind == Kind::PSetEx || op.kind == Kind::SetPxAt;
        setLike(op.keys[0], true, few_seconds);
        break;
      }
      case Kind::MSet:
        for (const auto& k : op.keys) {
          setLike(k, false, false);
        }
        break;
      case Kind::Incr:
      case Kind::IncrBy:
      case Kind::HSet:
      case Kind::HIncrBy:
      case Kind::LPush:
      case Kind::RPush:
      case Kind::SAdd:
      case Kind::ZAdd:
      case Kind::ZIncrBy:
      case Kind::XAdd:
      case Kind::PfAdd:
      case Kind::Append:
      case Kind::SetRange: {
        PlanKey& p = plan(op.db, op.keys[0]);
        p.exists = true;
        p.target_present = true;
        p.shape = op.kind == Kind::Incr || op.kind == Kind::IncrBy       ? "int"
                  : op.kind == Kind::Append || op.kind == Kind::SetRange ? "str"
                  : op.kind == Kind::HSet || op.kind == Kind::HIncrBy    ? "hash"
                  : op.kind == Kind::LPush || op.kind == Kind::RPush     ? "list"
                  : op.kind == Kind::SAdd                                ? "set"
                  : op.kind == Kind::XAdd                                ? "stream"
                  : op.kind == Kind::PfAdd                               ? "hll"
                                                                         : "zset";
        break;
      }
      case Kind::Persist: {
        PlanKey& p = plan(op.db, op.keys[0]);
        p.has_ttl = false;
        p.deadline = 0;
        break;
      }
      default:
        lock();
        break;
    }
  }

  /** The shape a SET-like command leaves (only used inside blocks). */
  static std::string shapeOfValue(const Op& op, const std::string& key) {
    std::string value;
    if (op.kind == Kind::MSet) {
      for (size_t i = 1; i + 1 < op.cmd.size(); i += 2) {
        if (op.cmd[i] == key) {
          value = op.cmd[i + 1];
        }
      }
    } else if (op.kind == Kind::SetExCmd || op.kind == Kind::PSetEx) {
      value = op.cmd[3];
    } else {
      value = op.cmd[2];
    }
    if (isIntText(value)) {
      return "int";
    }
    return isFloatText(value) ? "float" : "str";
  }

  Kind randomKind() {
    // Late in the run, kinds not issued yet come first, so that every run covers every kind.
    if (ops_ > kOpsPerRun * 7 / 10 && rng_.chance(0.5)) {
      std::vector<Kind> missing;
      for (const auto& k : kinds()) {
        if (k.weight > 0 && kind_counts_.find(k.kind) == kind_counts_.end()) {
          missing.push_back(k.kind);
        }
      }
      if (!missing.empty()) {
        return missing[rng_.below(static_cast<int64_t>(missing.size()))];
      }
    }
    static const int total = [] {
      int sum = 0;
      for (const auto& k : kinds()) {
        sum += k.weight;
      }
      return sum;
    }();
    int64_t r = rng_.below(total);
    for (const auto& k : kinds()) {
      if (r < k.weight) {
        return k.kind;
      }
      r -= k.weight;
    }
    return Kind::SetPlain;
  }

  std::vector<Block> planBatch() {
    plan_.clear();
    plan_now_ = unixTimeMs();
    std::vector<Block> batch;
    int planned = 0;
    int db = current_db_;
    while (planned < kOpsPerBatch && ops_ + planned < kOpsPerRun) {
      if (rng_.chance(0.25)) {
        db = static_cast<int>(rng_.below(kDbs));
      }
      Block block;
      block.db = db;
      const int64_t r = rng_.below(100);
      block.type = r < 8 ? BlockType::Multi : r < 14 ? BlockType::Eval : BlockType::Single;
      const int wanted = block.type == BlockType::Single ? 1 : static_cast<int>(rng_.range(2, 5));
      for (int attempt = 0; attempt < 20 && static_cast<int>(block.ops.size()) < wanted;
           ++attempt) {
        auto op = makeOp(randomKind(), db);
        if (!op) {
          continue;
        }
        planTouch(*op, block.type != BlockType::Single);
        block.ops.push_back(std::move(*op));
      }
      if (block.ops.empty()) {
        continue;
      }
      if (block.type != BlockType::Single) {
        // The block's keys are not touched again in this batch once it is over.
        for (const auto& op : block.ops) {
          for (const auto& k : op.keys) {
            plan(db, k).locked = true;
          }
        }
      }
      planned += static_cast<int>(block.ops.size());
      batch.push_back(std::move(block));
    }
    return batch;
  }

  // ---- sending ----------------------------------------------------------------------------

  static void appendReads(std::vector<RespCommand>& out, const std::string& key) {
    out.push_back({"TYPE", key});
    out.push_back({"PEXPIRETIME", key});
    out.push_back({"DUMP", key});
    out.push_back({"GETRANGE", key, "0", "31"});
  }

  void sendBatch(const std::vector<Block>& batch) {
    std::vector<RespCommand> commands;
    for (const auto& block : batch) {
      if (block.db != current_db_) {
        commands.push_back({"SELECT", std::to_string(block.db)});
        current_db_ = block.db;
      }
      if (block.type == BlockType::Eval) {
        RespCommand eval = {"EVAL", kEvalScript, "0"};
        for (const auto& op : block.ops) {
          eval.push_back(std::to_string(op.cmd.size()));
          eval.insert(eval.end(), op.cmd.begin(), op.cmd.end());
          eval.push_back(std::to_string(op.keys.size()));
          eval.insert(eval.end(), op.keys.begin(), op.keys.end());
        }
        commands.push_back(std::move(eval));
        continue;
      }
      if (block.type == BlockType::Multi) {
        commands.push_back({"MULTI"});
      }
      for (const auto& op : block.ops) {
        commands.push_back(op.cmd);
        for (const auto& k : op.keys) {
          appendReads(commands, k);
        }
      }
      if (block.type == BlockType::Multi) {
        commands.push_back({"EXEC"});
      }
    }
    const int64_t t_plan = plan_now_;
    const std::vector<RespValue> replies = conn_.pipeline(commands);
    const int64_t now = unixTimeMs();

    // Walk the replies in the same order.
    size_t r = 0;
    int db = -1;
    for (const auto& block : batch) {
      std::vector<RespValue> flat;
      if (replies.size() > r && db != block.db && commands[r][0] == "SELECT") {
        expectOk(replies[r++], "SELECT");
        ++selects_;
      }
      db = block.db;
      if (block.type == BlockType::Eval) {
        const RespValue& v = replies[r++];
        if (!v.isArray()) {
          throw std::runtime_error("EVAL answered " + v.toString());
        }
        flat = v.array();
        ++eval_blocks_;
      } else if (block.type == BlockType::Multi) {
        expectOk(replies[r++], "MULTI");
        size_t queued = 0;
        for (const auto& op : block.ops) {
          queued += 1 + 4 * op.keys.size();
        }
        for (size_t i = 0; i < queued; ++i) {
          const RespValue& q = replies[r++];
          if (q.type() != RespValue::Type::SimpleString || q.str() != "QUEUED") {
            throw std::runtime_error("MULTI: a command answered " + q.toString());
          }
        }
        const RespValue& exec = replies[r++];
        if (!exec.isArray()) {
          throw std::runtime_error("EXEC answered " + exec.toString());
        }
        flat = exec.array();
        ++multi_blocks_;
      } else {
        size_t n = 0;
        for (const auto& op : block.ops) {
          n += 1 + 4 * op.keys.size();
        }
        flat.assign(replies.begin() + static_cast<std::ptrdiff_t>(r),
                    replies.begin() + static_cast<std::ptrdiff_t>(r + n));
        r += n;
      }
      size_t f = 0;
      for (const auto& op : block.ops) {
        const RespValue reply = flat.at(f++);
        std::vector<Readback> after;
        for (const auto& k : op.keys) {
          after.push_back(parseReadback(flat.at(f), flat.at(f + 1), flat.at(f + 2), flat.at(f + 3),
                                        keyText({op.db, k})));
          f += 4;
        }
        interpret(op, block.type, reply, after, t_plan, now);
        ++ops_;
        ++kind_counts_[op.kind];
        if (block.type == BlockType::Multi) {
          ++multi_ops_;
        } else if (block.type == BlockType::Eval) {
          ++eval_ops_;
        } else {
          ++single_ops_;
        }
      }
    }
  }

  static void expectOk(const RespValue& v, const std::string& what) {
    if (v.type() != RespValue::Type::SimpleString || v.str() != "OK") {
      throw std::runtime_error(what + " answered " + v.toString());
    }
  }

  // ---- interpreting -----------------------------------------------------------------------

  /** The key's source deadline had passed: the source expired it (or will, lazily, before the
   * command that touches it): an expiration (§5). */
  void expireNow(const KeyId& id, SourceKey& s, int64_t now, const std::string& why) {
    model_.remove(id, RemoveCause::Expiration, now,
                  "source expiry of " + keyText(id) + " (deadline " + model_.rel(s.deadline) +
                      ", " + why + "; stream: DEL)");
    s.history.push_back("[" + model_.rel(now) + "] expired (deadline " + model_.rel(s.deadline) +
                        ", " + why + ")");
    s.exists = false;
    s.value = Value{};
    s.deadline = 0;
    s.shape = "none";
  }

  Value pastValue(const std::string& text) {
    scratch_conn_.select(15);
    scratch_conn_.command({"SET", "past-value", text});
    const RespValue dump = scratch_conn_.command({"DUMP", "past-value"});
    return Value{"string", dump.str()};
  }

  [[noreturn]] void semanticsError(const Op& op, const std::string& problem,
                                   const RespValue& reply) {
    throw std::runtime_error("source semantics: db" + std::to_string(op.db) + " " +
                             describeCommand(op.cmd) + " answered " + reply.toString() + ": " +
                             problem);
  }

  void interpret(const Op& op, BlockType block, const RespValue& reply,
                 const std::vector<Readback>& after, int64_t t_plan, int64_t now) {
    if (op.kind == Kind::FlushDb) {
      expectOk(reply, "FLUSHDB");
      for (auto& [id, s] : source_keys_) {
        if (id.first == op.db && s.exists) {
          s.history.push_back("[" + model_.rel(now) + "] FLUSHDB");
          s.exists = false;
          s.value = Value{};
          s.deadline = 0;
          s.shape = "none";
        }
      }
      model_.flush(op.db, now, "db" + std::to_string(op.db) + " FLUSHDB");
      return;
    }
    if (reply.isError() && !(op.kind == Kind::RestoreTtl || op.kind == Kind::RestoreAbs ||
                             op.kind == Kind::RestoreZero)) {
      semanticsError(op, "unexpected error (the generator should not issue it)", reply);
    }
    const std::string where = block == BlockType::Multi  ? " [in MULTI]"
                              : block == BlockType::Eval ? " [in EVAL]"
                                                         : "";
    const std::string what = "db" + std::to_string(op.db) + " " + describeCommand(op.cmd) + where;
    // Keys past their deadline expire first (lazily, or they already have).
    std::vector<SourceKey*> src;
    std::vector<SourceKey> before;
    for (const auto& k : op.keys) {
      const KeyId id{op.db, k};
      SourceKey& s = source_keys_[id];
      if (s.exists && s.deadline != 0 && s.deadline <= t_plan) {
        expireNow(id, s, now, "touched by " + describeCommand(op.cmd));
      }
      src.push_back(&s);
      before.push_back(s);
    }
    auto id = [&](size_t i) { return KeyId{op.db, op.keys[i]}; };
    countProbe(op, before, now);
    bool effect = true;
    auto replyInt = [&]() -> int64_t {
      if (!reply.isInteger()) {
        semanticsError(op, "expected an integer reply", reply);
      }
      return reply.integer();
    };
    auto check = [&](bool ok, const std::string& problem) {
      if (!ok) {
        semanticsError(op,
                       problem + " (before: " + describeSource(before[0]) +
                           "; after: " + describeReadback(after[0]) + ")",
                       reply);
      }
    };
    auto inPlace = [&]() {
      check(after[0].deadline == before[0].deadline || !after[0].value.exists(),
            "an in-place write changed the deadline");
      model_.write(id(0), WriteKind::InPlace, after[0].deadline, before[0].value, after[0].value,
                   now, what);
    };
    switch (op.kind) {
      case Kind::SetPlain:
      case Kind::SetNx:
      case Kind::SetXx:
      case Kind::SetGet:
      case Kind::SetNxEx:
      case Kind::SetEx:
      case Kind::SetPx:
      case Kind::SetExAt:
      case Kind::SetPxAt:
      case Kind::SetShort:
      case Kind::SetPxAtPast:
      case Kind::SetExCmd:
      case Kind::PSetEx: {
        const bool applied = op.cond == Cond::None || (op.cond == Cond::Nx && !before[0].exists) ||
                             (op.cond == Cond::Xx && before[0].exists);
        if (!op.with_get) {
          check(applied == (reply.type() == RespValue::Type::SimpleString),
                "SET applied (or not) against the model's expectation");
        }
        if (!applied) {
          effect = false;
          break;
        }
        const bool has_ttl =
            op.cmd[0] != "SET" || std::find_if(op.cmd.begin() + 3, op.cmd.end(), [](const auto& a) {
                                    return a == "EX" || a == "PX" || a == "EXAT" || a == "PXAT";
                                  }) != op.cmd.end();
        if (op.kind == Kind::SetPxAtPast) {
          // Written with a deadline in the past; the read-back already expired it (stream:
          // SET k v PXAT <past>, then DEL k).
          check(!after[0].value.exists(), "a past PXAT left a key");
          model_.write(id(0), WriteKind::Deadline, op.arg_deadline, before[0].value,
                       pastValue(op.past_value), now, what + " (stream: SET … PXAT <past>)");
          SourceKey& s = *src[0];
          s.exists = true;
          s.deadline = op.arg_deadline;
          expireNow(id(0), s, now, "read back at once");
          return;
        }
        check(after[0].value.type == "string", "SET left no string");
        if (has_ttl) {
          check(after[0].deadline != 0, "SET with a TTL left no deadline");
          if (op.arg_deadline != 0) {
            check(after[0].deadline == op.arg_deadline, "EXAT/PXAT deadline differs");
          }
          model_.write(id(0), WriteKind::Deadline, after[0].deadline, before[0].value,
                       after[0].value, now,
                       what + " (stream: SET … PXAT " + model_.rel(after[0].deadline) + ")");
        } else {
          check(after[0].deadline == 0, "SET without a TTL left a deadline");
          model_.write(id(0), WriteKind::NoDeadline, 0, before[0].value, after[0].value, now, what);
        }
        break;
      }
      case Kind::SetKeepTtl:
        check(after[0].deadline == before[0].deadline, "KEEPTTL changed the deadline");
        model_.write(id(0), WriteKind::KeepTtl, after[0].deadline, before[0].value, after[0].value,
                     now, what);
        break;
      case Kind::MSet:
      case Kind::MSetNx:
      case Kind::SetNxCmd:
      case Kind::GetSet: {
        bool applied = true;
        if (op.kind == Kind::MSetNx || op.kind == Kind::SetNxCmd) {
          bool none = true;
          for (const auto& b : before) {
            none = none && !b.exists;
          }
          applied = replyInt() == 1;
          check(applied == none, "MSETNX/SETNX applied against the model's expectation");
        }
        if (!applied) {
          effect = false;
          break;
        }
        for (size_t i = 0; i < op.keys.size(); ++i) {
          check(after[i].value.type == "string" && after[i].deadline == 0,
                "a plain write left a deadline or no string");
          model_.write(id(i), WriteKind::NoDeadline, 0, before[i].value, after[i].value, now,
                       what + (op.kind == Kind::GetSet ? " (stream: SET)" : ""));
        }
        break;
      }
      case Kind::GetExEx:
        check(before[0].exists, "GETEX on a missing key");
        check(after[0].deadline != 0, "GETEX EX left no deadline");
        model_.expireAt(id(0), after[0].deadline, now,
                        what + " (stream: PEXPIREAT " + model_.rel(after[0].deadline) + ")");
        break;
      case Kind::GetExPersist:
        if (before[0].deadline == 0) {
          effect = false;  // not propagated
          break;
        }
        check(after[0].deadline == 0, "GETEX PERSIST left a deadline");
        model_.persist(id(0), now, what + " (stream: PERSIST)");
        break;
      case Kind::GetDel:
        check(!after[0].value.exists(), "GETDEL left the key");
        model_.remove(id(0), RemoveCause::Deletion, now, what + " (stream: DEL)");
        break;
      case Kind::SUnionStore:
      case Kind::ZUnionStore:
        check(replyInt() > 0 && after[0].deadline == 0, "*STORE left no key or a deadline");
        model_.write(id(0), WriteKind::NoDeadline, 0, before[0].value, after[0].value, now, what);
        break;
      case Kind::Expire:
      case Kind::PExpire:
      case Kind::ExpireAt:
      case Kind::PExpireAt:
      case Kind::PExpireShort:
        if (replyInt() == 0) {
          effect = false;
          break;
        }
        check(after[0].value.exists() && after[0].deadline != 0, "EXPIRE left no deadline");
        if (op.arg_deadline != 0) {
          check(after[0].deadline == op.arg_deadline, "EXPIREAT deadline differs");
        }
        model_.expireAt(id(0), after[0].deadline, now,
                        what + " (stream: PEXPIREAT " + model_.rel(after[0].deadline) + ")");
        break;
      case Kind::ExpirePast:
        check(replyInt() == 1 && !after[0].value.exists(), "a past EXPIRE left the key");
        // A deletion: the key's known deadline (if any) had not passed (§5).
        model_.remove(id(0), RemoveCause::Deletion, now, what + " (stream: DEL)");
        break;
      case Kind::Persist:
        if (replyInt() == 0) {
          effect = false;
          break;
        }
        model_.persist(id(0), now, what);
        break;
      case Kind::Incr:
      case Kind::IncrBy:
      case Kind::Append:
      case Kind::SetRange:
      case Kind::HSet:
      case Kind::HIncrBy:
      case Kind::LPush:
      case Kind::RPush:
      case Kind::XAdd:
      case Kind::ZIncrBy:
        inPlace();
        break;
      case Kind::IncrByFloat:
        // Reaches the stream as SET k <value> KEEPTTL: the target keeps its deadline.
        check(after[0].deadline == before[0].deadline, "INCRBYFLOAT changed the deadline");
        model_.write(id(0), WriteKind::KeepTtl, after[0].deadline, before[0].value, after[0].value,
                     now, what + " (stream: SET … KEEPTTL)");
        break;
      case Kind::HDel:
      case Kind::SAdd:
      case Kind::SRem:
      case Kind::ZRem:
      case Kind::PfAdd:
      case Kind::ZAdd:
        if (replyInt() == 0) {
          effect = false;  // nothing changed: not propagated
          break;
        }
        inPlace();
        break;
      case Kind::LPop:
      case Kind::SPop:
        if (reply.isNull()) {
          effect = false;
          break;
        }
        inPlace();
        break;
      case Kind::LSet:
        expectOk(reply, "LSET");
        inPlace();
        break;
      case Kind::SPopAll:
        check(before[0].exists && !after[0].value.exists(), "SPOP all left the set");
        model_.remove(id(0), RemoveCause::Deletion, now, what + " (stream: DEL)");
        break;
      case Kind::RestoreTtl:
      case Kind::RestoreAbs:
      case Kind::RestoreZero: {
        const bool replace = std::find(op.cmd.begin(), op.cmd.end(), "REPLACE") != op.cmd.end();
        const bool ok = reply.type() == RespValue::Type::SimpleString && reply.str() == "OK";
        check(ok == (replace || !before[0].exists), "RESTORE answered unexpectedly");
        if (!ok) {
          effect = false;
          break;
        }
        if (op.kind == Kind::RestoreZero) {
          check(after[0].deadline == 0, "RESTORE 0 left a deadline");
          model_.write(id(0), WriteKind::NoDeadline, 0, before[0].value, after[0].value, now, what);
        } else {
          check(after[0].value.exists() && after[0].deadline != 0, "RESTORE left no deadline");
          if (op.arg_deadline != 0) {
            check(after[0].deadline == op.arg_deadline, "RESTORE ABSTTL deadline differs");
          }
          model_.write(
              id(0), WriteKind::Deadline, after[0].deadline, before[0].value, after[0].value, now,
              what + " (stream: RESTORE … " + model_.rel(after[0].deadline) + " … ABSTTL)");
        }
        break;
      }
      case Kind::Rename:
      case Kind::Copy: {
        const bool keep = op.kind == Kind::Copy;
        bool ok = keep ? replyInt() == 1
                       : reply.type() == RespValue::Type::SimpleString && reply.str() == "OK";
        if (keep) {
          const bool replace = op.cmd.size() > 3;
          check(ok == (before[0].exists && (replace || !before[1].exists)),
                "COPY answered unexpectedly");
        }
        if (!ok) {
          effect = false;
          break;
        }
        check(
            after[1].value.type == before[0].value.type && after[1].deadline == before[0].deadline,
            "RENAME/COPY: the destination differs from the source key");
        model_.move(id(0), id(1), before[0].deadline, before[0].value, after[1].value, keep, now,
                    what);
        break;
      }
      case Kind::Del:
      case Kind::Unlink:
      case Kind::DelMulti:
      case Kind::UnlinkMulti: {
        int64_t removed = 0;
        for (size_t i = 0; i < op.keys.size(); ++i) {
          if (before[i].exists) {
            ++removed;
            model_.remove(id(i), RemoveCause::Deletion, now, what);
          } else {
            model_.note(id(i), "[" + model_.rel(now) + "] " + what +
                                   " -> no key on the source: nothing for this key");
          }
        }
        check(replyInt() == removed, "DEL removed another number of keys");
        effect = removed > 0;
        break;
      }
      case Kind::FlushDb:
        break;
    }
    if (!effect) {
      ++no_effect_;
    }
    // The source's new state.
    for (size_t i = 0; i < op.keys.size(); ++i) {
      SourceKey& s = *src[i];
      const Readback& a = after[i];
      const bool unchanged =
          !effect && a.value.type == before[i].value.type && a.deadline == before[i].deadline;
      s.exists = a.value.exists();
      // A command without effect leaves the value as it was; keep the payload the model holds
      // (a hashtable may serialize in another order between two DUMPs).
      s.value = unchanged ? before[i].value : a.value;
      s.deadline = a.deadline;
      s.shape = a.shape;
      s.last_touch_ms = now;
      s.history.push_back("[" + model_.rel(now) + "] " + what + " -> " + reply.toString() +
                          "; source now " + describeReadback(a));
      if (s.history.size() > 40) {
        s.history.erase(s.history.begin());
      }
      if (!effect) {
        model_.note(id(i), "[" + model_.rel(now) + "] " + what +
                               " -> no effect on the source: nothing propagated");
      }
    }
  }

  /**
   * A conditional command (NX/XX without a TTL, SETNX, MSETNX, RESTORE without REPLACE, COPY
   * without REPLACE) reaches the stream with its condition, which the target judges on its own
   * copy. Where that copy's presence differs from the source's (kept by a filter, a flush not
   * replicated, ended early by the clamp), forwarding the command verbatim would not write what
   * the source wrote. The specification says these are written (§4 table); count them so that
   * a clean run shows they were exercised.
   */
  void countProbe(const Op& op, const std::vector<SourceKey>& before, int64_t now) {
    const bool set_cond = (op.kind == Kind::SetNx || op.kind == Kind::SetXx) &&
                          std::find(op.cmd.begin(), op.cmd.end(), "PX") == op.cmd.end();
    const bool restore = (op.kind == Kind::RestoreTtl || op.kind == Kind::RestoreAbs ||
                          op.kind == Kind::RestoreZero) &&
                         std::find(op.cmd.begin(), op.cmd.end(), "REPLACE") == op.cmd.end();
    const bool copy = op.kind == Kind::Copy && op.cmd.size() == 3;
    if (!(set_cond || restore || copy || op.kind == Kind::SetNxCmd || op.kind == Kind::MSetNx)) {
      return;
    }
    const size_t first = copy ? 1 : 0;
    for (size_t i = first; i < op.keys.size(); ++i) {
      const KeyId key{op.db, op.keys[i]};
      if (!model_.targetOf(key)) {
        continue;
      }
      const TargetKey* t = model_.targetKey(key);
      const bool target_has = t != nullptr && t->presentAt(now);
      if (target_has != before[i].exists) {
        ++probes_[kindName(op.kind)];
        model_.note(key, "[" + model_.rel(now) + "] probe: the target " +
                             (target_has ? "holds" : "lacks") + " a copy the source " +
                             (before[i].exists ? "holds" : "lacks"));
      }
    }
  }

  std::string describeSource(const SourceKey& s) const {
    if (!s.exists) {
      return "no key";
    }
    return s.value.type + " (" + s.shape + "), deadline " +
           (s.deadline == 0 ? "none" : model_.rel(s.deadline));
  }

  std::string describeReadback(const Readback& r) const {
    if (!r.value.exists()) {
      return "no key";
    }
    return r.value.type + " (" + r.shape + "), deadline " +
           (r.deadline == 0 ? "none" : model_.rel(r.deadline));
  }

  const RunConfig& config_;
  ExpiryModel model_;
  Rng rng_;
  RespClient conn_;
  RespClient target_conn_;
  RespClient scratch_conn_;
  int current_db_ = 0;
  int64_t epoch_ = 0;
  int64_t plan_now_ = 0;
  std::map<KeyId, PlanKey> plan_;
  std::map<KeyId, SourceKey> source_keys_;
  std::map<Kind, int64_t> kind_counts_;
  std::map<std::string, int64_t> probes_;
  int64_t ops_ = 0;
  int64_t single_ops_ = 0;
  int64_t multi_blocks_ = 0;
  int64_t multi_ops_ = 0;
  int64_t eval_blocks_ = 0;
  int64_t eval_ops_ = 0;
  int64_t selects_ = 0;
  int64_t no_effect_ = 0;
  int64_t own_writes_ = 0;
  int own_step_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Reading a server and comparing it with the model

ValueKind kindForType(const std::string& type) {
  if (type == "hash") {
    return ValueKind::HashSmall;
  }
  if (type == "list") {
    return ValueKind::List;
  }
  if (type == "set") {
    return ValueKind::SetStrings;
  }
  if (type == "zset") {
    return ValueKind::ZsetSmall;
  }
  if (type == "stream") {
    return ValueKind::Stream;
  }
  return ValueKind::StringEmbstr;
}

/** Canonical states of `names` in `db`: TYPE first, then the reader for that type. */
std::vector<KeyState> readStates(RespClient& client, int db,
                                 const std::vector<std::string>& names) {
  client.select(db);
  std::vector<RespCommand> types;
  for (const auto& n : names) {
    types.push_back({"TYPE", n});
  }
  const auto replies = client.pipeline(types);
  std::vector<DatasetKey> keys(names.size());
  std::vector<const DatasetKey*> pointers;
  for (size_t i = 0; i < names.size(); ++i) {
    keys[i].db = db;
    keys[i].key = names[i];
    keys[i].kind =
        kindForType(replies[i].type() == RespValue::Type::SimpleString ? replies[i].str() : "none");
    pointers.push_back(&keys[i]);
  }
  return readKeyStates(client, db, pointers);
}

/** Every key of every non-empty db of a server (SCAN skips logically expired keys). */
std::map<int, std::set<std::string>> scanAll(RespClient& client) {
  std::map<int, std::set<std::string>> out;
  for (int db = 0; db < 16; ++db) {
    client.select(db);
    std::string cursor = "0";
    for (int i = 0; i < 100000; ++i) {
      const RespValue reply = client.command({"SCAN", cursor, "COUNT", "1000"});
      cursor = reply.array()[0].str();
      for (const auto& k : reply.array()[1].array()) {
        if (!isAgentMarkerKey(k.str())) out[db].insert(k.str());
      }
      if (cursor == "0") {
        break;
      }
    }
  }
  return out;
}

std::string shorten(const std::string& text, size_t n = 160) {
  return text.size() <= n ? text : text.substr(0, n) + "...";
}

/**
 * Compares `server` with the model at the time of the call: every modelled target key and every
 * key found on the server. `scratch` is an empty server used to render the expected values the
 * same way as the actual ones (the model holds DUMP payloads).
 */
CheckResult compareWithModel(RespClient& server, RespClient& scratch, const ExpiryModel& model,
                             const std::string& label) {
  CheckResult result;
  const int64_t check_start = unixTimeMs();
  std::map<int, std::set<std::string>> names = scanAll(server);
  for (const auto& [id, t] : model.targets()) {
    names[id.first].insert(id.second);
  }
  // Expected values rendered by the scratch server.
  scratch.command({"FLUSHALL"});
  for (const auto& [id, t] : model.targets()) {
    if (t.exists && t.value_known && t.value.exists()) {
      scratch.select(id.first);
      const RespValue r = scratch.command({"RESTORE", id.second, "0", t.value.payload, "REPLACE"});
      if (r.isError()) {
        throw std::runtime_error("scratch RESTORE of " + keyText(id) + ": " + r.toString());
      }
    }
  }
  std::map<KeyId, KeyState> actual;
  std::map<KeyId, KeyState> expected;
  for (const auto& [db, set] : names) {
    const std::vector<std::string> list(set.begin(), set.end());
    auto states = readStates(server, db, list);
    auto wanted = readStates(scratch, db, list);
    for (size_t i = 0; i < list.size(); ++i) {
      actual[{db, list[i]}] = states[i];
      expected[{db, list[i]}] = wanted[i];
    }
  }
  const int64_t check_end = unixTimeMs();
  std::map<int, int64_t> sure_present;
  std::map<int, int64_t> maybe_present;
  auto rel = [&](int64_t abs) { return model.rel(abs); };
  for (const auto& [id, a] : actual) {
    ++result.keys;
    auto it = model.targets().find(id);
    const bool modelled = it != model.targets().end();
    const bool is_present = a.type != "none";
    std::string problem;
    if (!modelled) {
      if (is_present) {
        problem = "unexpected key on " + label + " (" + a.type + ", " + shorten(a.contents, 80) +
                  "): the model never wrote it here";
      }
      ++result.absent;
    } else {
      const TargetKey& t = it->second;
      // Presence: certain, or ambiguous near the check (±kAmbiguousMs), or because a source
      // expiration may not have been applied yet.
      const bool deadline_near = t.exists && t.deadline != 0 &&
                                 t.deadline > check_start - kAmbiguousMs &&
                                 t.deadline <= check_end + kAmbiguousMs;
      const bool ambiguous = deadline_near || (t.exists && t.removal_ambiguous);
      const bool expect_present = t.presentAt(check_end) && !ambiguous;
      if (!t.value_known) {
        ++result.value_unknown;
      }
      if (ambiguous) {
        ++result.ambiguous;
        ++maybe_present[id.first];
      } else if (expect_present) {
        ++result.present;
        ++sure_present[id.first];
      } else {
        ++result.absent;
      }
      const KeyState& e = expected[id];
      auto valueProblem = [&]() -> std::string {
        if (!t.value_known) {
          return "";
        }
        if (a.type != t.value.type) {
          return "type " + a.type + ", expected " + t.value.type;
        }
        if (a.contents != e.contents) {
          return "value " + shorten(a.contents) + ", expected " + shorten(e.contents);
        }
        return "";
      };
      // A key that is there has a deterministic value and deadline, whether or not its
      // presence was certain.
      auto presentProblem = [&]() {
        std::string p = valueProblem();
        std::string deadline_problem;
        if (t.deadline == 0) {
          if (a.pexpiretime != -1) {
            deadline_problem = "deadline " + rel(a.pexpiretime) + ", expected none";
          }
        } else if (a.pexpiretime == -1 || a.pexpiretime < t.deadline - kToleranceMs ||
                   a.pexpiretime > t.deadline + kToleranceMs) {
          deadline_problem =
              "deadline " + (a.pexpiretime == -1 ? std::string("none") : rel(a.pexpiretime)) +
              ", expected " + rel(t.deadline) + " ±" + std::to_string(kToleranceMs) + "ms";
        }
        if (!deadline_problem.empty()) {
          p += (p.empty() ? "" : "; ") + deadline_problem;
        }
        return p;
      };
      if (expect_present) {
        if (!is_present) {
          problem = "missing on " + label + " (expected " + t.value.type + ", deadline " +
                    (t.deadline == 0 ? "none" : rel(t.deadline)) + ")";
        } else {
          problem = presentProblem();
        }
      } else if (ambiguous) {
        if (is_present) {
          problem = presentProblem();
          if (!problem.empty()) {
            problem += " (presence was ambiguous near the check)";
          }
        }
      } else if (is_present) {
        problem = "present on " + label + " (" + a.type + ", deadline " +
                  (a.pexpiretime == -1 ? std::string("none") : rel(a.pexpiretime)) + ", " +
                  shorten(a.contents, 80) + "), expected absent" +
                  (t.exists ? " (its deadline " + rel(t.deadline) + " has passed)" : "");
      }
    }
    if (!problem.empty()) {
      result.differences.push_back({id, problem});
    }
  }
  // DBSIZE after the reads (which expired the logically expired keys on a master).
  std::ostringstream dbsizes;
  std::set<int> dbs;
  for (const auto& [db, n] : names) {
    dbs.insert(db);
  }
  for (int db : dbs) {
    server.select(db);
    const int64_t size = dataDbSize(server);
    const int64_t lo = sure_present[db];
    const int64_t hi = lo + maybe_present[db];
    dbsizes << " db" << db << "=" << size << " (model " << lo;
    if (hi != lo) {
      dbsizes << ".." << hi;
    }
    dbsizes << ")";
    if (size < lo || size > hi) {
      result.differences.push_back(
          {{db, "(DBSIZE)"},
           "DBSIZE " + std::to_string(size) + ", the model has " + std::to_string(lo) +
               (hi != lo ? ".." + std::to_string(hi) : "") + " present keys"});
    }
  }
  result.dbsizes = dbsizes.str();
  return result;
}

/** The first differences with the history of each key (model and source side). */
std::string describeDifferences(const CheckResult& result, const DifferentialRun& run) {
  std::ostringstream out;
  const ExpiryModel& model = run.model();
  size_t shown = 0;
  for (const auto& d : result.differences) {
    if (shown++ >= kMaxReported) {
      out << "  ... " << result.differences.size() - kMaxReported << " more\n";
      break;
    }
    out << "  * target " << keyText(d.target) << ": " << d.problem << "\n";
    if (d.target.second == "(DBSIZE)") {
      continue;
    }
    out << "    " << model.describeMaxTtl(d.target) << "\n";
    auto it = model.targets().find(d.target);
    if (it != model.targets().end()) {
      const auto& h = it->second.history;
      out << "    model (target side):\n";
      for (size_t i = h.size() > kHistoryShown ? h.size() - kHistoryShown : 0; i < h.size(); ++i) {
        out << "      " << shorten(h[i], 400) << "\n";
      }
    }
    // The source keys that map to this target key.
    for (const auto& [id, s] : run.sourceKeys()) {
      auto target = model.targetOf(id);
      if (!target || *target != d.target) {
        continue;
      }
      out << "    source " << keyText(id) << ":\n";
      for (size_t i = s.history.size() > kHistoryShown ? s.history.size() - kHistoryShown : 0;
           i < s.history.size(); ++i) {
        out << "      " << shorten(s.history[i], 400) << "\n";
      }
    }
  }
  return out.str();
}

// ---------------------------------------------------------------------------------------------

struct RunParam {
  size_t config = 0;
  uint64_t seed = 0;
};

std::vector<RunParam> allRuns() {
  std::vector<RunParam> runs;
  for (size_t c = 0; c < runConfigs().size(); ++c) {
    for (int s = 1; s <= kSeeds; ++s) {
      runs.push_back({c, static_cast<uint64_t>(s)});
    }
  }
  return runs;
}

std::string runName(const ::testing::TestParamInfo<RunParam>& info) {
  return runConfigs()[info.param.config].model.name + "_seed" + std::to_string(info.param.seed);
}

class DifferentialTest : public ::testing::TestWithParam<RunParam> {
 protected:
  void TearDown() override {
    if (HasFailure() && agent_) {
      std::cerr << "---- config " << config_path_ << "\n"
                << readFileText(config_path_) << "---- agent " << agent_->describeState()
                << ", log " << agent_->logPath() << " (tail)\n"
                << agent_->logTail(40) << "\n";
    }
    agent_.reset();
    wan_.reset();
    replica_.reset();
    target_.reset();
    scratch_.reset();
    source_.reset();
    dir_.reset();
  }

  /** Until the source lists `n` replicas online and (with `offsets`) all at its offset. */
  bool waitForReplicas(size_t n, bool offsets, std::chrono::milliseconds timeout,
                       std::string* last) {
    RespClient c = source_->client();
    bool agent_ended = false;
    const bool ok = waitUntil(
        [&] {
          if (!agent_->running()) {
            agent_ended = true;
            return true;
          }
          auto info = c.info("replication");
          auto replicas = replicasOf(info);
          const int64_t master = std::stoll(info["master_repl_offset"]);
          *last = "master_repl_offset " + std::to_string(master);
          bool ok = replicas.size() == n;
          for (const auto& r : replicas) {
            *last += ", " + r.name + " port=" + std::to_string(r.port) + " state=" + r.state +
                     " offset=" + std::to_string(r.offset);
            ok = ok && r.state == "online" && (!offsets || r.offset == master);
          }
          return ok;
        },
        timeout, 100ms);
    if (agent_ended) {
      *last = "the agent is no longer running (" + agent_->describeState() + ")";
      return false;
    }
    return ok;
  }

  /**
   * Touches every source key (the source expires and propagates whatever is due), waits until
   * the agent (and the native replica) acknowledged the whole stream, and compares the target
   * with the model; in the plain configuration also the native replica and the source (a
   * validation of the model itself).
   */
  void settleAndCompare(DifferentialRun& run, const std::string& phase) {
    const int64_t touch_ms = unixTimeMs();
    {
      RespClient c = source_->client();
      std::map<int, std::vector<RespCommand>> touches;
      for (const auto& id : run.sourceKeyIds()) {
        touches[id.first].push_back({"EXISTS", id.second});
      }
      for (const auto& [db, commands] : touches) {
        c.select(db);
        c.pipeline(commands);
      }
    }
    std::string last;
    const auto wait_start = std::chrono::steady_clock::now();
    if (!waitForReplicas(replicas_, true, kCatchUpTimeout, &last)) {
      ADD_FAILURE() << phase << ": the agent did not acknowledge the source's whole stream within "
                    << std::chrono::duration_cast<std::chrono::seconds>(kCatchUpTimeout).count()
                    << " s: " << last << "\nagent " << agent_->describeState() << "\n"
                    << agent_->logTail(30);
      throw std::runtime_error("the agent did not catch up (" + phase + ")");
    }
    const auto caught_up = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - wait_start);
    run.settleExpirations(touch_ms, unixTimeMs());

    RespClient scratch = scratch_->client();
    const std::string name =
        runConfigs()[GetParam().config].model.name + " seed " + std::to_string(GetParam().seed);
    if (replica_) {
      RespClient native = replica_->client();
      const CheckResult r = compareWithModel(native, scratch, run.model(), "the native replica");
      std::cout << "[ native   ] " << phase << ": " << r.keys
                << " keys compared with the native replica, " << r.differences.size()
                << " differences; DBSIZE" << r.dbsizes << "\n";
      EXPECT_TRUE(r.differences.empty())
          << phase << ": the MODEL disagrees with a native replica (a model bug):\n"
          << describeDifferences(r, run);
      RespClient src = source_->client();
      const CheckResult s = compareWithModel(src, scratch, run.model(), "the source");
      std::cout << "[ source   ] " << phase << ": " << s.keys << " keys compared with the source, "
                << s.differences.size() << " differences\n";
      EXPECT_TRUE(s.differences.empty())
          << phase << ": the MODEL disagrees with the source (a model bug):\n"
          << describeDifferences(s, run);
    }
    RespClient target = target_->client();
    const CheckResult result = compareWithModel(target, scratch, run.model(), "the target");
    std::cout << "[ check    ] " << phase << " (agent caught up in " << caught_up.count()
              << " ms): " << result.keys << " target keys compared: " << result.present
              << " present, " << result.absent << " absent, " << result.ambiguous
              << " ambiguous near the check, " << result.value_unknown
              << " value unknown (deadline only); DBSIZE" << result.dbsizes << "; "
              << result.differences.size() << " differences\n";
    EXPECT_TRUE(result.differences.empty())
        << name << " " << phase << ": " << result.differences.size()
        << " differences between the target and the model (first " << kMaxReported << "):\n"
        << describeDifferences(result, run);
    run.model().clearRemovalAmbiguity();
  }

  std::unique_ptr<TempDir> dir_;
  std::unique_ptr<RedisServer> source_;
  std::unique_ptr<RedisServer> target_;
  std::unique_ptr<RedisServer> scratch_;
  std::unique_ptr<RedisServer> replica_;
  std::unique_ptr<AgentProcess> agent_;
  std::unique_ptr<WanProxy> wan_;  // a lagging target's (RunConfig::target_delay_ms)
  std::string config_path_;
  size_t replicas_ = 1;
  int stops_ = 0;  // how often the agent was stopped (RunConfig::agent_stopped_ms)
};

TEST_P(DifferentialTest, TargetMatchesModel) {
  const RunConfig config = runConfigs()[GetParam().config];
  const uint64_t seed = GetParam().seed;
  dir_ = std::make_unique<TempDir>("xdcr-differential");
  source_ = std::make_unique<RedisServer>(
      std::vector<std::string>{"--repl-diskless-sync-delay", "0", "--repl-backlog-size", "64mb"});
  target_ = std::make_unique<RedisServer>();
  scratch_ = std::make_unique<RedisServer>();
  config_path_ = dir_->file("xdcr.yaml");
  // Where the agent is stopped or its target lags, its restore counters say whether §12 was
  // exercised at all.
  const bool sliding = config.agent_stopped_ms > 0 || config.target_delay_ms > 0;
  const std::string admin = sliding ? "127.0.0.1:" + std::to_string(freePort()) : "";
  // A lagging target: no delay until the agent is attached (its handshake with the target is
  // a few round trips), then target_delay_ms each way.
  if (config.target_delay_ms > 0) wan_ = WanProxy::start(target_->port(), {.name = "target"});
  writeFileText(config_path_, agentYaml(config.model, dir_->file("state"), source_->port(),
                                        wan_ ? wan_->port() : target_->port(), admin));
  agent_ = std::make_unique<AgentProcess>(config_path_, dir_->file("agent.log"));
  replicas_ = 1;
  if (config.native_replica) {
    replica_ = std::make_unique<RedisServer>();
    const RespValue r =
        replica_->client().command({"REPLICAOF", "127.0.0.1", std::to_string(source_->port())});
    ASSERT_FALSE(r.isError()) << r.toString();
    replicas_ = 2;
  }
  std::string last;
  ASSERT_TRUE(waitForReplicas(replicas_, false, kAttachTimeout, &last))
      << "the agent" << (replica_ ? " and the native replica" : "")
      << " did not come online as replicas of the source: " << last << "\nagent "
      << agent_->describeState() << "\n"
      << agent_->logTail(30);
  if (wan_) wan_->setDelay(std::chrono::milliseconds(config.target_delay_ms));

  DifferentialRun run(config, seed, *source_, *target_, *scratch_);
  try {
    // Half-way, the run pauses for a first comparison: errors that later writes would
    // overwrite are seen there.
    run.generate([&] { settleAndCompare(run, "mid-run"); },
                 [&](bool stop) {
                   ASSERT_EQ(::kill(agent_->pid(), stop ? SIGSTOP : SIGCONT), 0);
                   stops_ += stop ? 1 : 0;
                 });
  } catch (const std::exception& e) {
    FAIL() << "the run stopped: " << e.what();
  }
  // Let the short deadlines pass before the final comparison.
  std::this_thread::sleep_for(700ms);

  const ExpiryModel::Stats& st = run.model().stats();
  std::cout << "[ run      ] " << config.model.name << " seed " << seed << ": " << run.summary()
            << "\n[ kinds    ]" << run.kindCounts() << "\n[ model    ] writes " << st.writes
            << ", expired on arrival " << st.expired_on_arrival << ", deletions " << st.deletions
            << " (dropped " << st.deletions_dropped << "), expirations " << st.expirations
            << " (dropped " << st.expirations_dropped << "), expiry changes " << st.expiry_changes
            << ", dropped by key/db " << st.dropped_by_key_or_db << ", flushes " << st.flushes
            << " (not replicated " << st.flushes_dropped << ")\n[ probes   ] conditional "
            << "commands judged on a different target copy:" << run.probes() << "\n";
  EXPECT_GE(run.ops(), kOpsPerRun);
  const auto missing = run.missingKinds();
  EXPECT_TRUE(missing.empty()) << "command kinds never issued in this run: "
                               << ::testing::PrintToString(missing);
  try {
    settleAndCompare(run, "final");
  } catch (const std::exception& e) {
    FAIL() << "the final comparison stopped: " << e.what();
  }
  if (!admin.empty()) {
    // The stops must have made the target restore copies, or this configuration tests nothing
    // beyond "plain".
    auto m = replicator::adminGet(admin, "/pipelines/p/restores", 5s);
    ASSERT_TRUE(m && m->first == 200) << (m ? m->second : m.error().message);
    const uint64_t restored = nlohmann::json::parse(m->second).value("restored_total", uint64_t{0});
    if (config.agent_stopped_ms > 0) {
      std::cout << "[ stopped  ] the agent was stopped " << stops_ << " times for "
                << config.agent_stopped_ms << " ms; target copies restored: " << restored << "\n";
      EXPECT_EQ(stops_, 2);
    } else {
      std::cout << "[ lagging  ] the target " << config.target_delay_ms
                << " ms behind each way; target copies restored: " << restored << "\n";
    }
    EXPECT_GT(restored, 0u) << "no target copy ended before a later write: the "
                            << (config.agent_stopped_ms > 0 ? "stops" : "lag")
                            << " exercised nothing";
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, DifferentialTest, ::testing::ValuesIn(allRuns()), runName);

// ---------------------------------------------------------------------------------------------
// The model alone, on the spec's vectors (expiry-semantics.md §9), before it judges the agent.

TEST(DifferentialModelTest, ReproducesSpecVectors) {
  const int64_t now = 1'000'000'000'000;
  const int64_t s = 1000;
  EXPECT_EQ(ExpiryModel::clamp(0, 0, now), 0);                                 // 1
  EXPECT_EQ(ExpiryModel::clamp(0, 600 * s, now), now + 600 * s);               // 2
  EXPECT_EQ(ExpiryModel::clamp(0, 60 * s, now), now + 60 * s);                 // 3
  EXPECT_EQ(ExpiryModel::clamp(now + 30 * s, 60 * s, now), now + 30 * s);      // 4
  EXPECT_EQ(ExpiryModel::clamp(now + 300 * s, 60 * s, now), now + 60 * s);     // 5
  EXPECT_EQ(ExpiryModel::clamp(now + 300 * s, 600 * s, now), now + 300 * s);   // 6
  EXPECT_EQ(ExpiryModel::clamp(now + 900 * s, 600 * s, now), now + 600 * s);   // 7
  EXPECT_EQ(ExpiryModel::clamp(now + 900 * s, 1000 * s, now), now + 900 * s);  // 8, 9

  ModelConfig c;
  c.buckets = {{0, 60, {{"big", "big:*", 1000}, {"inh", "inh:*", 0}}}, {1, 0, {{"s", "s:*", 60}}}};
  c.key_rewrite = {{"x:", "s:"}};
  c.dbs = {{0, 0}, {3, 1}};
  c.exclude_keys = {"_x_"};
  ExpiryModel m(c);
  EXPECT_EQ(m.maxTtlMs({0, "big:1"}), 1000 * s);  // vector 9: the collection overrides
  EXPECT_EQ(m.maxTtlMs({0, "inh:1"}), 60 * s);    // max_ttl 0 inherits the bucket's
  EXPECT_EQ(m.maxTtlMs({0, "k:1"}), 60 * s);
  EXPECT_EQ(m.maxTtlMs({1, "k:1"}), 0);
  EXPECT_EQ(m.targetOf({3, "x:1"}), (KeyId{1, "s:1"}));    // dbs map, then rewrite
  EXPECT_EQ(m.maxTtlMs(*m.targetOf({3, "x:1"})), 60 * s);  // collection of the target name
  EXPECT_FALSE(m.targetOf({1, "k:1"}).has_value());        // unmapped db
  EXPECT_FALSE(m.targetOf({0, "k:_x_1"}).has_value());     // excluded (unanchored)

  const Value v1{"string", "payload-1"};
  const Value v2{"hash", "payload-2"};
  // Vector 13: PERSIST into a maxTTL collection gives now+M; vector 14: PERSIST with M = 0.
  m.write({3, "x:p"}, WriteKind::Deadline, now + 30 * s, Value{}, v1, now, "SET PXAT");
  m.persist({3, "x:p"}, now + 10 * s, "PERSIST");
  EXPECT_EQ(m.targetKey({3, "x:p"})->deadline, now + 70 * s);
  m.write({3, "k:p"}, WriteKind::Deadline, now + 30 * s, Value{}, v1, now, "SET PXAT");
  m.persist({3, "k:p"}, now, "PERSIST");
  EXPECT_EQ(m.targetKey({3, "k:p"})->deadline, 0);
  // Vectors 15/16: an in-place write extends to now+M, bounded by the source deadline.
  m.write({3, "x:h"}, WriteKind::NoDeadline, 0, Value{}, v2, now - 10 * s, "HSET");
  EXPECT_EQ(m.targetKey({3, "x:h"})->deadline, now + 50 * s);
  m.write({3, "x:h"}, WriteKind::InPlace, 0, v2, v2, now, "HSET");
  EXPECT_EQ(m.targetKey({3, "x:h"})->deadline, now + 60 * s);
  m.write({3, "x:h"}, WriteKind::InPlace, now + 20 * s, v2, v2, now, "HSET");
  EXPECT_EQ(m.targetKey({3, "x:h"})->deadline, now + 20 * s);
  // Vector 17: a past deadline is expired on arrival.
  m.write({3, "k:e"}, WriteKind::Deadline, now - s, Value{}, v1, now, "SET PXAT past");
  EXPECT_FALSE(m.targetKey({3, "k:e"})->presentAt(now));
  // Vector 18: KEEPTTL keeps the target's deadline.
  m.write({3, "x:k"}, WriteKind::Deadline, now + 40 * s, Value{}, v1, now, "SET PXAT");
  m.write({3, "x:k"}, WriteKind::KeepTtl, 0, v1, v1, now + 5 * s, "SET KEEPTTL");
  EXPECT_EQ(m.targetKey({3, "x:k"})->deadline, now + 40 * s);
  // RENAME: the destination gets clamp(source deadline) under its own collection.
  m.write({0, "k:r"}, WriteKind::Deadline, now + 900 * s, Value{}, v1, now, "SET PXAT");
  EXPECT_EQ(m.targetKey({0, "k:r"})->deadline, now + 60 * s);
  m.move({0, "k:r"}, {0, "big:r"}, now + 900 * s, v1, v1, false, now, "RENAME");
  EXPECT_EQ(m.targetKey({0, "big:r"})->deadline, now + 900 * s);
  EXPECT_FALSE(m.targetKey({0, "k:r"})->presentAt(now));
}

TEST(DifferentialModelTest, DeletionFilters) {
  const int64_t now = 1'000'000'000'000;
  const Value v{"string", "p"};
  ModelConfig c;
  c.drop_expirations = true;
  ExpiryModel m(c);
  // Vector 19/22: an expiration is not sent; a deletion is.
  m.write({0, "a"}, WriteKind::Deadline, now + 100, Value{}, v, now, "SET a PXAT");
  m.write({0, "b"}, WriteKind::NoDeadline, 0, Value{}, v, now, "SET b");
  m.remove({0, "a"}, RemoveCause::Expiration, now + 200, "expiry of a");
  m.remove({0, "b"}, RemoveCause::Deletion, now + 200, "DEL a b");
  EXPECT_TRUE(m.targetKey({0, "a"})->exists);
  EXPECT_FALSE(m.targetKey({0, "a"})->presentAt(now + 200));  // its own deadline passed
  EXPECT_FALSE(m.targetKey({0, "b"})->exists);

  ModelConfig d;
  d.drop_deletions = true;
  d.strip_ttl = true;
  ExpiryModel n(d);
  // Vector 10: strip_ttl writes no deadline; vector 21: a deletion is not sent.
  n.write({0, "a"}, WriteKind::Deadline, now + 300'000, Value{}, v, now, "SET a PXAT");
  EXPECT_EQ(n.targetKey({0, "a"})->deadline, 0);
  n.remove({0, "a"}, RemoveCause::Deletion, now, "DEL a");
  EXPECT_TRUE(n.targetKey({0, "a"})->presentAt(now + 1'000'000));
  EXPECT_FALSE(n.inSync({0, "a"}, Value{}, now));  // the target kept what the source deleted
}

}  // namespace
}  // namespace xdcr::test
