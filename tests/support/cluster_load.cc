#include "tests/support/cluster_load.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "common/cluster_slot.h"
#include "tests/support/wait.h"

namespace xdcr::test {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxErrors = 20;
constexpr size_t kVerifyBatch = 1000;
// Fields per hash key: HSET picks one of them, so some HSETs add a field and some update one.
constexpr uint64_t kHashFields = 8;
// Keys in the focus slots, per kind: a few per slot.
constexpr int kFocusKeysPerSlot = 2;

/** splitmix64: small, deterministic, good enough for choosing operations. */
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t x = (state_ += 0x9e3779b97f4a7c15ULL);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
  }
  uint64_t below(uint64_t n) { return n == 0 ? 0 : next() % n; }
  bool chance(double p) { return static_cast<double>(below(1000000)) < p * 1000000.0; }

 private:
  uint64_t state_;
};

bool isInteger(const RespValue& reply, int64_t value) {
  return reply.isInteger() && reply.integer() == value;
}

}  // namespace

std::string ClusterLoadStats::summary() const {
  std::ostringstream out;
  out << ops << " ops in " << elapsed.count() << " ms: " << ok << " ok, " << failed << " failed, "
      << uncertain << " uncertain, " << unexpected_replies << " unexpected replies (" << strings
      << " SET, " << hashes << " HSET+EXPIRE, " << counters << " INCR, " << transactions
      << " MULTI, " << expiry_ops << " EXPIRE/PERSIST/DEL); went through " << redirects.moved
      << " MOVED, " << redirects.ask << " ASK, " << redirects.tryagain << " TRYAGAIN, "
      << redirects.clusterdown << " CLUSTERDOWN, " << redirects.io_errors << " lost connections";
  for (const auto& e : errors) {
    out << "\n  " << e;
  }
  return out.str();
}

std::string LoadVerifyReport::summary() const {
  std::ostringstream out;
  out << checked << " keys checked, " << mismatched << " differ from the load's model, " << skipped
      << " skipped (touched by a failed or uncertain operation)";
  for (const auto& d : details) {
    out << "\n  " << d;
  }
  return out.str();
}

ClusterLoad::ClusterLoad(std::vector<std::string> seeds, ClusterLoadOptions options)
    : seeds_(std::move(seeds)), options_(std::move(options)) {
  if (options_.keys_per_kind <= 0 || options_.max_ops < 0) {
    throw std::invalid_argument("ClusterLoad: keys_per_kind and max_ops must be positive");
  }
  if (options_.focus_slots &&
      (options_.focus_slots->first < 0 || options_.focus_slots->second >= cluster::kSlots ||
       options_.focus_slots->first > options_.focus_slots->second)) {
    throw std::invalid_argument("ClusterLoad: bad focus slot range");
  }
}

ClusterLoad::~ClusterLoad() {
  stop();
}

void ClusterLoad::start() {
  if (thread_.joinable()) {
    throw std::logic_error("ClusterLoad::start: already started");
  }
  thread_ = std::thread([this] { run(); });
}

ClusterLoadStats ClusterLoad::stop() {
  stop_requested_ = true;
  if (thread_.joinable()) {
    thread_.join();
  }
  return stats();
}

ClusterLoadStats ClusterLoad::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

bool ClusterLoad::waitForOps(int64_t ops, std::chrono::milliseconds timeout) const {
  waitUntil(
      [&] {
        ClusterLoadStats s = stats();
        return s.ops >= ops || s.finished;
      },
      timeout, std::chrono::milliseconds(10));
  return stats().ops >= ops;
}

size_t ClusterLoad::modelSize() const {
  return model_.size();
}

std::string ClusterLoad::keyName(KeyKind kind, int index) const {
  static constexpr const char* kLetters[] = {"s", "h", "c", "t"};
  const int k = static_cast<int>(kind);
  int slot = 0;
  if (index < options_.keys_per_kind) {
    // Evenly over all slots; each kind shifted a little so the kinds do not share slots.
    slot = static_cast<int>(
        (static_cast<int64_t>(index) * cluster::kSlots / options_.keys_per_kind + k * 7) %
        cluster::kSlots);
  } else {
    const int width = options_.focus_slots->second - options_.focus_slots->first + 1;
    slot = options_.focus_slots->first + (index - options_.keys_per_kind + k) % width;
  }
  return options_.prefix + ":" + kLetters[k] + ":{" + std::string(cluster::slotTag(slot)) +
         "}:" + std::to_string(index);
}

