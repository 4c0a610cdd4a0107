#pragma once
// The last target copies a pipeline restored (expiry-semantics.md §12): which key, why, when its
// copy was found gone and when the document read back was written. Kept in memory, bounded, for
// `xdcr-agent explain KEY` (through GET /pipelines/NAME/restores) to name the cause of a key's
// history; not persisted. Lives beside the pipeline's counters (common/stats.h), on its thread.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>

namespace xdcr {

struct RestoredCopyNote {
  int db = 0;  // the source db and key
  std::string key;
  std::string_view reason;       // the xdcr_target_copies_restored_total reason label
  int64_t copy_deadline_ms = 0;  // the copy's deadline on the target's clock (0: not known)
  uint64_t write_offset = 0;     // the end of the unit whose write found the copy gone
  int64_t found_at_ms = 0;       // when that write's reply came (target clock; 0: not known)
  uint64_t read_offset = 0;      // X: the document holds the stream up to here
  int64_t restored_at_ms = 0;    // when the document was sent to the target (target clock)
  bool source_had_it = true;     // false: the source no longer had the key at X (deleted)
};

class RestoreJournal {
 public:
  static constexpr size_t kCapacity = 1024;
  void add(RestoredCopyNote note) {
    if (notes_.size() == kCapacity) notes_.pop_front();
    notes_.push_back(std::move(note));
    ++total_;
  }
  /** Oldest first. */
  const std::deque<RestoredCopyNote>& notes() const { return notes_; }
  /** Every restore ever added (notes() holds the last kCapacity of them). */
  uint64_t total() const { return total_; }

 private:
  std::deque<RestoredCopyNote> notes_;
  uint64_t total_ = 0;
};

/** A key as printable ASCII for JSON and logs: bytes outside 0x20..0x7e (and the backslash)
 *  as \xHH. Two keys are equal exactly when their forms are. */
inline std::string printableKey(std::string_view key) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(key.size());
  for (unsigned char c : key) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 0xf]);
    }
  }
  return out;
}

}  // namespace xdcr
