// The value decoder (source/rdb_value.h) on hand-built values of every encoding, including the
// old ones no supported server writes any more (zipmap, ziplists, quicklist 1, linked lists, text
// scores), and on malformed values. The bytes are built here from the formats as Redis's sources
// describe them (src/rdb.c, listpack.c, ziplist.c, zipmap.c, intset.c, t_stream.c), independently
// of the decoder; a few are literal DUMP payloads captured from real servers (named where used).
// tests/integration/rdb_value_matrix_test.cc checks the decoder against every matrix server, and
// RESTOREs this file's old encodings into them.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <liblzf/lzf.h>

#include "source/rdb_value.h"

namespace xdcr::source::rdb {
namespace {

// ---- builders: RDB primitives ----

std::string le(uint64_t v, int bytes) {
  std::string out;
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return out;
}
std::string be(uint64_t v, int bytes) {
  std::string out;
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return out;
}

/** An RDB length: 6 bits, 14 bits, 0x80 + 32-bit big-endian, 0x81 + 64-bit big-endian. */
std::string len(uint64_t n) {
  if (n < 64) return std::string(1, static_cast<char>(n));
  if (n < 16384) return {static_cast<char>(0x40 | (n >> 8)), static_cast<char>(n & 0xff)};
  if (n <= UINT32_MAX) return "\x80" + be(n, 4);
  return "\x81" + be(n, 8);
}
std::string str(std::string_view s) {
  return len(s.size()) + std::string(s);
}
std::string binDouble(double d) {
  std::string out(8, '\0');
  std::memcpy(out.data(), &d, 8);
  return out;
}
std::string lzfString(std::string_view s) {
  std::string out(s.size() + 64, '\0');
  unsigned n = lzf_compress(s.data(), s.size(), out.data(), out.size());
  EXPECT_GT(n, 0u);
  out.resize(n);
  return "\xC3" + len(n) + len(s.size()) + out;
}

// ---- listpack (listpack.c) ----

std::string lpBacklen(uint64_t l) {
  if (l <= 127) return std::string(1, static_cast<char>(l));
  std::string out;
  int groups = l < 16383 ? 2 : l < 2097151 ? 3 : l < 268435455 ? 4 : 5;
  for (int i = groups - 1; i >= 0; --i) {
    auto g = static_cast<uint8_t>((l >> (7 * i)) & 127);
    out.push_back(static_cast<char>(i == groups - 1 ? g : g | 128));
  }
  return out;
}
std::string lpWithBacklen(const std::string& e) {
  return e + lpBacklen(e.size());
}
std::string lpStr(std::string_view s) {
  std::string e;
  if (s.size() < 64) {
    e.push_back(static_cast<char>(0x80 | s.size()));
  } else if (s.size() < 4096) {
    e.push_back(static_cast<char>(0xE0 | (s.size() >> 8)));
    e.push_back(static_cast<char>(s.size() & 0xff));
  } else {
    e = "\xF0" + le(s.size(), 4);
  }
  return lpWithBacklen(e + std::string(s));
}
std::string lpInt(int64_t v) {
  const auto u = static_cast<uint64_t>(v);
  std::string e;
  if (v >= 0 && v <= 127) {
    e.push_back(static_cast<char>(v));
  } else if (v >= -4096 && v <= 4095) {
    e.push_back(static_cast<char>(0xC0 | ((u >> 8) & 0x1f)));
    e.push_back(static_cast<char>(u & 0xff));
  } else if (v >= INT16_MIN && v <= INT16_MAX) {
    e = "\xF1" + le(u, 2);
  } else if (v >= -(1 << 23) && v < (1 << 23)) {
    e = "\xF2" + le(u, 3);
  } else if (v >= INT32_MIN && v <= INT32_MAX) {
    e = "\xF3" + le(u, 4);
  } else {
    e = "\xF4" + le(u, 8);
  }
  return lpWithBacklen(e);
}
std::string listpack(const std::vector<std::string>& entries, int count = -1) {
  std::string body;
  for (const auto& e : entries) body += e;
  const size_t total = 6 + body.size() + 1;
  return le(total, 4) + le(count < 0 ? entries.size() : count, 2) + body + "\xFF";
}

// ---- ziplist (ziplist.c) ----

/** An entry's encoding and data, without its prevlen. */
std::string zlStr(std::string_view s) {
  std::string e;
  if (s.size() < 64) {
    e.push_back(static_cast<char>(s.size()));
  } else if (s.size() < 16384) {
    e.push_back(static_cast<char>(0x40 | (s.size() >> 8)));
    e.push_back(static_cast<char>(s.size() & 0xff));
  } else {
    e = "\x80" + be(s.size(), 4);
  }
  return e + std::string(s);
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
  if (entries.empty()) tail = 10;
  const size_t total = 10 + body.size() + 1;
  return le(total, 4) + le(tail, 4) + le(entries.size(), 2) + body + "\xFF";
}

// ---- zipmap (zipmap.c) and intset (intset.c) ----

std::string zmLen(size_t n) {
  return n < 254 ? std::string(1, static_cast<char>(n)) : "\xFE" + le(n, 4);
}
std::string zipmap(const std::vector<std::pair<std::string, std::string>>& pairs,
                   uint8_t free_bytes = 0) {
  std::string out(1, static_cast<char>(pairs.size() < 254 ? pairs.size() : 254));
  for (const auto& [f, v] : pairs) {
    out += zmLen(f.size());
    out += f;
    out += zmLen(v.size());
    out += static_cast<char>(free_bytes);
    out += v;
    out += std::string(free_bytes, 'X');
  }
  return out + "\xFF";
}
std::string intsetBlob(int width, const std::vector<int64_t>& v) {
  std::string out = le(width, 4) + le(v.size(), 4);
  for (int64_t x : v) out += le(static_cast<uint64_t>(x), width);
  return out;
}

// ---- helpers ----

Value decodeOk(uint8_t type, const std::string& raw, Flavor flavor = Flavor::Redis) {
  Value v;
  std::string error;
  EXPECT_TRUE(decodeValue(type, raw, flavor, v, error)) << error;
  return v;
}
std::string decodeError(uint8_t type, const std::string& raw, Flavor flavor = Flavor::Redis) {
  Value v;
  std::string error;
  EXPECT_FALSE(decodeValue(type, raw, flavor, v, error)) << "decoded a malformed value";
  EXPECT_FALSE(error.empty());
  return error;
}
std::vector<std::pair<std::string, std::string>> pairs(const Value& v) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& f : v.hash) out.emplace_back(f.name, f.value);
  return out;
}
std::string unhex(std::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}
using Strings = std::vector<std::string>;

