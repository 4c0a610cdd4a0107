// The spool's FIFO (source/spool.h): memory, then file, then memory again, in order across the
// boundary; store failures (ENOSPC, EIO) reported with the file and nothing lost or reordered;
// the real file store (O_EXCL, deleted on close, leftovers removed); the limit of a full sync.

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "source/spool.h"

namespace xdcr::source {
namespace {

namespace fs = std::filesystem;

/** A store in memory that can fail its writes (after `fail_after` bytes) or its reads. */
class FakeStore final : public SpoolStore {
 public:
  Status write(uint64_t offset, std::string_view data) override {
    ++writes;
    if (written + data.size() > fail_after) {
      return fail(
          Error::storage("cannot write the spool file " + path_ + ": No space left on device"));
    }
    EXPECT_EQ(offset, bytes.size()) << "writes are appends";
    bytes.resize(offset);
    bytes.append(data);
    written += data.size();
    return Status{};
  }
  Status read(uint64_t offset, char* out, size_t n) override {
    if (fail_reads) {
      return fail(Error::storage("cannot read the spool file " + path_ + ": Input/output error"));
    }
    EXPECT_LE(offset + n, bytes.size());
    std::memcpy(out, bytes.data() + offset, n);
    return Status{};
  }
  void discard(uint64_t offset) override { discarded = offset; }
  Status reset() override {
    ++resets;
    bytes.clear();
    return Status{};
  }
  const std::string& path() const override { return path_; }

  std::string bytes;
  uint64_t written = 0;
  uint64_t fail_after = UINT64_MAX;
  bool fail_reads = false;
  uint64_t discarded = 0;
  int writes = 0;
  int resets = 0;

 private:
  std::string path_ = "/state/spool/test.spool";
};

/** Takes everything (at most `chunk` at a time) and returns it as a string. */
std::string drain(SpoolFifo& fifo, size_t chunk = 1 << 20) {
  ReadBuffer out;
  for (;;) {
    auto n = fifo.take(out, chunk);
    EXPECT_TRUE(n.has_value());
    if (!n || *n == 0) break;
  }
  return std::string(out.data());
}

class TempDirectory {
 public:
  TempDirectory() {
    std::string tmpl = (fs::temp_directory_path() / "xdcr-spool-XXXXXX").string();
    path_ = ::mkdtemp(tmpl.data());
  }
  ~TempDirectory() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

size_t filesIn(const std::string& dir) {
  std::error_code ec;
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    (void)e;
    ++n;
  }
  return n;
}

TEST(SpoolFifo, MemoryThenFileThenMemoryAgainInOrder) {
  auto store = std::make_unique<FakeStore>();
  FakeStore& disk = *store;
  SpoolFifo fifo(16, std::move(store));
  ASSERT_TRUE(fifo.append("abcdefghij"));  // 10: all in memory
  EXPECT_EQ(fifo.inMemory(), 10u);
  EXPECT_EQ(fifo.onDisk(), 0u);
  EXPECT_EQ(disk.writes, 0) << "a spool that fits in memory writes no file";
  ASSERT_TRUE(fifo.append("klmnopqrst"));  // 6 more fill memory, 4 go to the file
  EXPECT_EQ(fifo.inMemory(), 16u);
  EXPECT_EQ(fifo.onDisk(), 4u);
  EXPECT_EQ(fifo.size(), 20u);

  ReadBuffer out;
  ASSERT_EQ(fifo.take(out, 7).value(), 7u);
  EXPECT_EQ(out.data(), "abcdefg");
  // Memory has room now, but the file holds newer bytes: what follows goes after them.
  ASSERT_TRUE(fifo.append("uv"));
  EXPECT_EQ(fifo.inMemory(), 9u);
  EXPECT_EQ(fifo.onDisk(), 6u);
  EXPECT_EQ(drain(fifo, 5), "hijklmnopqrstuv");
  EXPECT_EQ(fifo.size(), 0u);
  EXPECT_EQ(disk.resets, 1) << "a file read to its end starts again (space freed)";
  // Empty again: memory first.
  ASSERT_TRUE(fifo.append("xyz"));
  EXPECT_EQ(fifo.inMemory(), 3u);
  EXPECT_EQ(fifo.onDisk(), 0u);
  EXPECT_EQ(drain(fifo), "xyz");
  EXPECT_EQ(fifo.peak(), 20u);
  EXPECT_EQ(fifo.peakOnDisk(), 6u);
  EXPECT_EQ(fifo.total(), 25u);
}

TEST(SpoolFifo, OrderAcrossTheBoundaryWithRandomChunksThroughARealFile) {
  TempDirectory dir;
  const std::string spool_dir = dir.path() + "/spool";
  std::mt19937_64 rng(17);
  std::string in, got;
  {
    SpoolFifo fifo(1000, std::make_unique<FileSpoolStore>(spool_dir, "link"));
    ReadBuffer out;
    uint64_t next = 0;
    bool saw_file = false;
    for (int round = 0; round < 3000; ++round) {
      // Phases where appends outrun takes (the file grows) and the reverse (memory again).
      const bool filling = (round / 300) % 2 == 0;
      std::string chunk(rng() % (filling ? 700 : 200), '\0');
      for (char& c : chunk) c = static_cast<char>('a' + (next++ % 26));
      in += chunk;
      ASSERT_TRUE(fifo.append(chunk));
      saw_file = saw_file || fifo.onDisk() > 0;
      if (fifo.onDisk() > 0) {
        EXPECT_TRUE(fs::exists(fifo.path())) << fifo.path();
        EXPECT_EQ(fs::path(fifo.path()).parent_path(), fs::path(spool_dir));
      }
      auto n = fifo.take(out, rng() % (filling ? 300 : 900));
      ASSERT_TRUE(n.has_value()) << n.error().message;
    }
    EXPECT_TRUE(saw_file);
    got = std::string(out.data()) + drain(fifo, 333);
    EXPECT_EQ(fifo.size(), 0u);
    EXPECT_GT(fifo.peakOnDisk(), 0u);
  }
  ASSERT_EQ(got.size(), in.size());
  EXPECT_TRUE(got == in) << "bytes out of order across the memory/file boundary";
  EXPECT_EQ(filesIn(spool_dir), 0u) << "the spool file is deleted when the spool closes";
}

TEST(SpoolFifo, AFailedWriteTakesNothingAndNamesTheFile) {
  auto store = std::make_unique<FakeStore>();
  FakeStore& disk = *store;
  disk.fail_after = 5;  // ENOSPC after 5 bytes on disk
  SpoolFifo fifo(4, std::move(store));
  ASSERT_TRUE(fifo.append("abcd"));   // memory
  ASSERT_TRUE(fifo.append("efghi"));  // file: 5 bytes
  auto s = fifo.append("jk");         // the 6th byte on disk: no space
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind, Error::Kind::Storage);
  EXPECT_NE(s.error().message.find("/state/spool/test.spool"), std::string::npos);
  EXPECT_NE(s.error().message.find("No space left on device"), std::string::npos);
  EXPECT_EQ(fifo.size(), 9u) << "nothing of the failed append is held";
  EXPECT_EQ(drain(fifo), "abcdefghi") << "what was held before is intact";

