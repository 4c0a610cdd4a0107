#include "tests/support/sentinel_set.h"

#include <map>
#include <stdexcept>
#include <thread>

#include "tests/support/wait.h"

namespace xdcr::test {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kAdminTimeout{2000};
constexpr std::chrono::milliseconds kPoll{50};
constexpr std::chrono::milliseconds kNoGoodReplicaRetry{200};

std::chrono::milliseconds since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
}

std::chrono::milliseconds remaining(Clock::time_point deadline) {
  return std::max(std::chrono::milliseconds(0),
                  std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
}

/** A flat [field, value, ...] reply (SENTINEL MASTER, one entry of SENTINEL REPLICAS). */
std::map<std::string, std::string> fieldsOf(const RespValue& reply) {
  std::map<std::string, std::string> fields;
  if (!reply.isArray()) {
    return fields;
  }
  const auto& items = reply.array();
  for (size_t i = 0; i + 1 < items.size(); i += 2) {
    if (!items[i].isArray() && !items[i + 1].isArray() && !items[i].isNull() &&
        !items[i + 1].isNull() && !items[i].isInteger() && !items[i + 1].isInteger()) {
      fields[items[i].str()] = items[i + 1].str();
    }
  }
  return fields;
}

/** ROLE as "master" or "slave of P (state)". */
std::string roleOf(const RedisServer& node) {
  RespClient client(node.port(), kAdminTimeout);
  RespValue reply = client.command({"ROLE"});
  if (!reply.isArray() || reply.array().empty()) {
    return reply.toString();
  }
  const auto& items = reply.array();
  if (items[0].str() == "slave" && items.size() >= 4 && items[2].isInteger()) {
    return "slave of " + std::to_string(items[2].integer()) + " (" + items[3].str() + ")";
  }
  return items[0].str();
}

std::string addressReply(const RespValue& reply) {
  if (!reply.isArray() || reply.array().size() != 2) {
    return reply.toString();
  }
  return reply.array()[0].str() + ":" + reply.array()[1].str();
}

}  // namespace

SentinelSet::SentinelSet(SentinelSetOptions options) : options_(std::move(options)) {
  const auto started = Clock::now();
  const auto deadline = started + options_.ready_timeout;
  if (options_.sentinels < 1 || options_.quorum < 1 || options_.quorum > options_.sentinels) {
    throw std::invalid_argument("SentinelSet: " + std::to_string(options_.sentinels) +
                                " sentinels, quorum " + std::to_string(options_.quorum));
  }
  // No diskless-sync delay (default 5 s): the replica links at once, and after a failover too.
  std::vector<std::string> data_args = {"--repl-diskless-sync-delay", "0"};
  data_args.insert(data_args.end(), options_.extra_args.begin(), options_.extra_args.end());
  data_.push_back(std::make_unique<RedisServer>(data_args));
  std::vector<std::string> replica_args = data_args;
  replica_args.insert(replica_args.end(),
                      {"--replicaof", "127.0.0.1", std::to_string(data_[0]->port())});
  data_.push_back(std::make_unique<RedisServer>(replica_args));
  // The replica is linked before the Sentinels start: their first INFO of the master lists it.
  const bool linked = waitUntil(
      [&] {
        try {
          return RespClient(data_[1]->port(), kAdminTimeout)
                     .info("replication")["master_link_status"] == "up";
        } catch (const std::exception&) {
          return false;
        }
      },
      remaining(deadline), kPoll);
  if (!linked) {
    throw std::runtime_error("SentinelSet: replica " + data_[1]->address() + " did not link to " +
                             data_[0]->address() + "\n" + data_[1]->logTail(20));
  }
  const std::string& name = options_.master_name;
  const std::vector<std::string> config = {
      "sentinel monitor " + name + " 127.0.0.1 " + std::to_string(data_[0]->port()) + " " +
          std::to_string(options_.quorum),
      "sentinel down-after-milliseconds " + name + " " +
          std::to_string(options_.down_after.count()),
      "sentinel failover-timeout " + name + " " + std::to_string(options_.failover_timeout.count()),
      "sentinel parallel-syncs " + name + " 1"};
  for (int i = 0; i < options_.sentinels; ++i) {
    sentinels_.push_back(RedisServer::startSentinel(config));
  }
  waitReady(remaining(deadline));
  ready_in_ = since(started);
}

