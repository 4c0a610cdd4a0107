// The YAML loader: the full example of interface.md §2 loads into the expected typed values, and
// every invalid file gets the exact `FILE:LINE:COL: error: MESSAGE` line a user would see from
// `xdcr-agent validate`.
//
// Every test name contains "config" (suite `config`, instantiation prefix `config/`) so that
// `ctest -R config` selects exactly this module's tests.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "config/config.h"

namespace xdcr::config {
namespace {

using std::chrono::milliseconds;
using testing::ElementsAre;
using testing::HasSubstr;
using testing::Not;

constexpr char kFile[] = "t.yaml";

std::vector<std::string> formatAll(const LoadResult& result, Diagnostic::Severity severity) {
  std::vector<std::string> lines;
  for (const auto& d : result.diagnostics) {
    if (d.severity == severity) {
      lines.push_back(d.format());
    }
  }
  return lines;
}

std::vector<std::string> errorsOf(const LoadResult& result) {
  return formatAll(result, Diagnostic::Severity::Error);
}

std::vector<std::string> warningsOf(const LoadResult& result) {
  return formatAll(result, Diagnostic::Severity::Warning);
}

/** This process's user name, as secret-file messages name it. */
std::string userName() {
  const struct passwd* pw = ::getpwuid(::geteuid());
  return pw != nullptr ? pw->pw_name : "?";
}

/** Sets an environment variable for the lifetime of the object. */
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_.c_str()); }

 private:
  std::string name_;
};

/** A fresh directory, removed with its contents at the end of the test. */
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "xdcr-config-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::runtime_error("mkdtemp failed");
    }
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::string write(const std::string& name, const std::string& text) const {
    std::filesystem::path file = path_ / name;
    std::ofstream(file, std::ios::binary) << text;
    return file.string();
  }

 private:
  std::filesystem::path path_;
};

// interface.md §2, verbatim apart from the explanatory comments.
constexpr char kFullExample[] = R"(agent:
  admin_listen: 127.0.0.1:9464
  state_dir: ./xdcr-state
  log_level: info
  log_format: text

clock:
  ntp_servers: ["127.0.0.1:11123"]
  nts: false
  nts_ca_file: ""
  check_interval: 30s
  max_skew: 500ms
  on_skew: warn

clusters:
  east:
    type: redis
    address: 127.0.0.1:7001
    username: replicator
    password: {env: EAST_PASSWORD}
    tls:
      ca_file: ca.crt
      cert_file: client.crt
      key_file: client.key
      server_name: east.example
      verify: true
  west:
    type: redis
    address: 127.0.0.1:7002
    buckets:
      - db: 0
        max_ttl: 10m
        collections:
          - name: sessions
            keys: "sess:*"
            max_ttl: 60s

pipelines:
  - name: east-to-west
    source: east
    target: west
    dbs: {0: 0}
    filters:
      include_keys: []
      exclude_keys: []
      drop_expirations: false
      drop_deletions: false
      strip_ttl: false
      replicate_flush: false
    key_rewrite: []
    checkpoint_interval: 1s
)";

constexpr char kMinimal[] = R"(clusters:
  a:
    address: 127.0.0.1:7001
  b:
    address: 127.0.0.1:7002
pipelines:
  - name: p
    source: a
    target: b
)";

