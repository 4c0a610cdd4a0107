// The collection expiry policies of interface.md §6.3 (expiry-semantics.md §8): parsed into
// CollectionConfig, shown in the redacted config, and every invalid combination refused with a
// message that says what to do. Suite name contains "config" (ctest -R config).

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "config/config.h"

namespace xdcr::config {
namespace {

using std::chrono::milliseconds;
using testing::HasSubstr;

std::string withCollections(const std::string& collections) {
  return R"(clusters:
  a:
    address: 127.0.0.1:7001
  b:
    address: 127.0.0.1:7002
    buckets:
      - db: 0
        max_ttl: 0
        collections:
)" + collections +
         R"(pipelines:
  - {name: p, source: a, target: b}
)";
}

std::vector<std::string> errorsOf(const LoadResult& r) {
  std::vector<std::string> out;
  for (const auto& d : r.diagnostics) {
    if (d.severity == Diagnostic::Severity::Error) out.push_back(d.format());
  }
  return out;
}

TEST(PolicyConfig, TheExampleOfInterfaceLoads) {
  auto r =
      loadConfigString(withCollections(R"(          - {name: carts, keys: "cart:*", default_ttl: 1h}
          - {name: docs, keys: "doc:*", ttl_field: ttl, default_ttl: -1}
          - {name: sess, keys: "sess:*", expire_at_field: expireAt, expire_after: 0s}
          - {name: tokens, keys: "tok:*", max_lifetime: 90d}
)"),
                       "t.yaml");
  ASSERT_TRUE(r.ok()) << testing::PrintToString(errorsOf(r));
  const auto& cs = r.config->cluster("b")->buckets[0].collections;
  ASSERT_EQ(cs.size(), 4U);
  EXPECT_EQ(cs[0].default_ttl, milliseconds(3'600'000));
  EXPECT_EQ(cs[1].default_ttl, CollectionConfig::kNoDefault);
  EXPECT_EQ(cs[1].ttl_field, "ttl");
  EXPECT_EQ(cs[2].expire_at_field, "expireAt");
  EXPECT_EQ(cs[2].expire_after, milliseconds(0));
  EXPECT_EQ(cs[3].max_lifetime, milliseconds(90LL * 86'400'000));
  EXPECT_EQ(cs[3].default_ttl, milliseconds(0));
  const std::string json = redactedJson(*r.config);
  EXPECT_THAT(json, HasSubstr(R"("default_ttl": "1h")"));
  EXPECT_THAT(json, HasSubstr(R"("default_ttl": -1)"));
  EXPECT_THAT(json, HasSubstr(R"("ttl_field": "ttl")"));
  EXPECT_THAT(json, HasSubstr(R"("expire_at_field": "expireAt")"));
  EXPECT_THAT(json, HasSubstr(R"("max_lifetime": "90d")"));
}

struct Bad {
  const char* name;
  const char* collections;
  const char* error;  // a part of the one error expected
};

class PolicyConfigInvalid : public testing::TestWithParam<Bad> {};

TEST_P(PolicyConfigInvalid, IsRefusedWithWhatToDo) {
  auto r = loadConfigString(withCollections(GetParam().collections), "t.yaml");
  EXPECT_FALSE(r.ok());
  auto errors = errorsOf(r);
  ASSERT_EQ(errors.size(), 1U) << testing::PrintToString(errors);
  EXPECT_THAT(errors[0], HasSubstr(GetParam().error));
}

INSTANTIATE_TEST_SUITE_P(
    config, PolicyConfigInvalid,
    testing::Values(
        Bad{"DefaultTtlZero", "          - {name: c, keys: \"c:*\", default_ttl: 0}\n",
            "t.yaml:10:49: error: default_ttl must not be 0 (Cosmos DB takes -1 or a positive "
            "number); use -1"},
        Bad{"DefaultTtlNegative", "          - {name: c, keys: \"c:*\", default_ttl: -5}\n",
            "default_ttl \"-5\" is neither -1 nor a positive duration; use -1"},
        Bad{"DefaultTtlNotADuration", "          - {name: c, keys: \"c:*\", default_ttl: soon}\n",
            "invalid duration \"soon\" for default_ttl"},
        Bad{"TtlFieldWithoutDefault", "          - {name: c, keys: \"c:*\", ttl_field: ttl}\n",
            "ttl_field needs default_ttl on the same collection (Cosmos DB ignores a document's "
            "ttl when its container has no DefaultTTL); add default_ttl: -1"},
        Bad{"BothFields",
            "          - {name: c, keys: \"c:*\", default_ttl: -1, ttl_field: ttl, "
            "expire_at_field: at}\n",
            "ttl_field (line 10) and expire_at_field are both set on this collection"},
        Bad{"ExpireAfterAlone", "          - {name: c, keys: \"c:*\", expire_after: 1h}\n",
            "expire_after is added to the date in expire_at_field, which this collection does "
            "not set; add expire_at_field: NAME or remove expire_after"},
        Bad{"NegativeExpireAfter",
            "          - {name: c, keys: \"c:*\", expire_at_field: at, expire_after: -1h}\n",
            "expire_after must not be negative"},
        Bad{"NegativeMaxLifetime", "          - {name: c, keys: \"c:*\", max_lifetime: -1d}\n",
            "max_lifetime must not be negative"},
        Bad{"EmptyField", "          - {name: c, keys: \"c:*\", expire_at_field: \"\"}\n",
            "name the JSON field of the document"},
        Bad{"OnABucket", "          - {name: c, keys: \"c:*\", max_lifetimes: 1d}\n",
            "max_lifetimes"}),
    [](const testing::TestParamInfo<Bad>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace xdcr::config