void ClusterLoad::finish(const std::string& what, bool answered_ok, bool unexpected,
                         const CommandTrace& trace, const std::vector<std::string>& doubt,
                         const std::string& error) {
  const bool uncertain = answered_ok && trace.io_errors > 0;
  if (!answered_ok || uncertain) {
    for (const auto& key : doubt) {
      model_[key].certain = false;
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.ops;
  if (!answered_ok) {
    ++stats_.failed;
  } else if (uncertain) {
    ++stats_.uncertain;
  } else {
    ++stats_.ok;
  }
  if (unexpected) {
    ++stats_.unexpected_replies;
  }
  stats_.redirects += trace;
  if ((!answered_ok || unexpected) && stats_.errors.size() < kMaxErrors) {
    stats_.errors.push_back(what + ": " + error);
  }
}

void ClusterLoad::run() {
  const auto started = Clock::now();
  auto end = [&] {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
    stats_.finished = true;
  };
  std::optional<ClusterClient> client;
  try {
    client.emplace(seeds_, options_.client);
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.errors.push_back(std::string("no client: ") + e.what());
    stats_.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
    stats_.finished = true;
    return;
  }
  Rng rng(options_.seed);
  const int focus_keys =
      options_.focus_slots
          ? (options_.focus_slots->second - options_.focus_slots->first + 1) * kFocusKeysPerSlot
          : 0;
  auto pickIndex = [&] {
    if (focus_keys > 0 && rng.chance(options_.focus_share)) {
      return options_.keys_per_kind + static_cast<int>(rng.below(focus_keys));
    }
    return static_cast<int>(rng.below(options_.keys_per_kind));
  };
  auto entry = [&](const std::string& key) -> Expected& {
    auto [it, inserted] = model_.try_emplace(key);
    if (inserted) {
      written_.push_back(key);
    }
    return it->second;
  };
  const std::string ttl = std::to_string(options_.ttl_s);
  auto set = [&](const std::string& key, int64_t op) {
    const std::string value = "v" + std::to_string(op);
    Expected& e = entry(key);
    RespValue reply;
    std::string error;
    CommandTrace trace;
    try {
      reply = client->command({"SET", key, value, "EX", ttl});
      trace = client->lastTrace();
    } catch (const std::exception& ex) {
      error = ex.what();
      trace = client->lastTrace();
    }
    const bool ok = error.empty() && reply.toString() == "OK";
    if (ok) {
      // SET ... EX defines the whole state and is idempotent: sure even after a retry.
      e = Expected{Expected::Kind::String, value, {}, 0, true, true};
    }
    finish("SET " + key, ok, false, trace, ok ? std::vector<std::string>{} : std::vector{key},
           error.empty() ? reply.toString() : error);
  };

  for (int64_t op = 0; op < options_.max_ops; ++op) {
    if (stop_requested_ || Clock::now() - started >= options_.max_duration) {
      break;
    }
    const uint64_t choice = rng.below(100);
    if (choice < 30) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++stats_.strings;
      }
      set(keyName(KeyKind::String, pickIndex()), op);
    } else if (choice < 50) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++stats_.hashes;
      }
      const std::string key = keyName(KeyKind::Hash, pickIndex());
      const std::string field = "f" + std::to_string(rng.below(kHashFields));
      const std::string value = "x" + std::to_string(op);
      Expected& e = entry(key);
      const bool was_certain = e.certain;
      const int64_t expect_new =
          e.kind == Expected::Kind::Hash && e.fields.count(field) != 0 ? 0 : 1;
      RespValue r1;
      RespValue r2;
      std::string error;
      CommandTrace trace;
      try {
        r1 = client->command({"HSET", key, field, value});
        trace = client->lastTrace();
        r2 = client->command({"EXPIRE", key, ttl});
        trace += client->lastTrace();
      } catch (const std::exception& ex) {
        error = ex.what();
        trace += client->lastTrace();
      }
      const bool ok = error.empty() && r1.isInteger() && isInteger(r2, 1);
      const bool unexpected =
          ok && was_certain && trace.io_errors == 0 && r1.integer() != expect_new;
      if (ok) {
        if (e.kind != Expected::Kind::Hash) {
          e.fields.clear();
        }
        e.kind = Expected::Kind::Hash;
        e.fields[field] = value;
        e.has_deadline = true;
      }
      finish("HSET+EXPIRE " + key, ok, unexpected, trace, {key},
             error.empty()
                 ? r1.toString() + " " + r2.toString() +
                       (unexpected ? " (expected " + std::to_string(expect_new) + ")" : "")
                 : error);
    } else if (choice < 65) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++stats_.counters;
      }
      const std::string key = keyName(KeyKind::Counter, pickIndex());
      Expected& e = entry(key);
      const bool was_certain = e.certain;
      const int64_t expect = (e.kind == Expected::Kind::Counter ? e.counter : 0) + 1;
      RespValue reply;
      std::string error;
      CommandTrace trace;
      try {
        reply = client->command({"INCR", key});
        trace = client->lastTrace();
      } catch (const std::exception& ex) {
        error = ex.what();
        trace = client->lastTrace();
      }
      const bool ok = error.empty() && reply.isInteger();
      const bool unexpected =
          ok && was_certain && trace.io_errors == 0 && reply.integer() != expect;
      if (ok) {
        if (e.kind != Expected::Kind::Counter) {
          e.has_deadline = false;  // INCR creates a key without a deadline
        }
        e.kind = Expected::Kind::Counter;
        e.counter = reply.integer();
      }
      finish("INCR " + key, ok, unexpected, trace, {key},
             error.empty() ? reply.toString() +
                                 (unexpected ? " (expected " + std::to_string(expect) + ")" : "")
                           : error);
    } else if (choice < 80) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++stats_.transactions;
      }
      const std::string base = keyName(KeyKind::Tag, pickIndex());
      const std::string a = base + ":a";
      const std::string b = base + ":b";
      const std::string value = "m" + std::to_string(op);
      Expected& ea = entry(a);
      Expected& eb = entry(b);
      const bool was_certain = eb.certain;
      const int64_t expect = (eb.kind == Expected::Kind::Counter ? eb.counter : 0) + 1;
      RespValue reply;
      std::string error;
      CommandTrace trace;
      try {
        const std::vector<RespCommand> unit = {{"SET", a, value, "EX", ttl}, {"INCR", b}};
        reply = client->transaction(unit);
        trace = client->lastTrace();
      } catch (const std::exception& ex) {
        error = ex.what();
        trace = client->lastTrace();
      }
      const bool ok = error.empty() && reply.isArray() && reply.array().size() == 2 &&
                      reply.array()[0].toString() == "OK" && reply.array()[1].isInteger();
      const bool unexpected =
          ok && was_certain && trace.io_errors == 0 && reply.array()[1].integer() != expect;
      if (ok) {
        ea = Expected{Expected::Kind::String, value, {}, 0, true, ea.certain};
        if (eb.kind != Expected::Kind::Counter) {
          eb.has_deadline = false;
        }
        eb.kind = Expected::Kind::Counter;
        eb.counter = reply.array()[1].integer();
      }
      finish("MULTI " + base, ok, unexpected, trace, {a, b},
             error.empty() ? reply.toString() : error);
    } else {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++stats_.expiry_ops;
      }
      if (written_.empty()) {
        set(keyName(KeyKind::String, pickIndex()), op);
        continue;
      }
      const std::string key = written_[rng.below(written_.size())];
      Expected& e = model_[key];
      const bool was_certain = e.certain;
      const bool present = e.kind != Expected::Kind::Absent;
      const uint64_t which = rng.below(3);
      RespCommand command;
      int64_t expect = 0;
      if (which == 0) {
        command = {"EXPIRE", key, ttl};
        expect = present ? 1 : 0;
      } else if (which == 1) {
        command = {"PERSIST", key};
        expect = present && e.has_deadline ? 1 : 0;
      } else {
        command = {"DEL", key};
        expect = present ? 1 : 0;
      }
      RespValue reply;
      std::string error;
      CommandTrace trace;
      try {
        reply = client->command(command);
        trace = client->lastTrace();
      } catch (const std::exception& ex) {
        error = ex.what();
        trace = client->lastTrace();
      }
      const bool ok = error.empty() && reply.isInteger();
      const bool unexpected =
          ok && was_certain && trace.io_errors == 0 && reply.integer() != expect;
      if (ok) {
        if (which == 0) {
          e.has_deadline = e.has_deadline || present;
        } else if (which == 1) {
          e.has_deadline = false;
        } else {
          e = Expected{};
        }
      }
      // DEL defines the whole state and is idempotent: the model stays sure after a retry.
      const bool sure = ok && which == 2;
      finish(command[0] + " " + key, ok, unexpected, trace,
             sure ? std::vector<std::string>{} : std::vector{key},
             error.empty() ? reply.toString() +
                                 (unexpected ? " (expected " + std::to_string(expect) + ")" : "")
                           : error);
    }
    if (options_.pause.count() > 0) {
      std::this_thread::sleep_for(options_.pause);
    }
  }
  end();
}

