// The server matrix (issue 16): the agent between real Redis and Valkey servers of the versions
// scripts/servers.sh provides (Redis 7.0 and Valkey 8.0 from bookworm(-backports), Redis 8.0 and
// Valkey 8.1 from trixie, a later Redis 8.0 and Valkey 9 from sid). For each source/target pair:
// a snapshot of every type and encoding (half the keys with deadlines), then the same again
// through the stream plus in-place changes of the snapshot's keys; the target must equal the
// source key by key (type, contents, deadline) and `xdcr-agent verify` must be clean.
//
// Without the servers (a developer machine that did not run `scripts/servers.sh provision`) the
// tests skip; with XDCR_MATRIX_REQUIRED=1 (scripts/test.sh, after provisioning) they fail.

#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "replicator/admin_server.h"
#include "tests/support/faketime.h"
#include "tests/support/harness.h"
#include "tests/support/server_matrix.h"

namespace xdcr::test {
namespace {

using namespace std::chrono_literals;

using Pair = ServerPair;

std::string pairName(const ::testing::TestParamInfo<Pair>& info) {
  return serverPairName(info.param);
}

void report(const std::string& line) {
  std::cout << "[ matrix   ] " << line << std::endl;
}

class MatrixTest : public ::testing::TestWithParam<Pair> {
 protected:
  void SetUp() override {
    std::string why;
    source_kind_ = findMatrixServer(GetParam().source, &why);
    if (source_kind_) target_kind_ = findMatrixServer(GetParam().target, &why);
    if (!source_kind_ || !target_kind_) {
      if (matrixRequired()) FAIL() << why;
      GTEST_SKIP() << why;
    }
    source_ = RedisServer::startBinary(source_kind_->binary, {"--repl-diskless-sync-delay", "0"});
    target_ = RedisServer::startBinary(target_kind_->binary);
  }
  void TearDown() override {
    if (HasFailure() && agent_) {
      std::cerr << "---- agent (log tail)\n" << agent_->logTail(60) << "\n";
    }
    agent_.reset();
  }

  /** `pipeline_extra` and `target_extra`: more keys of the pipeline's and the target's flow
   *  maps, e.g. "filters: {...}". */
  void startAgent(const std::string& pipeline_extra = "", const std::string& target_extra = "") {
    admin_ = "127.0.0.1:" + std::to_string(freePort());
    config_ = dir_.file("xdcr.yaml");
    std::string y = "agent: {state_dir: \"" + dir_.file("state") + "\", admin_listen: \"" + admin_ +
                    "\"}\n" + clock_yaml_ + "clusters:\n";
    y += "  src: {type: redis, address: \"" + source_->address() + "\"}\n";
    y += "  dst: {type: redis, address: \"" + target_->address() + "\"";
    y += (target_extra.empty() ? "" : ", " + target_extra) + "}\n";
    y += "pipelines:\n  - {name: p, source: src, target: dst, checkpoint_interval: 1s";
    y += (pipeline_extra.empty() ? "" : ", " + pipeline_extra) + "}\n";
    writeFileText(config_, y);
    agent_ = std::make_unique<AgentProcess>(config_, dir_.file("agent.log"));
    const bool ready = waitUntil(
        [&] {
          auto r = replicator::adminGet(admin_, "/readyz", 2s);
          return r && r->first == 200;
        },
        60s);
    ASSERT_TRUE(ready) << "the agent did not stream within 60 s\n" << agent_->logTail(40);
  }

  /** Until the target's key space equals the source's as read now (`diff`: the last
   *  comparison), at most `timeout`. */
  bool awaitTargetEqual(std::chrono::milliseconds timeout, std::chrono::milliseconds poll,
                        KeyCheckReport& diff, size_t* source_keys = nullptr) {
    RespClient src = source_->client();
    RespClient dst = target_->client();
    const KeySpaceSnapshot want = snapshotKeySpace(src);
    if (source_keys != nullptr) *source_keys = want.keys.size();
    return waitUntil(
        [&] {
          diff = compareKeySpaces(want, snapshotKeySpace(dst));
          return diff.ok();
        },
        timeout, poll);
  }

  std::string what() const {
    return source_kind_->name + " " + source_kind_->version + " -> " + target_kind_->name + " " +
           target_kind_->version;
  }

