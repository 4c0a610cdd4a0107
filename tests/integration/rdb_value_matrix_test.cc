// The value decoder (source/rdb_value.h) against every server of the matrix (Redis 7.0,
// Valkey 8.0, Redis 8.0, Valkey 8.1, Redis 8.0.x, Valkey 9): keys of every type in every encoding
// the server writes (small and large, integer and LZF strings, plain and compressed quicklist
// nodes, streams with deleted entries, groups, pending entries and consumers, hashes with field
// TTLs where the server has them) are DUMPed, decoded, and compared with what the server itself
// reports (GET, LRANGE, SMEMBERS, ZRANGE WITHSCORES, HGETALL and HPEXPIRETIME, XRANGE,
// XINFO STREAM FULL, XINFO GROUPS, XINFO CONSUMERS, XPENDING). Then the old encodings no server
// writes any more (zipmap, ziplists, quicklist 1, linked list, text scores), built by hand, are
// RESTOREd: the server must accept them and report what the decoder decodes.
//
// Skipped where the servers are not provisioned; failed then with XDCR_MATRIX_REQUIRED=1.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "source/rdb.h"
#include "source/rdb_value.h"
#include "tests/support/redis_server.h"
#include "tests/support/resp_client.h"
#include "tests/support/server_matrix.h"

namespace xdcr::test {
namespace {

namespace rdb = source::rdb;

constexpr size_t kDumpTrailer = 10;  // 2-byte RDB version + 8-byte CRC64

struct Dumped {
  uint8_t type = 0;
  int version = 0;
  rdb::Flavor flavor = rdb::Flavor::Redis;
  std::string raw;  // the value's bytes
  rdb::Value value;
};

/** The nodes of a LIST_QUICKLIST_2 value: (container, LZF-compressed), to see which node kinds
 *  a test's list exercised. Lengths here are below 16384 (the test's lists are small). */
std::vector<std::pair<int, bool>> quicklistNodes(std::string_view raw) {
  std::vector<std::pair<int, bool>> out;
  size_t p = 0;
  auto length = [&]() -> uint64_t {
    const auto b = static_cast<uint8_t>(raw.at(p++));
    if ((b >> 6) == 0) return b & 0x3f;
    if ((b >> 6) == 1) return (uint64_t{b & 0x3fu} << 8) | static_cast<uint8_t>(raw.at(p++));
    throw std::runtime_error("unexpected length encoding in a test list");
  };
  const uint64_t nodes = length();
  for (uint64_t i = 0; i < nodes; ++i) {
    const int container = static_cast<int>(length());
    const bool lzf = static_cast<uint8_t>(raw.at(p)) == 0xC3;
    if (lzf) {
      ++p;
      const uint64_t clen = length();
      length();  // uncompressed length
      p += clen;
    } else {
      p += length();
    }
    out.emplace_back(container, lzf);
  }
  return out;
}

rdb::StreamId parseId(const std::string& text) {
  rdb::StreamId id;
  const size_t dash = text.find('-');
  id.ms = std::stoull(text.substr(0, dash));
  id.seq = dash == std::string::npos ? 0 : std::stoull(text.substr(dash + 1));
  return id;
}
std::string idText(const rdb::StreamId& id) {
  return std::to_string(id.ms) + "-" + std::to_string(id.seq);
}

/** A RESP2 flat map (key, value, key, value...) as a map. */
std::map<std::string, RespValue> asMap(const RespValue& v) {
  std::map<std::string, RespValue> out;
  const auto& a = v.array();
  for (size_t i = 0; i + 1 < a.size(); i += 2) out[a[i].str()] = a[i + 1];
  return out;
}

double parseScore(const std::string& s) {
  return std::strtod(s.c_str(), nullptr);
}

// ---- hand-built old encodings (the formats of src/ziplist.c, zipmap.c, intset.c, rdb.c) ----

std::string le(uint64_t v, int bytes) {
  std::string out;
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return out;
}
std::string len(uint64_t n) {
  if (n < 64) return std::string(1, static_cast<char>(n));
  return {static_cast<char>(0x40 | (n >> 8)), static_cast<char>(n & 0xff)};  // n < 16384 here
}
std::string str(std::string_view s) {
  return len(s.size()) + std::string(s);
}
std::string zlStr(std::string_view s) {
  if (s.size() < 64) return static_cast<char>(s.size()) + std::string(s);
  return std::string{static_cast<char>(0x40 | (s.size() >> 8)),
                     static_cast<char>(s.size() & 0xff)} +
         std::string(s);
}
std::string zlInt(int64_t v) {
  const auto u = static_cast<uint64_t>(v);
  if (v >= 0 && v <= 12) return std::string(1, static_cast<char>(0xF1 + v));
  if (v >= INT8_MIN && v <= INT8_MAX) return "\xFE" + le(u, 1);
  if (v >= INT16_MIN && v <= INT16_MAX) return "\xC0" + le(u, 2);
  if (v >= -(1 << 23) && v < (1 << 23)) return "\xF0" + le(u, 3);
  if (v >= INT32_MIN && v <= INT32_MAX) return "\xD0" + le(u, 4);
  return "\xE0" + le(u, 8);
}
std::string ziplist(const std::vector<std::string>& entries) {
  std::string body;
  size_t prev = 0, tail = 10;
  for (const auto& e : entries) {
    std::string prevlen =
        prev < 254 ? std::string(1, static_cast<char>(prev)) : "\xFE" + le(prev, 4);
    tail = 10 + body.size();
    body += prevlen + e;
    prev = prevlen.size() + e.size();
  }
  return le(10 + body.size() + 1, 4) + le(tail, 4) + le(entries.size(), 2) + body + "\xFF";
}
std::string zipmap(const std::vector<std::pair<std::string, std::string>>& pairs) {
  std::string out(1, static_cast<char>(pairs.size()));
  for (const auto& [f, v] : pairs) {
    out += static_cast<char>(f.size());
    out += f;
    out += static_cast<char>(v.size());
    out += '\x01';  // one free byte after the value
    out += v;
    out += 'X';
  }
  return out + "\xFF";
}
/** A DUMP payload: type, value, RDB version, CRC64 of all that. */
std::string payload(uint8_t type, const std::string& value, int version) {
  std::string p = static_cast<char>(type) + value + le(version, 2);
  return p + le(rdb::crc64(0, p.data(), p.size()), 8);
}

class RdbValueMatrixTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string why;
    kind_ = findMatrixServer(GetParam(), &why);
    if (!kind_) {
      if (matrixRequired()) FAIL() << why;
      GTEST_SKIP() << why;
    }
    server_ = RedisServer::startBinary(kind_->binary, {"--enable-debug-command", "yes"});
    c_ = std::make_unique<RespClient>(server_->client());
    const size_t dot = kind_->version.find('.');
    major_ = std::stoi(kind_->version.substr(0, dot));
    minor_ = std::stoi(kind_->version.substr(dot + 1));
  }

