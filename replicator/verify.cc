#include "replicator/verify.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "clock/memcached_time.h"
#include "clock/redis_time.h"
#include "common/redis_conn.h"
#include "common/stats.h"
#include "filters/key_space.h"
#include "replicator/checkpoint.h"
#include "replicator/first_seen_view.h"
#include "replicator/one_shot.h"
#include "replicator/verify_compare.h"
#include "replicator/verify_memcached.h"
#include "replicator/verify_side.h"
#include "source/expiry_index.h"
#include "source/rdb_value.h"
#include "target/marker.h"
#include "target/max_ttl.h"
#include "target/memcached_sink.h"

namespace xdcr::replicator {
namespace {

namespace net = boost::asio;
using Cmd = std::vector<std::string>;

constexpr auto kTimeout = std::chrono::seconds(10);
constexpr size_t kBatch = 100;              // keys per pipelined round trip (per side)
constexpr size_t kMaxExamples = 20;         // differences
constexpr size_t kMaxExpiredExamples = 10;  // keys max_ttl has provably ended
constexpr size_t kElementsPerRound = 1000;  // vector set elements (VEMB + VGETATTR) per round trip

using verify::FieldTtlSupport;
using verify::formatDeadline;
using verify::quote;

// FieldTtl: the key's contents and deadline are right, a hash field's deadline is not.
// Refused: a memcached target cannot hold the key by the rules (not a difference).
// NotChecked: a collection policy's deadline depends on the last write kind, which verify cannot
// know (expiry-semantics.md §8.1): within the window that write kind allows, counted apart.
// EndedByPolicy: absent, and the collection's policy provably ended its copy.
enum class Verdict {
  Ok,
  Missing,
  Value,
  Ttl,
  FieldTtl,
  SourceGone,
  EndedByMaxTtl,
  Refused,
  NotChecked,
  EndedByPolicy
};

const char* verdictName(Verdict v) {
  switch (v) {
    case Verdict::Missing:
      return "missing";
    case Verdict::Value:
      return "value";
    case Verdict::Ttl:
      return "ttl";
    case Verdict::FieldTtl:
      return "field-ttl";
    case Verdict::EndedByMaxTtl:
    case Verdict::EndedByPolicy:
      return "expired";
    case Verdict::Refused:
      return "refused";
    case Verdict::NotChecked:
      return "not-checked";
    default:
      return "ok";
  }
}

/** One side's view of a key. */
struct KeyState {
  std::string type;       // "none" when absent
  int64_t deadline = -1;  // PEXPIRETIME: -1 none
  resp::Value value;      // normalised (sets and hashes sorted; a vector set: vectorSetValue())
  // A hash: each field's deadline (HPEXPIRETIME, in the order of the fields in `value`), when
  // this side could say (a server without field TTLs: all none); else not compared.
  bool fields_read = false;
  std::vector<int64_t> field_deadlines;
  // The source, where a target maxTTL applies: OBJECT IDLETIME, read before the value (which
  // touches the key); -1 unreadable, with the reason.
  int64_t idle_s = -1;
  std::string idle_error;
  // A source key against a memcached target: the bytes the sink would store (a string as it
  // is, a non-string's JSON or DUMP payload), what is compared (the value, or the JSON a DUMP
  // payload decodes to), or why it cannot be encoded.
  std::string mc_value, mc_compare, mc_error;
};

struct KeyRef {
  int src_db, dst_db;
  std::string key, dst_key;
  // The source key's idle time as read in the first round (a recheck's reads come after
  // verify's own, which reset it on a server without CLIENT NO-TOUCH); -2 not read yet.
  int64_t idle_s = -2;
  std::string idle_error;
};

/** The commands that read a whole value of `type` (none for none). A vector set (Redis 8): its
 *  size and dimension, then (readStates) its elements, each one's vector and attribute: its DUMP
 *  is not stable (the same content serialises otherwise after a RESTORE). */
std::vector<Cmd> valueCommands(const std::string& type, const std::string& key) {
  if (type == "string") return {{"GET", key}};
  if (type == "list") return {{"LRANGE", key, "0", "-1"}};
  if (type == "set") return {{"SMEMBERS", key}};
  if (type == "zset") return {{"ZRANGE", key, "0", "-1", "WITHSCORES"}};
  if (type == "hash") return {{"HGETALL", key}};
  if (type == "stream") return {{"XRANGE", key, "-", "+"}};
  if (type == "vectorset") return {{"VCARD", key}, {"VDIM", key}};
  if (type == "none") return {};
  return {{"DUMP", key}};  // other module types: byte-equal serialisations
}

/** A refusal that no re-read changes (the ACL user lacks the command, the server has none). */
bool isRefusal(const resp::Value& v) {
  return v.isError() &&
         (v.str.rfind("NOPERM", 0) == 0 || v.str.find("unknown command") != std::string::npos);
}

/** Sets and hashes come back in an order that depends on encoding and history: sort them. A
 *  zset's scores are compared as the numbers they are: Redis 7.0 prints 0.33333333333333331
 *  where Redis 7.2+ and Valkey print 0.3333333333333333 (server-versions-notes.md §3.8). */
void normalise(const std::string& type, resp::Value& v) {
  if (v.type != resp::ReplyType::Array) return;
  auto& e = v.elements;
  if (type == "zset") {
    for (size_t i = 1; i < e.size(); i += 2) {
      e[i].str = fmt::format("{}", std::strtod(e[i].str.c_str(), nullptr));
    }
  } else if (type == "set") {
    std::sort(e.begin(), e.end(), [](const auto& a, const auto& b) { return a.str < b.str; });
  } else if (type == "hash" && e.size() % 2 == 0) {
    std::vector<std::pair<resp::Value, resp::Value>> pairs;
    for (size_t i = 0; i < e.size(); i += 2) pairs.emplace_back(e[i], e[i + 1]);
    std::sort(pairs.begin(), pairs.end(),
              [](const auto& a, const auto& b) { return a.first.str < b.first.str; });
    e.clear();
    for (auto& [f, val] : pairs) {
      e.push_back(std::move(f));
      e.push_back(std::move(val));
    }
  }
}

class Verifier {
 public:
  Verifier(const config::Config& cfg, const config::PipelineConfig& pipe, VerifyOptions opt,
           net::any_io_executor ex)
      : cfg_(cfg),
        pipe_(pipe),
        src_cfg_(*cfg.cluster(pipe.source)),
        dst_cfg_(*cfg.cluster(pipe.target)),
        opt_(std::move(opt)),
        src_(VerifySide::make(ex, src_cfg_, "source", kTimeout)),
        dst_(dst_cfg_.isMemcached() ? nullptr : VerifySide::make(ex, dst_cfg_, "target", kTimeout)),
        mc_(dst_cfg_.isMemcached()
                ? std::make_unique<verify::MemcachedVerifyTarget>(ex, dst_cfg_, kTimeout)
                : nullptr),
        local_clock_(),
        keys_(std::make_shared<const filters::KeySpace>(pipe, src_cfg_.slots)),
        policy_(dst_cfg_.buckets) {}

