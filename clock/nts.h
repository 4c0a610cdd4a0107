#pragma once
// Network Time Security for NTP (RFC 8915), client side: authenticated time from a server whose
// identity a TLS certificate proves, so that a man in the middle cannot shift our clock
// measurement (plain SNTP only resists off-path spoofing).
//
// Two sub-protocols:
//  1. NTS-KE: TLS 1.3 over TCP (port 4460, ALPN "ntske/1"). We send NTS-KE records asking for
//     NTPv4 with AEAD_AES_SIV_CMAC_256; the server answers with up to 8 opaque cookies and,
//     optionally, the NTP server and port to use. Both sides then derive the client-to-server
//     (C2S) and server-to-client (S2C) keys from the TLS exporter.
//  2. NTS-protected NTPv4 over UDP: each request carries extension fields (EFs) — a random
//     Unique Identifier, one cookie (the server recovers the keys from it, it keeps no state),
//     and an Authenticator EF sealing the packet with C2S. The reply echoes the identifier and
//     is sealed with S2C; its encrypted part carries fresh cookies, each to be used once.
//
// This header has the wire codecs (pure functions, unit-tested without a network) and the
// client. Facts checked against chronyd 4.3 are in clock-notes §6–7. Errors are values; nothing
// on these paths throws.

#include <array>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/udp.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "clock/aes_siv.h"
#include "clock/ntp_packet.h"
#include "clock/sntp_client.h"
#include "common/error.h"