  std::optional<MatrixServer> source_kind_, target_kind_;
  TempDir dir_{"xdcr-matrix"};
  std::unique_ptr<RedisServer> source_, target_;
  std::string admin_, config_;
  std::unique_ptr<AgentProcess> agent_;
  std::string clock_yaml_;  // a top-level "clock:" section, or ""
};

double metricValue(const std::string& metrics, const std::string& family, const std::string& label);

DatasetOptions datasetOptions(const std::string& tag, uint64_t seed) {
  DatasetOptions o;
  o.keys = 340;  // 20 of each kind
  o.tag = tag;
  o.seed = seed;
  o.deadline_fraction = 0.5;
  return o;
}

/** Hashes with field TTLs on an HFE source (Redis 7.4+, Valkey 9): a listpack one, one whose
 *  TTL was removed again, a hashtable one with a key deadline. Returns how many fields have a
 *  deadline. `prefix` names the keys. */
size_t writeFieldTtlHashes(RespClient& src, const std::string& prefix) {
  const std::string far = std::to_string(unixTimeMs() + 3'600'000);
  src.command({"HSET", prefix + "lp", "a", "1", "b", "2", "c", "3"});
  src.command({"HPEXPIREAT", prefix + "lp", far, "FIELDS", "2", "a", "b"});
  src.command({"HSET", prefix + "persisted", "x", "1", "y", "2"});
  src.command({"HPEXPIRE", prefix + "persisted", "600000", "FIELDS", "1", "x"});
  src.command({"HPERSIST", prefix + "persisted", "FIELDS", "1", "x"});
  RespCommand big = {"HSET", prefix + "big"};
  for (int i = 0; i < 600; ++i) {
    big.push_back("f" + std::to_string(i));
    big.push_back("v" + std::to_string(i));
  }
  src.command(big);
  src.command({"HPEXPIREAT", prefix + "big", far, "FIELDS", "3", "f1", "f2", "f599"});
  src.command({"HPEXPIRE", prefix + "big", "900000", "FIELDS", "1", "f7"});
  src.command({"PEXPIRE", prefix + "big", "7200000"});
  return 6;
}

/** HPEXPIRETIME of `fields` of `key` (-1: none, -2: no field; all -3 when the server has no
 *  field TTLs). */
std::vector<int64_t> fieldDeadlines(RespClient& c, const std::string& key,
                                    const std::vector<std::string>& fields) {
  RespCommand cmd = {"HPEXPIRETIME", key, "FIELDS", std::to_string(fields.size())};
  cmd.insert(cmd.end(), fields.begin(), fields.end());
  const RespValue r = c.command(cmd);
  std::vector<int64_t> out(fields.size(), -3);
  if (!r.isArray()) return out;
  for (size_t i = 0; i < fields.size() && i < r.array().size(); ++i) {
    out[i] = r.array()[i].integer();
  }
  return out;
}

const std::vector<std::pair<std::string, std::vector<std::string>>>& fieldTtlFields() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> f = {
      {"lp", {"a", "b", "c"}},
      {"persisted", {"x", "y"}},
      {"big", {"f0", "f1", "f2", "f7", "f599"}}};
  return f;
}

bool hasFieldTtls(const MatrixServer& s) {
  return s.valkey ? s.name == "valkey-9" : s.name != "redis-7.0";
}

TEST_P(MatrixTest, SnapshotAndStreamOfEveryTypeArriveEqual) {
  const Dataset snapshot = writeDataset(source_->port(), datasetOptions("a", 1));
  // Where both sides have hash-field TTLs: hashes with them in the snapshot and the stream too.
  const bool field_ttls = hasFieldTtls(*source_kind_) && hasFieldTtls(*target_kind_);
  if (field_ttls) {
    RespClient src = source_->client();
    writeFieldTtlHashes(src, "hf:");
  }
  startAgent();
  if (HasFatalFailure()) return;
  // Through the stream: the same kinds again, and in-place changes of snapshot keys.
  const Dataset streamed = writeDataset(source_->port(), datasetOptions("b", 2));
  {
    RespClient src = source_->client();
    if (field_ttls) {
      const std::string at = std::to_string(unixTimeMs() + 3'600'000);
      src.command({"HSETEX", "hs:1", "PXAT", at, "FIELDS", "2", "a", "1", "b", "2"});
      src.command({"HSET", "hs:2", "a", "1", "b", "2"});
      src.command({"HPEXPIREAT", "hs:2", at, "FIELDS", "1", "a"});
    }
    size_t i = 0;
    for (const DatasetKey* k : snapshot.live()) {
      switch (i++ % 4) {
        case 0:
          src.command({"PEXPIRE", k->key, "3600000"});
          break;
        case 1:
          src.command({"PERSIST", k->key});
          break;
        case 2:
          if (k->kind == ValueKind::StringInt) src.command({"INCRBY", k->key, "7"});
          if (k->kind == ValueKind::HashSmall) src.command({"HINCRBYFLOAT", k->key, "n", "1.5"});
          break;
        default:
          break;
      }
    }
  }
  KeyCheckReport diff;
  size_t source_keys = 0;
  const bool equal = awaitTargetEqual(60s, 500ms, diff, &source_keys);
  auto m = replicator::adminGet(admin_, "/metrics", 2s);
  ASSERT_TRUE(m && m->first == 200);
  const auto rebuilt =
      static_cast<int>(metricValue(m->second, "xdcr_snapshot_keys_total", "result=\"rebuilt\""));
  const auto restored =
      static_cast<int>(metricValue(m->second, "xdcr_snapshot_keys_total", "result=\"restored\""));
  report(what() + ": " + std::to_string(source_keys) + " source keys (" +
         std::to_string(snapshot.keys.size()) + " in the snapshot: " + std::to_string(restored) +
         " RESTOREd, " + std::to_string(rebuilt) + " written as commands; " +
         std::to_string(streamed.keys.size()) + " streamed): " + diff.summary());
  EXPECT_EQ(restored + rebuilt, static_cast<int>(snapshot.live().size()) + (field_ttls ? 3 : 0));
  if (field_ttls) {
    RespClient src = source_->client();
    RespClient dst = target_->client();
    for (const auto& [key, fields] : fieldTtlFields()) {
      EXPECT_EQ(fieldDeadlines(dst, "hf:" + key, fields), fieldDeadlines(src, "hf:" + key, fields))
          << key;
    }
    EXPECT_EQ(fieldDeadlines(dst, "hs:2", {"a", "b"}), fieldDeadlines(src, "hs:2", {"a", "b"}));
  }
  EXPECT_TRUE(equal) << what() << "\n" << diff.summary();
  EXPECT_GE(source_keys, 600u) << "the data sets were not written";

  const AgentCommandResult v = runAgentCommand(
      {"verify", "-c", config_, "-p", "p", "-o", "json", "--rechecks", "2", "--rate", "0"},
      dir_.file("verify.out"));
  ASSERT_TRUE(v.report.is_object()) << v.output;
  report(what() + ": xdcr-agent verify: exit " + std::to_string(v.exit_code) + ", " +
         std::to_string(v.report.value("checked", -1)) + " checked, " +
         std::to_string(v.report.value("missing", -1)) + " missing, " +
         std::to_string(v.report.value("value_mismatches", -1)) + " value and " +
         std::to_string(v.report.value("ttl_mismatches", -1)) + " deadline and " +
         std::to_string(v.report.value("field_ttl_mismatches", -1)) + " field deadline mismatches" +
         (field_ttls ? " (hash-field TTLs included)" : ""));
  EXPECT_EQ(v.exit_code, 0) << v.output;
  EXPECT_EQ(v.report.value("field_ttl_mismatches", -1), 0) << v.output;
  EXPECT_EQ(v.report.value("missing", -1), 0) << v.output;
  EXPECT_EQ(v.report.value("value_mismatches", -1), 0) << v.output;
  EXPECT_EQ(v.report.value("ttl_mismatches", -1), 0) << v.output;
}

// Valkey 8.1+'s compare-and-set: `SET k new IFEQ <old>` is propagated verbatim, and <old> is data.
// Here the old values are words that are also SET options (server-versions-notes.md §3.6): read
// as KEEPTTL, the target kept a deadline the source had dropped.
class CompareAndSetTest : public MatrixTest {};

TEST_P(CompareAndSetTest, ComparisonValuesAreNotReadAsOptions) {
  startAgent();
  if (HasFatalFailure()) return;
  RespClient src = source_->client();
  for (const std::string& old : {std::string("KEEPTTL"), std::string("PX"), std::string("EXAT")}) {
    const std::string key = "cas:" + old;
    ASSERT_EQ(src.command({"SET", key, old, "EX", "1000"}).str(), "OK");
    // Takes effect (the value is `old`), drops the deadline: the source propagates it as is.
    ASSERT_EQ(src.command({"SET", key, "new", "IFEQ", old}).str(), "OK");
  }
  ASSERT_EQ(src.command({"SET", "cas:keep", "v1", "EX", "1000"}).str(), "OK");
  ASSERT_EQ(src.command({"SET", "cas:keep", "v2", "IFEQ", "v1", "KEEPTTL"}).str(), "OK");
  RespClient dst = target_->client();
  KeyCheckReport diff;
  size_t source_keys = 0;
  const bool equal = awaitTargetEqual(20s, 200ms, diff, &source_keys);
  report(what() + ": SET ... IFEQ: " + diff.summary());
  EXPECT_TRUE(equal) << diff.summary() << "\n" << agent_->logTail(20);
  EXPECT_EQ(source_keys, 4u);
  EXPECT_EQ(dst.command({"PEXPIRETIME", "cas:KEEPTTL"}).integer(), -1);
  EXPECT_GT(dst.command({"PEXPIRETIME", "cas:keep"}).integer(), 0);
}

INSTANTIATE_TEST_SUITE_P(Servers, CompareAndSetTest,
                         ::testing::Values(Pair{"valkey-8.1", "valkey-8.1"},
                                           Pair{"valkey-9", "valkey-9"}),
                         pairName);

// Redis 7.4+ writes a hash with a field TTL as RDB type 25 (listpack) or 24 (hashtable); the walker
// did not know them, so one such hash failed every full sync, forever (server-versions-notes.md
// §3.1). Now they are walked and RESTOREd with their field TTLs, which travel inside the payload
// as the source had them (absolute; vector H-1). Valkey 9 sends such a hash only in its RDB 80
// (VALKEY080, HASH_2), which the agent asks for; to a version-less replica it aborted the whole
// snapshot (§3.2). Valkey 9 into Redis 8: HASH_2 is rebuilt from commands, deadlines included.
class HashFieldTtlSnapshotTest : public MatrixTest {};

TEST_P(HashFieldTtlSnapshotTest, HashesWithFieldTtlsAreCopiedWithThem) {
  RespClient src = source_->client();
  const std::string far = std::to_string(unixTimeMs() + 3'600'000);
  // listpack (type 25): two of three fields with a TTL; one whose TTL was removed again.
  ASSERT_EQ(src.command({"HSET", "hf:lp", "a", "1", "b", "2", "c", "3"}).integer(), 3);
  src.command({"HPEXPIREAT", "hf:lp", far, "FIELDS", "2", "a", "b"});
  src.command({"HSET", "hf:persisted", "x", "1", "y", "2"});
  src.command({"HPEXPIRE", "hf:persisted", "600000", "FIELDS", "1", "x"});
  src.command({"HPERSIST", "hf:persisted", "FIELDS", "1", "x"});
  // hashtable (type 24): more fields than hash-max-listpack-entries, a few with TTLs, and a key
  // deadline on top.
  RespCommand big = {"HSET", "hf:big"};
  for (int i = 0; i < 600; ++i) {
    big.push_back("f" + std::to_string(i));
    big.push_back("v" + std::to_string(i));
  }
  ASSERT_EQ(src.command(big).integer(), 600);
  src.command({"HPEXPIREAT", "hf:big", far, "FIELDS", "3", "f1", "f2", "f599"});
  src.command({"HPEXPIRE", "hf:big", "900000", "FIELDS", "1", "f7"});
  src.command({"PEXPIRE", "hf:big", "7200000"});
  const std::string encoding = src.command({"OBJECT", "ENCODING", "hf:big"}).str();
  startAgent();
  if (HasFatalFailure()) return;
  RespClient dst = target_->client();
  KeyCheckReport diff;
  const bool equal = awaitTargetEqual(20s, 200ms, diff);
  EXPECT_TRUE(equal) << diff.summary();
  // Every field's deadline, as the source has it.
  size_t with_ttl = 0;
  for (const auto& [key, fields] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"hf:lp", {"a", "b", "c"}},
           {"hf:persisted", {"x", "y"}},
           {"hf:big", {"f0", "f1", "f2", "f7", "f599"}}}) {
    RespCommand cmd = {"HPEXPIRETIME", key, "FIELDS", std::to_string(fields.size())};
    cmd.insert(cmd.end(), fields.begin(), fields.end());
    const RespValue s = src.command(cmd);
    const RespValue t = dst.command(cmd);
    ASSERT_TRUE(s.isArray() && t.isArray()) << key << ": " << t.toString();
    ASSERT_EQ(s.array().size(), t.array().size());
    for (size_t i = 0; i < fields.size(); ++i) {
      EXPECT_EQ(t.array()[i].integer(), s.array()[i].integer()) << key << " " << fields[i];
      with_ttl += s.array()[i].integer() > 0 ? 1 : 0;
    }
  }
  EXPECT_EQ(with_ttl, 6u);
  report(what() + ": hashes with field TTLs through a full sync (hf:big " + encoding +
         "): " + diff.summary() + "; " + std::to_string(with_ttl) + " field deadlines equal");
}

