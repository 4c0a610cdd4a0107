#include "tests/support/redis_cluster.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>
#include <stdexcept>

#include "common/cluster_slot.h"
#include "tests/support/net.h"
#include "tests/support/subprocess.h"
#include "tests/support/wait.h"

namespace xdcr::test {
namespace {

using Clock = std::chrono::steady_clock;

// Start attempts per node, each with a fresh cluster bus port (RedisServer retries the data port).
constexpr int kNodeStartAttempts = 5;
// Keys per CLUSTER GETKEYSINSLOT / MIGRATE batch, and MIGRATE's own timeout, as redis-cli.
constexpr int kMigrateBatch = 100;
constexpr const char* kMigrateTimeoutMs = "5000";
// Fixture commands time out quickly: a stopped node must not stall a health check for long.
constexpr std::chrono::milliseconds kAdminTimeout{2000};
// MIGRATE of a batch can take longer than an admin command.
constexpr std::chrono::milliseconds kMigrateClientTimeout{10000};
constexpr std::chrono::milliseconds kPoll{20};

std::chrono::milliseconds since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
}

std::chrono::milliseconds remaining(Clock::time_point deadline) {
  return std::max(std::chrono::milliseconds(0),
                  std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
}

std::vector<std::string> splitWords(const std::string& line) {
  std::vector<std::string> words;
  std::istringstream in(line);
  std::string word;
  while (in >> word) {
    words.push_back(word);
  }
  return words;
}

std::string rangesText(const std::vector<std::pair<int, int>>& ranges) {
  std::string out;
  for (const auto& [first, last] : ranges) {
    out += (out.empty() ? "" : ",") + std::to_string(first) +
           (first == last ? "" : "-" + std::to_string(last));
  }
  return out.empty() ? "no slots" : out;
}

/** Slots as ascending inclusive ranges. */
std::vector<std::pair<int, int>> toRanges(std::vector<int> slots) {
  std::sort(slots.begin(), slots.end());
  std::vector<std::pair<int, int>> ranges;
  for (int s : slots) {
    if (!ranges.empty() && ranges.back().second + 1 == s) {
      ranges.back().second = s;
    } else {
      ranges.emplace_back(s, s);
    }
  }
  return ranges;
}

std::vector<ClusterNodeView> parseClusterNodes(const std::string& text) {
  std::vector<ClusterNodeView> nodes;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const std::vector<std::string> words = splitWords(line);
    if (words.size() < 8) {
      continue;
    }
    ClusterNodeView node;
    node.id = words[0];
    // ip:port@cport[,hostname]
    const size_t colon = words[1].find(':');
    const size_t at = words[1].find('@');
    if (colon != std::string::npos && at != std::string::npos && at > colon + 1) {
      node.port = static_cast<uint16_t>(std::stoi(words[1].substr(colon + 1, at - colon - 1)));
    }
    node.flags = words[2];
    node.master_id = words[3];
    node.link = words[7];
    for (size_t i = 8; i < words.size(); ++i) {
      const std::string& slot = words[i];
      if (slot.front() == '[') {
        node.migrations.push_back(slot);
        continue;
      }
      const size_t dash = slot.find('-');
      const int first = std::stoi(slot.substr(0, dash));
      const int last = dash == std::string::npos ? first : std::stoi(slot.substr(dash + 1));
      node.slots.emplace_back(first, last);
    }
    std::sort(node.slots.begin(), node.slots.end());
    nodes.push_back(std::move(node));
  }
  return nodes;
}

bool hasFlag(const std::string& flags, const std::string& flag) {
  size_t pos = 0;
  while (pos <= flags.size()) {
    size_t end = flags.find(',', pos);
    if (end == std::string::npos) {
      end = flags.size();
    }
    if (flags.compare(pos, end - pos, flag) == 0) {
      return true;
    }
    pos = end + 1;
  }
  return false;
}

/** ROLE: "master", or "slave" with the master's port and link state. */
struct Role {
  std::string role;
  uint16_t master_port = 0;
  std::string link;  // connect, connecting, sync, connected, handshake
};

Role readRole(RespClient& client) {
  Role role;
  RespValue reply = client.command({"ROLE"});
  if (!reply.isArray() || reply.array().empty()) {
    role.role = reply.toString();
    return role;
  }
  const auto& items = reply.array();
  role.role = items[0].str();
  if (role.role == "slave" && items.size() >= 4 && items[2].isInteger()) {
    role.master_port = static_cast<uint16_t>(items[2].integer());
    role.link = items[3].str();
  }
  return role;
}

}  // namespace

