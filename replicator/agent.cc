#include "replicator/agent.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <vector>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "clock/clock.h"
#include "clock/skew_monitor.h"
#include "common/logging.h"
#include "common/version.h"
#include "replicator/admin_server.h"
#include "replicator/clock_report.h"
#include "replicator/cluster_source.h"
#include "replicator/metrics.h"
#include "replicator/migration_guard.h"
#include "replicator/operator_state.h"
#include "replicator/pipeline.h"
#include "replicator/preflight.h"
#include "replicator/source_link.h"
#include "replicator/state_lock.h"
#include "replicator/status.h"
#include "replicator/workers.h"
#include "source/spool.h"

namespace xdcr::replicator {
namespace {

using Pipelines = std::vector<std::unique_ptr<Pipeline>>;

/** A digest of the file's bytes ("" when it cannot be read): has the file changed? */
std::string fileDigest(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return fmt::format("{:016x}:{}", std::hash<std::string>{}(bytes.str()), bytes.str().size());
}

/** What the admin server asks of the pipeline set beyond reading it. */
struct AdminOps {
  std::function<Status(const std::string& pipeline)> resync;
  const AgentFigures* figures = nullptr;         // reloads, process start
  const config::Config* started_with = nullptr;  // what admin_listen/log_format still follow
  std::string loaded_digest;                     // of the file as last loaded (fileDigest)
};

AdminReply route(const AdminRequest& req, const Pipelines& pipelines, const config::Config& cfg,
                 bool draining, const clock::ClockReport* clock_report, const AdminOps& ops) {
  auto text = [](int status, std::string body) {
    return AdminReply{status, "text/plain; charset=utf-8", std::move(body), {}};
  };
  auto json = [](int status, const nlohmann::json& j) {
    return AdminReply{status, "application/json", j.dump(2) + "\n", {}};
  };
  // agent.admin_token guards what changes the agent (POST); reading (GET) stays open.
  if (req.method != "GET" && req.method != "HEAD" && cfg.agent.admin_token.present() &&
      !bearerTokenMatches(req.authorization, cfg.agent.admin_token.value)) {
    static LogRateLimiter limiter;
    uint64_t suppressed = 0;
    if (limiter.allow(suppressed)) {
      spdlog::warn("admin server: {} {} refused: {} bearer token{}", req.method, req.path,
                   req.authorization.empty() ? "no" : "wrong",
                   suppressed ? fmt::format(" ({} more refusals not logged)", suppressed) : "");
    }
    AdminReply r = text(401, req.authorization.empty()
                                 ? "unauthorized: this agent requires the header `Authorization: "
                                   "Bearer <agent.admin_token>` for POST requests (GET endpoints "
                                   "are open)\n"
                                 : "unauthorized: wrong bearer token; send `Authorization: Bearer "
                                   "<agent.admin_token>`\n");
    r.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"xdcr-agent\"");
    return r;
  }
  if (req.method == "GET") {
    if (req.path == "/healthz") return text(200, "ok\n");
    if (req.path == "/readyz") {
      if (draining) return text(503, "not ready: draining (shutting down)\n");
      for (const auto& p : pipelines) {
        if (p->state() != PipelineState::Streaming) {
          return text(
              503, fmt::format("not ready: pipeline {} is {}{}\n", p->name(), stateName(p->state()),
                               p->lastError().empty() ? "" : " (" + p->lastError() + ")"));
        }
      }
      return text(200, "ready\n");
    }
    if (req.path == "/status") {
      return json(200, statusJson(pipelines, draining, clock_report, cfg));
    }
    if (req.path == "/metrics") {
      std::vector<PipelineMetrics> pm;
      for (const auto& p : pipelines) pm.push_back(metricsOf(*p));
      return AdminReply{200,
                        "text/plain; version=0.0.4; charset=utf-8",
                        renderMetrics(pm, clock_report, ops.figures),
                        {}};
    }
    if (req.path == "/config") {
      // What runs: the configuration last applied (not the file, which may have changed or be
      // invalid), with the settings that apply only at a start as they are in effect.
      nlohmann::json j = nlohmann::json::parse(config::redactedJson(cfg));
      std::vector<std::string> at_next_start;
      if (ops.started_with != nullptr) {
        const config::Config& st = *ops.started_with;
        if (st.agent.admin_listen != cfg.agent.admin_listen)
          at_next_start.push_back("admin_listen");
        if (st.agent.log_format != cfg.agent.log_format) at_next_start.push_back("log_format");
        if (st.agent.threads != cfg.agent.threads) at_next_start.push_back("threads");
        if (st.agent.state_dir != cfg.agent.state_dir) at_next_start.push_back("state_dir");
        nlohmann::json started = nlohmann::json::parse(config::redactedJson(st));
        for (const std::string& k : at_next_start) j["agent"][k] = started["agent"][k];
      }
      nlohmann::json reload = {{"file", cfg.path},
                               {"file_matches_running", fileDigest(cfg.path) == ops.loaded_digest},
                               {"applied_at_next_start", at_next_start}};
      if (ops.figures != nullptr) {
        reload["last_reload_successful"] = ops.figures->last_reload_successful;
        reload["last_reload_success_unix"] = ops.figures->last_reload_success_unix;
        reload["last_reload_error"] = ops.figures->last_reload_error;
      }
      j["running"] = reload;
      return AdminReply{200, "application/json", j.dump(2) + "\n", {}};
    }
  }
  // POST /pipelines/NAME/pause|resume|resync, GET /pipelines/NAME/health|restores
  constexpr std::string_view kPrefix = "/pipelines/";
  if (req.path.rfind(kPrefix, 0) == 0) {
    std::string_view rest = std::string_view(req.path).substr(kPrefix.size());
    auto slash = rest.rfind('/');
    if (slash == std::string_view::npos) {
      return text(404,
                  "use /pipelines/NAME/pause, resume, resync (POST) or health, restores (GET)\n");
    }
    const std::string name(rest.substr(0, slash));
    const std::string_view action = rest.substr(slash + 1);
    // Every instance of the pipeline (one per source shard of a Redis Cluster source).
    std::vector<Pipeline*> instances;
    for (const auto& p : pipelines) {
      if (p->name() == name) instances.push_back(p.get());
    }
    if (action == "health") {
      if (req.method != "GET" && req.method != "HEAD") return text(405, "use GET\n");
      if (instances.empty()) return text(404, fmt::format("no pipeline named \"{}\"\n", name));
      // For alerting on one pipeline (not for a pod's readiness: a remote outage fails it).
      for (const Pipeline* p : instances) {
        if (p->state() != PipelineState::Streaming) {
          return text(503, fmt::format("{} is {}{}\n", p->instance(), stateName(p->state()),
                                       p->paused()              ? ": " + p->pausedDetail()
                                       : p->lastError().empty() ? ""
                                                                : " (" + p->lastError() + ")"));
        }
      }
      return text(200, fmt::format("{} is streaming\n", name));
    }
    if (action == "restores") {
      // The last target copies restored (expiry-semantics.md §12), oldest first: what
      // `xdcr-agent explain KEY` names as a key's history.
      if (req.method != "GET" && req.method != "HEAD") return text(405, "use GET\n");
      if (instances.empty()) return text(404, fmt::format("no pipeline named \"{}\"\n", name));
      nlohmann::json list = nlohmann::json::array();
      uint64_t total = 0;
      for (const Pipeline* p : instances) {
        const RestoreJournal& journal = p->stats().restores;
        total += journal.total();
        for (const RestoredCopyNote& n : journal.notes()) {
          list.push_back({{"instance", p->instance()},
                          {"db", n.db},
                          {"key", printableKey(n.key)},
                          {"reason", n.reason},
                          {"copy_deadline_ms", n.copy_deadline_ms},
                          {"write_offset", n.write_offset},
                          {"found_at_ms", n.found_at_ms},
                          {"read_offset", n.read_offset},
                          {"restored_at_ms", n.restored_at_ms},
                          {"source_had_it", n.source_had_it}});
        }
      }
      return json(200, {{"pipeline", name},
                        {"kept_per_instance", RestoreJournal::kCapacity},
                        {"restored_total", total},
                        {"restores", std::move(list)}});
    }
    if (action != "pause" && action != "resume" && action != "resync") {
      return text(404,
                  "unknown action: use pause, resume, resync (POST) or health, restores (GET)\n");
    }
    if (req.method != "POST") return text(405, "use POST\n");
    if (instances.empty() && !(action == "resync" && cfg.pipeline(name) != nullptr)) {
      return text(404, fmt::format("no pipeline named \"{}\"\n", name));
    }
    if (action == "resync") {
      if (auto s = ops.resync(name); !s) {
        return text(s.error().kind == Error::Kind::Conflict ? 409 : 500, s.error().message + "\n");
      }
      return json(202, {{"pipeline", name}, {"resync", "requested"}});
    }
    bool paused = false;
    for (Pipeline* p : instances) {
      Status s = action == "pause" ? p->pause() : p->resume();
      if (!s) return text(500, fmt::format("{}: {}\n", action, s.error().message));
      paused = p->paused();
    }
    return json(200, {{"pipeline", name}, {"paused", paused}});
  }
  return text(404, "not found: try /healthz /readyz /status /metrics /config\n");
}

}  // namespace

