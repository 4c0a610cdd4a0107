#include "tests/support/dataset.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <stdexcept>
#include <thread>

#include "tests/support/wait.h"

namespace xdcr::test {

std::string randomValue(std::mt19937_64& rng, size_t n) {
  static constexpr char kChars[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+/";
  std::string v(n, ' ');
  for (size_t i = 0; i < n; i += 10) {  // 10 characters of 6 bits from each 64-bit draw
    uint64_t r = rng();
    for (size_t j = i; j < std::min(n, i + 10); ++j, r >>= 6) v[j] = kChars[r & 63];
  }
  return v;
}
namespace {

// Commands per pipelined write batch (RespClient::pipeline chunks them further).
constexpr size_t kWriteBatch = 5000;
// Keys per pipelined read batch in readKeyStates().
constexpr size_t kReadBatch = 500;
// Deadline of an "expired" key, relative to its last write (PEXPIRE k kExpireInMs). Not just a
// few ms: Redis 7.0 reads its clock twice in PEXPIRE (the base, then "already expired?") and
// deletes the key at once if the deadline has passed in between, so a server descheduled for
// longer than this mid-command (a loaded 2-core machine, a sanitized suite) lost a key.
constexpr int64_t kExpireInMs = 100;

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/** A small deterministic generator per key (splitmix64). */
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    state_ = mix64(state_);
    return state_;
  }
  /** Uniform in [0, n). */
  uint64_t below(uint64_t n) { return n == 0 ? 0 : next() % n; }
  /** True with probability p. */
  bool chance(double p) { return static_cast<double>(below(1000000)) < p * 1000000.0; }
  std::string letters(size_t n) {
    static constexpr char kAlphabet[] =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_";
    std::string out(n, ' ');
    for (size_t i = 0; i < n; ++i) {
      out[i] = kAlphabet[below(64)];
    }
    return out;
  }

 private:
  uint64_t state_;
};

struct KindWeight {
  ValueKind kind;
  int per_mille;
};

// clang-format off
constexpr std::array<KindWeight, kValueKindCount> kEveryTypeWeights = {{
    {ValueKind::StringInt, 90},  {ValueKind::StringEmbstr, 170}, {ValueKind::StringRaw, 90},
    {ValueKind::StringLzf, 80},  {ValueKind::StringBinary, 30},
    {ValueKind::HashSmall, 142}, {ValueKind::HashLarge, 3},      {ValueKind::HashLongValue, 15},
    {ValueKind::List, 100},      {ValueKind::ListLarge, 5},
    {ValueKind::SetIntset, 62},  {ValueKind::SetStrings, 40},    {ValueKind::SetLargeInts, 3},
    {ValueKind::ZsetSmall, 104}, {ValueKind::ZsetLarge, 6},
    {ValueKind::Stream, 55},     {ValueKind::StreamEmpty, 5},
}};
constexpr std::array<KindWeight, 6> kMostlyStringsWeights = {{
    {ValueKind::StringRaw, 800}, {ValueKind::HashSmall, 50}, {ValueKind::List, 50},
    {ValueKind::SetIntset, 25},  {ValueKind::SetStrings, 25}, {ValueKind::ZsetSmall, 50},
}};
// clang-format on

template <size_t N>
constexpr int sumOf(const std::array<KindWeight, N>& weights) {
  int sum = 0;
  for (const auto& w : weights) {
    sum += w.per_mille;
  }
  return sum;
}
static_assert(sumOf(kEveryTypeWeights) == 1000);
static_assert(sumOf(kMostlyStringsWeights) == 1000);

template <size_t N>
ValueKind pickKind(const std::array<KindWeight, N>& weights, uint64_t draw) {
  int point = static_cast<int>(draw % 1000);
  for (const auto& w : weights) {
    if (point < w.per_mille) {
      return w.kind;
    }
    point -= w.per_mille;
  }
  return weights.back().kind;
}

std::string indexText(int64_t index) {
  std::string digits = std::to_string(index);
  return std::string(digits.size() < 7 ? 7 - digits.size() : 0, '0') + digits;
}

/** The server's encoding thresholds (CONFIG GET); the "large" kinds go just above them. */
struct Thresholds {
  size_t hash_entries = 512;    // hash-max-listpack-entries
  size_t zset_entries = 128;    // zset-max-listpack-entries
  size_t intset_entries = 512;  // set-max-intset-entries
};

Thresholds readThresholds(const RespPipeline& run) {
  Thresholds t;
  auto get = [&](const char* name, size_t* value) {
    const std::vector<RespCommand> command = {{"CONFIG", "GET", name}};
    RespValue reply = run(command).at(0);
    if (reply.isArray() && reply.array().size() == 2) {
      *value = static_cast<size_t>(std::stoull(reply.array()[1].str()));
    }
  };
  get("hash-max-listpack-entries", &t.hash_entries);
  get("zset-max-listpack-entries", &t.zset_entries);
  get("set-max-intset-entries", &t.intset_entries);
  return t;
}

/** Appends the commands that create `k` (no deadline yet, except a string's PXAT). */
void appendCreate(const DatasetKey& k, const DatasetOptions& options, const Thresholds& limits,
                  Rng& rng, bool pxat, std::vector<RespCommand>* out) {
  const std::string& key = k.key;
  auto stringSet = [&](std::string value) {
    RespCommand cmd = {"SET", key, std::move(value)};
    if (pxat) {
      cmd.push_back("PXAT");
      cmd.push_back(std::to_string(k.deadline_ms));
    }
    out->push_back(std::move(cmd));
  };
  switch (k.kind) {
    case ValueKind::StringInt: {
      int64_t v = 0;
      switch (rng.below(6)) {
        case 0:  // INT8 in the RDB
          v = static_cast<int64_t>(rng.below(128));
          break;
        case 1:  // INT16
          v = -static_cast<int64_t>(rng.below(30000));
          break;
        case 2:
          v = 12345;
          break;
        case 3:  // INT32
          v = static_cast<int64_t>(rng.below(2000000000));
          break;
        case 4:  // too long for an RDB integer encoding: a plain string there
          v = (int64_t{1} << 40) + static_cast<int64_t>(rng.below(1000));
          break;
        default:
          v = INT64_MAX - static_cast<int64_t>(rng.below(10));
          break;
      }
      stringSet(std::to_string(v));
      break;
    }
    case ValueKind::StringEmbstr:
      stringSet("v:" + k.key.substr(k.key.size() - 7) + ":" + rng.letters(5 + rng.below(25)));
      break;
    case ValueKind::StringRaw:
      stringSet(rng.letters(options.string_size));
      break;
    case ValueKind::StringLzf:
      stringSet(std::string(200 + rng.below(100), static_cast<char>('a' + rng.below(26))) +
                rng.letters(4));
      break;
    case ValueKind::StringBinary: {
      std::string value = std::string("\0\r\n", 3);
      const uint64_t start = rng.next();
      for (int i = 0; i < 61; ++i) {
        value.push_back(static_cast<char>((start + static_cast<uint64_t>(i) * 37) & 0xff));
      }
      stringSet(std::move(value));
      break;
    }
    case ValueKind::HashSmall:
    case ValueKind::HashLarge:
    case ValueKind::HashLongValue: {
      RespCommand cmd = {"HSET", key};
      size_t n = k.kind == ValueKind::HashSmall   ? 2 + rng.below(10)
                 : k.kind == ValueKind::HashLarge ? limits.hash_entries + 1 + rng.below(40)
                                                  : 3;
      for (size_t j = 0; j < n; ++j) {
        cmd.push_back("field:" + std::to_string(j));
        if (k.kind == ValueKind::HashLongValue && j == 1) {
          cmd.push_back(rng.letters(65 + rng.below(60)));
        } else if (j % 3 == 2) {
          cmd.push_back(std::to_string(rng.below(100000)));
        } else {
          cmd.push_back(rng.letters(3 + rng.below(18)));
        }
      }
      out->push_back(std::move(cmd));
      break;
    }
    case ValueKind::List:
    case ValueKind::ListLarge: {
      RespCommand cmd = {"RPUSH", key};
      size_t n = k.kind == ValueKind::List ? 1 + rng.below(30) : 600 + rng.below(200);
      for (size_t j = 0; j < n; ++j) {
        cmd.push_back(j % 4 == 3 ? std::to_string(rng.below(1000000))
                                 : "item-" + std::to_string(j) + "-" + rng.letters(6));
      }
      out->push_back(std::move(cmd));
      break;
    }
    case ValueKind::SetIntset:
    case ValueKind::SetLargeInts: {
      RespCommand cmd = {"SADD", key};
      size_t n = k.kind == ValueKind::SetIntset ? 1 + rng.below(40)
                                                : limits.intset_entries + 1 + rng.below(100);
      const int64_t base = static_cast<int64_t>(rng.below(100000)) - 50000;
      for (size_t j = 0; j < n; ++j) {
        cmd.push_back(std::to_string(base + static_cast<int64_t>(j) * 7));
      }
      out->push_back(std::move(cmd));
      break;
    }
    case ValueKind::SetStrings: {
      RespCommand cmd = {"SADD", key};
      size_t n = 3 + rng.below(20);
      for (size_t j = 0; j < n; ++j) {
        cmd.push_back("m" + std::to_string(j) + ":" + rng.letters(4 + rng.below(10)));
      }
      out->push_back(std::move(cmd));
      break;
    }
    case ValueKind::ZsetSmall:
    case ValueKind::ZsetLarge: {
      RespCommand cmd = {"ZADD", key};
      size_t n = k.kind == ValueKind::ZsetSmall ? 2 + rng.below(20)
                                                : limits.zset_entries + 1 + rng.below(80);
      for (size_t j = 0; j < n; ++j) {
        switch (j % 5) {
          case 0:
            cmd.push_back(std::to_string(j));
            break;
          case 1:
            cmd.push_back("-" + std::to_string(rng.below(1000)) + ".25");
            break;
          case 2:  // equal scores: ordered by member
            cmd.push_back("3.141592653589793");
            break;
          case 3:
            cmd.push_back(std::to_string(rng.below(1000000)) + "e-3");
            break;
          default:
            cmd.push_back(j == 4 ? "+inf" : std::to_string(rng.below(100)));
            break;
        }
        cmd.push_back("z" + std::to_string(j) + ":" + rng.letters(3 + rng.below(8)));
      }
      out->push_back(std::move(cmd));
      break;
    }
    case ValueKind::Stream: {
      // Explicit ids so that the stream is the same on every run: <ms>-<seq>.
      const size_t n = 3 + rng.below(8);
      const uint64_t seq = rng.below(3);
      std::vector<std::string> ids;
      for (size_t j = 0; j < n; ++j) {
        ids.push_back(std::to_string(1000 + j * 10) + "-" + std::to_string(seq));
        out->push_back({"XADD", key, ids.back(), "n", std::to_string(j), "text",
                        rng.letters(4 + rng.below(20))});
      }
      if (n > 4) {
        out->push_back({"XDEL", key, ids[1]});  // max-deleted-entry-id, a gap in the listpack
      }
      out->push_back({"XGROUP", "CREATE", key, "g1", "0"});
      out->push_back({"XREADGROUP", "GROUP", "g1", "alice", "COUNT", "2", "STREAMS", key, ">"});
      out->push_back({"XREADGROUP", "GROUP", "g1", "bob", "COUNT", "1", "STREAMS", key, ">"});
      out->push_back({"XACK", key, "g1", ids[0]});  // alice keeps one pending entry, bob one
      if (rng.below(2) == 0) {
        out->push_back({"XGROUP", "CREATE", key, "g2", "$"});
        out->push_back({"XGROUP", "CREATECONSUMER", key, "g2", "carol"});
      }
      break;
    }
    case ValueKind::StreamEmpty:
      out->push_back({"XGROUP", "CREATE", key, "g0", "$", "MKSTREAM"});
      break;
  }
}

bool isString(ValueKind kind) {
  return redisTypeOf(kind) == "string";
}

/** Sends a batch; throws on any error reply or on an expiry command that did not take effect. */
void sendBatch(const RespPipeline& run, std::vector<RespCommand>* batch) {
  if (batch->empty()) {
    return;
  }
  std::vector<RespValue> replies = run(*batch);
  for (size_t i = 0; i < replies.size(); ++i) {
    const RespCommand& cmd = (*batch)[i];
    const bool expiry = cmd[0] == "PEXPIRE" || cmd[0] == "PEXPIREAT";
    if (replies[i].isError() ||
        (expiry && !(replies[i].isInteger() && replies[i].integer() == 1))) {
      std::string text;
      for (size_t j = 0; j < cmd.size() && j < 6; ++j) {
        text += (j == 0 ? "" : " ") + escapeBytes(cmd[j], 40);
      }
      throw std::runtime_error("writeDataset: `" + text + (cmd.size() > 6 ? " ..." : "") +
                               "` answered " + replies[i].toString());
    }
  }
  batch->clear();
}

std::string quoted(std::string_view bytes) {
  return "\"" + escapeBytes(bytes, std::string::npos) + "\"";
}

std::string render(const RespValue& value) {
  switch (value.type()) {
    case RespValue::Type::Bulk:
      return quoted(value.str());
    case RespValue::Type::SimpleString:
      return value.str();
    case RespValue::Type::Error:
      return "(error) " + value.str();
    case RespValue::Type::Integer:
      return std::to_string(value.integer());
    case RespValue::Type::Null:
      return "nil";
    case RespValue::Type::Array: {
      std::string out = "[";
      for (size_t i = 0; i < value.array().size(); ++i) {
        out += (i == 0 ? "" : ", ") + render(value.array()[i]);
      }
      return out + "]";
    }
  }
  return "?";
}

std::string renderHash(const RespValue& reply) {
  if (!reply.isArray()) {
    return render(reply);
  }
  std::map<std::string, std::string> fields;
  const auto& items = reply.array();
  for (size_t i = 0; i + 1 < items.size(); i += 2) {
    fields[render(items[i])] = render(items[i + 1]);
  }
  std::string out = "{";
  for (const auto& [f, v] : fields) {
    out += (out.size() == 1 ? "" : ", ") + f + ": " + v;
  }
  return out + "}";
}

/** ZRANGE ... WITHSCORES, each score as the double it denotes (%.17g of it): Redis 7.0 prints
 *  0.33333333333333331 where Redis 7.2+ and Valkey print 0.3333333333333333, the same number. */
std::string renderZset(const RespValue& reply) {
  if (!reply.isArray()) {
    return render(reply);
  }
  const auto& items = reply.array();
  std::string out = "[";
  for (size_t i = 0; i + 1 < items.size(); i += 2) {
    char score[40];
    std::snprintf(score, sizeof score, "%.17g", std::strtod(items[i + 1].str().c_str(), nullptr));
    out += (i == 0 ? "" : ", ") + render(items[i]) + " " + score;
  }
  return out + "]";
}

std::string renderSet(const RespValue& reply) {
  if (!reply.isArray()) {
    return render(reply);
  }
  std::vector<std::string> members;
  for (const auto& item : reply.array()) {
    members.push_back(render(item));
  }
  std::sort(members.begin(), members.end());
  std::string out = "{";
  for (size_t i = 0; i < members.size(); ++i) {
    out += (i == 0 ? "" : ", ") + members[i];
  }
  return out + "}";
}

/** XINFO STREAM FULL without the radix tree's node counts (layout statistics, not contents). */
std::string renderStreamFull(const RespValue& reply) {
  if (!reply.isArray()) {
    return render(reply);
  }
  std::string out = "{";
  const auto& items = reply.array();
  for (size_t i = 0; i + 1 < items.size(); i += 2) {
    const std::string name = items[i].type() == RespValue::Type::Bulk ? items[i].str() : "";
    if (name == "radix-tree-keys" || name == "radix-tree-nodes") {
      continue;
    }
    out += (out.size() == 1 ? "" : ", ") + render(items[i]) + ": " + render(items[i + 1]);
  }
  return out + "}";
}

}  // namespace