TEST(config, FullExampleLoadsEveryField) {
  ScopedEnv env("EAST_PASSWORD", "east-secret-value");
  LoadResult result = loadConfigString(kFullExample, kFile);
  ASSERT_TRUE(result.ok()) << testing::PrintToString(errorsOf(result));
  EXPECT_TRUE(result.diagnostics.empty());
  const Config& c = *result.config;
  // loadConfigString: relative paths are relative to the current directory.
  std::filesystem::path cwd = std::filesystem::current_path();

  EXPECT_EQ(c.path, kFile);
  ASSERT_TRUE(c.agent.admin_listen.has_value());
  EXPECT_EQ(*c.agent.admin_listen, "127.0.0.1:9464");
  EXPECT_EQ(c.agent.state_dir, (cwd / "xdcr-state").string());
  EXPECT_EQ(c.agent.log_level, LogLevel::Info);
  EXPECT_EQ(c.agent.log_format, LogFormat::Text);

  EXPECT_THAT(c.clock.ntp_servers, ElementsAre("127.0.0.1:11123"));
  EXPECT_FALSE(c.clock.nts);
  EXPECT_EQ(c.clock.nts_ca_file, "");
  EXPECT_EQ(c.clock.check_interval, milliseconds(30'000));
  EXPECT_EQ(c.clock.max_skew, milliseconds(500));
  EXPECT_EQ(c.clock.on_skew, SkewAction::Warn);

  ASSERT_EQ(c.clusters.size(), 2u);
  const ClusterConfig* east = c.cluster("east");
  ASSERT_NE(east, nullptr);
  EXPECT_EQ(east->name, "east");
  EXPECT_EQ(east->type, "redis");
  EXPECT_EQ(east->host, "127.0.0.1");
  EXPECT_EQ(east->port, 7001);
  EXPECT_EQ(east->address(), "127.0.0.1:7001");
  EXPECT_EQ(east->username, "replicator");
  EXPECT_EQ(east->password.kind, Secret::Kind::Env);
  EXPECT_EQ(east->password.ref, "EAST_PASSWORD");
  EXPECT_EQ(east->password.value, "east-secret-value");
  EXPECT_EQ(east->password.mark.line, 20);
  EXPECT_EQ(east->password.mark.column, 15);
  ASSERT_TRUE(east->tls.has_value());
  EXPECT_EQ(east->tls->ca_file, (cwd / "ca.crt").string());
  EXPECT_EQ(east->tls->cert_file, (cwd / "client.crt").string());
  EXPECT_EQ(east->tls->key_file, (cwd / "client.key").string());
  EXPECT_EQ(east->tls->server_name, "east.example");
  EXPECT_TRUE(east->tls->verify);
  EXPECT_TRUE(east->buckets.empty());
  EXPECT_EQ(east->mark.line, 16);
  EXPECT_EQ(east->mark.column, 3);

  const ClusterConfig* west = c.cluster("west");
  ASSERT_NE(west, nullptr);
  EXPECT_EQ(west->address(), "127.0.0.1:7002");
  EXPECT_FALSE(west->password.present());
  EXPECT_FALSE(west->tls.has_value());
  EXPECT_EQ(west->username, "");
  ASSERT_EQ(west->buckets.size(), 1u);
  const BucketConfig& bucket = west->buckets[0];
  EXPECT_EQ(bucket.db, 0);
  EXPECT_EQ(bucket.max_ttl, milliseconds(600'000));
  EXPECT_EQ(bucket.mark.line, 31);
  ASSERT_EQ(bucket.collections.size(), 1u);
  EXPECT_EQ(bucket.collections[0].name, "sessions");
  EXPECT_EQ(bucket.collections[0].keys, "sess:*");
  EXPECT_EQ(bucket.collections[0].max_ttl, milliseconds(60'000));
  EXPECT_EQ(bucket.collections[0].mark.line, 34);

  ASSERT_EQ(c.pipelines.size(), 1u);
  const PipelineConfig* p = c.pipeline("east-to-west");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->source, "east");
  EXPECT_EQ(p->target, "west");
  EXPECT_EQ(p->dbs, (std::map<int, int>{{0, 0}}));
  EXPECT_TRUE(p->filters.include_keys.empty());
  EXPECT_TRUE(p->filters.exclude_keys.empty());
  EXPECT_FALSE(p->filters.drop_expirations);
  EXPECT_FALSE(p->filters.drop_deletions);
  EXPECT_FALSE(p->filters.strip_ttl);
  EXPECT_FALSE(p->filters.replicate_flush);
  EXPECT_TRUE(p->key_rewrite.empty());
  EXPECT_EQ(p->checkpoint_interval, milliseconds(1000));
  EXPECT_EQ(p->mark.line, 39);
  EXPECT_EQ(p->mark.column, 5);
}

TEST(config, DefaultsWhenSectionsAreOmitted) {
  LoadResult result = loadConfigString(kMinimal, kFile);
  ASSERT_TRUE(result.ok()) << testing::PrintToString(errorsOf(result));
  const Config& c = *result.config;
  EXPECT_FALSE(c.agent.admin_listen.has_value());
  EXPECT_EQ(c.agent.state_dir, (std::filesystem::current_path() / "xdcr-state").string());
  EXPECT_EQ(c.agent.log_level, LogLevel::Info);
  EXPECT_EQ(c.agent.log_format, LogFormat::Text);
  EXPECT_EQ(c.agent.threads, 1);
  EXPECT_TRUE(c.clock.ntp_servers.empty());
  EXPECT_FALSE(c.clock.nts);
  EXPECT_EQ(c.clock.check_interval, milliseconds(30'000));
  EXPECT_EQ(c.clock.max_skew, milliseconds(500));
  EXPECT_EQ(c.clock.on_skew, SkewAction::Warn);
  EXPECT_EQ(c.cluster("a")->type, "redis");
  EXPECT_FALSE(c.cluster("a")->tls.has_value());
  EXPECT_TRUE(c.pipelines[0].dbs.empty());
  EXPECT_EQ(c.pipelines[0].checkpoint_interval, milliseconds(1000));
}

TEST(config, ValuesOtherThanDefaults) {
  LoadResult result = loadConfigString(R"(agent:
  state_dir: /var/lib/xdcr
  log_level: debug
  log_format: json
  threads: 4
clock:
  ntp_servers: [ntp1.example, "[::1]:11123"]
  nts: true
  nts_ca_file: /etc/ssl/nts.pem
  check_interval: 2m
  max_skew: 0
  on_skew: compensate
clusters:
  a:
    address: redis-a.example
    password: plain-pass
    tls: {verify: false}
  b:
    address: "[::1]:7002"
    buckets:
      - db: 1023
pipelines:
  - name: p.1_x
    source: a
    target: b
    dbs: {0: 5, 3: 4}
    filters:
      include_keys: ["^user:", "^sess:"]
      exclude_keys: ["tmp$"]
      drop_expirations: true
      drop_deletions: True
      strip_ttl: TRUE
      replicate_flush: true
    key_rewrite:
      - {from: "sess:", to: "eu:sess:"}
      - {from: "old:", to: ""}
    checkpoint_interval: 250ms
)",
                                       kFile);
  ASSERT_TRUE(result.ok()) << testing::PrintToString(errorsOf(result));
  const Config& c = *result.config;
  EXPECT_EQ(c.agent.state_dir, "/var/lib/xdcr");
  EXPECT_EQ(c.agent.log_level, LogLevel::Debug);
  EXPECT_EQ(c.agent.log_format, LogFormat::Json);
  EXPECT_EQ(c.agent.threads, 4);
  EXPECT_THAT(c.clock.ntp_servers, ElementsAre("ntp1.example", "[::1]:11123"));
  EXPECT_TRUE(c.clock.nts);
  EXPECT_EQ(c.clock.nts_ca_file, "/etc/ssl/nts.pem");
  EXPECT_EQ(c.clock.check_interval, milliseconds(120'000));
  EXPECT_EQ(c.clock.max_skew, milliseconds(0));
  EXPECT_EQ(c.clock.on_skew, SkewAction::Compensate);
  const ClusterConfig& a = *c.cluster("a");
  EXPECT_EQ(a.host, "redis-a.example");
  EXPECT_EQ(a.port, 6379);  // default port
  EXPECT_EQ(a.password.kind, Secret::Kind::Plain);
  EXPECT_EQ(a.password.value, "plain-pass");
  ASSERT_TRUE(a.tls.has_value());
  EXPECT_FALSE(a.tls->verify);
  EXPECT_EQ(a.tls->ca_file, "");
  const ClusterConfig& b = *c.cluster("b");
  EXPECT_EQ(b.host, "::1");
  EXPECT_EQ(b.port, 7002);
  EXPECT_EQ(b.buckets[0].db, 1023);
  EXPECT_EQ(b.buckets[0].max_ttl, milliseconds(0));
  const PipelineConfig& p = c.pipelines[0];
  EXPECT_EQ(p.name, "p.1_x");
  EXPECT_EQ(p.dbs, (std::map<int, int>{{0, 5}, {3, 4}}));
  ASSERT_EQ(p.filters.include_keys.size(), 2u);
  EXPECT_EQ(p.filters.include_keys[1].value, "^sess:");
  EXPECT_EQ(p.filters.include_keys[1].mark.line, 28);
  EXPECT_EQ(p.filters.include_keys[1].mark.column, 32);
  ASSERT_EQ(p.filters.exclude_keys.size(), 1u);
  EXPECT_TRUE(p.filters.drop_expirations);
  EXPECT_TRUE(p.filters.drop_deletions);
  EXPECT_TRUE(p.filters.strip_ttl);
  EXPECT_TRUE(p.filters.replicate_flush);
  ASSERT_EQ(p.key_rewrite.size(), 2u);
  EXPECT_EQ(p.key_rewrite[0].from, "sess:");
  EXPECT_EQ(p.key_rewrite[0].to, "eu:sess:");
  EXPECT_EQ(p.key_rewrite[1].to, "");
  EXPECT_EQ(p.checkpoint_interval, milliseconds(250));
}

TEST(config, FileSecretAndPathsAreRelativeToTheConfigFile) {
  TempDir dir;
  dir.write("east.pass", "file-secret-value\n");  // exactly one trailing newline is stripped
  dir.write("two-newlines.pass", "v2\n\n");
  std::string path = dir.write("agent.yaml", R"(agent:
  state_dir: state
clusters:
  a:
    address: 127.0.0.1:7001
    password: {file: east.pass}
    tls: {ca_file: certs/ca.crt}
  b:
    address: 127.0.0.1:7002
    password: {file: two-newlines.pass}
pipelines:
  - {name: p, source: a, target: b}
)");
  LoadResult result = loadConfigFile(path);
  ASSERT_TRUE(result.ok()) << testing::PrintToString(errorsOf(result));
  const Config& c = *result.config;
  EXPECT_EQ(c.path, path);
  EXPECT_EQ(c.agent.state_dir, (dir.path() / "state").string());
  const ClusterConfig& a = *c.cluster("a");
  EXPECT_EQ(a.password.kind, Secret::Kind::File);
  EXPECT_EQ(a.password.ref, "east.pass");
  EXPECT_EQ(a.password.value, "file-secret-value");
  EXPECT_EQ(a.tls->ca_file, (dir.path() / "certs" / "ca.crt").string());
  EXPECT_EQ(c.cluster("b")->password.value, "v2\n");
}

TEST(config, MissingSecretFileNamesTheFile) {
  TempDir dir;
  std::string path = dir.write("agent.yaml", R"(clusters:
  a:
    address: 127.0.0.1:7001
    password: {file: missing.pass}
  b:
    address: 127.0.0.1:7002
pipelines:
  - {name: p, source: a, target: b}
)");
  LoadResult result = loadConfigFile(path);
  EXPECT_FALSE(result.ok());
  EXPECT_THAT(errorsOf(result),
              ElementsAre(path + ":4:22: error: cannot read password file \"missing.pass\" (" +
                          (dir.path() / "missing.pass").string() + ") as user " + userName() +
                          " (uid " + std::to_string(::geteuid()) +
                          "): No such file or directory; create it or fix the path, or under "
                          "systemd pass it as a credential: LoadCredential=NAME:" +
                          (dir.path() / "missing.pass").string() +
                          " in the unit and {credential: NAME} here (a DynamicUser= service "
                          "cannot read a root-owned 0600 file)"));
}

TEST(config, NoEnvironmentSkipsSecrets) {
  ::unsetenv("XDCR_TEST_UNSET_VAR");
  std::string yaml = R"(clusters:
  a:
    address: 127.0.0.1:7001
    password: {env: XDCR_TEST_UNSET_VAR}
  b:
    address: 127.0.0.1:7002
    password: {file: /nonexistent/xdcr/secret}
pipelines:
  - {name: p, source: a, target: b}
)";
  LoadOptions options;
  options.resolve_environment = false;
  LoadResult result = loadConfigString(yaml, kFile, options);
  ASSERT_TRUE(result.ok()) << testing::PrintToString(errorsOf(result));
  EXPECT_EQ(result.config->cluster("a")->password.kind, Secret::Kind::Env);
  EXPECT_EQ(result.config->cluster("a")->password.value, "");
  EXPECT_EQ(result.config->cluster("b")->password.kind, Secret::Kind::File);

  // The same file with resolution on: both secrets are errors, neither leaks a value.
  LoadResult resolved = loadConfigString(yaml, kFile);
  EXPECT_FALSE(resolved.ok());
  EXPECT_THAT(
      errorsOf(resolved),
      ElementsAre("t.yaml:4:21: error: environment variable \"XDCR_TEST_UNSET_VAR\" is "
                  "not set; export it before starting the agent (or check the file with "
                  "validate --no-environment)",
                  "t.yaml:7:22: error: cannot read password file \"/nonexistent/xdcr/secret\" as "
                  "user " +
                      userName() + " (uid " + std::to_string(::geteuid()) +
                      "): No such file or directory; create it or fix the path, or under "
                      "systemd pass it as a credential: LoadCredential=NAME:/nonexistent/xdcr/"
                      "secret in the unit and {credential: NAME} here (a DynamicUser= service "
                      "cannot read a root-owned 0600 file)"));
}

TEST(config, UnreadableConfigFile) {
  LoadResult result = loadConfigFile("/nonexistent/xdcr/agent.yaml");
  EXPECT_FALSE(result.ok());
  EXPECT_THAT(errorsOf(result),
              ElementsAre("/nonexistent/xdcr/agent.yaml: error: cannot read the configuration "
                          "file: No such file or directory; check the path given with "
                          "-c/--config"));
}

// ---- One invalid file, one exact line -----------------------------------------------------

struct InvalidCase {
  std::string name;
  std::string yaml;
  std::string expected;    // the exact formatted error line
  size_t error_count = 1;  // how many errors the file produces in total
};

std::ostream& operator<<(std::ostream& os, const InvalidCase& c) {
  return os << c.name;
}

class InvalidConfigTest : public testing::TestWithParam<InvalidCase> {};

TEST_P(InvalidConfigTest, ReportsTheExactError) {
  const InvalidCase& c = GetParam();
  ::unsetenv("XDCR_TEST_MISSING_PASSWORD");
  LoadResult result;
  EXPECT_NO_THROW(result = loadConfigString(c.yaml, kFile));
  EXPECT_FALSE(result.ok());
  std::vector<std::string> errors = errorsOf(result);
  EXPECT_THAT(errors, testing::Contains(c.expected)) << testing::PrintToString(errors);
  EXPECT_EQ(errors.size(), c.error_count) << testing::PrintToString(errors);
}

INSTANTIATE_TEST_SUITE_P(
    config, InvalidConfigTest,
    testing::Values(
        InvalidCase{"UnknownTopLevelKey", R"(clusters:
  a: {address: "127.0.0.1:7001"}
  b: {address: "127.0.0.1:7002"}
pipelines:
  - {name: p, source: a, target: b}
logging: {}
)",
                    "t.yaml:6:1: error: unknown key \"logging\" at top level; valid keys are: "
                    "agent, clock, clusters, pipelines"},
        InvalidCase{"UnknownKeyInAgent", std::string(kMinimal) + R"(agent:
  log_lvl: debug
)",
                    "t.yaml:11:3: error: unknown key \"log_lvl\" in agent; did you mean "
                    "\"log_level\"?"},
        InvalidCase{"UnknownKeyInCluster", R"(clusters:
  a:
    adress: 127.0.0.1:7001
    address: 127.0.0.1:7001
  b:
    address: 127.0.0.1:7002
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:3:5: error: unknown key \"adress\" in cluster; did you mean "
                    "\"address\"?"},
        InvalidCase{"UnknownKeyInPipeline", std::string(kMinimal) + "    chekpoint_interval: 5s\n",
                    "t.yaml:10:5: error: unknown key \"chekpoint_interval\" in pipeline; did you "
                    "mean \"checkpoint_interval\"?"},
        InvalidCase{"UnknownKeyInFilters",
                    std::string(kMinimal) + "    filters:\n      drop_expiration: true\n",
                    "t.yaml:11:7: error: unknown key \"drop_expiration\" in filters; did you "
                    "mean \"drop_expirations\"?"},
        InvalidCase{"BadDuration", std::string(kMinimal) + "    checkpoint_interval: 10x\n",
                    "t.yaml:10:26: error: invalid duration \"10x\" for checkpoint_interval: use "
                    "an integer number of seconds or a number with ms, s, m, h or d"},
        InvalidCase{"FractionalDuration", std::string(kMinimal) + R"(clock:
  max_skew: 1.5s
)",
                    "t.yaml:11:13: error: invalid duration \"1.5s\" for max_skew: use an integer "
                    "number of seconds or a number with ms, s, m, h or d"},
        InvalidCase{"ZeroCheckInterval", std::string(kMinimal) + R"(clock:
  check_interval: 0s
)",
                    "t.yaml:11:19: error: check_interval must be greater than 0 (got \"0s\"); "
                    "use a positive duration such as 1s"},
        InvalidCase{"NegativeMaxTtl", R"(clusters:
  a:
    address: 127.0.0.1:7001
  b:
    address: 127.0.0.1:7002
    buckets:
      - db: 0
        max_ttl: -1
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:8:18: error: max_ttl must not be negative (got \"-1\"); use 0 for no "
                    "limit or a positive duration such as 10m"},
        InvalidCase{"PortOutOfRange", R"(clusters:
  a:
    address: 127.0.0.1:70001
  b:
    address: 127.0.0.1:7002
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:3:14: error: invalid address \"127.0.0.1:70001\": port 70001 is out "
                    "of range 1..65535; use host:port, e.g. 127.0.0.1:6379"},
        InvalidCase{"AdminListenWithoutPort", std::string(kMinimal) + R"(agent:
  admin_listen: localhost
)",
                    "t.yaml:11:17: error: invalid admin_listen \"localhost\": the port is "
                    "missing; use host:port, e.g. 127.0.0.1:9464"},
        InvalidCase{"UnknownClusterReference", R"(clusters:
  east: {address: "127.0.0.1:7001"}
  west: {address: "127.0.0.1:7002"}
pipelines:
  - name: p
    source: esat
    target: west
)",
                    "t.yaml:6:13: error: source \"esat\" is not a defined cluster; did you mean "
                    "\"east\"? Defined clusters: east, west"},
        InvalidCase{"DuplicatePipelineName", std::string(kMinimal) + R"(  - name: p
    source: b
    target: a
)",
                    "t.yaml:10:11: error: duplicate pipeline name \"p\" (first defined at line "
                    "7); give each pipeline a unique name"},
        InvalidCase{"DuplicateClusterName", R"(clusters:
  a:
    address: 127.0.0.1:7001
  b:
    address: 127.0.0.1:7002
  a:
    address: 127.0.0.1:7003
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:6:3: error: duplicate cluster name \"a\" (first defined at line 2); "
                    "give each cluster a unique name"},
        InvalidCase{"BadRegex", std::string(kMinimal) + R"(    filters:
      exclude_keys: ["ok", "(unclosed"]
)",
                    "t.yaml:11:28: error: invalid regular expression \"(unclosed\" in "
                    "exclude_keys: missing ): (unclosed; fix it (RE2 syntax)"},
        InvalidCase{"SameSourceAndTarget", R"(clusters:
  a:
    address: 127.0.0.1:7001
pipelines:
  - name: loop
    source: a
    target: a
)",
                    "t.yaml:7:13: error: pipeline \"loop\" replicates 127.0.0.1:7001 onto itself: "
                    "source \"a\" and target \"a\" have the same address and without a dbs map "
                    "every db maps to itself; use another target or add a dbs map to different "
                    "databases"},
        InvalidCase{"SameAddressDbMapsOntoItself", R"(clusters:
  a:
    address: 127.0.0.1:7001
  a-again:
    address: 127.0.0.1:7001
pipelines:
  - name: p
    source: a
    target: a-again
    dbs: {0: 1, 2: 2}
)",
                    "t.yaml:10:17: error: pipeline \"p\" replicates db 2 of 127.0.0.1:7001 onto "
                    "itself (source \"a\" and target \"a-again\" have the same address); map it "
                    "to a different db or use another target"},
        InvalidCase{"BadEnumValue", std::string(kMinimal) + R"(clock:
  on_skew: pasue
)",
                    "t.yaml:11:12: error: invalid on_skew \"pasue\": use one of warn, pause, "
                    "compensate (did you mean \"pause\"?)"},
        InvalidCase{"BadLogFormat", std::string(kMinimal) + R"(agent:
  log_format: xml
)",
                    "t.yaml:11:15: error: invalid log_format \"xml\": use one of text, json"},
        InvalidCase{"ZeroThreads", std::string(kMinimal) + R"(agent:
  threads: 0
)",
                    "t.yaml:11:12: error: threads 0 is out of range: use an integer from 1 to 64"},
        InvalidCase{"ThreadsNotANumber", std::string(kMinimal) + R"(agent:
  threads: auto
)",
                    "t.yaml:11:12: error: invalid threads \"auto\": use an integer from 1 to 64"},
        InvalidCase{"MissingRequiredAddress", R"(clusters:
  a:
    username: replicator
  b:
    address: 127.0.0.1:7002
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:3:5: error: missing required key \"address\" in cluster; add "
                    "address: host:port"},
        InvalidCase{"MissingRequiredPipelineSource", R"(clusters:
  a: {address: "127.0.0.1:7001"}
  b: {address: "127.0.0.1:7002"}
pipelines:
  - name: p
    target: b
)",
                    "t.yaml:5:5: error: missing required key \"source\" in pipeline; add source: "
                    "CLUSTER"},
        InvalidCase{"ListWhereMapExpected", std::string(kMinimal) + R"(agent:
  - log_level: info
)",
                    "t.yaml:11:3: error: agent must be a mapping of key: value pairs, not a list"},
        InvalidCase{"MapWhereListExpected", R"(clusters:
  a: {address: "127.0.0.1:7001"}
  b: {address: "127.0.0.1:7002"}
pipelines:
  name: p
  source: a
  target: b
)",
                    "t.yaml:5:3: error: pipelines must be a list, not a mapping; write one \"- "
                    "item\" per line or [item, ...]"},
        InvalidCase{"YamlSyntaxError", R"(clusters:
  a: {address: "127.0.0.1:7001"
pipelines: []
)",
                    "t.yaml:3:1: error: YAML syntax error: end of map flow not found; fix the "
                    "YAML at this position (check indentation, quotes, brackets and that tabs "
                    "are not used for indentation)"},
        // yaml-cpp 0.7's LoadAll never returned (and filled memory) on a ',' where a document
        // starts (found by fuzz/fuzz_config.cc): now a syntax error at the comma.
        InvalidCase{"StrayComma", std::string(kMinimal) + "---\n,\n",
                    "t.yaml:11:1: error: YAML syntax error: unexpected \",\"; fix the YAML at "
                    "this position (check indentation, quotes, brackets and that tabs are not "
                    "used for indentation)"},
        InvalidCase{"CommaAfterTag", "!!str ,\n",
                    "t.yaml:1:7: error: YAML syntax error: unexpected \",\"; fix the YAML at "
                    "this position (check indentation, quotes, brackets and that tabs are not "
                    "used for indentation)"},
        InvalidCase{"MissingEnvSecret", R"(clusters:
  a:
    address: 127.0.0.1:7001
    password: {env: XDCR_TEST_MISSING_PASSWORD}
  b:
    address: 127.0.0.1:7002
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:4:21: error: environment variable \"XDCR_TEST_MISSING_PASSWORD\" is "
                    "not set; export it before starting the agent (or check the file with "
                    "validate --no-environment)"},
        InvalidCase{"SecretWithUnknownKey", R"(clusters:
  a:
    address: 127.0.0.1:7001
    password: {envv: X}
  b:
    address: 127.0.0.1:7002
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:4:16: error: unknown key \"envv\" in password; did you mean \"env\"?"},
        InvalidCase{"CertWithoutKey", R"(clusters:
  a:
    address: 127.0.0.1:7001
    tls:
      ca_file: ca.crt
      cert_file: client.crt
  b:
    address: 127.0.0.1:7002
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:6:18: error: cert_file is set but key_file is not; a client "
                    "certificate needs both: add key_file or remove cert_file"},
        InvalidCase{"DuplicateBucketDb", R"(clusters:
  a:
    address: 127.0.0.1:7001
  b:
    address: 127.0.0.1:7002
    buckets:
      - db: 3
        max_ttl: 1h
      - db: 3
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:9:13: error: duplicate bucket for db 3 in cluster \"b\" (first at line "
                    "7); merge them into one bucket"},
        InvalidCase{"DbOutOfRange", R"(clusters:
  a:
    address: 127.0.0.1:7001
  b:
    address: 127.0.0.1:7002
    buckets:
      - db: 6379
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:7:13: error: db 6379 is out of range: use an integer from 0 to 1023"},
        InvalidCase{"DuplicateCollectionName", R"(clusters:
  a:
    address: 127.0.0.1:7001
  b:
    address: 127.0.0.1:7002
    buckets:
      - db: 0
        collections:
          - {name: sessions, keys: "sess:*"}
          - {name: sessions, keys: "s:*"}
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:10:20: error: duplicate collection name \"sessions\" in this bucket "
                    "(first at line 9); give each collection a unique name"},
        InvalidCase{"CollectionWithoutKeys", R"(clusters:
  a:
    address: 127.0.0.1:7001
  b:
    address: 127.0.0.1:7002
    buckets:
      - db: 0
        collections:
          - name: sessions
            max_ttl: 60s
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:9:13: error: missing required key \"keys\" in collection; add keys: "
                    "\"sess:*\""},
        InvalidCase{"KeyRewriteWithoutFrom", std::string(kMinimal) + R"(    key_rewrite:
      - {to: "eu:"}
)",
                    "t.yaml:11:9: error: missing required key \"from\" in key_rewrite item; add "
                    "from: \"prefix:\""},
        InvalidCase{"KeyRewriteEmptyFrom", std::string(kMinimal) + R"(    key_rewrite:
      - {from: "", to: "eu:"}
)",
                    "t.yaml:11:16: error: \"from\" is empty; give the key prefix to replace"},
        InvalidCase{"BadDbsEntry", std::string(kMinimal) + "    dbs: {0: one}\n",
                    "t.yaml:10:14: error: invalid target db \"one\": use an integer from 0 to "
                    "1023"},
        InvalidCase{"NonBooleanFlag", std::string(kMinimal) + R"(    filters:
      strip_ttl: yes
)",
                    "t.yaml:11:18: error: invalid value \"yes\" for strip_ttl: use true or false"},
        InvalidCase{"MemcachedAsASource", R"(clusters:
  a:
    type: memcached
    address: 127.0.0.1:7001
  b:
    address: 127.0.0.1:7002
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:8:23: error: pipeline \"p\" reads from cluster \"a\", which is "
                    "memcached: memcached can only be a target (it has no change stream to "
                    "replicate from); use a Redis source, or make \"a\" the pipeline's target"},
        InvalidCase{"MemcachedTargetDbOtherThanZero", R"(clusters:
  a:
    address: 127.0.0.1:7001
  b:
    type: memcached
    address: 127.0.0.1:7002
pipelines:
  - {name: p, source: a, target: b, dbs: {0: 0, 1: 1}}
)",
                    "t.yaml:8:49: error: pipeline \"p\" maps source db 1 to db 1 of target "
                    "\"b\", but memcached has no databases (everything is db 0); map every "
                    "source db to 0 and use key_rewrite to keep them apart"},
        InvalidCase{"MemcachedTargetTls", R"(clusters:
  a:
    address: 127.0.0.1:7001
  b:
    type: memcached
    address: 127.0.0.1:7002
    tls: {ca_file: ca.pem}
pipelines:
  - {name: p, source: a, target: b, dbs: {0: 0}}
)",
                    "t.yaml:7:5: error: tls is not supported for a cluster of type memcached "
                    "(the agent speaks memcached's plain meta protocol, without TLS or SASL); "
                    "remove tls and reach memcached over a trusted network or a tunnel"},
        InvalidCase{"MemcachedNonStrings", R"(clusters:
  a:
    address: 127.0.0.1:7001
  b:
    type: memcached
    address: 127.0.0.1:7002
    non_strings: xml
pipelines:
  - {name: p, source: a, target: b, dbs: {0: 0}}
)",
                    "t.yaml:7:18: error: invalid non_strings \"xml\": use one of "
                    "refuse, dump, json"},
        InvalidCase{"UnsupportedClusterType", R"(clusters:
  a:
    type: couchbase
    address: 127.0.0.1:7001
  b:
    address: 127.0.0.1:7002
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:3:11: error: invalid type \"couchbase\": use one of redis, "
                    "redis_cluster, redis_sentinel, memcached"},
        InvalidCase{"NoPipelines", R"(clusters:
  a:
    address: 127.0.0.1:7001
)",
                    "t.yaml:1:1: error: no pipelines are defined; add a pipelines: list with at "
                    "least one pipeline"},
        InvalidCase{"EmptyPipelineList", R"(clusters:
  a:
    address: 127.0.0.1:7001
pipelines: []
)",
                    "t.yaml:4:12: error: pipelines is empty; define at least one pipeline (- "
                    "name: ..., source: ..., target: ...)"},
        InvalidCase{"SecondDocument", std::string(kMinimal) + "---\nagent: {}\n",
                    "t.yaml:11:1: error: the file holds more than one YAML document (\"---\"); "
                    "put the whole configuration in a single document"},
        InvalidCase{"EmptyFile", "# nothing here\n",
                    "t.yaml:1:1: error: the configuration is empty; it needs at least a "
                    "clusters: mapping and a pipelines: list"},
        InvalidCase{"BadNtpServer", std::string(kMinimal) + R"(clock:
  ntp_servers: ["pool.ntp.org", "::1:123"]
)",
                    "t.yaml:11:33: error: invalid NTP server \"::1:123\": put an IPv6 address in "
                    "brackets, e.g. \"[::1]:6379\"; use host or host:port, e.g. 127.0.0.1:123"},
        InvalidCase{"InvalidPipelineName", R"(clusters:
  a: {address: "127.0.0.1:7001"}
  b: {address: "127.0.0.1:7002"}
pipelines:
  - {name: "east to west", source: a, target: b}
)",
                    "t.yaml:5:12: error: invalid pipeline name \"east to west\": use only "
                    "letters, digits, \"-\", \"_\" and \".\" (it is used in URLs and file names)"},
        InvalidCase{"DuplicateKeyInMapping", std::string(kMinimal) + "    target: a\n",
                    "t.yaml:10:5: error: duplicate key \"target\" in pipeline (first at line 9); "
                    "remove one of them"},
        InvalidCase{"EmptyRequiredValue", R"(clusters:
  a:
    address:
  b:
    address: 127.0.0.1:7002
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:3:5: error: \"address\" has no value; write address: host:port"},
        // Replication cycles: each write would be replicated back, without end.
        InvalidCase{"DirectCycle", R"(clusters:
  east: {address: "127.0.0.1:7001"}
  west: {address: "127.0.0.1:7002"}
pipelines:
  - name: east-to-west
    source: east
    target: west
  - name: west-to-east
    source: west
    target: east
)",
                    "t.yaml:9:13: error: pipelines \"east-to-west\" (east -> west) and "
                    "\"west-to-east\" (west -> east) form a replication cycle: every write would "
                    "come back to the cluster it came from and be replicated again, without end; "
                    "replication in both directions is not supported yet: remove one of these "
                    "pipelines"},
        // Listed in cycle order from the pipeline written first; reported where it closes.
        InvalidCase{"ThreeCycleThroughOtherPipelines", R"(clusters:
  a: {address: "127.0.0.1:7001"}
  b: {address: "127.0.0.1:7002"}
  c: {address: "127.0.0.1:7003"}
  d: {address: "127.0.0.1:7004"}
pipelines:
  - {name: c-to-a, source: c, target: a}
  - {name: a-to-d, source: a, target: d}
  - {name: a-to-b, source: a, target: b}
  - {name: b-to-c, source: b, target: c}
)",
                    "t.yaml:10:28: error: pipelines \"c-to-a\" (c -> a), \"a-to-b\" (a -> b) "
                    "and \"b-to-c\" (b -> c) form a replication cycle: every write would come "
                    "back to the cluster it came from and be replicated again, without end; "
                    "replication in both directions is not supported yet: remove one of these "
                    "pipelines"},
        InvalidCase{"CycleThroughTwoNamesOfOneAddress", R"(clusters:
  a: {address: "127.0.0.1:7001"}
  b: {address: "127.0.0.1:7002"}
  a-again: {address: "127.0.0.1:7001"}
pipelines:
  - {name: ab, source: a, target: b}
  - {name: ba, source: b, target: a-again}
)",
                    "t.yaml:7:24: error: pipelines \"ab\" (a -> b) and \"ba\" (b -> a-again) "
                    "form a replication cycle (clusters \"a-again\" and \"a\" have the same "
                    "address 127.0.0.1:7001): every write would come back to the cluster it came "
                    "from and be replicated again, without end; replication in both directions "
                    "is not supported yet: remove one of these pipelines"},
        // One server, a dbs map to other dbs (allowed) that leads back: a cycle among its dbs.
        InvalidCase{"CycleAmongTheDbsOfOneServer", R"(clusters:
  a: {address: "127.0.0.1:7001"}
pipelines:
  - {name: copy, source: a, target: a, dbs: {0: 1, 2: 3}}
  - {name: back, source: a, target: a, dbs: {1: 0}}
)",
                    "t.yaml:5:46: error: the dbs maps of \"copy\" (db 0 -> db 1) and \"back\" "
                    "(db 1 -> db 0) replicate within 127.0.0.1:7001 in a cycle: every write "
                    "would come back to the db it came from and be replicated again, without "
                    "end; change the dbs maps so that no db is copied back into one it came "
                    "from"},
        // ---- Cluster kinds (interface.md §6.1) ----
        InvalidCase{"TypoInClusterType", R"(clusters:
  a:
    type: redis_sentinal
    sentinels: ["127.0.0.1:26379"]
    master_name: m
  b: {address: "127.0.0.1:7002"}
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:3:11: error: invalid type \"redis_sentinal\": use one of redis, "
                    "redis_cluster, redis_sentinel, memcached (did you mean \"redis_sentinel\"?)"},
        InvalidCase{"AddressOnARedisCluster", R"(clusters:
  a:
    type: redis_cluster
    address: 127.0.0.1:7000
  b: {address: "127.0.0.1:7002"}
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:4:5: error: address is not used by a cluster of type redis_cluster "
                    "(it is for type redis); list the seed nodes as addresses: [host:port, ...]"},
        InvalidCase{"AddressOnASentinelCluster", R"(clusters:
  a:
    type: redis_sentinel
    address: 127.0.0.1:6379
    master_name: mymaster
  b: {address: "127.0.0.1:7002"}
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:4:5: error: address is not used by a cluster of type redis_sentinel "
                    "(it is for type redis); list the Sentinels as sentinels: [host:port, ...]; "
                    "the master's address comes from them"},
        InvalidCase{"AddressesOnARedisServer", R"(clusters:
  a:
    addresses: [127.0.0.1:7000, 127.0.0.1:7001]
  b: {address: "127.0.0.1:7002"}
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:3:5: error: addresses is not used by a cluster of type redis (it is "
                    "for type redis_cluster); a single server takes address: host:port; for a "
                    "Redis Cluster set type: redis_cluster"},
        InvalidCase{"SentinelsOnARedisCluster", R"(clusters:
  a:
    type: redis_cluster
    addresses: [127.0.0.1:7000]
    sentinels: [127.0.0.1:26379]
  b: {address: "127.0.0.1:7002"}
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:5:5: error: sentinels is not used by a cluster of type redis_cluster "
                    "(it is for type redis_sentinel); remove it (a Redis Cluster is reached "
                    "through addresses:)"},
        InvalidCase{"MasterNameOnARedisServer", R"(clusters:
  a:
    address: 127.0.0.1:7001
    master_name: mymaster
  b: {address: "127.0.0.1:7002"}
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:4:5: error: master_name is not used by a cluster of type redis (it "
                    "is for type redis_sentinel); for a Sentinel-managed master set type: "
                    "redis_sentinel (with sentinels and master_name)"},
        InvalidCase{"ReadFromOnASentinelCluster", R"(clusters:
  a:
    type: redis_sentinel
    sentinels: [127.0.0.1:26379]
    master_name: mymaster
    read_from: replica
  b: {address: "127.0.0.1:7002"}
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:6:5: error: read_from is not used by a cluster of type "
                    "redis_sentinel (it is for type redis_cluster); remove it"},
        InvalidCase{"RedisClusterWithoutAddresses", R"(clusters:
  a:
    type: redis_cluster
    username: u
    password: p
  b: {address: "127.0.0.1:7002"}
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:3:5: error: missing required key \"addresses\" in cluster; add "
                    "addresses: [host:port, ...] (any nodes of the cluster)"},
        InvalidCase{"EmptyAddresses", R"(clusters:
  a:
    type: redis_cluster
    addresses: []
  b: {address: "127.0.0.1:7002"}
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:4:16: error: addresses is empty; list at least one seed node, e.g. "
                    "127.0.0.1:7000"},
        InvalidCase{"AddressesNotAList", R"(clusters:
  a:
    type: redis_cluster
    addresses: 127.0.0.1:7000
  b: {address: "127.0.0.1:7002"}
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:4:16: error: addresses must be a list, not the value "
                    "\"127.0.0.1:7000\"; write one \"- item\" per line or [item, ...]"},
        InvalidCase{"BadSeed", R"(clusters:
  a:
    type: redis_cluster
    addresses: ["127.0.0.1:7000", "127.0.0.1:99999"]
  b: {address: "127.0.0.1:7002"}
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:4:35: error: invalid address \"127.0.0.1:99999\" in addresses: port "
                    "99999 is out of range 1..65535; use host:port, e.g. 127.0.0.1:7000"},
        InvalidCase{"SeedListedTwice", R"(clusters:
  a:
    type: redis_cluster
    addresses:
      - 127.0.0.1:7000
      - LOCALHOST:7001
      - localhost:7001
  b: {address: "127.0.0.1:7002"}
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:7:9: error: \"localhost:7001\" is listed twice in addresses (first "
                    "at line 6); remove one of them"},
        InvalidCase{"BadReadFrom", R"(clusters:
  a:
    type: redis_cluster
    addresses: [127.0.0.1:7000]
    read_from: primary
  b: {address: "127.0.0.1:7002"}
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:5:16: error: invalid read_from \"primary\": use one of master, "
                    "replica"},
        InvalidCase{"ReadFromOnAClusterThatIsOnlyATarget", R"(clusters:
  a: {address: "127.0.0.1:7001"}
  b:
    type: redis_cluster
    addresses: [127.0.0.1:7000]
    read_from: replica
pipelines:
  - {name: p, source: a, target: b, dbs: {0: 0}}
)",
                    "t.yaml:6:5: error: read_from chooses the nodes a Redis Cluster is "
                    "replicated from, so it applies only to a source, but cluster \"b\" is only a "
                    "target (of pipeline \"p\"); remove read_from"},
        InvalidCase{"SlotRangeOutOfRange", R"(clusters:
  a:
    type: redis_cluster
    addresses: [127.0.0.1:7000]
    slots: ["0-8191", "8192-16384"]
  b: {address: "127.0.0.1:7002"}
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:5:23: error: slot range \"8192-16384\" in slots of cluster \"a\" is "
                    "not within 0-16383 with FIRST <= LAST; a Redis Cluster has the slots 0 to "
                    "16383"},
        InvalidCase{"SlotRangeBackwards", R"(clusters:
  a:
    type: redis_cluster
    addresses: [127.0.0.1:7000]
    slots: ["200-100"]
  b: {address: "127.0.0.1:7002"}
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:5:13: error: slot range \"200-100\" in slots of cluster \"a\" is not "
                    "within 0-16383 with FIRST <= LAST; a Redis Cluster has the slots 0 to 16383"},
        InvalidCase{"SlotRangeNegative", R"(clusters:
  a:
    type: redis_cluster
    addresses: [127.0.0.1:7000]
    slots: [-1]
  b: {address: "127.0.0.1:7002"}
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:5:13: error: invalid slot range \"-1\" in slots of cluster \"a\"; "
                    "write \"FIRST-LAST\" or one slot, e.g. \"0-8191\""},
        InvalidCase{"SlotsEmpty", R"(clusters:
  a:
    type: redis_cluster
    addresses: [127.0.0.1:7000]
    slots: []
  b: {address: "127.0.0.1:7002"}
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:5:12: error: slots of cluster \"a\" is empty; list the slot ranges "
                    "this agent replicates, e.g. [\"0-8191\"], or remove slots to replicate every "
                    "slot"},
        InvalidCase{"SlotsNotAList", R"(clusters:
  a:
    type: redis_cluster
    addresses: [127.0.0.1:7000]
    slots: "0-8191"
  b: {address: "127.0.0.1:7002"}
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:5:12: error: slots must be a list, not the value \"0-8191\"; write "
                    "one \"- item\" per line or [item, ...]"},
        InvalidCase{"SlotRangeNotARange", R"(clusters:
  a:
    type: redis_cluster
    addresses: [127.0.0.1:7000]
    slots: ["0..100"]
  b: {address: "127.0.0.1:7002"}
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:5:13: error: invalid slot range \"0..100\" in slots of cluster "
                    "\"a\"; write \"FIRST-LAST\" or one slot, e.g. \"0-8191\""},
        InvalidCase{"SlotRangesOverlap", R"(clusters:
  a:
    type: redis_cluster
    addresses: [127.0.0.1:7000]
    slots: ["100-200", "0-100"]
  b: {address: "127.0.0.1:7002"}
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:5:13: error: slot range 100-200 overlaps 0-100 in slots of cluster "
                    "\"a\"; list each slot once"},
        // Not only the neighbour: 70-80 lies inside 0-100 although 50-60 (refused) is between.
        InvalidCase{"SlotRangeOverlapsOnePastARefusedOne", R"(clusters:
  a:
    type: redis_cluster
    addresses: [127.0.0.1:7000]
    slots: ["0-100", "50-60", "70-80"]
  b: {address: "127.0.0.1:7002"}
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:5:31: error: slot range 70-80 overlaps 0-100 in slots of cluster "
                    "\"a\"; list each slot once",
                    2},
        InvalidCase{"SlotsOnAStandaloneServer", R"(clusters:
  a: {address: "127.0.0.1:7001", slots: ["0-100"]}
  b: {address: "127.0.0.1:7002"}
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:2:34: error: slots is not used by a cluster of type redis (it is for "
                    "type redis_cluster); remove it, or set type: redis_cluster"},
        InvalidCase{"SlotsOnAClusterThatIsOnlyATarget", R"(clusters:
  a: {address: "127.0.0.1:7001"}
  b:
    type: redis_cluster
    addresses: [127.0.0.1:7000]
    slots: ["0-100"]
pipelines:
  - {name: p, source: a, target: b, dbs: {0: 0}}
)",
                    "t.yaml:6:5: error: slots selects the part of a Redis Cluster this agent "
                    "replicates, so it applies only to a source, but cluster \"b\" is only a "
                    "target (of pipeline \"p\"); remove slots"},
        InvalidCase{"SentinelWithoutMasterName", R"(clusters:
  a:
    type: redis_sentinel
    sentinels: [127.0.0.1:26379]
  b: {address: "127.0.0.1:7002"}
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:3:5: error: missing required key \"master_name\" in cluster; add "
                    "master_name: NAME (the name the Sentinels monitor it by)"},
        InvalidCase{"EmptyMasterName", R"(clusters:
  a:
    type: redis_sentinel
    sentinels: [127.0.0.1:26379]
    master_name: ""
  b: {address: "127.0.0.1:7002"}
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:5:18: error: \"master_name\" is empty; give the name the Sentinels "
                    "monitor the master by"},
        InvalidCase{"SentinelWithoutSentinels", R"(clusters:
  a:
    type: redis_sentinel
    master_name: mymaster
  b: {address: "127.0.0.1:7002"}
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:3:5: error: missing required key \"sentinels\" in cluster; add "
                    "sentinels: [host:port, ...]"},
        InvalidCase{"EmptySentinels", R"(clusters:
  a:
    type: redis_sentinel
    sentinels: []
    master_name: mymaster
  b: {address: "127.0.0.1:7002"}
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:4:16: error: sentinels is empty; list at least one Sentinel, e.g. "
                    "127.0.0.1:26379"},
        InvalidCase{"BadSentinelAddress", R"(clusters:
  a:
    type: redis_sentinel
    sentinels: ["redis://127.0.0.1:26379"]
    master_name: mymaster
  b: {address: "127.0.0.1:7002"}
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:4:17: error: invalid address \"redis://127.0.0.1:26379\" in "
                    "sentinels: remove the scheme (such as \"redis://\"); use host:port, e.g. "
                    "127.0.0.1:26379"},
        InvalidCase{"SentinelPasswordFromAMissingVariable", R"(clusters:
  a:
    type: redis_sentinel
    sentinels: [127.0.0.1:26379]
    master_name: mymaster
    sentinel_password: {env: XDCR_TEST_MISSING_PASSWORD}
  b: {address: "127.0.0.1:7002"}
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:6:30: error: environment variable \"XDCR_TEST_MISSING_PASSWORD\" is "
                    "not set; export it before starting the agent (or check the file with "
                    "validate --no-environment)"},
        InvalidCase{"EmptySentinelPassword", R"(clusters:
  a:
    type: redis_sentinel
    sentinels: [127.0.0.1:26379]
    master_name: mymaster
    sentinel_password: ""
  b: {address: "127.0.0.1:7002"}
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:6:24: error: sentinel_password is empty; remove the key for no "
                    "sentinel_password, or use {env: NAME}, {file: PATH} or {credential: NAME}"},
        InvalidCase{"ZeroLinkTimeout", R"(clusters:
  a:
    address: 127.0.0.1:7001
    link_timeout: 0s
  b: {address: "127.0.0.1:7002"}
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:4:19: error: link_timeout must be greater than 0 (got \"0s\"); use a "
                    "positive duration such as 1s"},
        InvalidCase{"NegativeLinkTimeout", R"(clusters:
  a: {address: "127.0.0.1:7001"}
  b:
    type: redis_sentinel
    sentinels: [127.0.0.1:26379]
    master_name: mymaster
    link_timeout: -5s
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:7:19: error: link_timeout must not be negative (got \"-5s\"); use a "
                    "positive duration such as 30s"},
        InvalidCase{"DbsMapIntoAnotherDbOfAClusterTarget", R"(clusters:
  a: {address: "127.0.0.1:7001"}
  b:
    type: redis_cluster
    addresses: [127.0.0.1:7000]
pipelines:
  - name: p
    source: a
    target: b
    dbs: {0: 0, 3: 3}
)",
                    "t.yaml:10:17: error: pipeline \"p\" maps source db 3 to db 3 of target "
                    "\"b\", but a Redis Cluster has only db 0; map every source db to 0 and use "
                    "key_rewrite to keep them apart"},
        InvalidCase{"DeleteStaleKeysIntoAClusterTarget", R"(clusters:
  a: {address: "127.0.0.1:7001"}
  b:
    type: redis_cluster
    addresses: [127.0.0.1:7000]
pipelines:
  - name: p
    source: a
    target: b
    dbs: {0: 0}
    full_sync: {delete_stale_keys: true}
)",
                    "t.yaml:9:13: error: pipeline \"p\": full_sync.delete_stale_keys is not "
                    "supported yet when the target (\"b\") is a Redis Cluster; remove it"},
        InvalidCase{"BucketForAnotherDbOfARedisCluster", R"(clusters:
  a: {address: "127.0.0.1:7001"}
  b:
    type: redis_cluster
    addresses: [127.0.0.1:7000]
    buckets:
      - {db: 0, max_ttl: 10m}
      - {db: 2, max_ttl: 1h}
pipelines:
  - {name: p, source: a, target: b, dbs: {0: 0}}
)",
                    "t.yaml:8:14: error: bucket for db 2 in cluster \"b\": a Redis Cluster has "
                    "only db 0; use db: 0 (and collections to tell key sets apart)"},
        // Two configs of one Redis Cluster (a shared seed node) are one cluster.
        InvalidCase{"RedisClusterOntoItselfThroughASharedSeed", R"(clusters:
  a:
    type: redis_cluster
    addresses: [127.0.0.1:7000, 127.0.0.1:7001]
  b:
    type: redis_cluster
    addresses: [127.0.0.1:7005, 127.0.0.1:7001]
pipelines:
  - {name: p, source: a, target: b}
)",
                    "t.yaml:9:34: error: pipeline \"p\" replicates 127.0.0.1:7000,127.0.0.1:7001 "
                    "onto itself: source \"a\" and target \"b\" share the node 127.0.0.1:7001 and "
                    "without a dbs map every db maps to itself; use another target or add a dbs "
                    "map to different databases"},
        // One Sentinel and one master name: one master, whatever the other Sentinels listed.
        InvalidCase{"SentinelMasterOntoItself", R"(clusters:
  a:
    type: redis_sentinel
    sentinels: [127.0.0.1:26379, 127.0.0.1:26380]
    master_name: mymaster
  b:
    type: redis_sentinel
    sentinels: [127.0.0.1:26381, 127.0.0.1:26380]
    master_name: mymaster
pipelines:
  - {name: p, source: a, target: b, dbs: {0: 1, 2: 2}}
)",
                    "t.yaml:11:49: error: pipeline \"p\" replicates db 2 of mymaster via "
                    "127.0.0.1:26379,127.0.0.1:26380 onto itself (source \"a\" and target \"b\" "
                    "share the Sentinel 127.0.0.1:26380 and the master name \"mymaster\"); map it "
                    "to a different db or use another target"},
        // A standalone address that is a seed of a Redis Cluster names that node: a cycle.
        InvalidCase{"CycleThroughARedisClusterSeed", R"(clusters:
  east:
    type: redis_cluster
    addresses: [127.0.0.1:7000, 127.0.0.1:7001]
  west: {address: "127.0.0.1:7002"}
  east-node: {address: "127.0.0.1:7001"}
pipelines:
  - {name: east-to-west, source: east, target: west}
  - {name: west-to-east, source: west, target: east-node}
)",
                    "t.yaml:9:34: error: pipelines \"east-to-west\" (east -> west) and "
                    "\"west-to-east\" (west -> east-node) form a replication cycle (clusters "
                    "\"east-node\" and \"east\" share the node 127.0.0.1:7001): every write would "
                    "come back to the cluster it came from and be replicated again, without end; "
                    "replication in both directions is not supported yet: remove one of these "
                    "pipelines"}),
    [](const testing::TestParamInfo<InvalidCase>& info) { return info.param.name; });

