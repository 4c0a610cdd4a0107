// RESP parsing: every command and reply, split at every byte boundary, parses to the same result
// as in one piece; malformed and over-limit input is an error, never a crash or an allocation.

#include <gtest/gtest.h>

#include <limits>

#include <string>
#include <vector>

#include "common/resp.h"
#include "source/redis_source.h"

namespace xdcr::resp {
namespace {

std::vector<std::string> args(std::string_view data, const std::vector<ArgSpan>& spans) {
  std::vector<std::string> out;
  for (auto s : spans) out.emplace_back(data.substr(s.pos, s.len));
  return out;
}

/** Parses a buffer holding several commands fed in two pieces split at `split`. */
std::vector<std::vector<std::string>> parseSplit(const std::string& stream, size_t split,
                                                 std::vector<size_t>* ends) {
  std::vector<std::vector<std::string>> out;
  std::string buf;
  size_t fed = 0, consumed_total = 0;
  std::vector<ArgSpan> spans;
  auto feed = [&](size_t upto) {
    buf.append(stream, fed, upto - fed);
    fed = upto;
    for (;;) {
      auto r = parseCommand(buf, spans);
      if (r.status == ParseStatus::NeedMore) break;
      EXPECT_EQ(r.status, ParseStatus::Complete) << r.error;
      if (r.status != ParseStatus::Complete) return;
      out.push_back(args(buf, spans));
      consumed_total += r.consumed;
      if (ends) ends->push_back(consumed_total);
      buf.erase(0, r.consumed);
    }
  };
  feed(split);
  feed(stream.size());
  EXPECT_TRUE(buf.empty());
  return out;
}

TEST(RespCommand, EverySplitPointGivesTheSameCommandsAndOffsets) {
  std::string stream;
  appendCommand(stream, {"SELECT", "0"});
  appendCommand(stream, {"SET", "k", "v", "PXAT", "1795280049645"});
  appendCommand(stream, {"SET", "bin", std::string_view("a\r\nb\0c", 6)});  // CRLF and NUL inside
  appendCommand(stream, {"HSET", "h", "", "x"});                            // empty argument
  appendCommand(stream, {"ping"});
  std::vector<size_t> ref_ends;
  auto ref = parseSplit(stream, stream.size(), &ref_ends);
  ASSERT_EQ(ref.size(), 5u);
  EXPECT_EQ(ref[1], (std::vector<std::string>{"SET", "k", "v", "PXAT", "1795280049645"}));
  EXPECT_EQ(ref[2][2], std::string("a\r\nb\0c", 6));
  EXPECT_EQ(ref[3][2], "");
  EXPECT_EQ(ref_ends.back(), stream.size());  // offsets count every byte
  for (size_t split = 0; split <= stream.size(); ++split) {
    std::vector<size_t> ends;
    EXPECT_EQ(parseSplit(stream, split, &ends), ref) << "split at " << split;
    EXPECT_EQ(ends, ref_ends) << "split at " << split;
  }
}

TEST(RespCommand, NeedMoreReportsTheBytesAValueNeeds) {
  std::string s = "*2\r\n$3\r\nGET\r\n$10\r\n0123";
  std::vector<ArgSpan> spans;
  auto r = parseCommand(s, spans);
  EXPECT_EQ(r.status, ParseStatus::NeedMore);
  EXPECT_EQ(r.need, s.size() - 4 + 10 + 2);
}

TEST(RespCommand, MalformedInputIsAnErrorWithItsPosition) {
  std::vector<ArgSpan> spans;
  for (std::string bad :
       {"+OK\r\n", "*x\r\n", "*0\r\n", "*-1\r\n", "*1\r\n:5\r\n", "*1\r\n$-1\r\n",
        "*1\r\n$3\r\nabcXY", "*1\n", "*99999999999\r\n", "*1\r\n$999999999999\r\n"}) {
    auto r = parseCommand(bad, spans);
    EXPECT_EQ(r.status, ParseStatus::Error) << bad;
    EXPECT_NE(r.error.find("at byte"), std::string::npos) << r.error;
  }
}

TEST(RespCommand, AHeaderLineWithoutEndIsBoundedNotBuffered) {
  std::string s = "*" + std::string(kMaxLineLength + 10, '1');
  std::vector<ArgSpan> spans;
  EXPECT_EQ(parseCommand(s, spans).status, ParseStatus::Error);
}

TEST(RespReply, EveryTypeAndEverySplitPoint) {
  const std::string replies =
      "+OK\r\n-ERR no such key\r\n:42\r\n$5\r\nhello\r\n$-1\r\n*-1\r\n"
      "*3\r\n+QUEUED\r\n*2\r\n:1\r\n-WRONGTYPE bad\r\n$0\r\n\r\n";
  std::vector<ReplyType> want = {ReplyType::SimpleString, ReplyType::Error, ReplyType::Integer,
                                 ReplyType::Bulk,         ReplyType::Null,  ReplyType::Null,
                                 ReplyType::Array};
  for (size_t split = 0; split <= replies.size(); ++split) {
    std::string buf = replies.substr(0, split);
    size_t fed = split;
    std::vector<ReplyInfo> got;
    for (int guard = 0; guard < 100; ++guard) {
      ReplyInfo info;
      auto r = parseReply(buf, info);
      if (r.status == ParseStatus::Complete) {
        got.push_back(info);
        buf.erase(0, r.consumed);
        continue;
      }
      ASSERT_EQ(r.status, ParseStatus::NeedMore) << r.error;
      if (fed == replies.size()) break;
      buf += replies.substr(fed);
      fed = replies.size();
    }
    ASSERT_EQ(got.size(), want.size()) << "split " << split;
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i].type, want[i]) << i;
    EXPECT_EQ(got[0].text, "OK");
    EXPECT_TRUE(got[1].has_error);
    EXPECT_EQ(got[1].text, "ERR no such key");
    EXPECT_EQ(got[2].integer, 42);
    EXPECT_EQ(got[3].text, "hello");
    EXPECT_FALSE(got[4].has_error);
    // An EXEC result with an error inside is flagged, with the first error's text.
    EXPECT_TRUE(got[6].has_error);
    EXPECT_EQ(got[6].text, "WRONGTYPE bad");
  }
}

