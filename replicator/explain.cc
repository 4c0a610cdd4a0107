#include "replicator/explain.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "clock/redis_time.h"
#include "common/cluster_slot.h"
#include "common/stats.h"
#include "filters/event_filter.h"
#include "filters/key_space.h"
#include "replicator/admin_server.h"
#include "replicator/checkpoint.h"
#include "replicator/first_seen_view.h"
#include "replicator/one_shot.h"
#include "replicator/verify_compare.h"
#include "replicator/verify_side.h"
#include "source/event.h"
#include "target/marker.h"
#include "target/max_ttl.h"

namespace xdcr::replicator {
namespace {

namespace net = boost::asio;
using Cmd = std::vector<std::string>;
using nlohmann::json;
using verify::quote;

constexpr auto kTimeout = std::chrono::seconds(10);
constexpr auto kAdminTimeout = std::chrono::seconds(3);

int64_t localNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

/** 2025-01-31T12:00:00.250Z */
std::string isoDate(int64_t ms) {
  const time_t s = static_cast<time_t>(ms / 1000);
  struct tm tm {};
  gmtime_r(&s, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return fmt::format("{}.{:03d}Z", buf, static_cast<int>(ms % 1000));
}

/** "in 59.9 s", "1.2 s ago" */
std::string relative(int64_t ms, int64_t now) {
  const double d = static_cast<double>(ms - now) / 1000.0;
  return d >= 0 ? fmt::format("in {:.1f} s", d) : fmt::format("{:.1f} s ago", -d);
}

/** "none", or "1735689600000 (2025-01-01T00:00:00.000Z, in 59.9 s)". */
std::string when(int64_t ms, int64_t now) {
  if (ms <= 0) return "none";
  return fmt::format("{} ({}, {})", ms, isoDate(ms), relative(ms, now));
}

std::string duration(int64_t ms) {
  return verify::formatSeconds(ms);
}

/** What explain reads of a key on one side. */
struct SideKey {
  std::string type = "none";
  int64_t deadline = -1;  // PEXPIRETIME; -1 none
  int64_t idle_s = -1;    // OBJECT IDLETIME (the source); -1 unreadable, with the reason
  std::string idle_error;
  bool value_read = false;
  resp::Value value;  // a string's bytes, a collection's element count
  bool exists() const { return type != "none"; }
};

/** What explain compares of a value: a string's bytes, a collection's size (verify compares the
 *  contents of every type). */
std::optional<Cmd> valueCommand(const std::string& type, const std::string& key) {
  if (type == "string") return Cmd{"GET", key};
  if (type == "list") return Cmd{"LLEN", key};
  if (type == "set") return Cmd{"SCARD", key};
  if (type == "zset") return Cmd{"ZCARD", key};
  if (type == "hash") return Cmd{"HLEN", key};
  if (type == "stream") return Cmd{"XLEN", key};
  return std::nullopt;
}

/** TYPE, PEXPIRETIME and (idle) OBJECT IDLETIME touch no key; the value is read after them, and
 *  only when `value` (on the source: when its reads cannot reset the idle time). */
net::awaitable<Result<SideKey>> readKey(VerifySide& side, int db, const std::string& key, bool idle,
                                        bool value) {
  std::vector<Cmd> first = {{"TYPE", key}, {"PEXPIRETIME", key}};
  if (idle) first.push_back({"OBJECT", "IDLETIME", key});
  auto r = co_await side.callKeyed(db, first);
  if (!r) co_return fail(r.error());
  SideKey k;
  const resp::Value& type = (*r)[0];
  if (type.isError()) {
    co_return fail(Error::refused(fmt::format("{}: TYPE: {}", side.label(), type.str)));
  }
  k.type = type.str;
  const resp::Value& ttl = (*r)[1];
  k.deadline = ttl.type == resp::ReplyType::Integer && ttl.integer >= 0 ? ttl.integer : -1;
  if (idle) {
    const resp::Value& it = (*r)[2];
    if (it.type == resp::ReplyType::Integer && it.integer >= 0) {
      k.idle_s = it.integer;
    } else {
      k.idle_error = fmt::format("{}: OBJECT IDLETIME: {}", side.label(),
                                 it.isError() ? it.str : std::string("no such key"));
    }
  }
  if (value && k.exists()) {
    if (auto c = valueCommand(k.type, key)) {
      const std::vector<Cmd> second = {*c};
      auto v = co_await side.callKeyed(db, second);
      if (!v) co_return fail(v.error());
      if (!(*v)[0].isError()) {
        k.value = std::move((*v)[0]);
        k.value_read = true;
      }
    }
  }
  co_return k;
}

/** The pipeline as the running agent reports it (GET /status on agent.admin_listen). */
struct AgentView {
  bool available = false;
  std::string admin;  // where it was asked
  std::string why;    // when not available
  std::string state;
  bool paused = false;
  std::string paused_reason, paused_detail, last_error;
  double lag_seconds = 0;
  uint64_t backlog_bytes = 0;
  bool full_sync = false;
  uint64_t full_sync_done = 0, full_sync_total = 0;
  bool compensation_known = false;
  int64_t compensation_ms = 0;

  json toJson() const {
    if (!available) return {{"available", false}, {"admin", admin}, {"reason", why}};
    json j = {{"available", true},
              {"admin", admin},
              {"state", state},
              {"paused", paused},
              {"paused_reason", paused_reason},
              {"paused_detail", paused_detail},
              {"lag_seconds", lag_seconds},
              {"backlog_bytes", backlog_bytes},
              {"full_sync_active", full_sync},
              {"last_error", last_error}};
    if (full_sync) {
      j["full_sync_keys_done"] = full_sync_done;
      j["full_sync_keys_total"] = full_sync_total;
    }
    return j;
  }
};

AgentView readAgent(const config::Config& cfg, const std::string& pipeline) {
  AgentView a;
  if (!cfg.agent.admin_listen || cfg.agent.admin_listen->empty()) {
    a.why = "the config sets no agent.admin_listen, so the running agent cannot be asked";
    return a;
  }
  a.admin = *cfg.agent.admin_listen;
  auto r = adminGet(a.admin, "/status", kAdminTimeout);
  if (!r) {
    a.why = r.error().message;
    return a;
  }
  if (r->first != 200) {
    a.why = fmt::format("the agent at {} answered /status with HTTP {}", a.admin, r->first);
    return a;
  }
  const json doc = json::parse(r->second, nullptr, false);
  if (doc.is_discarded() || !doc.contains("pipelines")) {
    a.why = fmt::format("the agent at {} did not answer /status with a status", a.admin);
    return a;
  }
  for (const json& p : doc["pipelines"]) {
    if (p.value("name", "") != pipeline) continue;
    a.available = true;
    a.state = p.value("state", "");
    a.paused = p.value("paused", false);
    a.lag_seconds = p.value("lag_seconds", 0.0);
    a.backlog_bytes = p.value("backlog_bytes", uint64_t{0});
    // A Redis Cluster source: the pipeline's figures above, the details per shard (a paused
    // shard's first).
    std::vector<json> parts;
    if (p.contains("shards")) {
      for (const json& s : p["shards"]) {
        if (s.value("paused", false))
          parts.insert(parts.begin(), s);
        else
          parts.push_back(s);
      }
    } else {
      parts.push_back(p);
    }
    for (const json& s : parts) {
      if (a.paused_reason.empty()) a.paused_reason = s.value("paused_reason", "");
      if (a.paused_detail.empty()) a.paused_detail = s.value("paused_detail", "");
      if (a.last_error.empty()) a.last_error = s.value("last_error", "");
      const json fs = s.value("full_sync", json::object());
      if (fs.value("active", false) && !a.full_sync) {
        a.full_sync = true;
        a.full_sync_done = fs.value("keys_done", uint64_t{0});
        a.full_sync_total = fs.value("keys_total", uint64_t{0});
      }
      const json clock = s.value("clock", json::object());
      if (!a.compensation_known && clock.contains("compensation_ms")) {
        a.compensation_known = true;
        a.compensation_ms = clock["compensation_ms"].get<int64_t>();
      }
    }
    return a;
  }
  a.why = fmt::format("the agent at {} runs no pipeline named \"{}\" (a config it has not loaded?)",
                      a.admin, pipeline);
  return a;
}

/** The running agent's restores of this key's target copy (GET /pipelines/NAME/restores,
 *  expiry-semantics.md §12), oldest first; `why` says why they could not be read. */
struct KeyRestores {
  bool read = false;
  std::string why;
  std::vector<json> notes;
  uint64_t kept = 0;  // the journal's length per instance
};

KeyRestores readRestores(const AgentView& agent, const std::string& pipeline, int db,
                         const std::string& key) {
  KeyRestores k;
  if (!agent.available) {
    k.why = agent.why;
    return k;
  }
  auto r = adminGet(agent.admin, "/pipelines/" + pipeline + "/restores", kAdminTimeout);
  if (!r || r->first != 200) {
    k.why = !r ? r.error().message
               : fmt::format("the agent at {} answered /pipelines/{}/restores with HTTP {}",
                             agent.admin, pipeline, r->first);
    return k;
  }
  const json doc = json::parse(r->second, nullptr, false);
  if (doc.is_discarded() || !doc.contains("restores")) {
    k.why = "the agent's answer holds no restores";
    return k;
  }
  k.read = true;
  k.kept = doc.value("kept_per_instance", uint64_t{0});
  const std::string printable = printableKey(key);
  for (const json& n : doc["restores"]) {
    if (n.value("db", -1) == db && n.value("key", "") == printable) k.notes.push_back(n);
  }
  return k;
}

class Explainer {
 public:
  Explainer(const config::Config& cfg, const config::PipelineConfig& pipe, ExplainOptions opt,
            net::any_io_executor ex)
      : cfg_(cfg),
        pipe_(pipe),
        src_cfg_(*cfg.cluster(pipe.source)),
        dst_cfg_(*cfg.cluster(pipe.target)),
        opt_(std::move(opt)),
        src_(VerifySide::make(ex, src_cfg_, "source", kTimeout)),
        dst_(VerifySide::make(ex, dst_cfg_, "target", kTimeout)),
        // The key space and the maxTTL policy the pipeline's sink is built with (pipeline.cc).
        keys_(std::make_shared<const filters::KeySpace>(pipe, src_cfg_.slots)),
        policy_(dst_cfg_.buckets) {}

  net::awaitable<int> run();

 private:
  /** Step 1: the key space's verdict, as a rule name and a sentence. */
  void judgeKeySpace();
  /** Steps 2 and 3: target key, collection, maxTTL, the deadline written now. */
  void judgeWrite();
  /** Step 4: the target's copy against the rules, and the reasons for what is seen. */
  void judgeTarget();
  /** The key's restores (§12) in words: why its copy ended and when it was written whole. */
  void judgeHistory();
  void printTable() const;
  /** The key's collection policies (M alone without any beside max_ttl). */
  target::KeyPolicy keyPolicy() const;
  /** What target::decide needs, as explain knows it (the source's value, first-seen). */
  verify::PolicyFacts policyFacts(int64_t e) const;

  const config::Config& cfg_;
  const config::PipelineConfig& pipe_;
  const config::ClusterConfig& src_cfg_;
  const config::ClusterConfig& dst_cfg_;
  ExplainOptions opt_;
  std::unique_ptr<VerifySide> src_, dst_;
  filters::KeySpaceConstSharedPtr keys_;
  target::MaxTtlPolicy policy_;

  // Clocks: each cluster's against this host's; the target's now for the clamp.
  int64_t local_now_ms_ = 0;
  int64_t source_offset_ms_ = 0, target_offset_ms_ = 0;
  std::string clock_note_;  // when a cluster's clock could not be read
  int64_t source_now_ms_ = 0, target_now_ms_ = 0;
  int64_t shift_ms_ = 0;  // §7 compensation Δ added to source deadlines
  std::string shift_from_;

  AgentView agent_;
  SideKey src_key_, dst_key_;
  bool dst_read_ = false;

  // Step 1.
  bool selected_ = false;
  std::string rule_;  // "" selected; "dbs", "slots", "include_keys", "exclude_keys"
  std::string pattern_;
  std::string filter_detail_;
  // Step 2.
  int target_db_ = -1;
  std::string target_key_;
  std::string collection_;
  bool bucket_configured_ = false;
  int64_t max_ttl_ms_ = 0;
  std::string max_ttl_from_;
  // Step 3.
  int64_t replicated_ms_ = 0;  // E after the filter (strip_ttl) and the compensation; 0 none
  bool stripped_ = false;
  int64_t would_write_ms_ = 0;  // clamp(E, M, target now); 0 none
  bool clamped_ = false;
  bool expired_on_arrival_ = false;
  std::string deadline_rule_;
  // A collection policy beside max_ttl (expiry-semantics.md §8): which, what was read.
  target::KeyPolicy key_policy_;
  std::string policies_;     // describePolicy()
  std::string policy_rule_;  // target::decide's rule ("ttl_field", "default_ttl", ...)
  std::string fields_read_;  // "ttl = 60", "no field \"ttl\" in the value", ...
  std::string first_seen_;   // max_lifetime: the record used, or why none
  std::optional<FirstSeenView> first_seen_view_;
  bool value_for_policy_ = false;  // the source value was read for its fields (idle time reset)
  // Step 4.
  std::string verdict_;
  bool matches_ = false;
  std::string target_detail_;
  std::vector<std::string> reasons_;
  KeyRestores restores_;              // the running agent's restores of this key (§12)
  std::vector<std::string> history_;  // the last of them, in words
};

void Explainer::judgeKeySpace() {
  using Rule = filters::KeySpace::KeyVerdict::Rule;
  target_db_ = keys_->mapDb(opt_.db);
  if (target_db_ < 0) {
    rule_ = "dbs";
    std::string mapped;
    for (const auto& [s, t] : keys_->dbMap()) {
      mapped += fmt::format("{}{} -> {}", mapped.empty() ? "" : ", ", s, t);
    }
    filter_detail_ =
        fmt::format("source db {} is not in the pipeline's dbs map ({})", opt_.db, mapped);
  }
  const auto v = keys_->judgeKey(opt_.key);
  if (rule_.empty()) {
    switch (v.rule) {
      case Rule::Passes:
        break;
      case Rule::Slot:
        rule_ = "slots";
        filter_detail_ = fmt::format(
            "its hash slot {} is not among the source cluster's slots ({}): another agent "
            "replicates it",
            v.slot, src_cfg_.slotsText());
        break;
      case Rule::Include: {
        rule_ = "include_keys";
        std::string all;
        for (const auto& p : pipe_.filters.include_keys) {
          all += (all.empty() ? "" : ", ") + quote(p.value);
        }
        filter_detail_ = fmt::format("it matches none of include_keys: {}", all);
        break;
      }
      case Rule::Exclude: {
        rule_ = "exclude_keys";
        const auto& p = pipe_.filters.exclude_keys.at(static_cast<size_t>(v.pattern));
        pattern_ = p.value;
        filter_detail_ = fmt::format("exclude_keys pattern {} matches it ({}:{})", quote(p.value),
                                     cfg_.path, p.mark.line);
        break;
      }
    }
  }
  // The pipeline's own filter on the key as a full sync (or a create) delivers it: the same
  // judgement that decides what is written (it also applies strip_ttl).
  PipelineStats stats;
  filters::EventFilter filter(pipe_, keys_, stats);
  source::Change c;
  c.effect = source::Effect::SnapshotKey;
  c.db = opt_.db;
  source::Event ev;
  ev.kind = EventKind::Mutation;
  ev.rule = source::DeadlineRule::Explicit;
  ev.db = opt_.db;
  ev.key = opt_.key;
  ev.deadline_ms = src_key_.deadline > 0 ? src_key_.deadline : 0;
  c.events.push_back(ev);
  filter.judge(c);
  selected_ = c.events[0].pass;
  stripped_ = c.events[0].stripped;
  replicated_ms_ = c.events[0].deadline_ms;
  if (selected_ != rule_.empty()) {
    // Cannot happen while judgeKey is the filter's own judgement; say so rather than guess.
    filter_detail_ += " (the event filter disagrees: please report this)";
  }
  if (selected_) {
    std::string how = keys_->dbMap().empty()
                          ? fmt::format("db {} to db {}", opt_.db, target_db_)
                          : fmt::format("db {} mapped to db {} (dbs)", opt_.db, target_db_);
    std::string parts;
    if (!src_cfg_.slots.empty()) {
      parts += fmt::format("; slot {} is among the source's slots", cluster::keySlot(opt_.key));
    }
    parts += pipe_.filters.include_keys.empty() ? "; no include_keys" : "; matches include_keys";
    parts += pipe_.filters.exclude_keys.empty() ? "; no exclude_keys"
                                                : "; no exclude_keys pattern matches";
    filter_detail_ = "replicated: " + how + parts;
  }
}

void Explainer::judgeWrite() {
  if (target_db_ < 0) return;
  auto [prefix, rest] = keys_->rewrite(opt_.key);
  target_key_ = std::string(prefix) + std::string(rest);
  collection_ = std::string(policy_.collectionOf(target_db_, target_key_));
  max_ttl_ms_ = policy_.empty() ? 0 : policy_.effectiveMs(target_db_, target_key_);
  // Where M comes from, for the reader (MaxTtlPolicy decided it).
  const config::BucketConfig* bucket = nullptr;
  for (const auto& b : dst_cfg_.buckets) {
    if (b.db == target_db_) bucket = &b;
  }
  bucket_configured_ = bucket != nullptr;
  if (max_ttl_ms_ == 0) {
    max_ttl_from_ = bucket ? "none: neither the bucket nor the collection sets one"
                           : fmt::format("none: the target {} declares no bucket for db {}",
                                         dst_cfg_.name, target_db_);
  } else {
    int64_t own = 0;
    if (bucket) {
      for (const auto& c : bucket->collections) {
        if (c.name == collection_) own = c.max_ttl.count();
      }
    }
    if (own > 0) {
      max_ttl_from_ = fmt::format("set by collection {}", collection_);
    } else if (collection_ == "_default") {
      max_ttl_from_ = fmt::format("set by bucket db {} (the key is in no collection)", target_db_);
    } else {
      max_ttl_from_ = fmt::format("inherited from bucket db {} (collection {} sets 0)", target_db_,
                                  collection_);
    }
  }
  // The applier: the source deadline translated into the target's clock, then the clamp
  // against the target's now (expiry-semantics.md §4, §7).
  const int64_t e = replicated_ms_ == 0 ? 0 : replicated_ms_ + shift_ms_;
  key_policy_ = keyPolicy();
  if (key_policy_.any()) {
    // The collection's policy: the agent's own decision (target::decide) for a whole-value
    // write of the source's value now, the first-seen record as the state dir holds it.
    const target::CollectionPolicy& pol = *key_policy_.policy;
    policies_ = verify::describePolicy(key_policy_);
    const verify::PolicyFacts f = policyFacts(e);
    const verify::PolicyRange r = verify::wholeValueRange(f);
    would_write_ms_ = r.hi;
    policy_rule_ = r.rule;
    clamped_ = would_write_ms_ != e && (r.rule == "max_ttl" || r.rule == "max_lifetime");
    expired_on_arrival_ = would_write_ms_ != 0 && would_write_ms_ <= target_now_ms_;
    if (pol.reads_value()) {
      const std::string& field = pol.ttl_field.empty() ? pol.expire_at_field : pol.ttl_field;
      if (!f.value) {
        fields_read_ =
            src_key_.type == "string"
                ? fmt::format("field {} not read: the value could not be read", quote(field))
                : fmt::format(
                      "no field {}: a {} carries none (only a string's JSON "
                      "value does)",
                      quote(field), src_key_.type);
      } else if (!pol.ttl_field.empty()) {
        const target::TtlField t = target::readTtlField(*f.value, field);
        fields_read_ = t.kind == target::TtlField::Kind::Seconds
                           ? fmt::format("{} = {}", field, t.seconds)
                       : t.kind == target::TtlField::Kind::Never
                           ? fmt::format("{} = -1 (never)", field)
                           : fmt::format(
                                 "no valid {} in the value (absent, not a JSON object, or not a "
                                 "positive integer or -1): no field",
                                 quote(field));
      } else if (auto at = target::readExpireAt(*f.value, field)) {
        fields_read_ = fmt::format("{} = {} ({})", field, *at, isoDate(*at));
      } else {
        fields_read_ = fmt::format(
            "no valid date {} in the value (absent, not a JSON object, or neither an ISO-8601 "
            "date nor Unix seconds): no field",
            quote(field));
      }
    }
    if (pol.max_lifetime_ms > 0) {
      const std::string from =
          first_seen_view_ ? first_seen_view_->note() : std::string("not read");
      if (f.first.known()) {
        first_seen_ = fmt::format("first write at {} ({}){}; {}", f.first.max_s,
                                  isoDate(f.first.max_s * 1000),
                                  f.first.min_s != f.first.max_s
                                      ? fmt::format(" (instances disagree: also {})", f.first.min_s)
                                      : "",
                                  from);
      } else {
        first_seen_ = fmt::format(
            "unknown: no record of the key ({}); a write now records {} and caps it there, an "
            "earlier first write (its record forgotten) would cap it earlier",
            from, (target_now_ms_ + 999) / 1000);
      }
    }
    deadline_rule_ = fmt::format("{} ({})", policy_rule_, policies_);
    return;
  }
  would_write_ms_ = target::clampDeadline(e, max_ttl_ms_, target_now_ms_);
  clamped_ = would_write_ms_ != e;
  expired_on_arrival_ = would_write_ms_ != 0 && would_write_ms_ <= target_now_ms_;
  const std::string m = duration(max_ttl_ms_);
  if (max_ttl_ms_ == 0) {
    deadline_rule_ = e == 0 ? "no deadline (no max_ttl)" : "E (no max_ttl)";
  } else if (e == 0) {
    deadline_rule_ = fmt::format("now + max_ttl {} (no source deadline{})", m,
                                 stripped_ ? " after strip_ttl" : "");
  } else {
    deadline_rule_ = clamped_ ? fmt::format("now + max_ttl {} (earlier than E)", m)
                              : fmt::format("E (earlier than now + max_ttl {})", m);
  }
}

target::KeyPolicy Explainer::keyPolicy() const {
  if (policy_.hasPolicies()) return policy_.resolve(target_db_, target_key_);
  target::KeyPolicy kp;
  kp.max_ttl_ms = max_ttl_ms_;
  return kp;
}

verify::PolicyFacts Explainer::policyFacts(int64_t e) const {
  verify::PolicyFacts f;
  f.policy = key_policy_;
  f.e = e;
  if (src_key_.type == "string" && src_key_.value_read &&
      src_key_.value.type == resp::ReplyType::Bulk) {
    f.value = src_key_.value.str;
  }
  if (key_policy_.maxLifetimeMs() > 0 && first_seen_view_) {
    f.first = first_seen_view_->find(target_db_, target_key_);
  }
  f.now = target_now_ms_;
  f.tolerance_ms = opt_.ttl_tolerance.count();
  return f;
}

void Explainer::judgeTarget() {
  const int64_t tol = opt_.ttl_tolerance.count();
  auto agentReasons = [&] {
    if (!agent_.available) {
      reasons_.push_back("the pipeline's state is unknown: " + agent_.why);
      return;
    }
    if (agent_.paused) {
      // The agent's detail says how to resume when an operator paused it.
      reasons_.push_back(fmt::format(
          "the pipeline is paused ({}{}): nothing is applied to the target until it resumes",
          agent_.paused_reason.empty() ? "no reason given" : agent_.paused_reason,
          agent_.paused_detail.empty() ? "" : ": " + agent_.paused_detail));
    } else if (agent_.full_sync) {
      reasons_.push_back(fmt::format("the pipeline is in a full sync ({} of {} keys written)",
                                     agent_.full_sync_done, agent_.full_sync_total));
    } else if (agent_.state != "streaming") {
      reasons_.push_back(fmt::format("the pipeline is {}, not streaming{}", agent_.state,
                                     agent_.last_error.empty() ? "" : ": " + agent_.last_error));
    }
    if (agent_.lag_seconds > 0 || agent_.backlog_bytes > 0) {
      reasons_.push_back(fmt::format(
          "the pipeline is behind: lag {:.3f} s, backlog {} B (the source's writes not yet "
          "applied)",
          agent_.lag_seconds, agent_.backlog_bytes));
    }
  };

  if (!selected_) {
    verdict_ = "filtered";
    reasons_.push_back(fmt::format("not replicated by this pipeline: {}", filter_detail_));
    if (dst_read_ && dst_key_.exists()) {
      reasons_.push_back(
          "the target's key is not this pipeline's (another writer, or written before the "
          "filter changed); the agent leaves it alone");
    }
    return;
  }
  if (!src_key_.exists()) {
    verdict_ = "source_absent";
    if (dst_key_.exists()) {
      target_detail_ = "the target holds a key the source lacks";
      if (pipe_.filters.drop_deletions || pipe_.filters.drop_expirations) {
        reasons_.push_back(fmt::format(
            "{} is set: the source's removal of the key is not replicated; the target's copy "
            "ends at its own deadline ({})",
            pipe_.filters.drop_deletions && pipe_.filters.drop_expirations
                ? "drop_deletions and drop_expirations"
            : pipe_.filters.drop_deletions ? "drop_deletions"
                                           : "drop_expirations",
            when(dst_key_.deadline, target_now_ms_)));
      }
      agentReasons();
      reasons_.push_back(
          "or another writer created it on the target (a full sync does not delete target "
          "keys unless full_sync.delete_stale_keys)");
    } else {
      reasons_.push_back(fmt::format(
          "the source has no key {} in db {}: nothing to replicate (absent on both sides)",
          quote(opt_.key), opt_.db));
    }
    return;
  }
  const verify::DeadlineRules rules{pipe_.filters.strip_ttl, shift_ms_, tol};
  if (dst_key_.exists()) {
    const bool type_ok = dst_key_.type == src_key_.type;
    const bool value_ok =
        !src_key_.value_read || !dst_key_.value_read || src_key_.value == dst_key_.value;
    std::optional<verify::PolicyJudgement> pj;
    if (key_policy_.any()) {
      const int64_t e = replicated_ms_ == 0 ? 0 : replicated_ms_ + shift_ms_;
      pj = verify::judgePolicyDeadline(policyFacts(e), dst_key_.deadline);
    }
    const bool deadline_ok =
        pj ? pj->verdict != verify::PolicyVerdict::Mismatch
           : rules.allows(src_key_.deadline, dst_key_.deadline, max_ttl_ms_, target_now_ms_);
    matches_ = type_ok && value_ok && deadline_ok;
    if (!type_ok) {
      target_detail_ =
          fmt::format("a {} on the target, a {} on the source", dst_key_.type, src_key_.type);
    } else if (!value_ok) {
      target_detail_ = fmt::format("{} differs: source {}, target {}",
                                   src_key_.type == "string" ? "the value" : "the element count",
                                   src_key_.value.describe(), dst_key_.value.describe());
    } else if (pj && pj->verdict != verify::PolicyVerdict::Ok) {
      // Mismatch, or not checked: the policy depends on the last write kind (§8.1).
      target_detail_ = pj->detail;
    } else if (pj) {
      target_detail_ = fmt::format("matches: the deadline {} gives ({})", policies_, pj->expected);
    } else if (!deadline_ok) {
      target_detail_ = fmt::format(
          "its deadline {} is not one the rules allow (expected {}{})",
          when(dst_key_.deadline, target_now_ms_),
          when(rules.expected(src_key_.deadline), target_now_ms_),
          max_ttl_ms_ > 0 ? fmt::format(", or a clamp by max_ttl {} at a past write, at most {}",
                                        duration(max_ttl_ms_),
                                        when(target_now_ms_ + max_ttl_ms_, target_now_ms_))
                          : "");
    } else {
      target_detail_ = dst_key_.deadline >= 0 && max_ttl_ms_ > 0 &&
                               !rules.matches(rules.expected(src_key_.deadline), dst_key_.deadline)
                           ? "matches: a deadline clamped by max_ttl at its last write"
                           : "matches: the deadline the rules give";
      if (!src_key_.value_read || !dst_key_.value_read) {
        target_detail_ += " (the value was not compared; xdcr-agent verify compares it)";
      } else if (src_key_.type != "string") {
        target_detail_ += " (the element count compared; xdcr-agent verify compares contents)";
      }
    }
    verdict_ = matches_ ? "in_sync" : "differs";
    if (matches_ && pj && pj->verdict == verify::PolicyVerdict::NotChecked) {
      verdict_ = "deadline_not_checked";
    }
    if (!matches_) {
      agentReasons();
      if (reasons_.empty() || !agent_.available) {
        reasons_.push_back(fmt::format(
            "a write the target missed or another writer: xdcr-agent verify -c {} -p {} "
            "lists such keys; xdcr-agent resync copies the whole key space again",
            cfg_.path, pipe_.name));
      }
    }
    return;
  }
  // Absent on the target: the likely reasons, in order.
  target_detail_ = "absent on the target";
  if (expired_on_arrival_) {
    verdict_ = "expired_on_arrival";
    reasons_.push_back(fmt::format(
        "its deadline on the target would be {}, already past: the agent writes DEL instead "
        "(expired on arrival, expiry-semantics.md §4)",
        when(would_write_ms_, target_now_ms_)));
    return;
  }
  if (key_policy_.any()) {
    verify::AbsenceEvidence e;
    e.tolerance_ms = tol;
    e.idle_s = src_key_.idle_s;
    e.idle_unreadable = src_key_.idle_error;
    auto bound = lastFullSyncBoundMs(cfg_.agent.state_dir, pipe_.name);
    if (bound) {
      e.since_full_sync_ms = std::max<int64_t>(0, local_now_ms_ - *bound);
    } else {
      e.full_sync_unknown = bound.error().message;
    }
    const int64_t rep_e = replicated_ms_ == 0 ? 0 : replicated_ms_ + shift_ms_;
    const verify::AbsenceVerdict a = verify::judgePolicyAbsence(policyFacts(rep_e), e);
    if (a.expired) {
      verdict_ = "ended_by_policy";
      reasons_.push_back(a.detail +
                         "; the next write of the key on the source replicates it again");
      return;
    }
    reasons_.push_back("not ended by the collection's policy: " + a.detail);
  } else if (max_ttl_ms_ > 0) {
    verify::AbsenceEvidence e;
    e.max_ttl_ms = max_ttl_ms_;
    e.tolerance_ms = tol;
    e.idle_s = src_key_.idle_s;
    e.idle_unreadable = src_key_.idle_error;
    auto bound = lastFullSyncBoundMs(cfg_.agent.state_dir, pipe_.name);
    if (bound) {
      e.since_full_sync_ms = std::max<int64_t>(0, local_now_ms_ - *bound);
    } else {
      e.full_sync_unknown = bound.error().message;
    }
    const verify::AbsenceVerdict a = verify::judgeAbsence(e);
    if (a.expired) {
      verdict_ = "ended_by_max_ttl";
      reasons_.push_back(fmt::format(
          "its copy expired by its clamped deadline (written at the latest when the source key "
          "was last touched, {} s ago, + max_ttl {}): {}; the next write of the key on the "
          "source replicates it again",
          src_key_.idle_s, duration(max_ttl_ms_), a.detail));
      return;
    }
    reasons_.push_back("not expired by max_ttl: " + a.detail);
  }
  verdict_ = "missing";
  const size_t before = reasons_.size();
  agentReasons();
  const bool explained = agent_.available && reasons_.size() > before;
  reasons_.push_back(fmt::format(
      "{}not yet replicated (the write is still on its way), or lost on the target since (a "
      "flush, an eviction or another writer's DEL there): xdcr-agent verify -c {} -p {} counts "
      "such keys; xdcr-agent resync -c {} -p {} copies the key space again",
      explained ? "otherwise: " : "", cfg_.path, pipe_.name, cfg_.path, pipe_.name));
}

void Explainer::judgeHistory() {
  // The last three, oldest first.
  const size_t n = restores_.notes.size();
  for (size_t i = n > 3 ? n - 3 : 0; i < n; ++i) {
    const json& note = restores_.notes[i];
    const std::string reason = note.value("reason", "");
    const int64_t deadline = note.value("copy_deadline_ms", int64_t{0});
    const int64_t found = note.value("found_at_ms", int64_t{0});
    const int64_t restored = note.value("restored_at_ms", int64_t{0});
    const std::string cause = reason == "clamped_before_write"
                                  ? "the target's max_ttl or collection policy"
                              : reason == "field_expired_before_write" ? "a hash field's own TTL"
                                                                       : "its deadline";
    std::string ended =
        deadline > 0 ? fmt::format("the target ended its copy at {} ({})", isoDate(deadline), cause)
                     : fmt::format("the target had ended its copy ({})", cause);
    std::string h =
        reason == "unconfirmed_before_restart"
            ? fmt::format(
                  "the target applied a write of the unit ending at offset {} before the agent "
                  "stopped, and the agent never learned whether its copy was still there: ",
                  note.value("write_offset", uint64_t{0}))
            : fmt::format(
                  "{}; the source's later write (the unit ending at offset {}) reached the "
                  "target after that{}: ",
                  ended, note.value("write_offset", uint64_t{0}),
                  found > 0 ? fmt::format(" (answered at {})", isoDate(found)) : "");
    if (note.value("source_had_it", true)) {
      h += fmt::format(
          "the whole document was read back from the source at offset {} and written at {} "
          "[{}, expiry-semantics.md §12]",
          note.value("read_offset", uint64_t{0}), isoDate(restored), reason);
    } else {
      h += fmt::format(
          "the source no longer had the key at offset {}, so it was deleted on the target at {} "
          "[{}, expiry-semantics.md §12]",
          note.value("read_offset", uint64_t{0}), isoDate(restored), reason);
    }
    history_.push_back(std::move(h));
  }
  if (n > 3) history_.insert(history_.begin(), fmt::format("{} restores, the last 3:", n));
}

net::awaitable<int> Explainer::run() {
  // Reading the key must not reset its idle time: it is the evidence that a max_ttl ended the
  // target's copy (verify relies on it too).
  src_->keepIdleTimes();
  for (VerifySide* side : {src_.get(), dst_.get()}) {
    if (auto s = co_await side->connect(); !s) {
      std::cerr << "explain: cannot connect: " << s.error().message << "\n";
      co_return 2;
    }
  }
  // The clocks: the target's now for the clamp, the source's for its deadlines.
  auto ts = co_await clock::probeRedisTime(src_->clockConnection(), 4, kTimeout);
  auto td = co_await clock::probeRedisTime(dst_->clockConnection(), 4, kTimeout);
  if (ts) source_offset_ms_ = ts->offset_ns / 1'000'000;
  if (td) target_offset_ms_ = td->offset_ns / 1'000'000;
  if (!ts || !td) {
    clock_note_ = fmt::format("a cluster's clock could not be read ({}): this host's is used",
                              !ts ? ts.error().message : td.error().message);
  }
  agent_ = readAgent(cfg_, pipe_.name);
  restores_ = readRestores(agent_, pipe_.name, opt_.db, opt_.key);
  if (agent_.compensation_known) {
    shift_ms_ = agent_.compensation_ms;
    shift_from_ = "as the running agent applies it";
  } else if (ts && td && cfg_.clock.on_skew == config::SkewAction::Compensate) {
    const int64_t delta = (td->offset_ns - ts->offset_ns) / 1'000'000;
    shift_ms_ = std::llabs(delta) > cfg_.clock.max_skew.count() ? delta : 0;
    shift_from_ = "measured now (clock.on_skew: compensate)";
  } else {
    shift_from_ = cfg_.clock.on_skew == config::SkewAction::Compensate
                      ? "unknown (clocks unread)"
                      : "none (clock.on_skew is not compensate)";
  }

  if (src_->isCluster() && opt_.db != 0) {
    std::cerr << "explain: " << src_->label() << " is a Redis Cluster: it has only db 0, not db "
              << opt_.db << "\n";
    co_return 2;
  }
  // A collection policy that reads a field of the value (ttl_field, expire_at_field) needs it,
  // even without NO-TOUCH: the idle time is read first, so this run's evidence stays intact.
  bool policy_reads = false;
  if (policy_.hasPolicies() && keys_->mapDb(opt_.db) >= 0) {
    auto [prefix, rest] = keys_->rewrite(opt_.key);
    const target::KeyPolicy kp =
        policy_.resolve(keys_->mapDb(opt_.db), std::string(prefix) + std::string(rest));
    policy_reads = kp.policy != nullptr && kp.policy->reads_value();
  }
  value_for_policy_ = policy_reads && !src_->idleTimesReset().empty();
  // The source: NO-TOUCH makes the value read harmless; without it only the first reads.
  auto s = co_await readKey(*src_, opt_.db, opt_.key, true,
                            src_->idleTimesReset().empty() || policy_reads);
  if (!s) {
    std::cerr << "explain: " << s.error().message << "\n";
    co_return 2;
  }
  src_key_ = std::move(*s);
  local_now_ms_ = localNowMs();
  source_now_ms_ = local_now_ms_ + source_offset_ms_;
  target_now_ms_ = local_now_ms_ + target_offset_ms_;
  if (policy_.maxLifetimeMs() > 0) {
    // max_lifetime: the first-seen records, read-only (never written by explain).
    first_seen_view_ = FirstSeenView::load(cfg_.agent.state_dir, pipe_.name,
                                           policy_.maxLifetimeMs(), target_now_ms_);
  }

  judgeKeySpace();
  judgeWrite();
  if (target_db_ >= 0 && (target_db_ == 0 || !dst_->isCluster())) {
    auto t = co_await readKey(*dst_, target_db_, target_key_, false, true);
    if (!t) {
      std::cerr << "explain: " << t.error().message << "\n";
      co_return 2;
    }
    dst_key_ = std::move(*t);
    dst_read_ = true;
  }
  judgeTarget();
  judgeHistory();

  if (opt_.json) {
    json j;
    j["pipeline"] = pipe_.name;
    j["key"] = opt_.key;
    j["source_db"] = opt_.db;
    j["verdict"] = verdict_;
    j["source"] = {{"cluster", src_cfg_.name},
                   {"label", src_->label()},
                   {"exists", src_key_.exists()},
                   {"type", src_key_.type},
                   {"deadline_ms", src_key_.deadline},
                   {"deadline", src_key_.deadline > 0 ? isoDate(src_key_.deadline) : ""},
                   {"idle_seconds", src_key_.idle_s},
                   {"idle_times_kept", src_->idleTimesReset().empty()},
                   {"now_ms", source_now_ms_}};
    if (!src_key_.idle_error.empty() && src_key_.exists()) {
      j["source"]["idle_unreadable"] = src_key_.idle_error;
    }
    if (!src_->idleTimesReset().empty()) j["source"]["idle_times_reset"] = src_->idleTimesReset();
    j["filters"] = {{"selected", selected_},
                    {"rule", rule_.empty() ? json(nullptr) : json(rule_)},
                    {"pattern", pattern_.empty() ? json(nullptr) : json(pattern_)},
                    {"detail", filter_detail_},
                    {"strip_ttl", pipe_.filters.strip_ttl},
                    {"drop_expirations", pipe_.filters.drop_expirations},
                    {"drop_deletions", pipe_.filters.drop_deletions}};
    j["target"] = {{"cluster", dst_cfg_.name},
                   {"label", dst_->label()},
                   {"db", target_db_},
                   {"key", target_db_ >= 0 ? json(target_key_) : json(nullptr)},
                   {"bucket_db", target_db_},
                   {"bucket_configured", bucket_configured_},
                   {"collection", collection_},
                   {"max_ttl_ms", max_ttl_ms_},
                   {"max_ttl_from", max_ttl_from_}};
    j["deadline"] = {{"source_ms", src_key_.deadline},
                     {"strip_ttl", pipe_.filters.strip_ttl},
                     {"stripped", stripped_},
                     {"compensation_ms", shift_ms_},
                     {"compensation_from", shift_from_},
                     {"replicated_ms", replicated_ms_ == 0 ? 0 : replicated_ms_ + shift_ms_},
                     {"max_ttl_ms", max_ttl_ms_},
                     {"target_now_ms", target_now_ms_},
                     {"would_write_ms", would_write_ms_},
                     {"would_write", would_write_ms_ > 0 ? isoDate(would_write_ms_) : ""},
                     {"clamped", clamped_},
                     {"expired_on_arrival", expired_on_arrival_},
                     {"rule", deadline_rule_}};
    if (!clock_note_.empty()) j["deadline"]["clock_note"] = clock_note_;
    if (key_policy_.any()) {
      // Only under a collection policy beside max_ttl: the report keeps its shape otherwise.
      j["policy"] = {{"collection", collection_},
                     {"policies", policies_},
                     {"applied", policy_rule_},
                     {"fields_read", fields_read_},
                     {"first_seen", first_seen_},
                     {"deadline_ms", would_write_ms_},
                     {"value_read_for_fields", value_for_policy_}};
    }
    j["on_target"] = {{"read", dst_read_},
                      {"exists", dst_key_.exists()},
                      {"type", dst_key_.type},
                      {"deadline_ms", dst_key_.deadline},
                      {"deadline", dst_key_.deadline > 0 ? isoDate(dst_key_.deadline) : ""},
                      {"matches", matches_},
                      {"detail", target_detail_}};
    j["pipeline_status"] = agent_.toJson();
    j["restores"] = {{"read", restores_.read},
                     {"reason", restores_.why},
                     {"notes", restores_.notes},
                     {"history", history_}};
    j["reasons"] = reasons_;
    // Keys and values may be any bytes: not UTF-8 is replaced, not an exception.
    std::cout << j.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
  } else {
    printTable();
  }
  co_return 0;
}

void Explainer::printTable() const {
  const auto line = [](const char* what, const std::string& text) {
    std::printf("%-11s %s\n", what, text.c_str());
  };
  std::printf("explain: pipeline %s, key %s in source db %d (a dry run: nothing is written)\n",
              pipe_.name.c_str(), quote(opt_.key).c_str(), opt_.db);
  std::string src;
  if (!src_key_.exists()) {
    src = fmt::format("{}: no such key in db {}", src_->label(), opt_.db);
  } else {
    src = fmt::format("{}: a {}, deadline {}", src_->label(), src_key_.type,
                      when(src_key_.deadline, source_now_ms_));
    src += src_key_.idle_s >= 0 ? fmt::format(", idle {} s", src_key_.idle_s)
                                : fmt::format(", idle time unreadable ({})", src_key_.idle_error);
  }
  if (!src_->idleTimesReset().empty()) {
    src += fmt::format(
        "; no CLIENT NO-TOUCH ({}): its value was not read, so that its idle "
        "time stays as it was",
        src_->idleTimesReset());
  }
  line("source", src);
  line("filters",
       fmt::format("{}{}", selected_ ? "" : "NOT replicated (" + rule_ + "): ", filter_detail_));
  std::vector<std::string> removal;
  if (pipe_.filters.drop_expirations) removal.push_back("its expiry on the source is not sent");
  if (pipe_.filters.drop_deletions) removal.push_back("its deletion on the source is not sent");
  if (!removal.empty()) {
    std::string r;
    for (const auto& x : removal) r += (r.empty() ? "" : "; ") + x;
    line("", r + " (drop_expirations/drop_deletions)");
  }
  if (target_db_ >= 0) {
    line("target", fmt::format("{}: db {}, key {}{}", dst_->label(), target_db_, quote(target_key_),
                               target_key_ != opt_.key ? " (key_rewrite)" : ""));
    line("collection", fmt::format("bucket db {}{}, collection {}; max_ttl {}", target_db_,
                                   bucket_configured_ ? "" : " (not declared)", collection_,
                                   max_ttl_ms_ > 0 ? duration(max_ttl_ms_) + ", " + max_ttl_from_
                                                   : max_ttl_from_));
    std::string d = fmt::format("source E {}", when(src_key_.deadline, source_now_ms_));
    d += pipe_.filters.strip_ttl ? "; strip_ttl: E = none" : "; strip_ttl off";
    if (shift_ms_ != 0) d += fmt::format("; compensation {:+} ms ({})", shift_ms_, shift_from_);
    line("deadline", d);
    if (key_policy_.any()) {
      std::string p = policies_ + ": applied " + policy_rule_;
      if (!fields_read_.empty()) p += "; " + fields_read_;
      if (!first_seen_.empty()) p += "; max_lifetime first-seen: " + first_seen_;
      if (value_for_policy_) {
        p += "; the source value was read for its fields without CLIENT NO-TOUCH: its idle time "
             "is reset";
      }
      line("policy", p);
    }
    line("", fmt::format("written now: {} = {}{}", deadline_rule_,
                         when(would_write_ms_, target_now_ms_),
                         expired_on_arrival_ ? ": EXPIRED ON ARRIVAL (sent as DEL)" : ""));
    if (!clock_note_.empty()) line("", clock_note_);
    std::string t;
    if (!dst_read_) {
      t = "not read";
    } else if (!dst_key_.exists()) {
      t = "absent";
    } else {
      t = fmt::format("a {}, deadline {}: {}", dst_key_.type,
                      when(dst_key_.deadline, target_now_ms_), target_detail_);
    }
    line("on target", t);
  }
  if (agent_.available) {
    std::string p = fmt::format("{}{}, lag {:.3f} s, backlog {} B (agent at {})", agent_.state,
                                agent_.paused ? " (paused: " + agent_.paused_reason + ")" : "",
                                agent_.lag_seconds, agent_.backlog_bytes, agent_.admin);
    line("pipeline", p);
  } else {
    line("pipeline", "unknown: " + agent_.why);
  }
  for (const std::string& h : history_) line("history", h);
  line("verdict", verdict_);
  for (size_t i = 0; i < reasons_.size(); ++i) {
    std::printf("  %zu. %s\n", i + 1, reasons_[i].c_str());
  }
}

}  // namespace

int runExplain(const config::ConfigConstSharedPtr& config, const ExplainOptions& options) {
  const config::PipelineConfig* pipe = config->pipeline(options.pipeline);
  if (pipe == nullptr) {
    std::cerr << "explain: " << noSuchPipeline(*config, options.pipeline) << "\n";
    return 78;
  }
  if (const config::ClusterConfig* t = config->cluster(pipe->target);
      t != nullptr && t->isMemcached()) {
    // Explain reads the target's copy with Redis commands (TYPE, PEXPIRETIME, OBJECT).
    std::cerr << "explain: pipeline " << pipe->name << " writes to memcached (cluster " << t->name
              << ", " << t->address()
              << "): explain reads a Redis target only. Check one key with `xdcr-agent verify -c "
              << config->path << " -p " << pipe->name
              << "` (it reads memcached with `mg <key> v t`), or ask memcached directly: "
                 "`mg <key> v t f` (the key in base64 with `b` if it has bytes other than "
                 "printable ASCII)\n";
    return 2;
  }
  net::io_context ioc(1);
  Explainer x(*config, *pipe, options, ioc.get_executor());
  return runOneShot("explain", ioc, x.run());
}

}  // namespace xdcr::replicator
