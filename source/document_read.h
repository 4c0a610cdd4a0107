#pragma once
// Reading whole documents back from the source, each at one known replication offset
// (expiry-semantics.md §12): target copies that ended before a later write reached them are
// restored from what this reads.
//
// One read is one transaction on the node the link streams from:
//
//   MULTI; [SELECT db]; DUMP k; PEXPIRETIME k; …; INFO replication; EXEC
//
// so every value belongs to exactly one offset X (INFO's master_repl_offset inside the same
// EXEC): every stream unit that ends at or before X is in the values, no later one is. DUMP of a
// key that has logically expired returns nil (the key is absent at X; a master also propagates
// its DEL, after X). The read changes nothing on the source (a read-only transaction is not
// propagated).

#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/resp_value.h"

namespace xdcr {
namespace net = boost::asio;
class RedisConnection;
}  // namespace xdcr

namespace xdcr::source {

/** One key as the source held it at the read's offset. */
struct SourceDocument {
  int db = 0;
  std::string key;
  bool exists = false;
  /** DUMP's payload: type byte, RDB value, RDB version (2 bytes LE), CRC64 (8 bytes LE). */
  std::string payload;
  int64_t deadline_ms = 0;  // PEXPIRETIME on the source's clock; 0 = none

  bool payloadWellFormed() const { return payload.size() >= 11; }
  uint8_t type() const { return static_cast<uint8_t>(payload[0]); }
  std::string_view value() const {
    return std::string_view(payload).substr(1, payload.size() - 11);
  }
  int rdbVersion() const {
    const size_t at = payload.size() - 10;
    return static_cast<uint8_t>(payload[at]) | (static_cast<uint8_t>(payload[at + 1]) << 8);
  }
};

using DocumentKey = std::pair<int, std::string>;  // (source db, key)

/** What one read brought back. */
struct DocumentRead {
  uint64_t offset = 0;  // X
  std::string replid;   // the history X belongs to (master_replid)
  std::vector<SourceDocument> docs;
  /** Keys the source would not give (DUMP refused, a malformed payload), each with why. */
  std::vector<std::pair<DocumentKey, std::string>> unreadable;
};

/** The commands of one read of `keys` (in that order; SELECT only where the db changes). */
std::vector<std::vector<std::string>> documentReadCommands(const std::vector<DocumentKey>& keys);

/**
 * The replies to documentReadCommands(keys), in order. An error when the transaction did not
 * run (EXECABORT: a command refused as it was queued, e.g. by the ACL) or INFO gave no offset;
 * a key whose DUMP alone failed is listed in `unreadable`. `label` names the source in messages.
 */
Result<DocumentRead> parseDocumentRead(const std::vector<DocumentKey>& keys,
                                       const std::vector<resp::Value>& replies,
                                       std::string_view label);

/** Sends one read on `conn` (connected to the node the link streams from) and parses it. */
net::awaitable<Result<DocumentRead>> readDocuments(RedisConnection& conn,
                                                   const std::vector<DocumentKey>& keys,
                                                   std::chrono::milliseconds timeout);

}  // namespace xdcr::source