  bool atLeast(int major, int minor) const {
    return major_ > major || (major_ == major && minor_ >= minor);
  }
  /** HPEXPIREAT and friends: Redis 7.4+, Valkey 9+. */
  bool fieldTtls() const { return kind_->valkey ? atLeast(9, 0) : atLeast(7, 4); }

  RespValue ok(const RespCommand& cmd) {
    RespValue r = c_->command(cmd);
    EXPECT_FALSE(r.isError()) << cmd[0] << " " << (cmd.size() > 1 ? cmd[1] : "") << ": "
                              << r.toString();
    return r;
  }

  /** A command's array reply, by value (the reply itself is a temporary). */
  std::vector<RespValue> arr(const RespCommand& cmd) {
    RespValue r = c_->command(cmd);
    EXPECT_TRUE(r.isArray()) << cmd[0] << ": " << r.toString();
    return r.isArray() ? r.array() : std::vector<RespValue>{};
  }

  /** DUMP key, split into type, value and version, decoded. */
  Dumped dump(const std::string& key) {
    Dumped d;
    RespValue r = c_->command({"DUMP", key});
    EXPECT_EQ(r.type(), RespValue::Type::Bulk) << key << ": " << r.toString();
    if (r.type() != RespValue::Type::Bulk) return d;
    const std::string& p = r.str();
    EXPECT_GT(p.size(), 1 + kDumpTrailer);
    if (p.size() <= 1 + kDumpTrailer) return d;
    d.type = static_cast<uint8_t>(p[0]);
    d.version = static_cast<uint8_t>(p[p.size() - kDumpTrailer]) |
                static_cast<uint8_t>(p[p.size() - kDumpTrailer + 1]) << 8;
    // Valkey 9 DUMPs with its own RDB version (80), whose type numbers above 21 are Valkey's.
    d.flavor = d.version == rdb::kValkeyRdbVersion ? rdb::Flavor::Valkey : rdb::Flavor::Redis;
    if (kind_->valkey && atLeast(9, 0)) {
      EXPECT_EQ(d.version, rdb::kValkeyRdbVersion);
    }
    std::string error;
    d.raw = p.substr(1, p.size() - 1 - kDumpTrailer);
    EXPECT_TRUE(rdb::decodeValue(d.type, d.raw, d.flavor, d.value, error))
        << key << " (type " << int(d.type) << "): " << error;
    types_seen_.insert(d.type);
    return d;
  }