SentinelSet::~SentinelSet() {
  // Sentinels first (members are destroyed in reverse order anyway): no failover while the data
  // nodes go away.
  sentinels_.clear();
  data_.clear();
}

std::vector<std::string> SentinelSet::sentinels() const {
  std::vector<std::string> out;
  for (const auto& s : sentinels_) {
    out.push_back(s->address());
  }
  return out;
}

std::string SentinelSet::currentMaster() {
  std::string why;
  for (const auto& s : sentinels_) {
    try {
      RespValue reply = RespClient(s->port(), kAdminTimeout)
                            .command({"SENTINEL", "GET-MASTER-ADDR-BY-NAME", options_.master_name});
      if (reply.isArray() && reply.array().size() == 2) {
        return addressReply(reply);
      }
      why += "\n  " + s->address() + " answered " + reply.toString();
    } catch (const std::exception& e) {
      why += std::string("\n  ") + e.what();
    }
  }
  throw std::runtime_error("SentinelSet: no Sentinel names the master:" + why);
}

RedisServer& SentinelSet::dataNode(const std::string& address) {
  for (const auto& node : data_) {
    if (node->address() == address) {
      return *node;
    }
  }
  throw std::runtime_error("SentinelSet: the Sentinels name " + address +
                           ", which is neither data node");
}

RedisServer& SentinelSet::master() {
  return dataNode(currentMaster());
}

RedisServer& SentinelSet::replica() {
  RedisServer& m = master();
  return data_[0].get() == &m ? *data_[1] : *data_[0];
}

std::string SentinelSet::readyProblem() {
  RedisServer* master_node = nullptr;
  try {
    master_node = &master();
  } catch (const std::exception& e) {
    return e.what();
  }
  RedisServer* replica_node = data_[0].get() == master_node ? data_[1].get() : data_[0].get();
  const std::string& name = options_.master_name;
  for (const auto& s : sentinels_) {
    try {
      RespClient client(s->port(), kAdminTimeout);
      const std::string where = "Sentinel " + s->address() + ": ";
      std::string addr =
          addressReply(client.command({"SENTINEL", "GET-MASTER-ADDR-BY-NAME", name}));
      if (addr != master_node->address()) {
        return where + "master is " + addr.append(", not ").append(master_node->address());
      }
      auto m = fieldsOf(client.command({"SENTINEL", "MASTER", name}));
      if (m["flags"] != "master") {
        return where + "master flags " + m["flags"];
      }
      if (m["num-other-sentinels"] != std::to_string(sentinels_.size() - 1)) {
        return where + "knows " + m["num-other-sentinels"] + " other Sentinels, not " +
               std::to_string(sentinels_.size() - 1);
      }
      RespValue replicas = client.command({"SENTINEL", "REPLICAS", name});
      bool known = false;
      std::string seen;
      if (replicas.isArray()) {
        for (const auto& r : replicas.array()) {
          auto f = fieldsOf(r);
          seen += " " + f["ip"] + ":" + f["port"] + "(" + f["flags"] + "," +
                  f["master-link-status"] + ")";
          if (f["port"] == std::to_string(replica_node->port()) && f["flags"] == "slave" &&
              f["master-link-status"] == "ok" &&
              f["master-port"] == std::to_string(master_node->port())) {
            known = true;
          }
        }
      }
      if (!known) {
        return where + "does not know replica " + replica_node->address() +
               " as a linked replica; it knows:" + (seen.empty() ? " none" : seen);
      }
      RespValue quorum = client.command({"SENTINEL", "CKQUORUM", name});
      if (quorum.isError()) {
        return where + "CKQUORUM: " + quorum.str();
      }
    } catch (const std::exception& e) {
      return "Sentinel " + s->address() + ": " + e.what();
    }
  }
  try {
    const std::string role = roleOf(*replica_node);
    if (role != "slave of " + std::to_string(master_node->port()) + " (connected)") {
      return "replica " + replica_node->address() + " is " + role;
    }
  } catch (const std::exception& e) {
    return "replica " + replica_node->address() + ": " + e.what();
  }
  return "";
}