// ---- strings ----

TEST(RdbValueString, RawIntegerAndLzf) {
  EXPECT_EQ(decodeOk(0, str("hello")).string, "hello");
  EXPECT_EQ(decodeOk(0, str("")).string, "");
  EXPECT_EQ(decodeOk(0, "\xC0\xFB").string, "-5");                      // int8
  EXPECT_EQ(decodeOk(0, "\xC1" + le(0x8000u - 1, 2)).string, "32767");  // int16
  EXPECT_EQ(decodeOk(0, "\xC1" + le(0xFF38, 2)).string, "-200");
  EXPECT_EQ(decodeOk(0, "\xC2" + le(0x80000000u, 4)).string, "-2147483648");  // int32
  // LZF by hand: literal run "abc" (ctrl 2), then a 9-byte back-reference 3 back (ctrl 7<<5 with
  // the extra length byte 0, offset-1 = 2).
  const std::string lzf = std::string("\xC3") + len(7) + len(12) +
                          std::string(
                              "\x02"
                              "abc\xE0\x00\x02",
                              7);
  EXPECT_EQ(decodeOk(0, lzf).string, "abcabcabcabc");
  const std::string long_text = std::string(5000, 'z') + "tail" + std::string(300, 'q');
  EXPECT_EQ(decodeOk(0, lzfString(long_text)).string, long_text);
  // A 14-bit and a 32-bit length.
  const std::string mid(1000, 'm'), big(70000, 'b');
  EXPECT_EQ(decodeOk(0, str(mid)).string, mid);
  EXPECT_EQ(decodeOk(0, "\x80" + be(big.size(), 4) + big).string, big);
}

TEST(RdbValueString, Malformed) {
  decodeError(0, "");
  decodeError(0, len(10) + "short");
  decodeError(0, "\xC1\x01");                  // int16 cut short
  decodeError(0, std::string("\xC4\x00", 2));  // no string encoding 4
  decodeError(0, str("ok") + "x");             // a byte after the value
  decodeError(0, std::string("\x82\x00", 2));  // no length encoding 0x82
  // LZF: more than 88x expansion claimed; data that does not decompress to the stated length.
  decodeError(0, std::string("\xC3") + len(7) + len(7 * 88 + 1) + std::string(7, 'a'));
  decodeError(0, std::string("\xC3") + len(7) + len(13) +
                     std::string("\x02"
                                 "abc\xE0\x00\x02",
                                 7));
  decodeError(0, std::string("\xC3") + len(2) + len(5) +
                     "\x1F"
                     "a");  // literal run past the end
  const std::string e = decodeError(0, std::string("\x80\xFF\xFF\xFF\xFF") + "x");
  EXPECT_NE(e.find("value type 0"), std::string::npos) << e;
}

// ---- lists ----

TEST(RdbValueList, LinkedList) {
  const Value v = decodeOk(1, len(3) + str("a") + "\xC0\x07" + str(""));
  EXPECT_EQ(v.kind, Value::Kind::List);
  EXPECT_EQ(v.elements, (Strings{"a", "7", ""}));
}