  net::awaitable<int> run();

 private:
  net::awaitable<Result<std::vector<KeyState>>> readStates(VerifySide& side,
                                                           FieldTtlSupport& fields, int db,
                                                           const std::vector<std::string>& keys,
                                                           bool idle = false);
  net::awaitable<Status> checkBatch(std::vector<KeyRef>& batch);
  /** A memcached target: the source keys' values as memcached would store them (a string as
   *  it is; a non-string's JSON or DUMP payload, with non_strings json or dump). */
  net::awaitable<Status> encodeForMemcached(const std::vector<KeyRef>& keys,
                                            std::vector<KeyState>& states);
  Verdict judgeMemcached(const KeyRef& k, const KeyState& s, const verify::McItem& t,
                         int64_t target_now_ms, std::string& detail) const;
  /** The key's collection policies (M alone when the target has none beside max_ttl). */
  target::KeyPolicy keyPolicy(const KeyRef& k) const;
  /** What target::decide needs about a key under a policy, as verify knows it. */
  verify::PolicyFacts policyFacts(const KeyRef& k, const KeyState& s, const target::KeyPolicy& kp,
                                  int64_t target_now_ms) const;
  /** The source's idle time and the last full sync: what proves a copy expired. */
  verify::AbsenceEvidence absenceEvidence(const KeyRef& k, int64_t max_ttl) const;
  /** Idle times and the last full sync are needed (a max_ttl or a collection policy). */
  bool evidenceNeeded() const { return !policy_.empty() || policy_.hasPolicies(); }
  /** (Re)reads max_lifetime's first-seen records, read-only (replicator/first_seen_view.h). */
  void loadFirstSeen();
  net::awaitable<Status> countExtra();
  net::awaitable<void> pace(size_t keys);
  Verdict judge(const KeyRef& k, const KeyState& s, const KeyState& t, std::string& detail) const;
  /** A source key absent on the target: missing, unless a max_ttl or the collection's policy
   *  provably ended its copy. */
  Verdict absent(const KeyRef& k, const KeyState& s, const target::KeyPolicy& kp,
                 int64_t target_now_ms, const std::string& note, std::string& detail) const;
  void report(const KeyRef& k, Verdict v, const std::string& detail);

  const config::Config& cfg_;
  const config::PipelineConfig& pipe_;
  const config::ClusterConfig& src_cfg_;
  const config::ClusterConfig& dst_cfg_;
  VerifyOptions opt_;
  std::unique_ptr<VerifySide> src_, dst_;  // a server, or a Redis Cluster's slot map and masters
  std::unique_ptr<verify::MemcachedVerifyTarget> mc_;  // instead of dst_: a memcached target
  clock::SystemClock local_clock_;
  filters::KeySpaceConstSharedPtr keys_;  // the same key space the pipeline's sink writes
  target::MaxTtlPolicy policy_;

  int64_t shift_ms_ = 0;          // compensation Δ expected on every deadline
  int64_t source_offset_ms_ = 0;  // θ_source: the source's clock − ours
  int64_t target_offset_ms_ = 0;  // θ_target: the target's clock − ours
  verify::DeadlineRules rules_;   // strip_ttl, shift_ms_, the tolerance: keys and hash fields
  // What each side says about hash-field deadlines, learnt from its first HPEXPIRETIME.
  FieldTtlSupport src_fields_ = FieldTtlSupport::Unknown;
  FieldTtlSupport dst_fields_ = FieldTtlSupport::Unknown;
  std::string fields_unreadable_;  // why field deadlines are not compared (one side's refusal)
  std::chrono::steady_clock::time_point paced_from_;
  size_t paced_keys_ = 0;