LoadVerifyReport ClusterLoad::verify(ClusterClient& reader, size_t max_details) const {
  if (thread_.joinable()) {
    throw std::logic_error("ClusterLoad::verify: stop() the load first");
  }
  LoadVerifyReport report;
  std::vector<const std::pair<const std::string, Expected>*> entries;
  for (const auto& item : model_) {
    if (item.second.certain) {
      entries.push_back(&item);
    } else {
      ++report.skipped;
    }
  }
  for (size_t begin = 0; begin < entries.size(); begin += kVerifyBatch) {
    const size_t end = std::min(entries.size(), begin + kVerifyBatch);
    std::vector<RespCommand> commands;
    for (size_t i = begin; i < end; ++i) {
      const std::string& key = entries[i]->first;
      commands.push_back({"TYPE", key});
      commands.push_back({"PEXPIRETIME", key});
      commands.push_back(entries[i]->second.kind == Expected::Kind::Hash
                             ? RespCommand{"HGETALL", key}
                             : RespCommand{"GET", key});
    }
    const std::vector<RespValue> replies = reader.pipeline(commands);
    for (size_t i = begin; i < end; ++i) {
      const std::string& key = entries[i]->first;
      const Expected& e = entries[i]->second;
      const RespValue& type = replies[3 * (i - begin)];
      const RespValue& deadline = replies[3 * (i - begin) + 1];
      const RespValue& value = replies[3 * (i - begin) + 2];
      ++report.checked;
      std::string problem;
      const std::string type_text = type.isError() ? type.toString() : type.str();
      if (e.kind == Expected::Kind::Absent) {
        if (type_text != "none") {
          problem = "present (" + type_text + "), expected absent";
        }
      } else {
        const std::string want_type = e.kind == Expected::Kind::Hash ? "hash" : "string";
        std::string want;
        std::string got;
        if (e.kind == Expected::Kind::Hash) {
          for (const auto& [f, v] : e.fields) {
            want.append(f).append("=").append(v).append(" ");
          }
          std::map<std::string, std::string> fields;
          if (value.isArray()) {
            for (size_t j = 0; j + 1 < value.array().size(); j += 2) {
              fields[value.array()[j].str()] = value.array()[j + 1].str();
            }
          }
          for (const auto& [f, v] : fields) {
            got.append(f).append("=").append(v).append(" ");
          }
        } else {
          want = e.kind == Expected::Kind::String ? e.value : std::to_string(e.counter);
          got = value.type() == RespValue::Type::Bulk ? value.str() : value.toString();
        }
        if (type_text != want_type) {
          problem = "type " + type_text;
          problem.append(", expected ").append(want_type);
        } else if (got != want) {
          problem = "holds " + got;
          problem.append(", expected ").append(want);
        }
        const bool has_deadline = deadline.isInteger() && deadline.integer() > 0;
        if (problem.empty() && has_deadline != e.has_deadline) {
          problem = std::string(e.has_deadline ? "no deadline, expected one"
                                               : "a deadline, expected none");
        }
      }
      if (!problem.empty()) {
        ++report.mismatched;
        if (report.details.size() < max_details) {
          report.details.push_back(key + ": ");
          report.details.back() += problem;
        }
      }
    }
  }
  return report;
}

}  // namespace xdcr::test