bool ClusterNodeView::isMaster() const {
  return hasFlag(flags, "master");
}

bool ClusterNodeView::troubled() const {
  return hasFlag(flags, "fail") || hasFlag(flags, "fail?") || hasFlag(flags, "handshake") ||
         hasFlag(flags, "noaddr");
}

const char* failoverModeName(FailoverMode mode) {
  switch (mode) {
    case FailoverMode::Graceful:
      return "graceful";
    case FailoverMode::Force:
      return "FORCE";
    case FailoverMode::Takeover:
      return "TAKEOVER";
  }
  return "?";
}

RedisCluster::RedisCluster(RedisClusterOptions options) : options_(std::move(options)) {
  if (options_.masters < 1 || options_.replicas_per_master < 0) {
    throw std::invalid_argument("RedisCluster: " + std::to_string(options_.masters) + " masters, " +
                                std::to_string(options_.replicas_per_master) +
                                " replicas per master");
  }
  form();
}

RedisCluster::~RedisCluster() = default;

std::unique_ptr<RedisServer> RedisCluster::startNode() {
  std::string reasons;
  for (int attempt = 1; attempt <= kNodeStartAttempts; ++attempt) {
    // The bus port defaults to port + 10000, which may be taken or beyond 65535: choose it too.
    std::vector<std::string> args = {"--cluster-enabled",
                                     "yes",
                                     "--cluster-config-file",
                                     "nodes.conf",
                                     "--cluster-node-timeout",
                                     std::to_string(options_.node_timeout.count()),
                                     "--cluster-port",
                                     std::to_string(freePort()),
                                     "--repl-diskless-sync-delay",
                                     "0",
                                     "--enable-debug-command",
                                     "local"};
    args.insert(args.end(), options_.extra_args.begin(), options_.extra_args.end());
    try {
      return std::make_unique<RedisServer>(args);
    } catch (const std::runtime_error& e) {
      reasons += "\n attempt " + std::to_string(attempt) + ": " + e.what();
    }
  }
  throw std::runtime_error("RedisCluster: a node did not start:" + reasons);
}

RespClient RedisCluster::admin(const RedisServer& node) const {
  return RespClient(node.port(), kAdminTimeout);
}

void RedisCluster::mustOk(const RedisServer& node, const RespCommand& args) {
  RespClient client = admin(node);
  RespValue reply = client.command(args);
  if (reply.isError() || reply.toString() != "OK") {
    std::string text;
    for (const auto& arg : args) {
      text += (text.empty() ? "" : " ") + arg;
    }
    throw std::runtime_error("RedisCluster: " + node.address() + " answered `" + text + "` with " +
                             reply.toString());
  }
}