INSTANTIATE_TEST_SUITE_P(Servers, HashFieldTtlSnapshotTest,
                         ::testing::Values(Pair{"redis-8.0", "redis-8.0"},
                                           Pair{"redis-8", "redis-8"}, Pair{"redis-8.0", "redis-8"},
                                           Pair{"valkey-9", "valkey-9"}),
                         pairName);

// Hash-field commands in the stream (HSETEX, HPEXPIREAT, HPERSIST; Redis 8.0.4+ also sends every
// HINCRBYFLOAT as HSETEX ... KEEPTTL) were unknown commands: forwarded verbatim, past
// exclude_keys, without key_rewrite and without the target's clamp (server-versions-notes.md
// §3.4, §3.5). They follow the key rules now.
class HashFieldStreamTest : public MatrixTest {};

TEST_P(HashFieldStreamTest, HashFieldCommandsFollowTheKeyRules) {
  startAgent(
      R"(filters: {exclude_keys: ["^secret:"]}, key_rewrite: [{from: "sess:", to: "eu:sess:"}])",
      "buckets: [{db: 0, max_ttl: 10m}]");
  if (HasFatalFailure()) return;
  RespClient src = source_->client();
  ASSERT_FALSE(src.command({"HSETEX", "secret:2", "FIELDS", "1", "pw", "hunter2"}).isError());
  ASSERT_FALSE(src.command({"HSET", "secret:3", "n", "1"}).isError());
  ASSERT_FALSE(src.command({"HINCRBYFLOAT", "secret:3", "n", "0.5"}).isError());
  ASSERT_FALSE(src.command({"HSETEX", "sess:2", "FIELDS", "1", "a", "1"}).isError());
  ASSERT_FALSE(src.command({"HSET", "sess:3", "a", "1", "b", "2"}).isError());
  ASSERT_FALSE(src.command({"HEXPIRE", "sess:3", "300", "FIELDS", "1", "a"}).isError());
  ASSERT_FALSE(src.command({"HSET", "sess:4", "a", "1", "b", "2"}).isError());
  ASSERT_FALSE(src.command({"HPEXPIRE", "sess:4", "300000", "FIELDS", "1", "b"}).isError());
  ASSERT_FALSE(src.command({"HPERSIST", "sess:4", "FIELDS", "1", "b"}).isError());
  ASSERT_FALSE(src.command({"SET", "done", "1"}).isError());
  RespClient dst = target_->client();
  ASSERT_TRUE(waitUntil(
      [&] {
        return dst.command({"EXISTS", "done"}).integer() == 1;
      },
      20s))
      << agent_->logTail(20);
  const int64_t now = unixTimeMs();
  EXPECT_EQ(dst.command({"EXISTS", "secret:2", "secret:3"}).integer(), 0)
      << "excluded keys reached the target";
  EXPECT_EQ(dst.command({"EXISTS", "sess:2", "sess:3", "sess:4"}).integer(), 0)
      << "keys written without key_rewrite";
  EXPECT_EQ(dst.command({"HGET", "eu:sess:2", "a"}).str(), "1");
  const int64_t clamp = dst.command({"PEXPIRETIME", "eu:sess:2"}).integer();
  EXPECT_GT(clamp, now) << "HSETEX created a key without the target's 10 m clamp";
  EXPECT_LE(clamp, now + 600'000);
  const RespValue s3 = src.command({"HPEXPIRETIME", "sess:3", "FIELDS", "2", "a", "b"});
  const RespValue t3 = dst.command({"HPEXPIRETIME", "eu:sess:3", "FIELDS", "2", "a", "b"});
  ASSERT_TRUE(s3.isArray() && t3.isArray()) << t3.toString();
  EXPECT_GT(s3.array()[0].integer(), now);
  EXPECT_EQ(t3.array()[0].integer(), s3.array()[0].integer()) << "the field deadline";
  EXPECT_EQ(t3.array()[1].integer(), -1);
  const RespValue t4 = dst.command({"HPEXPIRETIME", "eu:sess:4", "FIELDS", "1", "b"});
  ASSERT_TRUE(t4.isArray()) << t4.toString();
  EXPECT_EQ(t4.array()[0].integer(), -1) << "HPERSIST did not reach eu:sess:4";
  auto m = replicator::adminGet(admin_, "/metrics", 2s);
  ASSERT_TRUE(m && m->first == 200);
  ASSERT_NE(m->second.find("xdcr_unknown_commands_total{"), std::string::npos)
      << "no unknown-commands sample: the check below would prove nothing";
  const double unknown = metricValue(m->second, "xdcr_unknown_commands_total", "pipeline=");
  EXPECT_EQ(unknown, 0) << "hash-field commands counted as unknown";
  report(what() +
         ": HSETEX/HPEXPIREAT/HPERSIST under exclude_keys, key_rewrite and a 10 m "
         "clamp: eu:sess:2 clamped to now+" +
         std::to_string((clamp - now) / 1000) + " s, field deadline equal, " +
         std::to_string(static_cast<int>(unknown)) + " unknown commands");
}

/** The value of the sample of `family` whose labels contain `label` (0 when there is none). */
double metricValue(const std::string& metrics, const std::string& family,
                   const std::string& label) {
  std::istringstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(family + "{", 0) == 0 && line.find(label) != std::string::npos) {
      return std::stod(line.substr(line.rfind(' ') + 1));
    }
  }
  return 0;
}

