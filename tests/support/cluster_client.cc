#include "tests/support/cluster_client.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <stdexcept>
#include <thread>

#include "common/cluster_slot.h"

namespace xdcr::test {
namespace {

using Clock = std::chrono::steady_clock;

// Keys per SCAN call in scanAll(), and a bound on the calls per node.
constexpr int kScanCount = 1000;
constexpr int kMaxScanCalls = 100000;
// After this many redirections of one command, pause between the next ones: a slot whose owner
// is changing can bounce a command between two nodes until they agree.
constexpr int kRedirectsBeforePause = 4;

std::string upper(std::string text) {
  for (char& c : text) {
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return text;
}

bool startsWith(const std::string& text, const char* prefix) {
  return text.rfind(prefix, 0) == 0;
}

std::string describeCommand(const RespCommand& args) {
  std::string out;
  for (size_t i = 0; i < args.size() && i < 4; ++i) {
    out += (i == 0 ? "" : " ") + escapeBytes(args[i], 40);
  }
  return out + (args.size() > 4 ? " ..." : "");
}

int64_t elapsedMs(Clock::time_point since) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since).count();
}

}  // namespace

uint16_t portOfAddress(const std::string& address) {
  const std::string prefix = "127.0.0.1:";
  if (!startsWith(address, prefix.c_str()) || address.size() == prefix.size() ||
      address.find_first_not_of("0123456789", prefix.size()) != std::string::npos) {
    throw std::invalid_argument("not a 127.0.0.1:PORT address: \"" + address + "\"");
  }
  const int port = std::stoi(address.substr(prefix.size()));
  if (port <= 0 || port > 65535) {
    throw std::invalid_argument("port out of range in \"" + address + "\"");
  }
  return static_cast<uint16_t>(port);
}

CommandTrace& CommandTrace::operator+=(const CommandTrace& other) {
  moved += other.moved;
  ask += other.ask;
  tryagain += other.tryagain;
  clusterdown += other.clusterdown;
  io_errors += other.io_errors;
  return *this;
}

ClusterClient::ClusterClient(std::vector<std::string> seeds, ClusterClientOptions options)
    : options_(options) {
  if (seeds.empty()) {
    throw std::invalid_argument("ClusterClient: no seed addresses");
  }
  for (const auto& seed : seeds) {
    seeds_.push_back(portOfAddress(seed));
  }
  known_nodes_ = seeds_;
  std::string why;
  for (uint16_t port : seeds_) {
    RespValue reply;
    try {
      reply = connection(port).command({"CLUSTER", "SLOTS"});
    } catch (const RespIoError& e) {
      dropConnection(port);
      why += std::string("\n  ") + e.what();
      continue;
    }
    if (reply.isError() && reply.str().find("cluster support disabled") != std::string::npos) {
      cluster_mode_ = false;
      standalone_port_ = port;
      return;
    }
    ++stats_.slot_refreshes;
    if (loadSlots(reply)) {
      last_good_node_ = port;
      return;
    }
    why += "\n  " + addressOf(port) + ": CLUSTER SLOTS answered " + reply.toString();
  }
  throw RespIoError("ClusterClient: no seed gave a slot map:" + why);
}

ClusterClient::~ClusterClient() = default;

std::string ClusterClient::addressOf(uint16_t port) {
  return "127.0.0.1:" + std::to_string(port);
}

