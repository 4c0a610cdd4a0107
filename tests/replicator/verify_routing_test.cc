// verify on a Redis Cluster side (replicator/verify_routing.h): which node each command of a
// batch goes to, how a reply is classified, and what happens after a round with redirections.

#include "replicator/verify_routing.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/cluster_slot.h"

namespace xdcr::replicator {
namespace {

using std::chrono::milliseconds;

resp::Value integer(int64_t v) {
  resp::Value x;
  x.type = resp::ReplyType::Integer;
  x.integer = v;
  return x;
}
resp::Value bulk(std::string s) {
  resp::Value x;
  x.type = resp::ReplyType::Bulk;
  x.str = std::move(s);
  return x;
}
resp::Value error(std::string s) {
  resp::Value x;
  x.type = resp::ReplyType::Error;
  x.str = std::move(s);
  return x;
}
resp::Value array(std::vector<resp::Value> e) {
  resp::Value x;
  x.type = resp::ReplyType::Array;
  x.elements = std::move(e);
  return x;
}
/** One range of a CLUSTER SLOTS reply: [lo, hi, [host, port, id]]. */
resp::Value range(int lo, int hi, uint16_t port) {
  return array({integer(lo), integer(hi),
                array({bulk("127.0.0.1"), integer(port), bulk("id" + std::to_string(port))})});
}

/** Three masters, 7001: 0-5460, 7002: 5461-10922, 7003: 10923-16383 (as redis-cli makes). */
target::SlotMap threeMasters() {
  auto map = target::SlotMap::fromClusterSlots(
      array({range(10923, 16383, 7003), range(0, 5460, 7001), range(5461, 10922, 7002)}),
      "127.0.0.1");
  EXPECT_TRUE(map.has_value());
  return map ? *map : target::SlotMap();
}

/** A key in `slot`. */
std::string keyIn(int slot, const std::string& name) {
  return "{" + std::string(cluster::slotTag(slot)) + "}" + name;
}

std::vector<size_t> all(size_t n) {
  std::vector<size_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

std::vector<size_t> indexes(const NodeGroup& g) {
  std::vector<size_t> v;
  for (const auto& r : g.commands) v.push_back(r.index);
  return v;
}

TEST(VerifyRoutingTest, GroupsABatchPerOwningMasterInBatchOrder) {
  const target::SlotMap map = threeMasters();
  ASSERT_EQ(map.masters().size(), 3u);
  // The map's master order is CLUSTER SLOTS's: 7003 first.
  const std::vector<std::string> keys = {keyIn(0, "a"),    keyIn(16383, "b"), keyIn(5461, "c"),
                                         keyIn(5460, "d"), keyIn(12000, "e"), keyIn(100, "f"),
                                         keyIn(10922, "g")};
  std::vector<size_t> unowned;
  const auto groups = groupByNode(map, keys, all(keys.size()), {}, unowned);
  EXPECT_TRUE(unowned.empty());
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].node.port, 7003);
  EXPECT_EQ(indexes(groups[0]), (std::vector<size_t>{1, 4}));
  EXPECT_EQ(groups[1].node.port, 7001);
  EXPECT_EQ(indexes(groups[1]), (std::vector<size_t>{0, 3, 5}));
  EXPECT_EQ(groups[2].node.port, 7002);
  EXPECT_EQ(indexes(groups[2]), (std::vector<size_t>{2, 6}));
  for (const auto& g : groups) {
    EXPECT_EQ(g.node.host, "127.0.0.1");
    for (const auto& r : g.commands) EXPECT_FALSE(r.asking);
  }
}

TEST(VerifyRoutingTest, RoutesByTheHashTagAndLeavesIdleMastersOut) {
  const target::SlotMap map = threeMasters();
  // Same tag, same slot, same master: one group, whatever the rest of the name.
  const std::vector<std::string> keys = {"{user:1}:name", "{user:1}:mail", "{user:1}"};
  const int slot = cluster::keySlot("user:1");
  std::vector<size_t> unowned;
  const auto groups = groupByNode(map, keys, all(keys.size()), {}, unowned);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].node.port, map.masters()[static_cast<size_t>(map.ownerOf(slot))].port);
  EXPECT_EQ(indexes(groups[0]), (std::vector<size_t>{0, 1, 2}));
}

