#pragma once
// Typed, immutable configuration of xdcr-agent (interface.md §2).
//
// `loadConfigFile()` parses YAML once into these structs; every other module receives only the
// part it needs (a ClusterConfig, a PipelineConfig, ...), never a YAML node. Every struct that a
// user wrote keeps the position it was written at, so later checks (and runtime errors such as
// "pipeline east-to-west: target unreachable") can point back at the file.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/redis_endpoint.h"  // plain data, header only

namespace xdcr::config {

/** A position in the YAML file; 1-based line and column, 0 when unknown. */
struct Mark {
  int line = 0;
  int column = 0;
};

/** A value together with the position it was read from. */
template <class T>
struct Located {
  T value{};
  Mark mark;
};

using Duration = std::chrono::milliseconds;

enum class LogLevel { Trace, Debug, Info, Warn, Error };
enum class LogFormat { Text, Json };
/** clock.on_skew: what a pipeline does when the measured skew exceeds max_skew. */
enum class SkewAction { Warn, Pause, Compensate };

/**
 * A secret: a plain string, `{env: NAME}`, `{file: PATH}` or `{credential: NAME}` (the file
 * NAME in $CREDENTIALS_DIRECTORY, which systemd's LoadCredential=NAME:PATH fills) in YAML.
 * `value` holds the resolved secret (empty when not resolved, e.g. `validate --no-environment`).
 * Never print `value`; print `describe()` instead.
 */
struct Secret {
  enum class Kind { None, Plain, Env, File, Credential };
  Kind kind = Kind::None;
  std::string ref;    // the variable name, file path or credential name (empty for Plain)
  std::string value;  // the secret itself
  Mark mark;

