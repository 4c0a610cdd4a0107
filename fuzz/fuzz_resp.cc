// Fuzz target: RESP parsing (common/resp.h: parseCommand, parseReply) and the framing of the
// replication stream into units (source/redis_source.h: UnitFramer, what RedisSource::nextUnit
// runs on its read buffer). The input is raw bytes as they would arrive from the source.
//
// Properties checked (beyond "no crash, no ASan/UBSan report"):
//  P1 a Complete parse consumes at least one byte and never more than the input; its argument
//     spans lie inside the consumed bytes, each followed by CRLF;
//  P2 prefixes are consistent with the whole: every strict prefix of a Complete value is NeedMore
//     (never Complete, never Error); a prefix of an erroneous input is NeedMore or the same Error;
//     every prefix of a NeedMore input is NeedMore (every prefix of values up to 64 bytes, 40 of
//     longer ones; each prefix ends at the end of a heap block, so reading past it is an ASan
//     report);
//  P3 NeedMore's `need` is a real lower bound: more than what was given, and never more than
//     the value's size once Complete;
//  P4 fed in two chunks (split chosen from the input), the streaming result equals the whole;
//  P5 appendCommand() of the parsed arguments parses back to the same arguments;
//  P6 parseReply: the same P1-P4 on the same bytes read as replies, and the reported fields are
//     bounded (text and elements at most 256 bytes, at most 64 elements);
//  P7 UnitFramer fed in chunks of input-chosen sizes (the bytes received so far end where a heap
//     block ends, so ASan sees any read past them) yields exactly the units, offsets and final
//     error of the framer fed everything at once; every unit is one entry or MULTI ... EXEC, and
//     its offsets advance by exactly the bytes consumed.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/resp.h"
#include "fuzz/fuzz_check.h"
#include "source/redis_source.h"

namespace {

using namespace xdcr;
using resp::ArgSpan;
using resp::ParseResult;
using resp::ParseStatus;

std::string statusName(ParseStatus s) {
  switch (s) {
    case ParseStatus::Complete:
      return "Complete";
    case ParseStatus::NeedMore:
      return "NeedMore";
    case ParseStatus::Error:
      return "Error";
  }
  return "?";
}

/** A parse's observable outcome, comparable between two ways of feeding the same bytes. */
struct Outcome {
  ParseStatus status = ParseStatus::NeedMore;
  size_t consumed = 0;
  std::string error;
  std::vector<std::string> values;  // command arguments, or the reply's fields