  uint64_t checked_ = 0, missing_ = 0, values_ = 0, ttls_ = 0, field_ttls_ = 0, extra_ = 0;
  uint64_t ended_by_max_ttl_ = 0, source_gone_ = 0, refused_ = 0;
  std::vector<nlohmann::json> examples_, expired_examples_, refused_examples_;
  // Collection policies (expiry-semantics.md §8): keys whose deadline verify cannot check, keys
  // a policy ended, and max_lifetime keys with no first-seen record.
  uint64_t ttl_not_checked_ = 0, ended_by_policy_ = 0, first_seen_unknown_ = 0;
  std::vector<nlohmann::json> not_checked_examples_;
  std::optional<FirstSeenView> first_seen_;
  // When the pipeline's last full sync wrote to the target at the latest (this host's clock),
  // from its checkpoint in agent.state_dir; -1 unknown, with the reason.
  int64_t full_sync_bound_ms_ = -1;
  std::string full_sync_unknown_;
};

net::awaitable<Result<std::vector<KeyState>>> Verifier::readStates(
    VerifySide& side, FieldTtlSupport& fields, int db, const std::vector<std::string>& keys,
    bool idle) {
  // TYPE, PEXPIRETIME and OBJECT touch no key; the value commands below do (unless CLIENT
  // NO-TOUCH), so the idle time is read here, before them.
  const size_t per_key = idle ? 3 : 2;
  std::vector<Cmd> first;
  for (const auto& k : keys) {
    first.push_back({"TYPE", k});
    first.push_back({"PEXPIRETIME", k});
    if (idle) first.push_back({"OBJECT", "IDLETIME", k});
  }
  auto r1 = co_await side.callKeyed(db, first);
  if (!r1) co_return fail(r1.error());
  std::vector<KeyState> out(keys.size());
  std::vector<Cmd> second;
  std::vector<size_t> which;
  for (size_t i = 0; i < keys.size(); ++i) {
    const auto& type = (*r1)[per_key * i];
    const auto& ttl = (*r1)[per_key * i + 1];
    if (idle) {
      // An LFU maxmemory-policy: "ERR An LFU maxmemory policy is selected, idle time not
      // tracked..."; a user without +object|idletime: NOPERM.
      const auto& it = (*r1)[per_key * i + 2];
      if (it.type == resp::ReplyType::Integer && it.integer >= 0) {
        out[i].idle_s = it.integer;
      } else {
        out[i].idle_error = fmt::format("{}: OBJECT IDLETIME: {}", side.label(),
                                        it.isError() ? it.str : std::string("no such key"));
      }
    }
    if (type.isError()) {
      co_return fail(Error::refused(fmt::format("{}: TYPE: {}", side.label(), type.str)));
    }
    out[i].type = type.str;
    out[i].deadline = ttl.type == resp::ReplyType::Integer && ttl.integer >= 0 ? ttl.integer : -1;
    for (Cmd& v : valueCommands(out[i].type, keys[i])) {
      second.push_back(std::move(v));
      which.push_back(i);
    }
  }
  // A vector set's VCARD and VDIM (its value is made of them and its elements below).
  std::vector<std::pair<resp::Value, resp::Value>> vset_head(keys.size());
  // (Redis 8's vector set commands are in no ACL category: +@read does not grant them.)
  auto refused = [&](const Cmd& c, const resp::Value& r) {
    return fail(Error::refused(
        fmt::format("{}: {}: {} (verify reads a vector set with VCARD, VDIM, VRANDMEMBER, VEMB "
                    "and VGETATTR: grant them, e.g. +vcard +vdim +vrandmember +vemb +vgetattr)",
                    side.label(), c[0], r.str)));
  };
  if (!second.empty()) {
    auto r2 = co_await side.callKeyed(db, second);
    if (!r2) co_return fail(r2.error());
    for (size_t j = 0; j < which.size(); ++j) {
      KeyState& s = out[which[j]];
      if (s.type == "vectorset") {
        if (isRefusal((*r2)[j])) co_return refused(second[j], (*r2)[j]);
        auto& head = vset_head[which[j]];
        (second[j][0] == "VCARD" ? head.first : head.second) = std::move((*r2)[j]);
        continue;
      }
      s.value = std::move((*r2)[j]);
      normalise(s.type, s.value);
    }
  }

  // Then, in one round trip: each vector set's elements (VRANDMEMBER with a positive count
  // returns that many distinct elements, all of them for VCARD), and each hash's field
  // deadlines (HPEXPIRETIME, the fields HGETALL listed, kFieldsPerCommand a command).
  struct Part {
    size_t key;
    size_t first, count;  // its commands in `third`
  };
  std::vector<Cmd> third;
  std::vector<Part> members, deadlines;
  for (size_t i = 0; i < keys.size(); ++i) {
    KeyState& s = out[i];
    if (s.type == "vectorset") {
      const resp::Value& card = vset_head[i].first;
      if (card.type == resp::ReplyType::Integer && card.integer > 0) {
        members.push_back({i, third.size(), 1});
        third.push_back({"VRANDMEMBER", keys[i], std::to_string(card.integer)});
      }
    } else if (s.type == "hash") {
      const std::vector<std::string> names = verify::hashFields(s.value);
      if (fields == FieldTtlSupport::None) {
        s.field_deadlines.assign(names.size(), -1);  // a server without field TTLs
        s.fields_read = true;
      } else if (fields != FieldTtlSupport::Unreadable) {
        auto cmds = verify::fieldDeadlineCommands(keys[i], names);
        deadlines.push_back({i, third.size(), cmds.size()});
        for (auto& c : cmds) third.push_back(std::move(c));
      }
    }
  }
  std::vector<resp::Value> r3;
  if (!third.empty()) {
    auto r = co_await side.callKeyed(db, third);
    if (!r) co_return fail(r.error());
    r3 = std::move(*r);
  }
  for (const Part& p : deadlines) {
    KeyState& s = out[p.key];
    const auto begin = r3.begin() + static_cast<std::ptrdiff_t>(p.first);
    const std::vector<resp::Value> replies(begin, begin + static_cast<std::ptrdiff_t>(p.count));
    const size_t n = verify::hashFields(s.value).size();
    for (const resp::Value& r : replies) {
      if (!r.isError()) continue;
      const FieldTtlSupport said = verify::fieldTtlSupportOf(r);
      if (said == FieldTtlSupport::None) {
        fields = said;
      } else if (said == FieldTtlSupport::Unreadable) {
        fields = said;
        if (fields_unreadable_.empty()) {
          fields_unreadable_ = fmt::format("{}: HPEXPIRETIME: {}", side.label(), r.str);
        }
      }
      break;
    }
    if (fields == FieldTtlSupport::None) {
      s.field_deadlines.assign(n, -1);
      s.fields_read = true;
    } else if (auto d = verify::parseFieldDeadlines(replies, n)) {
      if (fields == FieldTtlSupport::Unknown) fields = FieldTtlSupport::Yes;
      s.field_deadlines = std::move(*d);
      s.fields_read = true;
    }  // else an error about this key (it changed meanwhile): its fields are not compared
  }

  // Each vector set element's vector (VEMB) and attribute (VGETATTR), kElementsPerRound a trip.
  std::vector<std::vector<verify::VectorElement>> elements(keys.size());
  std::vector<Cmd> fourth;
  std::vector<std::pair<size_t, size_t>> owner;  // (key, element) of fourth[2k] and [2k + 1]
  auto flush = [&]() -> net::awaitable<Status> {
    if (fourth.empty()) co_return Status{};
    auto r = co_await side.callKeyed(db, fourth);
    if (!r) co_return fail(r.error());
    for (size_t k = 0; k < owner.size(); ++k) {
      for (size_t a : {2 * k, 2 * k + 1}) {
        if (isRefusal((*r)[a])) co_return refused(fourth[a], (*r)[a]);
      }
      auto& e = elements[owner[k].first][owner[k].second];
      e.embedding = std::move((*r)[2 * k]);
      e.attribute = std::move((*r)[2 * k + 1]);
    }
    fourth.clear();
    owner.clear();
    co_return Status{};
  };
  for (const Part& p : members) {
    const resp::Value& list = r3[p.first];
    if (isRefusal(list)) co_return refused(third[p.first], list);
    if (list.type != resp::ReplyType::Array) continue;
    for (const resp::Value& name : list.elements) {
      owner.emplace_back(p.key, elements[p.key].size());
      elements[p.key].push_back({name.str, {}, {}});
      fourth.push_back({"VEMB", keys[p.key], name.str});
      fourth.push_back({"VGETATTR", keys[p.key], name.str});
      if (owner.size() >= kElementsPerRound) {
        if (auto st = co_await flush(); !st) co_return fail(st.error());
      }
    }
  }
  if (auto st = co_await flush(); !st) co_return fail(st.error());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (out[i].type != "vectorset") continue;
    out[i].value =
        verify::vectorSetValue(vset_head[i].first, vset_head[i].second, std::move(elements[i]));
  }
  co_return out;
}

Verdict Verifier::judge(const KeyRef& k, const KeyState& s, const KeyState& t,
                        std::string& detail) const {
  if (s.type == "none") return Verdict::SourceGone;
  const target::KeyPolicy kp = keyPolicy(k);
  const int64_t max_ttl = kp.max_ttl_ms;
  const int64_t target_now = local_clock_.nowMs() + target_offset_ms_;
  if (t.type == "none") return absent(k, s, kp, target_now, "", detail);
  if (s.type != t.type || !(s.value == t.value)) {
    if (s.type != t.type) {
      detail = fmt::format("source type {}, target type {}", s.type, t.type);
    } else if (s.type == "vectorset") {
      detail = verify::describeVectorSetDifference(s.value, t.value);
    } else {
      detail = fmt::format("{} differs: source {}, target {}", s.type, s.value.describe(),
                           t.value.describe());
    }
    return Verdict::Value;
  }
  // The deadline the rules give, before any maxTTL: the source's (none with strip_ttl),
  // translated into the target's clock when the pipeline compensates skew.
  const int64_t expected = rules_.expected(s.deadline);
  // A collection policy: the agent's own decision (target::decide) on the source's value.
  std::optional<verify::PolicyJudgement> pj;
  if (kp.any()) {
    pj = verify::judgePolicyDeadline(policyFacts(k, s, kp, target_now), t.deadline);
    if (pj->verdict == verify::PolicyVerdict::Mismatch) {
      detail = fmt::format("source deadline {}; {}", formatDeadline(s.deadline), pj->detail);
      return Verdict::Ttl;
    }
  }
  // The expected deadline, or with a maxTTL a clamp made at some past write (verify_compare.h).
  if (pj || rules_.allows(s.deadline, t.deadline, max_ttl, target_now)) {
    // A hash's fields: the same rules, but never a maxTTL clamp (it bounds the key's deadline).
    if (s.type == "hash" && s.fields_read && t.fields_read) {
      const auto diffs = verify::compareFieldDeadlines(rules_, verify::hashFields(s.value),
                                                       s.field_deadlines, t.field_deadlines,
                                                       local_clock_.nowMs() + source_offset_ms_);
      if (!diffs.empty()) {
        detail = verify::describeFieldDiffs(diffs);
        return Verdict::FieldTtl;
      }
    }
    if (pj && pj->verdict == verify::PolicyVerdict::NotChecked) {
      detail = fmt::format("source deadline {}; {}", formatDeadline(s.deadline), pj->detail);
      return Verdict::NotChecked;
    }
    return Verdict::Ok;
  }
  detail = fmt::format("deadline: source {}, target {}, expected {}{}", formatDeadline(s.deadline),
                       formatDeadline(t.deadline), formatDeadline(expected),
                       max_ttl > 0 ? fmt::format(" or a max_ttl {} ms clamp", max_ttl) : "");
  return Verdict::Ttl;
}

target::KeyPolicy Verifier::keyPolicy(const KeyRef& k) const {
  if (policy_.hasPolicies()) return policy_.resolve(k.dst_db, k.dst_key);
  target::KeyPolicy kp;
  kp.max_ttl_ms = policy_.empty() ? 0 : policy_.effectiveMs(k.dst_db, k.dst_key);
  return kp;
}

verify::PolicyFacts Verifier::policyFacts(const KeyRef& k, const KeyState& s,
                                          const target::KeyPolicy& kp,
                                          int64_t target_now_ms) const {
  verify::PolicyFacts f;
  f.policy = kp;
  const int64_t e = rules_.expected(s.deadline);  // strip_ttl, the compensation shift
  f.e = e < 0 ? 0 : e;
  // The fields are read from a string's value, as the agent reads a whole-value write's.
  if (s.type == "string" && s.value.type == resp::ReplyType::Bulk) f.value = s.value.str;
  f.in_place_possible = mc_ == nullptr;  // memcached deletes the key on in-place writes
  if (kp.maxLifetimeMs() > 0 && first_seen_) f.first = first_seen_->find(k.dst_db, k.dst_key);
  f.now = target_now_ms;
  f.tolerance_ms = rules_.tolerance_ms;
  return f;
}

verify::AbsenceEvidence Verifier::absenceEvidence(const KeyRef& k, int64_t max_ttl) const {
  verify::AbsenceEvidence e;
  e.max_ttl_ms = max_ttl;
  e.tolerance_ms = rules_.tolerance_ms;
  e.idle_s = k.idle_s >= 0 ? k.idle_s : -1;
  e.idle_unreadable = k.idle_error;
  if (full_sync_bound_ms_ >= 0) {
    e.since_full_sync_ms = std::max<int64_t>(0, local_clock_.nowMs() - full_sync_bound_ms_);
  }
  e.full_sync_unknown = full_sync_unknown_;
  return e;
}

void Verifier::loadFirstSeen() {
  if (policy_.maxLifetimeMs() <= 0) return;
  first_seen_ = FirstSeenView::load(cfg_.agent.state_dir, pipe_.name, policy_.maxLifetimeMs(),
                                    local_clock_.nowMs() + target_offset_ms_);
}

Verdict Verifier::absent(const KeyRef& k, const KeyState& s, const target::KeyPolicy& kp,
                         int64_t target_now_ms, const std::string& note,
                         std::string& detail) const {
  if (kp.any()) {
    // The collection's policy: only an end the agent's decision proves is no difference.
    const verify::AbsenceVerdict a = verify::judgePolicyAbsence(
        policyFacts(k, s, kp, target_now_ms), absenceEvidence(k, kp.max_ttl_ms));
    detail = fmt::format("a {} on the source, {}{}", s.type, a.detail, note);
    return a.expired ? Verdict::EndedByPolicy : Verdict::Missing;
  }
  const int64_t max_ttl = kp.max_ttl_ms;
  if (max_ttl > 0) {
    // Only an expiry the rules prove is no difference (verify_compare.h, judgeAbsence).
    const verify::AbsenceVerdict a = verify::judgeAbsence(absenceEvidence(k, max_ttl));
    detail = fmt::format("a {} on the source, {}{}", s.type, a.detail, note);
    return a.expired ? Verdict::EndedByMaxTtl : Verdict::Missing;
  }
  detail = fmt::format("a {} on the source, absent on the target{}", s.type, note);
  return Verdict::Missing;
}

Verdict Verifier::judgeMemcached(const KeyRef& k, const KeyState& s, const verify::McItem& t,
                                 int64_t target_now_ms, std::string& detail) const {
  if (s.type == "none") return Verdict::SourceGone;
  const target::KeyPolicy kp = keyPolicy(k);
  const int64_t max_ttl = kp.max_ttl_ms;
  std::optional<verify::PolicyFacts> facts;
  if (kp.any()) facts = policyFacts(k, s, kp, target_now_ms);
  verify::McExpectation e;
  if (!s.mc_error.empty()) {
    e.kind = verify::McExpectation::Kind::Refused;
    e.reason = "not_a_string";
    e.why = s.mc_error;
  } else {
    verify::McExpectInput in;
    in.target_key = k.dst_key;
    in.type = s.type;
    in.value_size = s.mc_value.size();
    const int64_t expected = rules_.expected(s.deadline);  // strip_ttl, the shift; -1 none
    in.deadline_ms = expected < 0 ? 0 : expected;
    in.max_ttl_ms = max_ttl;
    if (facts) {
      // A policy: the deadline a write now gives (target::decide), max_ttl included.
      in.deadline_ms = verify::wholeValueRange(*facts).hi;
      in.max_ttl_ms = 0;
    }
    in.target_now_ms = target_now_ms;
    in.item_size_max = mc_->itemSizeMax();
    in.non_strings = dst_cfg_.non_strings;
    e = verify::expectOnMemcached(in);
  }
  using K = verify::McExpectation::Kind;
  if (e.kind == K::Refused) {
    if (!t.present) {
      detail = fmt::format("a {} on the source that memcached cannot hold ({}): {}", s.type,
                           e.reason, e.why);
      return Verdict::Refused;
    }
    detail = fmt::format(
        "a {} on the source that memcached cannot hold ({}: {}), yet the target holds a {}-byte "
        "value: the agent deletes a refused key's old value",
        s.type, e.reason, e.why, t.value.size());
    return Verdict::Value;
  }
  if (e.kind == K::Expired) return Verdict::Ok;  // deleted on arrival; memcached expires it too
  if (!t.present) {
    return absent(k, s, kp, target_now_ms,
                  " (lost or evicted there, or deleted by an in-place write on the source — "
                  "APPEND, INCR, SETRANGE, a write to a non-string — which memcached cannot "
                  "express: xdcr_target_invalidations_total counts those)",
                  detail);
  }
  if (t.flags != e.flags) {
    detail = fmt::format("a {} on the source: client flags F{} expected, the target has F{}",
                         s.type, e.flags, t.flags);
    return Verdict::Value;
  }
  std::string target_compare = t.value;
  if (e.flags == target::mc::kFlagDump) {
    // A DUMP payload: compared by what it decodes to (its RDB version may differ).
    source::rdb::Value v;
    std::string error;
    if (t.value.size() < 11 ||
        !source::rdb::decodeValue(static_cast<uint8_t>(t.value[0]),
                                  std::string_view(t.value).substr(1, t.value.size() - 11),
                                  source::rdb::Flavor::Redis, v, error)) {
      detail = fmt::format("the target's DUMP payload ({} bytes) cannot be decoded: {}",
                           t.value.size(), error);
      return Verdict::Value;
    }
    target_compare = target::memcachedJson(v);
  }
  if (target_compare != s.mc_compare) {
    detail = fmt::format("{}{} differs: source {}, target {}", s.type,
                         s.type == "string" ? "" : " (as JSON)", quote(s.mc_compare),
                         quote(target_compare));
    return Verdict::Value;
  }
  if (facts) {
    const verify::PolicyJudgement pj = verify::judgePolicyDeadline(*facts, t.deadline_ms);
    if (pj.verdict == verify::PolicyVerdict::Ok) return Verdict::Ok;
    detail = fmt::format("source deadline {}; {} (memcached: whole seconds)",
                         formatDeadline(s.deadline), pj.detail);
    return pj.verdict == verify::PolicyVerdict::NotChecked ? Verdict::NotChecked : Verdict::Ttl;
  }
  if (rules_.allows(s.deadline, t.deadline_ms, max_ttl, target_now_ms)) return Verdict::Ok;
  detail = fmt::format("deadline: source {}, target {} (memcached: whole seconds), expected {}{}",
                       formatDeadline(s.deadline), formatDeadline(t.deadline_ms),
                       formatDeadline(rules_.expected(s.deadline)),
                       max_ttl > 0 ? fmt::format(" or a max_ttl {} ms clamp", max_ttl) : "");
  return Verdict::Ttl;
}

net::awaitable<Status> Verifier::encodeForMemcached(const std::vector<KeyRef>& keys,
                                                    std::vector<KeyState>& states) {
  std::vector<Cmd> dumps;
  std::vector<size_t> which;
  for (size_t i = 0; i < states.size(); ++i) {
    KeyState& s = states[i];
    if (s.type == "string") {
      s.mc_value = s.value.str;
      s.mc_compare = s.value.str;
    } else if (s.type != "none" && dst_cfg_.non_strings != config::NonStrings::Refuse) {
      dumps.push_back({"DUMP", keys[i].key});
      which.push_back(i);
    }
  }
  if (dumps.empty()) co_return Status{};
  auto r = co_await src_->callKeyed(keys.front().src_db, dumps);
  if (!r) co_return fail(r.error());
  for (size_t j = 0; j < which.size(); ++j) {
    KeyState& s = states[which[j]];
    const resp::Value& payload = (*r)[j];
    if (isRefusal(payload)) {
      co_return fail(Error::refused(fmt::format(
          "{}: DUMP: {} (verify reads a non-string with DUMP for a memcached target with "
          "non_strings {}: grant +dump)",
          src_->label(), payload.str,
          dst_cfg_.non_strings == config::NonStrings::Json ? "json" : "dump")));
    }
    if (payload.isNull() || payload.str.size() < 11) {
      s.type = "none";  // gone since TYPE
      continue;
    }
    source::rdb::Value v;
    std::string error;
    const std::string& p = payload.str;
    if (!source::rdb::decodeValue(static_cast<uint8_t>(p[0]),
                                  std::string_view(p).substr(1, p.size() - 11),
                                  source::rdb::Flavor::Redis, v, error)) {
      s.mc_error = "its value cannot be decoded: " + error;
      continue;
    }
    s.mc_compare = target::memcachedJson(v);
    s.mc_value = dst_cfg_.non_strings == config::NonStrings::Json ? s.mc_compare : p;
  }
  co_return Status{};
}

void Verifier::report(const KeyRef& k, Verdict v, const std::string& detail) {
  switch (v) {
    case Verdict::Missing:
      ++missing_;
      break;
    case Verdict::Value:
      ++values_;
      break;
    case Verdict::Ttl:
      ++ttls_;
      break;
    case Verdict::FieldTtl:
      ++field_ttls_;
      break;
    case Verdict::EndedByMaxTtl:
      ++ended_by_max_ttl_;
      break;
    case Verdict::Refused:
      ++refused_;
      break;
    case Verdict::NotChecked:
      ++ttl_not_checked_;
      break;
    case Verdict::EndedByPolicy:
      ++ended_by_policy_;
      break;
    default:
      return;
  }
  auto& list = v == Verdict::EndedByMaxTtl || v == Verdict::EndedByPolicy ? expired_examples_
               : v == Verdict::Refused                                    ? refused_examples_
               : v == Verdict::NotChecked                                 ? not_checked_examples_
                                                                          : examples_;
  if (list.size() <
      (v == Verdict::Value || v == Verdict::Missing || v == Verdict::Ttl || v == Verdict::FieldTtl
           ? kMaxExamples
           : kMaxExpiredExamples)) {
    list.push_back({{"kind", verdictName(v)},
                    {"source", fmt::format("db{} {}", k.src_db, quote(k.key))},
                    {"target", fmt::format("db{} {}", k.dst_db, quote(k.dst_key))},
                    {"detail", detail}});
  }
}

net::awaitable<void> Verifier::pace(size_t keys) {
  paced_keys_ += keys;
  if (opt_.rate <= 0) co_return;
  const auto due = paced_from_ + std::chrono::microseconds(
                                     static_cast<int64_t>(double(paced_keys_) / opt_.rate * 1e6));
  if (due > local_clock_.monotonicNow()) {
    net::steady_timer t(co_await net::this_coro::executor, due);
    co_await t.async_wait(net::use_awaitable);
  }
}

net::awaitable<Status> Verifier::checkBatch(std::vector<KeyRef>& batch) {
  std::vector<KeyRef> pending = std::move(batch);
  batch.clear();
  for (int round = 0; !pending.empty(); ++round) {
    if (round > 0) {
      net::steady_timer t(co_await net::this_coro::executor, opt_.recheck_delay);
      co_await t.async_wait(net::use_awaitable);
      loadFirstSeen();  // the running agent may have recorded or forgotten keys meanwhile
    }
    std::vector<std::string> skeys, dkeys;
    for (const auto& k : pending) {
      skeys.push_back(k.key);
      dkeys.push_back(k.dst_key);
    }
    // The source key's idle time, where a maxTTL may end the target's copy first.
    auto ss = co_await readStates(*src_, src_fields_, pending[0].src_db, skeys, evidenceNeeded());
    if (!ss) co_return fail(ss.error());
    for (size_t i = 0; i < pending.size(); ++i) {
      KeyRef& k = pending[i];
      const KeyState& s = (*ss)[i];
      if (k.idle_s == -2) {
        k.idle_s = s.idle_s;
        k.idle_error = s.idle_error;
      } else if (src_->idleTimesReset().empty() && s.idle_s >= 0 && k.idle_s >= 0) {
        k.idle_s = std::min(k.idle_s, s.idle_s);  // written since (verify's reads touch nothing)
      }
    }
    std::vector<verify::McItem> items;
    int64_t mc_now_ms = 0;
    Result<std::vector<KeyState>> ts = std::vector<KeyState>{};
    if (mc_) {
      if (auto s = co_await encodeForMemcached(pending, *ss); !s) co_return fail(s.error());
      int64_t stat_time_s = 0;
      auto r = co_await mc_->read(dkeys, stat_time_s);
      if (!r) co_return fail(r.error());
      items = std::move(*r);
      // STAT time stands for memcached's true time − 3 s to + 1 s: its middle
      // (clock/memcached_time.h).
      mc_now_ms = stat_time_s * 1000 + clock::kMemcachedStatMidpointNs / 1'000'000;
    } else {
      ts = co_await readStates(*dst_, dst_fields_, pending[0].dst_db, dkeys);
      if (!ts) co_return fail(ts.error());
    }
    std::vector<KeyRef> again;
    for (size_t i = 0; i < pending.size(); ++i) {
      std::string detail;
      const Verdict v = mc_ ? judgeMemcached(pending[i], (*ss)[i], items[i], mc_now_ms, detail)
                            : judge(pending[i], (*ss)[i], (*ts)[i], detail);
      if (round == 0 && v != Verdict::SourceGone) {
        ++checked_;
        if (first_seen_) {
          // max_lifetime without a first-seen record: its cap was assumed (docs: verify).
          const target::KeyPolicy kp = keyPolicy(pending[i]);
          if (kp.maxLifetimeMs() > 0 &&
              !first_seen_->find(pending[i].dst_db, pending[i].dst_key).known()) {
            ++first_seen_unknown_;
          }
        }
      }
      if (v == Verdict::SourceGone) {
        ++source_gone_;
      } else if (v == Verdict::EndedByMaxTtl || v == Verdict::Refused || v == Verdict::NotChecked ||
                 v == Verdict::EndedByPolicy) {
        // Not differences: no re-read changes what verify can know (a NotChecked key is
        // counted at once; re-reading every one would stall a large collection).
        report(pending[i], v, detail);
      } else if (v != Verdict::Ok) {
        if (round < opt_.rechecks) {
          again.push_back(std::move(pending[i]));
        } else {
          report(pending[i], v, detail);
        }
      }
    }
    pending = std::move(again);
  }
  co_return Status{};
}

net::awaitable<Status> Verifier::countExtra() {
  // Target keys with no source key behind them, in the dbs this pipeline writes. The agent
  // leaves such keys alone by design (a full sync does not delete them), so they are reported,
  // not counted as differences. A db one side cannot have (a Redis Cluster's other than 0)
  // receives nothing from this pipeline.
  for (auto [tdb, sdb] : keys_->sourceDbsByTarget()) {
    if (!dst_->hasDb(tdb) || !src_->hasDb(sdb)) continue;
    VerifySide::ScanCursor cursor;
    do {
      auto keys = co_await dst_->scanPage(tdb, cursor);
      if (!keys) co_return fail(keys.error());
      std::vector<Cmd> exists;
      for (const auto& tkey : *keys) {
        if (target::isMarkerKey(tkey)) continue;
        std::string skey = keys_->unrewrite(tkey);
        if (!keys_->keyPasses(skey)) continue;
        exists.push_back({"EXISTS", std::move(skey)});
      }
      if (!exists.empty()) {
        auto e = co_await src_->callKeyed(sdb, exists);
        if (!e) co_return fail(e.error());
        for (const auto& x : *e) extra_ += x.integer == 0 ? 1 : 0;
        co_await pace(exists.size());
      }
    } while (!cursor.done);
  }
  co_return Status{};
}

net::awaitable<int> Verifier::run() {
  if (evidenceNeeded()) {
    // A copy absent on the target is expired only if its last write is over max_ttl ago: the
    // source's idle times tell, as long as verify's reads leave them alone.
    src_->keepIdleTimes();
    auto bound = lastFullSyncBoundMs(cfg_.agent.state_dir, pipe_.name);
    if (bound) {
      full_sync_bound_ms_ = *bound;
    } else {
      full_sync_unknown_ = bound.error().message;
    }
  }
  for (VerifySide* side : {src_.get(), dst_.get()}) {
    if (side == nullptr) continue;
    if (auto s = co_await side->connect(); !s) {
      std::cerr << "verify: cannot connect: " << s.error().message << "\n";
      co_return 2;
    }
  }
  if (mc_) {
    if (auto s = co_await mc_->connect(); !s) {
      std::cerr << "verify: cannot connect: " << s.error().message << "\n";
      co_return 2;
    }
  }
  // The clocks: the target's now for the maxTTL bound, and Δ when the pipeline compensates.
  // memcached's clock (STAT time) has a 2 s grain (clock/memcached_time.h): the agent only
  // compensates a skew over max_skew + that grain, and its deadlines, read against that clock,
  // are compared with that much more tolerance.
  const int64_t grain_ms = mc_ ? clock::kMemcachedGrainNs / 1'000'000 : 0;
  auto ts = co_await clock::probeRedisTime(src_->clockConnection(), 8, kTimeout);
  Result<clock::RedisTimeSample> td = fail(Error::io("not probed"));
  if (mc_) {
    td = co_await clock::probeMemcachedTime(mc_->clockConnection(), 3, kTimeout);
  } else {
    td = co_await clock::probeRedisTime(dst_->clockConnection(), 8, kTimeout);
  }
  if (ts && td) {
    source_offset_ms_ = ts->offset_ns / 1'000'000;
    target_offset_ms_ = td->offset_ns / 1'000'000;
    const int64_t delta_ms = (td->offset_ns - ts->offset_ns) / 1'000'000;
    if (cfg_.clock.on_skew == config::SkewAction::Compensate &&
        std::llabs(delta_ms) > cfg_.clock.max_skew.count() + grain_ms) {
      shift_ms_ = delta_ms;
    }
  }
  rules_ = {pipe_.filters.strip_ttl, shift_ms_, opt_.ttl_tolerance.count() + grain_ms};
  loadFirstSeen();  // max_lifetime: read-only, after the clocks (ended lifetimes are dropped)
  auto dbs = co_await src_->keyDbs();
  if (!dbs) {
    std::cerr << "verify: " << dbs.error().message << "\n";
    co_return 2;
  }
  // A sample: every stride-th key of the scan, stride from the total size.
  uint64_t total = 0;
  for (int db : *dbs) {
    if (keys_->mapDb(db) < 0) continue;
    auto size = co_await src_->dbSize(db);
    if (!size) break;
    total += *size;
  }
  const uint64_t stride = opt_.sample > 0 ? std::max<uint64_t>(1, total / opt_.sample) : 1;
  uint64_t seen = 0;
  paced_from_ = local_clock_.monotonicNow();

  Status status;
  for (int db : *dbs) {
    const int tdb = keys_->mapDb(db);
    if (tdb < 0) continue;
    VerifySide::ScanCursor cursor;
    std::vector<KeyRef> batch;
    do {
      auto keys = co_await src_->scanPage(db, cursor);
      if (!keys) {
        status = fail(keys.error());
        break;
      }
      for (auto& key : *keys) {
        // The agent's own keys (markers, replay stamps of a pipeline into this source) are not
        // data.
        if (target::isMarkerKey(key) || !keys_->keyPasses(key) || seen++ % stride != 0) continue;
        if (opt_.sample > 0 && checked_ + batch.size() >= opt_.sample) break;
        auto [prefix, rest] = keys_->rewrite(key);
        std::string dst_key = std::string(prefix) + std::string(rest);
        batch.push_back({db, tdb, std::move(key), std::move(dst_key), -2, {}});
        if (batch.size() >= kBatch) {
          const size_t n = batch.size();
          if (auto s = co_await checkBatch(batch); !s) status = s;
          co_await pace(n);
        }
      }
    } while (status && !cursor.done && (opt_.sample == 0 || checked_ < opt_.sample));
    if (status && !batch.empty()) {
      const size_t n = batch.size();
      if (auto s = co_await checkBatch(batch); !s) status = s;
      co_await pace(n);
    }
    if (!status) break;
  }
  // memcached cannot list its keys (lru_crawler metadump is a full crawl, and truncated under
  // load): extra keys on a memcached target are not counted.
  if (status && opt_.sample == 0 && !mc_) status = co_await countExtra();
  if (!status) {
    std::cerr << "verify: " << status.error().message << "\n";
    co_return 2;
  }

  const bool differences = missing_ + values_ + ttls_ + field_ttls_ > 0;
  VerifySide::Redirections redirects = src_->redirections();
  if (dst_) {
    redirects.moved += dst_->redirections().moved;
    redirects.ask += dst_->redirections().ask;
    redirects.busy += dst_->redirections().busy;
  }
  if (opt_.json) {
    nlohmann::json j = {{"pipeline", pipe_.name},
                        {"checked", checked_},
                        {"missing", missing_},
                        {"value_mismatches", values_},
                        {"ttl_mismatches", ttls_},
                        {"field_ttl_mismatches", field_ttls_},
                        {"extra", extra_},
                        {"ended_by_max_ttl", ended_by_max_ttl_},
                        {"source_gone", source_gone_},
                        {"skew_shift_ms", shift_ms_},
                        {"examples", examples_}};
    for (const auto& e : expired_examples_) j["examples"].push_back(e);
    if (policy_.hasPolicies()) {
      // Only with a collection policy beside max_ttl: the report keeps its shape otherwise.
      j["ttl_not_checked"] = ttl_not_checked_;
      j["ended_by_policy"] = ended_by_policy_;
      for (const auto& e : not_checked_examples_) j["examples"].push_back(e);
      if (first_seen_) {
        j["first_seen"] = first_seen_->note();
        j["first_seen_unknown"] = first_seen_unknown_;
      }
    }
    if (evidenceNeeded()) {
      // What the max_ttl verdicts rest on (only with a max_ttl: the report keeps its shape).
      nlohmann::json m = {{"source_idle_times_kept", src_->idleTimesReset().empty()}};
      if (!src_->idleTimesReset().empty()) m["source_idle_times_reset"] = src_->idleTimesReset();
      if (full_sync_bound_ms_ >= 0) {
        m["last_full_sync_by_ms"] = full_sync_bound_ms_;
      } else {
        m["last_full_sync_unknown"] = full_sync_unknown_;
      }
      j["max_ttl_evidence"] = m;
    }
    if (!fields_unreadable_.empty()) j["field_ttls_not_compared"] = fields_unreadable_;
    if (mc_) {
      // Only with a memcached target: the Redis report keeps its shape.
      j["refused_by_target_rules"] = refused_;
      for (const auto& e : refused_examples_) j["examples"].push_back(e);
      j["extra_not_counted"] = "memcached cannot list its keys cheaply";
    }
    if (src_->isCluster() || (dst_ && dst_->isCluster())) {
      // Only with a Redis Cluster side: the standalone report keeps its shape.
      j["redirections"] = {
          {"moved", redirects.moved}, {"ask", redirects.ask}, {"busy", redirects.busy}};
    }
    // Details quote values, which may be any bytes: not UTF-8 is replaced, not an exception.
    std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    const std::string extra = mc_ ? "extra not counted" : fmt::format("{} extra", extra_);
    std::printf(
        "verify: %llu keys checked, %llu missing, %llu value mismatches, %llu ttl "
        "mismatches, %s, %llu field ttl mismatches\n",
        static_cast<unsigned long long>(checked_), static_cast<unsigned long long>(missing_),
        static_cast<unsigned long long>(values_), static_cast<unsigned long long>(ttls_),
        extra.c_str(), static_cast<unsigned long long>(field_ttls_));
    auto print = [](const nlohmann::json& e) {
      std::printf("  %-9s %s -> %s: %s\n", e["kind"].get<std::string>().c_str(),
                  e["source"].get<std::string>().c_str(), e["target"].get<std::string>().c_str(),
                  e["detail"].get<std::string>().c_str());
    };
    for (const auto& e : examples_) print(e);
    if (mc_) {
      std::printf(
          "verify: target %s is memcached: extra keys are not counted (memcached cannot list its "
          "keys cheaply); %llu source key(s) that memcached cannot hold by the rules are absent "
          "there as they should be (not differences)\n",
          dst_cfg_.name.c_str(), static_cast<unsigned long long>(refused_));
      for (const auto& e : refused_examples_) print(e);
    }
    if (!fields_unreadable_.empty()) {
      std::printf("verify: hash-field deadlines not compared: %s\n", fields_unreadable_.c_str());
    }
    if (ended_by_max_ttl_ > 0) {
      std::printf(
          "verify: %llu source key(s) absent on the target that max_ttl has ended (last "
          "touched on the source, and last full sync, over max_ttl + tolerance ago; not "
          "differences)\n",
          static_cast<unsigned long long>(ended_by_max_ttl_));
      for (const auto& e : expired_examples_) print(e);
    }
    if (policy_.hasPolicies()) {
      if (ttl_not_checked_ > 0) {
        std::printf(
            "verify: %llu key(s) with a deadline not checked: their collection's policy depends on "
            "the last write kind (an in-place, keep-TTL or deadline-only write keeps or sets "
            "another deadline than a whole-value write; expiry-semantics.md §8.1): each is within "
            "the window such a write allows (not differences)\n",
            static_cast<unsigned long long>(ttl_not_checked_));
        for (const auto& e : not_checked_examples_) print(e);
      }
      if (ended_by_policy_ > 0) {
        std::printf(
            "verify: %llu source key(s) absent on the target whose collection policy ended their "
            "copy (not differences)\n",
            static_cast<unsigned long long>(ended_by_policy_));
        if (ended_by_max_ttl_ == 0) {
          for (const auto& e : expired_examples_) print(e);  // else listed above
        }
      }
      if (first_seen_) {
        std::printf(
            "verify: max_lifetime first-seen records: %s; %llu key(s) without one: their "
            "lifetime cap taken as anything up to now + max_lifetime (their first write may be "
            "any time before)\n",
            first_seen_->note().c_str(), static_cast<unsigned long long>(first_seen_unknown_));
      }
    }
    if (evidenceNeeded() && !src_->idleTimesReset().empty()) {
      std::printf(
          "verify: no CLIENT NO-TOUCH on the source (%s): this run reset the idle times of the "
          "source keys it read, so a rerun within max_ttl reports such keys absent on the target "
          "as missing (Redis 7.2+ and Valkey 7.2+ have NO-TOUCH)\n",
          src_->idleTimesReset().c_str());
    }
    if (redirects.moved + redirects.ask + redirects.busy > 0) {
      std::printf(
          "verify: followed %llu MOVED and %llu ASK redirections, waited out %llu "
          "TRYAGAIN/CLUSTERDOWN (slots moved during the run)\n",
          static_cast<unsigned long long>(redirects.moved),
          static_cast<unsigned long long>(redirects.ask),
          static_cast<unsigned long long>(redirects.busy));
    }
    if (shift_ms_ != 0) {
      std::printf(
          "verify: deadlines expected translated by %+lld ms (clock.on_skew: "
          "compensate, measured skew)\n",
          static_cast<long long>(shift_ms_));
    }
  }
  co_return differences ? 1 : 0;
}

}  // namespace

int runVerify(const config::ConfigConstSharedPtr& config, const VerifyOptions& options) {
  const config::PipelineConfig* pipe = config->pipeline(options.pipeline);
  if (pipe == nullptr) {
    std::cerr << "verify: " << noSuchPipeline(*config, options.pipeline) << "\n";
    return 78;
  }
  net::io_context ioc(1);
  Verifier v(*config, *pipe, options, ioc.get_executor());
  return runOneShot("verify", ioc, v.run());
}

}  // namespace xdcr::replicator
