// NTS (RFC 8915) without a real server: AES-SIV-CMAC-256 against the RFC 5297 vectors and
// tampering, the NTS-KE record codec (chrony-like responses, every truncation, error and unknown
// critical records), the NTP extension fields of requests and replies (padding, authenticator
// last, UID echo, tampering, truncation), and the client's NTS-KE failures that need no TLS
// server (refused connection, silent server).

#include "clock/nts.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <string>

#include "clock/aes_siv.h"
#include "tests/support/run_sync.h"

namespace xdcr::clock {
namespace {

namespace net = boost::asio;

NtsBytes fromHex(std::string_view hex) {
  NtsBytes out;
  std::string digits;
  for (char c : hex) {
    if (c != ' ') {
      digits.push_back(c);
    }
  }
  for (size_t i = 0; i + 1 < digits.size(); i += 2) {
    out.push_back(static_cast<uint8_t>(std::stoi(digits.substr(i, 2), nullptr, 16)));
  }
  return out;
}

std::string toHex(ByteSpan b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (uint8_t x : b) {
    s.push_back(d[x >> 4]);
    s.push_back(d[x & 15]);
  }
  return s;
}

uint16_t get16(const NtsBytes& b, size_t at) {
  return static_cast<uint16_t>((b[at] << 8) | b[at + 1]);
}

NtsBytes patterned(size_t n, uint8_t seed) {
  NtsBytes b(n);
  for (size_t i = 0; i < n; ++i) {
    b[i] = static_cast<uint8_t>(seed + i * 7);
  }
  return b;
}

// ---- AES-SIV-CMAC-256 ----------------------------------------------------------------------

// RFC 5297 Appendix A.1: deterministic (no nonce), one associated-data component.
TEST(clock_nts_AesSiv, Rfc5297A1DeterministicVector) {
  const NtsBytes key =
      fromHex("fffefdfc fbfaf9f8 f7f6f5f4 f3f2f1f0 f0f1f2f3 f4f5f6f7 f8f9fafb fcfdfeff");
  const NtsBytes ad = fromHex("10111213 14151617 18191a1b 1c1d1e1f 20212223 24252627");
  const NtsBytes plaintext = fromHex("11223344 55667788 99aabbcc ddee");
  auto sealed = aesSivSeal(key, {ad}, plaintext);
  ASSERT_TRUE(sealed.has_value()) << sealed.error().message;
  EXPECT_EQ(toHex(*sealed), "85632d07c6e8f37f950acd320a2ecc9340c02b9690c4dc04daef7f6afe5c");
  auto opened = aesSivOpen(key, {ad}, *sealed);
  ASSERT_TRUE(opened.has_value()) << opened.error().message;
  EXPECT_EQ(*opened, plaintext);
}

// RFC 5297 Appendix A.2: several associated-data components, the nonce last — the order NTS
// uses (packet, then nonce). Proves each EVP update is one S2V component.
TEST(clock_nts_AesSiv, Rfc5297A2NonceIsTheLastAdComponent) {
  const NtsBytes key =
      fromHex("7f7e7d7c 7b7a7978 77767574 73727170 40414243 44454647 48494a4b 4c4d4e4f");
  const NtsBytes ad1 = fromHex(
      "00112233 44556677 8899aabb ccddeeff deaddada deaddada ffeeddcc bbaa9988 77665544 "
      "33221100");
  const NtsBytes ad2 = fromHex("10203040 50607080 90a0");
  const NtsBytes nonce = fromHex("09f91102 9d74e35b d84156c5 635688c0");
  const NtsBytes plaintext = fromHex(
      "74686973 20697320 736f6d65 20706c61 696e7465 78742074 6f20656e 63727970 74207573 "
      "696e6720 5349562d 414553");
  auto sealed = aesSivSeal(key, {ad1, ad2, nonce}, plaintext);
  ASSERT_TRUE(sealed.has_value()) << sealed.error().message;
  EXPECT_EQ(toHex(*sealed),
            "7bdb6e3b432667eb06f4d14bff2fbd0fcb900f2fddbe404326601965c889bf17dba77ceb094fa663"
            "b7a3f748ba8af829ea64ad544a272e9c485b62a3fd5c0d");
  auto opened = aesSivOpen(key, {ad1, ad2, nonce}, *sealed);
  ASSERT_TRUE(opened.has_value()) << opened.error().message;
  EXPECT_EQ(*opened, plaintext);
}

TEST(clock_nts_AesSiv, RoundTripAndEveryTamperingIsRejected) {
  const NtsBytes key = patterned(32, 1);
  const NtsBytes packet = patterned(84, 2);
  const NtsBytes nonce = patterned(16, 3);
  const NtsBytes plaintext = patterned(104, 4);
  auto sealed = aesSivSeal(key, {packet, nonce}, plaintext);
  ASSERT_TRUE(sealed.has_value()) << sealed.error().message;
  ASSERT_EQ(sealed->size(), kAesSivTagSize + plaintext.size());
  auto opened = aesSivOpen(key, {packet, nonce}, *sealed);
  ASSERT_TRUE(opened.has_value()) << opened.error().message;
  EXPECT_EQ(*opened, plaintext);

  auto expectAuthFailure = [](const Result<NtsBytes>& r, const char* what) {
    ASSERT_FALSE(r.has_value()) << what << " was accepted";
    EXPECT_EQ(r.error().kind, Error::Kind::Auth) << what << ": " << r.error().message;
  };
  NtsBytes bad = *sealed;
  bad[0] ^= 0x01;  // tag
  expectAuthFailure(aesSivOpen(key, {packet, nonce}, bad), "flipped tag bit");
  bad = *sealed;
  bad.back() ^= 0x80;  // ciphertext
  expectAuthFailure(aesSivOpen(key, {packet, nonce}, bad), "flipped ciphertext bit");
  NtsBytes other_packet = packet;
  other_packet[1] ^= 0x04;  // associated data
  expectAuthFailure(aesSivOpen(key, {other_packet, nonce}, *sealed), "changed associated data");
  expectAuthFailure(aesSivOpen(key, {nonce, packet}, *sealed), "swapped AD components");
  expectAuthFailure(aesSivOpen(key, {packet}, *sealed), "missing nonce component");
  expectAuthFailure(aesSivOpen(patterned(32, 9), {packet, nonce}, *sealed), "wrong key");
  expectAuthFailure(aesSivOpen(key, {packet, nonce}, ByteSpan(sealed->data(), 10)),
                    "shorter than a tag");
}

// OpenSSL 3.0 cannot process an empty message; that must be an error value, never a bogus tag.
TEST(clock_nts_AesSiv, EmptyPlaintextAndBadKeySizeAreErrors) {
  const NtsBytes key = patterned(32, 1);
  const NtsBytes ad = patterned(48, 2);
  EXPECT_FALSE(aesSivSeal(key, {ad}, {}).has_value());
  EXPECT_FALSE(aesSivOpen(key, {ad}, patterned(16, 3)).has_value());
  auto r = aesSivSeal(patterned(16, 1), {ad}, patterned(8, 2));
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("32-byte key"), std::string::npos) << r.error().message;
}

// ---- NTS-KE records --------------------------------------------------------------------------

NtsBytes u16(uint16_t v) {
  return {static_cast<uint8_t>(v >> 8), static_cast<uint8_t>(v)};
}

void rec(NtsBytes& out, bool critical, NtsKeRecordType type, const NtsBytes& body) {
  appendNtsKeRecord(out, critical, static_cast<uint16_t>(type), body);
}

// What chronyd 4.3 sends when its NTP port is not 123 (clock-notes §6.2): protocol, AEAD, 8
// cookies of 100 bytes, a Port record, End of Message. Plus a Server record and a warning.
NtsBytes chronyLikeResponse() {
  NtsBytes r;
  rec(r, true, NtsKeRecordType::NextProtocol, u16(0));
  rec(r, true, NtsKeRecordType::AeadAlgorithm, u16(15));
  for (int i = 0; i < 8; ++i) {
    rec(r, false, NtsKeRecordType::NewCookie, patterned(100, static_cast<uint8_t>(i)));
  }
  rec(r, true, NtsKeRecordType::Server, NtsBytes{'1', '2', '7', '.', '0', '.', '0', '.', '1'});
  rec(r, true, NtsKeRecordType::Port, u16(11125));
  rec(r, false, NtsKeRecordType::Warning, u16(7));
  rec(r, true, NtsKeRecordType::EndOfMessage, {});
  return r;
}

TEST(clock_nts_Ke, RequestIsNtpV4AesSivEndOfMessage) {
  EXPECT_EQ(toHex(makeNtsKeRequest()), "80010002000080040002000f80000000");
}

TEST(clock_nts_Ke, ExporterContextsNameProtocolAeadAndDirection) {
  auto c2s = ntsExporterContext(false);
  auto s2c = ntsExporterContext(true);
  EXPECT_EQ(toHex(c2s), "0000000f00");
  EXPECT_EQ(toHex(s2c), "0000000f01");
}

TEST(clock_nts_Ke, ParsesAChronyLikeResponse) {
  auto r = parseNtsKeResponse(chronyLikeResponse());
  ASSERT_TRUE(r.has_value()) << r.error().message;
  ASSERT_TRUE(r->has_value());
  const NtsKeResponse& k = **r;
  ASSERT_EQ(k.cookies.size(), 8u);
  EXPECT_EQ(k.cookies[3], patterned(100, 3));
  EXPECT_EQ(k.ntp_server, "127.0.0.1");
  EXPECT_EQ(k.ntp_port, 11125);
  EXPECT_EQ(k.warnings, std::vector<uint16_t>{7});
}

TEST(clock_nts_Ke, WithoutServerAndPortRecordsTheDefaultsApply) {
  NtsBytes r;
  rec(r, true, NtsKeRecordType::NextProtocol, u16(0));
  rec(r, false, NtsKeRecordType::AeadAlgorithm, u16(15));
  rec(r, false, NtsKeRecordType::NewCookie, patterned(64, 1));
  rec(r, true, NtsKeRecordType::EndOfMessage, {});
  auto p = parseNtsKeResponse(r);
  ASSERT_TRUE(p.has_value() && p->has_value());
  EXPECT_TRUE((*p)->ntp_server.empty());
  EXPECT_FALSE((*p)->ntp_port.has_value());
  EXPECT_EQ((*p)->cookies.size(), 1u);
}

// A TCP read can end anywhere: every proper prefix is "need more", never an error.
TEST(clock_nts_Ke, EveryTruncationMeansNeedMoreBytes) {
  const NtsBytes full = chronyLikeResponse();
  for (size_t n = 0; n < full.size(); ++n) {
    auto r = parseNtsKeResponse(ByteSpan(full.data(), n));
    ASSERT_TRUE(r.has_value()) << "prefix " << n << ": " << r.error().message;
    EXPECT_FALSE(r->has_value()) << "prefix " << n << " parsed as complete";
  }
}

TEST(clock_nts_Ke, ErrorRecordFailsWithItsMeaning) {
  NtsBytes r;
  rec(r, true, NtsKeRecordType::Error, u16(1));
  rec(r, true, NtsKeRecordType::EndOfMessage, {});
  auto p = parseNtsKeResponse(r);
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.error().kind, Error::Kind::Refused);
  EXPECT_NE(p.error().message.find("Error record"), std::string::npos) << p.error().message;
  EXPECT_NE(p.error().message.find("bad request"), std::string::npos) << p.error().message;
}

