#pragma once
// OpenSSL's own reason for the last failure on this thread, for error messages.

#include <openssl/err.h>

#include <string>

namespace xdcr {

/**
 * The oldest queued OpenSSL error as text, and the queue emptied: a stale entry would otherwise
 * be blamed on an unrelated later call on the same thread (TLS and crypto share the queue).
 */
inline std::string opensslReason() {
  unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no detail from OpenSSL";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

}  // namespace xdcr
