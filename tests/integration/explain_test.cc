// `xdcr-agent explain -c FILE -p NAME KEY` (issue 18, finding 7: nothing told an operator why a
// given key is not on the target), against real servers and, where it matters, a running agent:
//  (a) a key an exclude_keys pattern takes out is reported filtered, naming the pattern;
//  (b) a key under a collection max_ttl of 60 s with a source TTL of 1 h: the clamp (a deadline
//      about now + 60 s) and the target's actual deadline, within tolerance;
//  (c) strip_ttl: no deadline without a max_ttl, now + max_ttl with one;
//  (d) a key absent on the target while the pipeline is paused: explain says it is paused (from
//      the running agent's /status);
//  (e) -o json parses and holds every fact; an unknown pipeline is 78, an unreachable cluster 2.

#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "replicator/admin_server.h"
#include "tests/support/harness.h"

namespace xdcr::test {
namespace {

using namespace std::chrono_literals;

constexpr const char* kPipeline = "east-to-west";

int64_t nowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class ExplainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    admin_ = "127.0.0.1:" + std::to_string(freePort());
    config_ = dir_.file("xdcr.yaml");
  }

  /** src -> dst; the target's db 0 has `sess:*` under max_ttl 60 s; `filters` is the inside of
   *  the pipeline's filters map. */
  std::string yaml(const std::string& filters, uint16_t target_port = 0) {
    return "agent: {state_dir: " + dir_.file("state") + ", admin_listen: \"" + admin_ +
           "\"}\n"
           "clusters:\n"
           "  src: {type: redis, address: \"127.0.0.1:" +
           std::to_string(source_.port()) +
           "\"}\n"
           "  dst:\n"
           "    type: redis\n"
           "    address: \"127.0.0.1:" +
           std::to_string(target_port != 0 ? target_port : target_.port()) +
           "\"\n"
           "    buckets:\n"
           "      - db: 0\n"
           "        collections:\n"
           "          - {name: sessions, keys: \"sess:*\", max_ttl: 60s}\n"
           "pipelines:\n"
           "  - {name: " +
           kPipeline + ", source: src, target: dst, checkpoint_interval: 500ms, filters: {" +
           filters + "}}\n";
  }
  void writeConfig(const std::string& text) { writeFileText(config_, text); }
  void startAgent() {
    agent_ = std::make_unique<AgentProcess>(config_, dir_.file("agent.log"));
    ASSERT_TRUE(waitUntil([&] { return get("/readyz").first == 200; }, 30s)) << agent_->logTail();
  }
  std::pair<int, std::string> request(const std::string& method, const std::string& path) {
    auto r = replicator::adminRequest(admin_, method, path, 5s);
    return r ? *r : std::pair<int, std::string>{-1, r.error().message};
  }
  std::pair<int, std::string> get(const std::string& path) { return request("GET", path); }
  nlohmann::json pipelineStatus() {
    auto [code, body] = get("/status");
    if (code != 200) return nlohmann::json::object();
    const auto doc = nlohmann::json::parse(body);
    return doc["pipelines"].empty() ? nlohmann::json::object() : doc["pipelines"][0];
  }
  bool onTarget(const std::string& key) {
    return target_.client().command({"EXISTS", key}) == RespValue::integer(1);
  }
  int64_t targetDeadline(const std::string& key) {
    return target_.client().command({"PEXPIRETIME", key}).integer();
  }
  /** `xdcr-agent explain -c FILE -p PIPELINE KEY [args]`, printed for the log. */
  AgentCommandResult explain(const std::string& key, std::vector<std::string> extra = {},
                             const std::string& pipeline = kPipeline) {
    std::vector<std::string> args = {"explain", "-c", config_, "-p", pipeline, key};
    args.insert(args.end(), extra.begin(), extra.end());
    AgentCommandResult r = runAgentCommand(args, dir_.file("explain.out"), 60s);
    std::cout << "[ explain  ] " << key << ": exit " << r.exit_code << "\n"
              << r.output << std::endl;
    return r;
  }
  AgentCommandResult explainJson(const std::string& key) { return explain(key, {"-o", "json"}); }

  TempDir dir_{"xdcr-explain"};
  RedisServer source_{{"--repl-diskless-sync-delay", "0"}};
  RedisServer target_;
  std::string admin_, config_;
  std::unique_ptr<AgentProcess> agent_;
};