std::optional<size_t> ClusterClient::keyIndex(const RespCommand& args) {
  if (args.size() < 2) {
    return std::nullopt;
  }
  static const std::set<std::string> kKeyless = {
      "ASKING",    "AUTH",      "BGREWRITEAOF", "BGSAVE",    "CLIENT", "CLUSTER",   "COMMAND",
      "CONFIG",    "DBSIZE",    "DEBUG",        "DISCARD",   "ECHO",   "EXEC",      "FLUSHALL",
      "FLUSHDB",   "FUNCTION",  "HELLO",        "INFO",      "KEYS",   "LASTSAVE",  "LATENCY",
      "MONITOR",   "MULTI",     "PING",         "PUBLISH",   "PUBSUB", "RANDOMKEY", "READONLY",
      "READWRITE", "REPLICAOF", "ROLE",         "SAVE",      "SCAN",   "SCRIPT",    "SELECT",
      "SLAVEOF",   "SLOWLOG",   "SPUBLISH",     "SUBSCRIBE", "SWAPDB", "TIME",      "UNWATCH",
      "WAIT"};
  const std::string name = upper(args[0]);
  if (kKeyless.count(name) != 0) {
    return std::nullopt;
  }
  if (name == "OBJECT" || name == "XINFO" || name == "XGROUP" || name == "MEMORY") {
    return args.size() > 2 ? std::optional<size_t>(2) : std::nullopt;
  }
  if (name == "EVAL" || name == "EVALSHA" || name == "EVAL_RO" || name == "EVALSHA_RO" ||
      name == "FCALL" || name == "FCALL_RO") {
    // EVAL script numkeys key...: keyless when numkeys is 0.
    return args.size() > 3 && args[2] != "0" ? std::optional<size_t>(3) : std::nullopt;
  }
  if (name == "XREAD" || name == "XREADGROUP") {
    for (size_t i = 1; i + 1 < args.size(); ++i) {
      if (upper(args[i]) == "STREAMS") {
        return i + 1;
      }
    }
    return std::nullopt;
  }
  return 1;
}

RespClient& ClusterClient::connection(uint16_t port) {
  auto it = connections_.find(port);
  if (it == connections_.end()) {
    it = connections_.emplace(port, RespClient(port, options_.io_timeout)).first;
  }
  return it->second;
}

void ClusterClient::dropConnection(uint16_t port) {
  connections_.erase(port);
}

uint16_t ClusterClient::ownerOf(std::optional<int> slot) const {
  if (!cluster_mode_) {
    return standalone_port_;
  }
  if (slot) {
    return slots_[static_cast<size_t>(*slot)];
  }
  for (uint16_t port : slots_) {
    if (port != 0) {
      return port;  // a keyless command: any master will do, the one of the lowest slot
    }
  }
  return seeds_.front();
}

bool ClusterClient::loadSlots(const RespValue& reply) {
  if (!reply.isArray() || reply.array().empty()) {
    return false;
  }
  std::array<uint16_t, 16384> slots{};
  std::vector<uint16_t> masters;
  std::vector<uint16_t> replicas;
  for (const auto& range : reply.array()) {
    if (!range.isArray() || range.array().size() < 3 || !range.array()[0].isInteger() ||
        !range.array()[1].isInteger() || !range.array()[2].isArray() ||
        range.array()[2].array().size() < 2 || !range.array()[2].array()[1].isInteger()) {
      return false;
    }
    const int64_t start = range.array()[0].integer();
    const int64_t end = range.array()[1].integer();
    const auto port = static_cast<uint16_t>(range.array()[2].array()[1].integer());
    if (start < 0 || end >= cluster::kSlots || start > end || port == 0) {
      return false;
    }
    for (int64_t s = start; s <= end; ++s) {
      slots[static_cast<size_t>(s)] = port;
    }
    masters.push_back(port);
    for (size_t i = 3; i < range.array().size(); ++i) {
      const RespValue& node = range.array()[i];
      if (node.isArray() && node.array().size() >= 2 && node.array()[1].isInteger()) {
        replicas.push_back(static_cast<uint16_t>(node.array()[1].integer()));
      }
    }
  }
  slots_ = slots;
  // Where the next refresh asks: masters first, then replicas, then the seeds.
  std::vector<uint16_t> known;
  for (const auto* list : {&masters, &replicas, &seeds_}) {
    for (uint16_t port : *list) {
      if (std::find(known.begin(), known.end(), port) == known.end()) {
        known.push_back(port);
      }
    }
  }
  known_nodes_ = known;
  return true;
}