TEST(RdbValueList, ZiplistEveryEncoding) {
  const std::string s64(63, 'x'), s14(300, 'y'), s32(17000, 'w');
  const std::vector<std::string> entries = {
      zlInt(0),       zlInt(12),         zlInt(-1),      zlInt(100),         zlInt(-300),
      zlInt(1 << 20), zlInt(-(1 << 23)), zlInt(1 << 30), zlInt(INT64_MIN),   zlStr(""),
      zlStr(s64),     zlStr(s14),        zlStr(s32),     zlStr("after-big"),
  };
  // The entry after the 17000-byte one has a 5-byte prevlen.
  const Value v = decodeOk(10, str(ziplist(entries)));
  EXPECT_EQ(v.kind, Value::Kind::List);
  EXPECT_EQ(v.elements, (Strings{"0", "12", "-1", "100", "-300", std::to_string(1 << 20),
                                 std::to_string(-(1 << 23)), std::to_string(1 << 30),
                                 std::to_string(INT64_MIN), "", s64, s14, s32, "after-big"}));
}

TEST(RdbValueList, QuicklistOfZiplistsOneCompressed) {
  const std::string node2 = ziplist({zlStr(std::string(200, 'c')), zlInt(5)});
  const std::string raw = len(3) + str(ziplist({zlStr("a"), zlStr("b")})) + lzfString(node2) +
                          str(ziplist({}));  // an empty node is skipped, as Redis does
  const Value v = decodeOk(14, raw);
  EXPECT_EQ(v.elements, (Strings{"a", "b", std::string(200, 'c'), "5"}));
}

TEST(RdbValueList, Quicklist2PlainAndPackedNodes) {
  const std::string big(5000, 'P');
  const std::vector<std::string> lp = {
      lpInt(0),
      lpInt(127),
      lpInt(-1),
      lpInt(4095),
      lpInt(-4096),
      lpInt(30000),
      lpInt(-30000),
      lpInt(1 << 22),
      lpInt(-(1 << 23)),
      lpInt(INT32_MIN),
      lpInt(1LL << 40),
      lpInt(INT64_MAX),
      lpStr(""),
      lpStr(std::string(63, 's')),
      lpStr(std::string(64, 't')),
      lpStr(std::string(4095, 'u')),
      lpStr(std::string(4096, 'v')),
  };
  const std::string raw = len(3) + len(2) + str(listpack(lp)) + len(1) + str(big) + len(2) +
                          lzfString(listpack({lpStr("last")}));
  const Value v = decodeOk(18, raw);
  EXPECT_EQ(
      v.elements,
      (Strings{"0", "127", "-1", "4095", "-4096", "30000", "-30000", std::to_string(1 << 22),
               std::to_string(-(1 << 23)), std::to_string(INT32_MIN), std::to_string(1LL << 40),
               std::to_string(INT64_MAX), "", std::string(63, 's'), std::string(64, 't'),
               std::string(4095, 'u'), std::string(4096, 'v'), big, "last"}));
}

TEST(RdbValueList, Malformed) {
  decodeError(1, len(1000000) + str("a"));               // count beyond the bytes
  decodeError(18, len(1) + len(3) + str(listpack({})));  // no container 3
  decodeError(18, len(1) + len(1) + str(""));            // empty plain node
  const std::string lp = listpack({lpStr("a"), lpInt(1)});
  std::string bad_end = lp;
  bad_end.back() = '\xFE';
  decodeError(18, len(1) + len(2) + str(bad_end));      // no terminator
  decodeError(18, len(1) + len(2) + str(lp + "\xFF"));  // header size lies
  std::string more = lp;
  more[4] = 3;  // header count lies
  decodeError(18, len(1) + len(2) + str(more));
  std::string backlen = listpack({lpStr("ab")});
  backlen[6 + 3] = 9;  // the entry's backlen
  decodeError(18, len(1) + len(2) + str(backlen));
  std::string cut = listpack({lpStr("abcdef")});
  cut[6] = static_cast<char>(0x80 | 40);  // a string longer than the listpack
  decodeError(18, len(1) + len(2) + str(cut));
  std::string enc = listpack({lpInt(1)});
  enc[6] = '\xF7';  // no such encoding
  decodeError(18, len(1) + len(2) + str(enc));
  // Ziplists: a lying prevlen, a lying tail, no terminator, a bad encoding.
  std::string zl = ziplist({zlStr("a"), zlStr("b")});
  std::string z1 = zl;
  z1[10 + 3] = 5;  // second entry's prevlen
  decodeError(10, str(z1));
  std::string z2 = zl;
  z2[4] = 11;
  decodeError(10, str(z2));
  std::string z3 = zl;
  z3.back() = 'x';
  decodeError(10, str(z3));
  std::string z4 = zl;
  z4[11] = '\xC5';
  decodeError(10, str(z4));
}

// ---- sets ----

