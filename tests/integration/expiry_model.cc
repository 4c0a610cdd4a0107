#include "tests/integration/expiry_model.h"

#include <fnmatch.h>

#include <cstdio>
#include <stdexcept>

namespace xdcr::test {
namespace {

constexpr int64_t kMsPerSecond = 1000;
// History lines kept per key: the last ones tell the story of a failure.
constexpr size_t kMaxHistory = 40;

void appendBounded(std::vector<std::string>& lines, const std::string& line) {
  if (lines.size() >= kMaxHistory) {
    lines.erase(lines.begin());
  }
  lines.push_back(line);
}

}  // namespace

ExpiryModel::ExpiryModel(ModelConfig config) : config_(std::move(config)) {
  // RE2 syntax of the patterns the test uses is also ECMAScript syntax (literals, ^, classes).
  for (const auto& p : config_.include_keys) {
    include_.emplace_back(p);
  }
  for (const auto& p : config_.exclude_keys) {
    exclude_.emplace_back(p);
  }
}

std::optional<KeyId> ExpiryModel::targetOf(const KeyId& source) const {
  int db = source.first;
  if (!config_.dbs.empty()) {
    auto it = config_.dbs.find(db);
    if (it == config_.dbs.end()) {
      return std::nullopt;  // an unmapped db is not replicated
    }
    db = it->second;
  }
  const std::string& name = source.second;
  // include_keys/exclude_keys are unanchored searches. The test's patterns never touch the
  // prefixes key_rewrite changes, so matching the source name or the rewritten one is the same.
  if (!include_.empty()) {
    bool included = false;
    for (const auto& re : include_) {
      if (std::regex_search(name, re)) {
        included = true;
        break;
      }
    }
    if (!included) {
      return std::nullopt;
    }
  }
  for (const auto& re : exclude_) {
    if (std::regex_search(name, re)) {
      return std::nullopt;
    }
  }
  for (const auto& r : config_.key_rewrite) {
    if (name.compare(0, r.from.size(), r.from) == 0) {
      return KeyId{db, r.to + name.substr(r.from.size())};
    }
  }
  return KeyId{db, name};
}

int64_t ExpiryModel::maxTtlMs(const KeyId& target) const {
  // First match wins; max_ttl 0 inherits the bucket's (§3).
  return maxTtlOf(config_.buckets, target.first, target.second).effectiveMs();
}

std::string ExpiryModel::describeMaxTtl(const KeyId& target) const {
  const MaxTtlOf m = maxTtlOf(config_.buckets, target.first, target.second);
  if (m.collection == "(no bucket)") return "no bucket, M=0";
  return "collection " + m.collection + " (C=" + std::to_string(m.collection_s) +
         "s, B=" + std::to_string(m.bucket_s) + "s) M=" + std::to_string(m.effectiveMs() / 1000) +
         "s";
}

int64_t ExpiryModel::clamp(int64_t e, int64_t m, int64_t now) {
  if (m == 0) {
    return e;
  }
  if (e == 0 || e > now + m) {
    return now + m;
  }
  return e;
}

ExpiryModel::Policy ExpiryModel::policyOf(const KeyId& target) const {
  const MaxTtlOf m = maxTtlOf(config_.buckets, target.first, target.second);
  Policy p;
  p.m = m.effectiveMs();
  p.default_ttl = m.default_ttl_s < 0 ? -1 : m.default_ttl_s * kMsPerSecond;
  p.lifetime = m.max_lifetime_s * kMsPerSecond;
  return p;
}

int64_t ExpiryModel::touchFirst(TargetKey& t, const Policy& p, int64_t now) {
  if (p.lifetime == 0) return 0;
  if (t.first_s == 0 || t.first_s * kMsPerSecond + p.lifetime <= now) {
    t.first_s = (now + kMsPerSecond - 1) / kMsPerSecond;  // rounded up: never early
  }
  return t.first_s;
}

int64_t ExpiryModel::policyDeadline(int64_t e, const Policy& p, int64_t first_s, int64_t now) {
  int64_t t = e;
  if (t == 0 && p.default_ttl > 0) t = now + p.default_ttl;  // the fill
  if (p.lifetime > 0) {                                      // the cap from the first write
    const int64_t end = first_s * kMsPerSecond + p.lifetime;
    if (t == 0 || end < t) t = end;
  }
  return clamp(t, p.m, now);  // max_ttl last
}

std::string ExpiryModel::rel(int64_t abs_ms) const {
  char text[48];
  std::snprintf(text, sizeof(text), "%+.3fs", static_cast<double>(abs_ms - epoch_ms_) / 1000.0);
  return text;
}

std::string ExpiryModel::describeDeadline(int64_t deadline) const {
  return deadline == 0 ? "none" : rel(deadline);
}

TargetKey& ExpiryModel::slot(const KeyId& target) {
  TargetKey& t = targets_[target];
  t.id = target;
  return t;
}

void ExpiryModel::log(TargetKey& t, const std::string& line) {
  appendBounded(t.history, line);
}

void ExpiryModel::note(const KeyId& source, const std::string& what) {
  auto target = targetOf(source);
  if (!target) {
    appendBounded(dropped_[source], what);
    return;
  }
  log(slot(*target), what);
}

std::string ExpiryModel::setDeadline(TargetKey& t, int64_t deadline, int64_t now) {
  if (deadline != 0 && deadline <= now) {
    // Expired on arrival (§4): never a live copy on the target.
    t.exists = false;
    t.ended_by_target = true;
    t.deadline = deadline;
    t.first_s = 0;  // a DEL: its next write starts a new lifetime (§8.4)
    ++stats_.expired_on_arrival;
    return "expired on arrival (T=" + rel(deadline) + ")";
  }
  t.deadline = deadline;
  return "T=" + describeDeadline(deadline);
}

void ExpiryModel::restoreCopy(TargetKey& t, int64_t e, int64_t now, const std::string& what) {
  // The document read back and written as a snapshot key (§12.2): §4 / §8 of its deadline E
  // at the read, which the write about to be applied sets or keeps.
  const KeyId& id = t.id;
  const int64_t m = maxTtlMs(id);
  const Policy pol = policyOf(id);
  const int64_t replicated = config_.strip_ttl ? 0 : e;
  int64_t deadline = clamp(replicated, m, now);
  if (pol.any()) deadline = policyDeadline(replicated, pol, touchFirst(t, pol, now), now);
  t.exists = true;
  t.ended_by_target = false;
  log(t, "[" + rel(now) + "] " + what +
             " -> the target had ended its copy: restored whole (§12), " +
             setDeadline(t, deadline, now));
}

void ExpiryModel::write(const KeyId& source, WriteKind kind, int64_t e, const Value& before,
                        const Value& after, int64_t now, const std::string& what) {
  auto target = targetOf(source);
  if (!target) {
    ++stats_.dropped_by_key_or_db;
    appendBounded(dropped_[source], "[" + rel(now) + "] " + what + " -> dropped by the pipeline");
    return;
  }
  ++stats_.writes;
  TargetKey& t = slot(*target);
  const int64_t m = maxTtlMs(*target);
  // §12: a write that keeps the key's value or deadline reaching a copy the target ended is
  // preceded by the whole source document, as a snapshot key would be written (clamp(E)).
  // (Not under a collection policy: there only a renewal restores, §12.4.)
  const bool restored = (kind == WriteKind::InPlace || kind == WriteKind::KeepTtl) &&
                        !policyOf(*target).any() && !t.presentAt(now) && t.endedByTargetAt(now) &&
                        before.exists() && t.value == before;
  if (restored) restoreCopy(t, e, now, what);
  const bool was_present = t.presentAt(now);
  const bool in_sync_before = t.value_known && (was_present ? t.value == before : !before.exists());
  const Policy pol = policyOf(*target);
  std::string effect;
  if (pol.any()) {
    // §8.1: every write records the key's first-seen second (max_lifetime).
    const int64_t first = touchFirst(t, pol, now);
    const std::string policy_text = " D=" + std::to_string(pol.default_ttl / kMsPerSecond) +
                                    "s L=" + std::to_string(pol.lifetime / kMsPerSecond) +
                                    "s first=" + (first ? rel(first * kMsPerSecond) : "-");
    const int64_t lifetime_end = pol.lifetime ? first * kMsPerSecond + pol.lifetime : 0;
    switch (kind) {
      case WriteKind::Deadline:
      case WriteKind::NoDeadline: {
        const int64_t replicated = config_.strip_ttl || kind == WriteKind::NoDeadline ? 0 : e;
        t.exists = true;
        t.value = after;
        t.value_known = true;
        effect = "write E=" + describeDeadline(replicated) +
                 " M=" + std::to_string(m / kMsPerSecond) + "s" + policy_text + " -> " +
                 setDeadline(t, policyDeadline(replicated, pol, first, now), now);
        break;
      }
      case WriteKind::KeepTtl: {
        // The target keeps its deadline; max_lifetime caps it (PEXPIREAT ... LT).
        t.value = after;
        t.value_known = true;
        int64_t deadline = was_present ? t.deadline : 0;
        if (lifetime_end != 0 && (deadline == 0 || lifetime_end < deadline)) {
          deadline = lifetime_end;
        }
        t.exists = true;
        effect = "write KEEPTTL" + policy_text + " -> " + setDeadline(t, deadline, now);
        break;
      }
      case WriteKind::InPlace: {
        if (!in_sync_before) {
          t.value_known = false;
          ++stats_.value_unknown;
        }
        t.value = after;
        const int64_t old_deadline = was_present ? t.deadline : 0;
        t.exists = after.exists();
        if (!t.exists) {
          effect = "in-place write left no key -> absent";
        } else if (pol.default_ttl != 0) {
          // A filling policy: the deadline stays; the caps lower it (PEXPIREAT ... LT).
          int64_t cap = lifetime_end;
          if (m > 0 && (cap == 0 || now + m < cap)) cap = now + m;
          int64_t deadline = old_deadline;
          if (cap != 0 && (deadline == 0 || cap < deadline)) deadline = cap;
          effect = "in-place write" + policy_text + " -> " + setDeadline(t, deadline, now);
        } else {
          // max_lifetime alone: §4's in-place rule, then the cap.
          const int64_t replicated = config_.strip_ttl ? 0 : e;
          effect = "in-place write, source deadline " + describeDeadline(replicated) + policy_text +
                   " -> " + setDeadline(t, policyDeadline(replicated, pol, first, now), now);
        }
        if (!in_sync_before) effect += " [value unknown: the target copy had diverged]";
        break;
      }
    }
    log(t, "[" + rel(now) + "] " + what + " -> " + effect);
    return;
  }
  switch (kind) {
    case WriteKind::Deadline: {
      // strip_ttl: every replicated mutation is written with E = 0, then rule 4 applies.
      const int64_t replicated = config_.strip_ttl ? 0 : e;
      t.exists = true;
      t.value = after;
      t.value_known = true;
      effect = "write E=" + describeDeadline(replicated) +
               (config_.strip_ttl ? " (stripped)" : "") + " M=" + std::to_string(m / kMsPerSecond) +
               "s -> " + setDeadline(t, clamp(replicated, m, now), now);
      break;
    }
    case WriteKind::NoDeadline:
      t.exists = true;
      t.value = after;
      t.value_known = true;
      effect = "write E=none M=" + std::to_string(m / kMsPerSecond) + "s -> " +
               setDeadline(t, clamp(0, m, now), now);
      break;
    case WriteKind::KeepTtl:
      // Preserve expiry: the target keeps its current deadline, no clamp; a key it does not hold
      // is created without one. This row has no E, so strip_ttl (which sets E = 0) does not
      // change it either.
      t.value = after;
      t.value_known = true;
      t.deadline = was_present ? t.deadline : 0;
      t.exists = true;
      effect = "write KEEPTTL -> T=" + describeDeadline(t.deadline) + " (kept)";
      break;
    case WriteKind::InPlace: {
      if (!in_sync_before) {
        // The write lands on a copy that did not hold the source's value: the result is
        // neither side's. Presence and deadline only from here on.
        t.value_known = false;
        ++stats_.value_unknown;
      }
      t.value = after;
      const int64_t old_deadline = was_present ? t.deadline : 0;
      t.exists = after.exists();
      if (!t.exists) {
        effect = "in-place write left no key -> absent";
      } else if (m == 0) {
        t.deadline = old_deadline;
        effect = "in-place write, M=0 -> T untouched (" + describeDeadline(t.deadline) + ")";
      } else {
        const int64_t replicated = config_.strip_ttl ? 0 : e;
        effect = "in-place write, M=" + std::to_string(m / kMsPerSecond) + "s, source deadline " +
                 describeDeadline(replicated) + " -> " +
                 setDeadline(t, clamp(replicated, m, now), now);
      }
      if (!in_sync_before) {
        effect += " [value unknown: the target copy had diverged]";
      }
      break;
    }
  }
  log(t, "[" + rel(now) + "] " + what + " -> " + effect);
}

void ExpiryModel::expireAt(const KeyId& source, int64_t e, int64_t now, const std::string& what) {
  auto target = targetOf(source);
  if (!target) {
    appendBounded(dropped_[source], "[" + rel(now) + "] " + what + " -> dropped by the pipeline");
    return;
  }
  ++stats_.expiry_changes;
  TargetKey& t = slot(*target);
  const int64_t m = maxTtlMs(*target);
  std::string effect;
  if (const Policy pol = policyOf(*target); pol.any()) {
    deadlineOnly(t, pol, config_.strip_ttl ? 0 : e, now, what);
    return;
  }
  if (!t.presentAt(now) && t.endedByTargetAt(now)) restoreCopy(t, e, now, what);
  if (!t.presentAt(now)) {
    effect = "no target copy: nothing";
  } else if (config_.strip_ttl) {
    // strip_ttl: PEXPIREAT becomes nothing (M = 0) or now+M (M > 0).
    effect = m == 0 ? "stripped, M=0: nothing (T=" + describeDeadline(t.deadline) + ")"
                    : "stripped, M=" + std::to_string(m / kMsPerSecond) + "s -> " +
                          setDeadline(t, now + m, now);
  } else {
    effect = "PEXPIREAT E=" + rel(e) + " M=" + std::to_string(m / kMsPerSecond) + "s -> " +
             setDeadline(t, clamp(e, m, now), now);
  }
  log(t, "[" + rel(now) + "] " + what + " -> " + effect);
}

void ExpiryModel::deadlineOnly(TargetKey& t, const Policy& pol, int64_t e, int64_t now,
                               const std::string& what) {
  // §8.1: the agent sends the decision whether or not the target holds the key (PEXPIREAT on
  // an absent key does nothing), recording the first-seen second either way.
  const int64_t first = touchFirst(t, pol, now);
  const int64_t deadline = policyDeadline(e, pol, first, now);
  std::string effect;
  if (!(config_.strip_ttl && deadline == 0) && !t.presentAt(now) && t.endedByTargetAt(now)) {
    restoreCopy(t, e, now, what);
  }
  if (config_.strip_ttl && deadline == 0) {
    effect = "stripped, no policy deadline: nothing";
  } else if (!t.presentAt(now)) {
    if (deadline != 0 && deadline <= now) t.first_s = 0;  // sent as DEL
    effect = "no target copy: nothing";
  } else {
    effect = "E=" + describeDeadline(e) + " D=" + std::to_string(pol.default_ttl / 1000) +
             "s L=" + std::to_string(pol.lifetime / 1000) + "s -> " + setDeadline(t, deadline, now);
  }
  log(t, "[" + rel(now) + "] " + what + " -> " + effect);
}

void ExpiryModel::persist(const KeyId& source, int64_t now, const std::string& what) {
  auto target = targetOf(source);
  if (!target) {
    appendBounded(dropped_[source], "[" + rel(now) + "] " + what + " -> dropped by the pipeline");
    return;
  }
  ++stats_.expiry_changes;
  TargetKey& t = slot(*target);
  const int64_t m = maxTtlMs(*target);
  std::string effect;
  if (const Policy pol = policyOf(*target); pol.any()) {
    deadlineOnly(t, pol, 0, now, what);
    return;
  }
  if (!t.presentAt(now) && t.endedByTargetAt(now)) restoreCopy(t, 0, now, what);
  if (!t.presentAt(now)) {
    effect = "no target copy: nothing";
  } else if (m > 0) {
    // Never a bare PERSIST into a maxTTL collection (§4); strip_ttl gives the same.
    effect =
        "PERSIST, M=" + std::to_string(m / kMsPerSecond) + "s -> " + setDeadline(t, now + m, now);
  } else if (config_.strip_ttl) {
    effect = "stripped, M=0: nothing (T=" + describeDeadline(t.deadline) + ")";
  } else {
    t.deadline = 0;
    effect = "PERSIST -> T=none";
  }
  log(t, "[" + rel(now) + "] " + what + " -> " + effect);
}

void ExpiryModel::remove(const KeyId& source, RemoveCause cause, int64_t now,
                         const std::string& what) {
  auto target = targetOf(source);
  const bool expiration = cause == RemoveCause::Expiration;
  const std::string kind = expiration ? "expiration" : "deletion";
  if (!target) {
    appendBounded(dropped_[source],
                  "[" + rel(now) + "] " + what + " (" + kind + ") -> dropped by the pipeline");
    return;
  }
  TargetKey& t = slot(*target);
  bool filtered = false;
  if (expiration) {
    ++stats_.expirations;
    filtered = config_.drop_expirations;
    stats_.expirations_dropped += filtered ? 1 : 0;
  } else {
    ++stats_.deletions;
    filtered = config_.drop_deletions;
    stats_.deletions_dropped += filtered ? 1 : 0;
  }
  std::string effect;
  if (filtered) {
    effect = "not sent (drop_" + kind +
             "s): the target keeps its copy until T=" + describeDeadline(t.deadline);
  } else {
    t.exists = false;
    t.ended_by_target = false;
    t.first_s = 0;  // §8.4: forgotten, the next write starts anew
    effect = "target copy removed";
  }
  log(t, "[" + rel(now) + "] " + what + " (" + kind + ") -> " + effect);
}

void ExpiryModel::move(const KeyId& from, const KeyId& to, int64_t from_deadline,
                       const Value& from_value, const Value& to_value, bool keep_from, int64_t now,
                       const std::string& what) {
  auto target_from = targetOf(from);
  auto target_to = targetOf(to);
  if (!target_from && !target_to) {
    ++stats_.dropped_by_key_or_db;
    appendBounded(dropped_[from], "[" + rel(now) + "] " + what + " -> dropped by the pipeline");
    appendBounded(dropped_[to], "[" + rel(now) + "] " + what + " -> dropped by the pipeline");
    return;
  }
  if (!target_from || !target_to) {
    // The specification says nothing about a RENAME/COPY between a replicated and a dropped key;
    // the generator never issues one.
    throw std::logic_error("model: " + what + " between a replicated and a dropped key");
  }
  ++stats_.writes;
  TargetKey& a = slot(*target_from);
  TargetKey& b = slot(*target_to);
  const bool a_in_sync = a.value_known && a.presentAt(now) && a.value == from_value;
  const int64_t m = maxTtlMs(*target_to);
  const int64_t replicated = config_.strip_ttl ? 0 : from_deadline;
  const Policy pol_b = policyOf(*target_to);
  if (!keep_from && &a != &b) a.first_s = 0;  // RENAME deletes a (§8.1)
  const int64_t first_b = touchFirst(b, pol_b, now);
  b.exists = true;
  b.value = to_value;
  b.value_known = a_in_sync;
  if (!a_in_sync) {
    ++stats_.value_unknown;
  }
  const std::string effect =
      "gets the value of " + target_from->second + ", E=" + describeDeadline(replicated) +
      " under " + describeMaxTtl(*target_to) + " -> " +
      setDeadline(
          b,
          pol_b.any() ? policyDeadline(replicated, pol_b, first_b, now) : clamp(replicated, m, now),
          now) +
      (a_in_sync ? ""
                 : " [value unknown: the copy of the source key had "
                   "diverged]");
  log(b, "[" + rel(now) + "] " + what + " -> " + effect);
  if (!keep_from && &a != &b) {
    a.exists = false;
    log(a, "[" + rel(now) + "] " + what + " -> renamed away, absent");
  } else if (&a != &b) {
    log(a, "[" + rel(now) + "] " + what + " -> copied from, unchanged");
  }
}

void ExpiryModel::targetOwnWrite(const KeyId& source, int64_t deadline, int64_t now,
                                 const std::string& what) {
  auto target = targetOf(source);
  if (!target) {
    throw std::logic_error("model: a target write for a dropped key");
  }
  TargetKey& t = slot(*target);
  t.deadline = deadline;
  log(t, "[" + rel(now) + "] " + what + " -> T=" + describeDeadline(deadline));
}

void ExpiryModel::flush(int db, int64_t now, const std::string& what) {
  int target_db = db;
  bool mapped = true;
  if (!config_.dbs.empty()) {
    auto it = config_.dbs.find(db);
    mapped = it != config_.dbs.end();
    target_db = mapped ? it->second : -1;
  }
  const bool sent = config_.replicate_flush && mapped;
  ++(sent ? stats_.flushes : stats_.flushes_dropped);
  for (auto& [id, t] : targets_) {
    if (id.first != target_db) {
      continue;
    }
    if (sent) {
      t.exists = false;
      t.first_s = 0;
      log(t, "[" + rel(now) + "] " + what + " -> replicated: target db " +
                 std::to_string(target_db) + " flushed");
    } else {
      log(t, "[" + rel(now) + "] " + what + " -> not replicated: the target keeps its copy");
    }
  }
}

void ExpiryModel::markRemovalAmbiguous(const KeyId& source, int64_t now, const std::string& what) {
  auto target = targetOf(source);
  if (!target) {
    return;
  }
  TargetKey& t = slot(*target);
  if (!config_.drop_expirations && t.exists) {
    t.removal_ambiguous = true;
    log(t, "[" + rel(now) + "] " + what +
               " -> the source's expiration may or may not have reached the target yet");
  }
}

void ExpiryModel::clearRemovalAmbiguity() {
  for (auto& [id, t] : targets_) {
    t.removal_ambiguous = false;
  }
}

bool ExpiryModel::inSync(const KeyId& source, const Value& source_value, int64_t t) const {
  auto target = targetOf(source);
  if (!target) {
    return true;
  }
  auto it = targets_.find(*target);
  if (it == targets_.end()) {
    return !source_value.exists();
  }
  const TargetKey& k = it->second;
  if (!k.value_known) {
    return false;
  }
  return k.presentAt(t) ? k.value == source_value : !source_value.exists();
}

const TargetKey* ExpiryModel::targetKey(const KeyId& source) const {
  auto target = targetOf(source);
  if (!target) {
    return nullptr;
  }
  auto it = targets_.find(*target);
  return it == targets_.end() ? nullptr : &it->second;
}

}  // namespace xdcr::test
