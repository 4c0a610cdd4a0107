#pragma once
// Helpers shared by the fuzz targets: a property check that aborts with a message (so libFuzzer
// saves the input as a crash), and a deterministic generator of split points and chunk sizes
// derived from the input itself (the inputs stay plain RESP / RDB / YAML, so the seed corpus is
// made of real files, and every mutation also moves the splits).

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace xdcr::fuzz {

[[noreturn]] inline void checkFailed(const char* expr, const char* file, int line,
                                     const std::string& detail) {
  std::fprintf(stderr, "\n==== property violated: %s\n     at %s:%d\n", expr, file, line);
  if (!detail.empty()) std::fprintf(stderr, "     %s\n", detail.c_str());
  std::fflush(stderr);
  std::abort();
}

/** CHECK(cond) or CHECK(cond, "detail " + std::to_string(x)): the property must hold. */
#define FUZZ_CHECK(cond, ...)                                                                    \
  do {                                                                                           \
    if (!(cond)) ::xdcr::fuzz::checkFailed(#cond, __FILE__, __LINE__, std::string(__VA_ARGS__)); \
  } while (0)

/** FNV-1a of the input: the seed of the splits. */
inline uint64_t hashBytes(std::string_view data) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : data) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

/** splitmix64: cheap, deterministic, good enough to pick split points. */
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  /** Uniform in [0, n] (n inclusive). */
  size_t upTo(size_t n) { return static_cast<size_t>(next() % (static_cast<uint64_t>(n) + 1)); }
  /** A chunk size: mostly small (1..16), sometimes large, so both byte-by-byte and bulk feeds
      are exercised. */
  size_t chunk(size_t left) {
    if (left == 0) return 0;
    uint64_t r = next();
    size_t n = (r & 3) == 0 ? 1 + (r >> 8) % left : 1 + (r >> 8) % 16;
    return n < left ? n : left;
  }

 private:
  uint64_t s_;
};

}  // namespace xdcr::fuzz