TEST(RdbValueSet, HashtableIntsetListpack) {
  EXPECT_EQ(decodeOk(2, len(2) + str("x") + str("y")).elements, (Strings{"x", "y"}));
  EXPECT_EQ(decodeOk(11, str(intsetBlob(2, {-3, 7, 32767}))).elements,
            (Strings{"-3", "7", "32767"}));
  EXPECT_EQ(decodeOk(11, str(intsetBlob(4, {INT32_MIN, 70000}))).elements,
            (Strings{std::to_string(INT32_MIN), "70000"}));
  EXPECT_EQ(decodeOk(11, str(intsetBlob(8, {INT64_MIN, 1, INT64_MAX}))).elements,
            (Strings{std::to_string(INT64_MIN), "1", std::to_string(INT64_MAX)}));
  const Value v = decodeOk(20, str(listpack({lpStr("a"), lpInt(-77)})));
  EXPECT_EQ(v.kind, Value::Kind::Set);
  EXPECT_EQ(v.elements, (Strings{"a", "-77"}));
}

TEST(RdbValueSet, Malformed) {
  decodeError(11, str(intsetBlob(3, {1})));  // no 3-byte encoding
  std::string lying = intsetBlob(2, {1, 2});
  lying[4] = 3;
  decodeError(11, str(lying));
  decodeError(11, str("\x02\x00\x00"));  // shorter than the header
  decodeError(2, len(2) + str("x"));     // one member missing
}

// ---- sorted sets ----

TEST(RdbValueZset, TextScoresIncludingInfinitiesAndNan) {
  const std::string raw = len(5) + str("a") +
                          "\x03"
                          "1.5" +
                          str("b") + "\xFE" + str("c") + "\xFF" + str("d") + "\xFD" + str("e") +
                          "\x17"
                          "-1.0000000000000001e+20";
  const Value v = decodeOk(3, raw);
  ASSERT_EQ(v.zset.size(), 5u);
  EXPECT_EQ(v.zset[0], (std::pair<std::string, double>{"a", 1.5}));
  EXPECT_EQ(v.zset[1].second, INFINITY);
  EXPECT_EQ(v.zset[2].second, -INFINITY);
  EXPECT_TRUE(std::isnan(v.zset[3].second));
  EXPECT_EQ(v.zset[4].first, "e");
  EXPECT_EQ(v.zset[4].second, -1.0000000000000001e+20);
  decodeError(3, len(1) + str("a") +
                     "\x03"
                     "1x5");  // not a number
  decodeError(3, len(1) + str("a") +
                     "\x09"
                     "1.5");  // cut short
}

TEST(RdbValueZset, BinaryScores) {
  const Value v = decodeOk(5, len(2) + str("hi") + binDouble(-2.25) + str("lo") + binDouble(0.1));
  EXPECT_EQ(v.zset, (std::vector<std::pair<std::string, double>>{{"hi", -2.25}, {"lo", 0.1}}));
  decodeError(5, len(1) + str("hi") + std::string(2, '\0'));  // 2 of 8 bytes
}

TEST(RdbValueZset, ZiplistAndListpack) {
  const auto want = std::vector<std::pair<std::string, double>>{
      {"a", 1}, {"b", 2.5}, {"7", -1e300}, {"c", -INFINITY}, {"d", 1LL << 40}};
  const Value z = decodeOk(
      12, str(ziplist({zlStr("a"), zlInt(1), zlStr("b"), zlStr("2.5"), zlInt(7), zlStr("-1e+300"),
                       zlStr("c"), zlStr("-inf"), zlStr("d"), zlInt(1LL << 40)})));
  EXPECT_EQ(z.zset, want);
  const Value l = decodeOk(
      17, str(listpack({lpStr("a"), lpInt(1), lpStr("b"), lpStr("2.5"), lpInt(7), lpStr("-1e+300"),
                        lpStr("c"), lpStr("-inf"), lpStr("d"), lpInt(1LL << 40)})));
  EXPECT_EQ(l.kind, Value::Kind::ZSet);
  EXPECT_EQ(l.zset, want);
  decodeError(17, str(listpack({lpStr("a"), lpInt(1), lpStr("b")})));  // odd
  decodeError(17, str(listpack({lpStr("a"), lpStr("one")})));          // not a score
}

// ---- hashes ----