// Pipelines that share clusters without a way back are not cycles.
TEST(config, PipelinesWithoutACycleAreAccepted) {
  const std::string clusters = R"(clusters:
  a: {address: "127.0.0.1:7001"}
  b: {address: "127.0.0.1:7002"}
  c: {address: "127.0.0.1:7003"}
  d: {address: "127.0.0.1:7004"}
)";
  LoadResult diamond = loadConfigString(clusters + R"(pipelines:
  - {name: a-to-b, source: a, target: b}
  - {name: a-to-c, source: a, target: c}
  - {name: b-to-d, source: b, target: d}
  - {name: c-to-d, source: c, target: d}
)",
                                        kFile);
  EXPECT_TRUE(diamond.ok()) << testing::PrintToString(errorsOf(diamond));
  LoadResult fan_out = loadConfigString(clusters + R"(pipelines:
  - {name: a-to-b, source: a, target: b}
  - {name: a-to-c, source: a, target: c}
)",
                                        kFile);
  EXPECT_TRUE(fan_out.ok()) << testing::PrintToString(errorsOf(fan_out));
  // Within one server, dbs chained forward (0 -> 1 -> 2) never come back.
  LoadResult chain = loadConfigString(clusters + R"(pipelines:
  - {name: first, source: a, target: a, dbs: {0: 1}}
  - {name: second, source: a, target: a, dbs: {1: 2}}
)",
                                      kFile);
  EXPECT_TRUE(chain.ok()) << testing::PrintToString(errorsOf(chain));
}