// A newer source into an older target (hash-field-expiry.md H7, H8; vectors H-7, H-9, H-10).
// The target's RESTORE refuses the source's payloads ("DUMP payload version or checksum are
// wrong": their RDB version is newer than its own), so every snapshot key it cannot take is
// decoded and written as commands. Before, each was refused and the agent said "N keys, 0 failed"
// (server-versions-notes.md §3.3), then counted them failed: nothing was copied. Field deadlines
// the target cannot store are dropped and counted.
class NewerToOlderTest : public MatrixTest {};

TEST_P(NewerToOlderTest, EveryKeyArrivesEqual) {
  const Dataset snapshot = writeDataset(source_->port(), datasetOptions("a", 1));
  const bool hfe_source = hasFieldTtls(*source_kind_);
  const bool hfe_target = hasFieldTtls(*target_kind_);
  size_t field_ttls = 0;
  {
    RespClient src = source_->client();
    if (hfe_source) field_ttls += writeFieldTtlHashes(src, "hf:");
  }
  startAgent();
  if (HasFatalFailure()) return;
  const Dataset streamed = writeDataset(source_->port(), datasetOptions("b", 2));
  if (hfe_source) {
    RespClient src = source_->client();
    const std::string far = std::to_string(unixTimeMs() + 3'600'000);
    src.command({"HSETEX", "hs:1", "PXAT", far, "FIELDS", "2", "a", "1", "b", "2"});
    src.command({"HSET", "hs:2", "a", "1", "b", "2"});
    src.command({"HPEXPIREAT", "hs:2", far, "FIELDS", "1", "a"});
    src.command({"HSETEX", "hs:2", "KEEPTTL", "FIELDS", "1", "a", "3"});
    field_ttls += 2;  // HSETEX ... PXAT and HPEXPIREAT; HSETEX KEEPTTL states no deadline
  }
  KeyCheckReport diff;
  size_t source_keys = 0;
  const bool equal = awaitTargetEqual(60s, 500ms, diff, &source_keys);
  EXPECT_TRUE(equal) << what() << "\n" << diff.summary();
  EXPECT_GE(source_keys, 600u);
  auto r = replicator::adminGet(admin_, "/metrics", 2s);
  ASSERT_TRUE(r && r->first == 200);
  const std::string& metrics = r->second;
  const double rebuilt = metricValue(metrics, "xdcr_snapshot_keys_total", "result=\"rebuilt\"");
  const double restored = metricValue(metrics, "xdcr_snapshot_keys_total", "result=\"restored\"");
  const double failed = metricValue(metrics, "xdcr_snapshot_keys_total", "result=\"failed\"");
  const double dropped = metricValue(metrics, "xdcr_field_ttls_dropped_total", "pipeline=");
  const double refused = metricValue(metrics, "xdcr_target_write_failures_total", "pipeline=");
  report(what() + ": " + std::to_string(source_keys) + " source keys: " + diff.summary() + "; " +
         "snapshot: " + std::to_string(static_cast<int>(restored)) + " restored, " +
         std::to_string(static_cast<int>(rebuilt)) + " written as commands, " +
         std::to_string(static_cast<int>(failed)) + " failed; " +
         std::to_string(static_cast<int>(dropped)) + " field deadlines dropped");
  EXPECT_EQ(failed, 0);
  EXPECT_EQ(refused, 0);
  EXPECT_GT(rebuilt, 0) << "every key RESTOREd: this pair does not test the rebuild";
  const std::string log = agent_->logText();
  EXPECT_NE(log.find("written as commands: the target cannot RESTORE"), std::string::npos)
      << agent_->logTail(20);
  RespClient src = source_->client();
  RespClient dst = target_->client();
  if (hfe_source && !hfe_target) {
    // H7: the fields are there, without their deadlines, and each dropped deadline is counted
    // (and said once).
    EXPECT_EQ(dropped, static_cast<double>(field_ttls));
    EXPECT_NE(log.find("cannot store hash-field TTLs"), std::string::npos) << agent_->logTail(20);
    for (const auto& [key, fields] : fieldTtlFields()) {
      EXPECT_EQ(dst.command({"HLEN", "hf:" + key}).integer(),
                src.command({"HLEN", "hf:" + key}).integer())
          << key;
    }
  } else if (hfe_source) {
    EXPECT_EQ(dropped, 0);
    for (const auto& [key, fields] : fieldTtlFields()) {
      EXPECT_EQ(fieldDeadlines(dst, "hf:" + key, fields), fieldDeadlines(src, "hf:" + key, fields))
          << key;
    }
  }
  auto status = replicator::adminGet(admin_, "/status", 2s);
  ASSERT_TRUE(status && status->first == 200);
  const auto doc = nlohmann::json::parse(status->second);
  EXPECT_EQ(doc["pipelines"][0]["full_sync"]["failed"], 0) << status->second;
  EXPECT_EQ(doc["pipelines"][0]["full_sync"]["rebuilt"], static_cast<int>(rebuilt));
}

