#include "target/expiry_policy.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <limits>

#include "target/max_ttl.h"

namespace xdcr::target {

namespace {

using Json = nlohmann::json;

/** The top-level member `field` of `value` when `value` is a JSON object; nullptr otherwise. */
const Json* member(const Json& doc, std::string_view field) {
  if (!doc.is_object()) return nullptr;
  auto it = doc.find(std::string(field));
  return it == doc.end() ? nullptr : &*it;
}

Json parse(std::string_view value) {
  // Cheap rejection first: only an object can carry a field (leading whitespace allowed).
  size_t i = value.find_first_not_of(" \t\r\n");
  if (i == std::string_view::npos || value[i] != '{') return Json();
  return Json::parse(value, nullptr, /*allow_exceptions=*/false);  // invalid: discarded
}

bool digits(std::string_view s, size_t pos, size_t n, int& out) {
  if (pos + n > s.size()) return false;
  out = 0;
  for (size_t i = pos; i < pos + n; ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    out = out * 10 + (s[i] - '0');
  }
  return true;
}

/** Days from 1970-01-01 to y-m-d (proleptic Gregorian; Howard Hinnant's days_from_civil). */
int64_t daysFromCivil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

int daysInMonth(int y, int m) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : kDays[m - 1];
}

}  // namespace

std::optional<int64_t> parseIso8601Ms(std::string_view s) {
  int y = 0, mo = 0, d = 0;
  if (!digits(s, 0, 4, y) || s.size() < 10 || s[4] != '-' || !digits(s, 5, 2, mo) || s[7] != '-' ||
      !digits(s, 8, 2, d)) {
    return std::nullopt;
  }
  if (mo < 1 || mo > 12 || d < 1 || d > daysInMonth(y, mo)) return std::nullopt;
  int64_t ms = daysFromCivil(y, mo, d) * 86'400'000;
  if (s.size() == 10) return ms;  // a date alone: midnight UTC
  if (s[10] != 'T') return std::nullopt;
  int h = 0, mi = 0, sec = 0;
  if (!digits(s, 11, 2, h) || s.size() < 16 || s[13] != ':' || !digits(s, 14, 2, mi)) {
    return std::nullopt;
  }
  size_t pos = 16;
  int64_t frac_ms = 0;
  if (pos < s.size() && s[pos] == ':') {
    if (!digits(s, pos + 1, 2, sec)) return std::nullopt;
    pos += 3;
    if (pos < s.size() && s[pos] == '.') {
      ++pos;
      const size_t start = pos;
      bool rest_nonzero = false;  // a digit beyond the millisecond that is not 0
      while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') {
        const size_t i = pos - start;
        if (i < 3) {
          frac_ms += (s[pos] - '0') * (i == 0 ? 100 : i == 1 ? 10 : 1);
        } else if (s[pos] != '0') {
          rest_nonzero = true;
        }
        ++pos;
      }
      if (pos == start) return std::nullopt;
      if (rest_nonzero) ++frac_ms;  // rounded up: never earlier than written
    }
  }
  if (h > 23 || mi > 59 || sec > 59) return std::nullopt;
  ms += (h * 3600LL + mi * 60LL + sec) * 1000 + frac_ms;
  if (pos == s.size()) return ms;  // no zone: UTC
  if (s[pos] == 'Z' && pos + 1 == s.size()) return ms;
  if (s[pos] != '+' && s[pos] != '-') return std::nullopt;
  const int sign = s[pos] == '+' ? 1 : -1;
  int oh = 0, om = 0;
  if (!digits(s, pos + 1, 2, oh)) return std::nullopt;
  size_t after = pos + 3;
  if (after < s.size() && s[after] == ':') ++after;
  if (!digits(s, after, 2, om) || after + 2 != s.size()) return std::nullopt;
  if (oh > 23 || om > 59) return std::nullopt;
  return ms - sign * (oh * 3600LL + om * 60LL) * 1000;
}

TtlField readTtlField(std::string_view value, std::string_view field) {
  const Json doc = parse(value);
  const Json* v = member(doc, field);
  TtlField out;
  if (v == nullptr) return out;
  // Cosmos takes a non-zero positive integer of seconds, or -1 (seed 002); it refuses 0,
  // other negative numbers, fractions and strings, which a replicated write cannot be: the
  // agent reads them as no field (the collection's default applies, as for a missing ttl).
  if (v->is_number_integer()) {
    const int64_t n = v->get<int64_t>();
    if (n == -1) {
      out.kind = TtlField::Kind::Never;
    } else if (n > 0 && n <= std::numeric_limits<int32_t>::max()) {
      out.kind = TtlField::Kind::Seconds;
      out.seconds = n;
    }
  }
  return out;
}

