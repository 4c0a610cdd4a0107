#include "source/command_table.h"

#include "common/resp.h"

#include <algorithm>
#include <array>
#include <deque>
#include <functional>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>

namespace xdcr::source {
namespace {

using E = Effect;

// Only commands that can appear on a Redis 7.0 replication stream matter here. Blocking and
// read-modify commands arrive as their effects (BLPOP -> LPOP, SPOP -> SREM, INCRBYFLOAT -> SET
// KEEPTTL, GETDEL -> DEL, SETEX -> SET PXAT, EXPIRE -> PEXPIREAT, ...).
constexpr CommandSpec kCommands[] = {
    // strings
    {"set", E::Set, 1, 1, 1},
    {"setnx", E::SetNoTtl, 1, 1, 1},
    {"mset", E::SetNoTtl, 1, -1, 2},
    {"msetnx", E::SetNoTtl, 1, -1, 2},
    {"getset", E::SetNoTtl, 1, 1, 1},
    {"incr", E::InPlace, 1, 1, 1},
    {"decr", E::InPlace, 1, 1, 1},
    {"incrby", E::InPlace, 1, 1, 1},
    {"decrby", E::InPlace, 1, 1, 1},
    {"incrbyfloat", E::InPlace, 1, 1, 1},
    {"append", E::InPlace, 1, 1, 1},
    {"setrange", E::InPlace, 1, 1, 1},
    {"setbit", E::InPlace, 1, 1, 1},
    {"bitfield", E::InPlace, 1, 1, 1},
    {"pfadd", E::InPlace, 1, 1, 1},
    {"pfmerge", E::InPlace, 1, -1, 1, KeyLayout::Range, true},  // dst keeps its deadline
    // hashes
    {"hset", E::InPlace, 1, 1, 1},
    {"hsetnx", E::InPlace, 1, 1, 1},
    {"hmset", E::InPlace, 1, 1, 1},
    {"hdel", E::InPlace, 1, 1, 1},
    {"hincrby", E::InPlace, 1, 1, 1},
    {"hincrbyfloat", E::InPlace, 1, 1, 1},
    // hash-field expiration (Redis 7.4+/8, Valkey 9): the forms a source propagates, field
    // deadlines already absolute (server-versions-notes.md §4). Key filters, rewrite, the db map
    // and the clamp of the key's own deadline apply; the field deadlines are translated or
    // stripped (field_deadline, docs/hash-field-expiry.md).
    {"hsetex", E::InPlace, 1, 1, 1, KeyLayout::Range, false, true},
    {"hpexpireat", E::InPlace, 1, 1, 1, KeyLayout::Range, false, true, true},
    {"hpersist", E::InPlace, 1, 1, 1, KeyLayout::Range, false, false, true},
    {"hgetdel", E::InPlace, 1, 1, 1},  // Valkey 9 propagates it as is
    // vector sets (Redis 8)
    {"vadd", E::InPlace, 1, 1, 1},
    {"vrem", E::InPlace, 1, 1, 1},
    {"vsetattr", E::InPlace, 1, 1, 1},
    // lists
    {"lpush", E::InPlace, 1, 1, 1},
    {"rpush", E::InPlace, 1, 1, 1},
    {"lpushx", E::InPlace, 1, 1, 1},
    {"rpushx", E::InPlace, 1, 1, 1},
    {"lpop", E::InPlace, 1, 1, 1},
    {"rpop", E::InPlace, 1, 1, 1},
    {"lset", E::InPlace, 1, 1, 1},
    {"linsert", E::InPlace, 1, 1, 1},
    {"lrem", E::InPlace, 1, 1, 1},
    {"ltrim", E::InPlace, 1, 1, 1},
    {"lmove", E::InPlace, 1, 2, 1},
    {"rpoplpush", E::InPlace, 1, 2, 1},
    // sets
    {"sadd", E::InPlace, 1, 1, 1},
    {"srem", E::InPlace, 1, 1, 1},
    {"smove", E::InPlace, 1, 2, 1},
    // sorted sets
    {"zadd", E::InPlace, 1, 1, 1},
    {"zincrby", E::InPlace, 1, 1, 1},
    {"zrem", E::InPlace, 1, 1, 1},
    {"zremrangebyscore", E::InPlace, 1, 1, 1},
    {"zremrangebyrank", E::InPlace, 1, 1, 1},
    {"zremrangebylex", E::InPlace, 1, 1, 1},
    {"zpopmin", E::InPlace, 1, 1, 1},
    {"zpopmax", E::InPlace, 1, 1, 1},
    // streams
    {"xadd", E::InPlace, 1, 1, 1},
    {"xdel", E::InPlace, 1, 1, 1},
    {"xtrim", E::InPlace, 1, 1, 1},
    {"xgroup", E::InPlace, 2, 2, 1},
    {"xack", E::InPlace, 1, 1, 1},
    {"xclaim", E::InPlace, 1, 1, 1},
    {"xautoclaim", E::InPlace, 1, 1, 1},
    {"xsetid", E::InPlace, 1, 1, 1},
    {"xdelex", E::InPlace, 1, 1, 1},   // Redis 8.2
    {"xackdel", E::InPlace, 1, 1, 1},  // Redis 8.2
    // geo
    {"geoadd", E::InPlace, 1, 1, 1},
    // overwriting stores: the destination first, then the keys they read
    {"sunionstore", E::Store, 1, -1, 1, KeyLayout::Range, true},
    {"sinterstore", E::Store, 1, -1, 1, KeyLayout::Range, true},
    {"sdiffstore", E::Store, 1, -1, 1, KeyLayout::Range, true},
    {"zunionstore", E::Store, 1, 1, 1, KeyLayout::NumKeys, true},
    {"zinterstore", E::Store, 1, 1, 1, KeyLayout::NumKeys, true},
    {"zdiffstore", E::Store, 1, 1, 1, KeyLayout::NumKeys, true},
    {"zrangestore", E::Store, 1, 2, 1, KeyLayout::Range, true},
    {"bitop", E::Store, 2, -1, 1, KeyLayout::Range, true},
    {"geosearchstore", E::Store, 1, 2, 1, KeyLayout::Range, true},
    {"sort", E::Store, 1, 1, 1, KeyLayout::StoreOpt, true},
    {"georadius", E::Store, 1, 1, 1, KeyLayout::StoreOpt, true},
    {"georadiusbymember", E::Store, 1, 1, 1, KeyLayout::StoreOpt, true},
    // expiry
    {"pexpireat", E::ExpireAt, 1, 1, 1},
    {"persist", E::Persist, 1, 1, 1},
    // deletion
    {"del", E::Delete, 1, -1, 1},
    {"unlink", E::Delete, 1, -1, 1},
    // whole-key moves
    {"restore", E::Restore, 1, 1, 1},
    // A cluster's slot migration: MIGRATE's RESTORE on the importing node keeps this name in the
    // stream, with an absolute deadline and ABSTTL (cluster-notes.md §2.1). A create, written
    // as RESTORE ... REPLACE (the exporting shard may have written the key to the target).
    {"restore-asking", E::Restore, 1, 1, 1},
    {"rename", E::Rename, 1, 2, 1},
    {"renamenx", E::Rename, 1, 2, 1},
    {"copy", E::Copy, 1, 2, 1},
    {"move", E::Move, 1, 1, 1},
    {"swapdb", E::SwapDb, 0, 0, 0},
    // databases and framing
    {"flushdb", E::Flush, 0, 0, 0},
    {"flushall", E::Flush, 0, 0, 0},
    {"select", E::Select, 0, 0, 0},
    {"multi", E::Multi, 0, 0, 0},
    {"exec", E::Exec, 0, 0, 0},
    {"ping", E::Heartbeat, 0, 0, 0},
    {"replconf", E::Heartbeat, 0, 0, 0},
};

class Table {
 public:
  Table() {
    for (const auto& c : kCommands) map_.emplace(c.name, &c);
  }
  const CommandSpec* find(std::string_view name) const {
    if (name.size() > 32) return nullptr;
    std::array<char, 32> lower;
    std::transform(name.begin(), name.end(), lower.begin(), [](char ch) {
      return (ch >= 'A' && ch <= 'Z') ? static_cast<char>(ch + 32) : ch;
    });
    auto it = map_.find(std::string_view(lower.data(), name.size()));
    return it == map_.end() ? nullptr : it->second;
  }

