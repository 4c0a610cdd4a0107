// The snapshot key set of full_sync.delete_stale_keys, its config key, and the record of the
// keys a full sync wrote (FullSyncJournal).

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "config/config.h"
#include "target/stale_sweep.h"

namespace xdcr::target {
namespace {

TEST(SnapshotKeys, ContainsExactlyTheAddedKeysPerDb) {
  SnapshotKeys keys;
  for (int i = 0; i < 1000; ++i) keys.add(i % 3, "k:" + std::to_string(i));
  keys.seal();
  EXPECT_EQ(keys.size(), 1000u);
  for (int i = 0; i < 1000; ++i) {
    EXPECT_TRUE(keys.contains(i % 3, "k:" + std::to_string(i))) << i;
    EXPECT_FALSE(keys.contains((i + 1) % 3, "k:" + std::to_string(i))) << "other db " << i;
  }
  EXPECT_FALSE(keys.contains(0, "k:1000"));
  EXPECT_FALSE(keys.contains(0, ""));
  keys.clear();
  EXPECT_EQ(keys.size(), 0u);
}

TEST(SnapshotKeys, ConfigKeyDefaultsOffAndIsValidated) {
  const std::string base =
      "clusters:\n  a: {type: redis, address: \"127.0.0.1:1\"}\n"
      "  b: {type: redis, address: \"127.0.0.1:2\"}\n"
      "pipelines:\n  - {name: p, source: a, target: b";
  auto off = config::loadConfigString(base + "}\n", "t.yaml");
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off.config->pipelines[0].delete_stale_keys);
  auto on = config::loadConfigString(base + ", full_sync: {delete_stale_keys: true}}\n", "t.yaml");
  ASSERT_TRUE(on.ok()) << on.diagnostics.at(0).format();
  EXPECT_TRUE(on.config->pipelines[0].delete_stale_keys);
  auto bad = config::loadConfigString(base + ", full_sync: {delete_stale: true}}\n", "t.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.diagnostics.at(0).format().find("delete_stale"), std::string::npos)
      << bad.diagnostics.at(0).format();
}

// The record of the keys a full sync wrote (FullSyncJournal): what one process appended, the
// next reads back, across a crash that tore the last record.
class FullSyncJournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "xdcr-fsj-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/p.fullsync-keys";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_, path_;
};

TEST_F(FullSyncJournalTest, WhatOneRunFlushedTheNextLoadsAndAppendsTo) {
  {
    FullSyncJournal first(path_);
    for (int i = 0; i < 10'000; ++i) first.add(i % 2, "k:" + std::to_string(i));
    ASSERT_TRUE(first.flush().has_value());
    first.add(0, "buffered-only");  // never flushed: the crash lost it, and no target saw it
  }
  // A crash in the middle of a write: half a record at the end.
  {
    std::ofstream torn(path_, std::ios::binary | std::ios::app);
    torn.write("abcd", 4);
  }
  FullSyncJournal second(path_);
  SnapshotKeys loaded;
  ASSERT_TRUE(second.load(loaded).has_value());
  loaded.seal();
  EXPECT_EQ(loaded.size(), 10'000u);
  EXPECT_TRUE(loaded.contains(1, "k:9999"));
  EXPECT_FALSE(loaded.contains(0, "k:9999"));
  EXPECT_FALSE(loaded.contains(0, "buffered-only"));

  // Appending cuts the torn record first, so nothing after it is read shifted.
  second.add(3, "after");
  ASSERT_TRUE(second.flush().has_value());
  EXPECT_EQ(std::filesystem::file_size(path_), 10'001u * 8);
  SnapshotKeys again;
  ASSERT_TRUE(FullSyncJournal(path_).load(again).has_value());
  again.seal();
  EXPECT_EQ(again.size(), 10'001u);
  EXPECT_TRUE(again.contains(3, "after"));
  EXPECT_TRUE(again.contains(0, "k:0"));

  ASSERT_TRUE(second.remove().has_value());
  EXPECT_FALSE(std::filesystem::exists(path_));
  SnapshotKeys none;
  ASSERT_TRUE(FullSyncJournal(path_).load(none).has_value());  // no file: nothing, no error
  EXPECT_EQ(none.size(), 0u);
  EXPECT_TRUE(second.remove().has_value());  // removing twice is not an error
}

// Full syncs interrupted in a row each append the keys they wrote: rewrite() keeps the file at
// one record a key (RedisSink::beginSnapshot calls it when the loaded set had repeats).
TEST_F(FullSyncJournalTest, RepeatedAttemptsAreRewrittenToOneRecordAKey) {
  for (int attempt = 0; attempt < 3; ++attempt) {
    FullSyncJournal j(path_);
    for (int i = 0; i < 1000; ++i) j.add(0, "k:" + std::to_string(i));
    ASSERT_TRUE(j.flush().has_value());
  }
  EXPECT_EQ(std::filesystem::file_size(path_), 3000u * 8);
  SnapshotKeys loaded;
  ASSERT_TRUE(FullSyncJournal(path_).load(loaded).has_value());
  EXPECT_EQ(loaded.size(), 3000u);
  loaded.seal();
  EXPECT_EQ(loaded.size(), 1000u);  // sealed: each key once
  ASSERT_TRUE(FullSyncJournal(path_).rewrite(loaded).has_value());
  EXPECT_EQ(std::filesystem::file_size(path_), 1000u * 8);
  EXPECT_FALSE(std::filesystem::exists(path_ + ".tmp"));
  SnapshotKeys again;
  ASSERT_TRUE(FullSyncJournal(path_).load(again).has_value());
  again.seal();
  EXPECT_EQ(again.size(), 1000u);
  EXPECT_TRUE(again.contains(0, "k:999"));
}

TEST_F(FullSyncJournalTest, AFlushThatCannotWriteSaysWhichFileAndWhatToDo) {
  // A directory where the file should be: open() fails for root too (EISDIR).
  ASSERT_TRUE(std::filesystem::create_directory(path_));
  FullSyncJournal journal(path_);
  journal.add(0, "k");
  const Status s = journal.flush();
  ASSERT_FALSE(s.has_value());
  EXPECT_NE(s.error().message.find(path_), std::string::npos) << s.error().message;
  EXPECT_NE(s.error().message.find("not written until"), std::string::npos) << s.error().message;
}

}  // namespace
}  // namespace xdcr::target
