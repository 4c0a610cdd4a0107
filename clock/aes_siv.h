#pragma once
// AEAD_AES_SIV_CMAC_256 (RFC 5297; IANA AEAD id 15), the one AEAD NTS (RFC 8915) requires, on
// OpenSSL 3.0's EVP cipher "AES-128-SIV" (which takes the 32-byte key: K1 for S2V/CMAC, K2 for
// CTR). SIV is deterministic and misuse-resistant: reusing a nonce only reveals whether two
// messages were equal, which is why a random 16-byte nonce is enough for NTS.
//
// Output format is the one NTS puts on the wire: the 16-byte synthetic IV (the tag) followed by
// the ciphertext, as in RFC 5297 §2.6 (V ‖ C). OpenSSL keeps the tag out of its output; these
// functions hide that.
//
// Limitation: OpenSSL 3.0 can neither seal nor open an empty plaintext (EVP_*Final_ex fails;
// openssl/openssl#17268, #26580). Both functions report that as an error instead of producing a
// wrong tag; the NTS client never needs it (clock-notes §7.3 workaround (a)).

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <vector>

#include "common/error.h"

namespace xdcr::clock {

inline constexpr size_t kAesSivKeySize = 32;  // AEAD_AES_SIV_CMAC_256: two AES-128 keys
inline constexpr size_t kAesSivTagSize = 16;

using ByteSpan = std::span<const uint8_t>;

/**
 * Encrypts and authenticates `plaintext` under `key` (32 bytes) with the associated-data
 * components `ad`, in order (S2V treats each as a separate vector; for NTS: the packet, then
 * the nonce as the last component). Returns V ‖ C (16 + plaintext.size() bytes).
 */
Result<std::vector<uint8_t>> aesSivSeal(ByteSpan key, std::initializer_list<ByteSpan> ad,
                                        ByteSpan plaintext);

/**
 * Checks and decrypts V ‖ C produced by aesSivSeal with the same key and associated data.
 * A tag that does not verify is an Error::Kind::Auth; nothing is returned of the plaintext then.
 */
Result<std::vector<uint8_t>> aesSivOpen(ByteSpan key, std::initializer_list<ByteSpan> ad,
                                        ByteSpan tag_and_ciphertext);

}  // namespace xdcr::clock
