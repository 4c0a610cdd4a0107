#include "common/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <nlohmann/json.hpp>

#include <ctime>

namespace xdcr {
namespace {

/** One JSON object per line: ts (RFC 3339, UTC, ms), level, msg. */
class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    using namespace std::chrono;
    auto ms = duration_cast<milliseconds>(msg.time.time_since_epoch()).count();
    std::time_t secs = static_cast<std::time_t>(ms / 1000);
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char ts[40];
    size_t n = std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
    std::snprintf(ts + n, sizeof ts - n, ".%03lldZ", static_cast<long long>(ms % 1000));
    nlohmann::json j;
    j["ts"] = ts;
    j["level"] = spdlog::level::to_string_view(msg.level).data();
    const std::string_view payload(msg.payload.data(), msg.payload.size());
    j["msg"] = std::string(payload);
    const LogFields f = parseLogFields(payload);
    if (f.pipelines.size() == 1) j["pipeline"] = f.pipelines.front();
    if (f.pipelines.size() > 1) j["pipelines"] = f.pipelines;
    if (!f.shard.empty()) j["shard"] = f.shard;
    if (!f.cluster.empty()) {
      j["cluster"] = f.cluster;
      j["cluster_role"] = f.cluster_role;
    }
    if (!f.node.empty()) j["node"] = f.node;
    if (!f.key.empty()) j["key"] = f.key;
    auto text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    dest.append(text.data(), text.data() + text.size());
    dest.push_back('\n');
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

/** host:port at the start of `s` (a bracketed IPv6 host too); "" when none. */
std::string_view hostPort(std::string_view s) {
  size_t i = 0;
  if (!s.empty() && s[0] == '[') {
    i = s.find(']');
    if (i == std::string_view::npos) return {};
    ++i;
  } else {
    while (i < s.size() && s[i] != ':' && s[i] != ' ' && s[i] != ')' && s[i] != ',') ++i;
  }
  if (i == 0 || i >= s.size() || s[i] != ':') return {};
  size_t j = i + 1;
  while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
  return j > i + 1 ? s.substr(0, j) : std::string_view{};
}

}  // namespace

LogFields parseLogFields(std::string_view msg) {
  LogFields f;
  // "pipeline NAME: " or "pipelines A, B: " (names have no ':' or ' ').
  for (std::string_view prefix : {std::string_view("pipelines "), std::string_view("pipeline ")}) {
    if (msg.rfind(prefix, 0) != 0) continue;
    const size_t colon = msg.find(": ", prefix.size());
    if (colon == std::string_view::npos) break;
    std::string_view names = msg.substr(prefix.size(), colon - prefix.size());
    while (!names.empty()) {
      const size_t comma = names.find(", ");
      std::string_view name = names.substr(0, comma);
      if (name.find(' ') != std::string_view::npos) {
        f.pipelines.clear();  // not a list of names: some other sentence
        break;
      }
      f.pipelines.emplace_back(name);
      if (comma == std::string_view::npos) break;
      names.remove_prefix(comma + 2);
    }
    break;
  }
  if (f.pipelines.size() == 1) {
    const size_t at = f.pipelines.front().find('@');
    if (at != std::string::npos) {
      f.shard = f.pipelines.front().substr(at + 1);
      f.pipelines.front().resize(at);
    }
  }
  // "source CLUSTER (ADDRESS" or "target CLUSTER (ADDRESS": the first one names the cluster.
  size_t best = std::string_view::npos;
  for (std::string_view role : {std::string_view("source "), std::string_view("target ")}) {
    for (size_t pos = msg.find(role); pos != std::string_view::npos && pos < best;
         pos = msg.find(role, pos + 1)) {
      if (pos > 0 && msg[pos - 1] != ' ') continue;
      const size_t name_at = pos + role.size();
      const size_t paren = msg.find(" (", name_at);
      if (paren == std::string_view::npos) break;
      const std::string_view name = msg.substr(name_at, paren - name_at);
      if (name.empty() || name.find(' ') != std::string_view::npos) continue;
      best = pos;
      f.cluster = std::string(name);
      f.cluster_role = std::string(role.substr(0, role.size() - 1));
      f.node = std::string(hostPort(msg.substr(paren + 2)));
      break;
    }
  }
  // "node HOST:PORT" is the node itself (a cluster's address may be a seed or a Sentinel).
  if (const size_t n = msg.find(" node "); n != std::string_view::npos) {
    const std::string_view hp = hostPort(msg.substr(n + 6));
    if (!hp.empty()) f.node = std::string(hp);
  }
  // key "…" (as logged: escapes kept).
  if (const size_t k = msg.find("key \""); k != std::string_view::npos) {
    size_t i = k + 5;
    std::string key;
    for (; i < msg.size() && msg[i] != '"'; ++i) {
      if (msg[i] == '\\' && i + 1 < msg.size()) key.push_back(msg[i++]);
      key.push_back(msg[i]);
    }
    if (i < msg.size()) f.key = std::move(key);
  }
  return f;
}

void setupLogging(std::string_view level, LogFormat format) {
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>("xdcr", sink);
  if (format == LogFormat::Json) {
    logger->set_formatter(std::make_unique<JsonFormatter>());
  } else {
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%eZ %^%-5l%$ %v", spdlog::pattern_time_type::utc);
  }
  logger->set_level(spdlog::level::from_str(std::string(level)));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

}  // namespace xdcr