std::string SentinelSet::describe() {
  std::string out;
  for (const auto& node : data_) {
    try {
      out += node->address() + ": " + roleOf(*node) + "\n";
    } catch (const std::exception& e) {
      out += node->address() + ": " + e.what() + "\n";
    }
  }
  for (const auto& s : sentinels_) {
    out += "Sentinel " + s->address() + ":\n";
    try {
      RespClient client(s->port(), kAdminTimeout);
      out += "  master " + client.command({"SENTINEL", "MASTER", options_.master_name}).toString() +
             "\n";
      out += "  replicas " +
             client.command({"SENTINEL", "REPLICAS", options_.master_name}).toString() + "\n";
    } catch (const std::exception& e) {
      out += std::string("  ") + e.what() + "\n";
    }
    out += "  log:\n" + s->logTail(10) + "\n";
  }
  return out;
}

void SentinelSet::waitReady(std::chrono::milliseconds timeout) {
  std::string problem;
  const bool ready = waitUntil(
      [&] {
        problem = readyProblem();
        return problem.empty();
      },
      timeout, kPoll);
  if (!ready) {
    throw std::runtime_error("SentinelSet: not ready within " + std::to_string(timeout.count()) +
                             " ms: " + problem + "\n" + describe());
  }
}

SentinelFailoverResult SentinelSet::failover(std::chrono::milliseconds timeout) {
  const auto started = Clock::now();
  const auto deadline = started + timeout;
  SentinelFailoverResult result;
  result.old_master = &master();
  result.new_master = &replica();
  auto fail = [&](const std::string& why) {
    return std::runtime_error("SentinelSet::failover: " + why + " after " +
                              std::to_string(since(started).count()) + " ms\n" + describe());
  };
  RespValue reply;
  for (;;) {
    reply = RespClient(sentinels_[0]->port(), kAdminTimeout)
                .command({"SENTINEL", "FAILOVER", options_.master_name});
    // NOGOODSLAVE: the Sentinel's view of the replica is not fresh enough yet.
    if (!(reply.isError() && reply.str().rfind("NOGOODSLAVE", 0) == 0) ||
        Clock::now() >= deadline) {
      break;
    }
    std::this_thread::sleep_for(kNoGoodReplicaRetry);
  }
  if (reply.isError() || reply.toString() != "OK") {
    throw fail("SENTINEL FAILOVER answered " + reply.toString());
  }
  std::string last;
  const bool switched = waitUntil(
      [&] {
        for (const auto& s : sentinels_) {
          try {
            last = s->address() + " names " +
                   addressReply(
                       RespClient(s->port(), kAdminTimeout)
                           .command({"SENTINEL", "GET-MASTER-ADDR-BY-NAME", options_.master_name}));
            if (last != s->address() + " names " + result.new_master->address()) {
              return false;
            }
          } catch (const std::exception& e) {
            last = e.what();
            return false;
          }
        }
        return true;
      },
      remaining(deadline), kPoll);
  if (!switched) {
    throw fail("not every Sentinel names " + result.new_master->address() + " (" + last + ")");
  }
  result.switched_after = since(started);
  const bool roles = waitUntil(
      [&] {
        try {
          last = result.new_master->address() + " is " + roleOf(*result.new_master) + ", " +
                 result.old_master->address() + " is " + roleOf(*result.old_master);
          return roleOf(*result.new_master) == "master" &&
                 roleOf(*result.old_master) ==
                     "slave of " + std::to_string(result.new_master->port()) + " (connected)";
        } catch (const std::exception& e) {
          last = e.what();
          return false;
        }
      },
      remaining(deadline), kPoll);
  if (!roles) {
    throw fail("roles did not settle: " + last);
  }
  result.settled_after = since(started);
  return result;
}

}  // namespace xdcr::test