void RedisCluster::form() {
  const auto started = Clock::now();
  const auto deadline = started + options_.form_timeout;
  const int total = options_.masters * (1 + options_.replicas_per_master);
  for (int i = 0; i < total; ++i) {
    nodes_.push_back(startNode());
  }
  for (const auto& node : nodes_) {
    RespValue id = admin(*node).command({"CLUSTER", "MYID"});
    if (id.isError() || id.type() != RespValue::Type::Bulk) {
      throw std::runtime_error("RedisCluster: CLUSTER MYID on " + node->address() + " answered " +
                               id.toString());
    }
    ids_[node->port()] = id.str();
  }
  // Equal ranges, as redis-cli --cluster create: 0-5460, 5461-10922, 10923-16383 for three.
  const double per_master = static_cast<double>(cluster::kSlots) / options_.masters;
  long first = 0;
  double cursor = 0.0;
  for (int i = 0; i < options_.masters; ++i) {
    long last = std::lround(cursor + per_master - 1);
    if (last > cluster::kSlots - 1 || i == options_.masters - 1) {
      last = cluster::kSlots - 1;
    }
    last = std::max(last, first);
    mustOk(*nodes_[i], {"CLUSTER", "ADDSLOTSRANGE", std::to_string(first), std::to_string(last)});
    first = last + 1;
    cursor += per_master;
  }
  // Distinct epochs up front, as redis-cli does, so no epoch collision has to be resolved.
  for (size_t i = 0; i < nodes_.size(); ++i) {
    mustOk(*nodes_[i], {"CLUSTER", "SET-CONFIG-EPOCH", std::to_string(i + 1)});
  }
  for (size_t i = 1; i < nodes_.size(); ++i) {
    // CLUSTER MEET ip port bus-port: the bus port is what the node listens on for the cluster.
    RespValue bus = admin(*nodes_[i]).command({"CONFIG", "GET", "cluster-port"});
    if (!bus.isArray() || bus.array().size() != 2) {
      throw std::runtime_error("RedisCluster: CONFIG GET cluster-port on " + nodes_[i]->address() +
                               " answered " + bus.toString());
    }
    mustOk(*nodes_[0], {"CLUSTER", "MEET", "127.0.0.1", std::to_string(nodes_[i]->port()),
                        bus.array()[1].str()});
  }
  std::string problem;
  const bool met = waitUntil(
      [&] {
        for (const auto& node : nodes_) {
          try {
            const auto view = viewOf(*node);
            const auto troubled =
                std::count_if(view.begin(), view.end(), [](const auto& v) { return v.troubled(); });
            if (view.size() != nodes_.size() || troubled != 0) {
              problem = node->address() + " knows " + std::to_string(view.size()) + " of " +
                        std::to_string(nodes_.size()) + " nodes, " + std::to_string(troubled) +
                        " of them in handshake or failing";
              return false;
            }
          } catch (const std::exception& e) {
            problem = e.what();
            return false;
          }
        }
        return true;
      },
      remaining(deadline), kPoll);
  if (!met) {
    throw std::runtime_error("RedisCluster: the nodes did not meet within " +
                             std::to_string(options_.form_timeout.count()) + " ms: " + problem +
                             "\n" + describeViews());
  }
  for (int m = 0; m < options_.masters; ++m) {
    for (int r = 0; r < options_.replicas_per_master; ++r) {
      const RedisServer& replica = *nodes_[options_.masters + m * options_.replicas_per_master + r];
      mustOk(replica, {"CLUSTER", "REPLICATE", ids_.at(nodes_[m]->port())});
    }
  }
  waitHealthy(remaining(deadline));
  formed_in_ = since(started);
}

std::vector<ClusterNodeView> RedisCluster::viewOf(const RedisServer& node) {
  RespValue reply = admin(node).command({"CLUSTER", "NODES"});
  if (reply.isError() || reply.type() != RespValue::Type::Bulk) {
    throw std::runtime_error("RedisCluster: CLUSTER NODES on " + node.address() + " answered " +
                             reply.toString());
  }
  return parseClusterNodes(reply.str());
}

std::vector<ClusterNodeView> RedisCluster::anyView(const RedisServer* skip) {
  std::string why;
  for (const auto& node : nodes_) {
    if (node.get() == skip) {
      continue;
    }
    try {
      return viewOf(*node);
    } catch (const std::exception& e) {
      why += std::string("\n  ") + e.what();
    }
  }
  throw std::runtime_error("RedisCluster: no node answered CLUSTER NODES:" + why);
}