std::string_view kindTag(ValueKind kind) {
  switch (kind) {
    case ValueKind::StringInt:
      return "si";
    case ValueKind::StringEmbstr:
      return "se";
    case ValueKind::StringRaw:
      return "sr";
    case ValueKind::StringLzf:
      return "sz";
    case ValueKind::StringBinary:
      return "sb";
    case ValueKind::HashSmall:
      return "hs";
    case ValueKind::HashLarge:
      return "hl";
    case ValueKind::HashLongValue:
      return "hv";
    case ValueKind::List:
      return "ls";
    case ValueKind::ListLarge:
      return "ll";
    case ValueKind::SetIntset:
      return "ti";
    case ValueKind::SetStrings:
      return "ts";
    case ValueKind::SetLargeInts:
      return "tl";
    case ValueKind::ZsetSmall:
      return "zs";
    case ValueKind::ZsetLarge:
      return "zl";
    case ValueKind::Stream:
      return "xs";
    case ValueKind::StreamEmpty:
      return "xe";
  }
  return "?";
}

std::string_view redisTypeOf(ValueKind kind) {
  switch (kind) {
    case ValueKind::StringInt:
    case ValueKind::StringEmbstr:
    case ValueKind::StringRaw:
    case ValueKind::StringLzf:
    case ValueKind::StringBinary:
      return "string";
    case ValueKind::HashSmall:
    case ValueKind::HashLarge:
    case ValueKind::HashLongValue:
      return "hash";
    case ValueKind::List:
    case ValueKind::ListLarge:
      return "list";
    case ValueKind::SetIntset:
    case ValueKind::SetStrings:
    case ValueKind::SetLargeInts:
      return "set";
    case ValueKind::ZsetSmall:
    case ValueKind::ZsetLarge:
      return "zset";
    case ValueKind::Stream:
    case ValueKind::StreamEmpty:
      return "stream";
  }
  return "?";
}

