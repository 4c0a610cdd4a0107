// `xdcr-agent verify` on the server matrix (issue 16, point 6): what Redis 7.4+/8 and Valkey 9
// hold that older servers do not. No replication runs: each test writes the source and the
// target itself, then runs verify.
//  - Hash-field deadlines (HPEXPIRETIME): equal field deadlines are clean; one field's deadline
//    other or missing on the target is a field-deadline difference naming the key and the field
//    (exit 1); with filters.strip_ttl the target's fields must have none. A source with field
//    deadlines and a target without field TTLs at all (Redis 7.0): each such field differs.
//  - Redis 8 vector sets: compared by content (VCARD, VDIM, every element's VEMB and
//    VGETATTR), not by DUMP bytes, which differ after a RESTORE of the same set.
//
// Without the servers the tests skip; with XDCR_MATRIX_REQUIRED=1 (scripts/test.sh) they fail.

#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/support/harness.h"
#include "tests/support/server_matrix.h"

namespace xdcr::test {
namespace {

using namespace std::chrono_literals;

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

/** The example of `kind` whose source key is `key`, or null. */
const nlohmann::json* example(const nlohmann::json& report, const std::string& kind,
                              const std::string& key) {
  if (!report.contains("examples")) return nullptr;
  for (const auto& e : report["examples"]) {
    if (e.value("kind", "") == kind && e.value("source", "") == "db0 \"" + key + "\"") return &e;
  }
  return nullptr;
}

/** The calls of `command` on `server` so far (INFO commandstats). */
int64_t calls(const RedisServer& server, const std::string& command) {
  auto stats = server.client(2s).info("commandstats");
  auto it = stats.find("cmdstat_" + command);
  if (it == stats.end()) return 0;
  const size_t at = it->second.find("calls=");
  return at == std::string::npos ? 0 : std::stoll(it->second.substr(at + 6));
}

void expectOk(const RespValue& v, const std::string& what) {
  EXPECT_FALSE(v.isError()) << what << ": " << v.toString();
}

class VerifyMatrixTest : public ::testing::Test {
 protected:
  /** Starts `source` and `target` (server matrix names); false (and skipped or failed) when
   *  one is not provisioned. */
  bool start(const std::string& source, const std::string& target) {
    std::string why;
    auto s = findMatrixServer(source, &why);
    auto t = s ? findMatrixServer(target, &why) : std::nullopt;
    if (!s || !t) {
      if (matrixRequired()) {
        ADD_FAILURE() << why;
      } else {
        skip_ = why;
      }
      return false;
    }
    what_ = s->name + " " + s->version + " -> " + t->name + " " + t->version;
    source_ = RedisServer::startBinary(s->binary);
    target_ = RedisServer::startBinary(t->binary);
    return true;
  }

  /** The configuration of pipeline `p` (src -> dst); `pipeline_extra`: e.g. "filters: {...}". */
  std::string writeConfig(const std::string& name, const std::string& pipeline_extra = "") {
    const std::string path = dir_.file(name + ".yaml");
    std::string y = "agent: {state_dir: \"" + dir_.file("state") + "\"}\nclusters:\n";
    y += "  src: {type: redis, address: \"" + source_->address() + "\"}\n";
    y += "  dst: {type: redis, address: \"" + target_->address() + "\"}\n";
    y += "pipelines:\n  - {name: p, source: src, target: dst";
    y += (pipeline_extra.empty() ? "" : ", " + pipeline_extra) + "}\n";
    writeFileText(path, y);
    return path;
  }

  AgentCommandResult verify(const std::string& config, const std::string& name, bool json = true) {
    std::vector<std::string> args = {"verify",     "-c", config,   "-p", "p",
                                     "--rechecks", "0",  "--rate", "0"};
    if (json) {
      args.push_back("-o");
      args.push_back("json");
    }
    AgentCommandResult r = runAgentCommand(args, dir_.file(name + ".out"));
    std::cout << "[ verify   ] " << what_ << ": " << name << ": exit " << r.exit_code << "\n"
              << r.output << std::endl;
    return r;
  }

