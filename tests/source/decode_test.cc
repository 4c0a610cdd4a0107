// Decoding stream entries (as Redis 7.0 propagates them) into events.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "source/event.h"

namespace xdcr::source {
namespace {

struct Cmd {
  std::vector<std::string> storage;
  std::vector<std::string_view> views;
  Entry entry;
  explicit Cmd(std::vector<std::string> a) : storage(std::move(a)) {
    for (auto& s : storage) views.emplace_back(s);
    entry.args = views;
    entry.offset_end = 100;
  }
};

constexpr int64_t kNow = 1'000'000'000'000;

Change decode(const Cmd& c, int db = 0) {
  Change ch;
  std::string problem;
  decodeEntry(c.entry, db, kNow, ch, &problem);
  return ch;
}

TEST(Decode, SetForms) {
  auto ch = decode(Cmd({"SET", "k", "v", "PXAT", "1000000030000"}));
  ASSERT_EQ(ch.events.size(), 1u);
  EXPECT_EQ(ch.effect, Effect::Set);
  EXPECT_EQ(ch.events[0].kind, EventKind::Mutation);
  EXPECT_EQ(ch.events[0].rule, DeadlineRule::Explicit);
  EXPECT_EQ(ch.events[0].deadline_ms, 1'000'000'030'000);
  EXPECT_EQ(decode(Cmd({"set", "k", "v"})).events[0].rule, DeadlineRule::None);
  EXPECT_EQ(decode(Cmd({"SET", "k", "v", "KEEPTTL"})).events[0].rule, DeadlineRule::Keep);
  EXPECT_EQ(decode(Cmd({"SET", "k", "v", "XX"})).events[0].rule, DeadlineRule::None);
  // Relative forms from older sources become absolute on the source's clock.
  EXPECT_EQ(decode(Cmd({"SET", "k", "v", "EX", "10"})).events[0].deadline_ms, kNow + 10'000);
  EXPECT_EQ(decode(Cmd({"SET", "k", "v", "PX", "5"})).events[0].deadline_ms, kNow + 5);
}

// Valkey 8.1+ (and Redis 8.4) compare-and-set: IFEQ/IFNE/IFDEQ/IFDNE take a value, which is data,
// never an option (server-versions-notes.md §3.6: `SET k new IFEQ KEEPTTL` was read as KEEPTTL,
// and the target kept a deadline the source had dropped).
TEST(Decode, SetComparisonValuesAreNotOptions) {
  auto plain = decode(Cmd({"SET", "k", "new", "IFEQ", "KEEPTTL"}));
  ASSERT_EQ(plain.effect, Effect::Set);
  ASSERT_EQ(plain.events.size(), 1u);
  EXPECT_EQ(plain.events[0].rule, DeadlineRule::None);
  auto px = decode(Cmd({"SET", "k", "new", "IFEQ", "PX"}));
  ASSERT_EQ(px.effect, Effect::Set) << "IFEQ's value PX was read as an expiry option";
  EXPECT_EQ(px.events[0].rule, DeadlineRule::None);
  auto timed = decode(Cmd({"SET", "k", "new", "ifne", "EX", "PXAT", "1000000030000"}));
  ASSERT_EQ(timed.effect, Effect::Set);
  EXPECT_EQ(timed.events[0].rule, DeadlineRule::Explicit);
  EXPECT_EQ(timed.events[0].deadline_ms, 1'000'000'030'000);
  for (const char* cmp : {"IFDEQ", "IFDNE"}) {
    auto d = decode(Cmd({"SET", "k", "new", cmp, "KEEPTTL"}));
    EXPECT_EQ(d.events[0].rule, DeadlineRule::None) << cmp;
  }
  // A comparison without its value is malformed: forwarded as unknown.
  EXPECT_EQ(decode(Cmd({"SET", "k", "new", "IFEQ"})).effect, Effect::Unknown);
}

TEST(Decode, MultiKeyCommandsGiveOneEventPerKey) {
  // Event keys are views into the command's arguments: the Cmd must outlive the Change.
  const Cmd mset({"MSET", "a", "1", "b", "2", "c", "3"});
  auto ch = decode(mset);
  ASSERT_EQ(ch.events.size(), 3u);
  EXPECT_EQ(ch.events[1].key, "b");
  EXPECT_EQ(ch.events[1].key_arg, 3);
  auto del = decode(Cmd({"DEL", "a", "b"}), 4);
  ASSERT_EQ(del.events.size(), 2u);
  EXPECT_EQ(del.events[0].kind, EventKind::Deletion);
  EXPECT_EQ(del.events[1].db, 4);
}

TEST(Decode, ExpiryChangesAndMoves) {
  auto pe = decode(Cmd({"PEXPIREAT", "k", "1000000050000", "LT"}));
  EXPECT_EQ(pe.events[0].kind, EventKind::ExpiryChange);
  EXPECT_EQ(pe.events[0].deadline_ms, 1'000'000'050'000);
  EXPECT_EQ(decode(Cmd({"PERSIST", "k"})).events[0].rule, DeadlineRule::None);
  auto hs = decode(Cmd({"HSET", "h", "f", "v"}));
  EXPECT_EQ(hs.events[0].rule, DeadlineRule::Current);
  const Cmd rename_cmd({"RENAME", "a", "b"});  // outlives `rn`, whose keys are views into it
  auto rn = decode(rename_cmd);
  EXPECT_EQ(rn.events[0].key, "b");
  EXPECT_EQ(rn.events[0].from_key, "a");
  auto cp = decode(Cmd({"COPY", "a", "b", "DB", "5", "REPLACE"}));
  EXPECT_EQ(cp.events[0].db, 5);
  EXPECT_EQ(cp.events[0].from_db, 0);
  auto rs = decode(Cmd({"RESTORE", "k", "1000000009000", "payload", "ABSTTL"}));
  EXPECT_EQ(rs.events[0].deadline_ms, 1'000'000'009'000);
  auto rel = decode(Cmd({"RESTORE", "k", "5000", "payload"}));
  EXPECT_EQ(rel.events[0].deadline_ms, kNow + 5000);
  // A slot migration on a cluster source: a create with an absolute deadline, like RESTORE.
  const Cmd restore_asking({"RESTORE-ASKING", "{t}:a", "1795480203268", "payload", "ABSTTL"});
  auto ra = decode(restore_asking);  // its keys view restore_asking
  EXPECT_EQ(ra.effect, Effect::Restore);
  ASSERT_EQ(ra.events.size(), 1u);
  EXPECT_EQ(ra.events[0].kind, EventKind::Mutation);
  EXPECT_EQ(ra.events[0].key, "{t}:a");
  EXPECT_EQ(ra.events[0].deadline_ms, 1'795'480'203'268);
  auto rp = decode(Cmd({"RESTORE-ASKING", "{t}:p", "0", "payload"}));  // persistent
  EXPECT_EQ(rp.events[0].deadline_ms, 0);
}

TEST(Decode, FramingAndUnknownCommands) {
  EXPECT_TRUE(decode(Cmd({"SELECT", "3"})).events.empty());
  EXPECT_TRUE(decode(Cmd({"MULTI"})).events.empty());
  EXPECT_TRUE(decode(Cmd({"ping"})).events.empty());
  auto u = decode(Cmd({"FUNCTION", "LOAD", "REPLACE", "code"}));
  EXPECT_EQ(u.effect, Effect::Unknown);
  ASSERT_EQ(u.events.size(), 1u);
  EXPECT_EQ(u.events[0].kind, EventKind::Other);
  EXPECT_EQ(decode(Cmd({"FLUSHALL", "ASYNC"})).events[0].kind, EventKind::Flush);
}

// cluster-notes.md §3.6: a Sentinel-monitored master's stream carries the Sentinels' hellos.
TEST(Decode, SentinelHellosAreFraming) {
  auto hello = decode(Cmd({"PUBLISH", "__sentinel__:hello",
                           "127.0.0.1,26390,3bd3e1c0b4b5fe5fb7b1b5b1f0e0a2a9c5d7e8f1,0,mym,"
                           "127.0.0.1,7321,0"}));
  EXPECT_EQ(hello.effect, Effect::Heartbeat);
  EXPECT_TRUE(hello.events.empty());  // not forwarded, not counted
  EXPECT_EQ(decode(Cmd({"publish", "__sentinel__:hello", "x"})).effect, Effect::Heartbeat);
  // Any other PUBLISH is an application's: forwarded (and counted) as before.
  auto other = decode(Cmd({"PUBLISH", "news", "hello"}));
  EXPECT_EQ(other.effect, Effect::Unknown);
  ASSERT_EQ(other.events.size(), 1u);
  EXPECT_EQ(other.events[0].kind, EventKind::Other);
  EXPECT_EQ(decode(Cmd({"PUBLISH", "__sentinel__:hello2", "x"})).effect, Effect::Unknown);
  EXPECT_EQ(decode(Cmd({"PUBLISH", "__sentinel__:hello"})).effect, Effect::Unknown);
}

TEST(Decode, MalformedCommandsAreForwardedAsUnknown) {
  Change ch;
  std::string problem;
  Cmd c({"PEXPIREAT", "k", "soon"});
  EXPECT_FALSE(decodeEntry(c.entry, 0, kNow, ch, &problem));
  EXPECT_EQ(ch.effect, Effect::Unknown);
  EXPECT_FALSE(problem.empty());
  Cmd missing({"SET"});
  EXPECT_FALSE(decodeEntry(missing.entry, 0, kNow, ch, &problem));
}

// A newer source's write commands, learned from its COMMAND reply (issue 16 point 5): their
// keys are seen (filters, key_rewrite) and their replay counts as unsafe.
TEST(Decode, CommandsLearnedFromTheSourcesCommandTable) {
  auto value = [](resp::ReplyType type, std::string str = "", int64_t integer = 0) {
    resp::Value v;
    v.type = type;
    v.str = std::move(str);
    v.integer = integer;
    return v;
  };
  auto entry = [&](std::string name, std::string flag, int64_t first, int64_t last, int64_t step) {
    resp::Value flags = value(resp::ReplyType::Array);
    flags.elements.push_back(value(resp::ReplyType::SimpleString, std::move(flag)));
    resp::Value e = value(resp::ReplyType::Array);
    e.elements = {value(resp::ReplyType::Bulk, std::move(name)),
                  value(resp::ReplyType::Integer, "", -3),
                  flags,
                  value(resp::ReplyType::Integer, "", first),
                  value(resp::ReplyType::Integer, "", last),
                  value(resp::ReplyType::Integer, "", step),
                  value(resp::ReplyType::Array)};
    return e;
  };
  resp::Value reply = value(resp::ReplyType::Array);
  reply.elements = {entry("XTESTWRITE", "write", 1, 1, 1),    // learned
                    entry("xtestread", "readonly", 1, 1, 1),  // a read: not learned
                    entry("xtestpair", "write", 1, -1, 2),    // MSET-like: keys every 2nd
                    entry("xtestmovable", "write", 0, 0, 0),  // movable keys: not learned
                    entry("set", "write", 1, 1, 1)};          // known: the table's entry stays
  EXPECT_EQ(learnCommands(parseCommandReply(reply)), 2u);
  EXPECT_EQ(learnCommands(parseCommandReply(reply)), 0u) << "learned twice";

  const Cmd write({"XTestWrite", "k", "arg"});  // (events view the command: it must outlive them)
  const Change w = decode(write);
  EXPECT_EQ(w.effect, Effect::InPlace);
  ASSERT_EQ(w.events.size(), 1u);
  EXPECT_EQ(w.events[0].key, "k");
  EXPECT_TRUE(isLearned(w.spec));
  EXPECT_TRUE(isReplayUnsafe(w.spec));
  const Cmd pair({"xtestpair", "a", "1", "b", "2"});
  const Change p = decode(pair);
  ASSERT_EQ(p.events.size(), 2u);
  EXPECT_EQ(p.events[1].key, "b");
  EXPECT_EQ(decode(Cmd({"xtestread", "k"})).effect, Effect::Unknown);
  EXPECT_EQ(decode(Cmd({"xtestmovable", "k"})).effect, Effect::Unknown);
  EXPECT_EQ(decode(Cmd({"SET", "k", "v"})).effect, Effect::Set);
  EXPECT_FALSE(isLearned(lookupCommand("set")));
  EXPECT_FALSE(isReplayUnsafe(lookupCommand("set")));
}

}  // namespace
}  // namespace xdcr::source
