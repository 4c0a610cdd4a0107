// Cross-section checks: what needs the whole file (clusters may be written after the pipelines
// that use them). Runs after parse.cc on whatever parsed cleanly; fields that failed there are
// empty or flagged and are skipped here, so one mistake gives one message, not a cascade.

#include <algorithm>
#include <cctype>
#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "config/config.h"
#include "config/internal.h"

namespace xdcr::config::internal {
namespace {

std::string lowerHostPort(const std::string& host, uint16_t port) {
  std::string lower = host;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  // Host names are case-insensitive. No DNS here (validate must not touch the network), so
  // "localhost" and "127.0.0.1" count as different: this catches the obvious copy-paste mistake,
  // not every alias (preflight.cc compares run_ids at `run`).
  return joinHostPort(lower, port);
}

/**
 * What identifies the servers a cluster names, without the network: its address (type redis),
 * each seed node (a Redis Cluster: two configs that share a node are one cluster), each
 * Sentinel with the master's name (two configs that share a Sentinel and a master name are one
 * master). A standalone address and a seed are comparable (both name a node); a Sentinel is not
 * a data node, so a Sentinel-managed master equals only another config of the same master.
 */
std::vector<std::string> identityKeys(const ClusterConfig& cluster) {
  std::vector<std::string> keys;
  switch (cluster.kind) {
    case ClusterKind::Redis:
    case ClusterKind::Memcached:
      keys.push_back(lowerHostPort(cluster.host, cluster.port));
      break;
    case ClusterKind::RedisCluster:
      for (const auto& seed : cluster.seeds) keys.push_back(lowerHostPort(seed.host, seed.port));
      break;
    case ClusterKind::RedisSentinel:
      for (const auto& s : cluster.sentinels) {
        keys.push_back("sentinel " + lowerHostPort(s.host, s.port) + " master " +
                       cluster.master_name);
      }
      break;
  }
  return keys;
}

/** The servers of each cluster whose address parsed: clusters that share one are one node. */
class ServerGroups {
 public:
  explicit ServerGroups(const ParsedConfig& parsed) {
    std::map<std::string, std::string> owner;  // identity key -> the first cluster with it
    for (const auto& [name, cluster] : parsed.config.clusters) {
      auto info = parsed.cluster_info.find(name);
      if (info == parsed.cluster_info.end() || !info->second.address_ok) {
        continue;
      }
      parent_.emplace(name, name);
      for (const std::string& key : identityKeys(cluster)) {
        auto [it, inserted] = owner.emplace(key, name);
        if (!inserted) unite(it->second, name);
      }
    }
  }
  /** Whether `name` has a usable address (otherwise it was reported and is skipped). */
  bool known(const std::string& name) const { return parent_.contains(name); }
  /** One name per group: equal for clusters that name the same servers. */
  std::string node(const std::string& name) const {
    std::string at = name;
    while (parent_.at(at) != at) at = parent_.at(at);
    return at;
  }