TEST(clock_nts_Ke, UnknownCriticalRecordFailsUnknownOtherRecordIsIgnored) {
  NtsBytes ok;
  rec(ok, true, NtsKeRecordType::NextProtocol, u16(0));
  rec(ok, true, NtsKeRecordType::AeadAlgorithm, u16(15));
  appendNtsKeRecord(ok, false, 0x4321, patterned(5, 1));  // unknown, not critical
  rec(ok, false, NtsKeRecordType::NewCookie, patterned(100, 1));
  rec(ok, true, NtsKeRecordType::EndOfMessage, {});
  auto p = parseNtsKeResponse(ok);
  ASSERT_TRUE(p.has_value() && p->has_value()) << (p ? "incomplete" : p.error().message);

  NtsBytes bad;
  rec(bad, true, NtsKeRecordType::NextProtocol, u16(0));
  appendNtsKeRecord(bad, true, 0x4321, patterned(5, 1));
  auto q = parseNtsKeResponse(bad);  // fails at once, before End of Message
  ASSERT_FALSE(q.has_value());
  EXPECT_NE(q.error().message.find("unknown critical record type 17185"), std::string::npos)
      << q.error().message;
}

TEST(clock_nts_Ke, RefusedOrIncompleteNegotiationFails) {
  struct Case {
    const char* name;
    NtsBytes bytes;
    const char* expect;
  };
  std::vector<Case> cases;
  auto base = [](bool protocol, bool aead, bool cookie) {
    NtsBytes r;
    if (protocol) {
      rec(r, true, NtsKeRecordType::NextProtocol, u16(0));
    }
    if (aead) {
      rec(r, true, NtsKeRecordType::AeadAlgorithm, u16(15));
    }
    if (cookie) {
      rec(r, false, NtsKeRecordType::NewCookie, patterned(100, 1));
    }
    return r;
  };
  auto eom = [](NtsBytes r) {
    rec(r, true, NtsKeRecordType::EndOfMessage, {});
    return r;
  };
  cases.push_back({"no protocol", eom(base(false, true, true)), "no Next Protocol"});
  cases.push_back({"no AEAD", eom(base(true, false, true)), "no AEAD"});
  cases.push_back({"no cookies", eom(base(true, true, false)), "no cookies"});
  {
    NtsBytes r;
    rec(r, true, NtsKeRecordType::NextProtocol, {});
    cases.push_back({"empty protocol list", eom(r), "none of the offered protocols"});
  }
  {
    NtsBytes r;
    rec(r, true, NtsKeRecordType::NextProtocol, u16(0));
    rec(r, true, NtsKeRecordType::AeadAlgorithm, u16(16));
    cases.push_back({"other AEAD", eom(r), "naming algorithm 16"});
  }
  {
    NtsBytes r = base(true, true, true);
    rec(r, true, NtsKeRecordType::Port, NtsBytes{1});
    cases.push_back({"short port", eom(r), "Port record"});
  }
  {
    NtsBytes r = eom(base(true, true, true));
    r.push_back(0);
    cases.push_back({"bytes after End of Message", r, "after End of Message"});
  }
  for (const auto& c : cases) {
    auto p = parseNtsKeResponse(c.bytes);
    ASSERT_FALSE(p.has_value()) << c.name << " was accepted";
    EXPECT_NE(p.error().message.find(c.expect), std::string::npos)
        << c.name << ": " << p.error().message;
  }
}