std::string_view encodingOf(ValueKind kind) {
  switch (kind) {
    case ValueKind::StringInt:
      return "int";
    case ValueKind::StringEmbstr:
      return "embstr";
    case ValueKind::StringRaw:
    case ValueKind::StringLzf:
    case ValueKind::StringBinary:
      return "raw";
    case ValueKind::HashSmall:
      return "listpack";
    case ValueKind::HashLarge:
    case ValueKind::HashLongValue:
      return "hashtable";
    case ValueKind::List:
    case ValueKind::ListLarge:
      return "quicklist";
    case ValueKind::SetIntset:
      return "intset";
    case ValueKind::SetStrings:
    case ValueKind::SetLargeInts:
      return "hashtable";
    case ValueKind::ZsetSmall:
      return "listpack";
    case ValueKind::ZsetLarge:
      return "skiplist";
    case ValueKind::Stream:
    case ValueKind::StreamEmpty:
      return "stream";
  }
  return "?";
}

std::set<int> Dataset::dbs() const {
  std::set<int> out;
  for (const auto& k : keys) {
    out.insert(k.db);
  }
  return out;
}

int64_t Dataset::count(int db, bool include_expired) const {
  return std::count_if(keys.begin(), keys.end(), [&](const DatasetKey& k) {
    return k.db == db && (include_expired || !k.expired);
  });
}

