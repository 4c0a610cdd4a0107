// The vectors of expiry-semantics.md §8.6 (P-1 ... P-40) through the pure decision function,
// the field readers, the ISO-8601 parser and the first-seen store (max_lifetime).

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "target/expiry_policy.h"
#include "target/first_seen.h"

namespace xdcr::target {
namespace {

constexpr int64_t kNow = 1'000'000'000'000;  // 2001-09-09T01:46:40Z
constexpr int64_t S = 1000;
constexpr int64_t H = 3600 * S;
using Action = PolicyDecision::Action;

struct Case {
  CollectionPolicy pol;
  int64_t m = 0;

  PolicyDecision run(WriteKind kind, int64_t e, std::optional<std::string_view> value = {},
                     int64_t first_seen_s = 0, int64_t now = kNow) const {
    KeyPolicy k{m, &pol};
    return decide(k, PolicyInput{kind, e, value, now, first_seen_s});
  }
  int64_t set(std::string_view value, int64_t e = 0) const {
    auto d = run(WriteKind::WholeValue, e, value);
    EXPECT_EQ(d.action, Action::Set);
    return d.deadline;
  }
};

Case cosmos(int64_t default_ttl_ms, std::string field = "", int64_t m = 0) {
  Case c;
  c.pol.default_ttl_ms = default_ttl_ms;
  c.pol.ttl_field = std::move(field);
  c.m = m;
  return c;
}

Case arango(int64_t after_ms = 0) {
  Case c;
  c.pol.expire_at_field = "expireAt";
  c.pol.expire_after_ms = after_ms;
  return c;
}

TEST(ExpiryPolicy, P1to9_DefaultTtl) {
  const Case d = cosmos(1 * H);
  EXPECT_EQ(d.set("v"), kNow + 1 * H);                             // P-1
  EXPECT_EQ(d.set("v", kNow + 5 * H), kNow + 5 * H);               // P-2: explicit, not capped
  EXPECT_EQ(cosmos(CollectionPolicy::kNoDefault).set("v"), 0);     // P-3
  EXPECT_EQ(cosmos(1 * H, "", 600 * S).set("v"), kNow + 600 * S);  // P-4: then max_ttl
  auto persist = d.run(WriteKind::DeadlineOnly, 0);                // P-5
  EXPECT_EQ(persist.action, Action::Set);
  EXPECT_EQ(persist.deadline, kNow + 1 * H);
  EXPECT_EQ(d.run(WriteKind::DeadlineOnly, kNow + 2 * H).deadline, kNow + 2 * H);  // P-6
  EXPECT_EQ(d.run(WriteKind::InPlace, 0).action, Action::Untouched);               // P-7
  auto capped = cosmos(1 * H, "", 600 * S).run(WriteKind::InPlace, 0);             // P-8
  EXPECT_EQ(capped.action, Action::Cap);
  EXPECT_EQ(capped.deadline, kNow + 600 * S);
  EXPECT_EQ(d.set("v", 0), kNow + 1 * H);  // P-9: strip_ttl hands E = 0 to the fill
}

TEST(ExpiryPolicy, P10to21_TtlField) {
  const Case on = cosmos(CollectionPolicy::kNoDefault, "ttl");
  const Case dflt = cosmos(1 * H, "ttl");
  EXPECT_EQ(on.set(R"({"ttl":60})"), kNow + 60 * S);  // P-10
  EXPECT_EQ(dflt.set(R"({"ttl":-1})"), 0);            // P-11
  EXPECT_EQ(dflt.run(WriteKind::WholeValue, 0, R"({"ttl":-1})").rule,
            std::string("ttl_field_never"));
  EXPECT_EQ(dflt.set(R"({"a":1})"), kNow + 1 * H);  // P-12
  for (const char* bad : {R"({"ttl":0})", R"({"ttl":-5})", R"({"ttl":1.5})", R"({"ttl":"60"})",
                          R"({"ttl":null})", R"({"ttl":true})", R"({"ttl":3000000000})"}) {
    EXPECT_EQ(dflt.set(bad), kNow + 1 * H) << bad;  // P-13: invalid = absent
  }
  EXPECT_EQ(on.set("not json {"), 0);                                    // P-14
  EXPECT_EQ(on.set(R"({"ttl":60)"), 0);                                  // P-14: truncated JSON
  EXPECT_EQ(on.set(R"(["ttl",60])"), 0);                                 // P-15: not an object
  EXPECT_EQ(on.set(R"({"x":{"ttl":60}})"), 0);                           // P-15: top level only
  EXPECT_EQ(on.set(R"({"ttl":600})", kNow + 60 * S), kNow + 60 * S);     // P-16
  EXPECT_EQ(on.set(R"({"ttl":60})", kNow + 600 * S), kNow + 60 * S);     // P-17
  EXPECT_EQ(dflt.set(R"({"ttl":-1})", kNow + 600 * S), kNow + 600 * S);  // P-18
  EXPECT_EQ(cosmos(CollectionPolicy::kNoDefault, "ttl", 1 * H).set(R"({"ttl":7200})"),
            kNow + 1 * H);                                          // P-19
  EXPECT_EQ(on.set(R"(  {"ttl": 60, "v": "x"} )"), kNow + 60 * S);  // P-20 (whitespace)
  // P-21: not a Redis string (a hash snapshot key): no field, the default applies.
  EXPECT_EQ(dflt.run(WriteKind::WholeValue, 0, std::nullopt).deadline, kNow + 1 * H);
  EXPECT_EQ(on.run(WriteKind::WholeValue, 0, std::nullopt).deadline, 0);
  // The field of a write that does not carry the value is not read: PEXPIREAT/PERSIST.
  EXPECT_EQ(dflt.run(WriteKind::DeadlineOnly, 0, R"({"ttl":60})").deadline, kNow + 1 * H);
  EXPECT_EQ(on.run(WriteKind::InPlace, 0).action, Action::Untouched);
}

TEST(ExpiryPolicy, P22to32_ExpireAtField) {
  const Case a = arango();
  EXPECT_EQ(a.set(R"({"expireAt":"2001-09-09T01:46:50Z"})"), kNow + 10 * S);       // P-22
  EXPECT_EQ(a.set(R"({"expireAt":1000000010})"), kNow + 10 * S);                   // P-23
  EXPECT_EQ(a.set(R"({"expireAt":1000000010.5})"), kNow + 10'500);                 // P-24
  EXPECT_EQ(a.set(R"({"expireAt":1000000010.0001})"), kNow + 10'001);              // P-24 up
  EXPECT_EQ(a.set(R"({"expireAt":"2001-09-09T03:46:50+02:00"})"), kNow + 10 * S);  // P-25
  EXPECT_EQ(a.set(R"({"expireAt":"2001-09-08T20:46:50-0500"})"), kNow + 10 * S);   // P-25
  EXPECT_EQ(a.set(R"({"expireAt":"2001-09-09T01:46:50.1234Z"})"), kNow + 10'124);  // P-26
  EXPECT_EQ(a.set(R"({"expireAt":"2001-09-09T01:46:50.120Z"})"), kNow + 10'120);   // P-26
  EXPECT_EQ(a.set(R"({"expireAt":"2001-09-09T01:46:50"})"), kNow + 10 * S);        // P-26 UTC
  EXPECT_EQ(arango(1 * H).set(R"({"expireAt":1000000000})"), kNow + 1 * H);        // P-27
  for (const char* bad :
       {R"({"expireAt":"yesterday"})", R"({"expireAt":"1000000010"})", R"({"expireAt":true})",
        R"({"expireAt":null})", R"({"other":1})", R"({"expireAt":-5})",
        R"({"expireAt":"2001-09-09T01:46:50ZZ"})", R"({"expireAt":"2001-09-09 01:46:50Z"})",
        R"({"expireAt":"2001-09-09T25:00:00Z"})", "plain"}) {
    EXPECT_EQ(a.set(bad), 0) << bad;  // P-28
  }
  const int64_t past = a.set(R"({"expireAt":999999990})");  // P-29: expired on arrival
  EXPECT_NE(past, 0);
  EXPECT_LE(past, kNow);
  EXPECT_EQ(a.set(R"({"expireAt":1000000600})", kNow + 60 * S), kNow + 60 * S);  // P-30
  const int64_t day = a.set(R"({"expireAt":"2001-09-09"})");                     // P-31
  EXPECT_EQ(day, kNow - (1 * H + 46 * 60 * S + 40 * S));
  EXPECT_EQ(a.set(R"({"expireAt":"2001-02-29T00:00:00Z"})"), 0);  // P-32: no such day
  EXPECT_NE(a.set(R"({"expireAt":"2004-02-29T00:00:00Z"})"), 0);  // a leap day is one
  // A default beside the date: documents without a valid date get it.
  Case both = arango();
  both.pol.default_ttl_ms = 1 * H;
  EXPECT_EQ(both.set(R"({"expireAt":"never"})"), kNow + 1 * H);
}

TEST(ExpiryPolicy, P33to40_MaxLifetime) {
  Case l;
  l.pol.max_lifetime_ms = 100 * S;
  const int64_t first = kNow / 1000;
  EXPECT_EQ(l.run(WriteKind::WholeValue, 0, "v", first).deadline, kNow + 100 * S);  // P-33
  EXPECT_EQ(l.run(WriteKind::WholeValue, 0, "v", first, kNow + 40 * S).deadline,
            kNow + 100 * S);  // P-34
  EXPECT_EQ(l.run(WriteKind::WholeValue, kNow + 10 * S, "v", first).deadline,
            kNow + 10 * S);  // P-35
  Case lm = l;
  lm.m = 60 * S;
  EXPECT_EQ(lm.run(WriteKind::WholeValue, 0, "v", first, kNow + 70 * S).deadline,
            kNow + 100 * S);  // P-38: the lifetime ends before now + M
  auto inplace = lm.run(WriteKind::InPlace, 0, {}, first, kNow + 10 * S);
  EXPECT_EQ(inplace.action, Action::Set);
  EXPECT_EQ(inplace.deadline, kNow + 70 * S);           // P-38: §4 extends to now+M, under the cap
  auto keep = l.run(WriteKind::KeepTtl, 0, {}, first);  // P-39
  EXPECT_EQ(keep.action, Action::Cap);
  EXPECT_EQ(keep.deadline, kNow + 100 * S);
  auto created = l.run(WriteKind::InPlace, 0, {}, first);  // P-42 (HSET creating the key)
  EXPECT_EQ(created.action, Action::Set);
  EXPECT_EQ(created.deadline, kNow + 100 * S);
  // P-43: a default beside it: the earlier wins; an in-place write only caps.
  Case dl = l;
  dl.pol.default_ttl_ms = 1 * H;
  EXPECT_EQ(dl.run(WriteKind::WholeValue, 0, "v", first).deadline, kNow + 100 * S);
  EXPECT_EQ(dl.run(WriteKind::InPlace, 0, {}, first).action, Action::Cap);
  // P-44: a document's ttl -1 is still capped by the lifetime.
  Case tl = l;
  tl.pol.default_ttl_ms = 1 * H;
  tl.pol.ttl_field = "ttl";
  EXPECT_EQ(tl.run(WriteKind::WholeValue, 0, R"({"ttl":-1})", first).deadline, kNow + 100 * S);
  EXPECT_EQ(tl.run(WriteKind::WholeValue, 0, R"({"ttl":30})", first).deadline, kNow + 30 * S);
}

TEST(ExpiryPolicy, WithoutPoliciesTheClampIsUnchanged) {
  KeyPolicy none{60 * S, nullptr};
  EXPECT_EQ(decide(none, {WriteKind::WholeValue, 0, "v", kNow, 0}).deadline, kNow + 60 * S);
  EXPECT_EQ(decide(none, {WriteKind::WholeValue, kNow + 30 * S, "v", kNow, 0}).deadline,
            kNow + 30 * S);
  EXPECT_EQ(decide(KeyPolicy{}, {WriteKind::InPlace, 0, {}, kNow, 0}).action, Action::Untouched);
  EXPECT_EQ(decide(none, {WriteKind::InPlace, 0, {}, kNow, 0}).deadline, kNow + 60 * S);
}

TEST(Iso8601, FormatsAndRounding) {
  EXPECT_EQ(parseIso8601Ms("1970-01-01T00:00:00Z"), 0);
  EXPECT_EQ(parseIso8601Ms("2019-06-22T10:42:54Z"), 1561200174000);  // the seed's example
  EXPECT_EQ(parseIso8601Ms("2019-06-22T10:42Z"), 1561200120000);
  EXPECT_EQ(parseIso8601Ms("2019-06-22T10:42:54.5Z"), 1561200174500);
  EXPECT_EQ(parseIso8601Ms("2019-06-22T10:42:54.0000001Z"), 1561200174001);
  EXPECT_EQ(parseIso8601Ms("2019-06-22T12:42:54+02:00"), 1561200174000);
  EXPECT_FALSE(parseIso8601Ms("2019-6-22T10:42:54Z"));
  EXPECT_FALSE(parseIso8601Ms("2019-06-22T10:42:54.Z"));
  EXPECT_FALSE(parseIso8601Ms("2019-06-22T10:42:54+2"));
  EXPECT_FALSE(parseIso8601Ms("2019-13-01"));
  EXPECT_FALSE(parseIso8601Ms(""));
}

TEST(FirstSeen, P36_P37_ForgetAndEndedLifetimesStartAnew) {
  FirstSeenStore s("", 100 * S);
  EXPECT_EQ(s.touch(0, "k", kNow, 100 * S), kNow / 1000);
  EXPECT_EQ(s.touch(0, "k", kNow + 40 * S, 100 * S), kNow / 1000);     // kept
  EXPECT_EQ(s.touch(1, "k", kNow + 1 * S, 100 * S), kNow / 1000 + 1);  // another db
  s.forget(0, "k");                                                    // P-36
  EXPECT_EQ(s.touch(0, "k", kNow + 50 * S, 100 * S), kNow / 1000 + 50);
  EXPECT_EQ(s.touch(0, "k", kNow + 150 * S, 100 * S), kNow / 1000 + 150);  // P-37
  EXPECT_EQ(s.touch(0, "r", kNow + 300, 100 * S), kNow / 1000 + 1);        // P-40: rounded up
  s.forgetDb(1);                                                           // P-45
  EXPECT_EQ(s.find(1, "k"), 0);
  EXPECT_NE(s.find(0, "k"), 0);
}

TEST(FirstSeen, ManyKeysGrowEraseAndSweep) {
  FirstSeenStore s("", 1000 * S);
  for (int i = 0; i < 5000; ++i) s.touch(i % 3, "key:" + std::to_string(i), kNow, 1000 * S);
  EXPECT_EQ(s.size(), 5000U);
  for (int i = 0; i < 5000; i += 2) s.forget(i % 3, "key:" + std::to_string(i));
  EXPECT_EQ(s.size(), 2500U);
  for (int i = 1; i < 5000; i += 2) {
    ASSERT_EQ(s.find(i % 3, "key:" + std::to_string(i)), kNow / 1000) << i;
  }
  // A full sync that sees only keys below 1000: the others are forgotten.
  s.beginSweep();
  for (int i = 1; i < 1000; i += 2) s.touch(i % 3, "key:" + std::to_string(i), kNow, 1000 * S);
  s.endSweep();
  EXPECT_EQ(s.size(), 500U);
  EXPECT_EQ(s.find(1001 % 3, "key:1001"), 0);
  EXPECT_NE(s.find(999 % 3, "key:999"), 0);
}

TEST(FirstSeen, P41_SurvivesReopenCompactionAndATornTail) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("first_seen_" + std::to_string(::getpid())))
          .string();
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/p.first-seen";
  {
    FirstSeenStore s(path, 1000 * S);
    ASSERT_TRUE(s.open(kNow));
    s.touch(0, "a", kNow, 1000 * S);
    s.touch(0, "b", kNow + 5 * S, 1000 * S);
    s.touch(2, "c", kNow, 1000 * S);
    s.forget(2, "c");
    ASSERT_TRUE(s.flush());  // what the applier does before the sink sends
    // no sync(): an agent crash keeps what was written
  }
  {
    FILE* f = std::fopen(path.c_str(), "ab");  // a torn record at the end
    std::fwrite("\x01\x00\x00", 1, 3, f);
    std::fclose(f);
  }
  {
    FirstSeenStore s(path, 1000 * S);
    ASSERT_TRUE(s.open(kNow + 10 * S));
    EXPECT_EQ(s.find(0, "a"), kNow / 1000);
    EXPECT_EQ(s.find(0, "b"), kNow / 1000 + 5);
    EXPECT_EQ(s.find(2, "c"), 0);
    EXPECT_EQ(s.size(), 2U);
    for (int i = 0; i < 10000; ++i) s.touch(0, "x" + std::to_string(i), kNow, 1000 * S);
    for (int i = 0; i < 10000; ++i) s.forget(0, "x" + std::to_string(i));
    ASSERT_TRUE(s.sync(kNow + 10 * S));  // compacts: 20,000 records for 2 live entries
    EXPECT_EQ(s.logRecords(), 2U);
    s.touch(0, "d", kNow, 1000 * S);
    ASSERT_TRUE(s.sync(kNow + 10 * S));
  }
  {
    FirstSeenStore s(path, 1000 * S);
    ASSERT_TRUE(s.open(kNow + 20 * S));
    EXPECT_EQ(s.size(), 3U);
    EXPECT_EQ(s.find(0, "a"), kNow / 1000);
    EXPECT_NE(s.find(0, "d"), 0);
  }
  {
    FirstSeenStore s(path, 1000 * S);  // ended lifetimes are not loaded
    ASSERT_TRUE(s.open(kNow + 2000 * S));
    EXPECT_EQ(s.size(), 0U);
  }
  std::filesystem::remove_all(dir);
}

// verify and explain read the file beside a running agent: never create, cut or append to it.
TEST(FirstSeen, LoadReadOnlyLeavesTheFileAsItIs) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("first_seen_ro_" + std::to_string(::getpid())))
          .string();
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/p.first-seen";
  {
    FirstSeenStore none(path, 1000 * S);
    bool found = true;
    ASSERT_TRUE(none.loadReadOnly(kNow, &found));
    EXPECT_FALSE(found);
    EXPECT_FALSE(std::filesystem::exists(path));  // not created
  }
  {
    FirstSeenStore s(path, 1000 * S);
    ASSERT_TRUE(s.open(kNow));
    s.touch(0, "a", kNow, 1000 * S);
    s.touch(3, "b", kNow + 5 * S, 1000 * S);
    ASSERT_TRUE(s.flush());
  }
  {
    FILE* f = std::fopen(path.c_str(), "ab");  // a record being appended
    std::fwrite("\x01\x00\x00", 1, 3, f);
    std::fclose(f);
  }
  const auto size = std::filesystem::file_size(path);
  {
    FirstSeenStore r(path, 1000 * S);
    bool found = false;
    ASSERT_TRUE(r.loadReadOnly(kNow + 10 * S, &found));
    EXPECT_TRUE(found);
    EXPECT_EQ(r.find(0, "a"), kNow / 1000);
    EXPECT_EQ(r.find(3, "b"), kNow / 1000 + 5);
    r.touch(0, "c", kNow, 1000 * S);  // buffered, never written
    ASSERT_TRUE(r.flush());
    ASSERT_TRUE(r.sync(kNow + 10 * S));
  }
  EXPECT_EQ(std::filesystem::file_size(path), size);  // the torn tail is not cut either
  {
    FirstSeenStore r(path, 1000 * S);  // ended lifetimes are dropped as open() drops them
    ASSERT_TRUE(r.loadReadOnly(kNow + 2000 * S));
    EXPECT_EQ(r.size(), 0U);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace xdcr::target