  // ---- comparisons with the server's own view ----

  /** `first_byte`: the RDB string encoding expected (0xC0-0xC2 integers, 0xC3 LZF), or -1. */
  void checkString(const std::string& key, int first_byte = -1) {
    SCOPED_TRACE(key);
    const Dumped d = dump(key);
    EXPECT_EQ(d.value.kind, rdb::Value::Kind::String);
    EXPECT_EQ(d.value.string, c_->command({"GET", key}).str());
    if (first_byte >= 0) {
      ASSERT_FALSE(d.raw.empty());
      EXPECT_EQ(static_cast<uint8_t>(d.raw[0]), first_byte) << "not the encoding meant";
    }
  }

  Dumped checkList(const std::string& key) {
    SCOPED_TRACE(key);
    Dumped d = dump(key);
    EXPECT_EQ(d.value.kind, rdb::Value::Kind::List);
    std::vector<std::string> want;
    for (const auto& e : arr({"LRANGE", key, "0", "-1"})) want.push_back(e.str());
    EXPECT_EQ(d.value.elements, want);
    return d;
  }

  void checkSet(const std::string& key) {
    SCOPED_TRACE(key);
    const Dumped d = dump(key);
    EXPECT_EQ(d.value.kind, rdb::Value::Kind::Set);
    std::vector<std::string> want, got = d.value.elements;
    for (const auto& e : arr({"SMEMBERS", key})) want.push_back(e.str());
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, want);
  }

  void checkZset(const std::string& key) {
    SCOPED_TRACE(key);
    const Dumped d = dump(key);
    EXPECT_EQ(d.value.kind, rdb::Value::Kind::ZSet);
    std::map<std::string, double> want, got;
    const auto a = arr({"ZRANGE", key, "0", "-1", "WITHSCORES"});
    for (size_t i = 0; i + 1 < a.size(); i += 2) want[a[i].str()] = parseScore(a[i + 1].str());
    for (const auto& [m, s] : d.value.zset) got[m] = s;
    EXPECT_EQ(got.size(), d.value.zset.size()) << "duplicate members";
    EXPECT_EQ(got, want);
  }

  void checkHash(const std::string& key, bool expect_ttls = false) {
    SCOPED_TRACE(key);
    const Dumped d = dump(key);
    EXPECT_EQ(d.value.kind, rdb::Value::Kind::Hash);
    std::map<std::string, std::string> want, got;
    const auto a = arr({"HGETALL", key});
    for (size_t i = 0; i + 1 < a.size(); i += 2) want[a[i].str()] = a[i + 1].str();
    for (const auto& f : d.value.hash) got[f.name] = f.value;
    EXPECT_EQ(got.size(), d.value.hash.size()) << "duplicate fields";
    EXPECT_EQ(got, want);
    EXPECT_EQ(d.value.hasFieldTtls(), expect_ttls);
    if (!fieldTtls()) return;
    RespCommand cmd = {"HPEXPIRETIME", key, "FIELDS", std::to_string(d.value.hash.size())};
    for (const auto& f : d.value.hash) cmd.push_back(f.name);
    const RespValue r = c_->command(cmd);
    ASSERT_TRUE(r.isArray()) << r.toString();
    ASSERT_EQ(r.array().size(), d.value.hash.size());
    for (size_t i = 0; i < d.value.hash.size(); ++i) {
      const auto& f = d.value.hash[i];
      EXPECT_EQ(f.expire_ms == 0 ? -1 : f.expire_ms, r.array()[i].integer()) << f.name;
    }
  }

  void checkStream(const std::string& key) {
    SCOPED_TRACE(key);
    const Dumped d = dump(key);
    ASSERT_EQ(d.value.kind, rdb::Value::Kind::Stream);
    const rdb::Stream& s = d.value.stream;
    // Entries, as XRANGE lists them.
    const auto range = arr({"XRANGE", key, "-", "+"});
    ASSERT_EQ(s.entries.size(), range.size());
    for (size_t i = 0; i < range.size(); ++i) {
      const auto& e = range[i].array();
      EXPECT_EQ(idText(s.entries[i].id), e[0].str());
      std::vector<std::pair<std::string, std::string>> fields;
      for (size_t k = 0; k + 1 < e[1].array().size(); k += 2) {
        fields.emplace_back(e[1].array()[k].str(), e[1].array()[k + 1].str());
      }
      EXPECT_EQ(s.entries[i].fields, fields) << e[0].str();
    }
    // The stream's metadata and every group, pending entry and consumer, as XINFO STREAM FULL
    // reports them (COUNT 0: all of them).
    auto full = asMap(c_->command({"XINFO", "STREAM", key, "FULL", "COUNT", "0"}));
    EXPECT_EQ(s.length, static_cast<uint64_t>(full["length"].integer()));
    EXPECT_EQ(s.length, s.entries.size());
    EXPECT_EQ(idText(s.last_id), full["last-generated-id"].str());
    // Redis 7.0 writes STREAM_LISTPACKS_2 (19), every later server 21: both carry these.
    EXPECT_TRUE(s.has_v2_meta);
    EXPECT_EQ(idText(s.max_deleted_id), full["max-deleted-entry-id"].str());
    EXPECT_EQ(s.entries_added, static_cast<uint64_t>(full["entries-added"].integer()));
    EXPECT_EQ(idText(s.first_id), full["recorded-first-entry-id"].str());
    const auto& groups = full["groups"].array();
    ASSERT_EQ(s.groups.size(), groups.size());
    std::map<std::string, const rdb::StreamGroup*> by_name;
    for (const auto& g : s.groups) by_name[g.name] = &g;
    for (const auto& gv : groups) {
      auto g = asMap(gv);
      const std::string name = g["name"].str();
      SCOPED_TRACE("group " + name);
      ASSERT_EQ(by_name.count(name), 1u);
      const rdb::StreamGroup& dg = *by_name[name];
      EXPECT_EQ(idText(dg.last_id), g["last-delivered-id"].str());
      EXPECT_EQ(dg.entries_read, g["entries-read"].isNull() ? -1 : g["entries-read"].integer());
      const auto& pel = g["pending"].array();
      ASSERT_EQ(dg.pending.size(), pel.size());
      for (size_t i = 0; i < pel.size(); ++i) {
        const auto& p = pel[i].array();  // id, consumer, delivery time, delivery count
        EXPECT_EQ(idText(dg.pending[i].id), p[0].str());
        EXPECT_EQ(dg.pending[i].consumer, p[1].str());
        EXPECT_EQ(dg.pending[i].delivery_ms, p[2].integer());
        EXPECT_EQ(dg.pending[i].delivery_count, static_cast<uint64_t>(p[3].integer()));
      }
      const auto& consumers = g["consumers"].array();
      ASSERT_EQ(dg.consumers.size(), consumers.size());
      for (size_t i = 0; i < consumers.size(); ++i) {
        auto cm = asMap(consumers[i]);
        const rdb::StreamConsumer& dc = dg.consumers[i];
        EXPECT_EQ(dc.name, cm["name"].str());
        EXPECT_EQ(dc.seen_ms, cm["seen-time"].integer());
        // active-time: Redis 7.2+ and Valkey (type 21 stores it).
        if (cm.count("active-time")) {
          EXPECT_EQ(dc.active_ms, cm["active-time"].integer());
        } else {
          EXPECT_EQ(dc.active_ms, -1);
        }
        const auto& own = cm["pending"].array();
        size_t owned = 0;
        for (const auto& p : dg.pending) owned += p.consumer == dc.name ? 1 : 0;
        EXPECT_EQ(owned, own.size()) << dc.name;
        for (const auto& o : own) {
          const rdb::StreamId id = parseId(o.array()[0].str());
          auto it = std::find_if(dg.pending.begin(), dg.pending.end(),
                                 [&](const rdb::StreamPending& p) { return p.id == id; });
          ASSERT_NE(it, dg.pending.end());
          EXPECT_EQ(it->consumer, dc.name);
        }
      }
      // The same through XPENDING with details and XINFO CONSUMERS.
      const auto xp = arr({"XPENDING", key, name, "-", "+", "1000"});
      ASSERT_EQ(xp.size(), dg.pending.size());
      for (size_t i = 0; i < xp.size(); ++i) {
        const auto& p = xp[i].array();
        EXPECT_EQ(idText(dg.pending[i].id), p[0].str());
        EXPECT_EQ(dg.pending[i].consumer, p[1].str());
        EXPECT_EQ(dg.pending[i].delivery_count, static_cast<uint64_t>(p[3].integer()));
      }
      const auto xc = arr({"XINFO", "CONSUMERS", key, name});
      ASSERT_EQ(xc.size(), dg.consumers.size());
      for (size_t i = 0; i < xc.size(); ++i) {
        auto cm = asMap(xc[i]);
        EXPECT_EQ(dg.consumers[i].name, cm["name"].str());
        size_t owned = 0;
        for (const auto& p : dg.pending) owned += p.consumer == dg.consumers[i].name ? 1 : 0;
        EXPECT_EQ(owned, static_cast<size_t>(cm["pending"].integer()));
      }
    }
    const auto xg = arr({"XINFO", "GROUPS", key});
    ASSERT_EQ(xg.size(), s.groups.size());
    for (const auto& gv : xg) {
      auto g = asMap(gv);
      ASSERT_EQ(by_name.count(g["name"].str()), 1u);
      const rdb::StreamGroup& dg = *by_name[g["name"].str()];
      EXPECT_EQ(dg.pending.size(), static_cast<size_t>(g["pending"].integer()));
      EXPECT_EQ(dg.consumers.size(), static_cast<size_t>(g["consumers"].integer()));
      EXPECT_EQ(dg.entries_read, g["entries-read"].isNull() ? -1 : g["entries-read"].integer());
    }
  }

  std::optional<MatrixServer> kind_;
  std::unique_ptr<RedisServer> server_;
  std::unique_ptr<RespClient> c_;
  int major_ = 0, minor_ = 0;
  std::set<uint8_t> types_seen_;
};