  bool operator==(const Outcome&) const = default;
  std::string describe() const {
    std::string s = statusName(status) + " consumed=" + std::to_string(consumed);
    if (!error.empty()) s += " error=" + error;
    s += " values=" + std::to_string(values.size());
    return s;
  }
};

// ---- parseCommand ----

Outcome commandOutcome(std::string_view data) {
  std::vector<ArgSpan> spans;
  ParseResult r = resp::parseCommand(data, spans);
  Outcome o{r.status, r.consumed, r.error, {}};
  if (r.status == ParseStatus::Complete) {
    // P1
    FUZZ_CHECK(r.consumed > 0 && r.consumed <= data.size(),
               "consumed " + std::to_string(r.consumed) + " of " + std::to_string(data.size()));
    FUZZ_CHECK(!spans.empty());
    size_t prev_end = 0;
    for (auto s : spans) {
      FUZZ_CHECK(s.pos >= prev_end && s.pos + s.len + 2 <= r.consumed,
                 "span " + std::to_string(s.pos) + "+" + std::to_string(s.len));
      FUZZ_CHECK(data[s.pos + s.len] == '\r' && data[s.pos + s.len + 1] == '\n');
      prev_end = s.pos + s.len + 2;
      o.values.emplace_back(data.substr(s.pos, s.len));
    }
    FUZZ_CHECK(prev_end == r.consumed, "the last argument ends the command");
  } else if (r.status == ParseStatus::NeedMore) {
    // P3: more than was given
    FUZZ_CHECK(r.need == 0 || r.need > data.size(), "need " + std::to_string(r.need) + " with " +
                                                        std::to_string(data.size()) + " given");
  } else {
    FUZZ_CHECK(!r.error.empty());
  }
  return o;
}

// ---- parseReply ----

Outcome replyOutcome(std::string_view data, bool collect) {
  resp::ReplyInfo info;
  info.collect = collect;
  ParseResult r = resp::parseReply(data, info);
  Outcome o{r.status, r.consumed, r.error, {}};
  if (r.status == ParseStatus::Complete) {
    FUZZ_CHECK(r.consumed > 0 && r.consumed <= data.size(),
               "consumed " + std::to_string(r.consumed) + " of " + std::to_string(data.size()));
    FUZZ_CHECK(info.text.size() <= 256);
    FUZZ_CHECK(info.elements.size() <= 64);
    FUZZ_CHECK(collect || info.elements.empty());
    if (info.type == resp::ReplyType::Error) FUZZ_CHECK(info.has_error);
    o.values.push_back(std::to_string(static_cast<int>(info.type)));
    o.values.push_back(info.has_error ? "error" : "ok");
    o.values.push_back(info.text);
    o.values.push_back(std::to_string(info.integer));
    for (const auto& e : info.elements) {
      FUZZ_CHECK(e.size() <= 256);
      o.values.push_back(e);
    }
  } else if (r.status == ParseStatus::NeedMore) {
    FUZZ_CHECK(r.need == 0 || r.need > data.size(), "need " + std::to_string(r.need) + " with " +
                                                        std::to_string(data.size()) + " given");
  } else {
    FUZZ_CHECK(!r.error.empty());
  }
  return o;
}

/**
 * P2-P4 for one value at the start of `data`, whose whole-buffer outcome is `whole`: prefixes at
 * every split for short values, else at 40 chosen ones; and the two-chunk streaming feed.
 */
template <class Parse>
void checkPrefixes(std::string_view data, const Outcome& whole, Parse parse, fuzz::Rng& rng) {
  // The bytes that decide the outcome: the value itself when Complete; everything otherwise.
  const size_t extent = whole.status == ParseStatus::Complete ? whole.consumed : data.size();
  // Each prefix is copied to the very end of this heap block: a parser reading past the prefix
  // reads past the block, an ASan report.
  std::unique_ptr<char[]> block(new char[extent + 1]);
  char* const block_end = block.get() + extent + 1;
  auto checkAt = [&](size_t split) {
    if (split >= extent) return;
    std::memcpy(block_end - split, data.data(), split);
    std::string_view prefix(block_end - split, split);
    Outcome p = parse(prefix);
    auto where = [&] {  // built only when a check fails
      return "prefix " + std::to_string(split) + " of " + std::to_string(extent) + ": " +
             p.describe() + " vs whole " + whole.describe();
    };
    switch (whole.status) {
      case ParseStatus::Complete:
        FUZZ_CHECK(p.status == ParseStatus::NeedMore, where());
        break;
      case ParseStatus::NeedMore:
        FUZZ_CHECK(p.status == ParseStatus::NeedMore, where());
        break;
      case ParseStatus::Error:
        FUZZ_CHECK(p.status == ParseStatus::NeedMore || p == whole, where());
        break;
    }
  };
  if (extent <= 64) {
    for (size_t s = 0; s < extent; ++s) checkAt(s);
  } else {
    for (size_t s = 0; s < 8; ++s) checkAt(s);
    for (size_t s = extent - 8; s < extent; ++s) checkAt(s);
    for (int i = 0; i < 24; ++i) checkAt(rng.upTo(extent - 1));
  }

  // P4: a streaming reader given the first chunk, then the rest, sees what the whole gives.
  const size_t split = rng.upTo(data.size());
  std::string buf(data.substr(0, split));
  Outcome first = parse(buf);  // (std::string: what a socket reader's buffer is)
  if (first.status == ParseStatus::NeedMore) {
    buf.append(data.substr(split));
    Outcome second = parse(buf);
    FUZZ_CHECK(second == whole, "two chunks split at " + std::to_string(split) + ": " +
                                    second.describe() + " vs whole " + whole.describe());
  } else {
    FUZZ_CHECK(first == whole, "first chunk of " + std::to_string(split) + ": " + first.describe() +
                                   " vs whole " + whole.describe());
  }
}

/** P3: the `need` of a NeedMore prefix of a complete value never exceeds the value. */
template <class RawParse>
void checkNeedBound(std::string_view data, size_t consumed, RawParse raw, fuzz::Rng& rng) {
  for (int i = 0; i < 8; ++i) {
    size_t split = rng.upTo(consumed - 1);
    ParseResult r = raw(data.substr(0, split));
    FUZZ_CHECK(r.status == ParseStatus::NeedMore);
    FUZZ_CHECK(r.need <= consumed, "need " + std::to_string(r.need) + " for a value of " +
                                       std::to_string(consumed) + " bytes");
  }
}

ParseResult rawCommand(std::string_view d) {
  std::vector<ArgSpan> spans;
  return resp::parseCommand(d, spans);
}

ParseResult rawReply(std::string_view d) {
  resp::ReplyInfo info;
  return resp::parseReply(d, info);
}

void fuzzCommands(std::string_view data, fuzz::Rng& rng) {
  size_t pos = 0;
  for (int guard = 0; pos < data.size() && guard < 4096; ++guard) {
    std::string_view rest = data.substr(pos);
    Outcome whole = commandOutcome(rest);
    checkPrefixes(rest, whole, commandOutcome, rng);
    if (whole.status != ParseStatus::Complete) return;
    checkNeedBound(rest, whole.consumed, rawCommand, rng);
    // P5: the writer's encoding of these arguments parses back to them.
    std::vector<std::string_view> views(whole.values.begin(), whole.values.end());
    std::string encoded;
    resp::appendCommand(encoded, views);
    Outcome again = commandOutcome(encoded);
    FUZZ_CHECK(again.status == ParseStatus::Complete && again.consumed == encoded.size() &&
                   again.values == whole.values,
               "re-encoded command: " + again.describe());
    pos += whole.consumed;
  }
}

void fuzzReplies(std::string_view data, bool collect, fuzz::Rng& rng) {
  auto parse = [collect](std::string_view d) { return replyOutcome(d, collect); };
  size_t pos = 0;
  for (int guard = 0; pos < data.size() && guard < 4096; ++guard) {
    std::string_view rest = data.substr(pos);
    Outcome whole = parse(rest);
    checkPrefixes(rest, whole, parse, rng);
    if (whole.status != ParseStatus::Complete) return;
    checkNeedBound(rest, whole.consumed, rawReply, rng);
    pos += whole.consumed;
  }
}

// ---- UnitFramer ----

struct FramedUnit {
  bool transaction = false;
  uint64_t offset_end = 0;
  size_t bytes = 0;
  std::vector<std::vector<std::string>> entries;
  std::vector<uint64_t> entry_ends;
  bool operator==(const FramedUnit&) const = default;
};

struct Framed {
  std::vector<FramedUnit> units;
  std::string error;  // empty: stopped for lack of bytes
  size_t consumed = 0;
};

/** Records `u` (which views the buffer) and checks its shape. */
FramedUnit record(const source::Unit& u, uint64_t base) {
  FramedUnit f;
  f.transaction = u.transaction;
  f.offset_end = u.offset_end;
  f.bytes = u.bytes;
  FUZZ_CHECK(!u.entries.empty());
  FUZZ_CHECK(u.bytes > 0 && u.offset_end == base + u.bytes);
  uint64_t prev = base;
  for (const auto& e : u.entries) {
    FUZZ_CHECK(!e.args.empty());
    FUZZ_CHECK(e.offset_end > prev, "entry offsets advance");
    prev = e.offset_end;
    std::vector<std::string> args;
    for (auto a : e.args) args.emplace_back(a);
    f.entries.push_back(std::move(args));
    f.entry_ends.push_back(e.offset_end);
  }
  FUZZ_CHECK(prev == u.offset_end, "the last entry ends the unit");
  if (u.transaction) {
    FUZZ_CHECK(u.entries.size() >= 2);
    FUZZ_CHECK(resp::iequals(u.entries.front().args[0], "multi"));
    FUZZ_CHECK(resp::iequals(u.entries.back().args[0], "exec"));
  } else {
    FUZZ_CHECK(u.entries.size() == 1);
  }
  return f;
}

/**
 * Feeds `data` to a fresh framer as a socket would: chunks appended to a buffer (chunk sizes
 * from `rng`; everything at once when rng is null), units dropped from its front when returned.
 */
Framed frame(std::string_view data, uint64_t base, fuzz::Rng* rng) {
  Framed out;
  source::UnitFramer framer;
  source::Unit unit;
  std::string buf;
  size_t fed = 0;
  uint64_t offset = base;
  // The framer sees the buffered bytes copied to the very end of this heap block, so reading
  // past what has been received is reading past the block: an ASan report.
  std::unique_ptr<char[]> block(new char[data.size() + 1]);
  char* const block_end = block.get() + data.size() + 1;
  for (int guard = 0; guard < 1 << 20; ++guard) {
    size_t n = rng ? rng->chunk(data.size() - fed) : data.size() - fed;
    buf.append(data.substr(fed, n));
    fed += n;
    for (;;) {
      std::memcpy(block_end - buf.size(), buf.data(), buf.size());
      std::string_view view(block_end - buf.size(), buf.size());
      std::string error;
      auto status = framer.next(view, offset, unit, error);
      if (status == source::UnitFramer::Status::NeedMore) {
        FUZZ_CHECK(error.empty());
        break;
      }
      if (status == source::UnitFramer::Status::Error) {
        FUZZ_CHECK(!error.empty());
        out.error = error;
        return out;
      }
      FUZZ_CHECK(unit.bytes <= buf.size());
      out.units.push_back(record(unit, offset));
      offset += unit.bytes;
      out.consumed += unit.bytes;
      buf.erase(0, unit.bytes);
    }
    if (fed == data.size()) return out;
  }
  FUZZ_CHECK(false, "framing did not finish");
  return out;
}

void fuzzFraming(std::string_view data, fuzz::Rng& rng) {
  const uint64_t base = rng.next() >> 24;  // any offset: the arithmetic must not care
  Framed whole = frame(data, base, nullptr);
  Framed chunked = frame(data, base, &rng);
  FUZZ_CHECK(chunked.units.size() == whole.units.size(),
             std::to_string(chunked.units.size()) + " units in chunks vs " +
                 std::to_string(whole.units.size()) + " whole");
  for (size_t i = 0; i < whole.units.size(); ++i) {
    FUZZ_CHECK(chunked.units[i] == whole.units[i], "unit " + std::to_string(i) + " differs");
  }
  FUZZ_CHECK(chunked.error == whole.error, "\"" + chunked.error + "\" vs \"" + whole.error + "\"");
  FUZZ_CHECK(chunked.consumed == whole.consumed);
  FUZZ_CHECK(whole.consumed <= data.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  std::string_view data(reinterpret_cast<const char*>(bytes), size);
  xdcr::fuzz::Rng rng(xdcr::fuzz::hashBytes(data));
  fuzzCommands(data, rng);
  fuzzReplies(data, (rng.next() & 1) != 0, rng);
  fuzzFraming(data, rng);
  return 0;
}
