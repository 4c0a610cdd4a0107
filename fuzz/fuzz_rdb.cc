// Fuzz target: the RDB walker (source/rdb.h: rdb::Walker), the full sync's reader of the
// source's snapshot. The input is an RDB file as the source would send it.
//
// Properties checked (beyond "no crash, no ASan/UBSan report"):
//  R1 fed in chunks of input-chosen sizes, retried the way source/redis_shard_source.cc does
//     (when `need` bytes are there or the buffer has doubled), the walker yields exactly the
//     items, offsets and final status (end, error text, or waiting for bytes) of the walker fed
//     the whole input at once;
//  R2 it never reads past what it was given: the buffered bytes end where a heap block ends, so
//     a read past them is an ASan report;
//  R3 an item consumes at least one byte and at most what was given; its key, value and aux
//     views lie inside the consumed bytes (or in the walker's own storage for decoded strings);
//     offset() is the sum of the items' sizes;
//  R4 NeedMore's `need` is a lower bound: more than was given, and the walker still says
//     NeedMore when given need - 1 bytes of the real input;
//  R5 memory stays proportional to the input: no single allocation made by the walker is larger
//     than 4 KiB + 100 x the input (LZF expands at most 88 x), whatever lengths the bytes declare;
//  R6 after EOF: done(), nothing more is accepted.

#include <sanitizer/allocator_interface.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "source/rdb.h"

