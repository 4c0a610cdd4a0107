#include "tests/support/temp_dir.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace xdcr::test {

TempDir::TempDir(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string base = (tmp != nullptr && *tmp != '\0') ? tmp : "/tmp";
  std::string pattern = base + "/" + prefix + "-XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (::mkdtemp(buffer.data()) == nullptr) {
    throw std::runtime_error("mkdtemp(" + pattern + ") failed: " + std::strerror(errno));
  }
  path_ = buffer.data();
}

TempDir::~TempDir() {
  remove();
}

TempDir::TempDir(TempDir&& other) noexcept : path_(std::move(other.path_)) {
  other.path_.clear();
}

TempDir& TempDir::operator=(TempDir&& other) noexcept {
  if (this != &other) {
    remove();
    path_ = std::move(other.path_);
    other.path_.clear();
  }
  return *this;
}

void TempDir::remove() {
  if (path_.empty()) {
    return;
  }
  if (std::getenv("XDCR_KEEP_TEST_DIRS") != nullptr) {
    std::cerr << "XDCR_KEEP_TEST_DIRS: keeping " << path_ << "\n";
  } else {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  path_.clear();
}

std::string readFileText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return "";
  }
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void writeFileText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.flush();
  if (!out) {
    throw std::runtime_error("cannot write " + path);
  }
}

std::string lastLines(const std::string& text, size_t lines) {
  if (lines == 0 || text.empty()) {
    return "";
  }
  size_t pos = text.size();
  // A trailing newline ends the last line; it does not start an empty one.
  if (text[pos - 1] == '\n') {
    --pos;
  }
  size_t found = 0;
  while (pos > 0) {
    size_t nl = text.rfind('\n', pos - 1);
    if (nl == std::string::npos) {
      return text;
    }
    if (++found == lines) {
      return text.substr(nl + 1);
    }
    pos = nl;
  }
  return text;
}

}  // namespace xdcr::test
