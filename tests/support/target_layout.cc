#include "tests/support/target_layout.h"

#include <fnmatch.h>

#include <sstream>

namespace xdcr::test {
namespace {

std::string yamlDuration(int64_t s) {
  return s == 0 ? "0" : std::to_string(s) + "s";
}

}  // namespace

MaxTtlOf maxTtlOf(const std::vector<BucketSpec>& buckets, int db, const std::string& key) {
  for (const auto& bucket : buckets) {
    if (bucket.db != db) continue;
    for (const auto& c : bucket.collections) {
      if (::fnmatch(c.glob.c_str(), key.c_str(), 0) == 0) {
        return {bucket.max_ttl_s, c.max_ttl_s, c.name, c.default_ttl_s, c.max_lifetime_s};
      }
    }
    return {bucket.max_ttl_s, 0, "_default"};
  }
  return {0, 0, "(no bucket)"};
}

int64_t specClamp(int64_t e, int64_t m, int64_t now) {
  if (m == 0) return e;
  if (e == 0 || e > now + m) return now + m;
  return e;
}

std::string clusterYaml(const std::string& name, uint16_t port,
                        const std::vector<BucketSpec>& buckets) {
  std::ostringstream yaml;
  yaml << "  " << name << ":\n"
       << "    type: redis\n"
       << "    address: \"127.0.0.1:" << port << "\"\n";
  if (!buckets.empty()) yaml << "    buckets:\n";
  for (const auto& bucket : buckets) {
    yaml << "      - db: " << bucket.db << "\n"
         << "        max_ttl: " << yamlDuration(bucket.max_ttl_s) << "\n"
         << "        collections:\n";
    for (const auto& c : bucket.collections) {
      yaml << "          - {name: " << c.name << ", keys: \"" << c.glob
           << "\", max_ttl: " << yamlDuration(c.max_ttl_s);
      if (c.default_ttl_s != 0) {
        yaml << ", default_ttl: " << (c.default_ttl_s < 0 ? "-1" : yamlDuration(c.default_ttl_s));
      }
      if (c.max_lifetime_s != 0) yaml << ", max_lifetime: " << yamlDuration(c.max_lifetime_s);
      yaml << "}\n";
    }
  }
  return yaml.str();
}

std::string pipelineConfigYaml(const std::string& state_dir, uint16_t source_port,
                               uint16_t target_port, const std::vector<BucketSpec>& buckets,
                               const std::string& pipeline_options) {
  std::ostringstream yaml;
  yaml << "agent:\n"
       << "  state_dir: \"" << state_dir << "\"\n"
       << "  log_level: info\n"
       << "clusters:\n"
       << "  src: {type: redis, address: \"127.0.0.1:" << source_port << "\"}\n"
       << clusterYaml("dst", target_port, buckets) << "pipelines:\n"
       << "  - {name: p, source: src, target: dst, checkpoint_interval: 1s"
       << (pipeline_options.empty() ? "" : ", " + pipeline_options) << "}\n";
  return yaml.str();
}

}  // namespace xdcr::test