/** Every fact the JSON report promises (interface.md §6.4), with its type. */
void expectShape(const nlohmann::json& j) {
  ASSERT_TRUE(j.is_object()) << j.dump();
  EXPECT_TRUE(j["pipeline"].is_string());
  EXPECT_TRUE(j["key"].is_string());
  EXPECT_TRUE(j["source_db"].is_number_integer());
  EXPECT_TRUE(j["verdict"].is_string());
  for (const char* f : {"exists", "idle_times_kept"}) EXPECT_TRUE(j["source"][f].is_boolean()) << f;
  for (const char* f : {"type", "label", "deadline"}) EXPECT_TRUE(j["source"][f].is_string()) << f;
  for (const char* f : {"deadline_ms", "idle_seconds", "now_ms"}) {
    EXPECT_TRUE(j["source"][f].is_number_integer()) << f;
  }
  EXPECT_TRUE(j["filters"]["selected"].is_boolean());
  EXPECT_TRUE(j["filters"]["detail"].is_string());
  for (const char* f : {"strip_ttl", "drop_expirations", "drop_deletions"}) {
    EXPECT_TRUE(j["filters"][f].is_boolean()) << f;
  }
  EXPECT_TRUE(j["filters"].contains("rule"));
  EXPECT_TRUE(j["filters"].contains("pattern"));
  for (const char* f : {"db", "bucket_db", "max_ttl_ms"}) {
    EXPECT_TRUE(j["target"][f].is_number_integer()) << f;
  }
  for (const char* f : {"cluster", "key", "collection", "max_ttl_from"}) {
    EXPECT_TRUE(j["target"][f].is_string()) << f;
  }
  for (const char* f : {"source_ms", "replicated_ms", "compensation_ms", "max_ttl_ms",
                        "target_now_ms", "would_write_ms"}) {
    EXPECT_TRUE(j["deadline"][f].is_number_integer()) << f;
  }
  for (const char* f : {"strip_ttl", "stripped", "clamped", "expired_on_arrival"}) {
    EXPECT_TRUE(j["deadline"][f].is_boolean()) << f;
  }
  EXPECT_TRUE(j["deadline"]["rule"].is_string());
  EXPECT_TRUE(j["deadline"]["would_write"].is_string());
  for (const char* f : {"read", "exists", "matches"}) {
    EXPECT_TRUE(j["on_target"][f].is_boolean()) << f;
  }
  EXPECT_TRUE(j["on_target"]["deadline_ms"].is_number_integer());
  EXPECT_TRUE(j["on_target"]["type"].is_string());
  EXPECT_TRUE(j["pipeline_status"]["available"].is_boolean());
  EXPECT_TRUE(j["reasons"].is_array());
}

/** The reasons joined, for substring checks. */
std::string reasons(const nlohmann::json& j) {
  std::string all;
  for (const auto& r : j["reasons"]) all += r.get<std::string>() + "\n";
  return all;
}

// (a)
TEST_F(ExplainTest, AKeyAnExcludePatternTakesOutIsFilteredNamingThePattern) {
  writeConfig(yaml("exclude_keys: [\"^cache:\", \"^tmp:\"]"));
  ASSERT_EQ(source_.client().command({"SET", "tmp:1", "v"}), RespValue::simpleString("OK"));
  ASSERT_EQ(source_.client().command({"SET", "keep:1", "v"}), RespValue::simpleString("OK"));

  const AgentCommandResult table = explain("tmp:1");
  EXPECT_EQ(table.exit_code, 0);
  EXPECT_NE(table.output.find("NOT replicated (exclude_keys)"), std::string::npos);
  EXPECT_NE(table.output.find("exclude_keys pattern \"^tmp:\" matches it"), std::string::npos);
  EXPECT_NE(table.output.find("verdict     filtered"), std::string::npos);

  const AgentCommandResult r = explainJson("tmp:1");
  ASSERT_EQ(r.exit_code, 0);
  expectShape(r.report);
  EXPECT_EQ(r.report["verdict"], "filtered");
  EXPECT_EQ(r.report["filters"]["selected"], false);
  EXPECT_EQ(r.report["filters"]["rule"], "exclude_keys");
  EXPECT_EQ(r.report["filters"]["pattern"], "^tmp:");  // the second pattern: the one that matched
  EXPECT_NE(reasons(r.report).find("^tmp:"), std::string::npos);
  // A key the patterns leave alone is selected: no rule, no pattern.
  const AgentCommandResult kept = explainJson("keep:1");
  ASSERT_EQ(kept.exit_code, 0);
  EXPECT_EQ(kept.report["filters"]["selected"], true);
  EXPECT_TRUE(kept.report["filters"]["rule"].is_null());
  EXPECT_NE(kept.report["verdict"], "filtered");
}