namespace xdcr::clock {

using NtsBytes = std::vector<uint8_t>;

// ---- NTS-KE records (RFC 8915 §4) ----------------------------------------------------------

inline constexpr uint16_t kNtsKeDefaultPort = 4460;
inline constexpr uint16_t kNtsProtocolNtpV4 = 0;    // Next Protocol id of NTPv4
inline constexpr uint16_t kAeadAesSivCmac256 = 15;  // IANA AEAD id; 32-byte key
inline constexpr size_t kNtsKeyLength = kAesSivKeySize;
/** Cookies a client keeps at most: RFC 8915 servers hand out 8 per NTS-KE. */
inline constexpr size_t kNtsMaxCookies = 8;
/** Bit set in a record's type when the receiver must understand it. */
inline constexpr uint16_t kNtsKeCritical = 0x8000;

enum class NtsKeRecordType : uint16_t {
  EndOfMessage = 0,
  NextProtocol = 1,
  Error = 2,
  Warning = 3,
  AeadAlgorithm = 4,
  NewCookie = 5,
  Server = 6,  // NTPv4 Server Negotiation
  Port = 7,    // NTPv4 Port Negotiation
};

/** Appends one record: type (with the critical bit) and body length, 16 bits each, then body. */
void appendNtsKeRecord(NtsBytes& out, bool critical, uint16_t type, ByteSpan body);

/** Our request: Next Protocol = NTPv4, AEAD = AES-SIV-CMAC-256, End of Message. */
NtsBytes makeNtsKeRequest();

/** What a server's NTS-KE response told us (the records up to End of Message). */
struct NtsKeResponse {
  std::vector<NtsBytes> cookies;     // at most kNtsMaxCookies
  std::string ntp_server;            // empty: the NTS-KE server's address
  std::optional<uint16_t> ntp_port;  // unset: 123
  std::vector<uint16_t> warnings;    // Warning record codes (none are defined yet)
};

/**
 * Parses a server's response as received so far. Returns nullopt while End of Message has not
 * arrived (the caller reads more and calls again with all bytes), the response once it has, and
 * an error for an Error record, an unknown critical record, a malformed record, a refused
 * protocol or AEAD, no cookies, or bytes after End of Message.
 */
Result<std::optional<NtsKeResponse>> parseNtsKeResponse(ByteSpan data);

/** The two AEAD keys of one NTS-KE session. */
struct NtsKeys {
  std::array<uint8_t, kNtsKeyLength> c2s{};  // seals our requests
  std::array<uint8_t, kNtsKeyLength> s2c{};  // opens the server's replies
};

/** TLS exporter label and contexts (RFC 8915 §5.1): protocol id, AEAD id, direction. */
inline constexpr char kNtsExporterLabel[] = "EXPORTER-network-time-security";
std::array<uint8_t, 5> ntsExporterContext(bool server_to_client);

/** Result of a successful NTS-KE. */
struct NtsKeResult {
  NtsKeys keys;
  NtsKeResponse response;
  std::string ke_address;  // the address we connected to (the NTP default when no Server record)
};

/**
 * One NTS-KE: TCP connect, TLS 1.3 handshake (certificate checked against `ca_file` or, when
 * empty, the system trust store; name or IP checked against the certificate; ALPN ntske/1),
 * request, response, keys. Everything within `timeout`. Errors name the stage that failed.
 */
boost::asio::awaitable<Result<NtsKeResult>> ntsKeyExchange(HostPort server, std::string ca_file,
                                                           std::chrono::milliseconds timeout);

// ---- NTS extension fields in NTPv4 (RFC 8915 §5, RFC 7822) ---------------------------------

inline constexpr uint16_t kEfUniqueIdentifier = 0x0104;
inline constexpr uint16_t kEfNtsCookie = 0x0204;
inline constexpr uint16_t kEfNtsCookiePlaceholder = 0x0304;
inline constexpr uint16_t kEfNtsAuthenticator = 0x0404;  // "and Encrypted Extension Fields"
inline constexpr size_t kNtsUidLength = 32;
inline constexpr size_t kNtsNonceLength = 16;

/** The message for a reply whose authenticator fails; tests and operators look for it. */
inline constexpr char kNtsAuthFailed[] =
    "NTS authenticator did not verify: reply tampered with or wrong keys";

/**
 * Appends an EF: type, total length (header included), body, zero padding up to a multiple of 4
 * and at least `min_length` bytes (RFC 7822: 16).
 */
void appendExtensionField(NtsBytes& packet, uint16_t type, ByteSpan body, size_t min_length = 16);

/** One EF found in a packet. `body` includes any padding. */
struct NtsExtensionField {
  uint16_t type = 0;
  size_t offset = 0;  // of the EF header within the parsed buffer
  size_t length = 0;  // total, header included
  ByteSpan body;
};

/** Splits `data[offset..]` into EFs; each must be ≥ 4 bytes, a multiple of 4, and fit. */
Result<std::vector<NtsExtensionField>> parseExtensionFields(ByteSpan data, size_t offset);

/**
 * Appends the Authenticator and Encrypted Extension Fields EF, sealing `plaintext` (encrypted
 * EFs, not empty: see aes_siv.h) with `key`; the associated data is `packet` as it is before the
 * call, then the nonce.
 */
Status appendNtsAuthenticator(NtsBytes& packet, ByteSpan key, ByteSpan nonce, ByteSpan plaintext);

/** The parts of one NTS request that are random per request. */
struct NtsRequestIds {
  uint64_t transmit_cookie = 0;  // transmit timestamp field; the reply's origin must echo it
  std::array<uint8_t, kNtsUidLength> uid{};
  std::array<uint8_t, kNtsNonceLength> nonce{};
};

/**
 * The request: 48-byte header (makeClientRequest), Unique Identifier, Cookie, `extra_placeholders`
 * Cookie Placeholders, Authenticator. Its encrypted part is one more Cookie Placeholder:
 * OpenSSL 3.0 cannot seal an empty plaintext and servers read it as a request for one more
 * cookie (clock-notes §7.3 (a)). A reply thus brings 2 + extra_placeholders cookies.
 */
Result<NtsBytes> buildNtsRequest(const NtsRequestIds& ids, ByteSpan cookie, int extra_placeholders,
                                 ByteSpan c2s_key);

/** What an authentic reply carries for us besides the time. */
struct NtsReplyContents {
  std::vector<NtsBytes> cookies;  // fresh cookies from the encrypted part
};

/**
 * Checks a reply's extension fields: they parse, one of them echoes `uid`, the Authenticator is
 * present, last, and verifies with `s2c_key` (associated data = the reply up to it, then its
 * nonce). Returns the decrypted cookies. A failed verification is Error::Kind::Auth with
 * kNtsAuthFailed; other defects are Error::Kind::Protocol. The 48-byte header is not checked
 * here: checkReply() does that once the reply is known to be authentic.
 */
Result<NtsReplyContents> openNtsReply(ByteSpan reply, ByteSpan uid, ByteSpan s2c_key);

/** True when the reply's EFs parse and one is a Unique Identifier equal to `uid` (NAK check). */
bool ntsReplyEchoesUid(ByteSpan reply, ByteSpan uid);

// ---- The client ------------------------------------------------------------------------------

struct NtsOptions {
  std::string ca_file;  // PEM trust anchor(s) for the NTS-KE certificate; empty = system store
  int samples = 4;      // NTP exchanges per query()
  std::chrono::milliseconds spacing{100};   // pause between exchanges (our own servers only)
  std::chrono::milliseconds timeout{2000};  // NTS-KE as a whole; each NTP exchange
  NtpCheckLimits limits;
  WallClockNs now_ns = systemNowNs;  // T1 and T4
  /**
   * Tests only: send the NTP requests here instead of the server/port NTS-KE named (e.g. a relay
   * that tampers with replies). The keys and cookies still come from the real NTS-KE.
   */
  std::optional<HostPort> ntp_override;
};

/**
 * Keeps NTS-KE results (keys, cookies, NTP server/port) between queries; redoes NTS-KE when the
 * cookies run out or on an NTS NAK (kiss code NTSN). Not thread-safe; one per server. The object
 * must outlive every query() coroutine it started.
 */
class NtsClient {
 public:
  /** `server`: the NTS-KE server as "host[:port]" (default port 4460). */
  explicit NtsClient(std::string server, NtsOptions options = {});

  /**
   * Several authenticated exchanges, the minimum-delay sample kept (like querySntpServer).
   * Fails when NTS-KE fails (the message names the stage: connect, TLS handshake with the
   * certificate problem, ALPN, KE protocol) or no exchange gave an authentic, valid sample.
   */
  boost::asio::awaitable<Result<SntpResult>> query();

  const std::string& server() const { return server_; }
  /** How many NTS-KE handshakes succeeded so far (tests check cookie reuse with it). */
  int keEstablishments() const { return ke_count_; }
  /** Unused cookies held. */
  size_t cookiesLeft() const { return session_ ? session_->cookies.size() : 0; }

 private:
  struct Session {
    NtsKeys keys;
    std::deque<NtsBytes> cookies;
    boost::asio::ip::udp::endpoint ntp;  // where the NTP requests go
    std::string ntp_name;                // "host:port", for messages
  };

  boost::asio::awaitable<Status> establish(const HostPort& ke);

  std::string server_;
  NtsOptions options_;
  std::optional<Session> session_;
  int ke_count_ = 0;
};

}  // namespace xdcr::clock
