#include "common/cluster_slot.h"

#include <array>
#include <string>

namespace xdcr::cluster {

namespace {

constexpr std::array<uint16_t, 256> makeTable() {
  std::array<uint16_t, 256> t{};
  for (int i = 0; i < 256; ++i) {
    uint16_t c = static_cast<uint16_t>(i << 8);
    for (int b = 0; b < 8; ++b)
      c = (c & 0x8000) ? static_cast<uint16_t>((c << 1) ^ 0x1021) : static_cast<uint16_t>(c << 1);
    t[static_cast<size_t>(i)] = c;
  }
  return t;
}
constexpr std::array<uint16_t, 256> kTable = makeTable();

struct TagTable {
  std::array<std::string, kSlots> tags;
  TagTable() {
    // "s0", "s1", ... until every slot has one (about 155,000 strings, a few ms).
    int left = kSlots;
    for (uint64_t n = 0; left > 0; ++n) {
      std::string t = "s" + std::to_string(n);
      std::string& slot = tags[static_cast<size_t>(keySlot(t))];
      if (slot.empty()) {
        slot = std::move(t);
        --left;
      }
    }
  }
};

}  // namespace

uint16_t crc16(std::string_view data) {
  uint16_t crc = 0;
  for (unsigned char ch : data) {
    crc = static_cast<uint16_t>((crc << 8) ^ kTable[((crc >> 8) ^ ch) & 0xff]);
  }
  return crc;
}

std::string_view hashTag(std::string_view key) {
  const size_t open = key.find('{');
  if (open == std::string_view::npos) return key;
  const size_t close = key.find('}', open + 1);
  if (close == std::string_view::npos || close == open + 1) return key;
  return key.substr(open + 1, close - open - 1);
}

std::string_view slotTag(int slot) {
  static const TagTable table;  // thread-safe initialisation
  return table.tags[static_cast<size_t>(slot) & (kSlots - 1)];
}

}  // namespace xdcr::cluster