// ---- Cluster kinds (interface.md §6.1) ---------------------------------------------------

constexpr char kClusterKinds[] = R"(clusters:
  east:
    type: redis_cluster
    addresses: [10.0.0.1:7000, "10.0.0.2", "[::1]:7002"]
    read_from: replica
    slots: ["8192-16383", "0-99", 100]
    username: replicator
    password: {env: XDCR_TEST_EAST_PASSWORD}
    tls: {verify: false}
    link_timeout: 30s
  north:
    type: redis_sentinel
    sentinels: [10.0.1.1:26379, 10.0.1.2]
    master_name: mymaster
    sentinel_username: watcher
    sentinel_password: {env: XDCR_TEST_SENTINEL_PASSWORD}
    password: data-password-value
    buckets:
      - {db: 3, max_ttl: 10m}
  south:
    type: redis_cluster
    addresses: [10.0.2.1:7000]
    buckets:
      - {db: 0, max_ttl: 1h}
  plain:
    address: 10.0.3.1:6379
pipelines:
  - {name: east-to-north, source: east, target: north}
  - {name: north-to-south, source: north, target: south, dbs: {0: 0, 3: 0},
     key_rewrite: [{from: "a:", to: "db3:a:"}]}
  - {name: plain-to-south, source: plain, target: south, dbs: {0: 0}}
)";