int64_t Dataset::expiredCount() const {
  return std::count_if(keys.begin(), keys.end(), [](const DatasetKey& k) { return k.expired; });
}

int64_t Dataset::withDeadline(int db) const {
  return std::count_if(keys.begin(), keys.end(), [&](const DatasetKey& k) {
    return k.db == db && (k.expired || k.deadline_ms != 0);
  });
}

std::vector<const DatasetKey*> Dataset::live(size_t step) const {
  std::vector<const DatasetKey*> out;
  size_t seen = 0;
  for (const auto& k : keys) {
    if (!k.expired && seen++ % std::max<size_t>(step, 1) == 0) {
      out.push_back(&k);
    }
  }
  return out;
}

std::vector<const DatasetKey*> Dataset::expired(size_t step) const {
  std::vector<const DatasetKey*> out;
  size_t seen = 0;
  for (const auto& k : keys) {
    if (k.expired && seen++ % std::max<size_t>(step, 1) == 0) {
      out.push_back(&k);
    }
  }
  return out;
}

Dataset writeDataset(uint16_t port, const DatasetOptions& options) {
  RespClient client(port, std::chrono::seconds(60));
  return writeDataset(
      [&client](const std::vector<RespCommand>& commands) { return client.pipeline(commands); },
      options);
}