namespace {

/**
 * The agent's pipelines and the links that run them, on the io_context. Pipelines that name the
 * same source start on one SourceLink (fan-out); a pipeline a link detaches runs on a link of
 * its own. A pipeline that stops is removed; a replacement waiting for it (a SIGHUP changed its
 * config) starts then, so the old one has drained and checkpointed before the new one resumes
 * from that checkpoint.
 *
 * It runs on the first thread; each link, with its pipelines, on the thread `workers` gives it
 * (replicator/workers.h). Its public calls that touch pipelines run inside Workers::exclusive.
 */
class PipelineSet {
 public:
  PipelineSet(net::io_context& ioc, Workers& workers, const clock::Clock& clock,
              clock::SkewMonitor& monitor)
      : ioc_(ioc), workers_(workers), clock_(clock), monitor_(monitor) {}

  /** A clock check completed: every pipeline re-evaluates its skew policy. */
  void clockReport(const clock::ClockReport& r) {
    workers_.exclusive([&] {
      for (const auto& p : pipelines_) p->onClockReport(r);
    });
  }

  const Pipelines& pipelines() const { return pipelines_; }
  bool failed() const { return failed_; }

  /** Starts `pcs` of `cfg`, those of one source on one shared link (one per source shard for
   *  a Redis Cluster source). */
  void start(const config::ConfigConstSharedPtr& cfg,
             const std::vector<const config::PipelineConfig*>& pcs) {
    std::map<std::string, std::vector<Pipeline*>> by_source;
    std::map<std::string, std::vector<const config::PipelineConfig*>> by_cluster_source;
    std::map<std::string, std::pair<net::any_io_executor, int>> thread_of;  // one per link
    for (const config::PipelineConfig* pc : pcs) {
      honourResyncRequest(*cfg, pc->name);
      fingerprints_[pc->name] = config::pipelineFingerprint(*cfg, *pc);
      configs_[pc->name] = cfg;
      if (cfg->cluster(pc->source)->isRedisCluster()) {
        by_cluster_source[pc->source].push_back(pc);
        continue;
      }
      if (thread_of.count(pc->source) == 0) {
        int index = 0;
        net::any_io_executor ex = workers_.next(&index);
        thread_of.emplace(pc->source, std::make_pair(ex, index));
      }
      const auto& [ex, index] = thread_of.at(pc->source);
      auto p = std::make_unique<Pipeline>(ex, cfg, *pc, clock_, limitsFor(*cfg, *pc));
      inheritStats(*p);
      p->setThread(index);
      // A pipeline started by a reload need not wait a whole check_interval for its clocks.
      if (monitor_.latest()) p->onClockReport(*monitor_.latest());
      by_source[pc->source].push_back(p.get());
      pipelines_.push_back(std::move(p));
    }
    for (auto& [source, members] : by_source) startLink(configs_[members.front()->name()], members);
    for (auto& [source, members] : by_cluster_source) startClusterGroup(cfg, source, members);
  }

