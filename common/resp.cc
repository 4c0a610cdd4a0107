#include "common/resp.h"

#include <algorithm>
#include <charconv>
#include <cstring>

namespace xdcr::resp {
namespace {

/**
 * Reads a CRLF-terminated line starting at `pos`. Returns the position just past the CRLF, or
 * npos if the line is not complete yet. Sets `bad` when the line is over kMaxLineLength or has a
 * bare CR inside.
 */
size_t lineEnd(std::string_view data, size_t pos, bool& bad) {
  const size_t limit = std::min(data.size(), pos + kMaxLineLength);
  const void* lf = std::memchr(data.data() + pos, '\n', limit - pos);
  if (lf == nullptr) {
    bad = (limit - pos) >= kMaxLineLength;
    return std::string_view::npos;
  }
  size_t nl = static_cast<const char*>(lf) - data.data();
  if (nl == pos || data[nl - 1] != '\r') {
    bad = true;
    return std::string_view::npos;
  }
  return nl + 1;
}

/** Parses the integer between `begin` and the CR at `end - 2`. */
bool parseInt(std::string_view data, size_t begin, size_t end, int64_t& out) {
  const char* first = data.data() + begin;
  const char* last = data.data() + end - 2;
  if (first == last) return false;
  auto [ptr, ec] = std::from_chars(first, last, out);
  return ec == std::errc() && ptr == last;
}

ParseResult error(std::string message, size_t pos) {
  ParseResult r;
  r.status = ParseStatus::Error;
  r.error = std::move(message) + " at byte " + std::to_string(pos);
  return r;
}

ParseResult needMore(size_t need = 0) {
  ParseResult r;
  r.need = need;
  return r;
}

/** Recursive worker for parseReply. `pos` advances past the value when Complete. */
ParseResult parseValue(std::string_view data, size_t& pos, ReplyInfo& info, int depth, bool top,
                       ReplyInfo::Item* parent) {
  if (pos >= data.size()) return needMore();
  if (depth > kMaxNesting) return error("RESP reply nested too deeply", pos);
  bool bad = false;
  const char type = data[pos];
  size_t end = lineEnd(data, pos + 1, bad);
  if (end == std::string_view::npos) {
    return bad ? error("malformed RESP line", pos) : needMore();
  }
  std::string_view line = data.substr(pos + 1, end - pos - 3);
  // An element of the top-level array, when the caller collects them (ReplyInfo::items).
  const bool item = info.collect_items && depth == 1 && info.items.size() < ReplyInfo::kMaxItems;
  switch (type) {
    case '+':
      if (item) info.items.push_back({ReplyType::SimpleString, 0});
      if (top) {
        info.type = ReplyType::SimpleString;
        info.text.assign(line.substr(0, 256));
      } else if (info.collect && depth == 1 && info.elements.size() < 64) {
        info.elements.emplace_back(line.substr(0, 256));
      }
      pos = end;
      return ParseResult{ParseStatus::Complete, 0, 0, {}};
    case '-':
      if (item) info.items.push_back({ReplyType::Error, 0});
      if (top) info.type = ReplyType::Error;
      if (!info.has_error) info.text.assign(line.substr(0, 256));
      info.has_error = true;
      pos = end;
      return ParseResult{ParseStatus::Complete, 0, 0, {}};
    case ':': {
      int64_t v;
      if (!parseInt(data, pos + 1, end, v)) return error("bad RESP integer", pos);
      if (item) info.items.push_back({ReplyType::Integer, v});
      if (info.collect_items && depth == 1) info.least = std::min(info.least, v);
      if (parent != nullptr) parent->least = std::min(parent->least, v);
      if (top) {
        info.type = ReplyType::Integer;
        info.integer = v;
      }
      pos = end;
      return ParseResult{ParseStatus::Complete, 0, 0, {}};
    }
    case '$': {
      int64_t len;
      if (!parseInt(data, pos + 1, end, len) || len < -1 || len > kMaxBulkLength) {
        return error("bad RESP bulk length", pos);
      }
      if (len == -1) {
        if (item) info.items.push_back({ReplyType::Null, 0});
        if (top) info.type = ReplyType::Null;
        pos = end;
        return ParseResult{ParseStatus::Complete, 0, 0, {}};
      }
      size_t total = end + static_cast<size_t>(len) + 2;
      if (data.size() < total) return needMore(total);
      if (data[total - 2] != '\r' || data[total - 1] != '\n') {
        return error("RESP bulk string not terminated by CRLF", total - 2);
      }
      if (item) info.items.push_back({ReplyType::Bulk, 0});
      if (top) {
        info.type = ReplyType::Bulk;
        info.text.assign(data.substr(end, std::min<size_t>(len, 256)));
      } else if (info.collect && depth == 1 && info.elements.size() < 64) {
        info.elements.emplace_back(data.substr(end, std::min<size_t>(len, 256)));
      }
      pos = total;
      return ParseResult{ParseStatus::Complete, 0, 0, {}};
    }
    case '*': {
      int64_t n;
      if (!parseInt(data, pos + 1, end, n) || n < -1 || n > kMaxArrayLength) {
        return error("bad RESP array length", pos);
      }
      if (top) info.type = n == -1 ? ReplyType::Null : ReplyType::Array;
      if (item) info.items.push_back({n == -1 ? ReplyType::Null : ReplyType::Array, n});
      // Its integer elements lower the item's `least` (items are only added at depth 1, so the
      // pointer stays valid while its elements are parsed).
      ReplyInfo::Item* items_parent = item ? &info.items.back() : nullptr;
      size_t p = end;
      for (int64_t i = 0; i < n; ++i) {
        ParseResult r = parseValue(data, p, info, depth + 1, false, items_parent);
        if (r.status != ParseStatus::Complete) return r;
      }
      pos = p;
      return ParseResult{ParseStatus::Complete, 0, 0, {}};
    }
    default:
      return error(std::string("unexpected RESP type byte 0x") +
                       "0123456789abcdef"[(type >> 4) & 0xf] + "0123456789abcdef"[type & 0xf],
                   pos);
  }
}

}  // namespace

ParseResult parseCommand(std::string_view data, std::vector<ArgSpan>& args) {
  args.clear();
  if (data.empty()) return needMore();
  if (data[0] != '*') {
    return error("replication stream entry does not start with '*' (RESP array)", 0);
  }
  bool bad = false;
  size_t pos = lineEnd(data, 1, bad);
  if (pos == std::string_view::npos)
    return bad ? error("malformed RESP array header", 0) : needMore();
  int64_t n;
  if (!parseInt(data, 1, pos, n) || n < 1 || n > kMaxArrayLength) {
    return error("bad RESP array length in replication stream", 0);
  }
  for (int64_t i = 0; i < n; ++i) {
    if (pos >= data.size()) return needMore();
    if (data[pos] != '$') return error("command argument is not a RESP bulk string", pos);
    size_t start = pos;
    size_t end = lineEnd(data, pos + 1, bad);
    if (end == std::string_view::npos) {
      return bad ? error("malformed RESP bulk header", start) : needMore();
    }
    int64_t len;
    if (!parseInt(data, start + 1, end, len) || len < 0 || len > kMaxBulkLength) {
      return error("bad RESP bulk length in replication stream", start);
    }
    size_t total = end + static_cast<size_t>(len) + 2;
    if (data.size() < total) return needMore(total);
    if (data[total - 2] != '\r' || data[total - 1] != '\n') {
      return error("RESP bulk string not terminated by CRLF", total - 2);
    }
    args.push_back(ArgSpan{end, static_cast<size_t>(len)});
    pos = total;
  }
  ParseResult r;
  r.status = ParseStatus::Complete;
  r.consumed = pos;
  return r;
}

ParseResult parseReply(std::string_view data, ReplyInfo& info) {
  info.has_error = false;
  info.text.clear();
  info.integer = 0;
  info.elements.clear();
  info.items.clear();
  info.least = std::numeric_limits<int64_t>::max();
  size_t pos = 0;
  ParseResult r = parseValue(data, pos, info, 0, true, nullptr);
  if (r.status == ParseStatus::Complete) r.consumed = pos;
  return r;
}

void appendBulk(std::string& out, std::string_view arg) {
  char header[24];
  header[0] = '$';
  auto [p, ec] = std::to_chars(header + 1, header + sizeof header, arg.size());
  out.append(header, p);
  out.append("\r\n", 2);
  out.append(arg);
  out.append("\r\n", 2);
}

void appendBulkInt(std::string& out, int64_t value) {
  char digits[24];
  auto [p, ec] = std::to_chars(digits, digits + sizeof digits, value);
  appendBulk(out, std::string_view(digits, p - digits));
}

void appendCommand(std::string& out, std::initializer_list<std::string_view> args) {
  appendArrayHeader(out, args.size());
  for (auto a : args) appendBulk(out, a);
}

void appendCommand(std::string& out, const std::vector<std::string_view>& args) {
  appendArrayHeader(out, args.size());
  for (auto a : args) appendBulk(out, a);
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x + 32);
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y + 32);
    if (x != y) return false;
  }
  return true;
}

}  // namespace xdcr::resp