Dataset writeDataset(const RespPipeline& run, const DatasetOptions& options) {
  Dataset data;
  data.write_started_ms = unixTimeMs();
  data.keys.reserve(static_cast<size_t>(std::max<int64_t>(options.keys, 0)));
  const int64_t span = std::max<int64_t>(options.max_deadline_ms - options.min_deadline_ms, 0);
  std::vector<uint64_t> seeds;
  for (int64_t i = 0; i < options.keys; ++i) {
    Rng rng(mix64(options.seed * 0x100000001b3ULL ^ static_cast<uint64_t>(i)));
    const ValueKind kind = options.mix == DatasetMix::EveryType
                               ? pickKind(kEveryTypeWeights, rng.next())
                               : pickKind(kMostlyStringsWeights, rng.next());
    DatasetKey k;
    auto [db, prefix] =
        options.placement ? options.placement(i) : std::pair<int, std::string>{0, ""};
    k.db = db;
    k.kind = kind;
    k.key = prefix + options.tag + ":" + std::string(kindTag(kind)) + ":" + indexText(i);
    k.expired = rng.chance(options.expired_fraction);
    if (!k.expired && rng.chance(options.deadline_fraction)) {
      k.deadline_ms = data.write_started_ms + options.min_deadline_ms +
                      static_cast<int64_t>(rng.below(static_cast<uint64_t>(span) + 1));
    }
    seeds.push_back(rng.next());
    data.keys.push_back(std::move(k));
  }

  const Thresholds limits = readThresholds(run);
  std::vector<RespCommand> batch;
  int current_db = -1;
  auto selectDb = [&](int db) {
    if (db != current_db) {
      batch.push_back({"SELECT", std::to_string(db)});
      current_db = db;
    }
  };
  // Live keys first, then the expired ones: each expired key's last command is its PEXPIRE, and
  // nothing touches it after that.
  for (int pass = 0; pass < 2; ++pass) {
    const bool expired_pass = pass == 1;
    for (size_t i = 0; i < data.keys.size(); ++i) {
      const DatasetKey& k = data.keys[i];
      if (k.expired != expired_pass) {
        continue;
      }
      Rng rng(seeds[i]);
      selectDb(k.db);
      const bool pxat = !expired_pass && k.deadline_ms != 0 && isString(k.kind);
      appendCreate(k, options, limits, rng, pxat, &batch);
      if (expired_pass) {
        batch.push_back({"PEXPIRE", k.key, std::to_string(kExpireInMs)});
      } else if (k.deadline_ms != 0 && !pxat) {
        batch.push_back({"PEXPIREAT", k.key, std::to_string(k.deadline_ms)});
      }
      if (batch.size() >= kWriteBatch) {
        sendBatch(run, &batch);
      }
    }
    sendBatch(run, &batch);
  }
  data.write_ended_ms = unixTimeMs();
  if (data.expiredCount() > 0) {
    // Every expired key's deadline was at most kExpireInMs after the last reply.
    std::this_thread::sleep_for(std::chrono::milliseconds(kExpireInMs + 20));
  }
  for (auto& k : data.keys) {
    if (k.expired) {
      k.deadline_ms = data.write_ended_ms + kExpireInMs;  // an upper bound; it has passed
    }
  }
  return data;
}