TEST(config, ClusterKindsLoadEveryField) {
  ScopedEnv east("XDCR_TEST_EAST_PASSWORD", "east-password-value");
  ScopedEnv sentinel("XDCR_TEST_SENTINEL_PASSWORD", "sentinel-password-value");
  LoadResult result = loadConfigString(kClusterKinds, kFile);
  ASSERT_TRUE(result.ok()) << testing::PrintToString(errorsOf(result));
  // tls.verify: false is legal; nothing else here deserves a warning.
  EXPECT_TRUE(result.diagnostics.empty()) << testing::PrintToString(warningsOf(result));
  const Config& c = *result.config;

  const ClusterConfig& e = *c.cluster("east");
  EXPECT_EQ(e.type, "redis_cluster");
  EXPECT_EQ(e.kind, ClusterKind::RedisCluster);
  EXPECT_TRUE(e.isRedisCluster());
  EXPECT_FALSE(e.isSentinel());
  EXPECT_EQ(e.seeds,
            (std::vector<NodeAddress>{{"10.0.0.1", 7000}, {"10.0.0.2", 6379}, {"::1", 7002}}));
  EXPECT_EQ(e.host, "10.0.0.1");  // the first seed
  EXPECT_EQ(e.port, 7000);
  EXPECT_EQ(e.address(), "10.0.0.1:7000,10.0.0.2:6379,[::1]:7002");
  EXPECT_EQ(e.read_from, ReadFrom::Replica);
  EXPECT_EQ(e.slots, (std::vector<std::pair<int, int>>{{0, 99}, {100, 100}, {8192, 16383}}));
  EXPECT_EQ(e.slotsText(), "0-99,100,8192-16383");
  EXPECT_EQ(e.username, "replicator");
  EXPECT_EQ(e.password.value, "east-password-value");
  EXPECT_EQ(e.link_timeout, milliseconds(30'000));
  EXPECT_TRUE(e.sentinels.empty());
  // Every node of the cluster is reached with the cluster's credentials and TLS options.
  RedisEndpoint node = e.endpointAt("10.0.0.9", 7009);
  EXPECT_EQ(node.address(), "10.0.0.9:7009");
  EXPECT_EQ(node.username, "replicator");
  EXPECT_EQ(node.password, "east-password-value");
  ASSERT_TRUE(node.tls.has_value());
  EXPECT_FALSE(node.tls->verify);

  const ClusterConfig& n = *c.cluster("north");
  EXPECT_EQ(n.type, "redis_sentinel");
  EXPECT_EQ(n.kind, ClusterKind::RedisSentinel);
  EXPECT_TRUE(n.isSentinel());
  EXPECT_EQ(n.sentinels,
            (std::vector<NodeAddress>{{"10.0.1.1", 26379}, {"10.0.1.2", 26379}}));  // its port
  EXPECT_EQ(n.master_name, "mymaster");
  EXPECT_EQ(n.sentinel_username, "watcher");
  EXPECT_EQ(n.sentinel_password.kind, Secret::Kind::Env);
  EXPECT_EQ(n.sentinel_password.value, "sentinel-password-value");
  EXPECT_EQ(n.address(), "mymaster via 10.0.1.1:26379,10.0.1.2:26379");
  EXPECT_EQ(n.read_from, ReadFrom::Master);         // the default
  EXPECT_EQ(n.link_timeout, milliseconds(60'000));  // the default
  ASSERT_EQ(n.buckets.size(), 1u);                  // any db: not a Redis Cluster
  EXPECT_EQ(n.buckets[0].db, 3);
  // The Sentinels are asked with their own credentials; the data nodes with the cluster's.
  RedisEndpoint s = n.sentinelEndpoint(n.sentinels[1]);
  EXPECT_EQ(s.address(), "10.0.1.2:26379");
  EXPECT_EQ(s.username, "watcher");
  EXPECT_EQ(s.password, "sentinel-password-value");
  RedisEndpoint master = n.endpointAt("10.0.1.7", 6380);
  EXPECT_EQ(master.username, "");
  EXPECT_EQ(master.password, "data-password-value");

  EXPECT_EQ(c.cluster("south")->read_from, ReadFrom::Master);
  const ClusterConfig& plain = *c.cluster("plain");
  EXPECT_EQ(plain.kind, ClusterKind::Redis);
  EXPECT_EQ(plain.address(), "10.0.3.1:6379");
  EXPECT_EQ(plain.link_timeout, milliseconds(60'000));
  EXPECT_TRUE(plain.seeds.empty());
  EXPECT_EQ(c.pipeline("north-to-south")->dbs, (std::map<int, int>{{0, 0}, {3, 0}}));
}

TEST(config, MemcachedTargetLoads) {
  LoadResult r = loadConfigString(R"(clusters:
  src: {address: 127.0.0.1:7001}
  mc:
    type: memcached
    address: 127.0.0.1
    link_timeout: 5s
    non_strings: dump
    buckets: [{db: 0, max_ttl: 10m}]
pipelines:
  - {name: p, source: src, target: mc, dbs: {0: 0, 3: 0}}
)",
                                  kFile);
  ASSERT_TRUE(r.ok()) << (r.diagnostics.empty() ? "" : r.diagnostics[0].format());
  const ClusterConfig& mc = *r.config->cluster("mc");
  EXPECT_EQ(mc.kind, ClusterKind::Memcached);
  EXPECT_TRUE(mc.isMemcached());
  EXPECT_EQ(mc.port, 11211);  // memcached's default port
  EXPECT_EQ(mc.link_timeout, std::chrono::seconds(5));
  EXPECT_EQ(mc.non_strings, NonStrings::Dump);
  EXPECT_TRUE(r.diagnostics.empty());
  EXPECT_NE(redactedJson(*r.config).find("\"non_strings\": \"dump\""), std::string::npos);
}

TEST(config, MemcachedTargetRefusesWhatItCannotApply) {
  LoadResult r = loadConfigString(R"(clusters:
  src: {address: 127.0.0.1:7001}
  mc:
    type: memcached
    address: 127.0.0.1:11211
    password: x
    buckets: [{db: 1}]
pipelines:
  - name: p
    source: src
    target: mc
    filters: {replicate_flush: true}
    full_sync: {delete_stale_keys: true}
)",
                                  kFile);
  ASSERT_FALSE(r.ok());
  std::string all;
  for (const auto& d : r.diagnostics) all += d.format() + "\n";
  EXPECT_NE(all.find("password is not supported for a cluster of type memcached"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("memcached has only db 0"), std::string::npos) << all;
  EXPECT_NE(all.find("replicate_flush cannot be applied to memcached"), std::string::npos) << all;
  EXPECT_NE(all.find("delete_stale_keys is not supported for memcached"), std::string::npos) << all;
  EXPECT_NE(all.find("warning: pipeline \"p\" has no dbs map"), std::string::npos) << all;
}

TEST(config, ClusterKindsWarnings) {
  LoadResult result = loadConfigString(R"(clusters:
  east:
    type: redis_cluster
    addresses: [127.0.0.1:7000]
  west:
    address: 127.0.0.1:7002
  north:
    type: redis_sentinel
    sentinels: [127.0.0.1:26379]
    master_name: mymaster
    sentinel_username: watcher
pipelines:
  - {name: from-cluster, source: east, target: west, dbs: {0: 0, 5: 5}}
  - {name: into-cluster, source: north, target: east}
  - {name: sentinel, source: north, target: west, dbs: {0: 1}}
)",
                                       kFile);
  ASSERT_TRUE(result.ok()) << testing::PrintToString(errorsOf(result));
  EXPECT_THAT(
      warningsOf(result),
      ElementsAre("t.yaml:11:24: warning: sentinel_username has no effect without "
                  "sentinel_password (AUTH needs both); add sentinel_password or remove "
                  "sentinel_username",
                  "t.yaml:13:66: warning: source \"east\" of pipeline \"from-cluster\" is a Redis "
                  "Cluster, which has only db 0: the dbs entry for db 5 never matches anything; "
                  "remove it",
                  "t.yaml:14:49: warning: pipeline \"into-cluster\" has no dbs map, so every "
                  "source db goes to the db of the same number, but target \"east\" is a Redis "
                  "Cluster, which has only db 0: writes in source dbs other than 0 cannot be "
                  "applied; write dbs: {0: 0} (map other dbs to 0 too, with key_rewrite to keep "
                  "them apart)"));
}

// Comparing clusters of different kinds must neither crash nor see sameness that is not there.
TEST(config, ClusterKindsAreComparedOnlyWhereTheyNameTheSameNodes) {
  LoadResult result = loadConfigString(R"(clusters:
  one:
    type: redis_sentinel
    sentinels: [127.0.0.1:26379, 127.0.0.1:26380]
    master_name: cache
  other:
    type: redis_sentinel
    sentinels: [127.0.0.1:26379, 127.0.0.1:26380]
    master_name: sessions
  sentinel-port:
    address: 127.0.0.1:26379
  shards:
    type: redis_cluster
    addresses: [127.0.0.1:7000, 127.0.0.1:7001]
  more-shards:
    type: redis_cluster
    addresses: [127.0.0.1:7100]
pipelines:
  - {name: a, source: one, target: other}
  - {name: b, source: other, target: sentinel-port}
  - {name: c, source: sentinel-port, target: shards, dbs: {0: 0}}
  - {name: d, source: shards, target: more-shards}
)",
                                       kFile);
  EXPECT_TRUE(result.ok()) << testing::PrintToString(errorsOf(result));
  // The same chain closed through a second config of the first master: a cycle.
  LoadResult cycle = loadConfigString(R"(clusters:
  one:
    type: redis_sentinel
    sentinels: [127.0.0.1:26379, 127.0.0.1:26380]
    master_name: cache
  other:
    type: redis_sentinel
    sentinels: [127.0.0.1:26379]
    master_name: sessions
  one-again:
    type: redis_sentinel
    sentinels: [127.0.0.1:26381, 127.0.0.1:26380]
    master_name: cache
pipelines:
  - {name: a, source: one, target: other}
  - {name: b, source: other, target: one-again}
)",
                                      kFile);
  EXPECT_FALSE(cycle.ok());
  EXPECT_THAT(errorsOf(cycle),
              ElementsAre("t.yaml:16:23: error: pipelines \"a\" (one -> other) and \"b\" (other "
                          "-> one-again) form a replication cycle (clusters \"one-again\" and "
                          "\"one\" share the Sentinel 127.0.0.1:26380 and the master name "
                          "\"cache\"): every write would come back to the cluster it came from "
                          "and be replicated again, without end; replication in both directions "
                          "is not supported yet: remove one of these pipelines"));
  // read_from on a cluster that is a source somewhere is fine, even if it is a target too.
  LoadResult chain = loadConfigString(R"(clusters:
  a: {address: "127.0.0.1:7001"}
  b:
    type: redis_cluster
    addresses: [127.0.0.1:7000]
    read_from: replica
  c: {address: "127.0.0.1:7003"}
pipelines:
  - {name: ab, source: a, target: b, dbs: {0: 0}}
  - {name: bc, source: b, target: c}
)",
                                      kFile);
  EXPECT_TRUE(chain.ok()) << testing::PrintToString(errorsOf(chain));
}

// Two separate cycles, two messages; a pipeline on both is named in both.
TEST(config, EveryCycleIsReported) {
  LoadResult result = loadConfigString(R"(clusters:
  a: {address: "127.0.0.1:7001"}
  b: {address: "127.0.0.1:7002"}
  c: {address: "127.0.0.1:7003"}
pipelines:
  - {name: ab, source: a, target: b}
  - {name: ba, source: b, target: a}
  - {name: bc, source: b, target: c}
  - {name: cb, source: c, target: b}
)",
                                       kFile);
  EXPECT_FALSE(result.ok());
  EXPECT_THAT(errorsOf(result),
              ElementsAre(HasSubstr("t.yaml:7:24: error: pipelines \"ab\" (a -> b) and \"ba\" "
                                    "(b -> a) form a replication cycle"),
                          HasSubstr("t.yaml:9:24: error: pipelines \"bc\" (b -> c) and \"cb\" "
                                    "(c -> b) form a replication cycle")));
}