TEST(RespReply, AnArraysLeastIntegerIsKeptForItselfAndForEachElement) {
  // HPEXPIREAT's codes alone, then inside an EXEC: -2 (no such field) must show in both.
  ReplyInfo top;
  top.collect_items = true;
  ASSERT_EQ(parseReply("*3\r\n:1\r\n:-2\r\n:2\r\n", top).status, ParseStatus::Complete);
  EXPECT_EQ(top.least, -2);
  ASSERT_EQ(top.items.size(), 3u);

  ReplyInfo exec;
  exec.collect_items = true;
  const std::string reply = "*3\r\n:0\r\n*2\r\n:1\r\n:-2\r\n*2\r\n:1\r\n*1\r\n:-2\r\n";
  ASSERT_EQ(parseReply(reply, exec).status, ParseStatus::Complete);
  ASSERT_EQ(exec.items.size(), 3u);
  EXPECT_EQ(exec.least, 0);  // the top level's own integers only
  EXPECT_EQ(exec.items[1].type, ReplyType::Array);
  EXPECT_EQ(exec.items[1].least, -2);
  // Only an element's own integers count, not those of an array nested in it.
  EXPECT_EQ(exec.items[2].least, 1);
  EXPECT_EQ(exec.items[0].least, std::numeric_limits<int64_t>::max());

  // Not collecting: nothing is kept (the hot path), and the next parse starts anew.
  ReplyInfo plain;
  ASSERT_EQ(parseReply("*1\r\n:-2\r\n", plain).status, ParseStatus::Complete);
  EXPECT_EQ(plain.least, std::numeric_limits<int64_t>::max());
  ASSERT_EQ(parseReply(":5\r\n", top).status, ParseStatus::Complete);
  EXPECT_EQ(top.least, std::numeric_limits<int64_t>::max());
}

TEST(RespReply, HostileNestingIsRejected) {
  std::string s;
  for (int i = 0; i < 100; ++i) s += "*1\r\n";
  s += ":1\r\n";
  ReplyInfo info;
  EXPECT_EQ(parseReply(s, info).status, ParseStatus::Error);
}

TEST(RespWrite, AppendProducesParseableCommands) {
  std::string out;
  appendArrayHeader(out, 3);
  appendBulk(out, "PEXPIREAT");
  appendBulk(out, "k");
  appendBulkInt(out, -1795280049645);
  EXPECT_EQ(out, "*3\r\n$9\r\nPEXPIREAT\r\n$1\r\nk\r\n$14\r\n-1795280049645\r\n");
  EXPECT_TRUE(iequals("PeXpIrEaT", "pexpireat"));
  EXPECT_FALSE(iequals("SET", "SETX"));
}