TEST(RdbValueHash, HashtableZipmapZiplistListpack) {
  using Pairs = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(pairs(decodeOk(4, len(2) + str("f") + str("v") + str("n") + "\xC0\x05")),
            (Pairs{{"f", "v"}, {"n", "5"}}));
  const std::string long_value(300, 'L');  // a 5-byte zipmap length
  const Value zm = decodeOk(9, str(zipmap({{"foo", "bar"}, {"hello", long_value}}, 2)));
  EXPECT_EQ(zm.kind, Value::Kind::Hash);
  EXPECT_EQ(pairs(zm), (Pairs{{"foo", "bar"}, {"hello", long_value}}));
  // zipmap.c's own example: "foo" => "bar", "hello" => "world".
  EXPECT_EQ(pairs(decodeOk(9, str(std::string("\x02\x03"
                                              "foo\x03\x00"
                                              "bar\x05"
                                              "hello\x05\x00"
                                              "world\xff",
                                              24)))),
            (Pairs{{"foo", "bar"}, {"hello", "world"}}));
  EXPECT_EQ(pairs(decodeOk(13, str(ziplist({zlStr("a"), zlInt(1), zlStr("b"), zlStr("x")})))),
            (Pairs{{"a", "1"}, {"b", "x"}}));
  const Value lp = decodeOk(16, str(listpack({lpStr("a"), lpInt(1), lpInt(2), lpStr("y")})));
  EXPECT_EQ(pairs(lp), (Pairs{{"a", "1"}, {"2", "y"}}));
  EXPECT_FALSE(lp.hasFieldTtls());
  // Valkey 9.1.2: HSET s a 1; DUMP s = 10 <this> 5000 <CRC>: a 12-byte listpack "a", 1.
  EXPECT_EQ(pairs(decodeOk(16,
                           unhex("0c"
                                 "0c000000"
                                 "0200"
                                 "816102"
                                 "0101"
                                 "ff"),
                           Flavor::Valkey)),
            (Pairs{{"a", "1"}}));
}

TEST(RdbValueHash, Malformed) {
  std::string zm = zipmap({{"a", "b"}});
  zm[0] = 2;  // count lies
  decodeError(9, str(zm));
  decodeError(9, str(zipmap({{"a", "b"}}).substr(0, 5)));  // no terminator
  std::string free_past = zipmap({{"a", "b"}});
  free_past[4] = 9;  // free bytes past the end
  decodeError(9, str(free_past));
  decodeError(16, str(listpack({lpStr("a"), lpInt(1), lpStr("b")})));
  decodeError(13, str(ziplist({zlStr("a")})));
  decodeError(4, len(3) + str("a") + str("b"));
}

TEST(RdbValueHash, RedisHashMetadata) {
  // Redis 8.0.6: HSET h2 a 1 b 2 with hash-max-listpack-entries 1, HPEXPIREAT h2 4000000000000
  // FIELDS 1 a, HPEXPIREAT h2 4000000000005 FIELDS 1 b; DUMP h2 = 18 <this> 0c00 <CRC>:
  // minExpire, 2 fields, TTL 1 "a" 1, TTL 6 "b" 2.
  const Value v = decodeOk(24, unhex("00409452a3030000"
                                     "02"
                                     "01"
                                     "0161"
                                     "c001"
                                     "06"
                                     "0162"
                                     "c002"));
  ASSERT_EQ(v.hash.size(), 2u);
  EXPECT_EQ(v.hash[0].name, "a");
  EXPECT_EQ(v.hash[0].value, "1");
  EXPECT_EQ(v.hash[0].expire_ms, 4000000000000);
  EXPECT_EQ(v.hash[1].name, "b");
  EXPECT_EQ(v.hash[1].value, "2");
  EXPECT_EQ(v.hash[1].expire_ms, 4000000000005);
  EXPECT_TRUE(v.hasFieldTtls());
  // Built: minExpire 1000, a TTL-less field and one due at 1000 + 41 - 1.
  const Value b = decodeOk(
      24, le(1000, 8) + len(2) + len(0) + str("p") + str("q") + len(41) + str("r") + str("s"));
  ASSERT_EQ(b.hash.size(), 2u);
  EXPECT_EQ(b.hash[0].expire_ms, 0);
  EXPECT_EQ(b.hash[1].expire_ms, 1040);
  // A TTL past Redis's 48-bit limit; type 24 is not Valkey's.
  decodeError(24, le(1000, 8) + len(1) + "\x81" + be(1ULL << 50, 8) + str("a") + str("b"));
  decodeError(24, le(1000, 8) + len(1) + len(1) + str("a") + str("b"), Flavor::Valkey);
}

TEST(RdbValueHash, RedisListpackEx) {
  // Redis 8.0.6: HSET h a 1 b 2 c xyz, HPEXPIREAT h 4000000000000 FIELDS 1 a,
  // HPEXPIREAT h 4000000000005 FIELDS 1 b; DUMP h = 19 <this> 0c00 <CRC>.
  const std::string dumped = unhex(
      "00409452a30300002f2f00000009008161020101f400409452a30300000981620202"
      "01f405409452a3030000098163028378797a040001ff");
  const Value v = decodeOk(25, dumped);
  ASSERT_EQ(v.hash.size(), 3u);
  EXPECT_EQ(v.hash[0].name, "a");
  EXPECT_EQ(v.hash[0].expire_ms, 4000000000000);
  EXPECT_EQ(v.hash[1].name, "b");
  EXPECT_EQ(v.hash[1].value, "2");
  EXPECT_EQ(v.hash[1].expire_ms, 4000000000005);
  EXPECT_EQ(v.hash[2].name, "c");
  EXPECT_EQ(v.hash[2].value, "xyz");
  EXPECT_EQ(v.hash[2].expire_ms, 0);
  // Built; then not triplets, and a TTL that is a string.
  const Value b = decodeOk(25, le(0, 8) + str(listpack({lpStr("f"), lpStr("v"), lpInt(0)})));
  EXPECT_FALSE(b.hasFieldTtls());
  decodeError(25, le(0, 8) + str(listpack({lpStr("f"), lpStr("v")})));
  decodeError(25, le(0, 8) + str(listpack({lpStr("f"), lpStr("v"), lpStr("soon")})));
  decodeError(25, le(0, 8));
}

