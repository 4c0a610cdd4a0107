#pragma once
// Errors on the data plane: a value, never an exception. Each carries a message for an operator
// (what failed, where, what to do) and whether retrying (reconnecting) can help.

#include <string>
#include <utility>

#include <tl/expected.hpp>

namespace xdcr {

struct Error {
  enum class Kind {
    Io,         // connection refused/reset/closed, timeout: reconnect
    Protocol,   // malformed data from a peer: reconnect, count
    Auth,       // wrong password / missing ACL permission: operator action needed
    Refused,    // the peer refused an operation (e.g. PSYNC not allowed)
    Storage,    // local disk (state_dir)
    Cancelled,  // we are shutting down
    Conflict,   // someone else writes what only this pipeline may: stop, operator action needed
  };
  Kind kind = Kind::Io;
  std::string message;

  static Error io(std::string m) { return {Kind::Io, std::move(m)}; }
  static Error protocol(std::string m) { return {Kind::Protocol, std::move(m)}; }
  static Error auth(std::string m) { return {Kind::Auth, std::move(m)}; }
  static Error refused(std::string m) { return {Kind::Refused, std::move(m)}; }
  static Error storage(std::string m) { return {Kind::Storage, std::move(m)}; }
  static Error cancelled() { return {Kind::Cancelled, "cancelled"}; }
  static Error conflict(std::string m) { return {Kind::Conflict, std::move(m)}; }
};

template <class T>
using Result = tl::expected<T, Error>;
using Status = tl::expected<void, Error>;

inline tl::unexpected<Error> fail(Error e) {
  return tl::unexpected<Error>(std::move(e));
}

}  // namespace xdcr
