#pragma once
// Temporary directories and small file helpers for tests.

#include <cstddef>
#include <string>

namespace xdcr::test {

/**
 * A fresh directory under $TMPDIR (or /tmp), removed with its contents in the destructor unless
 * the environment variable XDCR_KEEP_TEST_DIRS is set (then its path is printed to stderr so a
 * failed run can be inspected).
 */
class TempDir {
 public:
  /** `prefix` becomes part of the directory name, e.g. "xdcr-foundation". Throws on failure. */
  explicit TempDir(const std::string& prefix = "xdcr-test");
  ~TempDir();
  TempDir(TempDir&& other) noexcept;
  TempDir& operator=(TempDir&& other) noexcept;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  /** path() + "/" + name. */
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  void remove();

  std::string path_;
};

/** The whole file, or "" if it cannot be read. */
std::string readFileText(const std::string& path);
/** Writes (truncates) a file; throws std::runtime_error on failure. */
void writeFileText(const std::string& path, const std::string& text);
/** The last `lines` lines of `text`. */
std::string lastLines(const std::string& text, size_t lines);

}  // namespace xdcr::test
