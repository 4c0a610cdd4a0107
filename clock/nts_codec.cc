// Wire codecs of NTS (RFC 8915): NTS-KE records and the NTP extension fields. No I/O.

#include <fmt/format.h>

#include <algorithm>

#include "clock/nts.h"

namespace xdcr::clock {
namespace {

// Anything bigger is not an NTS-KE response: chrony's is ~900 bytes (8 cookies of 100 bytes).
constexpr size_t kMaxKeResponse = 64 * 1024;
// A cookie must fit, several times, into one UDP request (RFC 8915 §6: servers keep them small).
constexpr size_t kMaxCookieLength = 1024;

void put16(NtsBytes& b, uint16_t v) {
  b.push_back(static_cast<uint8_t>(v >> 8));
  b.push_back(static_cast<uint8_t>(v));
}

uint16_t get16(const uint8_t* p) {
  return static_cast<uint16_t>((p[0] << 8) | p[1]);
}

size_t pad4(size_t n) {
  return (n + 3) & ~size_t{3};
}

const char* keErrorName(uint16_t code) {
  switch (code) {
    case 0:
      return "unrecognized critical record";
    case 1:
      return "bad request";
    case 2:
      return "internal server error";
  }
  return "unknown error code";
}

tl::unexpected<Error> keProtocol(std::string m) {
  return fail(Error::protocol("NTS-KE response: " + std::move(m)));
}

}  // namespace

void appendNtsKeRecord(NtsBytes& out, bool critical, uint16_t type, ByteSpan body) {
  put16(out, static_cast<uint16_t>((critical ? kNtsKeCritical : 0) | (type & 0x7fff)));
  put16(out, static_cast<uint16_t>(body.size()));
  out.insert(out.end(), body.begin(), body.end());
}

NtsBytes makeNtsKeRequest() {
  NtsBytes req;
  const uint8_t protocol[] = {0, kNtsProtocolNtpV4};
  const uint8_t aead[] = {0, kAeadAesSivCmac256};
  // Next Protocol and End of Message must be critical (RFC 8915 §4.1.1, §4.1.2); AEAD may be.
  appendNtsKeRecord(req, true, static_cast<uint16_t>(NtsKeRecordType::NextProtocol), protocol);
  appendNtsKeRecord(req, true, static_cast<uint16_t>(NtsKeRecordType::AeadAlgorithm), aead);
  appendNtsKeRecord(req, true, static_cast<uint16_t>(NtsKeRecordType::EndOfMessage), {});
  return req;
}

Result<std::optional<NtsKeResponse>> parseNtsKeResponse(ByteSpan data) {
  NtsKeResponse r;
  bool protocol_ok = false;
  bool aead_ok = false;
  size_t pos = 0;
  for (;;) {
    if (data.size() - pos < 4) {
      break;  // the next record header has not fully arrived
    }
    const uint16_t raw_type = get16(&data[pos]);
    const bool critical = (raw_type & kNtsKeCritical) != 0;
    const uint16_t type = raw_type & 0x7fff;
    const size_t len = get16(&data[pos + 2]);
    if (data.size() - pos - 4 < len) {
      break;  // its body has not fully arrived
    }
    ByteSpan body = data.subspan(pos + 4, len);
    pos += 4 + len;
    switch (static_cast<NtsKeRecordType>(type)) {
      case NtsKeRecordType::EndOfMessage: {
        if (pos != data.size()) {
          return keProtocol(fmt::format("{} bytes after End of Message", data.size() - pos));
        }
        if (!protocol_ok) {
          return keProtocol("no Next Protocol record: the server did not agree to NTPv4");
        }
        if (!aead_ok) {
          return keProtocol(
              "no AEAD Algorithm record: the server did not agree to "
              "AEAD_AES_SIV_CMAC_256");
        }
        if (r.cookies.empty()) {
          return keProtocol("no cookies: the server gave us nothing to send NTP requests with");
        }
        return std::optional<NtsKeResponse>(std::move(r));
      }
      case NtsKeRecordType::NextProtocol:
        // The server answers with the one protocol it picked from our list (we offered one).
        if (len == 0) {
          return keProtocol("the server supports none of the offered protocols (NTPv4)");
        }
        if (len != 2 || get16(body.data()) != kNtsProtocolNtpV4) {
          return keProtocol(fmt::format(
              "Next Protocol record of {} bytes{}: expected NTPv4 (0) only", len,
              len >= 2 ? fmt::format(" starting with protocol {}", get16(body.data())) : ""));
        }
        protocol_ok = true;
        break;
      case NtsKeRecordType::Error: {
        const uint16_t code = len >= 2 ? get16(body.data()) : 0xffff;
        return fail(Error::refused(
            fmt::format("NTS-KE server sent Error record: code {} ({})", code,
                        len >= 2 ? keErrorName(code) : "record too short to hold a code")));
      }
      case NtsKeRecordType::Warning:
        if (len >= 2) {
          r.warnings.push_back(get16(body.data()));
        }
        break;
      case NtsKeRecordType::AeadAlgorithm:
        if (len != 2 || get16(body.data()) != kAeadAesSivCmac256) {
          return keProtocol(fmt::format(
              "AEAD Algorithm record of {} bytes{}: expected AEAD_AES_SIV_CMAC_256 (15), the only "
              "one this client implements",
              len, len >= 2 ? fmt::format(" naming algorithm {}", get16(body.data())) : ""));
        }
        aead_ok = true;
        break;
      case NtsKeRecordType::NewCookie:
        if (len == 0 || len > kMaxCookieLength) {
          return keProtocol(
              fmt::format("cookie of {} bytes (expected 1 to {})", len, kMaxCookieLength));
        }
        if (r.cookies.size() < kNtsMaxCookies) {
          r.cookies.emplace_back(body.begin(), body.end());
        }
        break;
      case NtsKeRecordType::Server: {
        std::string host(body.begin(), body.end());
        const bool printable =
            std::all_of(host.begin(), host.end(), [](char c) { return c > 0x20 && c < 0x7f; });
        if (host.empty() || !printable) {
          return keProtocol("Server record is empty or not a printable host name");
        }
        r.ntp_server = std::move(host);
        break;
      }
      case NtsKeRecordType::Port:
        if (len != 2 || get16(body.data()) == 0) {
          return keProtocol(fmt::format("Port record of {} bytes is not a port number", len));
        }
        r.ntp_port = get16(body.data());
        break;
      default:
        if (critical) {
          return keProtocol(fmt::format(
              "unknown critical record type {}: the server requires something this client does "
              "not implement",
              type));
        }
        break;  // unknown and not critical: ignore (RFC 8915 §4)
    }
  }
  if (data.size() > kMaxKeResponse) {
    return keProtocol(fmt::format("over {} bytes without End of Message", kMaxKeResponse));
  }
  return std::optional<NtsKeResponse>();
}

std::array<uint8_t, 5> ntsExporterContext(bool server_to_client) {
  return {0, kNtsProtocolNtpV4, 0, kAeadAesSivCmac256,
          static_cast<uint8_t>(server_to_client ? 1 : 0)};
}

void appendExtensionField(NtsBytes& packet, uint16_t type, ByteSpan body, size_t min_length) {
  const size_t total = std::max(pad4(4 + body.size()), pad4(min_length));
  put16(packet, type);
  put16(packet, static_cast<uint16_t>(total));
  packet.insert(packet.end(), body.begin(), body.end());
  packet.resize(packet.size() + (total - 4 - body.size()), 0);
}

Result<std::vector<NtsExtensionField>> parseExtensionFields(ByteSpan data, size_t offset) {
  std::vector<NtsExtensionField> out;
  size_t pos = offset;
  while (pos < data.size()) {
    if (data.size() - pos < 4) {
      return fail(Error::protocol(
          fmt::format("truncated extension field at byte {}: {} bytes left, a header needs 4", pos,
                      data.size() - pos)));
    }
    const uint16_t type = get16(&data[pos]);
    const size_t len = get16(&data[pos + 2]);
    if (len < 4 || len % 4 != 0) {
      return fail(Error::protocol(fmt::format(
          "extension field {:#06x} at byte {} has length {}: not a multiple of 4 of at least 4",
          type, pos, len)));
    }
    if (len > data.size() - pos) {
      return fail(Error::protocol(
          fmt::format("truncated extension field {:#06x} at byte {}: length {} but {} bytes left",
                      type, pos, len, data.size() - pos)));
    }
    out.push_back(NtsExtensionField{type, pos, len, data.subspan(pos + 4, len - 4)});
    pos += len;
  }
  return out;
}

Status appendNtsAuthenticator(NtsBytes& packet, ByteSpan key, ByteSpan nonce, ByteSpan plaintext) {
  auto sealed = aesSivSeal(key, {ByteSpan(packet), nonce}, plaintext);
  if (!sealed) {
    return fail(sealed.error());
  }
  // Body: nonce length, ciphertext length, nonce and ciphertext each padded to 4 bytes.
  NtsBytes body;
  put16(body, static_cast<uint16_t>(nonce.size()));
  put16(body, static_cast<uint16_t>(sealed->size()));
  body.insert(body.end(), nonce.begin(), nonce.end());
  body.resize(4 + pad4(nonce.size()), 0);
  body.insert(body.end(), sealed->begin(), sealed->end());
  // RFC 7822 §7.5: without a MAC the last EF is at least 28 bytes.
  appendExtensionField(packet, kEfNtsAuthenticator, body, 28);
  return {};
}

Result<NtsBytes> buildNtsRequest(const NtsRequestIds& ids, ByteSpan cookie, int extra_placeholders,
                                 ByteSpan c2s_key) {
  if (cookie.empty()) {
    return fail(Error::protocol("NTS request without a cookie"));
  }
  const NtpBytes header = encodePacket(makeClientRequest(ids.transmit_cookie));
  NtsBytes packet(header.begin(), header.end());
  appendExtensionField(packet, kEfUniqueIdentifier, ids.uid);
  appendExtensionField(packet, kEfNtsCookie, cookie);
  // A placeholder is as long as a cookie (RFC 8915 §5.5) so that the reply, which carries one
  // cookie per placeholder, is no bigger than the request: no amplification.
  const NtsBytes zeros(cookie.size(), 0);
  for (int i = 0; i < extra_placeholders; ++i) {
    appendExtensionField(packet, kEfNtsCookiePlaceholder, zeros);
  }
  NtsBytes plaintext;
  appendExtensionField(plaintext, kEfNtsCookiePlaceholder, zeros);
  if (auto st = appendNtsAuthenticator(packet, c2s_key, ids.nonce, plaintext); !st) {
    return fail(st.error());
  }
  return packet;
}

bool ntsReplyEchoesUid(ByteSpan reply, ByteSpan uid) {
  if (reply.size() < kNtpPacketSize) {
    return false;
  }
  auto efs = parseExtensionFields(reply, kNtpPacketSize);
  if (!efs) {
    return false;
  }
  return std::any_of(efs->begin(), efs->end(), [&](const NtsExtensionField& ef) {
    return ef.type == kEfUniqueIdentifier && ef.body.size() >= uid.size() &&
           std::equal(uid.begin(), uid.end(), ef.body.begin()) &&
           std::all_of(ef.body.begin() + static_cast<ptrdiff_t>(uid.size()), ef.body.end(),
                       [](uint8_t b) { return b == 0; });
  });
}

Result<NtsReplyContents> openNtsReply(ByteSpan reply, ByteSpan uid, ByteSpan s2c_key) {
  if (reply.size() < kNtpPacketSize) {
    return fail(Error::protocol(
        fmt::format("NTS reply of {} bytes is shorter than an NTP header", reply.size())));
  }
  auto efs = parseExtensionFields(reply, kNtpPacketSize);
  if (!efs) {
    return fail(Error::protocol("NTS reply: " + efs.error().message));
  }
  if (!ntsReplyEchoesUid(reply, uid)) {
    return fail(Error::protocol(
        "NTS reply does not echo our Unique Identifier: not an answer to this request"));
  }
  auto auth = std::find_if(efs->begin(), efs->end(), [](const NtsExtensionField& ef) {
    return ef.type == kEfNtsAuthenticator;
  });
  if (auth == efs->end()) {
    return fail(Error::protocol("NTS reply has no authenticator extension field: unauthenticated"));
  }
  // Whatever follows the authenticator is not covered by it, so it must not exist.
  if (auth + 1 != efs->end()) {
    return fail(Error::protocol(
        "NTS authenticator is not the last extension field: unauthenticated data follows it"));
  }
  ByteSpan body = auth->body;
  if (body.size() < 4) {
    return fail(Error::protocol("NTS authenticator extension field too short"));
  }
  const size_t nonce_len = get16(body.data());
  const size_t ct_len = get16(body.data() + 2);
  if (nonce_len == 0 || 4 + pad4(nonce_len) + ct_len > body.size() || ct_len < kAesSivTagSize) {
    return fail(Error::protocol(fmt::format(
        "malformed NTS authenticator: nonce {} and ciphertext {} bytes in a {}-byte body",
        nonce_len, ct_len, body.size())));
  }
  ByteSpan nonce = body.subspan(4, nonce_len);
  ByteSpan ciphertext = body.subspan(4 + pad4(nonce_len), ct_len);
  auto plain = aesSivOpen(s2c_key, {reply.first(auth->offset), nonce}, ciphertext);
  if (!plain) {
    if (plain.error().kind == Error::Kind::Auth) {
      return fail(Error::auth(kNtsAuthFailed));
    }
    return fail(Error::protocol("NTS reply cannot be opened: " + plain.error().message));
  }
  auto inner = parseExtensionFields(*plain, 0);
  if (!inner) {
    return fail(
        Error::protocol("NTS reply's encrypted extension fields: " + inner.error().message));
  }
  NtsReplyContents out;
  for (const auto& ef : *inner) {
    if (ef.type == kEfNtsCookie && !ef.body.empty()) {
      out.cookies.emplace_back(ef.body.begin(), ef.body.end());
    }
  }
  return out;
}

}  // namespace xdcr::clock