TEST(clock_nts_Ke, EndlessResponseWithoutEndOfMessageFails) {
  NtsBytes r;
  rec(r, true, NtsKeRecordType::NextProtocol, u16(0));
  while (r.size() <= 64 * 1024) {
    rec(r, false, NtsKeRecordType::Warning, patterned(1000, 1));
  }
  auto p = parseNtsKeResponse(r);
  ASSERT_FALSE(p.has_value());
  EXPECT_NE(p.error().message.find("without End of Message"), std::string::npos);
}

// ---- Extension fields --------------------------------------------------------------------------

TEST(clock_nts_Ef, FieldsArePaddedToMultiplesOfFourAndAtLeastSixteen) {
  NtsBytes p;
  appendExtensionField(p, 0x1234, patterned(1, 1));
  EXPECT_EQ(p.size(), 16u);
  EXPECT_EQ(get16(p, 2), 16);
  appendExtensionField(p, 0x1234, patterned(13, 1));
  EXPECT_EQ(p.size(), 16u + 20u);
  appendExtensionField(p, 0x1234, patterned(100, 1));
  EXPECT_EQ(p.size(), 16u + 20u + 104u);
  auto efs = parseExtensionFields(p, 0);
  ASSERT_TRUE(efs.has_value()) << efs.error().message;
  ASSERT_EQ(efs->size(), 3u);
  EXPECT_EQ((*efs)[1].length, 20u);
  EXPECT_EQ((*efs)[1].body[12], patterned(13, 1)[12]);
  EXPECT_EQ((*efs)[1].body[13], 0);  // padding
}