  /** SIGHUP with a valid new config: restart changed pipelines, start new, stop removed. */
  void apply(const config::ConfigConstSharedPtr& cfg) {
    workers_.exclusive([&] { applyHere(cfg); });
  }

  void stopAll() {
    workers_.exclusive([&] { stopAllHere(); });
  }

  /**
   * A full sync of pipeline `name` on demand (POST /pipelines/NAME/resync), inside
   * Workers::exclusive: the request is kept in the state directory first, then the pipeline
   * restarts as a reload restarts a changed one; start() drops its checkpoints before it runs
   * again (a crash in between: at the next start).
   */
  Status resyncHere(const std::string& name) {
    auto it = configs_.find(name);
    if (it == configs_.end() || stopping_) {
      return fail(Error::conflict(fmt::format(
          "pipeline {} is not running{}; `xdcr-agent resync` with the agent stopped requests it "
          "for the next start",
          name, stopping_ ? " (the agent is stopping)" : "")));
    }
    const config::ConfigConstSharedPtr cfg = it->second;
    if (auto s = OperatorState(cfg->agent.state_dir, name).requestResync(clock_.nowMs()); !s) {
      return s;
    }
    spdlog::warn(
        "pipeline {}: full sync requested by the operator; restarting it without its "
        "checkpoint",
        name);
    // A Redis Cluster source's discovery runs for a set of pipelines: the whole set restarts.
    std::set<std::string> restart{name};
    for (const auto& g : groups_) {
      bool member = false;
      for (const config::PipelineConfig* pc : g->pipelines()) member = member || pc->name == name;
      if (!member) continue;
      g->stop();
      for (const config::PipelineConfig* pc : g->pipelines()) restart.insert(pc->name);
    }
    for (const std::string& n : restart) {
      if (replacements_.count(n) == 0 && configs_.count(n) > 0) {
        replacements_[n] = {configs_[n], configs_[n]->pipeline(n)};
      }
    }
    for (const auto& p : pipelines_) {
      if (restart.count(p->name()) > 0) p->stop();
    }
    return Status{};
  }

