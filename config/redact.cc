// The config as JSON for humans (`GET /config`, logs at start-up). Key order follows the YAML
// schema (ordered_json) so that the output reads like the file; durations are written the way a
// user would write them ("30s"), and every secret is replaced by Secret::describe().

#include <nlohmann/json.hpp>
#include <string>

#include "config/config.h"
#include "config/internal.h"

namespace xdcr::config {
namespace {

using Json = nlohmann::ordered_json;
using internal::formatDuration;

const char* toString(LogLevel level) {
  switch (level) {
    case LogLevel::Trace:
      return "trace";
    case LogLevel::Debug:
      return "debug";
    case LogLevel::Info:
      return "info";
    case LogLevel::Warn:
      return "warn";
    case LogLevel::Error:
      return "error";
  }
  return "info";
}

const char* toString(LogFormat format) {
  return format == LogFormat::Json ? "json" : "text";
}

const char* toString(SkewAction action) {
  switch (action) {
    case SkewAction::Warn:
      return "warn";
    case SkewAction::Pause:
      return "pause";
    case SkewAction::Compensate:
      return "compensate";
  }
  return "warn";
}

Json clusterJson(const ClusterConfig& cluster) {
  Json json;
  json["type"] = cluster.type;
  auto nodes = [](const std::vector<NodeAddress>& list) {
    Json out = Json::array();
    for (const auto& n : list) {
      out.push_back(internal::joinHostPort(n.host, n.port));
    }
    return out;
  };
  switch (cluster.kind) {
    case ClusterKind::Redis:
      json["address"] = internal::joinHostPort(cluster.host, cluster.port);
      break;
    case ClusterKind::Memcached:
      json["address"] = internal::joinHostPort(cluster.host, cluster.port);
      json["non_strings"] = cluster.non_strings == NonStrings::Dump   ? "dump"
                            : cluster.non_strings == NonStrings::Json ? "json"
                                                                      : "refuse";
      break;
    case ClusterKind::RedisCluster:
      json["addresses"] = nodes(cluster.seeds);
      json["read_from"] = cluster.read_from == ReadFrom::Replica ? "replica" : "master";
      if (!cluster.slots.empty()) json["slots"] = cluster.slotsText();
      break;
    case ClusterKind::RedisSentinel:
      json["sentinels"] = nodes(cluster.sentinels);
      json["master_name"] = cluster.master_name;
      if (!cluster.sentinel_username.empty()) {
        json["sentinel_username"] = cluster.sentinel_username;
      }
      if (cluster.sentinel_password.present()) {
        json["sentinel_password"] = cluster.sentinel_password.describe();
      }
      break;
  }
  json["link_timeout"] = formatDuration(cluster.link_timeout);
  // bytes; "auto": derived from each snapshot's size; 0: no spool
  if (cluster.spool_limit) {
    json["spool_limit"] = *cluster.spool_limit;
  } else {
    json["spool_limit"] = "auto";
  }
  if (!cluster.username.empty()) {
    json["username"] = cluster.username;
  }
  if (cluster.password.present()) {
    // describe() only: the value must never reach this output.
    json["password"] = cluster.password.describe();
  }
  if (cluster.tls) {
    json["tls"] = {{"ca_file", cluster.tls->ca_file},
                   {"cert_file", cluster.tls->cert_file},
                   {"key_file", cluster.tls->key_file},
                   {"server_name", cluster.tls->server_name},
                   {"verify", cluster.tls->verify}};
  }
  Json buckets = Json::array();
  for (const auto& bucket : cluster.buckets) {
    Json collections = Json::array();
    for (const auto& collection : bucket.collections) {
      Json c = {{"name", collection.name},
                {"keys", collection.keys},
                {"max_ttl", formatDuration(collection.max_ttl)}};
      // The policies of expiry-semantics.md §8, where set.
      if (collection.default_ttl == CollectionConfig::kNoDefault) {
        c["default_ttl"] = -1;
      } else if (collection.default_ttl.count() > 0) {
        c["default_ttl"] = formatDuration(collection.default_ttl);
      }
      if (!collection.ttl_field.empty()) c["ttl_field"] = collection.ttl_field;
      if (!collection.expire_at_field.empty()) {
        c["expire_at_field"] = collection.expire_at_field;
        c["expire_after"] = formatDuration(collection.expire_after);
      }
      if (collection.max_lifetime.count() > 0) {
        c["max_lifetime"] = formatDuration(collection.max_lifetime);
      }
      collections.push_back(std::move(c));
    }
    buckets.push_back({{"db", bucket.db},
                       {"max_ttl", formatDuration(bucket.max_ttl)},
                       {"collections", collections}});
  }
  json["buckets"] = buckets;
  return json;
}

Json pipelineJson(const PipelineConfig& pipeline) {
  Json dbs = Json::object();
  for (const auto& [from, to] : pipeline.dbs) {
    dbs[std::to_string(from)] = to;
  }
  auto patterns = [](const std::vector<Located<std::string>>& list) {
    Json out = Json::array();
    for (const auto& item : list) {
      out.push_back(item.value);
    }
    return out;
  };
  Json rewrites = Json::array();
  for (const auto& rewrite : pipeline.key_rewrite) {
    rewrites.push_back({{"from", rewrite.from}, {"to", rewrite.to}});
  }
  const FilterConfig& f = pipeline.filters;
  return {{"name", pipeline.name},
          {"source", pipeline.source},
          {"target", pipeline.target},
          {"dbs", dbs},
          {"filters",
           {{"include_keys", patterns(f.include_keys)},
            {"exclude_keys", patterns(f.exclude_keys)},
            {"drop_expirations", f.drop_expirations},
            {"drop_deletions", f.drop_deletions},
            {"strip_ttl", f.strip_ttl},
            {"replicate_flush", f.replicate_flush}}},
          {"key_rewrite", rewrites},
          {"checkpoint_interval", formatDuration(pipeline.checkpoint_interval)},
          {"full_sync", {{"delete_stale_keys", pipeline.delete_stale_keys}}},
          {"bandwidth_limit", pipeline.bandwidth_limit}};  // bytes per second, 0 = none
}

}  // namespace

std::string redactedJson(const Config& config) {
  Json json;
  json["path"] = config.path;
  json["agent"] = {
      {"admin_listen", config.agent.admin_listen ? Json(*config.agent.admin_listen) : Json()},
      {"state_dir", config.agent.state_dir},
      {"log_level", toString(config.agent.log_level)},
      {"log_format", toString(config.agent.log_format)},
      {"threads", config.agent.threads},
      {"watch_config", formatDuration(config.agent.watch_config)}};
  if (config.agent.admin_token.present()) {
    json["agent"]["admin_token"] = config.agent.admin_token.describe();
  }
  json["clock"] = {{"ntp_servers", config.clock.ntp_servers},
                   {"nts", config.clock.nts},
                   {"nts_ca_file", config.clock.nts_ca_file},
                   {"check_interval", formatDuration(config.clock.check_interval)},
                   {"max_skew", formatDuration(config.clock.max_skew)},
                   {"on_skew", toString(config.clock.on_skew)}};
  Json clusters = Json::object();
  for (const auto& [name, cluster] : config.clusters) {
    clusters[name] = clusterJson(cluster);
  }
  json["clusters"] = clusters;
  Json pipelines = Json::array();
  for (const auto& pipeline : config.pipelines) {
    pipelines.push_back(pipelineJson(pipeline));
  }
  json["pipelines"] = pipelines;
  // Invalid UTF-8 in a user string must not make dump() throw (the API never throws).
  return json.dump(2, ' ', false, Json::error_handler_t::replace);
}

std::string pipelineFingerprint(const Config& config, const PipelineConfig& pipeline) {
  // Everything a running pipeline depends on: itself, both clusters (secrets included, hashed:
  // this string stays in memory and is only compared), and the clock settings it applies.
  Json json;
  json["pipeline"] = pipelineJson(pipeline);
  for (const auto* name : {&pipeline.source, &pipeline.target}) {
    if (const ClusterConfig* c = config.cluster(*name)) {
      Json cj = clusterJson(*c);
      cj["password_hash"] = std::hash<std::string>{}(c->password.value);
      cj["sentinel_password_hash"] = std::hash<std::string>{}(c->sentinel_password.value);
      json["clusters"].push_back(cj);
    }
  }
  json["state_dir"] = config.agent.state_dir;
  json["max_skew"] = formatDuration(config.clock.max_skew);
  json["on_skew"] = toString(config.clock.on_skew);
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace xdcr::config