TEST(clock_nts_Ef, MalformedOrTruncatedFieldsAreRejected) {
  NtsBytes p;
  appendExtensionField(p, 0x0104, patterned(32, 1));
  NtsBytes cut(p.begin(), p.end() - 4);
  auto r = parseExtensionFields(cut, 0);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("truncated"), std::string::npos) << r.error().message;

  NtsBytes header_only = p;
  header_only.insert(header_only.end(), {0x01, 0x04});
  r = parseExtensionFields(header_only, 0);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("truncated"), std::string::npos) << r.error().message;

  NtsBytes odd = p;
  odd[3] = 35;  // not a multiple of 4
  r = parseExtensionFields(odd, 0);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("multiple of 4"), std::string::npos) << r.error().message;

  NtsBytes zero = p;
  zero[2] = 0;
  zero[3] = 0;  // length 0 would loop forever
  EXPECT_FALSE(parseExtensionFields(zero, 0).has_value());
}

struct Fixture {
  NtsKeys keys;
  NtsRequestIds ids;
  NtsBytes cookie = patterned(100, 42);
  Fixture() {
    auto c = patterned(32, 10);
    auto s = patterned(32, 20);
    std::copy(c.begin(), c.end(), keys.c2s.begin());
    std::copy(s.begin(), s.end(), keys.s2c.begin());
    ids.transmit_cookie = 0x0123456789abcdefULL;
    auto u = patterned(32, 30);
    std::copy(u.begin(), u.end(), ids.uid.begin());
    auto n = patterned(16, 40);
    std::copy(n.begin(), n.end(), ids.nonce.begin());
  }
};