TEST_P(RdbValueMatrixTest, EveryTypeAndEncodingDecodesAsTheServerReportsIt) {
  // Small limits, so that modest keys take the large encodings; inner quicklist nodes
  // LZF-compressed; elements of 100 bytes or more in plain quicklist nodes.
  ok({"CONFIG", "SET", "list-max-listpack-size", "8"});
  ok({"CONFIG", "SET", "list-compress-depth", "1"});
  ok({"CONFIG", "SET", "set-max-intset-entries", "64"});
  ok({"CONFIG", "SET", "zset-max-listpack-entries", "16"});
  ok({"CONFIG", "SET", "hash-max-listpack-entries", "16"});
  ok({"CONFIG", "SET", "stream-node-max-entries", "4"});
  ok({"CONFIG", "SET", "rdbcompression", "yes"});
  ok({"DEBUG", "QUICKLIST-PACKED-THRESHOLD", "100"});

  // Strings: raw, the integer encodings, LZF, empty, binary.
  std::string binary;
  for (int i = 0; i < 256; ++i) binary.push_back(static_cast<char>(i));
  std::string compressible;
  for (int i = 0; i < 200; ++i) compressible += "session-token-" + std::to_string(i % 7) + ";";
  const std::vector<std::pair<std::string, std::string>> strings = {
      {"s:raw", "hello world"},
      {"s:int8", "-7"},
      {"s:int16", "300"},
      {"s:int32", "2147483647"},
      {"s:int64", "9223372036854775807"},
      {"s:empty", ""},
      {"s:binary", binary},
      {"s:lzf", compressible},
      {"s:neg", "-2147483648"}};
  for (const auto& [k, v] : strings) ok({"SET", k, v});

  // Lists: one listpack node; many nodes, the inner ones compressed; plain nodes; integers.
  ok({"RPUSH", "l:small", "a", "b", "17", "-3"});
  RespCommand big = {"RPUSH", "l:big"};
  for (int i = 0; i < 300; ++i)
    big.push_back("element-" + std::to_string(i % 11) + "-padding-padding");
  ok(big);
  RespCommand plain = {"RPUSH", "l:plain"};
  for (int i = 0; i < 20; ++i) {
    plain.push_back(i % 4 == 0 ? std::string(150 + i, static_cast<char>('a' + i))
                               : std::to_string(i));
  }
  ok(plain);
  ok({"RPUSH", "l:ints", "0", "127", "-4096", "4095", "32767", "-8388608", "2147483647",
      "9223372036854775807", "-9223372036854775808"});

  // Sets: intsets of every width, listpack (7.2+), hashtables.
  ok({"SADD", "set:int16", "1", "2", "-5", "300"});
  ok({"SADD", "set:int32", "1", "70000", "-70000"});
  ok({"SADD", "set:int64", "1", "1099511627776", "-9223372036854775808"});
  ok({"SADD", "set:str", "a", "b", "c", "42"});
  RespCommand set_big = {"SADD", "set:big"};
  for (int i = 0; i < 200; ++i) set_big.push_back("member-" + std::to_string(i));
  ok(set_big);
  RespCommand set_bigint = {"SADD", "set:bigint"};
  for (int i = 0; i < 100; ++i) set_bigint.push_back(std::to_string(i * 1000));
  ok(set_bigint);

  // Sorted sets: listpack (integer and text scores, infinities), skiplist (binary scores).
  ok({"ZADD", "z:small", "1", "one", "2.5", "two", "-inf", "low", "+inf", "high", "1e300", "huge",
      "-0.125", "neg", "1000000000000000", "int"});
  RespCommand zbig = {"ZADD", "z:big"};
  for (int i = 0; i < 40; ++i) {
    zbig.push_back(std::to_string(i * 1.25 - 7));
    zbig.push_back("m" + std::to_string(i));
  }
  zbig.insert(zbig.end(), {"inf", "top", "-inf", "bottom"});
  ok(zbig);

  // Hashes: listpack and hashtable.
  ok({"HSET", "h:small", "f", "v", "n", "12", "neg", "-1", "empty", ""});
  RespCommand hbig = {"HSET", "h:big"};
  for (int i = 0; i < 40; ++i) {
    hbig.push_back("field-" + std::to_string(i));
    hbig.push_back(i % 3 ? std::to_string(i * 7919) : "value-" + std::to_string(i));
  }
  ok(hbig);

  // Hashes with field TTLs (Redis 7.4+: listpackex and HASH_METADATA; Valkey 9: HASH_2), some
  // fields without.
  const int64_t now_ms = std::stoll(c_->command({"TIME"}).array()[0].str()) * 1000;
  if (fieldTtls()) {
    ok({"HSET", "h:ttl:small", "a", "1", "b", "two", "c", "3"});
    ok({"HPEXPIREAT", "h:ttl:small", std::to_string(now_ms + 3'600'000), "FIELDS", "1", "a"});
    ok({"HPEXPIREAT", "h:ttl:small", std::to_string(now_ms + 7'200'123), "FIELDS", "1", "b"});
    RespCommand hb = {"HSET", "h:ttl:big"};
    for (int i = 0; i < 30; ++i) {
      hb.push_back("f" + std::to_string(i));
      hb.push_back("v" + std::to_string(i));
    }
    ok(hb);
    for (int i = 0; i < 30; i += 3) {
      ok({"HPEXPIREAT", "h:ttl:big", std::to_string(now_ms + 3'600'000 + i * 1001), "FIELDS", "1",
          "f" + std::to_string(i)});
    }
  }

  // Streams: several nodes (4 entries each), the master fields reused and not, integer values,
  // deleted entries inside nodes, two groups with pending entries of several consumers, a
  // group that read nothing, XSETID past the last entry; and a stream whose entries are all
  // deleted.
  for (int i = 1; i <= 14; ++i) {
    RespCommand x = {"XADD", "x:s", std::to_string(1000 + i) + "-" + std::to_string(i % 3)};
    if (i % 5 == 0) {
      x.insert(x.end(), {"other", "field", "n", std::to_string(i)});
    } else {
      x.insert(x.end(), {"user", "u" + std::to_string(i), "count", std::to_string(i * 100)});
    }
    ok(x);
  }
  ok({"XDEL", "x:s", "1002-2", "1006-0", "1011-2"});
  ok({"XGROUP", "CREATE", "x:s", "g1", "0"});
  ok({"XGROUP", "CREATE", "x:s", "g2", "0"});
  ok({"XGROUP", "CREATE", "x:s", "idle", "$"});
  ok({"XREADGROUP", "GROUP", "g1", "alice", "COUNT", "3", "STREAMS", "x:s", ">"});
  ok({"XREADGROUP", "GROUP", "g1", "bob", "COUNT", "4", "STREAMS", "x:s", ">"});
  ok({"XREADGROUP", "GROUP", "g2", "carol", "COUNT", "2", "STREAMS", "x:s", ">"});
  ok({"XACK", "x:s", "g1", "1004-1"});
  ok({"XCLAIM", "x:s", "g1", "carol", "0", "1001-1"});  // a second delivery, another owner
  ok({"XGROUP", "CREATECONSUMER", "x:s", "g2", "dave"});
  ok({"XSETID", "x:s", "5000-7"});
  ok({"XADD", "x:gone", "1-1", "f", "v"});
  ok({"XGROUP", "CREATE", "x:gone", "g", "0"});
  ok({"XDEL", "x:gone", "1-1"});

  for (const auto& [k, v] : strings) checkString(k);
  checkString("s:int8", 0xC0);
  checkString("s:int16", 0xC1);
  checkString("s:int32", 0xC2);
  checkString("s:lzf", 0xC3);
  for (const char* k : {"l:small", "l:ints"}) checkList(k);
  // The big list has packed nodes, the inner ones LZF-compressed; the other one plain nodes.
  const auto big_nodes = quicklistNodes(checkList("l:big").raw);
  EXPECT_GT(big_nodes.size(), 3u);
  EXPECT_TRUE(
      std::all_of(big_nodes.begin(), big_nodes.end(), [](const auto& n) { return n.first == 2; }));
  EXPECT_TRUE(
      std::any_of(big_nodes.begin(), big_nodes.end(), [](const auto& n) { return n.second; }));
  const auto plain_nodes = quicklistNodes(checkList("l:plain").raw);
  EXPECT_TRUE(std::any_of(plain_nodes.begin(), plain_nodes.end(),
                          [](const auto& n) { return n.first == 1; }));
  EXPECT_TRUE(std::any_of(plain_nodes.begin(), plain_nodes.end(),
                          [](const auto& n) { return n.first == 2; }));
  for (const char* k :
       {"set:int16", "set:int32", "set:int64", "set:str", "set:big", "set:bigint"}) {
    checkSet(k);
  }
  checkZset("z:small");
  checkZset("z:big");
  checkHash("h:small");
  checkHash("h:big");
  if (fieldTtls()) {
    checkHash("h:ttl:small", true);
    checkHash("h:ttl:big", true);
  }
  checkStream("x:s");
  checkStream("x:gone");

  // Every encoding this server writes appeared.
  std::set<uint8_t> want = {0, 18, 11, 2, 17, 5, 16, 4};
  // Streams: STREAM_LISTPACKS_2 in Redis 7.0 (RDB 10), _3 (consumers' active time) from 7.2 on.
  want.insert(kind_->valkey || atLeast(7, 2) ? 21 : 19);
  if (kind_->valkey || atLeast(7, 2)) want.insert(20);  // SET_LISTPACK
  if (fieldTtls()) {
    if (kind_->valkey) {
      want.insert(22);  // HASH_2
    } else {
      want.insert({24, 25});  // HASH_METADATA, HASH_LISTPACK_EX
    }
  }
  EXPECT_EQ(types_seen_, want);
  if (HasFailure()) return;
  std::cout << "[ rdb-value ] " << kind_->name << " " << kind_->version << ": "
            << types_seen_.size() << " value types decoded and matched" << std::endl;
}