// ---- Several errors, warnings, redaction --------------------------------------------------

TEST(config, ReportsEveryErrorInFileOrder) {
  // Three independent mistakes in three sections; the cross-reference one (line 9) is found by a
  // later pass than the one on line 11, yet the output is in file order.
  LoadResult result = loadConfigString(R"(agent:
  log_level: verbose
clusters:
  a:
    address: 127.0.0.1:7001
  b:
    address: 127.0.0.1:7002
pipelines:
  - {name: p, source: a, target: c}
clock:
  max_skew: 10x
)",
                                       kFile);
  EXPECT_FALSE(result.ok());
  EXPECT_THAT(
      errorsOf(result),
      ElementsAre("t.yaml:2:14: error: invalid log_level \"verbose\": use one of trace, debug, "
                  "info, warn, error",
                  "t.yaml:9:34: error: target \"c\" is not a defined cluster; did you mean "
                  "\"a\"? Defined clusters: a, b",
                  "t.yaml:11:13: error: invalid duration \"10x\" for max_skew: use an integer "
                  "number of seconds or a number with ms, s, m, h or d"));
}

TEST(config, OverlappingCollectionsAreOnlyAWarning) {
  LoadResult result = loadConfigString(R"(clusters:
  a:
    address: 127.0.0.1:7001
  b:
    address: 127.0.0.1:7002
    buckets:
      - db: 0
        collections:
          - {name: sessions, keys: "sess:*"}
          - {name: eu-sessions, keys: "sess:eu:*"}
          - {name: users, keys: "user:*"}
          - {name: all, keys: "*"}
          - {name: rest, keys: "x?"}
pipelines:
  - {name: p, source: a, target: b}
)",
                                       kFile);
  ASSERT_TRUE(result.ok()) << testing::PrintToString(errorsOf(result));
  EXPECT_THAT(
      warningsOf(result),
      ElementsAre("t.yaml:10:39: warning: collection \"eu-sessions\" (keys \"sess:eu:*\") never "
                  "matches anything: collection \"sessions\" (line 9, keys \"sess:*\") comes "
                  "first and matches every key it would; reorder or remove one",
                  "t.yaml:13:32: warning: collection \"rest\" (keys \"x?\") never matches "
                  "anything: collection \"all\" (line 12, keys \"*\") comes first and matches "
                  "every key it would; reorder or remove one"));
  EXPECT_EQ(result.config->cluster("b")->buckets[0].collections.size(), 5u);
}