TEST(clock_nts_Ef, RequestLayoutAndAuthenticatorVerifyLikeAServerWould) {
  Fixture f;
  auto req = buildNtsRequest(f.ids, f.cookie, 3, f.keys.c2s);
  ASSERT_TRUE(req.has_value()) << req.error().message;
  auto header = decodePacket(*req);
  ASSERT_TRUE(header.has_value());
  EXPECT_EQ((*req)[0], 0x23);  // LI 0, VN 4, mode 3
  EXPECT_EQ(header->transmit_ts, f.ids.transmit_cookie);

  auto efs = parseExtensionFields(*req, kNtpPacketSize);
  ASSERT_TRUE(efs.has_value()) << efs.error().message;
  ASSERT_EQ(efs->size(), 6u);
  EXPECT_EQ((*efs)[0].type, kEfUniqueIdentifier);
  EXPECT_EQ(toHex((*efs)[0].body), toHex(f.ids.uid));
  EXPECT_EQ((*efs)[1].type, kEfNtsCookie);
  EXPECT_EQ(NtsBytes((*efs)[1].body.begin(), (*efs)[1].body.end()), f.cookie);
  for (int i = 2; i < 5; ++i) {
    EXPECT_EQ((*efs)[i].type, kEfNtsCookiePlaceholder);
    EXPECT_EQ((*efs)[i].length, 4 + f.cookie.size());
  }
  const auto& auth = efs->back();
  EXPECT_EQ(auth.type, kEfNtsAuthenticator);
  EXPECT_EQ(auth.offset + auth.length, req->size()) << "authenticator is not last";
  for (const auto& ef : *efs) {
    EXPECT_EQ(ef.length % 4, 0u);
  }

  // The server's side: AD = request up to the authenticator, then the nonce, key C2S.
  const size_t nonce_len = get16(*req, auth.offset + 4);
  const size_t ct_len = get16(*req, auth.offset + 6);
  ASSERT_EQ(nonce_len, 16u);
  ByteSpan nonce = auth.body.subspan(4, nonce_len);
  ByteSpan ct = auth.body.subspan(4 + 16, ct_len);
  auto plain = aesSivOpen(f.keys.c2s, {ByteSpan(req->data(), auth.offset), nonce}, ct);
  ASSERT_TRUE(plain.has_value()) << plain.error().message;
  // The encrypted part is one Cookie Placeholder as long as the cookie (workaround (a)).
  auto inner = parseExtensionFields(*plain, 0);
  ASSERT_TRUE(inner.has_value());
  ASSERT_EQ(inner->size(), 1u);
  EXPECT_EQ((*inner)[0].type, kEfNtsCookiePlaceholder);
  EXPECT_EQ((*inner)[0].length, 4 + f.cookie.size());
  // Not openable with the other direction's key.
  EXPECT_FALSE(aesSivOpen(f.keys.s2c, {ByteSpan(req->data(), auth.offset), nonce}, ct));
}