TEST(VerifyRoutingTest, OnlyThePendingCommandsAreSentAgain) {
  const target::SlotMap map = threeMasters();
  const std::vector<std::string> keys = {keyIn(1, "a"), keyIn(2, "b"), keyIn(6000, "c"),
                                         keyIn(3, "d")};
  std::vector<size_t> unowned;
  const auto groups = groupByNode(map, keys, {1, 3}, {}, unowned);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].node.port, 7001);
  EXPECT_EQ(indexes(groups[0]), (std::vector<size_t>{1, 3}));
}

TEST(VerifyRoutingTest, AnAskedCommandGoesToTheNodeAskNamedWithAsking) {
  const target::SlotMap map = threeMasters();
  const std::vector<std::string> keys = {keyIn(1, "a"), keyIn(2, "b"), keyIn(3, "c"),
                                         keyIn(4, "d")};
  std::vector<std::optional<config::NodeAddress>> ask_to(keys.size());
  ask_to[1] = config::NodeAddress{"127.0.0.1", 7002};  // a master of the map: its own group
  ask_to[3] = config::NodeAddress{"127.0.0.1", 7009};  // a node owning no slot yet
  std::vector<size_t> unowned;
  const auto groups = groupByNode(map, keys, all(keys.size()), ask_to, unowned);
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].node.port, 7001);
  EXPECT_EQ(indexes(groups[0]), (std::vector<size_t>{0, 2}));
  EXPECT_FALSE(groups[0].commands[0].asking);
  EXPECT_EQ(groups[1].node.port, 7002);
  ASSERT_EQ(indexes(groups[1]), (std::vector<size_t>{1}));
  EXPECT_TRUE(groups[1].commands[0].asking);
  EXPECT_EQ(groups[2].node.port, 7009);
  ASSERT_EQ(indexes(groups[2]), (std::vector<size_t>{3}));
  EXPECT_TRUE(groups[2].commands[0].asking);
}

TEST(VerifyRoutingTest, AKeyInASlotNoMasterOwnsIsUnowned) {
  auto map = target::SlotMap::fromClusterSlots(array({range(0, 5460, 7001)}), "127.0.0.1");
  ASSERT_TRUE(map.has_value());
  const std::vector<std::string> keys = {keyIn(10, "a"), keyIn(9000, "b"), keyIn(20, "c")};
  std::vector<size_t> unowned;
  const auto groups = groupByNode(*map, keys, all(keys.size()), {}, unowned);
  EXPECT_EQ(unowned, (std::vector<size_t>{1}));
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(indexes(groups[0]), (std::vector<size_t>{0, 2}));
}