  // A failing append that would have started in memory takes nothing either.
  auto store2 = std::make_unique<FakeStore>();
  store2->fail_after = 0;
  SpoolFifo small(4, std::move(store2));
  ASSERT_FALSE(small.append("abcdefgh"));
  EXPECT_EQ(small.size(), 0u);
  EXPECT_EQ(small.inMemory(), 0u);
}

TEST(SpoolFifo, AFailedReadIsAnError) {
  auto store = std::make_unique<FakeStore>();
  FakeStore& disk = *store;
  SpoolFifo fifo(2, std::move(store));
  ASSERT_TRUE(fifo.append("abcdef"));
  ReadBuffer out;
  ASSERT_EQ(fifo.take(out, 10).value(), 2u);  // memory
  disk.fail_reads = true;
  auto n = fifo.take(out, 10);
  ASSERT_FALSE(n.has_value());
  EXPECT_EQ(n.error().kind, Error::Kind::Storage);
  EXPECT_NE(n.error().message.find("Input/output error"), std::string::npos);
}

TEST(SpoolFifo, ReadPartsOfTheFileAreGivenBack) {
  auto store = std::make_unique<FakeStore>();
  FakeStore& disk = *store;
  SpoolFifo fifo(0, std::move(store));  // no memory part: everything on disk
  const std::string mib(1 << 20, 'x');
  for (int i = 0; i < 70; ++i) ASSERT_TRUE(fifo.append(mib));
  ReadBuffer out;
  for (int i = 0; i < 65; ++i) {
    ASSERT_EQ(fifo.take(out, 1 << 20).value(), 1u << 20);
    out.consume(out.size());
  }
  EXPECT_EQ(disk.discarded, 64u << 20) << "read space is punched out every 64 MiB";
  EXPECT_EQ(fifo.onDisk(), 5u << 20);
}

TEST(FileSpoolStore, NeverOpensAFileItDidNotCreate) {
  TempDirectory dir;
  const std::string other = dir.path() + "/link.spool";
  { std::ofstream(other) << "someone else's"; }
  {
    FileSpoolStore store(dir.path(), "link");
    ASSERT_TRUE(store.write(0, "mine"));
    EXPECT_EQ(store.path(), dir.path() + "/link.1.spool");
    char buf[4];
    ASSERT_TRUE(store.read(0, buf, 4));
    EXPECT_EQ(std::string(buf, 4), "mine");
    struct stat st {};
    ASSERT_EQ(::stat(store.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
  }
  EXPECT_FALSE(fs::exists(dir.path() + "/link.1.spool"));
  std::ifstream still(other);
  std::string text;
  std::getline(still, text);
  EXPECT_EQ(text, "someone else's");
}

TEST(FileSpoolStore, AnUnusableDirectoryIsAnErrorNamingIt) {
  TempDirectory dir;
  const std::string file = dir.path() + "/not-a-dir";
  { std::ofstream(file) << "x"; }
  FileSpoolStore store(file + "/spool", "link");
  auto s = store.write(0, "data");
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind, Error::Kind::Storage);
  EXPECT_NE(s.error().message.find(file), std::string::npos) << s.error().message;
}

TEST(FileSpoolStore, AWriteTheKernelRefusesIsReportedWithThePath) {
  // A real write error from the kernel without a full filesystem: a file-size limit
  // (RLIMIT_FSIZE; SIGXFSZ ignored, so write() fails with EFBIG) for this test only.
  TempDirectory dir;
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 64 * 1024;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  Status s;
  std::string path;
  {
    SpoolFifo fifo(1024, std::make_unique<FileSpoolStore>(dir.path(), "link"));
    const std::string chunk(16 * 1024, 'x');
    for (int i = 0; i < 10 && s; ++i) s = fifo.append(chunk);
    path = fifo.path();
    EXPECT_LE(fifo.size(), 64u * 1024 + 1024) << "nothing past the failed write is held";
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, old_handler);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().kind, Error::Kind::Storage);
  EXPECT_NE(s.error().message.find(dir.path() + "/link.spool"), std::string::npos)
      << s.error().message;
  EXPECT_NE(s.error().message.find("File too large"), std::string::npos) << s.error().message;
  EXPECT_FALSE(fs::exists(path)) << "deleted on close, after an error too";
}

TEST(SpoolLimit, DerivedFromTheSnapshotAndCappedByTheDisk) {
  constexpr uint64_t kMiB = 1 << 20, kGiB = 1ULL << 30;
  const DiskSpace roomy{500 * kGiB, 1000 * kGiB};
  // 2 x the announced size + 256 MiB.
  EXPECT_EQ(spoolLimitFor(std::nullopt, 512 * kMiB, roomy).bytes, 1280 * kMiB);
  // Unknown size (a diskless snapshot before its used-mem): 4 GiB.
  EXPECT_EQ(spoolLimitFor(std::nullopt, 0, roomy).bytes, 4 * kGiB);
  // Configured: as configured.
  EXPECT_EQ(spoolLimitFor(100 * kGiB, 0, roomy).bytes, 100 * kGiB);
  EXPECT_EQ(spoolLimitFor(100 * kGiB, 0, roomy).why, "spool_limit");
  // Never more than the free space minus min(1 GiB, 10%).
  const DiskSpace tight{3 * kGiB, 100 * kGiB};
  SpoolLimit l = spoolLimitFor(std::nullopt, 10 * kGiB, tight);
  EXPECT_EQ(l.bytes, 2 * kGiB);
  EXPECT_NE(l.why.find("capped by the free space"), std::string::npos) << l.why;
  EXPECT_EQ(spoolLimitFor(50 * kGiB, 0, tight).bytes, 2 * kGiB);
  const DiskSpace small_fs{900 * kMiB, 2 * kGiB};  // margin 10% of 2 GiB
  EXPECT_EQ(spoolLimitFor(std::nullopt, 0, small_fs).bytes, 900 * kMiB - (2 * kGiB) / 10);
  // A full disk still leaves the memory part (it needs no disk); a limit below it is kept.
  const DiskSpace full{10 * kMiB, 100 * kGiB};
  EXPECT_EQ(spoolLimitFor(std::nullopt, 10 * kGiB, full).bytes, uint64_t{kSpoolMemoryBytes});
  EXPECT_EQ(spoolLimitFor(kMiB, 0, full).bytes, kMiB);
  // Without the disk's figures: uncapped, and said.
  EXPECT_NE(spoolLimitFor(std::nullopt, 0, std::nullopt).why.find("could not be read"),
            std::string::npos);
}

TEST(Spool, LeftoverFilesAreRemovedAtStart) {
  TempDirectory dir;
  { std::ofstream(dir.path() + "/a.spool") << "x"; }
  { std::ofstream(dir.path() + "/b.1.spool") << "x"; }
  { std::ofstream(dir.path() + "/keep.txt") << "x"; }
  EXPECT_EQ(removeLeftoverSpools(dir.path()), 2u);
  EXPECT_EQ(filesIn(dir.path()), 1u);
  EXPECT_EQ(removeLeftoverSpools(dir.path() + "/missing"), 0u);
  EXPECT_EQ(formatBytes(512'300'000), "512.3 MB");
  EXPECT_EQ(formatBytes(900), "900 B");
}

}  // namespace
}  // namespace xdcr::source
