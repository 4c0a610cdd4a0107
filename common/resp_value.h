#pragma once
// A whole RESP2 reply as a tree, for tools that need every element of a value (`xdcr-agent
// verify` compares hashes, lists, sets, sorted sets and streams). The replication fast path
// never builds these: it uses resp.h's non-allocating parsers.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/resp.h"

namespace xdcr::resp {

struct Value {
  ReplyType type = ReplyType::Null;
  std::string str;  // SimpleString, Error, Bulk
  int64_t integer = 0;
  std::vector<Value> elements;  // Array

  bool isError() const { return type == ReplyType::Error; }
  bool isNull() const { return type == ReplyType::Null; }
  /** A short rendering for messages: "\"abc\"", "(integer) 3", "[3 elements]", "(error) ERR …". */
  std::string describe() const;
  bool operator==(const Value&) const = default;
};

/**
 * Parses one reply starting at data[0] into `out`. Same limits and statuses as parseReply();
 * on Complete, `consumed` is the reply's size.
 */
ParseResult parseValue(std::string_view data, Value& out);

}  // namespace xdcr::resp