// Hash-field rules under strip_ttl (H4; vectors H-5, H-6): the snapshot's field deadlines are
// written without them (the key rebuilt from commands), the stream's HPEXPIREAT is not sent,
// HSETEX goes without its deadline.
class HashFieldRulesTest : public MatrixTest {};

TEST_P(HashFieldRulesTest, StripTtlRemovesFieldDeadlines) {
  size_t with_ttl = 0;
  {
    RespClient src = source_->client();
    with_ttl = writeFieldTtlHashes(src, "hf:");
  }
  startAgent("filters: {strip_ttl: true}");
  if (HasFatalFailure()) return;
  RespClient src = source_->client();
  const std::string far = std::to_string(unixTimeMs() + 3'600'000);
  ASSERT_FALSE(src.command({"HSETEX", "hs:1", "PXAT", far, "FIELDS", "1", "a", "1"}).isError());
  ASSERT_FALSE(src.command({"HSET", "hs:2", "a", "1", "b", "2"}).isError());
  ASSERT_FALSE(src.command({"HPEXPIREAT", "hs:2", far, "FIELDS", "1", "b"}).isError());
  ASSERT_FALSE(src.command({"SET", "done", "1"}).isError());
  RespClient dst = target_->client();
  ASSERT_TRUE(waitUntil(
      [&] {
        return dst.command({"EXISTS", "done"}).integer() == 1;
      },
      20s))
      << agent_->logTail(20);
  for (const auto& [key, fields] : fieldTtlFields()) {
    EXPECT_EQ(dst.command({"HLEN", "hf:" + key}).integer(),
              src.command({"HLEN", "hf:" + key}).integer())
        << key;
    for (int64_t d : fieldDeadlines(dst, "hf:" + key, fields)) EXPECT_EQ(d, -1) << key;
  }
  EXPECT_EQ(dst.command({"PEXPIRETIME", "hf:big"}).integer(), -1) << "the key's own deadline";
  EXPECT_EQ(dst.command({"HGET", "hs:1", "a"}).str(), "1");
  EXPECT_EQ(fieldDeadlines(dst, "hs:1", {"a"}), std::vector<int64_t>{-1});
  EXPECT_EQ(fieldDeadlines(dst, "hs:2", {"a", "b"}), (std::vector<int64_t>{-1, -1}));
  EXPECT_GT(fieldDeadlines(src, "hs:2", {"b"})[0], 0);
  auto m = replicator::adminGet(admin_, "/metrics", 2s);
  ASSERT_TRUE(m && m->first == 200);
  const double stripped = metricValue(m->second, "xdcr_expiry_stripped_total", "pipeline=");
  // 6 field deadlines and hf:big's key deadline in the snapshot, 2 in the stream.
  EXPECT_EQ(stripped, static_cast<double>(with_ttl + 1 + 2));
  report(what() + ": strip_ttl: " + std::to_string(static_cast<int>(stripped)) +
         " deadlines stripped, no field deadline on the target");
}

