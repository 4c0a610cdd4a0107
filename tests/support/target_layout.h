#pragma once
// A target's maxTTL layout (expiry-semantics.md §3) for model-based tests: one table from which
// both the agent's YAML and the test's expectations are derived, so the two cannot disagree.
// Deliberately independent of the agent's own code (config/, target/max_ttl.*): a test model
// that reused them could not catch their bugs.

#include <cstdint>
#include <string>
#include <vector>

namespace xdcr::test {

struct CollectionSpec {
  std::string name;
  std::string glob;       // Redis MATCH syntax, matched on the TARGET key name
  int64_t max_ttl_s = 0;  // 0 inherits the bucket's
  // Expiry policies (expiry-semantics.md §8): default_ttl (0 = off, -1 = "-1") and
  // max_lifetime (0 = none), in seconds.
  int64_t default_ttl_s = 0;
  int64_t max_lifetime_s = 0;
};

struct BucketSpec {
  int db = 0;  // target db
  int64_t max_ttl_s = 0;
  std::vector<CollectionSpec> collections;  // first match wins
};

/** Where a key falls: its bucket's and collection's max_ttl, and the collection's name. */
struct MaxTtlOf {
  int64_t bucket_s = 0;
  int64_t collection_s = 0;   // 0 for the default collection
  std::string collection;     // "_default" when no pattern matched, "(no bucket)" without bucket
  int64_t default_ttl_s = 0;  // the collection's policies (§8)
  int64_t max_lifetime_s = 0;
  /** Effective maxTTL M: the collection's if > 0, else the bucket's. */
  int64_t effectiveMs() const { return (collection_s > 0 ? collection_s : bucket_s) * 1000; }
};
MaxTtlOf maxTtlOf(const std::vector<BucketSpec>& buckets, int db, const std::string& key);

/** Rule 4 as the spec writes it: target deadline for `e` (0 = none) under `m` at `now`. */
int64_t specClamp(int64_t e, int64_t m, int64_t now);

/**
 * The `clusters:` entry of a redis cluster `name` on 127.0.0.1:`port` with `buckets` (its maxTTL
 * layout when it is a target), indented for the `clusters:` mapping; ends with a newline.
 */
std::string clusterYaml(const std::string& name, uint16_t port,
                        const std::vector<BucketSpec>& buckets = {});

/**
 * An agent config: cluster `src` (source) -> `dst` (target, with `buckets`), one pipeline `p`
 * with a 1 s checkpoint interval, state under `state_dir`. `pipeline_options` is added to the
 * pipeline's flow mapping as it is, e.g. "filters: {strip_ttl: true}".
 */
std::string pipelineConfigYaml(const std::string& state_dir, uint16_t source_port,
                               uint16_t target_port, const std::vector<BucketSpec>& buckets,
                               const std::string& pipeline_options = "");

}  // namespace xdcr::test
