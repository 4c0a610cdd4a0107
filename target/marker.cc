#include "target/marker.h"

#include <fmt/format.h>

#include <random>

namespace xdcr::target {

std::string newMarkerToken() {
  thread_local std::mt19937_64 gen([] {
    std::random_device rd;
    std::seed_seq seq{rd(), rd(), rd(), rd()};
    return std::mt19937_64(seq);
  }());
  return fmt::format("{:016x}", gen());
}

}  // namespace xdcr::target
