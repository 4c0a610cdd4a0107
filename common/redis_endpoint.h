#pragma once
// Where and how to reach one Redis server: address, credentials and TLS settings. Plain data,
// no I/O and no heavy includes, so config/ can build it from a ClusterConfig
// (`ClusterConfig::endpoint()`) without linking common/. `RedisConnection::connect()` uses it.

#include <cstdint>
#include <optional>
#include <string>

namespace xdcr {

/** interface.md §2 `tls:`. Present on an endpoint = TLS on. */
struct TlsOptions {
  std::string ca_file;      // trust anchors (PEM); empty = the system trust store
  std::string cert_file;    // client certificate (PEM) for mutual TLS; with key_file
  std::string key_file;     // its private key (PEM, unencrypted)
  std::string server_name;  // SNI and the name checked; empty = the endpoint's host
  bool verify = true;       // false: no certificate or name check (explicit opt-out only)
};

struct RedisEndpoint {
  std::string cluster;  // the cluster's name, for messages
  std::string host;
  uint16_t port = 6379;
  std::string username;                 // ACL user; empty = the default user
  std::optional<std::string> password;  // resolved secret; nullopt = no AUTH. Never print it.
  std::optional<TlsOptions> tls;
  /** A memcached server (type: memcached): it speaks memcached's text protocol, not RESP, so
   *  RESP-only checks (PING, INFO, TIME) must not be sent to it. */
  bool memcached = false;

  std::string address() const { return host + ":" + std::to_string(port); }
};

}  // namespace xdcr