std::optional<int64_t> readExpireAt(std::string_view value, std::string_view field) {
  const Json doc = parse(value);
  const Json* v = member(doc, field);
  if (v == nullptr) return std::nullopt;
  if (v->is_string()) return parseIso8601Ms(v->get_ref<const std::string&>());
  if (v->is_number_integer()) {
    const int64_t s = v->get<int64_t>();
    if (s < 0 || s > std::numeric_limits<int64_t>::max() / 1000 / 2) return std::nullopt;
    return s * 1000;
  }
  if (v->is_number_float()) {
    const double s = v->get<double>();
    if (!std::isfinite(s) || s < 0 || s > 4e15) return std::nullopt;
    return static_cast<int64_t>(std::ceil(s * 1000.0));  // rounded up: never early
  }
  return std::nullopt;
}

PolicyDecision decide(const KeyPolicy& p, const PolicyInput& in) {
  using Action = PolicyDecision::Action;
  const CollectionPolicy* pol = p.policy;
  const int64_t m = p.max_ttl_ms;
  const int64_t lifetime_ms = pol != nullptr ? pol->max_lifetime_ms : 0;
  const int64_t lifetime_end =
      lifetime_ms > 0 && in.first_seen_s > 0 ? in.first_seen_s * 1000 + lifetime_ms : 0;
  PolicyDecision out;

  if (in.kind == WriteKind::KeepTtl) {
    // Preserve expiry (§4): the target keeps its deadline; only the lifetime cap may lower it.
    if (lifetime_end != 0) {
      out.action = Action::Cap;
      out.deadline = lifetime_end;
      out.rule = "max_lifetime";
    } else {
      out.action = Action::Untouched;
      out.rule = "keepttl";
    }
    return out;
  }

  if (in.kind == WriteKind::InPlace) {
    if (pol != nullptr && pol->fills()) {
      // The value is not carried: its fields cannot be read, so the deadline the last
      // whole-value write gave stays; the caps (max_lifetime, max_ttl) can only lower it.
      int64_t cap = lifetime_end;
      out.rule = "max_lifetime";
      if (m > 0 && (cap == 0 || in.now + m < cap)) {
        cap = in.now + m;
        out.rule = "max_ttl";
      }
      out.action = cap == 0 ? Action::Untouched : Action::Cap;
      out.deadline = cap;
      if (cap == 0) out.rule = "kept";
      return out;
    }
    if (m == 0 && lifetime_end == 0) {
      out.action = Action::Untouched;  // §4: M == 0, the target deadline is untouched
      out.rule = "kept";
      return out;
    }
    // §4's in-place rule (extend up to now+M), then the lifetime cap.
  }

  // The fill: the source deadline E, the document's field, the collection's default.
  int64_t t = in.e;
  out.rule = "E";
  if (pol != nullptr) {
    int64_t field = 0;  // a deadline from the document; -1 = the document says never
    if (in.kind == WriteKind::WholeValue && in.value && pol->reads_value()) {
      if (!pol->ttl_field.empty()) {
        TtlField f = readTtlField(*in.value, pol->ttl_field);
        if (f.kind == TtlField::Kind::Seconds) field = in.now + f.seconds * 1000;
        if (f.kind == TtlField::Kind::Never) field = -1;
      } else if (auto at = readExpireAt(*in.value, pol->expire_at_field)) {
        field = std::max<int64_t>(*at + pol->expire_after_ms, 1);  // 0 would read "none"
      }
    }
    if (field > 0) {
      if (t == 0 || field < t) {
        t = field;
        out.rule = pol->ttl_field.empty() ? "expire_at_field" : "ttl_field";
      }
    } else if (field == -1) {
      out.rule = t == 0 ? "ttl_field_never" : "E";
    } else if (t == 0 && pol->default_ttl_ms > 0) {
      t = in.now + pol->default_ttl_ms;
      out.rule = "default_ttl";
    } else if (t == 0 && pol->default_ttl_ms == CollectionPolicy::kNoDefault) {
      out.rule = "default_ttl_never";
    }
  }
  // The caps: max_lifetime, then max_ttl (the clamp, §4).
  if (lifetime_end != 0 && (t == 0 || lifetime_end < t)) {
    t = lifetime_end;
    out.rule = "max_lifetime";
  }
  const int64_t clamped = clampDeadline(t, m, in.now);
  if (clamped != t) out.rule = "max_ttl";
  out.action = Action::Set;
  out.deadline = clamped;
  return out;
}

}  // namespace xdcr::target