  /** The same on both sides. */
  void both(const RespCommand& c) {
    expectOk(source_->client().command(c), "source");
    expectOk(target_->client().command(c), "target");
  }

  std::string skip_;
  std::string what_;
  TempDir dir_{"xdcr-verify-matrix"};
  std::unique_ptr<RedisServer> source_, target_;
};

#define START_OR_SKIP(src, dst)                  \
  do {                                           \
    if (!start(src, dst)) {                      \
      if (!skip_.empty()) GTEST_SKIP() << skip_; \
      return;                                    \
    }                                            \
  } while (0)

// --- (a) hash-field deadlines, a version to itself -----------------------------------------------

class FieldDeadlineTest : public VerifyMatrixTest,
                          public ::testing::WithParamInterface<std::string> {};

TEST_P(FieldDeadlineTest, EqualFieldDeadlinesAreClean) {
  START_OR_SKIP(GetParam(), GetParam());
  const int64_t at = nowMs() + 3'600'000;
  both({"HSET", "h:eq", "a", "1", "b", "2", "c", "3"});
  both({"HPEXPIREAT", "h:eq", std::to_string(at), "FIELDS", "2", "a", "b"});
  both({"HPEXPIREAT", "h:eq", std::to_string(at + 5'000), "FIELDS", "1", "c"});
  both({"HSET", "h:plain", "x", "1", "y", "2"});
  both({"HSET", "h:part", "x", "1", "y", "2"});
  both({"HPEXPIREAT", "h:part", std::to_string(at + 60'000), "FIELDS", "1", "y"});
  both({"HSET", "h:keyttl", "x", "1"});
  both({"PEXPIREAT", "h:keyttl", std::to_string(at + 120'000)});
  both({"HPEXPIREAT", "h:keyttl", std::to_string(at), "FIELDS", "1", "x"});
  // A hash of 2,500 fields, each with its own deadline: read in chunks, not field by field.
  {
    RespCommand hset = {"HSET", "h:big"};
    for (int i = 0; i < 2500; ++i) {
      hset.push_back("f" + std::to_string(i));
      hset.push_back(std::to_string(i));
    }
    both(hset);
    std::vector<RespCommand> exp;
    for (int i = 0; i < 2500; ++i) {
      exp.push_back({"HPEXPIREAT", "h:big", std::to_string(at + i * 1000), "FIELDS", "1",
                     "f" + std::to_string(i)});
    }
    for (const auto& r : source_->client().pipeline(exp)) ASSERT_FALSE(r.isError()) << r.toString();
    for (const auto& r : target_->client().pipeline(exp)) ASSERT_FALSE(r.isError()) << r.toString();
  }
  both({"SET", "s", "v"});

  const int64_t before = calls(*source_, "hpexpiretime");
  const AgentCommandResult v = verify(writeConfig("eq"), "equal");
  ASSERT_TRUE(v.report.is_object()) << v.output;
  EXPECT_EQ(v.exit_code, 0) << v.output;
  EXPECT_EQ(v.report.value("checked", -1), 6) << v.output;
  EXPECT_EQ(v.report.value("value_mismatches", -1), 0) << v.output;
  EXPECT_EQ(v.report.value("ttl_mismatches", -1), 0) << v.output;
  EXPECT_EQ(v.report.value("field_ttl_mismatches", -1), 0) << v.output;
  // Field deadlines were read at all, and in batches: 5 hashes (h:big in 3 chunks of at most
  // 1,000 fields) and one probe for the command, not one call per field.
  const int64_t read = calls(*source_, "hpexpiretime") - before;
  EXPECT_GE(read, 7) << "the source's field deadlines were not read";
  EXPECT_LE(read, 8) << "HPEXPIRETIME was not batched";
}

TEST_P(FieldDeadlineTest, OtherOrMissingFieldDeadlineIsADifference) {
  START_OR_SKIP(GetParam(), GetParam());
  const int64_t at = nowMs() + 3'600'000;
  both({"HSET", "h:same", "a", "1", "b", "2"});
  both({"HPEXPIREAT", "h:same", std::to_string(at), "FIELDS", "1", "a"});
  // Field b: a minute later on the target.
  both({"HSET", "h:other", "a", "1", "b", "2", "c", "3"});
  both({"HPEXPIREAT", "h:other", std::to_string(at), "FIELDS", "2", "a", "b"});
  expectOk(target_->client().command(
               {"HPEXPIREAT", "h:other", std::to_string(at + 60'000), "FIELDS", "1", "b"}),
           "target");
  // Field y: a deadline on the source, none on the target.
  both({"HSET", "h:missing", "x", "1", "y", "2"});
  expectOk(source_->client().command(
               {"HPEXPIREAT", "h:missing", std::to_string(at), "FIELDS", "1", "y"}),
           "source");
  // Field q: none on the source, one on the target.
  both({"HSET", "h:extra", "p", "1", "q", "2"});
  expectOk(
      target_->client().command({"HPEXPIREAT", "h:extra", std::to_string(at), "FIELDS", "1", "q"}),
      "target");
  const std::string config = writeConfig("diff");

  const AgentCommandResult v = verify(config, "differences");
  ASSERT_TRUE(v.report.is_object()) << v.output;
  EXPECT_EQ(v.exit_code, 1) << v.output;
  EXPECT_EQ(v.report.value("checked", -1), 4) << v.output;
  EXPECT_EQ(v.report.value("value_mismatches", -1), 0) << v.output;
  EXPECT_EQ(v.report.value("ttl_mismatches", -1), 0) << v.output;
  EXPECT_EQ(v.report.value("field_ttl_mismatches", -1), 3) << v.output;
  EXPECT_EQ(example(v.report, "field-ttl", "h:same"), nullptr) << v.output;
  const struct {
    const char* key;
    std::string field, source, target;
  } want[] = {{"h:other", "\"b\"", std::to_string(at), std::to_string(at + 60'000)},
              {"h:missing", "\"y\"", std::to_string(at), "target none"},
              {"h:extra", "\"q\"", "source none", std::to_string(at)}};
  for (const auto& w : want) {
    const nlohmann::json* e = example(v.report, "field-ttl", w.key);
    ASSERT_NE(e, nullptr) << w.key << "\n" << v.output;
    const std::string detail = e->value("detail", "");
    EXPECT_NE(detail.find("field " + w.field), std::string::npos) << detail;
    EXPECT_NE(detail.find(w.source), std::string::npos) << detail;
    EXPECT_NE(detail.find(w.target), std::string::npos) << detail;
  }

  // The table says the same.
  const AgentCommandResult table = verify(config, "differences-table", false);
  EXPECT_EQ(table.exit_code, 1) << table.output;
  EXPECT_NE(table.output.find("3 field ttl mismatches"), std::string::npos) << table.output;
  EXPECT_NE(table.output.find("h:other"), std::string::npos) << table.output;
}

TEST_P(FieldDeadlineTest, StripTtlWantsNoFieldDeadlines) {
  START_OR_SKIP(GetParam(), GetParam());
  const int64_t at = nowMs() + 3'600'000;
  RespClient src = source_->client();
  RespClient dst = target_->client();
  for (const char* key : {"h:stripped", "h:kept"}) {
    both({"HSET", key, "a", "1", "b", "2"});
    expectOk(src.command({"HPEXPIREAT", key, std::to_string(at), "FIELDS", "2", "a", "b"}),
             "source");
  }
  const std::string config =
      writeConfig("strip", "filters: {strip_ttl: true, exclude_keys: [\":aside$\"]}");

  // Only h:stripped: the target's fields have no deadline, as strip_ttl says.
  expectOk(dst.command({"DEL", "h:kept"}), "target");
  expectOk(src.command({"RENAME", "h:kept", "h:kept:aside"}), "source");
  const AgentCommandResult clean = verify(config, "strip-clean");
  ASSERT_TRUE(clean.report.is_object()) << clean.output;
  EXPECT_EQ(clean.exit_code, 0) << clean.output;
  EXPECT_EQ(clean.report.value("checked", -1), 1) << clean.output;
  EXPECT_EQ(clean.report.value("field_ttl_mismatches", -1), 0) << clean.output;
  expectOk(src.command({"RENAME", "h:kept:aside", "h:kept"}), "source");

  // h:kept on the target with the source's field deadline: strip_ttl says none.
  expectOk(dst.command({"HSET", "h:kept", "a", "1", "b", "2"}), "target");
  expectOk(dst.command({"HPEXPIREAT", "h:kept", std::to_string(at), "FIELDS", "1", "b"}), "target");
  const AgentCommandResult diff = verify(config, "strip-diff");
  ASSERT_TRUE(diff.report.is_object()) << diff.output;
  EXPECT_EQ(diff.exit_code, 1) << diff.output;
  EXPECT_EQ(diff.report.value("missing", -1), 0) << diff.output;
  EXPECT_EQ(diff.report.value("field_ttl_mismatches", -1), 1) << diff.output;
  const nlohmann::json* e = example(diff.report, "field-ttl", "h:kept");
  ASSERT_NE(e, nullptr) << diff.output;
  EXPECT_NE(e->value("detail", "").find("field \"b\""), std::string::npos) << diff.output;
  EXPECT_EQ(example(diff.report, "field-ttl", "h:stripped"), nullptr) << diff.output;
}

INSTANTIATE_TEST_SUITE_P(Matrix, FieldDeadlineTest, ::testing::Values("redis-8", "valkey-9"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (c == '-' || c == '.') c = '_';
                           }
                           return n;
                         });

// --- (b) a source with field deadlines, a target without field TTLs ------------------------------

TEST_F(VerifyMatrixTest, TargetWithoutFieldTtlsDiffersOnEachSourceFieldDeadline) {
  START_OR_SKIP("redis-8", "redis-7.0");
  both({"HSET", "h:plain", "a", "1", "b", "2"});
  both({"SET", "s", "v"});
  const std::string config = writeConfig("old-target");
  const AgentCommandResult clean = verify(config, "no-field-deadlines");
  ASSERT_TRUE(clean.report.is_object()) << clean.output;
  EXPECT_EQ(clean.exit_code, 0) << clean.output;
  EXPECT_EQ(clean.report.value("field_ttl_mismatches", -1), 0) << clean.output;

  both({"HSET", "h:ttl", "a", "1", "b", "2"});
  expectOk(source_->client().command({"HPEXPIRE", "h:ttl", "3600000", "FIELDS", "1", "b"}),
           "source");
  const AgentCommandResult diff = verify(config, "a-field-deadline");
  ASSERT_TRUE(diff.report.is_object()) << diff.output;
  EXPECT_EQ(diff.exit_code, 1) << diff.output;
  EXPECT_EQ(diff.report.value("value_mismatches", -1), 0) << diff.output;
  EXPECT_EQ(diff.report.value("field_ttl_mismatches", -1), 1) << diff.output;
  const nlohmann::json* e = example(diff.report, "field-ttl", "h:ttl");
  ASSERT_NE(e, nullptr) << diff.output;
  EXPECT_NE(e->value("detail", "").find("field \"b\""), std::string::npos) << diff.output;
  EXPECT_EQ(example(diff.report, "field-ttl", "h:plain"), nullptr) << diff.output;
}

// --- (c) Redis 8 vector sets ---------------------------------------------------------------------

std::vector<std::string> vector(int i, int dim) {
  std::vector<std::string> out;
  for (int d = 0; d < dim; ++d) out.push_back(std::to_string(((i * 7 + d * 13) % 41 - 20) / 20.0));
  return out;
}

/** VADD of `n` elements e0.. of dimension `dim`, every third one with an attribute. */
std::vector<RespCommand> vectorSet(const std::string& key, int n, int dim,
                                   const std::string& quant = "Q8") {
  std::vector<RespCommand> out;
  for (int i = 0; i < n; ++i) {
    RespCommand c = {"VADD", key, "VALUES", std::to_string(dim)};
    for (auto& x : vector(i, dim)) c.push_back(x);
    c.push_back("e" + std::to_string(i));
    c.push_back(quant);
    if (i % 3 == 0) {
      c.push_back("SETATTR");
      c.push_back("{\"i\":" + std::to_string(i) + "}");
    }
    out.push_back(std::move(c));
  }
  return out;
}

TEST_F(VerifyMatrixTest, VectorSetsAreComparedByContent) {
  START_OR_SKIP("redis-8", "redis-8");
  RespClient src = source_->client();
  RespClient dst = target_->client();
  const std::vector<std::string> keys = {"vs:q8", "vs:f32", "vs:changed", "vs:missing", "vs:attr"};
  for (const auto& key : keys) {
    for (const auto& r :
         src.pipeline(vectorSet(key, 120, 16, key == "vs:f32" ? "NOQUANT" : "Q8"))) {
      ASSERT_FALSE(r.isError()) << key << ": " << r.toString();
    }
  }
  // The target's copy by DUMP/RESTORE, as a full sync makes it: its DUMP is another.
  bool dump_differs = false;
  for (const auto& key : keys) {
    const RespValue dump = src.command({"DUMP", key});
    ASSERT_FALSE(dump.isNull()) << key;
    ASSERT_EQ(dst.command({"RESTORE", key, "0", dump.str()}).toString(), "OK") << key;
    dump_differs = dump_differs || !(dst.command({"DUMP", key}) == dump);
  }
  std::cout << "[ verify   ] DUMP after RESTORE " << (dump_differs ? "differs" : "is equal")
            << std::endl;
  // Not all in the first run.
  for (const char* key : {"vs:changed", "vs:missing", "vs:attr"}) {
    ASSERT_EQ(src.command({"RENAME", key, std::string(key) + ":aside"}).toString(), "OK");
  }
  both({"SET", "s", "v"});
  const std::string config = writeConfig("vectors", "filters: {exclude_keys: [\":aside$\"]}");
  const AgentCommandResult clean = verify(config, "vectorsets-equal");
  ASSERT_TRUE(clean.report.is_object()) << clean.output;
  EXPECT_EQ(clean.exit_code, 0) << clean.output;
  EXPECT_EQ(clean.report.value("checked", -1), 3) << clean.output;
  EXPECT_EQ(clean.report.value("value_mismatches", -1), 0) << clean.output;
  for (const char* key : {"vs:changed", "vs:missing", "vs:attr"}) {
    ASSERT_EQ(src.command({"RENAME", std::string(key) + ":aside", key}).toString(), "OK");
  }

  // e5's vector another on the target; e7 not on the target; e9's attribute another.
  RespCommand vadd = {"VADD", "vs:changed", "VALUES", "16"};
  for (int d = 0; d < 16; ++d) vadd.push_back(d % 2 == 0 ? "0.9" : "-0.9");
  vadd.push_back("e5");
  ASSERT_FALSE(dst.command(vadd).isError());
  ASSERT_EQ(dst.command({"VREM", "vs:missing", "e7"}).toString(), "(integer) 1");
  ASSERT_EQ(dst.command({"VSETATTR", "vs:attr", "e9", "{\"i\":99}"}).toString(), "(integer) 1");
  const AgentCommandResult diff = verify(config, "vectorsets-differ");
  ASSERT_TRUE(diff.report.is_object()) << diff.output;
  EXPECT_EQ(diff.exit_code, 1) << diff.output;
  EXPECT_EQ(diff.report.value("checked", -1), 6) << diff.output;
  EXPECT_EQ(diff.report.value("value_mismatches", -1), 3) << diff.output;
  EXPECT_EQ(diff.report.value("ttl_mismatches", -1), 0) << diff.output;
  const struct {
    const char* key;
    const char* names;
  } want[] = {{"vs:changed", "\"e5\""}, {"vs:missing", "\"e7\""}, {"vs:attr", "\"e9\""}};
  for (const auto& w : want) {
    const nlohmann::json* e = example(diff.report, "value", w.key);
    ASSERT_NE(e, nullptr) << w.key << "\n" << diff.output;
    EXPECT_NE(e->value("detail", "").find(w.names), std::string::npos) << e->dump();
  }
  EXPECT_EQ(example(diff.report, "value", "vs:q8"), nullptr) << diff.output;
  EXPECT_EQ(example(diff.report, "value", "vs:f32"), nullptr) << diff.output;
}

}  // namespace
}  // namespace xdcr::test