namespace {

using namespace xdcr::source::rdb;
namespace fuzz = xdcr::fuzz;

// ---- R5: the largest single allocation while the walker runs ----

volatile bool g_armed = false;
volatile size_t g_largest = 0;

void onMalloc(const volatile void*, size_t size) {
  if (g_armed && size > g_largest) g_largest = size;
}
void onFree(const volatile void*) {}

/** Calls walker.next() with allocation tracking on. */
Result walk(Walker& walker, std::string_view data, Item& item) {
  g_armed = true;
  Result r = walker.next(data, item);
  g_armed = false;
  return r;
}

// ---- the observable sequence of items ----

struct Seen {
  std::vector<std::string> items;  // one line per item, everything it reported
  std::string end;                 // "eof", "error: ...", or "needmore"
  uint64_t consumed = 0;
  int version = 0;
};

bool inside(std::string_view view, std::string_view data, size_t consumed) {
  if (view.empty()) return true;
  const char* b = data.data();
  return view.data() >= b && view.data() + view.size() <= b + consumed;
}

/** Checks one item (R3) and renders it. */
std::string describe(const Item& item, std::string_view data, size_t consumed, int version) {
  std::string s = std::to_string(static_cast<int>(item.kind)) + " db=" + std::to_string(item.db);
  switch (item.kind) {
    case ItemKind::Header:
      FUZZ_CHECK(version >= 1 && version <= 12);
      s += " v" + std::to_string(version);
      break;
    case ItemKind::Aux:
      s += " " + std::string(item.aux_key) + "=" + std::string(item.aux_value);
      break;
    case ItemKind::SelectDb:
      FUZZ_CHECK(item.db >= 0);
      break;
    case ItemKind::ResizeDb:
      s += " " + std::to_string(item.db_size) + "/" + std::to_string(item.expires_size);
      break;
    case ItemKind::Key:
      FUZZ_CHECK(inside(item.value, data, consumed), "value view outside the item");
      FUZZ_CHECK(!item.value.empty() || item.type == 7, "a value has bytes");
      FUZZ_CHECK(item.expire_ms >= 0 && item.idle_s >= -1 && item.freq >= -1 && item.freq < 256);
      s += " t" + std::to_string(item.type) + " k=" + std::string(item.key) +
           " v=" + std::string(item.value) + " e=" + std::to_string(item.expire_ms) +
           " i=" + std::to_string(item.idle_s) + " f=" + std::to_string(item.freq);
      break;
    case ItemKind::Function:
    case ItemKind::ModuleAux:
    case ItemKind::Eof:
      break;
  }
  return s + " #" + std::to_string(consumed);
}

/** Everything at once: `data` is libFuzzer's own exactly sized buffer. */
Seen walkWhole(std::string_view data) {
  Seen seen;
  Walker walker;
  size_t pos = 0;
  for (int guard = 0; guard < 1 << 20; ++guard) {
    std::string_view rest = data.substr(pos);
    Item item;
    Result r = walk(walker, rest, item);
    if (r.status == Status::NeedMore) {
      FUZZ_CHECK(r.need == 0 || r.need > rest.size(),
                 "need " + std::to_string(r.need) + " with " + std::to_string(rest.size()));
      FUZZ_CHECK(!walker.done() || rest.empty());
      seen.end = walker.done() ? "eof" : "needmore";
      break;
    }
    if (r.status == Status::Error) {
      FUZZ_CHECK(!r.error.empty());
      seen.end = "error: " + r.error;
      break;
    }
    FUZZ_CHECK(r.consumed > 0 && r.consumed <= rest.size(),
               "consumed " + std::to_string(r.consumed) + " of " + std::to_string(rest.size()));
    seen.items.push_back(describe(item, rest, r.consumed, walker.version()));
    pos += r.consumed;
    FUZZ_CHECK(walker.offset() == pos);
    if (item.kind == ItemKind::Eof) FUZZ_CHECK(walker.done());
  }
  seen.consumed = pos;
  seen.version = walker.version();
  if (walker.done()) {  // R6
    Item item;
    FUZZ_CHECK(walk(walker, std::string_view(), item).status == Status::NeedMore);
    if (pos < data.size()) {
      FUZZ_CHECK(seen.end.rfind("error: ", 0) == 0, "bytes after EOF are an error");
    }
  }
  return seen;
}

/** In chunks, retried like SnapshotLoader::data(). */
Seen walkChunked(std::string_view data, fuzz::Rng& rng) {
  Seen seen;
  Walker walker;
  std::string buf;
  size_t fed = 0, pos = 0, retry_at = 0;
  // The walker sees the buffered bytes copied to the very end of this heap block: reading past
  // them is reading past the block, an ASan report.
  std::unique_ptr<char[]> block(new char[data.size() + 1]);
  char* const block_end = block.get() + data.size() + 1;
  for (int guard = 0; guard < 1 << 20; ++guard) {
    size_t n = rng.chunk(data.size() - fed);
    buf.append(data.substr(fed, n));
    fed += n;
    const bool last = fed == data.size();
    while (!buf.empty() || (last && !walker.done())) {
      if (!last && buf.size() < retry_at) break;
      std::memcpy(block_end - buf.size(), buf.data(), buf.size());
      std::string_view view(block_end - buf.size(), buf.size());
      Item item;
      Walker before = walker;
      Result r = walk(walker, view, item);
      if (r.status == Status::NeedMore) {
        FUZZ_CHECK(r.need == 0 || r.need > view.size());
        // R4: with need - 1 bytes of the real input, still not enough.
        if (r.need > 1 && pos + r.need - 1 <= data.size()) {
          Walker probe = before;
          Item ignored;
          Result again = walk(probe, data.substr(pos, r.need - 1), ignored);
          FUZZ_CHECK(again.status == Status::NeedMore, "need " + std::to_string(r.need) +
                                                           " is not a lower bound at offset " +
                                                           std::to_string(pos));
        }
        if (last) {
          seen.end = walker.done() ? "eof" : "needmore";
          seen.consumed = pos;
          seen.version = walker.version();
          return seen;
        }
        retry_at = std::max<size_t>(r.need, buf.size() * 2);
        break;
      }
      if (r.status == Status::Error) {
        seen.end = "error: " + r.error;
        seen.consumed = pos;
        seen.version = walker.version();
        return seen;
      }
      retry_at = 0;
      FUZZ_CHECK(r.consumed > 0 && r.consumed <= view.size());
      seen.items.push_back(describe(item, view, r.consumed, walker.version()));
      pos += r.consumed;
      buf.erase(0, r.consumed);
      FUZZ_CHECK(walker.offset() == pos);
    }
    if (last) break;
  }
  seen.end = walker.done() ? "eof" : "needmore";
  seen.consumed = pos;
  seen.version = walker.version();
  return seen;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  __sanitizer_install_malloc_and_free_hooks(onMalloc, onFree);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* bytes, size_t size) {
  std::string_view data(reinterpret_cast<const char*>(bytes), size);
  fuzz::Rng rng(fuzz::hashBytes(data));

  g_largest = 0;
  Seen whole = walkWhole(data);
  const size_t limit = 4096 + 100 * size;  // R5
  FUZZ_CHECK(g_largest <= limit, "the walker allocated " + std::to_string(g_largest) +
                                     " bytes at once for a " + std::to_string(size) +
                                     "-byte input");

  Seen chunked = walkChunked(data, rng);  // R1
  FUZZ_CHECK(chunked.items.size() == whole.items.size(),
             std::to_string(chunked.items.size()) + " items in chunks vs " +
                 std::to_string(whole.items.size()) + " whole (" + chunked.end + " / " + whole.end +
                 ")");
  for (size_t i = 0; i < whole.items.size(); ++i) {
    FUZZ_CHECK(chunked.items[i] == whole.items[i], "item " + std::to_string(i) + ": " +
                                                       chunked.items[i].substr(0, 200) + " vs " +
                                                       whole.items[i].substr(0, 200));
  }
  FUZZ_CHECK(chunked.end == whole.end, chunked.end + " vs " + whole.end);
  FUZZ_CHECK(chunked.consumed == whole.consumed);
  FUZZ_CHECK(chunked.version == whole.version);
  return 0;
}