  /** Runs `f` while no link runs (replicator/workers.h): `f` may read and change pipelines. */
  void exclusive(const std::function<void()>& f) { workers_.exclusive(f); }

 private:
  /** An operator's resync request for `name` (replicator/operator_state.h): its checkpoints go
   *  before it starts, so it starts with a full sync. */
  static void honourResyncRequest(const config::Config& cfg, const std::string& name) {
    OperatorState st(cfg.agent.state_dir, name);
    if (!st.resyncRequested()) return;
    auto r = st.honourResync();
    if (r) {
      spdlog::warn(
          "pipeline {}: full sync requested by the operator: {} checkpoint file(s) "
          "dropped; it starts with a full sync",
          name, *r);
    } else {
      spdlog::error(
          "pipeline {}: the operator's full-sync request cannot be honoured: {}; it "
          "resumes from its checkpoint (the request stays for the next start)",
          name, r.error().message);
    }
  }

  void applyHere(const config::ConfigConstSharedPtr& cfg) {
    // A Redis Cluster source's discovery runs for a set of pipelines: when one of them changes,
    // the whole set restarts (each instance resumes from its checkpoint).
    for (const auto& g : groups_) {
      bool changed = false;
      for (const config::PipelineConfig* old_pc : g->pipelines()) {
        const config::PipelineConfig* pc = cfg->pipeline(old_pc->name);
        changed = changed || pc == nullptr ||
                  config::pipelineFingerprint(*cfg, *pc) != fingerprints_[old_pc->name];
      }
      if (!changed) continue;
      g->stop();
      for (const config::PipelineConfig* old_pc : g->pipelines()) {
        if (const config::PipelineConfig* pc = cfg->pipeline(old_pc->name)) {
          replacements_[pc->name] = {cfg, pc};
        }
      }
    }
    for (const auto& p : pipelines_) {
      const config::PipelineConfig* pc = cfg->pipeline(p->name());
      if (pc == nullptr) {
        spdlog::info("reload: pipeline {} was removed; stopping it", p->name());
        p->stop();
      } else if (config::pipelineFingerprint(*cfg, *pc) != fingerprints_[p->name()] ||
                 replacements_.count(p->name()) > 0) {
        spdlog::info("reload: pipeline {} changed; restarting it (it resumes from its checkpoint)",
                     p->name());
        replacements_[p->name()] = {cfg, pc};
        p->stop();
      }
    }
    std::vector<const config::PipelineConfig*> fresh;
    for (const auto& pc : cfg->pipelines) {
      bool running = false;
      for (const auto& p : pipelines_) running = running || p->name() == pc.name;
      if (!running) {
        spdlog::info("reload: starting new pipeline {}", pc.name);
        fresh.push_back(&pc);
      }
    }
    if (!fresh.empty()) start(cfg, fresh);
  }

  void stopAllHere() {
    stopping_ = true;
    replacements_.clear();
    for (const auto& g : groups_) g->stop();
    for (const auto& l : links_) l->stopAll();
    for (const auto& p : pipelines_) p->stop();
    if (pipelines_.empty()) {
      monitor_.stop();
      ioc_.stop();
    }
  }