// (b)
TEST_F(ExplainTest, ACollectionMaxTtlClampsAnHourToAMinute) {
  writeConfig(yaml(""));
  startAgent();
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(source_.client().command({"SET", "sess:1", "v", "EX", "3600"}),
            RespValue::simpleString("OK"));
  ASSERT_TRUE(waitUntil([&] { return onTarget("sess:1"); }, 20s)) << agent_->logTail();
  const int64_t actual = targetDeadline("sess:1");
  const int64_t source_deadline = source_.client().command({"PEXPIRETIME", "sess:1"}).integer();

  const int64_t before = nowMs();
  const AgentCommandResult r = explainJson("sess:1");
  const int64_t after = nowMs();
  ASSERT_EQ(r.exit_code, 0);
  expectShape(r.report);
  const auto& d = r.report["deadline"];
  EXPECT_EQ(r.report["target"]["collection"], "sessions");
  EXPECT_EQ(r.report["target"]["max_ttl_ms"], 60000);
  EXPECT_EQ(d["source_ms"], source_deadline);
  EXPECT_EQ(d["max_ttl_ms"], 60000);
  EXPECT_EQ(d["clamped"], true);
  EXPECT_EQ(d["expired_on_arrival"], false);
  // The deadline written now: the target's now + 60 s (one host: its clock is ours, within the
  // time explain took and a second of tolerance), far before the source's hour.
  const int64_t would = d["would_write_ms"].get<int64_t>();
  EXPECT_GE(would, before + 60000 - 1000);
  EXPECT_LE(would, after + 60000 + 1000);
  EXPECT_LT(would, source_deadline - 3000000);
  // The target's actual deadline, as read, and judged to match (a clamp made at the write).
  EXPECT_EQ(r.report["on_target"]["exists"], true);
  EXPECT_EQ(r.report["on_target"]["deadline_ms"], actual);
  EXPECT_LE(std::llabs(r.report["on_target"]["deadline_ms"].get<int64_t>() - would), 20000);
  EXPECT_EQ(r.report["on_target"]["matches"], true);
  EXPECT_EQ(r.report["verdict"], "in_sync");
  EXPECT_EQ(r.report["pipeline_status"]["available"], true);
  EXPECT_EQ(r.report["pipeline_status"]["state"], "streaming");

  const AgentCommandResult table = explain("sess:1");
  EXPECT_EQ(table.exit_code, 0);
  EXPECT_NE(table.output.find("collection sessions; max_ttl 60 s, set by collection sessions"),
            std::string::npos);
  EXPECT_NE(table.output.find("written now: now + max_ttl 60 s (earlier than E)"),
            std::string::npos);
  EXPECT_NE(table.output.find("verdict     in_sync"), std::string::npos);
}

// (c)
TEST_F(ExplainTest, StripTtlWritesNoDeadlineOrNowPlusMaxTtl) {
  writeConfig(yaml("strip_ttl: true"));
  startAgent();
  ASSERT_FALSE(HasFatalFailure());
  auto c = source_.client();
  ASSERT_EQ(c.command({"SET", "plain:1", "v", "EX", "3600"}), RespValue::simpleString("OK"));
  ASSERT_EQ(c.command({"SET", "sess:2", "v", "EX", "3600"}), RespValue::simpleString("OK"));
  ASSERT_TRUE(waitUntil([&] { return onTarget("plain:1") && onTarget("sess:2"); }, 20s))
      << agent_->logTail();
  ASSERT_EQ(targetDeadline("plain:1"), -1);  // what the agent did: stripped, no max_ttl

  const AgentCommandResult plain = explainJson("plain:1");
  ASSERT_EQ(plain.exit_code, 0);
  expectShape(plain.report);
  EXPECT_EQ(plain.report["deadline"]["strip_ttl"], true);
  EXPECT_EQ(plain.report["deadline"]["stripped"], true);
  EXPECT_GT(plain.report["deadline"]["source_ms"].get<int64_t>(), nowMs() + 3000000);
  EXPECT_EQ(plain.report["deadline"]["replicated_ms"], 0);
  EXPECT_EQ(plain.report["deadline"]["max_ttl_ms"], 0);
  EXPECT_EQ(plain.report["deadline"]["would_write_ms"], 0);  // none
  EXPECT_EQ(plain.report["on_target"]["deadline_ms"], -1);
  EXPECT_EQ(plain.report["on_target"]["matches"], true);
  EXPECT_EQ(plain.report["verdict"], "in_sync");

  // Under the collection's max_ttl the stripped key still gets now + 60 s (§6).
  const int64_t before = nowMs();
  const AgentCommandResult sess = explainJson("sess:2");
  ASSERT_EQ(sess.exit_code, 0);
  EXPECT_EQ(sess.report["deadline"]["stripped"], true);
  const int64_t would = sess.report["deadline"]["would_write_ms"].get<int64_t>();
  EXPECT_GE(would, before + 59000);
  EXPECT_LE(would, nowMs() + 61000);
  EXPECT_NE(sess.report["deadline"]["rule"].get<std::string>().find("after strip_ttl"),
            std::string::npos);
  EXPECT_EQ(sess.report["on_target"]["matches"], true);

  const AgentCommandResult table = explain("plain:1");
  EXPECT_NE(table.output.find("strip_ttl: E = none"), std::string::npos);
  EXPECT_NE(table.output.find("written now: no deadline (no max_ttl) = none"), std::string::npos);
}