std::string RedisCluster::describeViews(const RedisServer* skip) {
  std::string out;
  for (const auto& node : nodes_) {
    if (node.get() == skip) {
      continue;
    }
    out += "view of " + node->address() + ":\n";
    try {
      RespClient client = admin(*node);
      RespValue nodes = client.command({"CLUSTER", "NODES"});
      auto info = client.info("replication");
      out += nodes.type() == RespValue::Type::Bulk ? nodes.str() : nodes.toString() + "\n";
      out += "  role:" + info["role"] + " master_port:" + info["master_port"] +
             " master_link_status:" + info["master_link_status"] + "\n";
    } catch (const std::exception& e) {
      out += std::string("  ") + e.what() + "\n";
    }
  }
  return out;
}

RedisServer& RedisCluster::server(uint16_t port) {
  for (const auto& node : nodes_) {
    if (node->port() == port) {
      return *node;
    }
  }
  throw std::out_of_range("RedisCluster: no node on port " + std::to_string(port));
}

const std::string& RedisCluster::nodeId(const RedisServer& node) const {
  return ids_.at(node.port());
}

std::vector<std::string> RedisCluster::seeds() const {
  std::vector<std::string> out;
  for (const auto& node : nodes_) {
    out.push_back(node->address());
  }
  return out;
}

ClusterClient RedisCluster::client(ClusterClientOptions options) const {
  return ClusterClient(seeds(), options);
}

std::vector<ClusterShard> RedisCluster::shards() {
  const auto view = anyView();
  std::map<std::string, uint16_t> port_of;
  for (const auto& v : view) {
    port_of[v.id] = v.port;
  }
  std::vector<ClusterShard> out;
  for (const auto& v : view) {
    if (!v.isMaster() || v.troubled()) {
      continue;
    }
    ClusterShard shard;
    shard.master = &server(v.port);
    shard.slots = v.slots;
    for (const auto& r : view) {
      if (!r.isMaster() && r.master_id == v.id) {
        shard.replicas.push_back(&server(r.port));
      }
    }
    std::sort(shard.replicas.begin(), shard.replicas.end(),
              [](const RedisServer* a, const RedisServer* b) { return a->port() < b->port(); });
    out.push_back(std::move(shard));
  }
  // By first slot; masters without slots last, by port.
  std::sort(out.begin(), out.end(), [](const ClusterShard& a, const ClusterShard& b) {
    const int fa = a.slots.empty() ? cluster::kSlots : a.slots.front().first;
    const int fb = b.slots.empty() ? cluster::kSlots : b.slots.front().first;
    return fa != fb ? fa < fb : a.master->port() < b.master->port();
  });
  return out;
}

std::vector<RedisServer*> RedisCluster::masters() {
  std::vector<RedisServer*> out;
  for (const auto& shard : shards()) {
    out.push_back(shard.master);
  }
  return out;
}

std::vector<RedisServer*> RedisCluster::replicas() {
  std::vector<RedisServer*> out;
  for (const auto& shard : shards()) {
    out.insert(out.end(), shard.replicas.begin(), shard.replicas.end());
  }
  std::sort(out.begin(), out.end(),
            [](const RedisServer* a, const RedisServer* b) { return a->port() < b->port(); });
  return out;
}

RedisServer& RedisCluster::nodeForSlot(int slot) {
  for (const auto& shard : shards()) {
    for (const auto& [first, last] : shard.slots) {
      if (slot >= first && slot <= last) {
        return *shard.master;
      }
    }
  }
  throw std::runtime_error("RedisCluster: no master serves slot " + std::to_string(slot) + "; " +
                           describe());
}

RedisServer& RedisCluster::masterOf(uint16_t port) {
  const auto view = anyView();
  for (const auto& v : view) {
    if (v.port != port) {
      continue;
    }
    if (v.isMaster()) {
      return server(port);
    }
    for (const auto& m : view) {
      if (m.id == v.master_id) {
        return server(m.port);
      }
    }
  }
  throw std::runtime_error("RedisCluster: no master known for 127.0.0.1:" + std::to_string(port));
}