  /** Runs a link for `members` (which share one executor) on their thread. Its calls back and
   *  its end come to the first thread. */
  void startLink(const config::ConfigConstSharedPtr& cfg, std::vector<Pipeline*> members) {
    const net::any_io_executor ex = members.front()->executor();
    const net::any_io_executor home = ioc_.get_executor();
    auto link = std::make_unique<SourceLink>(
        ex, cfg, std::move(members), clock_,
        [this, cfg, home](Pipeline* p) {
          // (the old link's thread may still run it: the pipeline is read while it is parked)
          net::dispatch(home, [this, cfg, p] {
            workers_.exclusive([&] {
              if (stopping_ || p->stopping()) {
                finished(p);
              } else {
                startLink(cfg, {p});
              }
            });
          });
        },
        [this, home](Pipeline* p) {
          net::dispatch(home, [this, p] { workers_.exclusive([&] { finished(p); }); });
        });
    SourceLink* raw = link.get();
    links_.push_back(std::move(link));
    net::co_spawn(ex, raw->run(), [this, raw, ex, home](std::exception_ptr e) {
      // Deleted once run() has fully returned (a handler posted on its thread runs after its
      // frame is gone), on the first thread while no link runs.
      net::post(ex, [this, raw, home, failed = e != nullptr] {
        net::dispatch(home, [this, raw, failed] {
          if (failed) failed_ = true;
          workers_.exclusive(
              [&] { std::erase_if(links_, [&](const auto& l) { return l.get() == raw; }); });
          maybeExit();
        });
      });
    });
  }

  /** Discovers the shards of Redis Cluster `source` and runs a link per shard for `pcs`. */
  void startClusterGroup(const config::ConfigConstSharedPtr& cfg, const std::string& source,
                         const std::vector<const config::PipelineConfig*>& pcs) {
    // The group's migration guard, known once the group exists (the callbacks run later).
    auto guard = std::make_shared<std::shared_ptr<MigrationGuard>>();
    auto group = std::make_unique<ClusterSourceGroup>(
        ioc_.get_executor(), cfg, *cfg->cluster(source), pcs, clock_,
        [this, cfg, guard](std::shared_ptr<ShardLocator> locator, std::string label,
                           std::vector<ClusterSourceGroup::Instance> instances) {
          std::vector<Pipeline*> members;
          int index = 0;
          const net::any_io_executor ex = workers_.next(&index);  // the shard's link's thread
          for (auto& i : instances) {
            auto p = std::make_unique<Pipeline>(ex, cfg, *i.pipeline, clock_,
                                                limitsFor(*cfg, *i.pipeline), locator,
                                                Pipeline::Shard{i.name, label});
            inheritStats(*p);
            p->setThread(index);
            p->setMigrationGuard(*guard, locator.get());
            (*guard)->add(locator.get(), p.get());
            if (monitor_.latest()) p->onClockReport(*monitor_.latest());
            members.push_back(p.get());
            pipelines_.push_back(std::move(p));
          }
          startLink(cfg, members);
        },
        [this](const std::vector<std::string>& instances) {
          workers_.exclusive([&] {
            for (const auto& p : pipelines_) {
              if (std::find(instances.begin(), instances.end(), p->instance()) != instances.end()) {
                p->stop();
              }
            }
          });
        });
    ClusterSourceGroup* raw = group.get();
    *guard = raw->migrationGuard();
    groups_.push_back(std::move(group));
    net::co_spawn(ioc_, raw->run(), [this, raw](std::exception_ptr e) {
      if (e) failed_ = true;
      net::post(ioc_, [this, raw] {
        std::erase_if(groups_, [&](const auto& g) { return g.get() == raw; });
        maybeExit();
      });
    });
  }

  /** `done` left its link for good (inside Workers::exclusive: its link may still run). */
  void finished(Pipeline* done) {
    std::string name = done->name();
    carried_[done->instance()] = done->stats();  // for its replacement, if one starts
    if (done->state() == PipelineState::Stopped && !done->stopping()) failed_ = true;
    if (MigrationGuard* g = done->migrationGuard()) g->remove(done);
    std::erase_if(pipelines_, [&](const auto& p) { return p.get() == done; });
    // The other instances of the pipeline (source shards) finish first.
    if (std::any_of(pipelines_.begin(), pipelines_.end(),
                    [&](const auto& p) { return p->name() == name; })) {
      return;
    }
    auto it = replacements_.find(name);
    if (it != replacements_.end() && !stopping_) {
      auto [cfg, pc] = it->second;
      replacements_.erase(it);
      start(cfg, {pc});
      return;
    }
    fingerprints_.erase(name);
    configs_.erase(name);
    std::erase_if(carried_, [&](const auto& c) {
      return c.first == name || c.first.rfind(name + "@", 0) == 0;
    });
    maybeExit();
  }