TEST(RdbValueHash, ValkeyHash2) {
  // Valkey 9.1.2: HSET h a 1 b 2 c xyz, HPEXPIREAT h 4000000000000 FIELDS 1 a;
  // DUMP h = 16 <this> 5000 <CRC> (RDB 80).
  const std::string dumped = unhex(
      "030161c00100409452a30300000162c002ffffffffffffffff0163"
      "0378797affffffffffffffff");
  const Value v = decodeOk(22, dumped, Flavor::Valkey);
  ASSERT_EQ(v.hash.size(), 3u);
  EXPECT_EQ(v.hash[0].name, "a");
  EXPECT_EQ(v.hash[0].value, "1");
  EXPECT_EQ(v.hash[0].expire_ms, 4000000000000);
  EXPECT_EQ(v.hash[1].expire_ms, 0);
  EXPECT_EQ(v.hash[2].value, "xyz");
  EXPECT_EQ(v.hash[2].expire_ms, 0);
  // The same bytes are Redis's pre-GA type 22, which is refused; Valkey has no 24/25.
  EXPECT_NE(decodeError(22, dumped, Flavor::Redis).find("release candidate"), std::string::npos);
  decodeError(23, dumped, Flavor::Redis);
  EXPECT_NE(decodeError(25, dumped, Flavor::Valkey).find("unknown value type 25"),
            std::string::npos);
  // An expiry of 0 or below -1 is not Valkey's.
  decodeError(22, len(1) + str("a") + str("b") + le(0, 8), Flavor::Valkey);
  decodeError(22, len(1) + str("a") + str("b") + le(static_cast<uint64_t>(-2), 8), Flavor::Valkey);
  decodeError(22, len(1) + str("a") + str("b") + le(5, 7), Flavor::Valkey);
}

// ---- streams ----

std::string rawId(uint64_t ms, uint64_t seq) {
  return be(ms, 8) + be(seq, 8);
}

/**
 * A stream node with master ID 100-5 and master fields (f1, f2): 100-5 {f1 a, f2 b} (same
 * fields), 100-6 deleted, 103-0 {x 1} (its own fields), 105-2 {f1 c, f2 d}.
 */
std::string streamNodeListpack(int64_t live = 3, int64_t deleted = 1, int64_t lp_count_fix = 0) {
  return listpack({
      lpInt(live),    lpInt(deleted), lpInt(2),
      lpStr("f1"),    lpStr("f2"),    lpInt(0),  // master
      lpInt(2),       lpInt(0),       lpInt(0),
      lpStr("a"),     lpStr("b"),     lpInt(5 + lp_count_fix),
      lpInt(3),       lpInt(0),       lpInt(1),
      lpStr("gone1"), lpStr("gone2"), lpInt(5),  // deleted
      lpInt(0),       lpInt(3),       lpInt(-5),
      lpInt(1),       lpStr("x"),     lpInt(1),
      lpInt(6),       lpInt(2),       lpInt(5),
      lpInt(-3),      lpStr("c"),     lpStr("d"),
      lpInt(5),
  });
}

std::string streamValue(uint8_t type, const std::string& node_lp = streamNodeListpack(),
                        const std::string& consumer_pel = rawId(105, 2)) {
  std::string v = len(2) + str(rawId(100, 5)) + str(node_lp) + str(rawId(200, 0)) +
                  str(listpack({lpInt(1), lpInt(0), lpInt(1), lpStr("k"), lpInt(0), lpInt(2),
                                lpInt(0), lpInt(0), lpStr("v"), lpInt(4)}));
  v += len(4) + len(200) + len(0);                                      // length, last ID
  if (type >= 19) v += len(100) + len(5) + len(100) + len(6) + len(5);  // first, max deleted, added
  v += len(2);                                                          // groups
  // g1: last ID 105-2, entries read 3 (type >= 19); PEL 100-5 and 105-2; consumers alice (owns
  // 100-5) and bob (owns 105-2).
  v += str("g1") + len(105) + len(2);
  if (type >= 19) v += len(3);
  v += len(2) + rawId(100, 5) + le(1700000000000, 8) + len(1) + rawId(105, 2) +
       le(1700000000500, 8) + len(300);
  v += len(2) + str("alice") + le(1700000000100, 8);
  if (type >= 21) v += le(1700000000090, 8);
  v += len(1) + rawId(100, 5) + str("bob") + le(1700000000600, 8);
  if (type >= 21) v += le(1700000000550, 8);
  v += len(1) + consumer_pel;
  // g2: nothing pending, no consumers, entries_read unknown (-1 as a 64-bit length).
  v += str("g2") + len(0) + len(0);
  if (type >= 19) v += "\x81" + be(UINT64_MAX, 8);
  v += len(0) + len(0);
  return v;
}