std::vector<RedisServer*> RedisCluster::replicasOf(const RedisServer& master) {
  for (const auto& shard : shards()) {
    if (shard.master == &master) {
      return shard.replicas;
    }
  }
  return {};
}

std::vector<std::pair<int, int>> RedisCluster::slotRanges(const RedisServer& master) {
  for (const auto& shard : shards()) {
    if (shard.master == &master) {
      return shard.slots;
    }
  }
  return {};
}

std::string RedisCluster::describe() {
  std::string out;
  for (const auto& shard : shards()) {
    out += (out.empty() ? "" : "; ") + shard.master->address() + " [" + rangesText(shard.slots) +
           "] replicas";
    for (const auto* replica : shard.replicas) {
      out += " " + replica->address();
    }
    if (shard.replicas.empty()) {
      out += " none";
    }
  }
  return out;
}

std::string RedisCluster::healthProblem() {
  std::string reference;
  std::string reference_node;
  std::map<std::string, uint16_t> port_of;
  std::vector<ClusterNodeView> first_view;
  for (const auto& node : nodes_) {
    std::vector<ClusterNodeView> view;
    try {
      RespClient client = admin(*node);
      RespValue info = client.command({"CLUSTER", "INFO"});
      if (info.type() != RespValue::Type::Bulk ||
          info.str().find("cluster_state:ok") == std::string::npos) {
        return node->address() + " is not cluster_state:ok";
      }
      view = viewOf(*node);
    } catch (const std::exception& e) {
      return node->address() + " does not answer: " + e.what();
    }
    if (view.size() != nodes_.size()) {
      return node->address() + " knows " + std::to_string(view.size()) + " nodes, not " +
             std::to_string(nodes_.size());
    }
    for (const auto& v : view) {
      port_of[v.id] = v.port;
    }
    std::vector<std::string> lines;
    for (const auto& v : view) {
      if (v.troubled() || v.link != "connected") {
        return node->address() + " sees 127.0.0.1:" + std::to_string(v.port) + " as " + v.flags +
               " " + v.link;
      }
      if (!v.migrations.empty()) {
        return node->address() +
               " sees a slot migration pending on 127.0.0.1:" + std::to_string(v.port) + ": " +
               v.migrations.front();
      }
      lines.push_back(std::to_string(v.port) + (v.isMaster() ? " master " : " replica of ") +
                      (v.isMaster() ? rangesText(v.slots)
                                    : "127.0.0.1:" + std::to_string(port_of[v.master_id])));
    }
    std::sort(lines.begin(), lines.end());
    std::string canonical;
    for (const auto& line : lines) {
      canonical += line + "\n";
    }
    if (reference.empty()) {
      reference = canonical;
      reference_node = node->address();
      first_view = view;
    } else if (canonical != reference) {
      std::string why = node->address() + " and " + reference_node + " disagree:\n";
      why.append(node->address()).append(":\n").append(canonical);
      why.append(reference_node).append(":\n").append(reference);
      return why;
    }
  }
  std::vector<int> owners(cluster::kSlots, 0);
  for (const auto& v : first_view) {
    for (const auto& [first, last] : v.slots) {
      for (int s = first; s <= last; ++s) {
        ++owners[static_cast<size_t>(s)];
      }
    }
  }
  for (int s = 0; s < cluster::kSlots; ++s) {
    if (owners[static_cast<size_t>(s)] != 1) {
      return "slot " + std::to_string(s) + " has " +
             std::to_string(owners[static_cast<size_t>(s)]) + " owners";
    }
  }
  for (const auto& v : first_view) {
    if (v.isMaster()) {
      continue;
    }
    try {
      RespClient client = admin(server(v.port));
      auto info = client.info("replication");
      const std::string master_port = std::to_string(port_of[v.master_id]);
      if (info["role"] != "slave" || info["master_port"] != master_port ||
          info["master_link_status"] != "up") {
        return "replica 127.0.0.1:" + std::to_string(v.port) + " says role:" + info["role"] +
               " master_port:" + info["master_port"] +
               " master_link_status:" + info["master_link_status"] + ", expected a link up to " +
               master_port;
      }
    } catch (const std::exception& e) {
      return "replica 127.0.0.1:" + std::to_string(v.port) + ": " + e.what();
    }
  }
  return "";
}