  /** A pipeline restarted in this process (a reload, a resync) keeps its counters: Prometheus
   *  counters only reset when the process does. */
  void inheritStats(Pipeline& p) {
    auto it = carried_.find(p.instance());
    if (it == carried_.end()) return;
    p.mutableStats() = std::move(it->second);
    carried_.erase(it);
  }

  void maybeExit() {
    if (pipelines_.empty() && links_.empty() && groups_.empty() &&
        (stopping_ || replacements_.empty())) {
      if (!stopping_) spdlog::warn("no pipeline is running any more");
      if (stopping_ || failed_) {
        monitor_.stop();
        ioc_.stop();
      }
    }
  }

  net::io_context& ioc_;
  Workers& workers_;
  const clock::Clock& clock_;
  clock::SkewMonitor& monitor_;
  Pipelines pipelines_;
  std::vector<std::unique_ptr<SourceLink>> links_;
  std::vector<std::unique_ptr<ClusterSourceGroup>> groups_;  // Redis Cluster sources
  std::map<std::string, std::string> fingerprints_;
  std::map<std::string, config::ConfigConstSharedPtr> configs_;
  std::map<std::string, PipelineStats> carried_;  // by instance: of pipelines that finished
  std::map<std::string, std::pair<config::ConfigConstSharedPtr, const config::PipelineConfig*>>
      replacements_;
  bool stopping_ = false;
  bool failed_ = false;
};

}  // namespace