// Clock compensation of field deadlines on real servers (H3; vectors H-12, H-13): the target's
// clock runs 30 s ahead (libfaketime inside the chroot), `on_skew: compensate`. Every field
// deadline — of the snapshot's hashes (rebuilt from commands, since a RESTORE payload cannot be
// changed) and of the stream's HSETEX and HPEXPIREAT — must arrive shifted by the measured skew,
// like the keys' own deadlines. Before, field deadlines were written as the source had them: a
// field ended 30 s early on the target.
class HashFieldCompensationTest : public MatrixTest {};

TEST_P(HashFieldCompensationTest, FieldDeadlinesAreShiftedByTheMeasuredSkew) {
  std::string why;
  const std::string stamp = dir_.file("faketime");
  writeFakeTimeFile(stamp, 30);
  const auto env = matrixFakeTimeEnvironment(*target_kind_, stamp, dir_.path(), &why);
  if (!env) {
    if (matrixRequired()) FAIL() << why;
    GTEST_SKIP() << why;
  }
  target_ = RedisServer::startBinary(target_kind_->binary, {}, 10s, *env);
  {
    RespClient src = source_->client();
    writeFieldTtlHashes(src, "hf:");
  }
  clock_yaml_ = "clock: {check_interval: 500ms, max_skew: 1s, on_skew: compensate}\n";
  startAgent();
  if (HasFatalFailure()) return;
  RespClient src = source_->client();
  const std::string at = std::to_string(unixTimeMs() + 3'600'000);
  ASSERT_FALSE(src.command({"HSETEX", "hs:1", "PXAT", at, "FIELDS", "1", "a", "1"}).isError());
  ASSERT_FALSE(src.command({"HSET", "hs:2", "a", "1", "b", "2"}).isError());
  ASSERT_FALSE(src.command({"HPEXPIREAT", "hs:2", at, "FIELDS", "1", "b"}).isError());
  ASSERT_FALSE(src.command({"SET", "done", "1"}).isError());
  RespClient dst = target_->client();
  ASSERT_TRUE(waitUntil(
      [&] {
        return dst.command({"EXISTS", "done"}).integer() == 1;
      },
      30s))
      << agent_->logTail(20);
  auto status = replicator::adminGet(admin_, "/status", 2s);
  ASSERT_TRUE(status && status->first == 200);
  const auto doc = nlohmann::json::parse(status->second);
  const double delta = doc["pipelines"][0]["clock"]["compensation_ms"].get<double>();
  ASSERT_NEAR(delta, 30'000, 50) << status->second;
  size_t shifted = 0;
  auto expectShifted = [&](const std::string& key, const std::vector<std::string>& fields) {
    const auto s = fieldDeadlines(src, key, fields);
    const auto t = fieldDeadlines(dst, key, fields);
    for (size_t i = 0; i < fields.size(); ++i) {
      if (s[i] < 0) {
        EXPECT_EQ(t[i], s[i]) << key << " " << fields[i];
        continue;
      }
      EXPECT_NEAR(static_cast<double>(t[i] - s[i]), delta, 2) << key << " " << fields[i];
      ++shifted;
    }
  };
  for (const auto& [key, fields] : fieldTtlFields()) expectShifted("hf:" + key, fields);
  expectShifted("hs:1", {"a"});
  expectShifted("hs:2", {"a", "b"});
  EXPECT_EQ(shifted, 8u);
  EXPECT_NEAR(static_cast<double>(dst.command({"PEXPIRETIME", "hf:big"}).integer() -
                                  src.command({"PEXPIRETIME", "hf:big"}).integer()),
              delta, 2);
  report(what() + ": target clock +30 s, compensate (measured " + std::to_string(delta) +
         " ms): " + std::to_string(shifted) + " field deadlines shifted by it");
}

INSTANTIATE_TEST_SUITE_P(Servers, HashFieldCompensationTest,
                         ::testing::Values(Pair{"redis-8", "redis-8"},
                                           Pair{"valkey-9", "valkey-9"}),
                         pairName);

// A field's expiry reaches the stream as a plain HDEL (Valkey: with an UNLINK of the hash it
// emptied). The agent's index of field deadlines tells it from a user's HDEL, so
// drop_expirations keeps the field on a target whose copy was given a longer life (here by
// strip_ttl: no field TTLs there). Vector H-14; before, every such HDEL was replicated and the
// target lost the fields.
TEST_P(HashFieldRulesTest, DropExpirationsKeepsFieldsTheSourceExpired) {
  startAgent("filters: {strip_ttl: true, drop_expirations: true}");
  if (HasFatalFailure()) return;
  RespClient src = source_->client();
  ASSERT_FALSE(src.command({"HSET", "fx:1", "a", "1", "b", "2", "c", "3"}).isError());
  ASSERT_FALSE(src.command({"HPEXPIRE", "fx:1", "800", "FIELDS", "1", "a"}).isError());
  ASSERT_FALSE(src.command({"HSET", "fx:2", "x", "1"}).isError());
  ASSERT_FALSE(src.command({"HPEXPIRE", "fx:2", "800", "FIELDS", "1", "x"}).isError());
  // The source expires them itself (active expiry): wait until it has, then a user's HDEL.
  ASSERT_TRUE(waitUntil(
      [&] {
        return src.command({"HEXISTS", "fx:1", "a"}).integer() == 0 &&
               src.command({"EXISTS", "fx:2"}).integer() == 0;
      },
      15s, 100ms))
      << "the source did not expire the fields";
  ASSERT_EQ(src.command({"HDEL", "fx:1", "b"}).integer(), 1);
  ASSERT_FALSE(src.command({"SET", "done", "1"}).isError());
  RespClient dst = target_->client();
  ASSERT_TRUE(waitUntil(
      [&] {
        return dst.command({"EXISTS", "done"}).integer() == 1;
      },
      20s))
      << agent_->logTail(20);
  EXPECT_EQ(dst.command({"HGET", "fx:1", "a"}).str(), "1") << "the expiry of a was replicated";
  EXPECT_EQ(dst.command({"HEXISTS", "fx:1", "b"}).integer(), 0) << "the user's HDEL of b";
  EXPECT_EQ(dst.command({"HGET", "fx:1", "c"}).str(), "3");
  EXPECT_EQ(dst.command({"HGET", "fx:2", "x"}).str(), "1") << "the expiry of fx:2's last field";
  auto m = replicator::adminGet(admin_, "/metrics", 2s);
  ASSERT_TRUE(m && m->first == 200);
  const double held = metricValue(m->second, "xdcr_filtered_total", "reason=\"expiration\"");
  EXPECT_GE(held, 2) << m->second;
  report(what() + ": strip_ttl + drop_expirations: 2 fields the source expired kept on the " +
         "target, a user's HDEL replicated; " + std::to_string(static_cast<int>(held)) +
         " expirations held back");
}

// A value over the target's proto-max-bulk-len cannot travel as one RESTORE payload (vector
// H-11): before, such a key was counted failed and not copied ("raise proto-max-bulk-len");
// now a list goes in RPUSH batches. A string that long cannot exist on the target at all (Redis
// refuses even an APPEND that would make it so): counted failed, logged with the key.
class BulkLimitTest : public MatrixTest {};

TEST_P(BulkLimitTest, AggregatesOverTheTargetsBulkLimitAreWrittenInPieces) {
  RespClient src = source_->client();
  std::string big(3 << 20, '\0');
  uint64_t x = 88172645463325252ULL;  // xorshift: incompressible, so LZF does not shrink it
  for (char& c : big) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    c = static_cast<char>(x);
  }
  ASSERT_EQ(src.command({"SET", "big:string", big, "PX", "3600000"}).str(), "OK");
  RespCommand push = {"RPUSH", "big:list"};
  for (int i = 0; i < 3000; ++i) push.push_back(big.substr(static_cast<size_t>(i) * 1000, 1000));
  ASSERT_EQ(src.command(push).integer(), 3000);
  ASSERT_EQ(src.command({"PEXPIRE", "big:list", "3600000"}).integer(), 1);
  ASSERT_EQ(src.command({"SET", "small", "1"}).str(), "OK");
  RespClient dst = target_->client();
  ASSERT_EQ(dst.command({"CONFIG", "SET", "proto-max-bulk-len", "1mb"}).str(), "OK");
  startAgent();
  if (HasFatalFailure()) return;
  std::string metrics;
  ASSERT_TRUE(waitUntil(
      [&] {
        auto m = replicator::adminGet(admin_, "/metrics", 2s);
        metrics = m && m->first == 200 ? m->second : "";
        return metricValue(metrics, "xdcr_snapshot_keys_total", "result=\"failed\"") +
                   metricValue(metrics, "xdcr_snapshot_keys_total", "result=\"rebuilt\"") +
                   metricValue(metrics, "xdcr_snapshot_keys_total", "result=\"restored\"") >=
               3;
      },
      30s, 200ms))
      << metrics;
  const double rebuilt = metricValue(metrics, "xdcr_snapshot_keys_total", "result=\"rebuilt\"");
  const double failed = metricValue(metrics, "xdcr_snapshot_keys_total", "result=\"failed\"");
  EXPECT_EQ(rebuilt, 1);
  EXPECT_EQ(failed, 1);
  EXPECT_EQ(dst.command({"LRANGE", "big:list", "0", "-1"}),
            src.command({"LRANGE", "big:list", "0", "-1"}));
  EXPECT_GT(dst.command({"PEXPIRETIME", "big:list"}).integer(), 0);
  EXPECT_EQ(dst.command({"GET", "small"}).str(), "1");
  EXPECT_EQ(dst.command({"EXISTS", "big:string"}).integer(), 0);
  const std::string log = agent_->logText();
  EXPECT_NE(log.find("snapshot key \"big:string\" (db 0) NOT copied: the string is over the "
                     "target's proto-max-bulk-len"),
            std::string::npos)
      << agent_->logTail(20);
  EXPECT_NE(log.find("1 key(s) NOT copied"), std::string::npos) << agent_->logTail(20);
  report(what() + ": a 3 MB list and a 3 MiB string into proto-max-bulk-len 1mb: " +
         std::to_string(static_cast<int>(rebuilt)) + " written in pieces, " +
         std::to_string(static_cast<int>(failed)) + " failed (the string)");
}