TEST(config, ASourceLinkTimeoutWithinThePingPeriodIsAWarning) {
  // An idle source sends only its PINGs, every 10 s by default: a link_timeout of 5 s on a
  // cluster that is read ends idle sessions. On a cluster only written it is fine (the target's
  // watchdog counts only while commands wait for answers), and 11 s is longer than the period.
  LoadResult result = loadConfigString(R"(clusters:
  a:
    address: 127.0.0.1:7001
    link_timeout: 5s
  b:
    address: 127.0.0.1:7002
    link_timeout: 2s
  c:
    address: 127.0.0.1:7003
    link_timeout: 11s
pipelines:
  - {name: p, source: a, target: b}
  - {name: q, source: c, target: b}
)",
                                       kFile);
  ASSERT_TRUE(result.ok()) << testing::PrintToString(errorsOf(result));
  EXPECT_THAT(warningsOf(result),
              ElementsAre("t.yaml:4:19: warning: link_timeout of cluster \"a\" is not longer "
                          "than 10 s, the default repl-ping-replica-period of a source (what an "
                          "idle source sends is its PINGs): an idle session would be ended as "
                          "silent; set the source's repl-ping-replica-period below a third of "
                          "link_timeout, or make link_timeout longer"));
}

TEST(config, RedactedJsonNeverContainsSecrets) {
  ScopedEnv env("XDCR_TEST_ENV_PASSWORD", "env-password-value");
  TempDir dir;
  dir.write("b.pass", "file-password-value\n");
  std::string path = dir.write("agent.yaml", R"(clusters:
  a:
    address: 127.0.0.1:7001
    password: plain-password-value
  b:
    address: 127.0.0.1:7002
    password: {file: b.pass}
  c:
    address: 127.0.0.1:7003
    password: {env: XDCR_TEST_ENV_PASSWORD}
pipelines:
  - {name: p, source: a, target: b}
)");
  LoadResult result = loadConfigFile(path);
  ASSERT_TRUE(result.ok()) << testing::PrintToString(errorsOf(result));
  // The values were resolved...
  EXPECT_EQ(result.config->cluster("a")->password.value, "plain-password-value");
  EXPECT_EQ(result.config->cluster("b")->password.value, "file-password-value");
  EXPECT_EQ(result.config->cluster("c")->password.value, "env-password-value");
  // ...and none of them is printed.
  std::string json = redactedJson(*result.config);
  EXPECT_THAT(json, Not(HasSubstr("password-value")));
  EXPECT_THAT(json, HasSubstr("\"password\": \"<redacted>\""));
  EXPECT_THAT(json, HasSubstr("\"password\": \"{file: b.pass}\""));
  EXPECT_THAT(json, HasSubstr("\"password\": \"{env: XDCR_TEST_ENV_PASSWORD}\""));
  EXPECT_THAT(json, HasSubstr("\"checkpoint_interval\": \"1s\""));
  EXPECT_THAT(json, HasSubstr("\"max_skew\": \"500ms\""));
  EXPECT_THAT(json, HasSubstr("\"threads\": 1"));
}

TEST(config, RedactedJsonOfClusterKinds) {
  ScopedEnv east("XDCR_TEST_EAST_PASSWORD", "east-password-value");
  ScopedEnv sentinel("XDCR_TEST_SENTINEL_PASSWORD", "sentinel-password-value");
  LoadResult result = loadConfigString(kClusterKinds, kFile);
  ASSERT_TRUE(result.ok()) << testing::PrintToString(errorsOf(result));
  std::string json = redactedJson(*result.config);
  EXPECT_THAT(json, Not(HasSubstr("password-value")));
  EXPECT_THAT(json, HasSubstr("\"type\": \"redis_cluster\""));
  EXPECT_THAT(json, HasSubstr("\"addresses\": [\n        \"10.0.0.1:7000\",\n        "
                              "\"10.0.0.2:6379\",\n        \"[::1]:7002\"\n      ]"));
  EXPECT_THAT(json, HasSubstr("\"read_from\": \"replica\""));
  EXPECT_THAT(json, HasSubstr("\"slots\": \"0-99,100,8192-16383\""));
  EXPECT_THAT(json, HasSubstr("\"sentinels\": [\n        \"10.0.1.1:26379\",\n        "
                              "\"10.0.1.2:26379\"\n      ]"));
  EXPECT_THAT(json, HasSubstr("\"master_name\": \"mymaster\""));
  EXPECT_THAT(json, HasSubstr("\"sentinel_username\": \"watcher\""));
  EXPECT_THAT(json, HasSubstr("\"sentinel_password\": \"{env: XDCR_TEST_SENTINEL_PASSWORD}\""));
  EXPECT_THAT(json, HasSubstr("\"password\": \"<redacted>\""));
  EXPECT_THAT(json, HasSubstr("\"link_timeout\": \"30s\""));
  EXPECT_THAT(json, HasSubstr("\"link_timeout\": \"1m\""));
  EXPECT_THAT(json, HasSubstr("\"address\": \"10.0.3.1:6379\""));
}

// SIGHUP restarts exactly the pipelines whose clusters changed, cluster-kind fields included.
TEST(config, FingerprintFollowsClusterKindFields) {
  ScopedEnv east("XDCR_TEST_EAST_PASSWORD", "east-password-value");
  auto fingerprint = [](const std::string& yaml, const char* pipeline) {
    LoadResult result = loadConfigString(yaml, kFile);
    EXPECT_TRUE(result.ok()) << testing::PrintToString(errorsOf(result));
    if (!result.ok()) return std::string();
    return pipelineFingerprint(*result.config, *result.config->pipeline(pipeline));
  };
  auto with = [](const std::string& from, const std::string& to) {
    std::string yaml = kClusterKinds;
    size_t at = yaml.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) yaml.replace(at, from.size(), to);
    return yaml;
  };
  std::string base;
  {
    ScopedEnv sentinel("XDCR_TEST_SENTINEL_PASSWORD", "sentinel-password-value");
    base = fingerprint(kClusterKinds, "east-to-north");
    ASSERT_FALSE(base.empty());
    EXPECT_EQ(fingerprint(kClusterKinds, "east-to-north"), base);
    EXPECT_NE(fingerprint(with("master_name: mymaster", "master_name: other"), "east-to-north"),
              base);
    EXPECT_NE(fingerprint(with("10.0.1.2]", "10.0.1.3]"), "east-to-north"), base);
    EXPECT_NE(fingerprint(with("read_from: replica", "read_from: master"), "east-to-north"), base);
    EXPECT_NE(fingerprint(with("\"0-99\", 100]", "\"0-99\"]"), "east-to-north"), base);
    EXPECT_NE(fingerprint(with("link_timeout: 30s", "link_timeout: 31s"), "east-to-north"), base);
    EXPECT_NE(fingerprint(with("\"10.0.0.2\"", "\"10.0.0.3\""), "east-to-north"), base);
    EXPECT_NE(
        fingerprint(with("sentinel_username: watcher", "sentinel_username: w2"), "east-to-north"),
        base);
    // Not a cluster of this pipeline: no restart.
    EXPECT_EQ(fingerprint(with("10.0.3.1:6379", "10.0.3.2:6379"), "east-to-north"), base);
  }
  // The same reference, another secret behind it.
  ScopedEnv sentinel("XDCR_TEST_SENTINEL_PASSWORD", "rotated-sentinel-password");
  EXPECT_NE(fingerprint(kClusterKinds, "east-to-north"), base);
}

