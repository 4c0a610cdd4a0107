#include "clock/aes_siv.h"

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/evp.h>

#include <algorithm>
#include <climits>
#include <memory>
#include <string>

#include "common/openssl_error.h"

namespace xdcr::clock {
namespace {

struct CipherFree {
  void operator()(EVP_CIPHER* c) const { EVP_CIPHER_free(c); }
};
struct CtxFree {
  void operator()(EVP_CIPHER_CTX* c) const { EVP_CIPHER_CTX_free(c); }
};
using CipherPtr = std::unique_ptr<EVP_CIPHER, CipherFree>;
using CtxPtr = std::unique_ptr<EVP_CIPHER_CTX, CtxFree>;

// The cipher and a context initialised with the key for one direction. "AES-128-SIV" is
// AEAD_AES_SIV_CMAC_256: the name counts the bits of each of its two AES keys.
Result<CtxPtr> start(ByteSpan key, bool encrypt) {
  if (key.size() != kAesSivKeySize) {
    return fail(Error::protocol(fmt::format("AES-SIV-CMAC-256 needs a {}-byte key, got {} bytes",
                                            kAesSivKeySize, key.size())));
  }
  CipherPtr cipher(EVP_CIPHER_fetch(nullptr, "AES-128-SIV", nullptr));
  if (!cipher) {
    return fail(
        Error::io("OpenSSL has no AES-128-SIV cipher (the default provider is not "
                  "loaded?): " +
                  opensslReason()));
  }
  CtxPtr ctx(EVP_CIPHER_CTX_new());
  if (!ctx || EVP_CipherInit_ex2(ctx.get(), cipher.get(), key.data(), nullptr, encrypt ? 1 : 0,
                                 nullptr) != 1) {
    return fail(Error::io("cannot initialise AES-SIV: " + opensslReason()));
  }
  return ctx;
}

// Each EVP_CipherUpdate with a null output is one S2V associated-data component, in order.
bool addAssociatedData(EVP_CIPHER_CTX* ctx, std::initializer_list<ByteSpan> ad) {
  for (ByteSpan part : ad) {
    int len = 0;
    if (part.size() > INT_MAX ||
        EVP_CipherUpdate(ctx, nullptr, &len, part.data(), static_cast<int>(part.size())) != 1) {
      return false;
    }
  }
  return true;
}

}  // namespace

Result<std::vector<uint8_t>> aesSivSeal(ByteSpan key, std::initializer_list<ByteSpan> ad,
                                        ByteSpan plaintext) {
  if (plaintext.empty()) {
    return fail(Error::protocol(
        "AES-SIV: OpenSSL 3.0 cannot seal an empty plaintext (openssl/openssl#17268)"));
  }
  if (plaintext.size() > INT_MAX) {
    return fail(Error::protocol("AES-SIV: plaintext too large"));
  }
  auto ctx = start(key, true);
  if (!ctx) {
    return fail(ctx.error());
  }
  std::vector<uint8_t> out(kAesSivTagSize + plaintext.size());
  int len = 0;
  int final_len = 0;
  if (!addAssociatedData(ctx->get(), ad) ||
      EVP_CipherUpdate(ctx->get(), out.data() + kAesSivTagSize, &len, plaintext.data(),
                       static_cast<int>(plaintext.size())) != 1 ||
      EVP_CipherFinal_ex(ctx->get(), out.data() + kAesSivTagSize + len, &final_len) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx->get(), EVP_CTRL_AEAD_GET_TAG, kAesSivTagSize, out.data()) != 1) {
    return fail(Error::io("AES-SIV encryption failed: " + opensslReason()));
  }
  return out;
}

Result<std::vector<uint8_t>> aesSivOpen(ByteSpan key, std::initializer_list<ByteSpan> ad,
                                        ByteSpan tag_and_ciphertext) {
  if (tag_and_ciphertext.size() < kAesSivTagSize) {
    return fail(Error::auth(fmt::format("AES-SIV: {} bytes cannot hold the {}-byte tag",
                                        tag_and_ciphertext.size(), kAesSivTagSize)));
  }
  ByteSpan ciphertext = tag_and_ciphertext.subspan(kAesSivTagSize);
  if (ciphertext.empty()) {
    return fail(Error::protocol(
        "AES-SIV: OpenSSL 3.0 cannot open an empty ciphertext (openssl/openssl#17268)"));
  }
  if (ciphertext.size() > INT_MAX) {
    return fail(Error::protocol("AES-SIV: ciphertext too large"));
  }
  auto ctx = start(key, false);
  if (!ctx) {
    return fail(ctx.error());
  }
  // EVP wants the expected tag before any data; it checks it while decrypting.
  std::array<uint8_t, kAesSivTagSize> tag{};
  std::copy_n(tag_and_ciphertext.begin(), kAesSivTagSize, tag.begin());
  if (EVP_CIPHER_CTX_ctrl(ctx->get(), EVP_CTRL_AEAD_SET_TAG, kAesSivTagSize, tag.data()) != 1) {
    return fail(Error::io("cannot set the AES-SIV tag: " + opensslReason()));
  }
  std::vector<uint8_t> out(ciphertext.size());
  int len = 0;
  int final_len = 0;
  if (!addAssociatedData(ctx->get(), ad) ||
      EVP_CipherUpdate(ctx->get(), out.data(), &len, ciphertext.data(),
                       static_cast<int>(ciphertext.size())) != 1 ||
      EVP_CipherFinal_ex(ctx->get(), out.data() + len, &final_len) != 1) {
    ERR_clear_error();
    // Never hand out a plaintext whose tag did not verify, not even partly.
    std::fill(out.begin(), out.end(), 0);
    return fail(Error::auth("AES-SIV tag did not verify"));
  }
  return out;
}

}  // namespace xdcr::clock