void expectStream(const Value& v, uint8_t type) {
  ASSERT_EQ(v.kind, Value::Kind::Stream);
  const Stream& s = v.stream;
  ASSERT_EQ(s.entries.size(), 4u);
  EXPECT_EQ(s.entries[0].id, (StreamId{100, 5}));
  EXPECT_EQ(s.entries[0].fields,
            (std::vector<std::pair<std::string, std::string>>{{"f1", "a"}, {"f2", "b"}}));
  EXPECT_EQ(s.entries[1].id, (StreamId{103, 0}));
  EXPECT_EQ(s.entries[1].fields, (std::vector<std::pair<std::string, std::string>>{{"x", "1"}}));
  EXPECT_EQ(s.entries[2].id, (StreamId{105, 2}));
  EXPECT_EQ(s.entries[2].fields,
            (std::vector<std::pair<std::string, std::string>>{{"f1", "c"}, {"f2", "d"}}));
  EXPECT_EQ(s.entries[3].id, (StreamId{200, 0}));
  EXPECT_EQ(s.entries[3].fields, (std::vector<std::pair<std::string, std::string>>{{"k", "v"}}));
  EXPECT_EQ(s.length, 4u);
  EXPECT_EQ(s.last_id, (StreamId{200, 0}));
  EXPECT_EQ(s.has_v2_meta, type >= 19);
  if (type >= 19) {
    EXPECT_EQ(s.first_id, (StreamId{100, 5}));
    EXPECT_EQ(s.max_deleted_id, (StreamId{100, 6}));
    EXPECT_EQ(s.entries_added, 5u);
  }
  ASSERT_EQ(s.groups.size(), 2u);
  const StreamGroup& g = s.groups[0];
  EXPECT_EQ(g.name, "g1");
  EXPECT_EQ(g.last_id, (StreamId{105, 2}));
  EXPECT_EQ(g.entries_read, type >= 19 ? 3 : -1);
  ASSERT_EQ(g.pending.size(), 2u);
  EXPECT_EQ(g.pending[0].id, (StreamId{100, 5}));
  EXPECT_EQ(g.pending[0].consumer, "alice");
  EXPECT_EQ(g.pending[0].delivery_ms, 1700000000000);
  EXPECT_EQ(g.pending[0].delivery_count, 1u);
  EXPECT_EQ(g.pending[1].id, (StreamId{105, 2}));
  EXPECT_EQ(g.pending[1].consumer, "bob");
  EXPECT_EQ(g.pending[1].delivery_count, 300u);
  ASSERT_EQ(g.consumers.size(), 2u);
  EXPECT_EQ(g.consumers[0].name, "alice");
  EXPECT_EQ(g.consumers[0].seen_ms, 1700000000100);
  EXPECT_EQ(g.consumers[0].active_ms, type >= 21 ? 1700000000090 : -1);
  EXPECT_EQ(g.consumers[1].name, "bob");
  EXPECT_EQ(g.consumers[1].active_ms, type >= 21 ? 1700000000550 : -1);
  EXPECT_EQ(s.groups[1].name, "g2");
  EXPECT_EQ(s.groups[1].entries_read, -1);
  EXPECT_TRUE(s.groups[1].pending.empty());
  EXPECT_TRUE(s.groups[1].consumers.empty());
}

TEST(RdbValueStream, EveryVersion) {
  for (uint8_t type : {15, 19, 21}) {
    SCOPED_TRACE(type);
    expectStream(decodeOk(type, streamValue(type)), type);
    expectStream(decodeOk(type, streamValue(type), Flavor::Valkey), type);
  }
}