// source::UnitFramer: what RedisSource::nextUnit() runs on its read buffer (also fuzzed by
// fuzz/fuzz_resp.cc). A MULTI ... EXEC block is one unit, whatever the split of its bytes.
TEST(UnitFramer, TransactionsAreOneUnitAtEverySplitPoint) {
  std::string stream;
  appendCommand(stream, {"SELECT", "0"});
  appendCommand(stream, {"MULTI"});
  appendCommand(stream, {"SET", "a", "1"});
  appendCommand(stream, {"PEXPIREAT", "a", "1795280049645"});
  appendCommand(stream, {"EXEC"});
  appendCommand(stream, {"PING"});
  const uint64_t base = 1000;
  for (size_t split = 0; split <= stream.size(); ++split) {
    source::UnitFramer framer;
    source::Unit unit;
    std::string buf = stream.substr(0, split), error;
    size_t fed = split;
    uint64_t offset = base;
    std::vector<std::pair<size_t, uint64_t>> got;  // (entries, offset_end)
    std::vector<bool> transaction;
    for (int guard = 0; guard < 100; ++guard) {
      auto status = framer.next(buf, offset, unit, error);
      ASSERT_NE(status, source::UnitFramer::Status::Error) << error;
      if (status == source::UnitFramer::Status::NeedMore) {
        if (fed == stream.size()) break;
        buf += stream.substr(fed);
        fed = stream.size();
        continue;
      }
      got.emplace_back(unit.entries.size(), unit.offset_end);
      transaction.push_back(unit.transaction);
      offset = unit.offset_end;
      buf.erase(0, unit.bytes);
    }
    ASSERT_EQ(got.size(), 3u) << "split " << split;
    EXPECT_EQ(got[1].first, 4u);  // MULTI, SET, PEXPIREAT, EXEC
    EXPECT_EQ(transaction, (std::vector<bool>{false, true, false}));
    EXPECT_EQ(got[2].second, base + stream.size());
  }
}

// A unit's entries are parsed once and kept while its bytes arrive (a long MULTI ... EXEC block is
// not parsed again at every read): fed a byte at a time, the same units and offsets.
TEST(UnitFramer, AByteAtATimeGivesTheSameUnits) {
  std::string stream;
  appendCommand(stream, {"MULTI"});
  for (int i = 0; i < 20; ++i) appendCommand(stream, {"INCR", "k" + std::to_string(i)});
  appendCommand(stream, {"EXEC"});
  appendCommand(stream, {"SET", "a", "1"});
  source::UnitFramer framer;
  source::Unit unit;
  std::string buf, error;
  uint64_t offset = 0;
  std::vector<std::vector<std::string>> names;
  std::vector<uint64_t> ends;
  for (char c : stream) {
    buf.push_back(c);
    auto status = framer.next(buf, offset, unit, error);
    ASSERT_NE(status, source::UnitFramer::Status::Error) << error;
    if (status != source::UnitFramer::Status::Unit) continue;
    std::vector<std::string> unit_names;
    for (const auto& e : unit.entries) {
      unit_names.emplace_back(e.args[0]);
      ends.push_back(e.offset_end);
    }
    names.push_back(unit_names);
    offset = unit.offset_end;
    buf.erase(0, unit.bytes);
  }
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0].size(), 22u);
  EXPECT_EQ(names[0].front(), "MULTI");
  EXPECT_EQ(names[0][1], "INCR");
  EXPECT_EQ(names[0].back(), "EXEC");
  EXPECT_EQ(names[1], (std::vector<std::string>{"SET"}));
  EXPECT_EQ(ends.back(), stream.size());
  EXPECT_TRUE(buf.empty());
}

TEST(UnitFramer, AnErrorNamesItsStreamOffset) {
  source::UnitFramer framer;
  source::Unit unit;
  std::string stream, error;
  appendCommand(stream, {"PING"});
  ASSERT_EQ(framer.next(stream, 500, unit, error), source::UnitFramer::Status::Unit);
  std::string rest = "PING\r\n";  // inline commands never appear in a replication stream
  EXPECT_EQ(framer.next(rest, unit.offset_end, unit, error), source::UnitFramer::Status::Error);
  EXPECT_NE(error.find("near offset 514:"), std::string::npos) << error;
}

}  // namespace
}  // namespace xdcr::resp