void RedisCluster::waitHealthy(std::chrono::milliseconds timeout) {
  std::string problem;
  const bool healthy = waitUntil(
      [&] {
        problem = healthProblem();
        return problem.empty();
      },
      timeout, kPoll);
  if (!healthy) {
    throw std::runtime_error("RedisCluster: not healthy within " + std::to_string(timeout.count()) +
                             " ms: " + problem + "\n" + describeViews());
  }
}

ReshardResult RedisCluster::reshard(RedisServer& from, RedisServer& to, int slot_count,
                                    std::chrono::milliseconds timeout) {
  const auto started = Clock::now();
  const auto deadline = started + timeout;
  if (&from == &to || slot_count <= 0) {
    throw std::invalid_argument("RedisCluster::reshard: " + std::to_string(slot_count) +
                                " slots from " + from.address() + " to " + to.address());
  }
  std::vector<int> slots;
  for (const auto& [first, last] : slotRanges(from)) {
    for (int s = first; s <= last && static_cast<int>(slots.size()) < slot_count; ++s) {
      slots.push_back(s);
    }
  }
  if (static_cast<int>(slots.size()) < slot_count) {
    throw std::invalid_argument("RedisCluster::reshard: " + from.address() + " has " +
                                std::to_string(slots.size()) + " slots, not " +
                                std::to_string(slot_count));
  }
  std::vector<RedisServer*> others;
  for (RedisServer* master : masters()) {
    if (master != &from && master != &to) {
      others.push_back(master);
    }
  }
  const std::string& from_id = nodeId(from);
  const std::string& to_id = nodeId(to);
  RespClient src(from.port(), kMigrateClientTimeout);
  RespClient dst(to.port(), kAdminTimeout);
  auto ok = [&](RespClient& client, const RedisServer& node, const RespCommand& args) {
    RespValue reply = client.command(args);
    if (reply.isError() || reply.toString() != "OK") {
      throw std::runtime_error("RedisCluster::reshard: " + node.address() + " answered `" +
                               args[0] + " " + args[1] + " " + args[2] + " " + args[3] + "` with " +
                               reply.toString());
    }
  };
  auto checkTime = [&](int slot) {
    if (Clock::now() >= deadline) {
      throw std::runtime_error("RedisCluster::reshard: not done within " +
                               std::to_string(timeout.count()) + " ms, at slot " +
                               std::to_string(slot) + "\n" + describeViews());
    }
  };
  ReshardResult result;
  for (int slot : slots) {
    checkTime(slot);
    const std::string s = std::to_string(slot);
    ok(dst, to, {"CLUSTER", "SETSLOT", s, "IMPORTING", from_id});
    ok(src, from, {"CLUSTER", "SETSLOT", s, "MIGRATING", to_id});
    for (;;) {
      checkTime(slot);
      RespValue keys = src.command({"CLUSTER", "GETKEYSINSLOT", s, std::to_string(kMigrateBatch)});
      if (!keys.isArray()) {
        throw std::runtime_error("RedisCluster::reshard: CLUSTER GETKEYSINSLOT " + s + " on " +
                                 from.address() + " answered " + keys.toString());
      }
      if (keys.array().empty()) {
        break;
      }
      RespCommand migrate = {"MIGRATE",         "127.0.0.1", std::to_string(to.port()), "", "0",
                             kMigrateTimeoutMs, "KEYS"};
      for (const auto& key : keys.array()) {
        migrate.push_back(key.str());
      }
      RespValue reply = src.command(migrate);
      ++result.batches;
      if (reply.toString() == "OK") {
        result.keys += static_cast<int64_t>(keys.array().size());
      } else if (reply.toString() != "NOKEY" &&
                 !(reply.isError() && reply.str().rfind("IOERR", 0) == 0)) {
        // NOKEY: the batch expired meanwhile; IOERR: a transient socket error, tried again.
        throw std::runtime_error("RedisCluster::reshard: MIGRATE of slot " + s + " (" +
                                 std::to_string(keys.array().size()) + " keys) from " +
                                 from.address() + " to " + to.address() + " answered " +
                                 reply.toString());
      }
    }
    // The new owner first, then the old one, then everyone else (as redis-cli).
    ok(dst, to, {"CLUSTER", "SETSLOT", s, "NODE", to_id});
    ok(src, from, {"CLUSTER", "SETSLOT", s, "NODE", to_id});
    for (RedisServer* other : others) {
      RespClient client = admin(*other);
      ok(client, *other, {"CLUSTER", "SETSLOT", s, "NODE", to_id});
    }
    ++result.slots;
  }
  result.ranges = toRanges(slots);
  waitHealthy(remaining(deadline));
  result.elapsed = since(started);
  return result;
}

