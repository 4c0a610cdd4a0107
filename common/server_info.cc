#include "common/server_info.h"

#include <charconv>

#include <fmt/format.h>

namespace xdcr {
/** The value of `field:` in INFO text, or empty. */
std::string_view infoField(std::string_view info, std::string_view field) {
  for (size_t at = 0; at < info.size();) {
    size_t end = info.find('\n', at);
    if (end == std::string_view::npos) end = info.size();
    std::string_view line = info.substr(at, end - at);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.size() > field.size() && line.substr(0, field.size()) == field &&
        line[field.size()] == ':') {
      return line.substr(field.size() + 1);
    }
    at = end + 1;
  }
  return {};
}

namespace {

bool parseVersion(std::string_view v, ServerInfo& out) {
  int parts[3] = {0, 0, 0};
  const char* p = v.data();
  const char* end = v.data() + v.size();
  for (int i = 0; i < 3; ++i) {
    auto [next, ec] = std::from_chars(p, end, parts[i]);
    if (ec != std::errc()) return false;
    p = next;
    if (i < 2) {
      if (p == end || *p != '.') return false;
      ++p;
    }
  }
  out.major = parts[0], out.minor = parts[1], out.patch = parts[2];
  return true;
}

}  // namespace

ServerInfo ServerInfo::parse(std::string_view info) {
  ServerInfo s;
  const std::string_view valkey = infoField(info, "valkey_version");
  if (!valkey.empty()) {
    s.valkey = true;
    s.known = parseVersion(valkey, s);
    return s;
  }
  s.valkey = infoField(info, "server_name") == "valkey";
  s.known = parseVersion(infoField(info, "redis_version"), s);
  return s;
}

std::string ServerInfo::describe() const {
  if (!known) return "an unknown server";
  return fmt::format("{} {}.{}.{}", valkey ? "Valkey" : "Redis", major, minor, patch);
}

bool ServerInfo::fieldTtls() const {
  if (!known) return true;
  return valkey ? atLeast(9, 0) : atLeast(7, 4);
}

bool ServerInfo::acceptsPayload(int version, bool valkey_types) const {
  if (!known) return true;
  if (valkey) {
    if (atLeast(9, 0)) return version <= 11 || (version == 80 && valkey_types);
    return version <= 11;
  }
  if (valkey_types && version > 11) return false;  // Valkey's own types above 21
  const int max = atLeast(8, 6)   ? 13
                  : atLeast(7, 4) ? 12
                  : atLeast(7, 2) ? 11
                  : atLeast(7, 0) ? 10
                                  : 9;
  return version <= max;
}

}  // namespace xdcr