 private:
  std::unordered_map<std::string_view, const CommandSpec*> map_;
};

}  // namespace

namespace {

/** Commands learned from sources' COMMAND replies (learnCommands), by lower-case name. Written
 *  at session starts, read for every command the static table lacks. */
struct Learned {
  std::shared_mutex mutex;
  std::unordered_map<std::string, CommandSpec> specs;
  std::deque<std::string> names;  // stable storage for CommandSpec::name
};
Learned& learned() {
  static Learned l;
  return l;
}

bool inStaticTable(const CommandSpec* spec) {
  return !std::less<>()(spec, std::begin(kCommands)) && std::less<>()(spec, std::end(kCommands));
}

}  // namespace

void keyPositions(const CommandSpec& spec, const std::string_view* args, size_t argc,
                  std::vector<uint16_t>& out) {
  const int n = static_cast<int>(argc);
  if (spec.first_key <= 0 || spec.first_key >= n) return;
  auto push = [&](int i) {
    if (i > 0 && i < n) out.push_back(static_cast<uint16_t>(i));
  };
  switch (spec.layout) {
    case KeyLayout::Range: {
      int last = spec.last_key < 0 ? n + spec.last_key : spec.last_key;
      // NOLINTNEXTLINE(bugprone-signed-char-misuse): key positions are small signed numbers
      for (int i = spec.first_key; i <= last && i < n; i += spec.key_step) push(i);
      return;
    }
    case KeyLayout::NumKeys: {
      // [dst] numkeys k1..kn: for LMPOP (first_key == numkeys position) there is no dst.
      int count_at = spec.effect == Effect::Store ? spec.first_key + 1 : spec.first_key - 1;
      if (spec.effect == Effect::Store) push(spec.first_key);
      if (count_at <= 0 || count_at >= n) return;
      int64_t keys = 0;
      for (char ch : args[count_at]) {
        if (ch < '0' || ch > '9' || keys > n) return;
        keys = keys * 10 + (ch - '0');
      }
      for (int i = 0; i < keys && count_at + 1 + i < n; ++i) push(count_at + 1 + i);
      return;
    }
    case KeyLayout::StoreOpt: {
      int dst = 0;
      for (int i = spec.first_key + 1; i + 1 < n; ++i) {
        if (resp::iequals(args[i], "store") || resp::iequals(args[i], "storedist")) dst = i + 1;
      }
      if (dst == 0) return;  // no STORE: a read
      push(dst);
      push(spec.first_key);
      return;
    }
  }
}

bool isReplayUnsafe(const CommandSpec* spec) {
  if (spec == nullptr) return true;  // unknown: assume the worst
  static constexpr std::string_view kUnsafe[] = {
      "incr",     "decr",      "incrby",       "decrby",          "incrbyfloat", "append",
      "bitfield", "hincrby",   "hincrbyfloat", "lpush",           "rpush",       "lpushx",
      "rpushx",   "lpop",      "rpop",         "linsert",         "lrem",        "ltrim",
      "lmove",    "rpoplpush", "zincrby",      "zremrangebyrank", "zpopmin",     "zpopmax",
      "xclaim",   "xautoclaim"};
  // One flag per table entry, computed once: this runs for every applied command.
  static const auto flags = [] {
    std::array<bool, std::size(kCommands)> f{};
    for (size_t i = 0; i < f.size(); ++i) {
      f[i] =
          std::find(std::begin(kUnsafe), std::end(kUnsafe), kCommands[i].name) != std::end(kUnsafe);
    }
    return f;
  }();
  // Learned commands (learnCommands): what they do is unknown, so their replay is unsafe.
  if (!inStaticTable(spec)) return true;
  return flags[static_cast<size_t>(spec - kCommands)];
}

const CommandSpec* lookupCommand(std::string_view name) {
  static const Table table;
  if (const CommandSpec* spec = table.find(name)) return spec;
  Learned& l = learned();
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](char ch) {
    return (ch >= 'A' && ch <= 'Z') ? static_cast<char>(ch + 32) : ch;
  });
  std::shared_lock lock(l.mutex);
  auto it = l.specs.find(lower);
  return it == l.specs.end() ? nullptr : &it->second;
}