// A reply as an NTS server builds it: header, UID echo, authenticator sealing fresh cookies.
NtsBytes serverReply(const Fixture& f, int cookies, ByteSpan uid) {
  NtpPacket h;
  h.version = 4;
  h.mode = kModeServer;
  h.stratum = 8;
  h.origin_ts = f.ids.transmit_cookie;
  h.receive_ts = unixNsToNtp(systemNowNs());
  h.transmit_ts = h.receive_ts;
  const NtpBytes hb = encodePacket(h);
  NtsBytes reply(hb.begin(), hb.end());
  appendExtensionField(reply, kEfUniqueIdentifier, uid);
  NtsBytes plaintext;
  for (int i = 0; i < cookies; ++i) {
    appendExtensionField(plaintext, kEfNtsCookie, patterned(100, static_cast<uint8_t>(100 + i)));
  }
  EXPECT_TRUE(appendNtsAuthenticator(reply, f.keys.s2c, patterned(16, 77), plaintext));
  return reply;
}

TEST(clock_nts_Ef, AuthenticReplyGivesItsCookies) {
  Fixture f;
  NtsBytes reply = serverReply(f, 2, f.ids.uid);
  auto r = openNtsReply(reply, f.ids.uid, f.keys.s2c);
  ASSERT_TRUE(r.has_value()) << r.error().message;
  ASSERT_EQ(r->cookies.size(), 2u);
  EXPECT_EQ(r->cookies[1], patterned(100, 101));
  // The header checks still pass on it.
  auto s = checkReply(reply, f.ids.transmit_cookie, systemNowNs() - 1000, systemNowNs() + 1000);
  EXPECT_TRUE(s.has_value()) << s.error().message;
}

TEST(clock_nts_Ef, TamperedReplyFailsAuthentication) {
  Fixture f;
  const NtsBytes good = serverReply(f, 2, f.ids.uid);
  auto efs = parseExtensionFields(good, kNtpPacketSize);
  ASSERT_TRUE(efs.has_value());
  const auto& auth = efs->back();
  // One byte inside the ciphertext, one in the header (associated data), and the wrong key.
  NtsBytes in_ct = good;
  in_ct[auth.offset + 4 + 4 + 16 + 20] ^= 0x01;
  NtsBytes in_header = good;
  in_header[40] ^= 0x80;  // transmit timestamp: an attacker shifting our clock
  for (const auto& [name, bytes, key] : std::vector<std::tuple<const char*, NtsBytes, ByteSpan>>{
           {"ciphertext byte", in_ct, f.keys.s2c},
           {"header byte", in_header, f.keys.s2c},
           {"wrong key", good, f.keys.c2s}}) {
    auto r = openNtsReply(bytes, f.ids.uid, key);
    ASSERT_FALSE(r.has_value()) << name << " accepted";
    EXPECT_EQ(r.error().kind, Error::Kind::Auth) << name;
    EXPECT_EQ(r.error().message, kNtsAuthFailed) << name;
  }
}