bool ClusterClient::tryRefreshSlots(std::string* why) {
  if (!cluster_mode_) {
    return true;
  }
  // The node that answered last time first: a stopped node costs an io_timeout per try.
  std::vector<uint16_t> order = {last_good_node_};
  for (uint16_t port : known_nodes_) {
    if (port != last_good_node_) {
      order.push_back(port);
    }
  }
  for (uint16_t port : order) {
    if (port == 0) {
      continue;
    }
    try {
      RespValue reply = connection(port).command({"CLUSTER", "SLOTS"});
      ++stats_.slot_refreshes;
      if (loadSlots(reply)) {
        last_good_node_ = port;
        return true;
      }
      if (why != nullptr) {
        *why += "\n  " + addressOf(port) + ": CLUSTER SLOTS answered " + reply.toString();
      }
    } catch (const RespIoError& e) {
      dropConnection(port);
      if (why != nullptr) {
        *why += std::string("\n  ") + e.what();
      }
    }
  }
  return false;
}

void ClusterClient::refreshSlots() {
  std::string why;
  if (!tryRefreshSlots(&why)) {
    throw RespIoError("ClusterClient: no node gave a slot map:" + why);
  }
}

std::optional<ClusterClient::Redirect> ClusterClient::parseRedirect(const RespValue& reply) {
  if (!reply.isError()) {
    return std::nullopt;
  }
  const std::string& text = reply.str();
  Redirect redirect;
  if (startsWith(text, "MOVED ")) {
    redirect.ask = false;
  } else if (startsWith(text, "ASK ")) {
    redirect.ask = true;
  } else {
    return std::nullopt;
  }
  // "MOVED <slot> <ip>:<port>"
  const size_t slot_start = text.find(' ') + 1;
  const size_t slot_end = text.find(' ', slot_start);
  const size_t colon = text.rfind(':');
  if (slot_end == std::string::npos || colon == std::string::npos || colon < slot_end) {
    return std::nullopt;
  }
  try {
    redirect.slot = std::stoi(text.substr(slot_start, slot_end - slot_start));
    redirect.port = static_cast<uint16_t>(std::stoi(text.substr(colon + 1)));
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (redirect.slot < 0 || redirect.slot >= cluster::kSlots || redirect.port == 0) {
    return std::nullopt;
  }
  return redirect;
}

bool ClusterClient::isRetryLater(const RespValue& reply) {
  return reply.isError() &&
         (startsWith(reply.str(), "TRYAGAIN") || startsWith(reply.str(), "CLUSTERDOWN"));
}

RespValue ClusterClient::run(std::optional<int> slot, const RespCommand& args) {
  const auto started = Clock::now();
  const auto deadline = started + options_.retry_timeout;
  uint16_t port = ownerOf(slot);
  bool asking = false;
  int redirects = 0;
  for (;;) {
    if (port == 0) {
      // No owner in the map (a slot being reassigned): ask again, later.
      if (Clock::now() >= deadline) {
        throw RespIoError("ClusterClient: no node owns slot " + std::to_string(slot.value_or(-1)) +
                          " after " + std::to_string(elapsedMs(started)) + " ms, for `" +
                          describeCommand(args) + "`");
      }
      std::this_thread::sleep_for(options_.retry_interval);
      tryRefreshSlots();
      port = ownerOf(slot);
      continue;
    }
    RespValue reply;
    try {
      RespClient& client = connection(port);
      if (asking) {
        const std::vector<RespCommand> asked = {{"ASKING"}, args};
        reply = client.pipeline(asked).at(1);
      } else {
        reply = client.command(args);
      }
    } catch (const RespIoError& e) {
      dropConnection(port);
      ++last_trace_.io_errors;
      if (Clock::now() >= deadline) {
        throw RespIoError("ClusterClient: `" + describeCommand(args) + "` got no answer within " +
                          std::to_string(elapsedMs(started)) + " ms; last: " + e.what());
      }
      std::this_thread::sleep_for(options_.retry_interval);
      tryRefreshSlots();
      port = ownerOf(slot);
      asking = false;
      continue;
    }
    if (auto redirect = parseRedirect(reply)) {
      if (++redirects > options_.max_redirects) {
        throw std::runtime_error("ClusterClient: `" + describeCommand(args) + "` redirected " +
                                 std::to_string(redirects - 1) + " times; last: " + reply.str());
      }
      if (redirects > kRedirectsBeforePause) {
        std::this_thread::sleep_for(options_.retry_interval);
      }
      if (redirect->ask) {
        ++last_trace_.ask;
        asking = true;
      } else {
        ++last_trace_.moved;
        tryRefreshSlots();
        slots_[static_cast<size_t>(redirect->slot)] = redirect->port;  // the node's word wins
        asking = false;
      }
      port = redirect->port;
      continue;
    }
    if (isRetryLater(reply)) {
      if (startsWith(reply.str(), "TRYAGAIN")) {
        ++last_trace_.tryagain;
      } else {
        ++last_trace_.clusterdown;
      }
      if (Clock::now() >= deadline) {
        return reply;
      }
      std::this_thread::sleep_for(options_.retry_interval);
      if (startsWith(reply.str(), "CLUSTERDOWN")) {
        tryRefreshSlots();
      }
      port = ownerOf(slot);
      asking = false;
      redirects = 0;  // a new attempt, bounded by the deadline; its redirections by max_redirects
      continue;
    }
    return reply;
  }
}

RespValue ClusterClient::command(const RespCommand& args) {
  const std::optional<size_t> index = keyIndex(args);
  if (index) {
    return commandAt(args, *index);
  }
  last_trace_ = {};
  ++stats_.commands;
  RespValue reply = run(std::nullopt, args);
  stats_.redirects += last_trace_;
  return reply;
}

RespValue ClusterClient::commandAt(const RespCommand& args, size_t key_index) {
  if (key_index >= args.size()) {
    throw std::invalid_argument("ClusterClient: key index " + std::to_string(key_index) +
                                " beyond `" + describeCommand(args) + "`");
  }
  return commandOnSlot(cluster::keySlot(args[key_index]), args);
}

RespValue ClusterClient::commandOnSlot(int slot, const RespCommand& args) {
  if (slot < 0 || slot >= cluster::kSlots) {
    throw std::invalid_argument("ClusterClient: slot " + std::to_string(slot));
  }
  last_trace_ = {};
  ++stats_.commands;
  RespValue reply = run(slot, args);
  stats_.redirects += last_trace_;
  return reply;
}

RespValue ClusterClient::transaction(const std::vector<RespCommand>& commands) {
  if (commands.empty()) {
    throw std::invalid_argument("ClusterClient::transaction: no commands");
  }
  std::optional<int> slot;
  for (const auto& args : commands) {
    const std::optional<size_t> index = keyIndex(args);
    if (!index) {
      throw std::invalid_argument("ClusterClient::transaction: `" + describeCommand(args) +
                                  "` has no key to route by");
    }
    const int s = cluster::keySlot(args[*index]);
    if (slot && *slot != s) {
      throw std::invalid_argument("ClusterClient::transaction: `" + describeCommand(args) +
                                  "` is in slot " + std::to_string(s) + ", not " +
                                  std::to_string(*slot) + " (use one hash tag)");
    }
    slot = s;
  }
  last_trace_ = {};
  ++stats_.commands;
  const auto started = Clock::now();
  const auto deadline = started + options_.retry_timeout;
  uint16_t port = ownerOf(slot);
  bool asking = false;
  int redirects = 0;
  RespValue result;
  for (;;) {
    std::vector<RespCommand> unit;
    if (asking) {
      unit.push_back({"ASKING"});  // the flag lasts until EXEC inside MULTI
    }
    unit.push_back({"MULTI"});
    unit.insert(unit.end(), commands.begin(), commands.end());
    unit.push_back({"EXEC"});
    std::vector<RespValue> replies;
    bool retry_later = false;
    std::optional<Redirect> redirect;
    try {
      if (port == 0) {
        throw RespIoError("no node owns slot " + std::to_string(*slot));
      }
      replies = connection(port).pipeline(unit);
    } catch (const RespIoError& e) {
      dropConnection(port);
      ++last_trace_.io_errors;
      if (Clock::now() >= deadline) {
        stats_.redirects += last_trace_;
        throw RespIoError("ClusterClient: transaction `" + describeCommand(commands.front()) +
                          " ...` got no answer within " + std::to_string(elapsedMs(started)) +
                          " ms; last: " + e.what());
      }
      std::this_thread::sleep_for(options_.retry_interval);
      tryRefreshSlots();
      port = ownerOf(slot);
      asking = false;
      continue;
    }
    result = replies.back();
    if (!result.isError()) {
      break;  // EXEC's array (or nil after a failed WATCH)
    }
    // EXECABORT after a queued command was redirected, or EXEC itself redirected / TRYAGAIN.
    for (size_t i = asking ? 1 : 0; i < replies.size() && !redirect && !retry_later; ++i) {
      redirect = parseRedirect(replies[i]);
      retry_later = isRetryLater(replies[i]);
    }
    if (redirect) {
      if (++redirects > options_.max_redirects) {
        stats_.redirects += last_trace_;
        throw std::runtime_error("ClusterClient: transaction on slot " + std::to_string(*slot) +
                                 " redirected " + std::to_string(redirects - 1) + " times");
      }
      if (redirects > kRedirectsBeforePause) {
        std::this_thread::sleep_for(options_.retry_interval);
      }
      if (redirect->ask) {
        ++last_trace_.ask;
        asking = true;
      } else {
        ++last_trace_.moved;
        tryRefreshSlots();
        slots_[static_cast<size_t>(redirect->slot)] = redirect->port;
        asking = false;
      }
      port = redirect->port;
      continue;
    }
    if (retry_later && Clock::now() < deadline) {
      const bool down = result.str().find("CLUSTERDOWN") != std::string::npos;
      if (down) {
        ++last_trace_.clusterdown;
      } else {
        ++last_trace_.tryagain;
      }
      std::this_thread::sleep_for(options_.retry_interval);
      if (down) {
        tryRefreshSlots();
      }
      port = ownerOf(slot);
      asking = false;
      redirects = 0;
      continue;
    }
    break;  // another error: the caller's to judge
  }
  stats_.redirects += last_trace_;
  return result;
}

std::vector<RespValue> ClusterClient::pipeline(const std::vector<RespCommand>& commands) {
  last_trace_ = {};
  stats_.commands += static_cast<int64_t>(commands.size());
  std::vector<RespValue> replies(commands.size());
  std::vector<std::optional<int>> slots(commands.size());
  std::map<uint16_t, std::vector<size_t>> groups;
  for (size_t i = 0; i < commands.size(); ++i) {
    const std::optional<size_t> index = keyIndex(commands[i]);
    if (index) {
      slots[i] = cluster::keySlot(commands[i][*index]);
    }
    groups[ownerOf(slots[i])].push_back(i);
  }
  std::vector<size_t> redo;
  bool moved = false;
  for (const auto& [port, indexes] : groups) {
    if (port == 0) {
      redo.insert(redo.end(), indexes.begin(), indexes.end());
      continue;
    }
    std::vector<RespCommand> batch;
    batch.reserve(indexes.size());
    for (size_t i : indexes) {
      batch.push_back(commands[i]);
    }
    try {
      std::vector<RespValue> batch_replies = connection(port).pipeline(batch);
      for (size_t j = 0; j < indexes.size(); ++j) {
        const RespValue& reply = batch_replies[j];
        auto redirect = parseRedirect(reply);
        if (redirect || isRetryLater(reply)) {
          // Counted here; run() counts what happens when it is sent again.
          if (redirect) {
            ++(redirect->ask ? last_trace_.ask : last_trace_.moved);
            moved = moved || !redirect->ask;
          } else if (startsWith(reply.str(), "TRYAGAIN")) {
            ++last_trace_.tryagain;
          } else {
            ++last_trace_.clusterdown;
          }
          redo.push_back(indexes[j]);
        } else {
          replies[indexes[j]] = std::move(batch_replies[j]);
        }
      }
    } catch (const RespIoError&) {
      dropConnection(port);
      ++last_trace_.io_errors;
      redo.insert(redo.end(), indexes.begin(), indexes.end());
    }
  }
  if (!redo.empty()) {
    if (moved) {
      tryRefreshSlots();
    }
    std::sort(redo.begin(), redo.end());
    for (size_t i : redo) {
      replies[i] = run(slots[i], commands[i]);
    }
  }
  stats_.redirects += last_trace_;
  return replies;
}

RespPipeline ClusterClient::pipelineFunction() {
  return [this](const std::vector<RespCommand>& commands) { return pipeline(commands); };
}

std::string ClusterClient::nodeForSlot(int slot) const {
  const uint16_t port = ownerOf(slot);
  return port == 0 ? "" : addressOf(port);
}

std::vector<std::string> ClusterClient::masterAddresses() const {
  std::set<uint16_t> ports;
  if (!cluster_mode_) {
    ports.insert(standalone_port_);
  } else {
    for (uint16_t port : slots_) {
      if (port != 0) {
        ports.insert(port);
      }
    }
  }
  std::vector<std::string> out;
  for (uint16_t port : ports) {
    out.push_back(addressOf(port));
  }
  return out;
}

std::vector<std::string> ClusterClient::scanAll(const std::string& match) {
  std::vector<std::string> keys;
  for (const auto& address : masterAddresses()) {
    const uint16_t port = portOfAddress(address);
    std::string cursor = "0";
    for (int calls = 0;; ++calls) {
      if (calls >= kMaxScanCalls) {
        throw std::runtime_error("ClusterClient::scanAll: SCAN of " + address +
                                 " did not end after " + std::to_string(kMaxScanCalls) + " calls");
      }
      RespValue reply;
      try {
        reply = connection(port).command(
            {"SCAN", cursor, "MATCH", match, "COUNT", std::to_string(kScanCount)});
      } catch (const RespIoError&) {
        dropConnection(port);
        throw;
      }
      if (!reply.isArray() || reply.array().size() != 2 || !reply.array()[1].isArray()) {
        throw std::runtime_error("ClusterClient::scanAll: SCAN on " + address + " answered " +
                                 reply.toString());
      }
      for (const auto& key : reply.array()[1].array()) {
        keys.push_back(key.str());
      }
      cursor = reply.array()[0].str();
      if (cursor == "0") {
        break;
      }
    }
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

std::vector<std::pair<std::string, RespValue>> ClusterClient::forEachMaster(
    const RespCommand& args) {
  std::vector<std::pair<std::string, RespValue>> out;
  for (const auto& address : masterAddresses()) {
    const uint16_t port = portOfAddress(address);
    try {
      out.emplace_back(address, connection(port).command(args));
    } catch (const RespIoError&) {
      dropConnection(port);
      throw;
    }
  }
  return out;
}

KeySpaceSnapshot snapshotKeySpace(ClusterClient& client, const std::string& match) {
  std::vector<std::string> keys = client.scanAll(match);
  keys.erase(std::remove_if(keys.begin(), keys.end(),
                            [](const std::string& key) { return isAgentMarkerKey(key); }),
             keys.end());
  return snapshotKeys(client.pipelineFunction(), keys);
}

}  // namespace xdcr::test