INSTANTIATE_TEST_SUITE_P(Servers, BulkLimitTest, ::testing::Values(Pair{"redis-7.0", "redis-7.0"}),
                         pairName);

INSTANTIATE_TEST_SUITE_P(Servers, HashFieldRulesTest,
                         ::testing::Values(Pair{"redis-8", "redis-8"},
                                           Pair{"valkey-9", "valkey-9"}),
                         pairName);

INSTANTIATE_TEST_SUITE_P(Servers, HashFieldStreamTest,
                         ::testing::Values(Pair{"redis-8", "redis-8"},
                                           Pair{"valkey-9", "valkey-9"}),
                         pairName);

INSTANTIATE_TEST_SUITE_P(Servers, NewerToOlderTest,
                         ::testing::Values(Pair{"redis-8.0", "redis-7.0"},
                                           Pair{"valkey-8.0", "redis-7.0"},
                                           Pair{"redis-8", "redis-7.0"},
                                           Pair{"valkey-9", "valkey-8.0"},
                                           Pair{"valkey-9", "redis-8"}),
                         pairName);

// Every source version into every target version (the README's table): each to itself, older to
// newer (an upgrade), newer to older (keys the target cannot RESTORE are written as commands).
std::vector<Pair> everyPair() {
  std::vector<Pair> pairs;
  for (const std::string& s : matrixServerNames()) {
    for (const std::string& t : matrixServerNames()) pairs.push_back(Pair{s, t});
  }
  return pairs;
}

INSTANTIATE_TEST_SUITE_P(Servers, MatrixTest, ::testing::ValuesIn(everyPair()), pairName);

}  // namespace
}  // namespace xdcr::test
