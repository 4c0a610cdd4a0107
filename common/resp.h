#pragma once
// RESP2 parsing for the replication stream (commands: arrays of bulk strings) and for replies
// (any RESP2 value, nested arrays included).
//
// The parsers are stateless and incremental: they look at the bytes buffered so far and either
// consume one complete value or say how much more is needed, never copying. Arguments are
// returned as positions in the buffer, not pointers, so the caller may grow (reallocate) its
// buffer between calls. The replication offset of an entry is exactly the number of bytes this
// parser consumed for it.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace xdcr::resp {

/** Hard limits: anything larger is a protocol error, so hostile input cannot make us allocate. */
inline constexpr int64_t kMaxBulkLength = 512LL * 1024 * 1024;  // Redis proto-max-bulk-len
inline constexpr int64_t kMaxArrayLength = 64LL * 1024 * 1024;
inline constexpr int kMaxNesting = 16;
inline constexpr size_t kMaxLineLength = 64 * 1024;  // a length or a simple reply line

enum class ParseStatus {
  Complete,  // one value was consumed
  NeedMore,  // the buffer holds only a prefix of a value; call again with more bytes
  Error,     // not valid RESP (or over a limit): the connection must be dropped
};

/** One argument of a command, as a position in the buffer given to the parser. */
struct ArgSpan {
  size_t pos;
  size_t len;
};

struct ParseResult {
  ParseStatus status = ParseStatus::NeedMore;
  size_t consumed = 0;  // bytes of the value when Complete
  /** When NeedMore: a lower bound on the total bytes needed from the start (0 = unknown). */
  size_t need = 0;
  std::string error;  // when Error: what is wrong, with the byte position
};

/**
 * Parses one command `*N\r\n$len\r\narg\r\n...` starting at `data[0]`. On Complete, `args`
 * holds N spans relative to `data`. `args` is cleared first and reused (no allocation once it
 * has grown to the widest command).
 */
ParseResult parseCommand(std::string_view data, std::vector<ArgSpan>& args);

/** The kind of a reply's top-level value. */
enum class ReplyType { SimpleString, Error, Integer, Bulk, Null, Array };

struct ReplyInfo {
  ReplyType type = ReplyType::Null;
  /** true if the value is an error or an array containing an error (e.g. an EXEC result). */
  bool has_error = false;
  /** The first error's text (e.g. "ERR no such key"), or the simple string / bulk payload
      (truncated to 256 bytes) — for handshake replies and diagnostics. */
  std::string text;
  int64_t integer = 0;
  /** Set `collect` to receive the bulk/simple-string elements of a top-level array (at most
      64, each truncated to 256 bytes), e.g. for CONFIG GET. Off on the hot path. */
  bool collect = false;
  std::vector<std::string> elements;
  /** Set `collect_items` to receive the type and integer of every element of a top-level array
      (an EXEC's replies, an HPEXPIREAT's codes; at most kMaxItems): which write of a
      transaction found its key gone. Off on the hot path. */
  struct Item {
    ReplyType type = ReplyType::Null;
    int64_t integer = 0;
    /** An array element: the least integer among its own elements (an HPEXPIREAT's codes in
     *  an EXEC's array: -2 = no such field); INT64_MAX when it holds none. */
    int64_t least = std::numeric_limits<int64_t>::max();
  };
  static constexpr size_t kMaxItems = 1 << 16;
  bool collect_items = false;
  std::vector<Item> items;
  /** With `collect_items`: the least integer element of a top-level array (INT64_MAX: none). */
  int64_t least = std::numeric_limits<int64_t>::max();
};

/** Parses one reply of any type starting at `data[0]`, filling `info`. */
ParseResult parseReply(std::string_view data, ReplyInfo& info);

/** Appends `*N\r\n$len\r\narg\r\n...` for the given arguments. */
void appendCommand(std::string& out, std::initializer_list<std::string_view> args);
void appendCommand(std::string& out, const std::vector<std::string_view>& args);

/** Incremental writer of one command whose argument count is known up front. */
inline void appendArrayHeader(std::string& out, size_t n) {
  out.push_back('*');
  out.append(std::to_string(n));
  out.append("\r\n");
}
void appendBulk(std::string& out, std::string_view arg);
void appendBulkInt(std::string& out, int64_t value);

/** Case-insensitive ASCII comparison for command names and flags. */
bool iequals(std::string_view a, std::string_view b);

}  // namespace xdcr::resp