TEST(clock_nts_Ef, UidMismatchMissingOrMisplacedAuthenticatorAreRejected) {
  Fixture f;
  const NtsBytes other_uid = patterned(32, 99);
  auto r = openNtsReply(serverReply(f, 1, other_uid), f.ids.uid, f.keys.s2c);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("Unique Identifier"), std::string::npos) << r.error().message;

  NtsBytes trailing = serverReply(f, 1, f.ids.uid);
  appendExtensionField(trailing, kEfNtsCookie, patterned(100, 5));  // unauthenticated cookie
  r = openNtsReply(trailing, f.ids.uid, f.keys.s2c);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("not the last"), std::string::npos) << r.error().message;

  NtsBytes no_auth(kNtpPacketSize, 0);
  appendExtensionField(no_auth, kEfUniqueIdentifier, f.ids.uid);
  r = openNtsReply(no_auth, f.ids.uid, f.keys.s2c);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("no authenticator"), std::string::npos) << r.error().message;

  NtsBytes cut = serverReply(f, 1, f.ids.uid);
  cut.resize(cut.size() - 8);
  r = openNtsReply(cut, f.ids.uid, f.keys.s2c);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("truncated"), std::string::npos) << r.error().message;

  NtsBytes short_packet(20, 0);
  EXPECT_FALSE(openNtsReply(short_packet, f.ids.uid, f.keys.s2c).has_value());
}

TEST(clock_nts_Ef, NakCountsOnlyWithOurUid) {
  Fixture f;
  NtpPacket h;
  h.mode = kModeServer;
  h.stratum = 0;
  h.reference_id = 0x4e54534e;  // "NTSN"
  h.origin_ts = f.ids.transmit_cookie;
  const NtpBytes hb = encodePacket(h);
  NtsBytes nak(hb.begin(), hb.end());
  appendExtensionField(nak, kEfUniqueIdentifier, f.ids.uid);
  EXPECT_EQ(nak.size(), 84u);  // what chronyd sends (clock-notes §7)
  EXPECT_TRUE(ntsReplyEchoesUid(nak, f.ids.uid));
  EXPECT_FALSE(ntsReplyEchoesUid(nak, patterned(32, 1)));
  EXPECT_FALSE(ntsReplyEchoesUid(ByteSpan(nak.data(), 48), f.ids.uid));
}

// ---- The client, without a TLS server -----------------------------------------------------------

Result<SntpResult> runQuery(NtsClient& client) {
  return test::runSync(client.query());
}

TEST(clock_nts_Client, RefusedConnectionNamesTheStage) {
  uint16_t port = 0;
  {
    net::io_context io;
    net::ip::tcp::acceptor a(io, net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
    port = a.local_endpoint().port();
  }  // closed: nothing listens there now
  NtsOptions opt;
  opt.timeout = std::chrono::milliseconds(500);
  NtsClient client("127.0.0.1:" + std::to_string(port), opt);
  auto r = runQuery(client);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("NTS-KE server 127.0.0.1:"), std::string::npos);
  EXPECT_NE(r.error().message.find("cannot connect"), std::string::npos) << r.error().message;
  EXPECT_EQ(client.keEstablishments(), 0);
}

// The kernel completes the TCP handshake for a listening socket nobody accepts from: the TLS
// handshake then never gets an answer, and the deadline must end it.
TEST(clock_nts_Client, SilentServerTimesOutInTheTlsHandshake) {
  net::io_context io;
  net::ip::tcp::acceptor a(io, net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), 0));
  NtsOptions opt;
  opt.timeout = std::chrono::milliseconds(300);
  NtsClient client("127.0.0.1:" + std::to_string(a.local_endpoint().port()), opt);
  auto start = std::chrono::steady_clock::now();
  auto r = runQuery(client);
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("no answer within 300 ms while in the TLS handshake"),
            std::string::npos)
      << r.error().message;
  EXPECT_LT(took, std::chrono::seconds(3));
}

TEST(clock_nts_Client, BadServerSpecIsAnError) {
  NtsClient client("127.0.0.1:notaport");
  auto r = runQuery(client);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("port"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace xdcr::clock
