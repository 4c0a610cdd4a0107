#include "target/memcached_encoder.h"

#include <charconv>

#include "target/max_ttl.h"

namespace xdcr::target::mc {
namespace {

constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/** A byte memcached takes in a key as it is: printable ASCII, no space. */
bool plainKeyByte(unsigned char c) {
  return c > 0x20 && c < 0x7f;
}

void appendKey(std::string& out, const WireKey& key) {
  out.append(key.text);
}

void appendNumber(std::string& out, int64_t v) {
  char buf[24];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, p);
}

}  // namespace

std::string encodeBase64(std::string_view raw) {
  std::string out;
  out.reserve((raw.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < raw.size(); i += 3) {
    const uint32_t v = (uint32_t(uint8_t(raw[i])) << 16) | (uint32_t(uint8_t(raw[i + 1])) << 8) |
                       uint8_t(raw[i + 2]);
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(kAlphabet[(v >> 6) & 63]);
    out.push_back(kAlphabet[v & 63]);
  }
  if (i < raw.size()) {
    uint32_t v = uint32_t(uint8_t(raw[i])) << 16;
    if (i + 1 < raw.size()) v |= uint32_t(uint8_t(raw[i + 1])) << 8;
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(i + 1 < raw.size() ? kAlphabet[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

std::optional<std::string> decodeBase64(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  for (size_t i = 0; i < text.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int j = 0; j < 4; ++j) {
      const char c = text[i + j];
      if (c == '=' && i + 4 == text.size() && j >= 2) {
        v[j] = 0;
        ++pad;
        continue;
      }
      if (pad > 0) return std::nullopt;
      v[j] = val(c);
      if (v[j] < 0) return std::nullopt;
    }
    const uint32_t n =
        (uint32_t(v[0]) << 18) | (uint32_t(v[1]) << 12) | (uint32_t(v[2]) << 6) | uint32_t(v[3]);
    out.push_back(static_cast<char>((n >> 16) & 0xff));
    if (pad < 2) out.push_back(static_cast<char>((n >> 8) & 0xff));
    if (pad < 1) out.push_back(static_cast<char>(n & 0xff));
  }
  return out;
}

std::optional<WireKey> wireKey(std::string_view key) {
  bool plain = !key.empty();
  for (unsigned char c : key) plain = plain && plainKeyByte(c);
  WireKey w;
  if (plain) {
    if (key.size() > kMaxKeyLength) return std::nullopt;
    w.text.assign(key);
    return w;
  }
  // (an empty key too: memcached takes no empty key, its base64 is empty as well)
  if (key.empty() || (key.size() + 2) / 3 * 4 > kMaxKeyLength) return std::nullopt;
  w.text = encodeBase64(key);
  w.base64 = true;
  return w;
}

FinalDeadline finalDeadline(int64_t e_ms, int64_t compensation_ms, int64_t max_ttl_ms,
                            int64_t target_now_ms) {
  FinalDeadline f;
  const int64_t translated = e_ms == 0 ? 0 : e_ms + compensation_ms;
  f.ms = clampDeadline(translated, max_ttl_ms, target_now_ms);
  f.clamped = f.ms != translated;
  if (f.ms == 0) {
    f.kind = FinalDeadline::Kind::None;
  } else if (f.ms <= target_now_ms) {
    f.kind = FinalDeadline::Kind::Expired;
  } else if (exptimeOf(f.ms) > kMaxExptimeS) {
    f.kind = FinalDeadline::Kind::TooFar;
  } else {
    f.kind = FinalDeadline::Kind::At;
    f.exptime_s = exptimeOf(f.ms);
  }
  return f;
}

void appendSet(std::string& out, const WireKey& key, std::string_view value, int64_t exptime_s,
               uint32_t flags) {
  out.append("ms ");
  appendKey(out, key);
  out.push_back(' ');
  appendNumber(out, static_cast<int64_t>(value.size()));
  out.append(" T");
  appendNumber(out, exptime_s);
  if (flags != 0) {
    out.append(" F");
    appendNumber(out, flags);
  }
  if (key.base64) out.append(" b");
  out.append("\r\n");
  out.append(value);
  out.append("\r\n");
}

void appendTouch(std::string& out, const WireKey& key, int64_t exptime_s) {
  out.append("mg ");
  appendKey(out, key);
  out.append(" T");
  appendNumber(out, exptime_s);
  if (key.base64) out.append(" b");
  out.append("\r\n");
}

void appendDelete(std::string& out, const WireKey& key) {
  out.append("md ");
  appendKey(out, key);
  if (key.base64) out.append(" b");
  out.append("\r\n");
}

void appendGet(std::string& out, const WireKey& key) {
  out.append("mg ");
  appendKey(out, key);
  out.append(" v");
  if (key.base64) out.append(" b");
  out.append("\r\n");
}

std::optional<size_t> parseReply(std::string_view buf, Reply& out, std::string& error) {
  const size_t eol = buf.find("\r\n");
  if (eol == std::string_view::npos) {
    if (buf.size() > 8192) {
      error = "a reply line longer than 8192 bytes";
      return std::nullopt;
    }
    return size_t{0};
  }
  const std::string_view line = buf.substr(0, eol);
  const std::string_view word = line.substr(0, line.find(' '));
  const std::string_view rest =
      word.size() < line.size() ? line.substr(word.size() + 1) : std::string_view();
  out.text.assign(rest);
  out.value.clear();
  using K = Reply::Kind;
  if (word == "HD") {
    out.kind = K::Ok;
  } else if (word == "EN" || word == "NF") {
    out.kind = K::Miss;
  } else if (word == "NS") {
    out.kind = K::NotStored;
  } else if (word == "EX") {
    out.kind = K::Exists;
  } else if (word == "MN") {
    out.kind = K::Noop;
  } else if (word == "END") {
    out.kind = K::End;
  } else if (word == "STAT") {
    out.kind = K::Stat;
  } else if (word == "SERVER_ERROR") {
    out.kind = K::ServerError;
  } else if (word == "CLIENT_ERROR") {
    out.kind = K::ClientError;
  } else if (word == "ERROR") {
    out.kind = K::Error;
  } else if (word == "VA") {
    out.kind = K::Value;
    const std::string_view len_text = rest.substr(0, rest.find(' '));
    size_t len = 0;
    auto [p, ec] = std::from_chars(len_text.data(), len_text.data() + len_text.size(), len);
    if (ec != std::errc() || p != len_text.data() + len_text.size()) {
      error = "a VA reply without a length: \"" + std::string(line.substr(0, 80)) + "\"";
      return std::nullopt;
    }
    out.text.assign(len_text.size() < rest.size() ? rest.substr(len_text.size() + 1) : "");
    const size_t need = eol + 2 + len + 2;
    if (buf.size() < need) return size_t{0};
    if (buf.substr(eol + 2 + len, 2) != "\r\n") {
      error = "a VA reply's data does not end with CRLF";
      return std::nullopt;
    }
    out.value.assign(buf.substr(eol + 2, len));
    return need;
  } else {
    error = "an unexpected reply \"" + std::string(line.substr(0, 80)) + "\"";
    return std::nullopt;
  }
  return eol + 2;
}

std::optional<int64_t> flagValue(std::string_view flags, char flag) {
  size_t at = 0;
  while (at < flags.size()) {
    size_t end = flags.find(' ', at);
    if (end == std::string_view::npos) end = flags.size();
    const std::string_view token = flags.substr(at, end - at);
    if (!token.empty() && token[0] == flag) {
      int64_t v = 0;
      auto [p, ec] = std::from_chars(token.data() + 1, token.data() + token.size(), v);
      if (ec == std::errc() && p == token.data() + token.size()) return v;
      return std::nullopt;
    }
    at = end + 1;
  }
  return std::nullopt;
}

}  // namespace xdcr::target::mc
