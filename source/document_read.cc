#include "source/document_read.h"

#include <charconv>

#include <fmt/format.h>

#include "common/redis_conn.h"
#include "common/server_info.h"

namespace xdcr::source {

std::vector<std::vector<std::string>> documentReadCommands(const std::vector<DocumentKey>& keys) {
  std::vector<std::vector<std::string>> cmds;
  cmds.reserve(keys.size() * 2 + 4);
  cmds.push_back({"MULTI"});
  int db = -1;
  for (const auto& [d, key] : keys) {
    if (d != db) {
      cmds.push_back({"SELECT", std::to_string(d)});
      db = d;
    }
    cmds.push_back({"DUMP", key});
    cmds.push_back({"PEXPIRETIME", key});
  }
  cmds.push_back({"INFO", "replication"});
  cmds.push_back({"EXEC"});
  return cmds;
}

Result<DocumentRead> parseDocumentRead(const std::vector<DocumentKey>& keys,
                                       const std::vector<resp::Value>& replies,
                                       std::string_view label) {
  const size_t expected = documentReadCommands(keys).size();
  if (replies.size() != expected) {
    return fail(Error::protocol(fmt::format("{}: a document read got {} replies for {} commands",
                                            label, replies.size(), expected)));
  }
  const resp::Value& exec = replies.back();
  if (exec.type != resp::ReplyType::Array) {
    // EXECABORT: a command was refused as it was queued. Its own reply says which and why.
    std::string why = exec.isError() ? exec.str : exec.describe();
    for (size_t i = 1; i + 1 < replies.size(); ++i) {
      if (replies[i].isError()) {
        why = replies[i].str;
        break;
      }
    }
    return fail(Error::refused(fmt::format(
        "{}: the source refused to read keys back ({}); the agent's source user needs +multi "
        "+exec +select +dump +pexpiretime +info (and a Redis 7.0 or newer source)",
        label, why)));
  }
  const std::vector<resp::Value>& items = exec.elements;
  if (items.size() != expected - 2) {
    return fail(Error::protocol(fmt::format("{}: a document read's EXEC gave {} replies for {}",
                                            label, items.size(), expected - 2)));
  }
  DocumentRead out;
  const resp::Value& info = items.back();
  if (info.isError()) {
    return fail(Error::refused(fmt::format(
        "{}: the source refused INFO replication ({}) in a document read; grant its user +info",
        label, info.str)));
  }
  const std::string_view offset = infoField(info.str, "master_repl_offset");
  uint64_t x = 0;
  auto [p, ec] = std::from_chars(offset.data(), offset.data() + offset.size(), x);
  if (offset.empty() || ec != std::errc() || p != offset.data() + offset.size()) {
    return fail(Error::protocol(
        fmt::format("{}: INFO replication in a document read has no master_repl_offset", label)));
  }
  out.offset = x;
  out.replid = std::string(infoField(info.str, "master_replid"));
  size_t at = 0;
  int db = -1;
  for (const auto& [d, key] : keys) {
    if (d != db) {
      if (items[at].isError()) {
        return fail(Error::refused(
            fmt::format("{}: SELECT {} refused in a document read: {}", label, d, items[at].str)));
      }
      ++at;
      db = d;
    }
    const resp::Value& dump = items[at++];
    const resp::Value& ttl = items[at++];
    if (dump.isError() || ttl.isError()) {
      out.unreadable.push_back({{d, key}, dump.isError() ? dump.str : ttl.str});
      continue;
    }
    SourceDocument doc;
    doc.db = d;
    doc.key = key;
    doc.exists = dump.type == resp::ReplyType::Bulk;
    if (doc.exists) {
      doc.payload = dump.str;
      if (!doc.payloadWellFormed()) {
        out.unreadable.push_back(
            {{d, key}, fmt::format("DUMP gave {} bytes, not a payload", doc.payload.size())});
        continue;
      }
      if (ttl.type != resp::ReplyType::Integer || ttl.integer == -2) {
        // Cannot be: DUMP found the key in the same transaction.
        out.unreadable.push_back({{d, key}, "PEXPIRETIME found no key where DUMP found one"});
        continue;
      }
      doc.deadline_ms = ttl.integer > 0 ? ttl.integer : 0;
    }
    out.docs.push_back(std::move(doc));
  }
  return out;
}

net::awaitable<Result<DocumentRead>> readDocuments(RedisConnection& conn,
                                                   const std::vector<DocumentKey>& keys,
                                                   std::chrono::milliseconds timeout) {
  const auto commands = documentReadCommands(keys);
  auto r = co_await conn.callMany(commands, timeout);
  if (!r) co_return fail(r.error());
  co_return parseDocumentRead(keys, *r, conn.label());
}

}  // namespace xdcr::source