namespace {

/** Appends the commands that read the contents of a key of `type` (TYPE's answer). */
void appendContentReads(std::string_view type, const std::string& key,
                        std::vector<RespCommand>* commands) {
  if (type == "string") {
    commands->push_back({"GET", key});
  } else if (type == "hash") {
    commands->push_back({"HGETALL", key});
  } else if (type == "list") {
    commands->push_back({"LRANGE", key, "0", "-1"});
  } else if (type == "set") {
    commands->push_back({"SMEMBERS", key});
  } else if (type == "zset") {
    commands->push_back({"ZRANGE", key, "0", "-1", "WITHSCORES"});
  } else if (type == "stream") {
    commands->push_back({"XRANGE", key, "-", "+"});
    commands->push_back({"XINFO", "GROUPS", key});
    commands->push_back({"XINFO", "STREAM", key, "FULL", "COUNT", "0"});
  }
}

/** Renders the replies of appendContentReads(type) from replies[*r] on; advances *r. */
std::string renderContents(std::string_view type, const std::vector<RespValue>& replies,
                           size_t* r) {
  if (type == "hash") {
    return renderHash(replies[(*r)++]);
  }
  if (type == "set") {
    return renderSet(replies[(*r)++]);
  }
  if (type == "stream") {
    std::string out = "entries=" + render(replies[*r]) + " groups=" + render(replies[*r + 1]) +
                      " stream=" + renderStreamFull(replies[*r + 2]);
    *r += 3;
    return out;
  }
  if (type == "zset") {
    return renderZset(replies[(*r)++]);
  }
  if (type == "string" || type == "list") {
    return render(replies[(*r)++]);
  }
  return "";  // "none" or a type the data sets do not write: nothing was read
}

std::string typeText(const RespValue& reply) {
  return reply.type() == RespValue::Type::SimpleString ? reply.str() : render(reply);
}

}  // namespace