FailoverResult RedisCluster::failover(RedisServer& master, FailoverMode mode,
                                      std::chrono::milliseconds timeout) {
  const auto started = Clock::now();
  const auto deadline = started + timeout;
  const std::string what =
      std::string("RedisCluster::failover (") + failoverModeName(mode) + ") of " + master.address();
  RedisServer* replica = nullptr;
  for (RedisServer* candidate : replicasOf(master)) {
    auto info = admin(*candidate).info("replication");
    if (info["master_link_status"] == "up") {
      replica = candidate;
      break;
    }
  }
  if (replica == nullptr) {
    throw std::runtime_error(what + ": no replica with its link up; " + describe());
  }
  FailoverResult result;
  result.old_master = &master;
  result.new_master = replica;

  auto fail = [&](const std::string& why) {
    return std::runtime_error(what + ": " + why + " after " +
                              std::to_string(since(started).count()) + " ms\n" + describeViews() +
                              "\nlog of " + replica->address() + ":\n" + replica->logTail(15) +
                              "\nlog of " + master.address() + ":\n" + master.logTail(15));
  };
  auto waitPromoted = [&] {
    std::string last;
    const bool promoted = waitUntil(
        [&] {
          try {
            RespClient client = admin(*replica);
            last = readRole(client).role;
            return last == "master";
          } catch (const std::exception& e) {
            last = e.what();
            return false;
          }
        },
        remaining(deadline), kPoll);
    if (!promoted) {
      throw fail(replica->address() + " is still " + last);
    }
    result.promoted_after = since(started);
  };

  if (mode == FailoverMode::Force) {
    // A master that stops answering without closing its connections, as a hung host. The
    // StoppedProcess SIGCONTs it whatever happens below.
    StoppedProcess stopped(master.pid());
    mustOk(*replica, {"CLUSTER", "FAILOVER", "FORCE"});
    waitPromoted();
    stopped.resume();
  } else {
    if (mode == FailoverMode::Graceful) {
      mustOk(*replica, {"CLUSTER", "FAILOVER"});
    } else {
      mustOk(*replica, {"CLUSTER", "FAILOVER", "TAKEOVER"});
    }
    waitPromoted();
  }

  std::string last;
  const bool rejoined = waitUntil(
      [&] {
        try {
          RespClient client = admin(master);
          const Role role = readRole(client);
          last = role.role + " of " + std::to_string(role.master_port) + " link " + role.link;
          return role.role == "slave" && role.master_port == replica->port() &&
                 role.link == "connected";
        } catch (const std::exception& e) {
          last = e.what();
          return false;
        }
      },
      remaining(deadline), kPoll);
  if (!rejoined) {
    throw fail("the old master did not become a replica of " + replica->address() + " (" + last +
               ")");
  }
  try {
    waitHealthy(remaining(deadline));
  } catch (const std::runtime_error& e) {
    throw fail(e.what());
  }
  result.settled_after = since(started);
  return result;
}

}  // namespace xdcr::test
