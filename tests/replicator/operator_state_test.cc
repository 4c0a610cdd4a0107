// OperatorState (replicator/operator_state.h): the pause and resync files in a real directory.

#include "replicator/operator_state.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace xdcr::replicator {
namespace {

namespace fs = std::filesystem;

class OperatorStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/xdcr-opstate-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  void touch(const std::string& name) { std::ofstream(dir_ + "/" + name) << "x"; }
  bool has(const std::string& name) { return fs::exists(dir_ + "/" + name); }
  std::string dir_;
};

TEST_F(OperatorStateTest, APauseIsAFileUntilResumed) {
  OperatorState st(dir_, "p");
  EXPECT_FALSE(st.paused());
  ASSERT_TRUE(st.setPaused(true, 1234).has_value());
  EXPECT_TRUE(OperatorState(dir_, "p").paused()) << "another instance (a restart) sees it";
  EXPECT_FALSE(OperatorState(dir_, "q").paused());
  EXPECT_FALSE(has("p.paused.tmp"));
  ASSERT_TRUE(st.setPaused(false, 1235).has_value());
  EXPECT_FALSE(st.paused());
  EXPECT_TRUE(st.setPaused(false, 1236).has_value()) << "resuming twice is fine";
}

TEST_F(OperatorStateTest, AResyncDropsEveryCheckpointOfThePipelineAndNoOther) {
  for (const char* f : {"p.ckpt", "p.journal", "p@0-5460.ckpt", "p@0-5460.journal",
                        "p.fullsync-keys", "pq.ckpt", "q.ckpt", "q@1.journal"}) {
    touch(f);
  }
  OperatorState st(dir_, "p");
  ASSERT_TRUE(st.requestResync(1).has_value());
  EXPECT_TRUE(st.resyncRequested());
  auto removed = st.honourResync();
  ASSERT_TRUE(removed.has_value()) << removed.error().message;
  EXPECT_EQ(*removed, 4U);
  EXPECT_FALSE(has("p.ckpt"));
  EXPECT_FALSE(has("p@0-5460.journal"));
  EXPECT_FALSE(st.resyncRequested());
  // The full-sync key record stays (the next full sync sweeps with it); other pipelines' stay.
  EXPECT_TRUE(has("p.fullsync-keys"));
  EXPECT_TRUE(has("pq.ckpt"));
  EXPECT_TRUE(has("q.ckpt"));
  EXPECT_TRUE(has("q@1.journal"));
}

TEST_F(OperatorStateTest, AnUnwritableDirectoryIsNamedInTheError) {
  // A state directory under a regular file: no one can create it, root included.
  touch("file");
  const std::string state = dir_ + "/file/state";
  auto s = OperatorState(state, "p").setPaused(true, 1);
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.error().message.find(state + "/p.paused"), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("agent.state_dir"), std::string::npos);
  EXPECT_FALSE(OperatorState(state, "p").requestResync(1).has_value());
}

}  // namespace
}  // namespace xdcr::replicator