TEST(config, SecretDescribe) {
  Secret secret;
  EXPECT_EQ(secret.describe(), "");
  secret.kind = Secret::Kind::Plain;
  secret.value = "v";
  EXPECT_EQ(secret.describe(), "<redacted>");
  secret.kind = Secret::Kind::Env;
  secret.ref = "NAME";
  EXPECT_EQ(secret.describe(), "{env: NAME}");
  secret.kind = Secret::Kind::File;
  secret.ref = "/run/secrets/p";
  EXPECT_EQ(secret.describe(), "{file: /run/secrets/p}");
}

TEST(config, DiagnosticFormat) {
  Diagnostic d{Diagnostic::Severity::Error, "a.yaml", {3, 7}, "boom; fix it"};
  EXPECT_EQ(d.format(), "a.yaml:3:7: error: boom; fix it");
  d.severity = Diagnostic::Severity::Warning;
  EXPECT_EQ(d.format(), "a.yaml:3:7: warning: boom; fix it");
  d.mark = {};
  EXPECT_EQ(d.format(), "a.yaml: warning: boom; fix it");
}

TEST(config, NeverThrowsOnOddInput) {
  const char* inputs[] = {
      "",
      "\x01\x02\xff\xfe",
      "[1, 2, 3]",
      "just a string",
      "? [a, b]\n: c\n",
      "clusters: &x\n  a: *x\n",
      "a: 1\n---\nb: 2\n",
      "clusters:\n\tx: 1\n",
      "pipelines:\n  - ~\n  - 3\n",
      ",",  // yaml-cpp 0.7's LoadAll looped forever on these (fuzz/corpus/config/regression-*)
      "\t,",
      "&a ,",
  };
  for (const char* input : inputs) {
    LoadResult result;
    EXPECT_NO_THROW(result = loadConfigString(input, kFile)) << input;
    EXPECT_FALSE(result.ok()) << input;
    EXPECT_FALSE(errorsOf(result).empty()) << input;
  }
}

// The shipped examples are what users copy: every one must load without an error (the secrets
// they name are given here).
TEST(config, ExamplesLoad) {
  ScopedEnv east("EAST_PASSWORD", "east-password-value");
  ScopedEnv west("WEST_PASSWORD", "west-password-value");
  size_t seen = 0;
  for (const auto& e : std::filesystem::directory_iterator(XDCR_SOURCE_DIR "/examples")) {
    if (e.path().extension() != ".yaml") continue;
    ++seen;
    LoadResult result = loadConfigFile(e.path().string());
    EXPECT_TRUE(result.ok()) << e.path() << ": " << testing::PrintToString(errorsOf(result));
  }
  EXPECT_GE(seen, 4u) << "demo, cluster, cluster-split-a and -b at least";
}

// ---- bandwidth_limit (issue 17 point 3) -----------------------------------------------------

/** kMinimal with `bandwidth_limit: <value>` on its pipeline (line 10, the value at column 22). */
std::string withBandwidth(const std::string& value) {
  return std::string(kMinimal) + "    bandwidth_limit: " + value + "\n";
}

TEST(config, BandwidthLimitIsBytesPerSecondWithOrWithoutAUnit) {
  const std::vector<std::pair<std::string, uint64_t>> cases = {
      {"0", 0},
      {"1500000", 1'500'000},
      {"20MB", 20'000'000},
      {"500KB", 500'000},
      {"500kB", 500'000},
      {"1GB", 1'000'000'000},
      {"64KiB", 64 * 1024},
      {"20MiB", 20ULL << 20},
      {"1GiB", 1ULL << 30},
      {"1.5MB", 1'500'000},
      {"0.5GiB", 1ULL << 29},
      {"\"20 MB/s\"", 20'000'000},
      {"100B", 100},
  };
  for (const auto& [text, bytes] : cases) {
    LoadResult result = loadConfigString(withBandwidth(text), kFile);
    ASSERT_TRUE(result.ok()) << text << ": " << testing::PrintToString(errorsOf(result));
    EXPECT_EQ(result.config->pipelines.at(0).bandwidth_limit, bytes) << text;
  }
  // Absent: no limit.
  LoadResult none = loadConfigString(kMinimal, kFile);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none.config->pipelines.at(0).bandwidth_limit, 0u);
}

constexpr char kBandwidthHow[] =
    "use 0 for no limit, an integer number of bytes per second, or a number with a unit: 20MB, "
    "500KB, 1GB (powers of 1000) or 64KiB, 20MiB, 1GiB (powers of 1024)";

INSTANTIATE_TEST_SUITE_P(
    configBandwidth, InvalidConfigTest,
    testing::Values(
        InvalidCase{"Negative", withBandwidth("-20MB"),
                    std::string("t.yaml:10:22: error: bandwidth_limit must not be negative (got "
                                "\"-20MB\"); ") +
                        kBandwidthHow},
        InvalidCase{"NegativeInteger", withBandwidth("-1"),
                    std::string("t.yaml:10:22: error: bandwidth_limit must not be negative (got "
                                "\"-1\"); ") +
                        kBandwidthHow},
        InvalidCase{
            "NotANumber", withBandwidth("fast"),
            std::string("t.yaml:10:22: error: invalid bandwidth_limit \"fast\": ") + kBandwidthHow},
        // Megabits, or Redis's "mb": refused rather than guessed.
        InvalidCase{"LowerCaseB", withBandwidth("100Mb"),
                    std::string("t.yaml:10:22: error: invalid bandwidth_limit \"100Mb\": ") +
                        kBandwidthHow},
        InvalidCase{
            "AFractionOfAByte", withBandwidth("1.5"),
            std::string("t.yaml:10:22: error: invalid bandwidth_limit \"1.5\": ") + kBandwidthHow},
        InvalidCase{"TooLarge", withBandwidth("99999999999999999999"),
                    std::string("t.yaml:10:22: error: invalid bandwidth_limit "
                                "\"99999999999999999999\": ") +
                        kBandwidthHow},
        InvalidCase{"AList", withBandwidth("[20MB]"),
                    std::string("t.yaml:10:22: error: bandwidth_limit must be bytes per second "
                                "such as 20MB, not a list; ") +
                        kBandwidthHow}));

TEST(config, BandwidthLimitIsInTheEffectiveConfigAndTheFingerprint) {
  LoadResult limited = loadConfigString(withBandwidth("20MB"), kFile);
  LoadResult unlimited = loadConfigString(kMinimal, kFile);
  ASSERT_TRUE(limited.ok() && unlimited.ok());
  EXPECT_THAT(redactedJson(*limited.config), HasSubstr("\"bandwidth_limit\": 20000000"));
  EXPECT_THAT(redactedJson(*unlimited.config), HasSubstr("\"bandwidth_limit\": 0"));
  // A changed limit restarts the pipeline on SIGHUP (the same value written otherwise does not).
  const auto fp = [](const LoadResult& r) {
    return pipelineFingerprint(*r.config, r.config->pipelines.at(0));
  };
  EXPECT_NE(fp(limited), fp(unlimited));
  LoadResult same = loadConfigString(withBandwidth("20000000"), kFile);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(fp(limited), fp(same));
}

// ---- spool_limit (issue 17 point 4) ---------------------------------------------------------

/** A source cluster with `spool_limit: <value>` (line 4, the value at column 18). */
std::string withSpoolLimit(const std::string& value, const char* where = "a") {
  std::string yaml = "clusters:\n  a:\n    address: 127.0.0.1:7001\n";
  if (std::string(where) == "a") yaml += "    spool_limit: " + value + "\n";
  yaml += "  b:\n    address: 127.0.0.1:7002\n";
  if (std::string(where) == "b") yaml += "    spool_limit: " + value + "\n";
  return yaml + "pipelines:\n  - {name: p, source: a, target: b}\n";
}

TEST(config, SpoolLimitIsASizeZeroTurnsTheSpoolOffAbsentIsDerived) {
  const std::vector<std::pair<std::string, uint64_t>> cases = {
      {"0", 0},
      {"4GB", 4'000'000'000},
      {"4GiB", 4ULL << 30},
      {"512MiB", 512ULL << 20},
      {"1.5GB", 1'500'000'000},
      {"1000000", 1'000'000},
  };
  for (const auto& [text, bytes] : cases) {
    LoadResult result = loadConfigString(withSpoolLimit(text), kFile);
    ASSERT_TRUE(result.ok()) << text << ": " << testing::PrintToString(errorsOf(result));
    ASSERT_TRUE(result.config->cluster("a")->spool_limit.has_value()) << text;
    EXPECT_EQ(*result.config->cluster("a")->spool_limit, bytes) << text;
  }
  LoadResult derived = loadConfigString(kMinimal, kFile);
  ASSERT_TRUE(derived.ok());
  EXPECT_FALSE(derived.config->cluster("a")->spool_limit.has_value());
  EXPECT_THAT(redactedJson(*derived.config), HasSubstr("\"spool_limit\": \"auto\""));
  LoadResult four = loadConfigString(withSpoolLimit("4GB"), kFile);
  ASSERT_TRUE(four.ok());
  EXPECT_THAT(redactedJson(*four.config), HasSubstr("\"spool_limit\": 4000000000"));
  // A changed limit restarts the pipelines reading that source on SIGHUP.
  const auto fp = [](const LoadResult& r) {
    return pipelineFingerprint(*r.config, r.config->pipelines.at(0));
  };
  EXPECT_NE(fp(four), fp(derived));
  LoadResult same = loadConfigString(withSpoolLimit("4000000000"), kFile);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(fp(four), fp(same));
}

constexpr char kSpoolHow[] =
    "use 0 for no spool (the source read at the targets' pace), an integer number of bytes, or a "
    "number with a unit: 4GB, 500MB (powers of 1000) or 4GiB, 512MiB (powers of 1024)";

INSTANTIATE_TEST_SUITE_P(
    configSpoolLimit, InvalidConfigTest,
    testing::Values(
        InvalidCase{"Negative", withSpoolLimit("-4GB"),
                    std::string("t.yaml:4:18: error: spool_limit must not be negative (got "
                                "\"-4GB\"); ") +
                        kSpoolHow},
        // A size, not a rate.
        InvalidCase{"PerSecond", withSpoolLimit("4GB/s"),
                    std::string("t.yaml:4:18: error: invalid spool_limit \"4GB/s\": ") + kSpoolHow},
        InvalidCase{"NotANumber", withSpoolLimit("lots"),
                    std::string("t.yaml:4:18: error: invalid spool_limit \"lots\": ") + kSpoolHow},
        InvalidCase{"OnATargetOnly", withSpoolLimit("4GB", "b"),
                    "t.yaml:6:5: error: spool_limit bounds what a full sync keeps on the agent's "
                    "disk, so it applies only to a source, but cluster \"b\" is only a target (of "
                    "pipeline \"p\"); remove spool_limit"}));

}  // namespace
}  // namespace xdcr::config