  bool present() const { return kind != Kind::None; }
  /** "<redacted>", "{env: NAME}", "{file: PATH}", "{credential: NAME}" or "" — safe to log. */
  std::string describe() const;
};

struct AgentConfig {
  std::optional<std::string> admin_listen;  // host:port; nullopt = admin server disabled
  /**
   * agent.admin_token: when present, the admin server's POST endpoints require
   * `Authorization: Bearer <token>` (GETs stay open).
   */
  Secret admin_token;
  std::string state_dir = "./xdcr-state";  // relative paths are relative to the config file's dir
  LogLevel log_level = LogLevel::Info;
  LogFormat log_format = LogFormat::Text;
  /**
   * agent.threads: threads that run the source links and their pipelines (each link, with its
   * pipelines and their targets, on one of them; a Redis Cluster source has a link per shard).
   * 1 (the default): one thread runs everything. Discovery, the migration guard, the clock
   * monitor and the admin server stay on the first thread.
   */
  int threads = 1;
  /**
   * agent.watch_config: how often the agent looks at its configuration file; a changed file is
   * applied as SIGHUP applies it (validated first; an invalid one keeps the running config). For
   * a Kubernetes ConfigMap, whose edits reach the mounted file without a signal. 0 (the
   * default): only SIGHUP reloads.
   */
  Duration watch_config{0};
};

struct ClockConfig {
  std::vector<std::string> ntp_servers;  // host[:port], default port 123
  bool nts = false;
  std::string nts_ca_file;
  Duration check_interval{std::chrono::seconds(30)};
  Duration max_skew{std::chrono::milliseconds(500)};
  SkewAction on_skew = SkewAction::Warn;
};

struct TlsConfig {
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  std::string server_name;
  bool verify = true;
};

/** A set of keys inside a bucket chosen by a glob (Redis MATCH syntax). */
struct CollectionConfig {
  std::string name;
  std::string keys;     // glob
  Duration max_ttl{0};  // 0 = inherit the bucket's max_ttl (expiry-semantics.md §3)
  Mark mark;
  // Expiry policies beside max_ttl (expiry-semantics.md §8, interface.md §6.3).
  static constexpr Duration kNoDefault{-1};  // default_ttl: -1 (Cosmos DB: on, no default)
  Duration default_ttl{0};                   // 0 = off (absent), kNoDefault, or > 0
  std::string ttl_field{};        // Cosmos DB per-document ttl (needs default_ttl); "" = none
  std::string expire_at_field{};  // ArangoDB date attribute; "" = none
  Duration expire_after{0};       // added to expire_at_field's date
  Duration max_lifetime{0};       // cap from the first replicated write; 0 = none
};

/** A Redis logical database on a target cluster, with its maxTTL and collections. */
struct BucketConfig {
  int db = 0;
  Duration max_ttl{0};                        // 0 = none
  std::vector<CollectionConfig> collections;  // first match wins
  Mark mark;
};

/** A node's address: host and port (a cluster's seed node, a Sentinel). */
struct NodeAddress {
  std::string host;
  uint16_t port = 0;
  std::string str() const { return host + ":" + std::to_string(port); }
  bool operator==(const NodeAddress&) const = default;
};

/** The kinds of cluster (interface.md §2 and §6.1). */
enum class ClusterKind { Redis, RedisCluster, RedisSentinel, Memcached };
/** A memcached target's `non_strings`: what a value that is not a Redis string becomes. */
enum class NonStrings {
  Refuse,  // not written, counted (xdcr_target_write_failures_total{reason="unwritable"})
  Dump,    // the snapshot's RDB DUMP payload (RESTORE format), client flag kMemcachedFlagDump
  Json,    // a JSON rendering of the decoded value, client flag kMemcachedFlagJson
};
/** redis_cluster as a source: replicate each shard from its master or from one of its replicas. */
enum class ReadFrom { Master, Replica };

struct ClusterConfig {
  std::string name;
  std::string type = "redis";  // as written: redis | redis_cluster | redis_sentinel | memcached
  ClusterKind kind = ClusterKind::Redis;
  // type redis: `address`. redis_cluster: the first seed. redis_sentinel: the master's address
  // as last discovered is not kept here; host/port are the first Sentinel's (for messages only).
  std::string host;
  uint16_t port = 6379;
  /** redis_cluster: `addresses`, the seed nodes (any nodes of the cluster). */
  std::vector<NodeAddress> seeds;
  /** redis_cluster as a source: `read_from`. */
  ReadFrom read_from = ReadFrom::Master;
  /**
   * redis_cluster as a source: `slots`, the hash slots this agent replicates (inclusive ranges,
   * ascending, not overlapping); empty = all 16384. Several agents split one cluster by giving
   * each its own ranges: an agent follows only the shards that own one of its slots and
   * replicates only the keys in them.
   */
  std::vector<std::pair<int, int>> slots;
  /** `slots` as written ("0-8191", ...), for messages and the effective config. */
  std::string slotsText() const;
  /** redis_sentinel: `sentinels`, `master_name`, and the Sentinels' own credentials. */
  std::vector<NodeAddress> sentinels;
  std::string master_name;
  std::string sentinel_username;
  Secret sentinel_password;
  /**
   * `link_timeout`: a connection that carried nothing for this long is dead (Redis's
   * repl-timeout for the agent's own links).
   */
  Duration link_timeout{std::chrono::seconds(60)};
  /**
   * `spool_limit` (a source): the most a full sync may hold in the agent's spool (bytes, in
   * memory up to 32 MiB, beyond it in `<state_dir>/spool/`): what the source sends during a full
   * sync is read at once and kept there until the targets take it, instead of waiting in the
   * source's output buffer (source/spool.h). nullopt (not written): derived from the snapshot's
   * size (2 x its size + 256 MiB, capped by the free space of the state directory's filesystem);
   * 0: no spool (the source is read at the targets' pace, as before).
   */
  std::optional<uint64_t> spool_limit;
  std::string username;  // optional ACL user
  Secret password;
  std::optional<TlsConfig> tls;       // present = TLS on
  std::vector<BucketConfig> buckets;  // maxTTL applied when this cluster is a target
  /** type memcached: `non_strings` (docs/interface.md §6.1). */
  NonStrings non_strings = NonStrings::Refuse;
  Mark mark;

