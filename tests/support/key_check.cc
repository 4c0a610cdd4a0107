#include "tests/support/key_check.h"

#include <sstream>
#include <stdexcept>

#include "tests/support/target_layout.h"

namespace xdcr::test {
namespace {

// Contents are cut in messages: a large hash or stream would drown the report.
constexpr size_t kShownContents = 120;

std::string shorten(const std::string& text) {
  return text.size() <= kShownContents ? text : text.substr(0, kShownContents) + "...";
}

std::string describeExpectedDeadline(const ExpectedKey& e, int64_t now_ms) {
  if (!e.deadline) {
    return "none";
  }
  if (e.deadline->first == e.deadline->second) {
    return describeDeadline(e.deadline->first, now_ms);
  }
  return describeDeadline(e.deadline->first, now_ms) + " .. " +
         describeDeadline(e.deadline->second, now_ms);
}

}  // namespace

std::string describeDeadline(int64_t deadline_ms, int64_t now_ms) {
  if (deadline_ms < 0) {
    return deadline_ms == -1 ? "none" : std::to_string(deadline_ms);
  }
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(1);
  out << deadline_ms << " (now" << (deadline_ms >= now_ms ? "+" : "")
      << static_cast<double>(deadline_ms - now_ms) / 1000.0 << "s)";
  return out.str();
}

ExpectedKey absentKey(std::string why) {
  ExpectedKey e;
  e.present = false;
  e.why = std::move(why);
  return e;
}

ExpectedKey replicatedKey(const KeyState& source, int64_t e, int64_t m_ms, int64_t now_lo,
                          int64_t now_hi, int64_t tolerance_ms, std::string why) {
  ExpectedKey k;
  k.present = true;
  k.type = source.type;
  k.contents = source.contents;
  k.why = std::move(why);
  const int64_t lo = specClamp(e, m_ms, now_lo);
  const int64_t hi = specClamp(e, m_ms, now_hi);
  if (hi != 0) {
    k.deadline = std::make_pair(lo - tolerance_ms, hi + tolerance_ms);
  }
  return k;
}

std::string KeyCheckReport::summary() const {
  std::ostringstream out;
  out << checked << " keys checked: " << missing << " missing, " << unexpected
      << " present but not expected, " << contents << " with other contents, " << deadlines
      << " with an unexpected deadline";
  for (const auto& d : details) {
    out << "\n  " << d;
  }
  const int64_t bad = missing + unexpected + contents + deadlines;
  if (bad > static_cast<int64_t>(details.size())) {
    out << "\n  ... and " << bad - static_cast<int64_t>(details.size()) << " more";
  }
  return out.str();
}

KeyCheckReport checkKeys(const std::vector<const DatasetKey*>& keys,
                         const std::vector<ExpectedKey>& expected,
                         const std::vector<KeyState>& actual, int64_t read_ms, size_t max_details) {
  if (keys.size() != expected.size() || keys.size() != actual.size()) {
    throw std::invalid_argument("checkKeys: " + std::to_string(keys.size()) + " keys, " +
                                std::to_string(expected.size()) + " expectations, " +
                                std::to_string(actual.size()) + " states");
  }
  KeyCheckReport report;
  for (size_t i = 0; i < keys.size(); ++i) {
    const ExpectedKey& e = expected[i];
    const KeyState& a = actual[i];
    ++report.checked;
    const bool present = a.type != "none";
    std::string problem;
    if (e.present && !present) {
      ++report.missing;
      problem = "missing";
    } else if (!e.present && present) {
      ++report.unexpected;
      problem = "present (" + a.type + ", deadline " + describeDeadline(a.pexpiretime, read_ms) +
                "), expected absent";
    } else if (e.present) {
      if (a.type != e.type || a.contents != e.contents) {
        ++report.contents;
        problem =
            a.type + " " + shorten(a.contents) + ", expected " + e.type + " " + shorten(e.contents);
      }
      const bool deadline_ok =
          e.deadline ? a.pexpiretime >= e.deadline->first && a.pexpiretime <= e.deadline->second
                     : a.pexpiretime == -1;
      if (!deadline_ok) {
        ++report.deadlines;
        problem += (problem.empty() ? "" : "; ") + std::string("deadline ") +
                   describeDeadline(a.pexpiretime, read_ms) + ", expected " +
                   describeExpectedDeadline(e, read_ms);
      }
    }
    if (!problem.empty() && report.details.size() < max_details) {
      report.details.push_back("db" + std::to_string(keys[i]->db) + " " +
                               escapeBytes(keys[i]->key) + ": " + problem +
                               (e.why.empty() ? "" : " [" + e.why + "]"));
    }
  }
  return report;
}

}  // namespace xdcr::test
