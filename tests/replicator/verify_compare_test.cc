// The pure rules of `xdcr-agent verify` (replicator/verify_compare.h): deadlines expected from a
// source deadline, hash-field deadlines (HPEXPIRETIME), vector sets compared by content.

#include "replicator/verify_compare.h"
#include "replicator/verify_memcached.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace xdcr::replicator::verify {
namespace {

resp::Value bulk(std::string s) {
  resp::Value v;
  v.type = resp::ReplyType::Bulk;
  v.str = std::move(s);
  return v;
}

resp::Value integer(int64_t i) {
  resp::Value v;
  v.type = resp::ReplyType::Integer;
  v.integer = i;
  return v;
}

resp::Value error(std::string s) {
  resp::Value v;
  v.type = resp::ReplyType::Error;
  v.str = std::move(s);
  return v;
}

resp::Value array(std::vector<resp::Value> e) {
  resp::Value v;
  v.type = resp::ReplyType::Array;
  v.elements = std::move(e);
  return v;
}

resp::Value integers(std::vector<int64_t> xs) {
  std::vector<resp::Value> e;
  for (int64_t x : xs) e.push_back(integer(x));
  return array(std::move(e));
}

TEST(DeadlineRulesTest, ExpectedDeadline) {
  const DeadlineRules plain{false, 0, 1000};
  EXPECT_EQ(plain.expected(-1), -1);
  EXPECT_EQ(plain.expected(5000), 5000);
  const DeadlineRules shifted{false, -250, 1000};
  EXPECT_EQ(shifted.expected(5000), 4750);
  EXPECT_EQ(shifted.expected(-1), -1);
  const DeadlineRules strip{true, -250, 1000};
  EXPECT_EQ(strip.expected(5000), -1);
}

TEST(DeadlineRulesTest, Matches) {
  const DeadlineRules r{false, 0, 1000};
  EXPECT_TRUE(r.matches(-1, -1));
  EXPECT_TRUE(r.matches(5000, 6000));
  EXPECT_TRUE(r.matches(5000, 4000));
  EXPECT_FALSE(r.matches(5000, 6001));
  EXPECT_FALSE(r.matches(5000, -1));
  EXPECT_FALSE(r.matches(-1, 5000));
}

TEST(DeadlineRulesTest, AllowsTheExpectedDeadlineOrAPastClamp) {
  // verify and explain judge a target deadline with this one rule.
  const DeadlineRules r{false, 0, 1000};
  const int64_t now = 1'000'000;
  // No maxTTL: the source's deadline within the tolerance, or none for none.
  EXPECT_TRUE(r.allows(-1, -1, 0, now));
  EXPECT_TRUE(r.allows(now + 3'600'000, now + 3'600'500, 0, now));
  EXPECT_FALSE(r.allows(now + 3'600'000, now + 60'000, 0, now));
  EXPECT_FALSE(r.allows(-1, now + 60'000, 0, now));
  // maxTTL 60 s: a clamp written at some past instant (at most now + M), earlier than E.
  EXPECT_TRUE(r.allows(now + 3'600'000, now + 60'000, 60'000, now));
  EXPECT_TRUE(r.allows(now + 3'600'000, now + 10'000, 60'000, now));
  EXPECT_TRUE(r.allows(-1, now + 60'000, 60'000, now));                // E none: now + M
  EXPECT_FALSE(r.allows(-1, -1, 60'000, now));                         // never persistent under M
  EXPECT_FALSE(r.allows(now + 3'600'000, now + 62'000, 60'000, now));  // later than now + M
  EXPECT_FALSE(r.allows(now + 30'000, now + 45'000, 60'000, now));     // later than E
  // strip_ttl: E counts as none, so only a clamp is right under M.
  const DeadlineRules strip{true, 0, 1000};
  EXPECT_TRUE(strip.allows(now + 3'600'000, -1, 0, now));
  EXPECT_TRUE(strip.allows(now + 3'600'000, now + 60'000, 60'000, now));
  EXPECT_FALSE(strip.allows(now + 3'600'000, now + 3'600'000, 0, now));
}

TEST(FieldDeadlinesTest, SupportFromTheReply) {
  EXPECT_EQ(fieldTtlSupportOf(integers({-1, -2})), FieldTtlSupport::Yes);
  EXPECT_EQ(fieldTtlSupportOf(error("ERR unknown command 'HPEXPIRETIME', with args beginning "
                                    "with: 'h' 'FIELDS' '1' 'a' ")),
            FieldTtlSupport::None);
  EXPECT_EQ(fieldTtlSupportOf(error("ERR Unknown Command 'hpexpiretime'")), FieldTtlSupport::None);
  EXPECT_EQ(fieldTtlSupportOf(error("WRONGTYPE Operation against a key holding the wrong kind of "
                                    "value")),
            FieldTtlSupport::Yes);
  EXPECT_EQ(fieldTtlSupportOf(error("NOPERM User v has no permissions to run the 'hpexpiretime' "
                                    "command")),
            FieldTtlSupport::Unreadable);
}

TEST(FieldDeadlinesTest, CommandsAreChunked) {
  std::vector<std::string> fields;
  for (int i = 0; i < 2500; ++i) fields.push_back("f" + std::to_string(i));
  const auto cmds = fieldDeadlineCommands("h", fields);
  ASSERT_EQ(cmds.size(), 3u);
  EXPECT_EQ(cmds[0].size(), 4u + 1000u);
  EXPECT_EQ(cmds[2].size(), 4u + 500u);
  EXPECT_EQ((std::vector<std::string>(cmds[0].begin(), cmds[0].begin() + 5)),
            (std::vector<std::string>{"HPEXPIRETIME", "h", "FIELDS", "1000", "f0"}));
  EXPECT_EQ(cmds[2][3], "500");
  EXPECT_EQ(cmds[2][4], "f2000");
  EXPECT_EQ(cmds[2].back(), "f2499");

  const auto small = fieldDeadlineCommands("k", {"a", "b"}, 1);
  ASSERT_EQ(small.size(), 2u);
  EXPECT_EQ(small[1], (std::vector<std::string>{"HPEXPIRETIME", "k", "FIELDS", "1", "b"}));
  EXPECT_TRUE(fieldDeadlineCommands("k", {}).empty());
}

TEST(FieldDeadlinesTest, ParseReplies) {
  auto d = parseFieldDeadlines({integers({-1, 5}), integers({-2})}, 3);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(*d, (std::vector<int64_t>{-1, 5, -2}));
  EXPECT_FALSE(parseFieldDeadlines({integers({-1, 5})}, 3).has_value());
  EXPECT_FALSE(parseFieldDeadlines({error("WRONGTYPE x")}, 1).has_value());
  EXPECT_FALSE(parseFieldDeadlines({array({bulk("x")})}, 1).has_value());
  ASSERT_TRUE(parseFieldDeadlines({}, 0).has_value());
}

TEST(FieldDeadlinesTest, HashFields) {
  EXPECT_EQ(hashFields(array({bulk("a"), bulk("1"), bulk("b"), bulk("2")})),
            (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(hashFields(bulk("x")).empty());
}

TEST(FieldDeadlinesTest, CompareUnderTheRules) {
  const int64_t now = 1'000'000;
  const DeadlineRules r{false, 0, 1000};
  const std::vector<std::string> f = {"a", "b", "c", "d", "e", "g"};
  // a equal, b within the tolerance, c other, d none on the target, e only on the target,
  // g none on either.
  const auto diffs =
      compareFieldDeadlines(r, f, {now + 60'000, now + 60'000, now + 60'000, now + 60'000, -1, -1},
                            {now + 60'000, now + 60'900, now + 62'000, -1, now + 60'000, -1}, now);
  ASSERT_EQ(diffs.size(), 3u);
  EXPECT_EQ(diffs[0].field, "c");
  EXPECT_EQ(diffs[0].expected, now + 60'000);
  EXPECT_EQ(diffs[1].field, "d");
  EXPECT_EQ(diffs[1].target, -1);
  EXPECT_EQ(diffs[2].field, "e");
  EXPECT_EQ(diffs[2].expected, -1);
}

TEST(FieldDeadlinesTest, ShiftAppliesAndMaxTtlIsNoConcern) {
  const int64_t now = 1'000'000;
  const DeadlineRules shifted{false, 5000, 1000};
  // Compensation: the target's deadline is the source's + Δ.
  EXPECT_TRUE(compareFieldDeadlines(shifted, {"a"}, {now + 60'000}, {now + 65'000}, now).empty());
  EXPECT_EQ(compareFieldDeadlines(shifted, {"a"}, {now + 60'000}, {now + 60'000}, now).size(), 1u);
  // A field deadline earlier than the source's (as a key's max_ttl clamp would make) differs.
  const DeadlineRules r{false, 0, 1000};
  EXPECT_EQ(compareFieldDeadlines(r, {"a"}, {now + 3'600'000}, {now + 600'000}, now).size(), 1u);
}

TEST(FieldDeadlinesTest, StripTtlWantsNone) {
  const int64_t now = 1'000'000;
  const DeadlineRules strip{true, 0, 1000};
  EXPECT_TRUE(compareFieldDeadlines(strip, {"a", "b"}, {now + 60'000, -1}, {-1, -1}, now).empty());
  const auto d = compareFieldDeadlines(strip, {"a", "b"}, {now + 60'000, -1},
                                       {now + 60'000, now + 60'000}, now);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].expected, -1);
}

TEST(FieldDeadlinesTest, PassedOrPassingSourceDeadlinesAndGoneFieldsAreNoDifference) {
  const int64_t now = 1'000'000;
  const DeadlineRules r{false, 0, 1000};
  // Passed, passing within the tolerance, gone from the source (-2).
  EXPECT_TRUE(compareFieldDeadlines(r, {"a", "b", "c"}, {now - 10, now + 1000, -2},
                                    {-1, -2, now + 5000}, now)
                  .empty());
  // Just beyond the tolerance: compared.
  EXPECT_EQ(compareFieldDeadlines(r, {"a"}, {now + 1001}, {-1}, now).size(), 1u);
  // A field the target lacks while the source keeps it.
  const auto d = compareFieldDeadlines(r, {"a", "b"}, {-1, now + 60'000}, {-2, -2}, now);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].target, -2);
}

TEST(FieldDeadlinesTest, Description) {
  EXPECT_EQ(describeFieldDiffs({}), "");
  EXPECT_EQ(describeFieldDiffs({{"b", 1700000000000, -1, 1700000000000}}),
            "field \"b\": deadline: source 1700000000000, target none, expected 1700000000000");
  const std::string many = describeFieldDiffs({{"a", -1, 5, -1},
                                               {"b\n", 1, -2, 1},
                                               {"c", 1, 2, 1},
                                               {"d", 1, 2, 1},
                                               {"e", 1, 2, 1},
                                               {"f", 1, 2, 1},
                                               {"g", 1, 2, 1}});
  EXPECT_EQ(many,
            "field \"a\": deadline: source none, target 5, expected none (and 6 more fields: "
            "\"b\\x0a\", \"c\", \"d\", \"e\", \"f\", …)");
}

VectorElement element(std::string name, std::vector<std::string> vec, resp::Value attr = {}) {
  std::vector<resp::Value> e;
  for (auto& x : vec) e.push_back(bulk(std::move(x)));
  return {std::move(name), array(std::move(e)), std::move(attr)};
}

TEST(VectorSetTest, EqualContentInAnyOrderAndSpelling) {
  const auto a =
      vectorSetValue(integer(2), integer(2),
                     {element("x", {"0.5", "1"}, bulk("{\"i\":1}")), element("y", {"0.25", "-1"})});
  const auto b = vectorSetValue(
      integer(2), integer(2),
      {element("y", {"0.250", "-1.0"}), element("x", {"5e-1", "1"}, bulk("{\"i\":1}"))});
  EXPECT_EQ(a, b);
}

TEST(VectorSetTest, DifferencesNameTheElement) {
  const auto src = vectorSetValue(integer(3), integer(2),
                                  {element("e1", {"0.5", "1"}, bulk("{\"i\":1}")),
                                   element("e2", {"0.25", "-1"}), element("e3", {"0", "0"})});
  // e1's vector another.
  auto t1 = vectorSetValue(integer(3), integer(2),
                           {element("e1", {"0.9", "1"}, bulk("{\"i\":1}")),
                            element("e2", {"0.25", "-1"}), element("e3", {"0", "0"})});
  EXPECT_NE(src, t1);
  EXPECT_EQ(describeVectorSetDifference(src, t1),
            "vectorset differs: element \"e1\": vector: source [0.5, 1], target [0.9, 1] "
            "(1 element differs)");
  // e2 absent on the target.
  auto t2 =
      vectorSetValue(integer(2), integer(2),
                     {element("e1", {"0.5", "1"}, bulk("{\"i\":1}")), element("e3", {"0", "0"})});
  EXPECT_EQ(describeVectorSetDifference(src, t2),
            "vectorset differs: VCARD: source 3, target 2; element \"e2\": absent on the target "
            "(1 element differs)");
  // e1's attribute another, e4 only on the target.
  auto t3 =
      vectorSetValue(integer(4), integer(2),
                     {element("e1", {"0.5", "1"}, bulk("{\"i\":2}")), element("e2", {"0.25", "-1"}),
                      element("e3", {"0", "0"}), element("e4", {"0", "0"})});
  EXPECT_EQ(describeVectorSetDifference(src, t3),
            "vectorset differs: VCARD: source 3, target 4; element \"e1\": attribute: source "
            "\"{\"i\":1}\", target \"{\"i\":2}\" (2 elements differ)");
  // Another dimension.
  auto t4 = vectorSetValue(integer(3), integer(3), {});
  EXPECT_NE(describeVectorSetDifference(src, t4).find("VDIM: source 2, target 3"),
            std::string::npos);
}

// --- a key absent on the target under a max_ttl (issue 18, finding 4)
// ------------------------------

AbsenceEvidence absent(int64_t idle_s, int64_t since_full_sync_ms) {
  AbsenceEvidence e;
  e.max_ttl_ms = 3'600'000;
  e.tolerance_ms = 1000;
  e.idle_s = idle_s;
  e.since_full_sync_ms = since_full_sync_ms;
  return e;
}

TEST(JudgeAbsence, ATouchUnderMaxTtlAgoIsMissing) {
  const AbsenceVerdict v = judgeAbsence(absent(12, 86'400'000));
  EXPECT_FALSE(v.expired);
  EXPECT_NE(v.detail.find("last touched 12 s ago"), std::string::npos) << v.detail;
  EXPECT_NE(v.detail.find("max_ttl 3600 s"), std::string::npos) << v.detail;
  EXPECT_NE(v.detail.find("cannot have expired"), std::string::npos) << v.detail;
}

TEST(JudgeAbsence, IdleOverMaxTtlAndToleranceAndTheResolutionIsExpired) {
  // M + tolerance = 3601 s; IDLETIME's 1 s resolution: idle 3602 proves more than 3601 s.
  EXPECT_FALSE(judgeAbsence(absent(3601, 86'400'000)).expired);
  const AbsenceVerdict v = judgeAbsence(absent(3602, 86'400'000));
  EXPECT_TRUE(v.expired) << v.detail;
  EXPECT_NE(v.detail.find("expired by max_ttl 3600 s"), std::string::npos) << v.detail;
  EXPECT_NE(v.detail.find("last touched 3602 s ago"), std::string::npos) << v.detail;
}

TEST(JudgeAbsence, AFullSyncUnderMaxTtlAgoMayHaveWrittenTheCopy) {
  // The source key is old, but the full sync wrote its copy (deadline then + M) 10 minutes ago.
  const AbsenceVerdict v = judgeAbsence(absent(86'400, 600'000));
  EXPECT_FALSE(v.expired);
  EXPECT_NE(v.detail.find("last full sync may have written its copy 600 s ago"), std::string::npos)
      << v.detail;
  EXPECT_FALSE(judgeAbsence(absent(86'400, 3'600'999)).expired);
  EXPECT_TRUE(judgeAbsence(absent(86'400, 3'601'000)).expired);
}

TEST(JudgeAbsence, NoProofIsMissingWithTheReason) {
  AbsenceEvidence e = absent(-1, 86'400'000);
  e.idle_unreadable = "source s (x): OBJECT IDLETIME: ERR An LFU maxmemory policy is selected";
  AbsenceVerdict v = judgeAbsence(e);
  EXPECT_FALSE(v.expired);
  EXPECT_NE(v.detail.find("LFU maxmemory policy"), std::string::npos) << v.detail;

  e = absent(86'400, -1);
  e.full_sync_unknown = "no checkpoint of pipeline p in agent.state_dir /nowhere";
  v = judgeAbsence(e);
  EXPECT_FALSE(v.expired);
  EXPECT_NE(v.detail.find("no checkpoint of pipeline p"), std::string::npos) << v.detail;
}

TEST(JudgeAbsence, ASmallMaxTtlAndTolerance) {
  AbsenceEvidence e = absent(4, 3'000);
  e.max_ttl_ms = 2'000;
  e.tolerance_ms = 1'000;
  EXPECT_TRUE(judgeAbsence(e).expired);  // idle 4 s: over 3 s ago
  e.idle_s = 3;
  EXPECT_FALSE(judgeAbsence(e).expired);  // idle 3 s: only over 2 s ago
  e.idle_s = 0;
  EXPECT_FALSE(judgeAbsence(e).expired);
}

// What verify expects of a memcached target (the sink's rules, docs/expiry-semantics.md §11).
TEST(MemcachedExpectationTest, RefusedKeysAreNamedByTheirReason) {
  constexpr int64_t kNow = 1'795'480'300'000;
  McExpectInput in;
  in.target_key = "k";
  in.type = "string";
  in.value_size = 10;
  in.deadline_ms = kNow + 60'000;
  in.target_now_ms = kNow;
  in.item_size_max = 1 << 20;
  EXPECT_EQ(expectOnMemcached(in).kind, McExpectation::Kind::Written);
  EXPECT_EQ(expectOnMemcached(in).flags, 0u);

  McExpectInput t = in;
  t.deadline_ms = 2'147'483'648'000;  // 2038-01-19T03:14:08Z
  EXPECT_EQ(expectOnMemcached(t).reason, "deadline_2038");
  t.max_ttl_ms = 600'000;  // the clamp brings it back into range
  EXPECT_EQ(expectOnMemcached(t).kind, McExpectation::Kind::Written);

  t = in;
  t.value_size = 1'500'000;
  EXPECT_EQ(expectOnMemcached(t).reason, "value_too_large");
  t = in;
  t.target_key = std::string(251, 'k');
  EXPECT_EQ(expectOnMemcached(t).reason, "key_too_long");
  t.target_key = std::string(187, '\x01');  // 252 base64 characters
  EXPECT_EQ(expectOnMemcached(t).reason, "key_too_long");
  t = in;
  t.type = "hash";
  EXPECT_EQ(expectOnMemcached(t).reason, "not_a_string");
  t.non_strings = config::NonStrings::Json;
  EXPECT_EQ(expectOnMemcached(t).flags, 2u);
  t.non_strings = config::NonStrings::Dump;
  EXPECT_EQ(expectOnMemcached(t).flags, 1u);

  t = in;
  t.deadline_ms = kNow - 1;
  EXPECT_EQ(expectOnMemcached(t).kind, McExpectation::Kind::Expired);
  t.deadline_ms = 0;  // none
  EXPECT_EQ(expectOnMemcached(t).kind, McExpectation::Kind::Written);
}

// --- collection policies (expiry-semantics.md §8): target::decide at an unknown past write ----

constexpr int64_t kPNow = 1'000'000'000'000;  // the target's clock
constexpr int64_t kH = 3'600'000;

PolicyFacts facts(const target::CollectionPolicy* pol, int64_t e = 0,
                  std::optional<std::string_view> value = std::nullopt) {
  PolicyFacts f;
  f.policy.policy = pol;
  f.e = e;
  f.value = value;
  f.now = kPNow;
  f.tolerance_ms = 1000;
  return f;
}

TEST(PolicyDeadline, DefaultTtlFillsOnlyADocumentWithoutADeadline) {
  target::CollectionPolicy pol;
  pol.default_ttl_ms = kH;
  PolicyFacts f = facts(&pol);
  // Written some time up to now: anything up to now + 1 h.
  EXPECT_EQ(judgePolicyDeadline(f, kPNow + kH - 5000).verdict, PolicyVerdict::Ok);
  const PolicyJudgement far = judgePolicyDeadline(f, kPNow + 240 * kH);
  EXPECT_EQ(far.verdict, PolicyVerdict::Mismatch);
  EXPECT_NE(far.detail.find("default_ttl 3600 s"), std::string::npos) << far.detail;
  // No deadline: what an HSET-created key keeps (P-7) on Redis; never on memcached.
  const PolicyJudgement none = judgePolicyDeadline(f, -1);
  EXPECT_EQ(none.verdict, PolicyVerdict::NotChecked);
  EXPECT_NE(none.detail.find("policy depends on the last write kind"), std::string::npos);
  f.in_place_possible = false;
  EXPECT_EQ(judgePolicyDeadline(f, -1).verdict, PolicyVerdict::Mismatch);
  // A source deadline: exactly E (a default never caps, P-2), at most E whatever the write.
  f = facts(&pol, kPNow + 5 * kH);
  EXPECT_EQ(judgePolicyDeadline(f, kPNow + 5 * kH + 300).verdict, PolicyVerdict::Ok);
  EXPECT_EQ(judgePolicyDeadline(f, kPNow + 4 * kH).verdict, PolicyVerdict::NotChecked);
  EXPECT_EQ(judgePolicyDeadline(f, kPNow + 29 * kH).verdict, PolicyVerdict::Mismatch);
  EXPECT_EQ(judgePolicyDeadline(f, -1).verdict, PolicyVerdict::Mismatch);
}

TEST(PolicyDeadline, TtlFieldIsReadFromTheSourceValue) {
  target::CollectionPolicy pol;
  pol.default_ttl_ms = target::CollectionPolicy::kNoDefault;
  pol.ttl_field = "ttl";
  const std::string v60 = R"({"ttl":60})";
  PolicyFacts f = facts(&pol, 0, v60);
  EXPECT_EQ(wholeValueRange(f).hi, kPNow + 60'000);
  EXPECT_EQ(wholeValueRange(f).rule, "ttl_field");
  EXPECT_EQ(judgePolicyDeadline(f, kPNow + 59'000).verdict, PolicyVerdict::Ok);
  // Later than the field allows: on Redis an older value's field may have set it (an in-place
  // write keeps it), so it is not checked; on memcached no write kind gives it.
  EXPECT_EQ(judgePolicyDeadline(f, kPNow + kH).verdict, PolicyVerdict::NotChecked);
  f.in_place_possible = false;
  EXPECT_EQ(judgePolicyDeadline(f, kPNow + kH).verdict, PolicyVerdict::Mismatch);
  // P-17: the field lowers E; later than E is no write's.
  f = facts(&pol, kPNow + 600'000, v60);
  EXPECT_EQ(judgePolicyDeadline(f, kPNow + 60'000).verdict, PolicyVerdict::Ok);
  EXPECT_EQ(judgePolicyDeadline(f, kPNow + 600'000).verdict, PolicyVerdict::NotChecked);
  EXPECT_EQ(judgePolicyDeadline(f, kPNow + 600'000 + 24 * kH).verdict, PolicyVerdict::Mismatch);
  // -1: never.
  const std::string never = R"({"ttl":-1})";
  f = facts(&pol, 0, never);
  EXPECT_EQ(judgePolicyDeadline(f, -1).verdict, PolicyVerdict::Ok);
}

TEST(PolicyDeadline, ExpireAtFieldIsExact) {
  target::CollectionPolicy pol;
  pol.expire_at_field = "expireAt";
  const std::string v = R"({"expireAt":1000000300})";  // kPNow + 300 s
  PolicyFacts f = facts(&pol, 0, v);
  const PolicyRange r = wholeValueRange(f);
  EXPECT_EQ(r.lo, kPNow + 300'000);
  EXPECT_EQ(r.hi, kPNow + 300'000);
  EXPECT_EQ(judgePolicyDeadline(f, kPNow + 300'400).verdict, PolicyVerdict::Ok);
  EXPECT_EQ(judgePolicyDeadline(f, kPNow + 200'000).verdict, PolicyVerdict::NotChecked);
  f.in_place_possible = false;
  EXPECT_EQ(judgePolicyDeadline(f, kPNow + 200'000).verdict, PolicyVerdict::Mismatch);
  // A date past: expired on arrival, absent is right without any evidence (P-29).
  const std::string past = R"({"expireAt":999999990})";
  f = facts(&pol, 0, past);
  EXPECT_TRUE(judgePolicyAbsence(f, AbsenceEvidence{}).expired);
}

TEST(PolicyDeadline, MaxLifetimeUsesTheFirstSeenRecordOrAssumesAnyUpToNow) {
  target::CollectionPolicy pol;
  pol.max_lifetime_ms = kH;
  PolicyFacts f = facts(&pol);
  f.first = {kPNow / 1000 - 600, kPNow / 1000 - 600};  // first written 10 min ago
  const int64_t cap = kPNow - 600'000 + kH;
  EXPECT_EQ(wholeValueRange(f).lo, cap);
  EXPECT_EQ(wholeValueRange(f).hi, cap);
  EXPECT_EQ(judgePolicyDeadline(f, cap).verdict, PolicyVerdict::Ok);
  // A new lifetime (now + 1 h) is not what the record says, and no write kind gives it.
  EXPECT_EQ(judgePolicyDeadline(f, kPNow + kH).verdict, PolicyVerdict::Mismatch);
  // No record: any cap up to now + 1 h.
  f.first = {};
  EXPECT_EQ(judgePolicyDeadline(f, kPNow + kH - 10'000).verdict, PolicyVerdict::Ok);
  EXPECT_EQ(judgePolicyDeadline(f, kPNow + 2 * kH).verdict, PolicyVerdict::Mismatch);
  EXPECT_EQ(judgePolicyDeadline(f, -1).verdict, PolicyVerdict::Mismatch);
}

TEST(PolicyDeadline, AbsenceIsProvedByTheLastWriteBound) {
  target::CollectionPolicy pol;
  pol.default_ttl_ms = kH;
  const PolicyFacts f = facts(&pol);
  AbsenceEvidence e;
  e.tolerance_ms = 1000;
  e.idle_s = 4000;  // over 1 h + the tolerance
  e.since_full_sync_ms = 5'000'000;
  AbsenceVerdict a = judgePolicyAbsence(f, e);
  EXPECT_TRUE(a.expired) << a.detail;
  EXPECT_NE(a.detail.find("default_ttl"), std::string::npos) << a.detail;
  e.idle_s = 10;
  a = judgePolicyAbsence(f, e);
  EXPECT_FALSE(a.expired);
  EXPECT_NE(a.detail.find("cannot have expired"), std::string::npos) << a.detail;
  e.idle_s = -1;
  e.idle_unreadable = "NOPERM";
  EXPECT_FALSE(judgePolicyAbsence(f, e).expired);
  // A cap from a known first write 59 min ago: a write 10 s ago gives at most that cap.
  target::CollectionPolicy life;
  life.max_lifetime_ms = kH;
  PolicyFacts g = facts(&life);
  g.first = {kPNow / 1000 - 3590, kPNow / 1000 - 3590};
  e.idle_s = 10;
  EXPECT_FALSE(judgePolicyAbsence(g, e).expired);  // its cap is 10 s away
  g.first = {};
  EXPECT_FALSE(judgePolicyAbsence(g, e).expired);
}

TEST(PolicyDeadline, DescribePolicy) {
  target::CollectionPolicy pol;
  pol.default_ttl_ms = target::CollectionPolicy::kNoDefault;
  pol.ttl_field = "ttl";
  pol.max_lifetime_ms = 20'000;
  target::KeyPolicy kp{600'000, &pol};
  EXPECT_EQ(describePolicy(kp),
            "default_ttl -1, ttl_field \"ttl\", max_lifetime 20 s, max_ttl 600 s");
}

}  // namespace
}  // namespace xdcr::replicator::verify