TEST_P(RdbValueMatrixTest, OldEncodingsRestoreAsTheyDecode) {
  // Hand-built values of the encodings no supported server writes (Redis 2.x-6.x files), as
  // RESTORE payloads of RDB version 9: the server must accept each and report what the decoder
  // makes of it; the server's own re-encoding (DUMP) must decode to the same.
  const std::string s300(300, 'x');
  struct Case {
    std::string key;
    uint8_t type;
    std::string value;
  };
  const std::vector<Case> cases = {
      {"old:list", 1, len(3) + str("a") + "\xC0\x07" + str("ccc")},
      {"old:list:ziplist", 10,
       str(ziplist({zlStr("a"), zlInt(12), zlInt(-100), zlInt(1000), zlInt(1 << 20), zlInt(1 << 30),
                    zlInt(1LL << 40), zlStr(s300), zlStr("after")}))},
      {"old:list:quicklist", 14,
       len(2) + str(ziplist({zlStr("n1"), zlInt(5)})) + str(ziplist({zlStr("n2"), zlStr(s300)}))},
      {"old:zset:text", 3,
       len(4) + str("a") +
           "\x03"
           "1.5" +
           str("b") + "\xFE" + str("c") + "\xFF" + str("d") +
           "\x05"
           "-2e10"},
      {"old:zset:ziplist", 12,
       str(ziplist(
           {zlStr("m1"), zlInt(3), zlStr("m2"), zlStr("4.75"), zlStr("m3"), zlStr("-inf")}))},
      {"old:hash:zipmap", 9, str(zipmap({{"f1", "v1"}, {"f2", "22"}}))},
      {"old:hash:ziplist", 13, str(ziplist({zlStr("f1"), zlStr("v1"), zlStr("n"), zlInt(-5)}))},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.key);
    rdb::Value mine;
    std::string error;
    ASSERT_TRUE(rdb::decodeValue(c.type, c.value, rdb::Flavor::Redis, mine, error)) << error;
    const RespValue r = c_->command({"RESTORE", c.key, "0", payload(c.type, c.value, 9)});
    ASSERT_FALSE(r.isError()) << r.toString();
    switch (mine.kind) {
      case rdb::Value::Kind::List: {
        std::vector<std::string> want;
        for (const auto& e : arr({"LRANGE", c.key, "0", "-1"})) {
          want.push_back(e.str());
        }
        EXPECT_EQ(mine.elements, want);
        checkList(c.key);
        break;
      }
      case rdb::Value::Kind::ZSet: {
        std::map<std::string, double> want, got;
        const auto a = arr({"ZRANGE", c.key, "0", "-1", "WITHSCORES"});
        for (size_t i = 0; i + 1 < a.size(); i += 2) want[a[i].str()] = parseScore(a[i + 1].str());
        for (const auto& [m, s] : mine.zset) got[m] = s;
        EXPECT_EQ(got, want);
        checkZset(c.key);
        break;
      }
      case rdb::Value::Kind::Hash: {
        std::map<std::string, std::string> want, got;
        const auto a = arr({"HGETALL", c.key});
        for (size_t i = 0; i + 1 < a.size(); i += 2) want[a[i].str()] = a[i + 1].str();
        for (const auto& f : mine.hash) got[f.name] = f.value;
        EXPECT_EQ(got, want);
        checkHash(c.key);
        break;
      }
      default:
        ADD_FAILURE() << "unexpected kind";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Servers, RdbValueMatrixTest,
                         ::testing::Values("redis-7.0", "valkey-8.0", "redis-8.0", "valkey-8.1",
                                           "redis-8", "valkey-9"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& ch : n) {
                             if (ch == '-' || ch == '.') ch = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace xdcr::test