std::vector<KeyState> readKeyStates(RespClient& client, int db,
                                    const std::vector<const DatasetKey*>& keys) {
  client.select(db);
  std::vector<KeyState> states;
  states.reserve(keys.size());
  for (size_t begin = 0; begin < keys.size(); begin += kReadBatch) {
    const size_t end = std::min(keys.size(), begin + kReadBatch);
    std::vector<RespCommand> commands;
    for (size_t i = begin; i < end; ++i) {
      const std::string& key = keys[i]->key;
      commands.push_back({"TYPE", key});
      commands.push_back({"PEXPIRETIME", key});
      appendContentReads(redisTypeOf(keys[i]->kind), key, &commands);
    }
    std::vector<RespValue> replies = client.pipeline(commands);
    size_t r = 0;
    for (size_t i = begin; i < end; ++i) {
      KeyState state;
      state.type = typeText(replies[r]);
      ++r;
      state.pexpiretime = replies[r].isInteger() ? replies[r].integer() : -3;
      ++r;
      state.contents = renderContents(redisTypeOf(keys[i]->kind), replies, &r);
      states.push_back(std::move(state));
    }
  }
  return states;
}

std::vector<KeyState> readKeyStatesOfAnyType(const RespPipeline& run,
                                             const std::vector<std::string>& keys) {
  std::vector<KeyState> states(keys.size());
  for (size_t begin = 0; begin < keys.size(); begin += kReadBatch) {
    const size_t end = std::min(keys.size(), begin + kReadBatch);
    std::vector<RespCommand> commands;
    for (size_t i = begin; i < end; ++i) {
      commands.push_back({"TYPE", keys[i]});
      commands.push_back({"PEXPIRETIME", keys[i]});
    }
    std::vector<RespValue> replies = run(commands);
    commands.clear();
    for (size_t i = begin; i < end; ++i) {
      KeyState& state = states[i];
      state.type = typeText(replies[2 * (i - begin)]);
      const RespValue& deadline = replies[2 * (i - begin) + 1];
      state.pexpiretime = deadline.isInteger() ? deadline.integer() : -3;
      appendContentReads(state.type, keys[i], &commands);
    }
    replies = run(commands);
    size_t r = 0;
    for (size_t i = begin; i < end; ++i) {
      states[i].contents = renderContents(states[i].type, replies, &r);
    }
  }
  return states;
}

std::string escapeBytes(std::string_view bytes, size_t max_length) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(std::min(bytes.size(), max_length) + 8);
  for (unsigned char c : bytes) {
    if (out.size() >= max_length) {
      out += "...(" + std::to_string(bytes.size()) + " bytes)";
      break;
    }
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '"') {
      out.push_back(static_cast<char>(c));
    } else {
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xf]);
    }
  }
  return out;
}

}  // namespace xdcr::test
