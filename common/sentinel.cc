#include "common/sentinel.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <charconv>
#include <sstream>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/redis_conn.h"
#include "common/resp_value.h"

namespace xdcr::sentinel {
namespace {

using namespace net::experimental::awaitable_operators;
constexpr auto use_nothrow = net::as_tuple(net::use_awaitable);

std::string where(const config::NodeAddress& node) {
  return node.host.find(':') != std::string::npos
             ? "[" + node.host + "]:" + std::to_string(node.port)
             : node.str();
}

std::string joined(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

bool parsePort(std::string_view text, uint16_t& port) {
  unsigned value = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || p != text.data() + text.size() || value == 0 || value > 65535) {
    return false;
  }
  port = static_cast<uint16_t>(value);
  return true;
}

/** The `role:` of an INFO replication reply ("master", "slave"), or "". */
std::string roleFromInfo(const std::string& info) {
  std::istringstream in(info);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind("role:", 0) == 0) return line.substr(5);
  }
  return "";
}

/** What the node at `node` says it is: "master", "slave" (ROLE, or INFO replication). */
net::awaitable<Result<std::string>> roleOf(const config::ClusterConfig& cluster,
                                           const RedisEndpoint& node,
                                           std::chrono::milliseconds timeout) {
  RedisConnection conn(co_await net::this_coro::executor,
                       fmt::format("cluster {}: node {}", cluster.name, node.address()));
  if (auto s = co_await conn.connect(node, timeout); !s) co_return fail(s.error());
  const std::vector<std::vector<std::string>> role = {{"ROLE"}};
  auto r = co_await conn.callMany(role, timeout);
  if (!r) co_return fail(r.error());
  const resp::Value& v = (*r)[0];
  if (!v.isError() && v.type == resp::ReplyType::Array && !v.elements.empty()) {
    co_return v.elements[0].str;
  }
  // A user without +role may still have +info (README, Minimal ACLs).
  const std::vector<std::vector<std::string>> info = {{"INFO", "replication"}};
  auto i = co_await conn.callMany(info, timeout);
  if (!i) co_return fail(i.error());
  if ((*i)[0].isError()) {
    co_return fail(Error::auth(fmt::format(
        "cannot tell whether it is a master: ROLE refused ({}) and INFO refused ({}); grant the "
        "cluster's user +role or +info",
        v.describe(), (*i)[0].describe())));
  }
  std::string found = roleFromInfo((*i)[0].str);
  if (found.empty()) co_return fail(Error::protocol("INFO replication has no role: field"));
  co_return found;
}

}  // namespace

bool parseSwitchMaster(const std::string& payload, std::string& name, std::string& new_address) {
  std::istringstream in(payload);
  std::string old_ip, old_port, new_ip, new_port, extra;
  if (!(in >> name >> old_ip >> old_port >> new_ip >> new_port) || (in >> extra)) return false;
  uint16_t port = 0;
  if (!parsePort(new_port, port)) return false;
  new_address = new_ip + ":" + std::to_string(port);  // as RedisEndpoint::address()
  return true;
}

