// parseDuration(): the only duration syntax of the config file (interface.md §2). Tests are
// instantiated as `config/...` so that `ctest -R config` selects them.

#include <gtest/gtest.h>

#include <chrono>
#include <optional>
#include <string>

#include "config/config.h"

namespace xdcr::config {
namespace {

using std::chrono::milliseconds;

struct DurationCase {
  std::string text;
  std::optional<milliseconds> expected;  // nullopt = must be rejected
};

class ParseDurationTest : public testing::TestWithParam<DurationCase> {};

TEST_P(ParseDurationTest, ParsesOrRejects) {
  const DurationCase& c = GetParam();
  std::optional<Duration> got = parseDuration(c.text);
  if (c.expected) {
    ASSERT_TRUE(got.has_value()) << "\"" << c.text << "\" should parse";
    EXPECT_EQ(got->count(), c.expected->count()) << c.text;
  } else {
    EXPECT_FALSE(got.has_value()) << "\"" << c.text << "\" should be rejected, got " << got->count()
                                  << "ms";
  }
}

INSTANTIATE_TEST_SUITE_P(
    config, ParseDurationTest,
    testing::Values(
        DurationCase{"250ms", milliseconds(250)}, DurationCase{"30s", milliseconds(30'000)},
        DurationCase{"10m", milliseconds(600'000)}, DurationCase{"2h", milliseconds(7'200'000)},
        DurationCase{"1d", milliseconds(86'400'000)},
        DurationCase{"45", milliseconds(45'000)},  // a bare integer is seconds
        DurationCase{"0", milliseconds(0)}, DurationCase{"0ms", milliseconds(0)},
        DurationCase{"1500ms", milliseconds(1500)}, DurationCase{"007s", milliseconds(7000)},
        DurationCase{"-1s", std::nullopt},                                     // negative
        DurationCase{"-5", std::nullopt}, DurationCase{"1.5s", std::nullopt},  // fractions
        DurationCase{"10x", std::nullopt},                                     // unknown unit
        DurationCase{"", std::nullopt}, DurationCase{"s", std::nullopt},       // a unit alone
        DurationCase{"ms", std::nullopt}, DurationCase{"10 s", std::nullopt},  // no spaces
        DurationCase{"10S", std::nullopt},  // units are lower case
        DurationCase{"+5s", std::nullopt}, DurationCase{"1h30m", std::nullopt},  // one unit only
        DurationCase{"99999999999999999999", std::nullopt},                      // overflows int64
        DurationCase{"9223372036854775807d", std::nullopt}),
    // Test names are "Valid3" / "Invalid12": the texts themselves ("", "-1s") are not valid
    // test names, and a failure prints the text anyway.
    [](const testing::TestParamInfo<DurationCase>& info) {
      return (info.param.expected ? "Valid" : "Invalid") + std::to_string(info.index);
    });

}  // namespace
}  // namespace xdcr::config