// (d)
TEST_F(ExplainTest, AKeyAbsentWhilePausedIsExplainedByThePause) {
  writeConfig(yaml(""));
  startAgent();
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(request("POST", std::string("/pipelines/") + kPipeline + "/pause").first, 200);
  ASSERT_TRUE(waitUntil([&] { return pipelineStatus()["state"] == "paused"; }, 10s));
  ASSERT_EQ(source_.client().command({"SET", "late:1", "v"}), RespValue::simpleString("OK"));
  ASSERT_FALSE(onTarget("late:1"));

  const AgentCommandResult r = explainJson("late:1");
  ASSERT_EQ(r.exit_code, 0);
  expectShape(r.report);
  EXPECT_EQ(r.report["verdict"], "missing");
  EXPECT_EQ(r.report["on_target"]["exists"], false);
  EXPECT_EQ(r.report["pipeline_status"]["available"], true);
  EXPECT_EQ(r.report["pipeline_status"]["paused"], true);
  EXPECT_EQ(r.report["pipeline_status"]["paused_reason"], "operator");
  ASSERT_FALSE(r.report["reasons"].empty());
  EXPECT_NE(r.report["reasons"][0].get<std::string>().find("the pipeline is paused"),
            std::string::npos)
      << reasons(r.report);
  EXPECT_NE(reasons(r.report).find("xdcr-agent resume"), std::string::npos);

  const AgentCommandResult table = explain("late:1");
  EXPECT_NE(table.output.find("paused (paused: operator)"), std::string::npos);
  EXPECT_NE(table.output.find("1. the pipeline is paused"), std::string::npos);

  // Resumed, the key arrives and explain says so.
  ASSERT_EQ(request("POST", std::string("/pipelines/") + kPipeline + "/resume").first, 200);
  ASSERT_TRUE(waitUntil([&] { return onTarget("late:1"); }, 20s)) << agent_->logTail();
  EXPECT_EQ(explainJson("late:1").report["verdict"], "in_sync");
}

// (e)
TEST_F(ExplainTest, JsonHoldsEveryFactAndErrorsHaveTheirStatus) {
  // No agent: the report says the pipeline's state is unknown, and why.
  writeConfig(yaml("include_keys: [\"^user:\"]"));
  ASSERT_EQ(source_.client().command({"SET", "other:1", "v", "PX", "500000"}),
            RespValue::simpleString("OK"));
  const AgentCommandResult r = explainJson("other:1");
  ASSERT_EQ(r.exit_code, 0);
  ASSERT_TRUE(r.report.is_object()) << r.output;
  expectShape(r.report);
  EXPECT_EQ(r.report["pipeline"], kPipeline);
  EXPECT_EQ(r.report["key"], "other:1");
  EXPECT_EQ(r.report["source"]["type"], "string");
  EXPECT_EQ(r.report["filters"]["rule"], "include_keys");
  EXPECT_EQ(r.report["pipeline_status"]["available"], false);
  EXPECT_FALSE(r.report["pipeline_status"]["reason"].get<std::string>().empty());

  // A key in another source db: --db.
  auto c = source_.client();
  ASSERT_EQ(c.command({"SELECT", "3"}), RespValue::simpleString("OK"));
  ASSERT_EQ(c.command({"SET", "user:3", "v"}), RespValue::simpleString("OK"));
  const AgentCommandResult db3 = explain("user:3", {"--db", "3", "-o", "json"});
  ASSERT_EQ(db3.exit_code, 0);
  EXPECT_EQ(db3.report["source_db"], 3);
  EXPECT_EQ(db3.report["source"]["exists"], true);
  EXPECT_EQ(db3.report["target"]["db"], 3);

  // An unknown pipeline: 78, naming the ones there are.
  const AgentCommandResult unknown = explain("k", {}, "nope");
  EXPECT_EQ(unknown.exit_code, 78);
  EXPECT_NE(unknown.output.find("no pipeline named \"nope\""), std::string::npos);
  EXPECT_NE(unknown.output.find(kPipeline), std::string::npos);

  // A target nothing listens on: 2, naming it.
  const uint16_t closed = freePort();
  writeConfig(yaml("", closed));
  const AgentCommandResult down = explain("other:1");
  EXPECT_EQ(down.exit_code, 2);
  EXPECT_NE(down.output.find("cannot connect"), std::string::npos);
  EXPECT_NE(down.output.find(std::to_string(closed)), std::string::npos);
}

}  // namespace
}  // namespace xdcr::test