TEST(RdbValueStream, Malformed) {
  // The master entry's counts, an entry's lp-count, a consumer's PEL entry not in the group's.
  decodeError(21, streamValue(21, streamNodeListpack(2, 1)));
  decodeError(21, streamValue(21, streamNodeListpack(3, 0)));
  decodeError(21, streamValue(21, streamNodeListpack(3, 1, 1)));
  EXPECT_NE(decodeError(21, streamValue(21, streamNodeListpack(), rawId(103, 0)))
                .find("not in the group's PEL"),
            std::string::npos);
  // Two consumers owning one entry.
  decodeError(21, streamValue(21, streamNodeListpack(), rawId(100, 5)));
  // A node key that is not 16 bytes; an empty node.
  decodeError(21, len(1) + str("short") + str(streamNodeListpack()));
  decodeError(21, len(1) + str(rawId(1, 1)) + str(listpack({})));
  // A master entry without its 0 terminator.
  decodeError(21, len(1) + str(rawId(1, 1)) +
                      str(listpack({lpInt(0), lpInt(0), lpInt(1), lpStr("f"), lpInt(9)})) +
                      std::string(20, '\0'));
  // The 15 value is not a 21 value (fewer fields) and the other way round.
  decodeError(21, streamValue(15));
  decodeError(15, streamValue(21));
}

// ---- modules, unknown types, and every prefix of valid values ----

TEST(RdbValue, ModuleAndUnknownTypes) {
  EXPECT_NE(decodeError(7, len(5) + std::string(1, '\0')).find("module"), std::string::npos);
  EXPECT_NE(decodeError(6, "x").find("module"), std::string::npos);
  EXPECT_NE(decodeError(8, "x").find("unknown value type 8"), std::string::npos);
  EXPECT_NE(decodeError(26, "x").find("unknown value type 26"), std::string::npos);
  EXPECT_NE(decodeError(200, "x", Flavor::Valkey).find("unknown value type 200"),
            std::string::npos);
}

/** Every valid value of this file, with its type. */
std::vector<std::pair<uint8_t, std::string>> validValues() {
  return {
      {0, lzfString(std::string(400, 'a') + "b")},
      {1, len(2) + str("a") + str("bc")},
      {10, str(ziplist({zlStr("a"), zlInt(300), zlStr(std::string(300, 'z'))}))},
      {14, len(1) + str(ziplist({zlStr("a"), zlInt(-2)}))},
      {18, len(2) + len(2) + str(listpack({lpStr("a"), lpInt(70000)})) + len(1) + str("plain")},
      {11, str(intsetBlob(4, {1, 2, 3}))},
      {20, str(listpack({lpStr("m"), lpInt(-1)}))},
      {3, len(2) + str("a") +
              "\x03"
              "2.5" +
              str("b") + "\xFE"},
      {5, len(1) + str("a") + binDouble(3)},
      {12, str(ziplist({zlStr("a"), zlStr("1.5")}))},
      {17, str(listpack({lpStr("a"), lpInt(2)}))},
      {4, len(1) + str("f") + str("v")},
      {9, str(zipmap({{"f", "v"}, {"g", std::string(260, 'w')}}, 1))},
      {13, str(ziplist({zlStr("f"), zlInt(9)}))},
      {16, str(listpack({lpStr("f"), lpStr("v")}))},
      {24, le(50, 8) + len(1) + len(3) + str("f") + str("v")},
      {25, le(50, 8) + str(listpack({lpStr("f"), lpStr("v"), lpInt(52)}))},
      {15, streamValue(15)},
      {19, streamValue(19)},
      {21, streamValue(21)},
  };
}

TEST(RdbValue, EveryPrefixOfAValidValueIsAnError) {
  for (const auto& [type, raw] : validValues()) {
    SCOPED_TRACE(static_cast<int>(type));
    Value v;
    std::string error;
    ASSERT_TRUE(decodeValue(type, raw, Flavor::Redis, v, error)) << error;
    for (size_t n = 0; n < raw.size(); ++n) {
      ASSERT_FALSE(decodeValue(type, std::string_view(raw).substr(0, n), Flavor::Redis, v, error))
          << "a " << n << "-byte prefix of " << raw.size() << " decoded";
      ASSERT_FALSE(error.empty());
    }
  }
  Value v;
  std::string error;
  ASSERT_TRUE(decodeValue(22, len(1) + str("f") + str("v") + le(9, 8), Flavor::Valkey, v, error));
}

TEST(RdbValue, CorruptedBytesNeverCrash) {
  // Flipped bytes must give a result or an error, never a crash or an out-of-bounds read (run
  // under ASan in CI); the decoded sizes stay bounded by the input.
  std::mt19937 rng(20240611);
  for (const auto& [type, raw] : validValues()) {
    for (int round = 0; round < 300; ++round) {
      std::string bad = raw;
      const int flips = 1 + static_cast<int>(rng() % 3);
      for (int k = 0; k < flips; ++k) bad[rng() % bad.size()] = static_cast<char>(rng() & 0xff);
      Value v;
      std::string error;
      if (!decodeValue(type, bad, Flavor::Redis, v, error)) {
        EXPECT_FALSE(error.empty());
        continue;
      }
      size_t total = v.string.size() + v.elements.size() + v.zset.size() + v.hash.size() +
                     v.stream.entries.size();
      EXPECT_LE(total, bad.size() * 88);
    }
  }
}

}  // namespace
}  // namespace xdcr::source::rdb
