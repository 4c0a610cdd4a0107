// Two agents replicating the same pipeline into the same target (each with its own state
// directory, so the state-directory lock cannot see them) would apply every non-idempotent write
// twice. The target-loss marker is written with SET ... GET at every checkpoint: its previous
// value must be the token this agent wrote last. The agent that finds another writer's token
// stops that pipeline with a message naming the marker and the cause.

#include <gtest/gtest.h>

#include <thread>

#include "tests/support/harness.h"

namespace xdcr::test {
namespace {

using namespace std::chrono_literals;

TEST(SecondWriter, AnotherAgentWritingThePipelinesMarkerStopsThePipeline) {
  TempDir dir{"xdcr-second-writer"};
  RedisServer source{{"--repl-diskless-sync-delay", "0"}};
  RedisServer target;
  auto config = [&](const std::string& state) {
    const std::string path = dir.file(state + ".yaml");
    writeFileText(path, "agent: {state_dir: " + dir.file(state) +
                            "}\n"
                            "clusters:\n"
                            "  src: {type: redis, address: \"127.0.0.1:" +
                            std::to_string(source.port()) +
                            "\"}\n"
                            "  dst: {type: redis, address: \"127.0.0.1:" +
                            std::to_string(target.port()) +
                            "\"}\n"
                            "pipelines:\n"
                            "  - {name: p, source: src, target: dst, checkpoint_interval: 1s}\n");
    return path;
  };
  AgentProcess first(config("state-a"), dir.file("a.log"));
  source.client().command({"SET", "before", "v"});
  ASSERT_TRUE(waitUntil(
      [&] {
        return target.client().command({"EXISTS", "before"}).integer() == 1;
      },
      30s))
      << first.logTail();

  // The second agent: its own state directory, the same pipeline, the same target.
  AgentProcess second(config("state-b"), dir.file("b.log"));
  // Within a few checkpoints one of them finds the other's token. The one that started later
  // (the second) stops its pipeline (and exits non-zero, having no other); the first goes on.
  const std::string expected = "another writer replaced this pipeline's marker __xdcr_marker__:p";
  ASSERT_TRUE(waitUntil(
      [&] {
        source.client().command({"INCR", "counter"});
        return !second.running();
      },
      20s, 200ms))
      << "first agent:\n"
      << first.logTail(20) << "\nsecond agent:\n"
      << second.logTail(20);
  ASSERT_TRUE(second.exitStatus().has_value());
  EXPECT_NE(second.exitStatus()->code, 0) << second.logTail(20);
  EXPECT_NE(second.logText().find(expected), std::string::npos) << second.logTail(20);
  EXPECT_NE(second.logText().find("this agent started later, so this pipeline stops"),
            std::string::npos)
      << second.logTail(20);
  // The first goes on replicating, through several more checkpoints.
  for (int i = 0; i < 3; ++i) {
    const std::string key = "after:" + std::to_string(i);
    source.client().command({"SET", key, "v"});
    EXPECT_TRUE(waitUntil(
        [&] {
          return target.client().command({"EXISTS", key}).integer() == 1;
        },
        20s))
        << first.logTail(20);
    std::this_thread::sleep_for(1500ms);  // past a checkpoint (checkpoint_interval 1s)
  }
  EXPECT_TRUE(first.running()) << first.logTail(20);
}

}  // namespace
}  // namespace xdcr::test