net::awaitable<Result<RedisEndpoint>> discoverMaster(const config::ClusterConfig& cluster,
                                                     std::chrono::milliseconds timeout) {
  auto ex = co_await net::this_coro::executor;
  std::vector<std::string> said;  // "Sentinel h:p: what it said", one per Sentinel tried
  bool all_auth = !cluster.sentinels.empty();
  for (const auto& s : cluster.sentinels) {
    const std::string at = where(s);
    auto note = [&](const std::string& what, Error::Kind kind = Error::Kind::Io) {
      said.push_back(fmt::format("Sentinel {}: {}", at, what));
      all_auth = all_auth && kind == Error::Kind::Auth;
    };
    RedisConnection conn(ex, fmt::format("cluster {}: Sentinel {}", cluster.name, at));
    const RedisEndpoint endpoint = cluster.sentinelEndpoint(s);
    if (auto c = co_await conn.connect(endpoint, timeout); !c) {
      note(c.error().message, c.error().kind);
      continue;
    }
    const std::vector<std::vector<std::string>> ask = {
        {"SENTINEL", "get-master-addr-by-name", cluster.master_name}};
    auto r = co_await conn.callMany(ask, timeout);
    conn.close();
    if (!r) {
      note(r.error().message, r.error().kind);
      continue;
    }
    const resp::Value& v = (*r)[0];
    if (v.isError()) {
      const bool perm = v.str.rfind("NOPERM", 0) == 0 || v.str.rfind("NOAUTH", 0) == 0;
      note(fmt::format("SENTINEL get-master-addr-by-name refused: {}{}", v.str,
                       perm ? "; set sentinel_username/sentinel_password"
                            : " (is this address a Sentinel?)"),
           perm ? Error::Kind::Auth : Error::Kind::Refused);
      continue;
    }
    if (v.isNull()) {
      note(fmt::format("monitors no master named \"{}\"; check master_name", cluster.master_name),
           Error::Kind::Refused);
      continue;
    }
    uint16_t port = 0;
    if (v.type != resp::ReplyType::Array || v.elements.size() != 2 ||
        !parsePort(v.elements[1].str, port)) {
      note("unexpected reply " + v.describe() + " to SENTINEL get-master-addr-by-name",
           Error::Kind::Protocol);
      continue;
    }
    RedisEndpoint node = cluster.endpointAt(v.elements[0].str, port);
    auto role = co_await roleOf(cluster, node, timeout);
    if (!role) {
      note(fmt::format("names master {}, which cannot be used: {}", node.address(),
                       role.error().message),
           role.error().kind);
      continue;
    }
    if (*role != "master") {
      // A failover in progress (the Sentinel still names the old node, already demoted) or a
      // Sentinel that missed the switch: never attach to a node that is not a master.
      note(fmt::format("names master {}, but that node says it is a {} (a failover in "
                       "progress?)",
                       node.address(), *role),
           Error::Kind::Refused);
      continue;
    }
    if (!said.empty()) {
      spdlog::info("cluster {}: master {} found through Sentinel {} ({})", cluster.name,
                   node.address(), at, joined(said));
    }
    co_return node;
  }
  co_return fail(Error{all_auth ? Error::Kind::Auth : Error::Kind::Io,
                       fmt::format("cluster {}: no Sentinel named a usable master \"{}\": {}",
                                   cluster.name, cluster.master_name, joined(said))});
}

net::awaitable<Result<RedisEndpoint>> resolveEndpoint(const config::ClusterConfig& cluster,
                                                      std::chrono::milliseconds timeout) {
  if (cluster.isSentinel()) co_return co_await discoverMaster(cluster, timeout);
  co_return cluster.endpoint();
}

