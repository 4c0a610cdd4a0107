#pragma once
// Loopback networking helpers. Tests only ever use 127.0.0.1.

#include <cstdint>

namespace xdcr::test {

/**
 * A TCP port that was free on 127.0.0.1 a moment ago (bind port 0, read it back, close). Another
 * process may take it before it is used, so callers that listen on it retry with a new port.
 */
uint16_t freePort();

}  // namespace xdcr::test
