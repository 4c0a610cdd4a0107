// The RDB walker on snapshots written by a real redis-server: every encoding Redis 7.0 writes,
// fed at every split point, checksums verified, and every entry's raw bytes accepted by RESTORE.

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "source/rdb.h"
#include "tests/support/harness.h"

namespace xdcr::source::rdb {
namespace {

using test::RedisServer;
using test::RespClient;
using test::RespCommand;

TEST(Crc64, CheckValueOfRedisCrc64Jones) {
  EXPECT_EQ(crc64(0, "123456789", 9), 0xe9c6d914c4b8d9caULL);
  // Incremental == one pass, across the slice-by-8 boundary.
  std::string s(1000, 'x');
  for (size_t i = 0; i < s.size(); ++i) s[i] = static_cast<char>(i * 7);
  EXPECT_EQ(crc64(crc64(0, s.data(), 13), s.data() + 13, s.size() - 13),
            crc64(0, s.data(), s.size()));
}

/** Fills a server with one key of every encoding (cf. shared/reference/redis/mkdata.py). */
void fillEveryEncoding(RespClient& c) {
  std::vector<RespCommand> cmds = {
      {"SET", "s:raw", "hello"},
      {"SET", "s:int", "12345"},
      {"SET", "s:lzf", std::string(200, 'a')},
      {"SET", std::string(60, 'k') + ":lzf-key", "v"},  // an LZF-compressed key
      {"SET", "s:ttl", "v", "PX", "600000"},
      {"HSET", "h:small", "f1", "v1", "f2", "v2"},
      {"RPUSH", "l:list", "a", "b", "c"},
      {"SADD", "set:int", "1", "2", "3"},
      {"SADD", "set:str", "a", "b", "c"},
      {"ZADD", "z:small", "1", "a", "2.5", "b"},
      {"XADD", "x:stream", "1-1", "f", "v"},
      {"XADD", "x:stream", "2-1", "f", "w"},
      {"XGROUP", "CREATE", "x:stream", "g1", "0"},
      {"XREADGROUP", "GROUP", "g1", "c1", "COUNT", "1", "STREAMS", "x:stream", ">"},
      {"SELECT", "3"},
      {"SET", "db3:key", "v", "EX", "1000"},
      {"SELECT", "0"},
  };
  std::vector<std::string> big_hash = {"HSET", "h:big"};
  std::vector<std::string> big_set = {"SADD", "set:big"};
  std::vector<std::string> big_zset = {"ZADD", "z:big"};
  for (int i = 0; i < 300; ++i) {
    big_hash.push_back("field" + std::to_string(i));
    big_hash.push_back(std::string(30, 'v') + std::to_string(i));
    big_set.push_back("member" + std::to_string(i));
    big_zset.push_back(std::to_string(i) + ".5");
    big_zset.push_back("m" + std::to_string(i));
  }
  cmds.push_back(big_hash);
  cmds.push_back(big_set);
  cmds.push_back(big_zset);
  c.pipeline(cmds);
  c.select(0);
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Walked {
  std::map<std::string, std::pair<uint8_t, std::string>> keys;  // "db:key" -> (type, raw value)
  std::map<std::string, int64_t> expires;
  uint64_t resize_keys = 0;
  int version = 0;
  bool eof = false;
  std::string error;
};

/** Walks `rdb`, feeding it in two pieces split at `split`. */
Walked walk(const std::string& rdb, size_t split) {
  Walked w;
  Walker walker;
  std::string buf;
  size_t fed = 0;
  auto pump = [&](size_t upto) {
    buf.append(rdb, fed, upto - fed);
    fed = upto;
    for (;;) {
      Item item;
      Result r = walker.next(buf, item);
      if (r.status == Status::NeedMore) return;
      if (r.status == Status::Error) {
        w.error = r.error;
        return;
      }
      if (item.kind == ItemKind::Key) {
        std::string id = std::to_string(item.db) + ":" + std::string(item.key);
        w.keys[id] = {item.type, std::string(item.value)};
        if (item.expire_ms) w.expires[id] = item.expire_ms;
      } else if (item.kind == ItemKind::ResizeDb) {
        w.resize_keys += item.db_size;
      } else if (item.kind == ItemKind::Eof) {
        w.eof = true;
      }
      buf.erase(0, r.consumed);
    }
  };
  pump(split);
  if (w.error.empty()) pump(rdb.size());
  w.version = walker.version();
  return w;
}

class RdbWalkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RespClient c = server_.client();
    fillEveryEncoding(c);
    ASSERT_EQ(c.command({"SAVE"}).str(), "OK");
    rdb_ = readFile(server_.dir() + "/dump.rdb");
    ASSERT_GT(rdb_.size(), 100u);
  }
  // Thresholds pinned: Debian's build does not use upstream's defaults (hash: 512 entries).
  RedisServer server_{{"--rdbcompression", "yes", "--hash-max-listpack-entries", "128",
                       "--zset-max-listpack-entries", "128", "--set-max-intset-entries", "512"}};
  std::string rdb_;
};

TEST_F(RdbWalkerTest, FindsEveryKeyWithItsTypeAndDeadline) {
  Walked w = walk(rdb_, rdb_.size());
  ASSERT_TRUE(w.error.empty()) << w.error;
  EXPECT_TRUE(w.eof);
  EXPECT_EQ(w.version, 10);
  EXPECT_EQ(w.keys.size(), 15u);
  EXPECT_EQ(w.resize_keys, 15u);
  std::map<std::string, int> want_types = {
      {"0:s:raw", 0},   {"0:s:int", 0},     {"0:s:lzf", 0},   {"0:h:small", 16}, {"0:h:big", 4},
      {"0:l:list", 18}, {"0:set:int", 11},  {"0:set:str", 2}, {"0:set:big", 2},  {"0:z:small", 17},
      {"0:z:big", 5},   {"0:x:stream", 19}, {"3:db3:key", 0}};
  for (const auto& [id, type] : want_types) {
    ASSERT_TRUE(w.keys.count(id)) << id;
    EXPECT_EQ(w.keys[id].first, type) << id;
  }
  EXPECT_TRUE(w.keys.count("0:" + std::string(60, 'k') + ":lzf-key"));
  ASSERT_TRUE(w.expires.count("0:s:ttl"));
  RespClient c = server_.client();
  EXPECT_EQ(w.expires["0:s:ttl"], c.command({"PEXPIRETIME", "s:ttl"}).integer());
}

TEST_F(RdbWalkerTest, EverySplitPointGivesTheSameItems) {
  Walked ref = walk(rdb_, rdb_.size());
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  for (size_t split = 0; split <= rdb_.size(); split += (split < 64 ? 1 : 7)) {
    Walked w = walk(rdb_, split);
    ASSERT_TRUE(w.error.empty()) << "split " << split << ": " << w.error;
    ASSERT_TRUE(w.eof) << split;
    ASSERT_EQ(w.keys, ref.keys) << split;
  }
}

TEST_F(RdbWalkerTest, ACorruptedByteIsACaughtChecksumMismatch) {
  std::string bad = rdb_;
  size_t at = bad.find("hello");
  ASSERT_NE(at, std::string::npos);
  bad[at] = 'j';
  Walked w = walk(bad, bad.size());
  EXPECT_NE(w.error.find("checksum mismatch"), std::string::npos) << w.error;
  // Truncation never completes and never errs on its own: the caller knows where the end is.
  Walked t = walk(rdb_.substr(0, rdb_.size() / 2), rdb_.size() / 2);
  EXPECT_TRUE(t.error.empty());
  EXPECT_FALSE(t.eof);
}

TEST_F(RdbWalkerTest, HostileInputIsAnErrorNotACrash) {
  Walked w = walk("REDIS0010\xfe\xc0", 11);  // SELECTDB with a string encoding
  EXPECT_FALSE(w.error.empty());
  Walked v = walk("REDIS0010\x63", 10);  // unknown value type 0x63
  EXPECT_EQ(v.keys.size(), 0u);
  Walked h = walk("NOTREDIS!", 9);
  EXPECT_NE(h.error.find("not an RDB"), std::string::npos);
}

// Found by fuzz/fuzz_rdb.cc: an LZF string's declared length was allocated (up to 4 GiB for an
// AUX field, 512 MiB for a key) before its few compressed bytes were found not to decompress.
// LZF expands at most 88 x, so a larger declared length is an error before any allocation.
TEST(RdbWalker, DeclaredValuesTheDataCannotHaveAreErrors) {
  using namespace std::string_literals;
  // AUX: key "a", value LZF with 1 compressed byte declaring 4 GiB - 1.
  Walked aux = walk("REDIS0010\xfa\x01\x61\xc3\x01\x80\xff\xff\xff\xffX"s, 20);
  EXPECT_NE(aux.error.find("LZF length inconsistent"), std::string::npos) << aux.error;
  // A key of 512 MiB declared in 1 byte.
  Walked key = walk("REDIS0010\x00\xc3\x01\x80\x20\x00\x00\x00X"s, 18);
  EXPECT_NE(key.error.find("LZF length inconsistent"), std::string::npos) << key.error;
  // At the bound (88 x) it is only data that does not decompress.
  Walked bound = walk("REDIS0010\x00\xc3\x01\x40\x58X"s, 15);
  EXPECT_NE(bound.error.find("does not decompress"), std::string::npos) << bound.error;
  // An LRU idle time beyond int64 became a negative idle_s (ignored, or -1 = "none"), and one
  // just below made Redis overflow in RESTORE ... IDLETIME: an error.
  Walked idle = walk("REDIS0010\xf8\x81\x8d\x00\x05\x6c\x72\x8c\xfb\x00\x00\x01k\x01v"s, 24);
  EXPECT_NE(idle.error.find("absurd LRU idle time"), std::string::npos) << idle.error;
  // The header's version is exactly four digits.
  Walked header = walk("REDIS1\xeb\xaa\x00"s, 9);
  EXPECT_NE(header.error.find("not an RDB"), std::string::npos) << header.error;
}

// Valkey 9's RDB 80 (what it sends a replica announcing 9.0: server-versions-notes.md §3.2): its
// own magic, HASH_2 (type 22: name, value, 8-byte expiry per field), and the SLOT_INFO opcode a
// cluster node (Redis 7.4+, Valkey 8+) writes before a slot's keys. Type 22 and 24/25 are read
// by whose file it is. (The snapshot of a real Valkey 9 is walked in matrix_test.)
TEST(RdbWalker, ValkeysRdb80AndSlotInfo) {
  using namespace std::string_literals;
  // (hex escapes split from the letters that follow: "\x02" "f1", not "\x02f1")
  const std::string hash2 = "\x16\x02"s + "hx" + "\x02\x02" + "f1" + "\x02" + "v1" +
                            "\x10\x27\x00\x00\x00\x00\x00\x00"s + "\x02" + "f2" + "\x02" + "v2" +
                            std::string(8, '\xff');
  const std::string body = "\xfe\x00\xf4\x05\x01\x00"s + hash2 + "\xff"s + std::string(8, '\0');
  Walked v = walk("VALKEY080"s + body, 12);
  ASSERT_EQ(v.error, "");
  EXPECT_TRUE(v.eof);
  EXPECT_EQ(v.version, 80);
  ASSERT_EQ(v.keys.count("0:hx"), 1u);
  EXPECT_EQ(v.keys["0:hx"].first, 22);
  EXPECT_EQ(v.keys["0:hx"].second, hash2.substr(4));
  // The same bytes in a Redis file: 22 is not Valkey's HASH_2 there.
  Walked r = walk("REDIS0012"s + body, 12);
  EXPECT_NE(r.error.find("value type 22"), std::string::npos) << r.error;
  // Versions this agent does not read are named.
  Walked newer = walk("REDIS0013"s + body, 12);
  EXPECT_NE(newer.error.find("REDIS0001 to REDIS0012 and VALKEY080"), std::string::npos)
      << newer.error;
  Walked valkey81 = walk("VALKEY081"s + body, 12);
  EXPECT_NE(valkey81.error.find("not an RDB file this agent can read"), std::string::npos);
  // Valkey's types 0-21 travel as RDB 11 (Valkey writes them so); its HASH_2 as 80.
  Walker w;
  Item item;
  ASSERT_EQ(w.next("VALKEY080"s, item).status, Status::Item);
  EXPECT_EQ(payloadVersion(w, 20), 11);
  EXPECT_EQ(payloadVersion(w, 22), 80);
}

TEST_F(RdbWalkerTest, EveryEntryIsAValidRestorePayload) {
  Walked w = walk(rdb_, rdb_.size());
  ASSERT_TRUE(w.error.empty()) << w.error;
  RedisServer other;
  RespClient src = server_.client();
  RespClient dst = other.client();
  for (const auto& [id, tv] : w.keys) {
    int db = std::stoi(id.substr(0, id.find(':')));
    std::string key = id.substr(id.find(':') + 1);
    std::string payload(1, static_cast<char>(tv.first));
    payload += tv.second;
    payload += std::string("\x0a\x00", 2);  // RDB version 10, little-endian
    uint64_t crc = crc64(0, payload.data(), payload.size());
    payload.append(reinterpret_cast<const char*>(&crc), 8);
    dst.select(db);
    auto r = dst.command({"RESTORE", key, "0", payload, "REPLACE"});
    ASSERT_FALSE(r.isError()) << id << ": " << r.toString();
    // Same logical content: DUMP payloads are equal except where hashtable order differs.
    src.select(db);
    if (key != "h:big" && key != "set:big" && key != "set:str") {
      EXPECT_EQ(dst.command({"DUMP", key}).str(), src.command({"DUMP", key}).str()) << id;
    } else {
      EXPECT_EQ(dst.command({"TYPE", key}).str(), src.command({"TYPE", key}).str());
    }
  }
}

}  // namespace
}  // namespace xdcr::source::rdb
