#include "replicator/verify_compare.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <limits>
#include <string_view>

#include <fmt/format.h>

namespace xdcr::replicator::verify {

int64_t DeadlineRules::expected(int64_t source) const {
  if (strip_ttl || source < 0) return -1;
  return source + shift_ms;
}

bool DeadlineRules::matches(int64_t expected, int64_t target) const {
  if (expected < 0 || target < 0) return expected < 0 && target < 0;
  return std::llabs(target - expected) <= tolerance_ms;
}

bool DeadlineRules::allows(int64_t source, int64_t target, int64_t max_ttl_ms,
                           int64_t target_now_ms) const {
  const int64_t want = expected(source);
  // Without a maxTTL both none is right; with one, the target must have a (clamped) deadline.
  if (matches(want, target) && (max_ttl_ms == 0 || target >= 0)) return true;
  return max_ttl_ms > 0 && target >= 0 && (want < 0 || target < want + tolerance_ms) &&
         target <= target_now_ms + max_ttl_ms + tolerance_ms;
}

std::string formatDeadline(int64_t deadline) {
  if (deadline == -2) return "absent";
  return deadline < 0 ? std::string("none") : fmt::format("{}", deadline);
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s.substr(0, 80)) {
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  return out + (s.size() > 80 ? "…\"" : "\"");
}

std::string formatSeconds(int64_t ms) {
  if (ms % 1000 == 0) return fmt::format("{} s", ms / 1000);
  return fmt::format("{:.3f} s", static_cast<double>(ms) / 1000.0);
}

AbsenceVerdict judgeAbsence(const AbsenceEvidence& e) {
  const int64_t need = e.max_ttl_ms + e.tolerance_ms;
  const std::string bound = fmt::format("max_ttl {} + tolerance {}", formatSeconds(e.max_ttl_ms),
                                        formatSeconds(e.tolerance_ms));
  if (e.idle_s < 0) {
    return {false, fmt::format("absent on the target; whether max_ttl {} ended its copy cannot be "
                               "told: the source key's idle time is unreadable ({})",
                               formatSeconds(e.max_ttl_ms), e.idle_unreadable)};
  }
  // IDLETIME counts whole seconds of the server's LRU clock: the last access was more than
  // idle - 1 s ago.
  const int64_t since_touch_ms = std::max<int64_t>(0, e.idle_s * 1000 - 1000);
  if (since_touch_ms < need) {
    return {false, fmt::format("absent on the target; the source key was last touched {} s ago "
                               "(OBJECT IDLETIME), under {}, so its copy cannot have expired",
                               e.idle_s, bound)};
  }
  if (e.since_full_sync_ms < 0) {
    return {false, fmt::format("absent on the target; the source key was last touched {} s ago, "
                               "but when the pipeline's last full sync wrote its copy is unknown "
                               "({}), so its expiry cannot be proved",
                               e.idle_s, e.full_sync_unknown)};
  }
  if (e.since_full_sync_ms < need) {
    return {false, fmt::format("absent on the target; the source key was last touched {} s ago, "
                               "but the pipeline's last full sync may have written its copy {} "
                               "ago, under {}, so its copy cannot have expired",
                               e.idle_s, formatSeconds(e.since_full_sync_ms / 1000 * 1000), bound)};
  }
  return {true, fmt::format("absent on the target, expired by max_ttl {}: the source key was last "
                            "touched {} s ago and the last full sync ended over {} ago",
                            formatSeconds(e.max_ttl_ms), e.idle_s,
                            formatSeconds(e.since_full_sync_ms / 1000 * 1000))};
}

namespace {

using target::WriteKind;

constexpr int64_t kLongAgoMs = 1;  // a write "long ago": every relative term of it has passed
constexpr int64_t kUnbounded = std::numeric_limits<int64_t>::max();

/** max_lifetime's first second for a write at `w`: the record's (the latest of two instances'
 *  for `high`), or without one the latest it can be (`high`: ceil(w / 1000)) or long ago. */
int64_t firstFor(const PolicyFacts& f, int64_t w, bool high) {
  if (f.policy.maxLifetimeMs() <= 0) return 0;
  if (f.first.known()) return high ? f.first.max_s : f.first.min_s;
  return high ? (w + 999) / 1000 : 1;
}

target::PolicyDecision decideAt(const PolicyFacts& f, WriteKind kind, int64_t w, bool high) {
  target::PolicyInput in;
  in.kind = kind;
  in.e = f.e;
  if (kind == WriteKind::WholeValue) in.value = f.value;
  in.now = w;
  in.first_seen_s = firstFor(f, w, high);
  return target::decide(f.policy, in);
}

PolicyRange rangeOf(const PolicyFacts& f, WriteKind kind) {
  PolicyRange r;
  const target::PolicyDecision hi = decideAt(f, kind, f.now, true);
  r.hi = hi.deadline;
  r.rule = hi.rule;
  r.lo = decideAt(f, kind, kLongAgoMs, false).deadline;
  return r;
}

bool within(const PolicyRange& r, int64_t target, int64_t tol) {
  if (r.hi == 0) return target < 0;
  return target >= 0 && target >= r.lo - tol && target <= r.hi + tol;
}

std::string describeRange(const PolicyRange& r, int64_t now) {
  if (r.hi == 0) return fmt::format("none ({})", r.rule);
  if (r.lo == r.hi) return fmt::format("{} ({})", r.hi, r.rule);
  if (r.lo > now) return fmt::format("{} to {} ({})", r.lo, r.hi, r.rule);
  return fmt::format("at most {} ({}, at a write up to now)", r.hi, r.rule);
}

}  // namespace

std::string describePolicy(const target::KeyPolicy& p) {
  std::vector<std::string> parts;
  if (const target::CollectionPolicy* c = p.policy) {
    if (c->default_ttl_ms > 0) parts.push_back("default_ttl " + formatSeconds(c->default_ttl_ms));
    if (c->default_ttl_ms == target::CollectionPolicy::kNoDefault)
      parts.emplace_back("default_ttl -1");
    if (!c->ttl_field.empty()) parts.push_back(fmt::format("ttl_field {}", quote(c->ttl_field)));
    if (!c->expire_at_field.empty()) {
      parts.push_back(fmt::format("expire_at_field {} + expire_after {}", quote(c->expire_at_field),
                                  formatSeconds(c->expire_after_ms)));
    }
    if (c->max_lifetime_ms > 0)
      parts.push_back("max_lifetime " + formatSeconds(c->max_lifetime_ms));
  }
  if (p.max_ttl_ms > 0) parts.push_back("max_ttl " + formatSeconds(p.max_ttl_ms));
  if (parts.empty()) return "no policy";
  std::string out;
  for (const auto& x : parts) out += (out.empty() ? "" : ", ") + x;
  return out;
}

PolicyRange wholeValueRange(const PolicyFacts& f) {
  return rangeOf(f, WriteKind::WholeValue);
}

PolicyJudgement judgePolicyDeadline(const PolicyFacts& f, int64_t target) {
  PolicyJudgement j;
  const int64_t tol = f.tolerance_ms;
  const PolicyRange whole = wholeValueRange(f);
  j.expected = describeRange(whole, f.now);
  if (within(whole, target, tol)) return j;
  const target::CollectionPolicy* pol = f.policy.policy;
  const std::string policy = describePolicy(f.policy);
  // A deadline-only write (PEXPIREAT, PERSIST, a RENAME's destination; memcached's touch) reads
  // no field: it differs from a whole-value write only where a field is read.
  if (pol != nullptr && pol->reads_value() && f.value) {
    const PolicyRange d = rangeOf(f, WriteKind::DeadlineOnly);
    if (within(d, target, tol)) {
      j.verdict = PolicyVerdict::NotChecked;
      j.detail = fmt::format(
          "deadline not checked: policy depends on the last write kind ({}): target {}; a "
          "whole-value write gives {}, a deadline-only write (PEXPIREAT, PERSIST, RENAME: no "
          "field read) {}",
          policy, formatDeadline(target), j.expected, describeRange(d, f.now));
      return j;
    }
  }
  // Redis, a filling collection: an in-place or keep-TTL write keeps the deadline an earlier
  // write gave (unknown here); the caps only lower it (§8.1).
  if (f.in_place_possible && pol != nullptr && pol->fills()) {
    int64_t caps = 0;
    auto lower = [&caps](int64_t c) {
      if (c > 0 && (caps == 0 || c < caps)) caps = c;
    };
    if (f.policy.max_ttl_ms > 0) lower(f.now + f.policy.max_ttl_ms);
    if (pol->max_lifetime_ms > 0) {
      lower(f.first.known() ? f.first.max_s * 1000 + pol->max_lifetime_ms
                            : (f.now + 999) / 1000 * 1000 + pol->max_lifetime_ms);
    }
    bool none_ok = false;
    int64_t upper = 0;  // 0: none only; kUnbounded: any deadline
    std::string accepted;
    if (f.e != 0) {
      upper = caps != 0 ? std::min(f.e, caps) : f.e;
      accepted = fmt::format("a deadline up to {} (E{})", upper, caps != 0 ? " and the caps" : "");
    } else if (caps != 0) {
      upper = caps;
      accepted = fmt::format("a deadline up to {} (the caps)", upper);
    } else {
      none_ok = true;
      if (f.value && pol->reads_value()) {
        upper = kUnbounded;
        accepted = "none or any deadline (an older value's field)";
      } else if (pol->default_ttl_ms > 0) {
        upper = f.now + pol->default_ttl_ms;
        accepted = fmt::format("none or a deadline up to {} (now + default_ttl)", upper);
      } else {
        accepted = "none";
      }
    }
    const bool ok =
        target < 0 ? none_ok : upper == kUnbounded || (upper > 0 && target <= upper + tol);
    if (ok) {
      j.verdict = PolicyVerdict::NotChecked;
      j.detail = fmt::format(
          "deadline not checked: policy depends on the last write kind ({}): target {}; a "
          "whole-value write gives {}, but an in-place or keep-TTL write (HSET, APPEND, INCR, "
          "SET KEEPTTL, ...) keeps an earlier write's deadline: accepted {}",
          policy, formatDeadline(target), j.expected, accepted);
      return j;
    }
  }
  j.verdict = PolicyVerdict::Mismatch;
  j.detail = fmt::format("deadline: target {}, expected {} under {}", formatDeadline(target),
                         j.expected, policy);
  return j;
}

AbsenceVerdict judgePolicyAbsence(const PolicyFacts& f, const AbsenceEvidence& e) {
  const PolicyRange whole = wholeValueRange(f);
  const std::string policy = describePolicy(f.policy);
  if (whole.hi == 0) {
    return {false, fmt::format("absent on the target; under {} its copy has no deadline ({}), so "
                               "it cannot have expired",
                               policy, whole.rule)};
  }
  if (whole.hi <= f.now) {
    return {true, fmt::format("absent on the target, as the rules say: {} gives its copy the "
                              "deadline {}, already past (deleted on arrival, or expired there)",
                              whole.rule, whole.hi)};
  }
  if (e.idle_s < 0) {
    return {false, fmt::format("absent on the target; whether {} ended its copy cannot be told: "
                               "the source key's idle time is unreadable ({})",
                               policy, e.idle_unreadable)};
  }
  if (e.since_full_sync_ms < 0) {
    return {false, fmt::format("absent on the target; the source key was last touched {} s ago, "
                               "but when the pipeline's last full sync wrote its copy is unknown "
                               "({}), so its expiry cannot be proved",
                               e.idle_s, e.full_sync_unknown)};
  }
  // Its last write on the target was at the latest `since` ago (+ the tolerance: the pipeline's
  // lag); the decision is monotone in the write's instant, so a write then gave at most `d`.
  const int64_t since_touch_ms = std::max<int64_t>(0, e.idle_s * 1000 - 1000);
  const int64_t since = std::min(since_touch_ms, e.since_full_sync_ms);
  const int64_t w = f.now - since + e.tolerance_ms;
  const target::PolicyDecision d = decideAt(f, WriteKind::WholeValue, w, true);
  const std::string evidence =
      fmt::format("the source key last touched {} s ago, the last full sync {} ago", e.idle_s,
                  formatSeconds(e.since_full_sync_ms / 1000 * 1000));
  if (d.deadline != 0 && d.deadline <= f.now) {
    const target::CollectionPolicy* pol = f.policy.policy;
    const bool caveat = f.in_place_possible && pol != nullptr && pol->fills() &&
                        f.policy.max_ttl_ms == 0 && pol->max_lifetime_ms == 0;
    return {true,
            fmt::format("absent on the target, ended by {} ({}): its last write, at the "
                        "latest {} ago ({}), gave its copy a deadline of at most {}{}",
                        d.rule, policy, formatSeconds(since / 1000 * 1000), evidence, d.deadline,
                        caveat ? " (if that write carried its value: an in-place write "
                                 "leaves no deadline under this policy)"
                               : "")};
  }
  return {false, fmt::format("absent on the target; under {} its copy cannot have expired: a "
                             "write {} ago gives it the deadline {} ({}) ({})",
                             policy, formatSeconds(since / 1000 * 1000),
                             formatDeadline(d.deadline == 0 ? -1 : d.deadline), d.rule, evidence)};
}

namespace {

bool containsNoCase(std::string_view text, std::string_view word) {
  auto it = std::search(text.begin(), text.end(), word.begin(), word.end(), [](char a, char b) {
    return std::tolower(static_cast<unsigned char>(a)) ==
           std::tolower(static_cast<unsigned char>(b));
  });
  return it != text.end();
}

}  // namespace

FieldTtlSupport fieldTtlSupportOf(const resp::Value& reply) {
  if (!reply.isError()) return FieldTtlSupport::Yes;
  // Redis < 7.4, Valkey < 9: "ERR unknown command 'HPEXPIRETIME', with args beginning with: ...".
  if (containsNoCase(reply.str, "unknown command")) return FieldTtlSupport::None;
  // About the key (it changed type between the reads) or the arguments: the command exists.
  if (reply.str.rfind("WRONGTYPE", 0) == 0) return FieldTtlSupport::Yes;
  return FieldTtlSupport::Unreadable;  // NOPERM and the like: we may not ask
}

std::vector<std::vector<std::string>> fieldDeadlineCommands(const std::string& key,
                                                            const std::vector<std::string>& fields,
                                                            size_t chunk) {
  std::vector<std::vector<std::string>> out;
  if (chunk == 0) chunk = kFieldsPerCommand;
  for (size_t at = 0; at < fields.size(); at += chunk) {
    const size_t n = std::min(chunk, fields.size() - at);
    std::vector<std::string> c = {"HPEXPIRETIME", key, "FIELDS", std::to_string(n)};
    c.insert(c.end(), fields.begin() + static_cast<std::ptrdiff_t>(at),
             fields.begin() + static_cast<std::ptrdiff_t>(at + n));
    out.push_back(std::move(c));
  }
  return out;
}

std::optional<std::vector<int64_t>> parseFieldDeadlines(const std::vector<resp::Value>& replies,
                                                        size_t fields) {
  std::vector<int64_t> out;
  out.reserve(fields);
  for (const resp::Value& r : replies) {
    if (r.type != resp::ReplyType::Array) return std::nullopt;
    for (const resp::Value& e : r.elements) {
      if (e.type != resp::ReplyType::Integer) return std::nullopt;
      out.push_back(e.integer);
    }
  }
  if (out.size() != fields) return std::nullopt;
  return out;
}

std::vector<std::string> hashFields(const resp::Value& hgetall) {
  std::vector<std::string> out;
  if (hgetall.type != resp::ReplyType::Array) return out;
  for (size_t i = 0; i + 1 < hgetall.elements.size(); i += 2) {
    out.push_back(hgetall.elements[i].str);
  }
  return out;
}

std::vector<FieldDeadlineDiff> compareFieldDeadlines(const DeadlineRules& rules,
                                                     const std::vector<std::string>& fields,
                                                     const std::vector<int64_t>& source,
                                                     const std::vector<int64_t>& target,
                                                     int64_t source_now_ms) {
  std::vector<FieldDeadlineDiff> out;
  const size_t n = std::min({fields.size(), source.size(), target.size()});
  for (size_t i = 0; i < n; ++i) {
    const int64_t s = source[i];
    const int64_t t = target[i];
    if (s == -2) continue;  // gone from the source since its value was read
    // Passed, or passing within the tolerance: the source deletes it (or just did).
    if (s >= 0 && s <= source_now_ms + rules.tolerance_ms) continue;
    const int64_t want = rules.expected(s);
    if (t == -2 || !rules.matches(want, t)) out.push_back({fields[i], s, t, want});
  }
  return out;
}

std::string describeFieldDiffs(const std::vector<FieldDeadlineDiff>& diffs) {
  if (diffs.empty()) return "";
  const FieldDeadlineDiff& d = diffs.front();
  std::string out =
      fmt::format("field {}: deadline: source {}, target {}, expected {}", quote(d.field),
                  formatDeadline(d.source), formatDeadline(d.target), formatDeadline(d.expected));
  if (diffs.size() > 1) {
    std::string more;
    for (size_t i = 1; i < diffs.size() && i <= 5; ++i) {
      more += (i > 1 ? ", " : "") + quote(diffs[i].field);
    }
    out += fmt::format(" (and {} more field{}: {}{})", diffs.size() - 1,
                       diffs.size() > 2 ? "s" : "", more, diffs.size() > 6 ? ", …" : "");
  }
  return out;
}

resp::Value vectorSetValue(const resp::Value& card, const resp::Value& dim,
                           std::vector<VectorElement> elements) {
  std::sort(elements.begin(), elements.end(),
            [](const VectorElement& a, const VectorElement& b) { return a.name < b.name; });
  resp::Value list;
  list.type = resp::ReplyType::Array;
  for (VectorElement& e : elements) {
    resp::Value emb = std::move(e.embedding);
    if (emb.type == resp::ReplyType::Array) {
      // The numbers, not their spelling.
      for (resp::Value& x : emb.elements) {
        x.str = fmt::format("{}", std::strtod(x.str.c_str(), nullptr));
      }
    }
    resp::Value name;
    name.type = resp::ReplyType::Bulk;
    name.str = std::move(e.name);
    resp::Value item;
    item.type = resp::ReplyType::Array;
    item.elements = {std::move(name), std::move(emb), std::move(e.attribute)};
    list.elements.push_back(std::move(item));
  }
  resp::Value out;
  out.type = resp::ReplyType::Array;
  out.elements = {card, dim, std::move(list)};
  return out;
}

namespace {

std::string describeNumber(const resp::Value& v) {
  return v.type == resp::ReplyType::Integer ? fmt::format("{}", v.integer) : v.describe();
}

std::string describeVector(const resp::Value& v) {
  if (v.type != resp::ReplyType::Array) return v.describe();
  std::string out = "[";
  for (size_t i = 0; i < v.elements.size() && i < 4; ++i) {
    out += (i > 0 ? ", " : "") + v.elements[i].str;
  }
  return out + (v.elements.size() > 4 ? ", …]" : "]");
}

/** The element list of a vectorSetValue() (empty when it is not one). */
const std::vector<resp::Value>& elementsOf(const resp::Value& v) {
  static const std::vector<resp::Value> kNone;
  if (v.type != resp::ReplyType::Array || v.elements.size() != 3) return kNone;
  return v.elements[2].elements;
}

}  // namespace

std::string describeVectorSetDifference(const resp::Value& source, const resp::Value& target) {
  std::vector<std::string> parts;
  if (source.elements.size() == 3 && target.elements.size() == 3) {
    if (!(source.elements[0] == target.elements[0])) {
      parts.push_back(fmt::format("VCARD: source {}, target {}", describeNumber(source.elements[0]),
                                  describeNumber(target.elements[0])));
    }
    if (!(source.elements[1] == target.elements[1])) {
      parts.push_back(fmt::format("VDIM: source {}, target {}", describeNumber(source.elements[1]),
                                  describeNumber(target.elements[1])));
    }
  }
  const auto& s = elementsOf(source);
  const auto& t = elementsOf(target);
  size_t i = 0, j = 0, differing = 0;
  std::string first;
  auto note = [&](std::string what) {
    if (differing++ == 0) first = std::move(what);
  };
  while (i < s.size() || j < t.size()) {
    const std::string* sn = i < s.size() ? &s[i].elements[0].str : nullptr;
    const std::string* tn = j < t.size() ? &t[j].elements[0].str : nullptr;
    if (tn == nullptr || (sn != nullptr && *sn < *tn)) {
      note(fmt::format("element {}: absent on the target", quote(*sn)));
      ++i;
    } else if (sn == nullptr || *tn < *sn) {
      note(fmt::format("element {}: only on the target", quote(*tn)));
      ++j;
    } else {
      const auto& se = s[i].elements;
      const auto& te = t[j].elements;
      if (!(se[1] == te[1])) {
        note(fmt::format("element {}: vector: source {}, target {}", quote(*sn),
                         describeVector(se[1]), describeVector(te[1])));
      } else if (!(se[2] == te[2])) {
        note(fmt::format("element {}: attribute: source {}, target {}", quote(*sn),
                         se[2].describe(), te[2].describe()));
      }
      ++i;
      ++j;
    }
  }
  if (differing > 0) {
    parts.push_back(fmt::format("{} ({} element{} differ{})", first, differing,
                                differing > 1 ? "s" : "", differing > 1 ? "" : "s"));
  }
  if (parts.empty()) return "vectorset differs";
  std::string out = "vectorset differs: ";
  for (size_t k = 0; k < parts.size(); ++k) out += (k > 0 ? "; " : "") + parts[k];
  return out;
}

}  // namespace xdcr::replicator::verify