bool isLearned(const CommandSpec* spec) {
  return spec != nullptr && !inStaticTable(spec);
}

size_t learnCommands(const std::vector<LearnedCommand>& commands) {
  static const Table table;
  Learned& l = learned();
  std::unique_lock lock(l.mutex);
  size_t added = 0;
  for (const LearnedCommand& c : commands) {
    // Only writes with keys at fixed positions; a command the table knows keeps its entry.
    if (!c.write || c.first_key <= 0 || c.first_key > 127 || c.step <= 0 || c.step > 127 ||
        c.last_key < -127 || c.last_key > 127 || table.find(c.name) != nullptr ||
        l.specs.count(c.name) != 0) {
      continue;
    }
    l.names.push_back(c.name);
    CommandSpec spec{l.names.back(), Effect::InPlace, static_cast<int8_t>(c.first_key),
                     static_cast<int8_t>(c.last_key), static_cast<int8_t>(c.step)};
    l.specs.emplace(c.name, spec);
    ++added;
  }
  return added;
}

std::vector<LearnedCommand> parseCommandReply(const resp::Value& reply) {
  std::vector<LearnedCommand> out;
  if (reply.type != resp::ReplyType::Array) return out;
  for (const resp::Value& e : reply.elements) {
    const auto& f = e.elements;
    if (e.type != resp::ReplyType::Array || f.size() < 6 || f[0].str.empty() ||
        f[2].type != resp::ReplyType::Array) {
      continue;
    }
    LearnedCommand c;
    c.name = f[0].str;
    std::transform(c.name.begin(), c.name.end(), c.name.begin(), [](char ch) {
      return (ch >= 'A' && ch <= 'Z') ? static_cast<char>(ch + 32) : ch;
    });
    for (const resp::Value& flag : f[2].elements) c.write = c.write || flag.str == "write";
    c.first_key = static_cast<int>(f[3].integer);
    c.last_key = static_cast<int>(f[4].integer);
    c.step = static_cast<int>(f[5].integer);
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace xdcr::source