int runAgent(config::ConfigConstSharedPtr config) {
  StateDirLock state_lock;  // held until the process exits: one agent per state directory
  if (int code = state_lock.acquire(config->agent.state_dir)) return code;
  // Spool files of an agent that ended during a full sync (the lock says none is in use): that
  // full sync starts again anyway.
  if (size_t n = source::removeLeftoverSpools(config->agent.state_dir + "/spool"); n > 0) {
    spdlog::info("removed {} spool file(s) left in {}/spool by an earlier run", n,
                 config->agent.state_dir);
  }
  if (int code = checkDistinctServers(*config)) return code;  // one server under two names
  net::io_context ioc(1);
  Workers workers(ioc, config->agent.threads);  // before `set`: its threads outlive the links
  clock::SystemClock clock;
  // The skew monitor measures NTP and every cluster's clock at once, then every check_interval;
  // pipelines with clock.on_skew pause or compensate wait for its first report.
  clock::SkewMonitor monitor(ioc.get_executor(), config);
  PipelineSet set(ioc, workers, clock, monitor);
  struct JoinWorkers {  // however this returns, no link runs while `set` is destroyed
    Workers& w;
    ~JoinWorkers() { w.stop(); }
  } join_workers{workers};
  monitor.onReport([&set](const clock::ClockReport& r) { set.clockReport(r); });
  net::co_spawn(ioc, monitor.run(), net::detached);
  spdlog::info("xdcr-agent {} ({}) starting {} pipeline(s) from {}", version(), gitRevision(),
               config->pipelines.size(), config->path);
  for (const auto& w : config::securityWarnings(*config)) spdlog::warn("{}", w);
  {
    std::vector<const config::PipelineConfig*> all;
    for (const auto& p : config->pipelines) all.push_back(&p);
    set.start(config, all);
  }

  bool stopping = false;
  config::ConfigConstSharedPtr current = config;
  AgentFigures figures;
  figures.process_start_unix = figures.last_reload_success_unix = double(clock.nowMs()) / 1e3;
  AdminOps ops;
  ops.resync = [&set](const std::string& name) { return set.resyncHere(name); };
  ops.figures = &figures;
  ops.started_with = config.get();
  ops.loaded_digest = fileDigest(config->path);
  std::unique_ptr<AdminServer> admin;
  if (config->agent.admin_listen) {
    admin = std::make_unique<AdminServer>(ioc.get_executor(), [&](const AdminRequest& req) {
      AdminReply reply;
      set.exclusive([&] {
        reply = route(req, set.pipelines(), *current, stopping,
                      monitor.latest() ? &*monitor.latest() : nullptr, ops);
      });
      return reply;
    });
    if (auto s = admin->start(*config->agent.admin_listen); !s) {
      spdlog::critical("{}", s.error().message);
      return 1;
    }
  }

  // A reload (SIGHUP, or agent.watch_config seeing the file change): validated first; an invalid
  // file keeps the running configuration, and says so in the log, /metrics and /config.
  std::string rejected_digest;  // the file as last rejected (the watch does not retry it)
  auto reload = [&](const char* why) {
    const std::string digest = fileDigest(current->path);
    config::LoadOptions options;
    options.check_files = true;  // TLS files must be readable, as at start
    config::LoadResult r = config::loadConfigFile(current->path, options);
    std::string first_error;
    for (const auto& d : r.diagnostics) {
      if (d.severity == config::Diagnostic::Severity::Error) {
        spdlog::error("reload: {}", d.format());
        if (first_error.empty()) first_error = d.format();
      } else {
        spdlog::warn("reload: {}", d.format());
      }
    }
    if (!r.ok()) {
      ++figures.reloads_failed;
      figures.last_reload_successful = false;
      figures.last_reload_error = first_error.empty() ? "invalid configuration" : first_error;
      rejected_digest = digest;
      spdlog::error("reload: {} is invalid; keeping the running configuration ({})", current->path,
                    why);
      return;
    }
    if (r.config->agent.admin_listen != current->agent.admin_listen ||
        r.config->agent.log_format != current->agent.log_format) {
      spdlog::warn("reload: admin_listen and log_format take effect at the next start");
    }
    for (const auto& w : config::securityWarnings(*r.config)) spdlog::warn("reload: {}", w);
    static constexpr const char* kLevels[] = {"trace", "debug", "info", "warn", "error"};
    spdlog::set_level(spdlog::level::from_str(kLevels[int(r.config->agent.log_level)]));
    set.apply(r.config);
    current = r.config;
    monitor.setConfig(r.config);
    monitor.checkSoon();
    ++figures.reloads_succeeded;
    figures.last_reload_successful = true;
    figures.last_reload_error.clear();
    figures.last_reload_success_unix = double(clock.nowMs()) / 1e3;
    ops.loaded_digest = digest;
    rejected_digest.clear();
    spdlog::info("reload: {} applied ({})", current->path, why);
  };

  // agent.watch_config: a changed file is applied once it reads the same twice in a row (an
  // editor or a ConfigMap update caught halfway is not applied half-written).
  std::string seen_digest = ops.loaded_digest;
  bool watching = false;  // a timer of the watch is pending
  std::function<void()> watch_config = [&] {
    const auto period = current->agent.watch_config;
    if (watching || period.count() <= 0 || stopping) return;
    watching = true;
    auto timer = std::make_shared<net::steady_timer>(ioc, period);
    timer->async_wait([&, timer](const boost::system::error_code& ec) {
      watching = false;
      if (ec || stopping) return;
      const std::string digest = fileDigest(current->path);
      if (!digest.empty() && digest == seen_digest && digest != ops.loaded_digest &&
          digest != rejected_digest) {
        reload("the file changed");
      }
      seen_digest = digest;
      watch_config();
    });
  };
  if (config->agent.watch_config.count() > 0) {
    spdlog::info("watching {} for changes every {} ms (agent.watch_config)", config->path,
                 config->agent.watch_config.count());
  }
  watch_config();

  net::signal_set signals(ioc, SIGINT, SIGTERM, SIGHUP);
  std::function<void(const boost::system::error_code&, int)> on_signal =
      [&](const boost::system::error_code& ec, int sig) {
        if (ec) return;
        if (sig == SIGHUP) {
          if (!stopping) {
            reload("SIGHUP");
            watch_config();  // (a reload may have turned the watch on)
          }
        } else if (!stopping) {
          stopping = true;
          spdlog::info("{}: draining and checkpointing; send it again to exit at once",
                       sig == SIGTERM ? "SIGTERM" : "SIGINT");
          set.stopAll();
        } else {
          spdlog::warn("second signal: exiting without a final checkpoint");
          std::_Exit(1);
        }
        signals.async_wait(on_signal);
      };
  signals.async_wait(on_signal);

  ioc.run();
  spdlog::info("xdcr-agent stopped");
  return set.failed() ? 1 : 0;
}

}  // namespace xdcr::replicator
