#include "common/resp_value.h"

#include <fmt/format.h>

#include <charconv>

namespace xdcr::resp {
namespace {

// Decodes a reply already validated by parseReply(): positions and lengths are known good, so
// this only walks and copies.
size_t decode(std::string_view d, size_t pos, Value& v) {
  const char kind = d[pos];
  const size_t eol = d.find("\r\n", pos);
  const std::string_view line = d.substr(pos + 1, eol - pos - 1);
  size_t next = eol + 2;
  int64_t n = 0;
  switch (kind) {
    case '+':
      v.type = ReplyType::SimpleString;
      v.str.assign(line);
      return next;
    case '-':
      v.type = ReplyType::Error;
      v.str.assign(line);
      return next;
    case ':':
      v.type = ReplyType::Integer;
      std::from_chars(line.data(), line.data() + line.size(), v.integer);
      return next;
    case '$':
      std::from_chars(line.data(), line.data() + line.size(), n);
      if (n < 0) {
        v.type = ReplyType::Null;
        return next;
      }
      v.type = ReplyType::Bulk;
      v.str.assign(d.substr(next, static_cast<size_t>(n)));
      return next + static_cast<size_t>(n) + 2;
    default:  // '*'
      std::from_chars(line.data(), line.data() + line.size(), n);
      if (n < 0) {
        v.type = ReplyType::Null;
        return next;
      }
      v.type = ReplyType::Array;
      v.elements.resize(static_cast<size_t>(n));
      for (auto& e : v.elements) next = decode(d, next, e);
      return next;
  }
}

}  // namespace

ParseResult parseValue(std::string_view data, Value& out) {
  ReplyInfo info;
  ParseResult r = parseReply(data, info);
  if (r.status != ParseStatus::Complete) return r;
  out = Value{};
  decode(data.substr(0, r.consumed), 0, out);
  return r;
}

std::string Value::describe() const {
  switch (type) {
    case ReplyType::SimpleString:
      return str;
    case ReplyType::Error:
      return "(error) " + str;
    case ReplyType::Integer:
      return fmt::format("(integer) {}", integer);
    case ReplyType::Null:
      return "(nil)";
    case ReplyType::Bulk:
      return str.size() <= 60 ? fmt::format("\"{}\"", str)
                              : fmt::format("\"{}…\" ({} bytes)", str.substr(0, 60), str.size());
    case ReplyType::Array:
      return fmt::format("[{} elements]", elements.size());
  }
  return "?";
}

}  // namespace xdcr::resp
