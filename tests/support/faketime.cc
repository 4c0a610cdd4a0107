#include "tests/support/faketime.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#ifndef XDCR_FTSHIM_LIBRARY
#error "XDCR_FTSHIM_LIBRARY (path of the xdcr_ftshim preload) must be defined by CMake"
#endif

namespace xdcr::test {
namespace {

// The file must exist before the server starts (its first clock read is at start-up).
std::string initialTimestampFile(const TempDir& dir, double skew_s) {
  const std::string path = dir.file("faketime.rc");
  writeFakeTimeFile(path, skew_s);
  return path;
}

}  // namespace

std::string libfaketimePath() {
  for (const char* p : {"/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
                        "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
                        "/usr/lib/faketime/libfaketime.so.1"}) {
    if (::access(p, R_OK) == 0) {
      return p;
    }
  }
  return {};
}

std::string ftshimPath() {
  const std::string path = XDCR_FTSHIM_LIBRARY;
  return ::access(path.c_str(), R_OK) == 0 ? path : std::string();
}

bool fakeTimeAvailable() {
  return !libfaketimePath().empty() && !ftshimPath().empty();
}

std::string fakeTimeOffsetText(double seconds) {
  if (!std::isfinite(seconds)) {
    throw std::invalid_argument("fakeTimeOffsetText: skew is not a finite number");
  }
  // Microsecond precision, trailing zeros dropped: +30, -0.25, +0.000001, +0.
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%+.6f", seconds);
  std::string text = buf;
  while (text.back() == '0') {
    text.pop_back();
  }
  if (text.back() == '.') {
    text.pop_back();
  }
  if (text == "-0") {
    text = "+0";
  }
  return text;
}

std::vector<std::pair<std::string, std::string>> fakeTimeEnvironment(
    const std::string& timestamp_file) {
  const std::string libfaketime = libfaketimePath();
  const std::string shim = ftshimPath();
  if (libfaketime.empty() || shim.empty()) {
    throw std::runtime_error(
        libfaketime.empty()
            ? "libfaketime not installed (Debian package faketime; scripts/install-deps.sh --test)"
            : "the ftshim preload was not built: " + std::string(XDCR_FTSHIM_LIBRARY));
  }
  // ftshim first: it must interpose clock_gettime/pthread_cond_init before libfaketime.
  return {{"LD_PRELOAD", shim + " " + libfaketime},
          {"FAKETIME_TIMESTAMP_FILE", timestamp_file},
          {"FAKETIME_NO_CACHE", "1"},
          {"FAKETIME_DONT_FAKE_MONOTONIC", "1"}};
}

void writeFakeTimeFile(const std::string& path, double seconds) {
  // libfaketime opens the file by name on every read: a rename replaces it in one step, so it
  // never sees a half-written or empty file.
  const std::string tmp = path + ".tmp";
  writeFileText(tmp, fakeTimeOffsetText(seconds) + "\n");
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw std::runtime_error("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
  }
}

FakeTimeRedis::FakeTimeRedis(double skew_s, std::vector<std::string> extra_args,
                             std::chrono::milliseconds start_timeout)
    : dir_("xdcr-faketime"),
      timestamp_file_(initialTimestampFile(dir_, skew_s)),
      skew_s_(skew_s),
      server_(std::move(extra_args), start_timeout, fakeTimeEnvironment(timestamp_file_)) {}

void FakeTimeRedis::setSkew(double seconds) {
  writeFakeTimeFile(timestamp_file_, seconds);
  skew_s_ = seconds;
}

}  // namespace xdcr::test
