#include "tests/support/key_check.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "tests/support/target_layout.h"
#include "tests/support/wait.h"

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

/** Compares one key; counts into `report` and adds a detail line labelled `label`. */
void checkOne(const std::string& label, const ExpectedKey& e, const KeyState& a, int64_t read_ms,
              size_t max_details, KeyCheckReport* report) {
  ++report->checked;
  const bool present = a.type != "none";
  std::string problem;
  if (e.present && !present) {
    ++report->missing;
    problem = "missing";
  } else if (!e.present && present) {
    ++report->unexpected;
    problem = "present (" + a.type + ", deadline " + describeDeadline(a.pexpiretime, read_ms) +
              "), expected absent";
  } else if (e.present) {
    if (a.type != e.type || a.contents != e.contents) {
      ++report->contents;
      problem =
          a.type + " " + shorten(a.contents) + ", expected " + e.type + " " + shorten(e.contents);
    }
    const bool deadline_ok =
        e.deadline ? a.pexpiretime >= e.deadline->first && a.pexpiretime <= e.deadline->second
                   : a.pexpiretime == -1;
    if (!deadline_ok) {
      ++report->deadlines;
      problem += (problem.empty() ? "" : "; ") + std::string("deadline ") +
                 describeDeadline(a.pexpiretime, read_ms) + ", expected " +
                 describeExpectedDeadline(e, read_ms);
    }
  }
  if (!problem.empty() && report->details.size() < max_details) {
    report->details.push_back(label + ": " + problem + (e.why.empty() ? "" : " [" + e.why + "]"));
  }
}

}  // namespace

std::string withoutNodeLocalFields(std::string contents) {
  // A consumer's active-time (Redis 7.2+, Valkey): node-local, and absent from Redis 7.0's
  // XINFO, so it is removed, field and value, for comparisons across versions.
  for (size_t pos; (pos = contents.find("\"active-time\", ")) != std::string::npos;) {
    size_t end = contents.find_first_of(",]}", pos + 15);
    if (end == std::string::npos) end = contents.size();
    if (contents.compare(end, 2, ", ") == 0) end += 2;
    contents.erase(pos, end - pos);
  }
  // The renderer quotes field names and escapes '"' inside data, so these patterns only ever
  // match field names.
  static const char* const kFields[] = {"\"seen-time\", ", "\"entries-read\", ", "\"lag\", "};
  for (const char* field : kFields) {
    const std::string pattern = field;
    size_t pos = 0;
    while ((pos = contents.find(pattern, pos)) != std::string::npos) {
      const size_t start = pos + pattern.size();
      const size_t end = contents.find_first_of(",]}", start);
      contents.replace(start, (end == std::string::npos ? contents.size() : end) - start, "*");
      pos = start;
    }
  }
  return contents;
}

namespace {

// Keys per SCAN call in snapshotKeySpace(), and a bound on the calls.
constexpr int kScanCount = 1000;
constexpr int kMaxScanCalls = 100000;

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
    checkOne("db" + std::to_string(keys[i]->db) + " " + escapeBytes(keys[i]->key), expected[i],
             actual[i], read_ms, max_details, &report);
  }
  return report;
}

KeySpaceSnapshot snapshotKeys(const RespPipeline& run, const std::vector<std::string>& keys) {
  KeySpaceSnapshot snapshot;
  snapshot.read_started_ms = unixTimeMs();
  std::vector<KeyState> states = readKeyStatesOfAnyType(run, keys);
  snapshot.read_ended_ms = unixTimeMs();
  for (size_t i = 0; i < keys.size(); ++i) {
    if (states[i].type == "none") {
      ++snapshot.vanished;
    } else {
      snapshot.keys[keys[i]] = std::move(states[i]);
    }
  }
  return snapshot;
}

KeySpaceSnapshot snapshotKeySpace(RespClient& client, int db) {
  client.select(db);
  std::vector<std::string> keys;
  std::string cursor = "0";
  for (int calls = 0;; ++calls) {
    if (calls >= kMaxScanCalls) {
      throw std::runtime_error(
          "snapshotKeySpace: SCAN of 127.0.0.1:" + std::to_string(client.port()) +
          " did not end after " + std::to_string(kMaxScanCalls) + " calls");
    }
    RespValue reply = client.command({"SCAN", cursor, "COUNT", std::to_string(kScanCount)});
    if (!reply.isArray() || reply.array().size() != 2 || !reply.array()[1].isArray()) {
      throw std::runtime_error("snapshotKeySpace: SCAN answered " + reply.toString());
    }
    for (const auto& key : reply.array()[1].array()) {
      if (!isAgentMarkerKey(key.str())) {
        keys.push_back(key.str());
      }
    }
    cursor = reply.array()[0].str();
    if (cursor == "0") {
      break;
    }
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());  // SCAN may repeat a key
  return snapshotKeys(
      [&client](const std::vector<RespCommand>& commands) { return client.pipeline(commands); },
      keys);
}

KeyCheckReport compareKeySpaces(const KeySpaceSnapshot& source, const KeySpaceSnapshot& target,
                                const KeySpaceCompareOptions& options) {
  KeyCheckReport report;
  const KeyState absent{"none", -2, ""};
  auto included = [&](const std::string& key) { return !options.include || options.include(key); };
  for (const auto& [key, state] : source.keys) {
    if (!included(key)) {
      continue;
    }
    // The source deadline as rule 4 takes it: 0 = none.
    const int64_t e = state.pexpiretime > 0 ? state.pexpiretime : 0;
    ExpectedKey expected =
        options.max_ttl_ms == 0
            ? replicatedKey(state, e, 0, 0, 0, options.deadline_tolerance_ms)
            : replicatedKey(state, e, options.max_ttl_ms, options.write_lo_ms, options.write_hi_ms,
                            options.deadline_tolerance_ms,
                            "maxTTL " + std::to_string(options.max_ttl_ms) + " ms");
    auto it = target.keys.find(key);
    KeyState actual = it == target.keys.end() ? absent : it->second;
    if (!options.stream_node_local) {
      if (expected.type == "stream") {
        expected.contents = withoutNodeLocalFields(expected.contents);
      }
      if (actual.type == "stream") {
        actual.contents = withoutNodeLocalFields(actual.contents);
      }
    }
    checkOne(escapeBytes(key), expected, actual, target.read_ended_ms, options.max_details,
             &report);
  }
  for (const auto& [key, state] : target.keys) {
    if (included(key) && source.keys.count(key) == 0) {
      checkOne(escapeBytes(key), absentKey("not in the source"), state, target.read_ended_ms,
               options.max_details, &report);
    }
  }
  return report;
}

}  // namespace xdcr::test