 private:
  void unite(const std::string& a, const std::string& b) {
    std::string ra = node(a), rb = node(b);
    if (ra != rb) parent_[std::max(ra, rb)] = std::min(ra, rb);
  }
  std::map<std::string, std::string> parent_;
};

/** Where a cluster is, for messages: its address, seeds, or master name and Sentinels. */
std::string placeOf(const ClusterConfig& cluster) {
  return cluster.kind == ClusterKind::Redis || cluster.kind == ClusterKind::Memcached
             ? joinHostPort(cluster.host, cluster.port)
             : cluster.address();
}

/** Why two clusters of one group are one: "have the same address H:P", "share the node H:P". */
std::string sharedBy(const ClusterConfig& a, const ClusterConfig& b) {
  if (a.kind == ClusterKind::Redis && b.kind == ClusterKind::Redis) {
    return "have the same address " + joinHostPort(a.host, a.port);
  }
  const std::vector<std::string> keys_b = identityKeys(b);
  for (const std::string& key : identityKeys(a)) {
    if (std::find(keys_b.begin(), keys_b.end(), key) == keys_b.end()) continue;
    if (key.rfind("sentinel ", 0) == 0) {
      const size_t master = key.find(" master ");
      return "share the Sentinel " + key.substr(9, master - 9) + " and the master name " +
             quote(a.master_name);
    }
    return "share the node " + key;
  }
  return "name the same servers";  // through a third cluster
}

void checkClusterReference(const ParsedConfig& parsed, const std::string& role,
                           const std::string& name, Mark mark, Diagnostics& diags) {
  if (name.empty() || parsed.config.cluster(name) != nullptr) {
    return;
  }
  std::vector<std::string> known;
  for (const auto& [cluster_name, cluster] : parsed.config.clusters) {
    known.push_back(cluster_name);
  }
  std::string message = role + " " + quote(name) + " is not a defined cluster; ";
  if (known.empty()) {
    message += "no clusters are defined: add it under clusters:";
  } else {
    if (auto suggestion = closestMatch(name, known)) {
      message += "did you mean " + quote(*suggestion) + "? ";
    }
    message += "Defined clusters: " + joinNames(known);
  }
  diags.error(mark, message);
}

void checkSelfReplication(const ParsedConfig& parsed, const ServerGroups& groups,
                          const PipelineConfig& pipeline, const PipelineMarks& marks,
                          Diagnostics& diags) {
  const ClusterConfig* source = parsed.config.cluster(pipeline.source);
  const ClusterConfig* target = parsed.config.cluster(pipeline.target);
  if (source == nullptr || target == nullptr) {
    return;
  }
  if (!groups.known(source->name) || !groups.known(target->name)) {
    return;  // a bad address was already reported
  }
  if (groups.node(source->name) != groups.node(target->name)) {
    return;
  }
  std::string address = placeOf(*source);
  std::string why = source->kind == ClusterKind::Redis && target->kind == ClusterKind::Redis
                        ? "have the same address"
                        : sharedBy(*source, *target);
  std::string who = pipeline.name.empty() ? "this pipeline" : "pipeline " + quote(pipeline.name);
  if (pipeline.dbs.empty()) {
    diags.error(marks.target, who + " replicates " + address + " onto itself: source " +
                                  quote(source->name) + " and target " + quote(target->name) + " " +
                                  why +
                                  " and without a dbs map every db maps to itself; use "
                                  "another target or add a dbs map to different databases");
    return;
  }
  for (const auto& [from, to] : pipeline.dbs) {
    if (from != to) {
      continue;
    }
    auto it = marks.dbs.find(from);
    Mark mark = it != marks.dbs.end() ? it->second : marks.target;
    diags.error(mark,
                fmt::format("{} replicates db {} of {} onto itself (source {} and target {} "
                            "{}); map it to a different db or use another target",
                            who, from, address, quote(source->name), quote(target->name), why));
  }
}

/**
 * A memcached target (docs/interface.md §6.1) has no databases, no flush of one key space and
 * cannot list its keys cheaply: a dbs map into another db than 0, replicate_flush and
 * full_sync.delete_stale_keys cannot be applied there.
 */
void checkMemcachedTarget(const ClusterConfig& target, const PipelineConfig& pipeline,
                          const PipelineMarks& marks, Diagnostics& diags) {
  std::string who = pipeline.name.empty() ? "this pipeline" : "pipeline " + quote(pipeline.name);
  for (const auto& [from, to] : pipeline.dbs) {
    if (to == 0) continue;
    auto it = marks.dbs.find(from);
    diags.error(it != marks.dbs.end() ? it->second : marks.target,
                fmt::format("{} maps source db {} to db {} of target {}, but memcached has no "
                            "databases (everything is db 0); map every source db to 0 and use "
                            "key_rewrite to keep them apart",
                            who, from, to, quote(target.name)));
  }
  if (pipeline.dbs.empty()) {
    diags.warning(marks.target,
                  fmt::format("{} has no dbs map, so every source db goes to the db of the same "
                              "number, but target {} is memcached, which has only db 0: writes in "
                              "source dbs other than 0 are not applied (counted in "
                              "xdcr_target_write_failures_total{{reason=\"db\"}}); write dbs: "
                              "{{0: 0}}",
                              who, quote(target.name)));
  }
  if (pipeline.filters.replicate_flush) {
    diags.error(marks.target,
                fmt::format("{}: replicate_flush cannot be applied to memcached target {}: its "
                            "only flush (flush_all) empties the whole server, keys of other "
                            "pipelines and applications included; remove replicate_flush",
                            who, quote(target.name)));
  }
  if (pipeline.delete_stale_keys) {
    diags.error(marks.target,
                fmt::format("{}: full_sync.delete_stale_keys is not supported for memcached "
                            "target {} (memcached cannot list its keys reliably); remove it — "
                            "stale keys there end with their own deadline or by LRU eviction",
                            who, quote(target.name)));
  }
}

/** memcached is a target only: it has no change stream to replicate from. */
void checkMemcachedSources(const ParsedConfig& parsed, Diagnostics& diags) {
  for (size_t i = 0; i < parsed.config.pipelines.size(); ++i) {
    const PipelineConfig& pipeline = parsed.config.pipelines[i];
    const ClusterConfig* source = parsed.config.cluster(pipeline.source);
    if (source == nullptr || !source->isMemcached()) continue;
    std::string who = pipeline.name.empty() ? "this pipeline" : "pipeline " + quote(pipeline.name);
    diags.error(parsed.pipeline_marks[i].source,
                fmt::format("{} reads from cluster {}, which is memcached: memcached can only be "
                            "a target (it has no change stream to replicate from); use a Redis "
                            "source, or make {} the pipeline's target",
                            who, quote(source->name), quote(source->name)));
  }
}

/**
 * A Redis Cluster has one database, db 0 (cluster-notes.md §4.1: SELECT n != 0 is refused): a
 * dbs map into another db of a cluster target cannot be applied; a dbs entry for another db of a
 * cluster source never matches.
 */
void checkClusterDbs(const ParsedConfig& parsed, const PipelineConfig& pipeline,
                     const PipelineMarks& marks, Diagnostics& diags) {
  const ClusterConfig* source = parsed.config.cluster(pipeline.source);
  const ClusterConfig* target = parsed.config.cluster(pipeline.target);
  std::string who = pipeline.name.empty() ? "this pipeline" : "pipeline " + quote(pipeline.name);
  auto markOfDb = [&](int from) {
    auto it = marks.dbs.find(from);
    return it != marks.dbs.end() ? it->second : marks.target;
  };
  if (target != nullptr && target->isRedisCluster()) {
    for (const auto& [from, to] : pipeline.dbs) {
      if (to == 0) continue;
      diags.error(markOfDb(from),
                  fmt::format("{} maps source db {} to db {} of target {}, but a Redis Cluster "
                              "has only db 0; map every source db to 0 and use key_rewrite to "
                              "keep them apart",
                              who, from, to, quote(target->name)));
    }
    if (pipeline.delete_stale_keys) {
      diags.error(marks.target,
                  fmt::format("{}: full_sync.delete_stale_keys is not supported yet when the "
                              "target ({}) is a Redis Cluster; remove it",
                              who, quote(target->name)));
    }
    if (pipeline.dbs.empty() && source != nullptr && !source->isRedisCluster()) {
      diags.warning(marks.target,
                    fmt::format("{} has no dbs map, so every source db goes to the db of the same "
                                "number, but target {} is a Redis Cluster, which has only db 0: "
                                "writes in source dbs other than 0 cannot be applied; write dbs: "
                                "{{0: 0}} (map other dbs to 0 too, with key_rewrite to keep them "
                                "apart)",
                                who, quote(target->name)));
    }
  }
  if (target != nullptr && target->isMemcached())
    checkMemcachedTarget(*target, pipeline, marks, diags);
  if (source != nullptr && source->isRedisCluster()) {
    for (const auto& [from, to] : pipeline.dbs) {
      if (from == 0) continue;
      diags.warning(markOfDb(from),
                    fmt::format("source {} of {} is a Redis Cluster, which has only db 0: the dbs "
                                "entry for db {} never matches anything; remove it",
                                quote(source->name), who, from));
    }
  }
}

/**
 * Keys of a cluster that only a source uses (read_from, slots): an error at `mark_of(info)` for a
 * cluster that is only written. `what` says what the key does, e.g. "read_from chooses the nodes
 * a Redis Cluster is replicated from".
 */
template <typename MarkOf>
void checkSourceOnlyKey(const ParsedConfig& parsed, MarkOf mark_of, const std::string& key,
                        const std::string& what, Diagnostics& diags) {
  for (const auto& [name, info] : parsed.cluster_info) {
    const Mark& mark = mark_of(info);
    if (mark.line == 0) continue;
    const PipelineConfig* written_by = nullptr;
    bool read = false;
    for (const auto& pipeline : parsed.config.pipelines) {
      read = read || pipeline.source == name;
      if (pipeline.target == name && written_by == nullptr) written_by = &pipeline;
    }
    if (read || written_by == nullptr) continue;
    std::string message = what;
    message += ", so it applies only to a source, but cluster " + quote(name);
    message += " is only a target (of pipeline " + quote(written_by->name) + "); remove ";
    message += key;
    diags.error(mark, message);
  }
}

/** read_from chooses the nodes a cluster is read from; slots what of it this agent replicates
 *  (every key a pipeline writes goes to its slot's master): meaningless for a cluster only
 *  written. */
void checkSourceOnlyKeys(const ParsedConfig& parsed, Diagnostics& diags) {
  checkSourceOnlyKey(
      parsed, [](const ClusterInfo& i) -> const Mark& { return i.read_from; }, "read_from",
      "read_from chooses the nodes a Redis Cluster is replicated from", diags);
  checkSourceOnlyKey(
      parsed, [](const ClusterInfo& i) -> const Mark& { return i.slots; }, "slots",
      "slots selects the part of a Redis Cluster this agent replicates", diags);
  checkSourceOnlyKey(
      parsed, [](const ClusterInfo& i) -> const Mark& { return i.spool_limit; }, "spool_limit",
      "spool_limit bounds what a full sync keeps on the agent's disk", diags);
}

/**
 * A source's replication link carries nothing but its PINGs while the source is idle, every
 * repl-ping-replica-period (10 s by default): a shorter link_timeout on a cluster that is read
 * would end every idle session. A warning, since the source's period may have been lowered.
 */
void checkSourceLinkTimeouts(const ParsedConfig& parsed, Diagnostics& diags) {
  constexpr auto kDefaultPingPeriod = std::chrono::seconds(10);
  for (const auto& [name, info] : parsed.cluster_info) {
    const ClusterConfig* cluster = parsed.config.cluster(name);
    if (cluster == nullptr || info.link_timeout.line == 0 ||
        cluster->link_timeout > kDefaultPingPeriod) {
      continue;
    }
    const std::string& cluster_name = name;  // (clang 14 cannot capture a binding)
    const bool read =
        std::any_of(parsed.config.pipelines.begin(), parsed.config.pipelines.end(),
                    [&](const PipelineConfig& p) { return p.source == cluster_name; });
    if (!read) continue;
    diags.warning(info.link_timeout,
                  fmt::format("link_timeout of cluster {} is not longer than 10 s, the default "
                              "repl-ping-replica-period of a source (what an idle source sends "
                              "is its PINGs): an idle session would be ended as silent; set the "
                              "source's repl-ping-replica-period below a third of link_timeout, "
                              "or make link_timeout longer",
                              quote(name)));
  }
}

/**
 * One edge of the replication graph: a pipeline between two servers, or, for a pipeline whose
 * source and target are one server, one entry of its dbs map (db -> another db of that server).
 */
struct Edge {
  std::string from, to;  // nodes: ServerGroups::node(), plus " db N" inside one server
  size_t pipeline = 0;   // index in config.pipelines
  int from_db = -1;      // >= 0: an edge inside one server
  int to_db = -1;
  Mark mark;  // where to point: the pipeline's source:, or the dbs entry
};

bool before(Mark a, Mark b) {
  return std::pair(a.line, a.column) < std::pair(b.line, b.column);
}

/** The edges of `from_edge`'s shortest way back: edges[from_edge].to ... edges[from_edge].from. */
std::optional<std::vector<size_t>> wayBack(const std::vector<Edge>& edges, size_t from_edge) {
  const std::string& goal = edges[from_edge].from;
  std::map<std::string, size_t> reached_by;  // node -> the edge that first reached it
  std::vector<std::string> frontier = {edges[from_edge].to};
  reached_by.emplace(edges[from_edge].to, from_edge);
  while (!frontier.empty() && !reached_by.contains(goal)) {
    std::vector<std::string> next;
    for (const std::string& node : frontier) {
      for (size_t e = 0; e < edges.size(); ++e) {
        if (edges[e].from == node && reached_by.emplace(edges[e].to, e).second) {
          next.push_back(edges[e].to);
        }
      }
    }
    frontier = std::move(next);
  }
  auto it = reached_by.find(goal);
  if (it == reached_by.end()) {
    return std::nullopt;
  }
  std::vector<size_t> path;
  for (size_t e = it->second; e != from_edge; e = reached_by.at(edges[e].from)) {
    path.push_back(e);
  }
  path.push_back(from_edge);
  std::reverse(path.begin(), path.end());
  return path;
}

std::string describeCycle(const Config& config, const std::vector<Edge>& edges,
                          const std::vector<size_t>& cycle) {
  std::vector<std::string> items;
  std::vector<std::string> aliases;
  for (size_t i = 0; i < cycle.size(); ++i) {
    const Edge& edge = edges[cycle[i]];
    const PipelineConfig& pipeline = config.pipelines[edge.pipeline];
    if (edge.from_db >= 0) {
      items.push_back(quote(pipeline.name) + " (db " + std::to_string(edge.from_db) + " -> db " +
                      std::to_string(edge.to_db) + ")");
      continue;
    }
    items.push_back(quote(pipeline.name) + " (" + pipeline.source + " -> " + pipeline.target + ")");
    // Two cluster names for one address join the cycle: say so, or it would not read as one.
    const Edge& next = edges[cycle[(i + 1) % cycle.size()]];
    const std::string& next_source = config.pipelines[next.pipeline].source;
    if (next_source != pipeline.target) {
      aliases.push_back("clusters " + quote(pipeline.target) + " and " + quote(next_source) + " " +
                        sharedBy(*config.cluster(pipeline.target), *config.cluster(next_source)));
    }
  }
  std::string list;
  for (size_t i = 0; i < items.size(); ++i) {
    list += (i == 0 ? "" : i + 1 == items.size() ? " and " : ", ") + items[i];
  }
  if (edges[cycle.front()].from_db >= 0) {
    const ClusterConfig& cluster =
        *config.cluster(config.pipelines[edges[cycle.front()].pipeline].source);
    return "the dbs maps of " + list + " replicate within " + placeOf(cluster) +
           " in a cycle: every write would come back to the db it came from and be replicated "
           "again, without end; change the dbs maps so that no db is copied back into one it "
           "came from";
  }
  return "pipelines " + list + " form a replication cycle" +
         (aliases.empty() ? "" : " (" + joinNames(aliases) + ")") +
         ": every write would come back to the cluster it came from and be replicated again, "
         "without end; replication in both directions is not supported yet: remove one of these "
         "pipelines";
}

/**
 * Refuses replication cycles (east -> west -> east, or longer): the agent cannot tell its own
 * writes from the application's, so each would be replicated back and forth for ever. Clusters
 * with the same address are one node (the same-address check above is per pipeline; aliases
 * by another name, e.g. localhost, are caught at `run` by comparing run_ids). Within one server
 * (a dbs map to other dbs, which checkSelfReplication allows) the nodes are its dbs.
 */
void checkCycles(const ParsedConfig& parsed, const ServerGroups& groups, Diagnostics& diags) {
  const Config& config = parsed.config;
  std::vector<Edge> edges;
  std::set<std::string> names;
  for (size_t i = 0; i < config.pipelines.size(); ++i) {
    const PipelineConfig& pipeline = config.pipelines[i];
    const ClusterConfig* source = config.cluster(pipeline.source);
    const ClusterConfig* target = config.cluster(pipeline.target);
    // Unnamed, duplicate, dangling or badly addressed pipelines were reported already; a cycle
    // through them is reported once they are fixed (and can be named).
    auto address_ok = [&](const ClusterConfig* cluster) {
      return cluster != nullptr && groups.known(cluster->name);
    };
    if (pipeline.name.empty() || !names.insert(pipeline.name).second || !address_ok(source) ||
        !address_ok(target)) {
      continue;
    }
    const PipelineMarks& marks = parsed.pipeline_marks[i];
    const std::string from = groups.node(source->name), to = groups.node(target->name);
    if (from != to) {
      edges.push_back({from, to, i, -1, -1, marks.source});
      continue;
    }
    for (const auto& [from_db, to_db] : pipeline.dbs) {
      if (from_db == to_db) {
        continue;  // checkSelfReplication reported it (as it does an empty dbs map)
      }
      auto mark = marks.dbs.find(from_db);
      edges.push_back({from + " db " + std::to_string(from_db), to + " db " + std::to_string(to_db),
                       i, from_db, to_db, mark != marks.dbs.end() ? mark->second : marks.target});
    }
  }
  // Each edge not yet in a reported cycle starts a search, so every cycle is reported once and
  // a second, separate cycle gets its own message.
  std::vector<bool> reported(edges.size(), false);
  for (size_t e = 0; e < edges.size(); ++e) {
    if (reported[e]) {
      continue;
    }
    auto cycle = wayBack(edges, e);
    if (!cycle) {
      continue;
    }
    for (size_t c : *cycle) {
      reported[c] = true;
    }
    // Listed from the edge written first; pointed at the one written last (it closes the cycle).
    auto first = std::min_element(cycle->begin(), cycle->end(), [&](size_t a, size_t b) {
      return before(edges[a].mark, edges[b].mark);
    });
    std::rotate(cycle->begin(), first, cycle->end());
    size_t last = *std::max_element(cycle->begin(), cycle->end(), [&](size_t a, size_t b) {
      return before(edges[a].mark, edges[b].mark);
    });
    diags.error(edges[last].mark, describeCycle(config, edges, *cycle));
  }
}

}  // namespace

void validateReferences(const ParsedConfig& parsed, Diagnostics& diags) {
  if (!parsed.root_is_map) {
    return;  // an empty or non-mapping file was reported as such
  }
  const Config& config = parsed.config;
  if (parsed.pipeline_items == 0) {
    if (parsed.has_pipelines_key) {
      diags.error(parsed.pipelines_mark,
                  "pipelines is empty; define at least one pipeline (- name: ..., source: ..., "
                  "target: ...)");
    } else {
      diags.error(parsed.root,
                  "no pipelines are defined; add a pipelines: list with at least one pipeline");
    }
  }

  const ServerGroups groups(parsed);
  std::map<std::string, Mark> names;
  for (size_t i = 0; i < config.pipelines.size(); ++i) {
    const PipelineConfig& pipeline = config.pipelines[i];
    const PipelineMarks& marks = parsed.pipeline_marks[i];
    if (!pipeline.name.empty()) {
      auto [it, inserted] = names.emplace(pipeline.name, marks.name);
      if (!inserted) {
        diags.error(marks.name, "duplicate pipeline name " + quote(pipeline.name) +
                                    " (first defined at line " + std::to_string(it->second.line) +
                                    "); give each pipeline a unique name");
      }
    }
    checkClusterReference(parsed, "source", pipeline.source, marks.source, diags);
    checkClusterReference(parsed, "target", pipeline.target, marks.target, diags);
    checkSelfReplication(parsed, groups, pipeline, marks, diags);
    checkClusterDbs(parsed, pipeline, marks, diags);
  }
  checkSourceOnlyKeys(parsed, diags);
  checkMemcachedSources(parsed, diags);
  checkSourceLinkTimeouts(parsed, diags);
  checkCycles(parsed, groups, diags);
}

}  // namespace xdcr::config::internal