TEST(VerifyRoutingTest, ClassifiesReplies) {
  target::Redirection where;
  EXPECT_EQ(classifyReply(error("MOVED 3999 127.0.0.1:6381"), &where), ReplyKind::Moved);
  EXPECT_FALSE(where.ask);
  EXPECT_EQ(where.slot, 3999);
  EXPECT_EQ(where.host, "127.0.0.1");
  EXPECT_EQ(where.port, 6381);
  EXPECT_EQ(classifyReply(error("ASK 12 10.0.0.5:7005"), &where), ReplyKind::Ask);
  EXPECT_TRUE(where.ask);
  EXPECT_EQ(where.slot, 12);
  EXPECT_EQ(where.host, "10.0.0.5");
  EXPECT_EQ(where.port, 7005);
  EXPECT_EQ(classifyReply(error("TRYAGAIN Multiple keys request during rehashing of slot")),
            ReplyKind::Busy);
  EXPECT_EQ(classifyReply(error("CLUSTERDOWN The cluster is down")), ReplyKind::Busy);
  // Answers, errors included: the verifier judges them as it does on a standalone server.
  EXPECT_EQ(classifyReply(error("WRONGTYPE Operation against a key holding the wrong kind")),
            ReplyKind::Answer);
  EXPECT_EQ(classifyReply(error("MOVED")), ReplyKind::Answer);  // not a redirection we can use
  EXPECT_EQ(classifyReply(bulk("MOVED 1 127.0.0.1:1")), ReplyKind::Answer);
  EXPECT_EQ(classifyReply(integer(-1)), ReplyKind::Answer);
  EXPECT_EQ(classifyReply(resp::Value{}), ReplyKind::Answer);  // a null
}

TEST(VerifyRoutingTest, NothingUnansweredIsDone) {
  const RetryDecision d = decideRetry({}, 0);
  EXPECT_EQ(d.action, RetryDecision::Action::Done);
  EXPECT_FALSE(d.reload_map);
}

TEST(VerifyRoutingTest, MovedReloadsTheMapOnceAndRetriesAtOnceTheFirstTime) {
  RoundOutcome o;
  o.moved = 37;  // however many: one reload
  RetryDecision d = decideRetry(o, 0);
  EXPECT_EQ(d.action, RetryDecision::Action::Retry);
  EXPECT_TRUE(d.reload_map);
  EXPECT_EQ(d.pause, milliseconds(0));
  // MOVED again after a reload (the node asked had not heard yet): reload after a pause.
  d = decideRetry(o, 1);
  EXPECT_EQ(d.action, RetryDecision::Action::Retry);
  EXPECT_TRUE(d.reload_map);
  EXPECT_EQ(d.pause, milliseconds(100));
  d = decideRetry(o, 2);
  EXPECT_EQ(d.pause, milliseconds(200));
}

TEST(VerifyRoutingTest, AskIsFollowedAtOnceWithoutAReload) {
  RoundOutcome o;
  o.asked = 3;
  const RetryDecision d = decideRetry(o, 0);
  EXPECT_EQ(d.action, RetryDecision::Action::Retry);
  EXPECT_FALSE(d.reload_map);
  EXPECT_EQ(d.pause, milliseconds(0));
}

TEST(VerifyRoutingTest, BusyWaitsLongerEachRoundUpToASecond) {
  RoundOutcome o;
  o.busy = 1;
  std::vector<milliseconds> pauses;
  for (int round = 0; round + 1 < kMaxRounds; ++round) {
    const RetryDecision d = decideRetry(o, round);
    ASSERT_EQ(d.action, RetryDecision::Action::Retry) << round;
    EXPECT_FALSE(d.reload_map);
    pauses.push_back(d.pause);
  }
  ASSERT_GE(pauses.size(), 6u);
  EXPECT_EQ(pauses[0], milliseconds(50));
  EXPECT_EQ(pauses[1], milliseconds(100));
  EXPECT_EQ(pauses[4], milliseconds(800));
  EXPECT_EQ(pauses[5], milliseconds(1000));
  EXPECT_EQ(pauses.back(), milliseconds(1000));
}

TEST(VerifyRoutingTest, GivesUpAfterTheLastRound) {
  RoundOutcome o;
  o.moved = 1;
  o.asked = 1;
  EXPECT_EQ(decideRetry(o, kMaxRounds - 2).action, RetryDecision::Action::Retry);
  EXPECT_EQ(decideRetry(o, kMaxRounds - 1).action, RetryDecision::Action::GiveUp);
  // Done wins even in the last round.
  EXPECT_EQ(decideRetry({}, kMaxRounds - 1).action, RetryDecision::Action::Done);
}

}  // namespace
}  // namespace xdcr::replicator