net::awaitable<Status> watchSwitchMaster(const config::ClusterConfig& cluster,
                                         const std::string& current_master) {
  auto ex = co_await net::this_coro::executor;
  using std::chrono::milliseconds;
  const milliseconds timeout = std::min<milliseconds>(cluster.link_timeout, milliseconds(10'000));
  // Ping the subscription well within link_timeout: a Sentinel silent for that long is dead.
  const milliseconds ping_every =
      std::clamp<milliseconds>(cluster.link_timeout / 3, milliseconds(100), milliseconds(5'000));
  for (;;) {
    std::vector<std::string> said;
    bool subscribed = false;
    for (const auto& s : cluster.sentinels) {
      const std::string at = where(s);
      RedisConnection conn(ex, fmt::format("cluster {}: Sentinel {} (watch)", cluster.name, at));
      const RedisEndpoint endpoint = cluster.sentinelEndpoint(s);
      if (auto c = co_await conn.connect(endpoint, timeout); !c) {
        said.push_back(fmt::format("Sentinel {}: {}", at, c.error().message));
        continue;
      }
      std::string out;
      resp::appendCommand(out, {"SUBSCRIBE", "+switch-master"});
      if (auto w = co_await conn.writeAll(out); !w) {
        said.push_back(fmt::format("Sentinel {}: {}", at, w.error().message));
        continue;
      }
      auto ok = co_await conn.readValue(timeout);
      if (!ok || ok->type != resp::ReplyType::Array || ok->elements.empty() ||
          ok->elements[0].str != "subscribe") {
        said.push_back(fmt::format("Sentinel {}: SUBSCRIBE +switch-master failed: {}", at,
                                   ok ? ok->describe() : ok.error().message));
        continue;
      }
      subscribed = true;
      // A switch between the discovery and this subscription would never be announced again.
      auto now_master = co_await discoverMaster(cluster, timeout);
      if (now_master && now_master->address() != current_master) {
        spdlog::warn("cluster {}: the master \"{}\" is now {}, no longer {}", cluster.name,
                     cluster.master_name, now_master->address(), current_master);
        co_return Status{};
      }
      auto last_heard = std::chrono::steady_clock::now();
      std::string why;
      while (why.empty()) {
        // Whole messages already buffered first; then wait for more, pinging when quiet.
        resp::Value msg;
        auto pr = resp::parseValue(conn.buffer().data(), msg);
        if (pr.status == resp::ParseStatus::Error) {
          why = "malformed message: " + pr.error;
          break;
        }
        if (pr.status == resp::ParseStatus::Complete) {
          conn.buffer().consume(pr.consumed);
          last_heard = std::chrono::steady_clock::now();
          std::string name, moved_to;
          if (msg.type == resp::ReplyType::Array && msg.elements.size() == 3 &&
              msg.elements[0].str == "message" && msg.elements[1].str == "+switch-master" &&
              parseSwitchMaster(msg.elements[2].str, name, moved_to) &&
              name == cluster.master_name && moved_to != current_master) {
            spdlog::warn(
                "cluster {}: Sentinel {} announced +switch-master: the master \"{}\" "
                "moved from {} to {}",
                cluster.name, at, name, current_master, moved_to);
            co_return Status{};
          }
          continue;  // a pong, or another master's switch
        }
        net::steady_timer timer(ex, ping_every);
        auto r = co_await (conn.readSome() || timer.async_wait(use_nothrow));
        if (r.index() == 0) {
          if (auto& got = std::get<0>(r); !got) why = got.error().message;
          continue;
        }
        if (std::chrono::steady_clock::now() - last_heard >= cluster.link_timeout) {
          why = fmt::format("silent for {} ms (link_timeout)", cluster.link_timeout.count());
          break;
        }
        std::string ping;
        resp::appendCommand(ping, {"PING"});
        if (auto w = co_await conn.writeAll(ping); !w) why = w.error().message;
      }
      spdlog::warn("cluster {}: watching Sentinel {} for +switch-master: {}; trying the next one",
                   cluster.name, at, why);
      said.push_back(fmt::format("Sentinel {}: {}", at, why));
    }
    if (!subscribed) {
      co_return fail(
          Error::io(fmt::format("cluster {}: cannot watch any Sentinel for +switch-master: {}",
                                cluster.name, joined(said))));
    }
    // Every subscription ended: start over, not in a tight loop.
    net::steady_timer pause(ex, std::chrono::seconds(1));
    co_await pause.async_wait(use_nothrow);
  }
}

net::awaitable<Error> untilMasterMoves(const config::ClusterConfig& cluster,
                                       std::string current_master, std::string label) {
  for (;;) {
    auto moved = co_await watchSwitchMaster(cluster, current_master);
    if (moved) {
      co_return Error::io(fmt::format(
          "{}: the Sentinels moved the master away from {}; reconnecting to the new master", label,
          current_master));
    }
    spdlog::warn("{}: {}; a master switch would be noticed only when the connection ends", label,
                 moved.error().message);
    net::steady_timer pause(co_await net::this_coro::executor, std::chrono::seconds(5));
    co_await pause.async_wait(use_nothrow);
  }
}

}  // namespace xdcr::sentinel
