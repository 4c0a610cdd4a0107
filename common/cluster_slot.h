#pragma once
// Redis Cluster's key -> slot function (CRC16/XMODEM of the key, or of its hash tag, mod 16384),
// and one short hash tag per slot, so the agent can place its own bookkeeping keys (markers,
// replay stamps) in a chosen slot: `__xdcr_marker__:p:applied:{<slotTag(s)>}` hashes to slot s.

#include <cstdint>
#include <string_view>

namespace xdcr::cluster {

inline constexpr int kSlots = 16384;

/** CRC16/XMODEM (poly 0x1021, init 0), as Redis's crc16.c. */
uint16_t crc16(std::string_view data);

/** The hash tag of `key`: the part between the first `{` and the next `}` when not empty. */
std::string_view hashTag(std::string_view key);

/** The slot of `key` (cluster.c keyHashSlot). */
inline int keySlot(std::string_view key) {
  return crc16(hashTag(key)) & (kSlots - 1);
}

/** A short string (no braces) whose slot is `slot`; computed once, on first use. */
std::string_view slotTag(int slot);

}  // namespace xdcr::cluster