  bool isRedisCluster() const { return kind == ClusterKind::RedisCluster; }
  bool isMemcached() const { return kind == ClusterKind::Memcached; }
  bool isSentinel() const { return kind == ClusterKind::RedisSentinel; }
  /**
   * For messages: the address (type redis), the seeds (redis_cluster: "h1:p1,h2:p2"), the
   * master's name and the Sentinels (redis_sentinel: "mymaster via h1:p1,h2:p2").
   */
  std::string address() const;
  /** How to connect: address, username, the resolved password (when set), TLS options. */
  RedisEndpoint endpoint() const;
  /** The same credentials and TLS options for another node of this cluster (a shard's master
   *  or replica found by discovery; the master a Sentinel names). */
  RedisEndpoint endpointAt(const std::string& node_host, uint16_t node_port) const;
  /** How to reach the Sentinel `s` (sentinel_username/sentinel_password, the cluster's TLS). */
  RedisEndpoint sentinelEndpoint(const NodeAddress& s) const;
};

struct FilterConfig {
  std::vector<Located<std::string>> include_keys;  // RE2; empty = all keys
  std::vector<Located<std::string>> exclude_keys;  // RE2
  bool drop_expirations = false;
  bool drop_deletions = false;
  bool strip_ttl = false;
  bool replicate_flush = false;
};

struct KeyRewrite {
  std::string from;  // prefix
  std::string to;
  Mark mark;
};

struct PipelineConfig {
  std::string name;
  std::string source;      // cluster name
  std::string target;      // cluster name
  std::map<int, int> dbs;  // source db -> target db; empty = every db to itself
  FilterConfig filters;
  std::vector<KeyRewrite> key_rewrite;
  Duration checkpoint_interval{std::chrono::seconds(1)};
  /**
   * full_sync.delete_stale_keys: after a full sync, delete the target keys of this pipeline's
   * key space (its target dbs, key filters and rewrites) that the snapshot did not hold. Makes
   * the target mirror the source; only safe when nothing else writes that key space.
   */
  bool delete_stale_keys = false;
  /**
   * bandwidth_limit: bytes per second (0 = none) for what the pipeline reads from its source
   * and, separately, for what it writes to its target (Couchbase XDCR's networkUsageLimit).
   * Written as an integer or with a unit: 20MB, 500KB, 1GB (decimal), 64KiB, 20MiB, 1GiB.
   */
  uint64_t bandwidth_limit = 0;
  Mark mark;
};

/** The whole file. Immutable once loaded; shared as `ConfigConstSharedPtr`. */
struct Config {
  std::string path;  // the file it came from
  AgentConfig agent;
  ClockConfig clock;
  std::map<std::string, ClusterConfig> clusters;
  std::vector<PipelineConfig> pipelines;

  const ClusterConfig* cluster(const std::string& name) const {
    auto it = clusters.find(name);
    return it == clusters.end() ? nullptr : &it->second;
  }
  const PipelineConfig* pipeline(const std::string& name) const {
    for (const auto& p : pipelines) {
      if (p.name == name) return &p;
    }
    return nullptr;
  }
};
using ConfigConstSharedPtr = std::shared_ptr<const Config>;

/** One problem found while loading. */
struct Diagnostic {
  enum class Severity { Error, Warning };
  Severity severity = Severity::Error;
  std::string file;
  Mark mark;
  std::string message;  // names what is wrong and what to do

  /** `FILE:LINE:COL: error: MESSAGE` (or `warning:`). */
  std::string format() const;
};

struct LoadOptions {
  /** false = do not read environment variables or secret files (`validate --no-environment`). */
  bool resolve_environment = true;
  /**
   * true = the TLS files (ca_file, cert_file, key_file) must be readable now, else an error at
   * their position. The command line sets it (run, validate, verify, clock, reload); off by
   * default so that a library user can load a file whose certificates live elsewhere. Implies
   * nothing when resolve_environment is false.
   */
  bool check_files = false;
};

struct LoadResult {
  ConfigConstSharedPtr config;          // null when there is at least one error
  std::vector<Diagnostic> diagnostics;  // every error and warning, in file order

  bool ok() const { return config != nullptr; }
};

/** Reads and validates a config file. Never throws; every problem is a Diagnostic. */
LoadResult loadConfigFile(const std::string& path, const LoadOptions& options = {});

/** Same, from text (tests); `name` is used as FILE in diagnostics. */
LoadResult loadConfigString(const std::string& yaml, const std::string& name,
                            const LoadOptions& options = {});

/** Parses a duration: an integer number of seconds or `<n>ms|s|m|h|d`. nullopt if invalid. */
std::optional<Duration> parseDuration(const std::string& text);

/**
 * What is insecure on purpose in this config, one sentence each, for a warning at start (and at
 * reload): clusters with `tls.verify: false`. Never contains a secret.
 */
std::vector<std::string> securityWarnings(const Config& config);

/** The config as YAML-like JSON text with every secret replaced by its `describe()`. */
std::string redactedJson(const Config& config);

/**
 * A string that changes whenever anything a running pipeline depends on changes (the pipeline,
 * its two clusters including their secrets, the skew policy). For SIGHUP: only pipelines whose
 * fingerprint changed are restarted. Never print it.
 */
std::string pipelineFingerprint(const Config& config, const PipelineConfig& pipeline);

}  // namespace xdcr::config
