// Reading documents back from the source (source/document_read.h): the transaction's commands,
// and its replies parsed into documents at one offset — refusals, absent keys and every
// malformed answer named.

#include "source/document_read.h"

#include <gtest/gtest.h>

#include "common/resp.h"

namespace xdcr::source {
namespace {

using Cmds = std::vector<std::vector<std::string>>;

resp::Value simple(std::string s) {
  return resp::Value{resp::ReplyType::SimpleString, std::move(s), 0, {}};
}
resp::Value bulk(std::string s) {
  return resp::Value{resp::ReplyType::Bulk, std::move(s), 0, {}};
}
resp::Value integer(int64_t v) {
  return resp::Value{resp::ReplyType::Integer, "", v, {}};
}
resp::Value error(std::string s) {
  return resp::Value{resp::ReplyType::Error, std::move(s), 0, {}};
}
resp::Value null() {
  return resp::Value{};
}
/** A DUMP payload: type 0 (string), the raw value, RDB version 10, a CRC (not checked here). */
std::string payload(const std::string& raw) {
  std::string p(1, '\0');
  p += raw;
  p += std::string("\x0a\x00", 2);
  p += std::string(8, 'c');
  return p;
}

const std::vector<DocumentKey> kKeys = {{0, "a"}, {0, "b"}, {3, "c"}};

std::vector<resp::Value> replies(std::vector<resp::Value> exec_items) {
  std::vector<resp::Value> out;
  for (size_t i = 0; i + 1 < documentReadCommands(kKeys).size(); ++i) {
    out.push_back(simple(i == 0 ? "OK" : "QUEUED"));
  }
  resp::Value exec{resp::ReplyType::Array, "", 0, std::move(exec_items)};
  out.push_back(std::move(exec));
  return out;
}

TEST(DocumentRead, OneTransactionASelectPerDbDumpAndDeadlineOfEachKeyThenTheOffset) {
  EXPECT_EQ(documentReadCommands(kKeys), (Cmds{{"MULTI"},
                                               {"SELECT", "0"},
                                               {"DUMP", "a"},
                                               {"PEXPIRETIME", "a"},
                                               {"DUMP", "b"},
                                               {"PEXPIRETIME", "b"},
                                               {"SELECT", "3"},
                                               {"DUMP", "c"},
                                               {"PEXPIRETIME", "c"},
                                               {"INFO", "replication"},
                                               {"EXEC"}}));
}

TEST(DocumentRead, DocumentsAbsentKeysAndTheOffsetTheyBelongTo) {
  auto r =
      parseDocumentRead(kKeys,
                        replies({simple("OK"), bulk(payload("v1")), integer(1795000000123), null(),
                                 integer(-2), simple("OK"), bulk(payload("v3")), integer(-1),
                                 bulk("# Replication\r\nrole:master\r\nmaster_replid:abc\r\n"
                                      "master_repl_offset:4242\r\n")}),
                        "source s");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->offset, 4242u);
  EXPECT_EQ(r->replid, "abc");
  ASSERT_EQ(r->docs.size(), 3u);
  EXPECT_TRUE(r->docs[0].exists);
  EXPECT_EQ(r->docs[0].value(), "v1");
  EXPECT_EQ(r->docs[0].type(), 0);
  EXPECT_EQ(r->docs[0].rdbVersion(), 10);
  EXPECT_EQ(r->docs[0].deadline_ms, 1795000000123);
  EXPECT_FALSE(r->docs[1].exists);  // expired or deleted at X: the target deletes its copy
  EXPECT_EQ(r->docs[2].db, 3);
  EXPECT_EQ(r->docs[2].deadline_ms, 0);  // -1: no deadline
  EXPECT_TRUE(r->unreadable.empty());
}

TEST(DocumentRead, ARefusedTransactionSaysWhatTheUserNeeds) {
  std::vector<resp::Value> out = replies({});
  out[2] = error("NOPERM this user has no permissions to run the 'dump' command");
  out.back() = error("EXECABORT Transaction discarded because of previous errors.");
  auto r = parseDocumentRead(kKeys, out, "source s");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, Error::Kind::Refused);
  EXPECT_NE(r.error().message.find("NOPERM"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("+dump"), std::string::npos) << r.error().message;
}

TEST(DocumentRead, AKeyWhoseDumpFailedIsUnreadableTheOthersAreRead) {
  auto r = parseDocumentRead(
      kKeys,
      replies({simple("OK"), error("ERR boom"), integer(5), bulk("short"), integer(-1),
               simple("OK"), bulk(payload("v3")), integer(-1), bulk("master_repl_offset:7\r\n")}),
      "source s");
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->unreadable.size(), 2u);
  EXPECT_EQ(r->unreadable[0].first, (DocumentKey{0, "a"}));
  EXPECT_EQ(r->unreadable[0].second, "ERR boom");
  EXPECT_NE(r->unreadable[1].second.find("not a payload"), std::string::npos);
  ASSERT_EQ(r->docs.size(), 1u);
  EXPECT_EQ(r->docs[0].key, "c");
}

TEST(DocumentRead, NoOffsetOrAShortAnswerIsAProtocolError) {
  auto no_offset =
      parseDocumentRead(kKeys,
                        replies({simple("OK"), null(), integer(-2), null(), integer(-2),
                                 simple("OK"), null(), integer(-2), bulk("role:master\r\n")}),
                        "source s");
  ASSERT_FALSE(no_offset);
  EXPECT_EQ(no_offset.error().kind, Error::Kind::Protocol);
  auto shorter = parseDocumentRead(kKeys, replies({simple("OK")}), "source s");
  ASSERT_FALSE(shorter);
  EXPECT_EQ(shorter.error().kind, Error::Kind::Protocol);
}

TEST(ReplyItems, TheElementsOfAnExecAreCollectedWithTheirIntegers) {
  const std::string exec = "*5\r\n:1\r\n:0\r\n-ERR no such key\r\n$3\r\nabc\r\n*2\r\n:-2\r\n:1\r\n";
  resp::ReplyInfo info;
  info.collect_items = true;
  auto r = resp::parseReply(exec, info);
  ASSERT_EQ(r.status, resp::ParseStatus::Complete);
  ASSERT_EQ(info.items.size(), 5u);
  EXPECT_EQ(info.items[0].type, resp::ReplyType::Integer);
  EXPECT_EQ(info.items[0].integer, 1);
  EXPECT_EQ(info.items[1].integer, 0);
  EXPECT_EQ(info.items[2].type, resp::ReplyType::Error);
  EXPECT_EQ(info.items[3].type, resp::ReplyType::Bulk);
  EXPECT_EQ(info.items[4].type, resp::ReplyType::Array);  // nested: not collected inside
  EXPECT_TRUE(info.has_error);
  EXPECT_EQ(info.text, "ERR no such key");
  // Off: nothing collected (the hot path).
  resp::ReplyInfo off;
  ASSERT_EQ(resp::parseReply(exec, off).status, resp::ParseStatus::Complete);
  EXPECT_TRUE(off.items.empty());
  // Cut short and read again: collected once.
  resp::ReplyInfo again;
  again.collect_items = true;
  EXPECT_EQ(resp::parseReply(exec.substr(0, 20), again).status, resp::ParseStatus::NeedMore);
  ASSERT_EQ(resp::parseReply(exec, again).status, resp::ParseStatus::Complete);
  EXPECT_EQ(again.items.size(), 5u);
}

}  // namespace
}  // namespace xdcr::source
