// Security end to end (issue 9): Debian's redis-server listening with TLS only (`--port 0
// --tls-port P`, certificates made here with the openssl CLI by TestCa; the test itself talks to
// the servers over their Unix sockets), and the agent between them.
//
//   - a good certificate: full sync + stream over TLS on both sides, verify and the clock probe
//     over TLS;
//   - a wrong CA, a wrong host name (IP and DNS), an expired certificate: refused with a clear
//     error before anything is sent (the server's commandstats do not move, the target holds
//     no data);
//   - mutual TLS: refused without a client certificate, replicates with one;
//   - TLS on one side only: a hint; `verify: false`: works and is warned about;
//   - a wrong password: the cluster and the user are named, the password is not;
//   - the README's minimal ACLs, applied verbatim: full sync, stream, replay stamp, stale-key
//     sweep, resume, verify;
//   - secrets (passwords, admin token) in no log line, /config, /status, /metrics or error
//     output; the admin token guards the POST endpoints, GETs stay open.

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config.h"
#include "replicator/admin_server.h"
#include "tests/support/harness.h"

namespace xdcr::test {
namespace {

using namespace std::chrono_literals;

constexpr auto kReplicateTimeout = 60s;
constexpr auto kRefusalTimeout = 30s;
constexpr auto kCommandTimeout = 60s;

/** A secret made at run time: never in the repository, unique per test. */
std::string randomSecret(const std::string& prefix) {
  std::random_device rd;
  std::mt19937_64 rng((uint64_t(rd()) << 32) ^ rd());
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  return prefix + buf;
}

/** Per command: "calls=..,rejected_calls=..,failed_calls=.." from INFO commandstats, without
 * INFO itself (the test's own reads). Unchanged = the server executed nothing from anyone else. */
std::map<std::string, std::string> commandCounts(const RedisServer& server) {
  RespClient c = server.client();
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : c.info("commandstats")) {
    if (key.rfind("cmdstat_", 0) != 0 || key == "cmdstat_info") continue;
    std::string counts;
    std::istringstream in(value);
    std::string item;
    while (std::getline(in, item, ',')) {
      if (item.rfind("calls=", 0) == 0 || item.rfind("rejected_calls=", 0) == 0 ||
          item.rfind("failed_calls=", 0) == 0) {
        counts += item + ",";
      }
    }
    out[key] = counts;
  }
  return out;
}

int64_t dataKeys(const RedisServer& server, int db = 0, const std::string& password = "") {
  RespClient c = server.client();
  if (!password.empty()) c.command({"AUTH", password});
  c.select(db);
  return dataDbSize(c);
}

/** The agent's log lines at `level` (text format: "TIMESTAMP LEVEL message"). */
std::vector<std::string> linesAtLevel(const std::string& log, const std::string& level) {
  std::vector<std::string> out;
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string ts, lv;
    if (words >> ts >> lv && lv == level) out.push_back(line);
  }
  return out;
}

std::string describe(const std::map<std::string, std::string>& counts) {
  std::string out;
  for (const auto& [k, v] : counts) out += k + "{" + v + "} ";
  return out;
}

/** One cluster in the generated config. */
struct Side {
  const RedisServer* server = nullptr;
  std::string username;
  std::string password;  // YAML value, e.g. "{env: NAME}"; "" = no password
  std::string tls;       // YAML flow mapping, e.g. "{ca_file: /x/ca.crt}"; "" = no TLS
};

std::string clusterYaml(const std::string& name, const Side& side) {
  std::string y = "  " + name + ":\n    type: redis\n    address: \"127.0.0.1:" +
                  std::to_string(side.server->port()) + "\"\n";
  if (!side.username.empty()) y += "    username: " + side.username + "\n";
  if (!side.password.empty()) y += "    password: " + side.password + "\n";
  if (!side.tls.empty()) y += "    tls: " + side.tls + "\n";
  return y;
}

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!opensslAvailable()) GTEST_SKIP() << "the openssl CLI is not installed";
    ca_ = std::make_unique<TestCa>(dir_.file("ca"));
    other_ca_ = std::make_unique<TestCa>(dir_.file("other-ca"));
    good_ = ca_->issueServer("localhost", {"DNS:localhost", "IP:127.0.0.1"});
  }

  RedisTls tlsWith(const IssuedCert& cert, bool auth_clients = false) const {
    return RedisTls{cert.cert_file, cert.key_file, ca_->caFile(), auth_clients};
  }
  std::unique_ptr<RedisServer> tlsServer(const IssuedCert& cert, bool auth_clients = false) {
    return RedisServer::startTls(tlsWith(cert, auth_clients), {"--repl-diskless-sync-delay", "0"});
  }
  std::string caTls(const std::string& extra = "") const {
    return "{ca_file: \"" + ca_->caFile() + "\"" + extra + "}";
  }

  /** Writes a config; `name` distinguishes the state dirs of several agents in one test. */
  std::string writeConfig(const std::string& name, const Side& src, const Side& dst,
                          const std::string& agent_extra = "",
                          const std::string& pipeline_extra = "") {
    const std::string path = dir_.file(name + ".yaml");
    writeFileText(path, "agent: {state_dir: \"" + dir_.file(name + "-state") + "\"" + agent_extra +
                            "}\n" + "clusters:\n" + clusterYaml("src", src) +
                            clusterYaml("dst", dst) +
                            "pipelines:\n  - {name: p, source: src, target: dst, "
                            "checkpoint_interval: 1s" +
                            pipeline_extra + "}\n");
    return path;
  }

  /** Waits until the agent's log has a line containing `needle`; returns that line. */
  std::string waitForLogLine(AgentProcess& agent, const std::string& needle,
                             std::chrono::milliseconds timeout = kRefusalTimeout) {
    std::string line;
    waitUntil(
        [&] {
          std::istringstream in(agent.logText());
          while (std::getline(in, line)) {
            if (line.find(needle) != std::string::npos) return true;
          }
          line.clear();
          return false;
        },
        timeout, 100ms);
    return line;
  }

  /** `count` string keys PREFIXi = vi, half of them with a deadline an hour away. */
  static void writeKeys(const RedisServer& server, const std::string& prefix, int count) {
    RespClient c = server.client();
    std::vector<RespCommand> cmds;
    for (int i = 0; i < count; ++i) {
      RespCommand cmd = {"SET", prefix + std::to_string(i), "v" + std::to_string(i)};
      if (i % 2 == 0) cmd.insert(cmd.end(), {"EX", "3600"});
      cmds.push_back(cmd);
    }
    c.pipeline(cmds);
  }

  /** Every data key of db 0 of the source is on the target with its value and its deadline. */
  static void expectSameKeys(const RedisServer& source, const RedisServer& target) {
    RespClient s = source.client();
    RespClient t = target.client();
    std::vector<std::string> keys;
    const RespValue all = s.command({"KEYS", "*"});
    for (const auto& k : all.array()) keys.push_back(k.str());
    ASSERT_EQ(keys.size(), static_cast<size_t>(dataKeys(target)));
    std::vector<RespCommand> reads;
    for (const auto& k : keys) {
      reads.push_back({"GET", k});
      reads.push_back({"PEXPIRETIME", k});
    }
    auto sv = s.pipeline(reads);
    auto tv = t.pipeline(reads);
    int mismatches = 0;
    for (size_t i = 0; i < reads.size() && mismatches < 10; ++i) {
      if (!(sv[i] == tv[i])) {
        ++mismatches;
        ADD_FAILURE() << reads[i][0] << " " << reads[i][1] << ": source " << sv[i].toString()
                      << ", target " << tv[i].toString();
      }
    }
  }

  /** Waits until the target holds `count` data keys in db 0. */
  static bool waitForKeys(const RedisServer& target, int64_t count,
                          std::chrono::milliseconds timeout = kReplicateTimeout,
                          const std::string& password = "") {
    return waitUntil([&] { return dataKeys(target, 0, password) == count; }, timeout, 100ms);
  }

  AgentCommandResult verifyCommand(const std::string& config, const std::string& name) {
    return runAgentCommand({"verify", "-c", config, "-p", "p", "--rate", "0"},
                           dir_.file(name + ".out"), kCommandTimeout);
  }

  TempDir dir_{"xdcr-security"};
  std::unique_ptr<TestCa> ca_;
  std::unique_ptr<TestCa> other_ca_;
  IssuedCert good_;
};

TEST_F(SecurityTest, GoodCertificateReplicatesAFullSyncAndTheStreamOverTls) {
  auto source = tlsServer(good_);
  auto target = tlsServer(good_);
  writeKeys(*source, "full:", 1000);
  const std::string admin = "127.0.0.1:" + std::to_string(freePort());
  // The source is checked by its DNS name (SNI + name), the target by its IP address (IP SAN).
  const std::string config =
      writeConfig("agent", Side{source.get(), "", "", caTls(", server_name: localhost")},
                  Side{target.get(), "", "", caTls()}, ", admin_listen: \"" + admin + "\"");
  AgentProcess agent(config, dir_.file("agent.log"));
  ASSERT_TRUE(waitForKeys(*target, 1000)) << agent.logTail();

  // The stream: more keys, overwrites with new deadlines, deletions.
  writeKeys(*source, "stream:", 500);
  {
    RespClient c = source->client();
    std::vector<RespCommand> cmds;
    for (int i = 0; i < 100; ++i) cmds.push_back({"DEL", "full:" + std::to_string(i)});
    for (int i = 100; i < 200; ++i) {
      cmds.push_back({"SET", "full:" + std::to_string(i), "new", "PX", "7200000"});
    }
    c.pipeline(cmds);
  }
  ASSERT_TRUE(waitForKeys(*target, 1400)) << agent.logTail();
  ASSERT_TRUE(waitUntil(
      [&] {
        return target->client().command({"GET", "full:199"}) == RespValue::bulk("new");
      },
      kReplicateTimeout))
      << agent.logTail();
  expectSameKeys(*source, *target);
  EXPECT_TRUE(linesAtLevel(agent.logText(), "error").empty()) << agent.logTail();
  EXPECT_TRUE(linesAtLevel(agent.logText(), "warning").empty()) << agent.logTail();

  // TLS sessions cut on both sides: the agent reconnects (handshakes again) and resumes.
  target->client().command({"CLIENT", "KILL", "TYPE", "normal"});
  source->client().command({"CLIENT", "KILL", "TYPE", "replica"});
  writeKeys(*source, "after-cut:", 100);
  ASSERT_TRUE(waitForKeys(*target, 1500)) << agent.logTail();
  expectSameKeys(*source, *target);

  // The agent is the source's replica, over its TLS port (the only TCP port it has).
  EXPECT_EQ(source->client().info("replication")["connected_slaves"], "1");
  // The clock probe reached both clusters over TLS.
  nlohmann::json status;
  ASSERT_TRUE(waitUntil(
      [&] {
        auto r = replicator::adminGet(admin, "/status", 5s);
        if (!r || r->first != 200) return false;
        status = nlohmann::json::parse(r->second, nullptr, false);
        return status.is_object() && status["clock"].value("measured", false) &&
               status["clock"]["clusters"]["src"].value("measured", false) &&
               status["clock"]["clusters"]["dst"].value("measured", false);
      },
      kRefusalTimeout))
      << status.dump(2);
  EXPECT_EQ(status["clock"]["clusters"]["src"]["error"], "");
  EXPECT_EQ(status["clock"]["clusters"]["dst"]["error"], "");
  // verify over TLS on both sides.
  auto v = verifyCommand(config, "verify");
  EXPECT_EQ(v.exit_code, 0) << v.output;
  EXPECT_NE(v.output.find("0 missing, 0 value mismatches"), std::string::npos) << v.output;
  for (const auto& line : linesAtLevel(agent.logText(), "error")) {
    EXPECT_NE(line.find("after it had worked"), std::string::npos) << line;
  }
  EXPECT_FALSE(agent.terminate().forced);
}

TEST_F(SecurityTest, WrongCaIsRefusedBeforeAnythingIsSent) {
  auto rogue = other_ca_->issueServer("localhost", {"DNS:localhost", "IP:127.0.0.1"});
  auto source = tlsServer(rogue);
  RedisServer target;
  writeKeys(*source, "k:", 100);
  const auto source_before = commandCounts(*source);
  const std::string config =
      writeConfig("agent", Side{source.get(), "", "", caTls()}, Side{&target, "", "", ""});
  AgentProcess agent(config, dir_.file("agent.log"));
  const std::string line = waitForLogLine(agent, "pipeline p: source src");
  ASSERT_FALSE(line.empty()) << agent.logTail();
  EXPECT_NE(line.find("TLS: certificate verify failed: unable to get local issuer certificate"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("is not issued by a CA in clusters.src.tls.ca_file \"" + ca_->caFile()),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("check clusters.src.tls.ca_file"), std::string::npos) << line;
  EXPECT_NE(line.find("refused before anything was sent"), std::string::npos) << line;
  // It keeps trying (the certificate may be fixed) and never gets further.
  std::this_thread::sleep_for(1500ms);
  EXPECT_TRUE(agent.running());
  EXPECT_EQ(commandCounts(*source), source_before) << describe(commandCounts(*source));
  EXPECT_EQ(source->client().info("replication")["connected_slaves"], "0");
  EXPECT_EQ(dataKeys(target), 0);
  EXPECT_FALSE(agent.terminate().forced);

  // The same from verify: exit 2, the same explanation on its error output.
  auto v = verifyCommand(config, "verify");
  EXPECT_EQ(v.exit_code, 2) << v.output;
  EXPECT_NE(v.output.find("certificate verify failed"), std::string::npos) << v.output;
  EXPECT_EQ(commandCounts(*source), source_before) << describe(commandCounts(*source));

  // verify: false connects anyway, and says loudly that nothing is checked.
  const std::string insecure = writeConfig(
      "insecure", Side{source.get(), "", "", "{verify: false}"}, Side{&target, "", "", ""});
  auto c = runAgentCommand({"clock", "-c", insecure, "-o", "json"}, dir_.file("clock.out"),
                           kCommandTimeout);
  EXPECT_NE(c.output.find("cluster src (" + source->address() +
                          "): tls.verify is false: the server's certificate and name are NOT "
                          "checked"),
            std::string::npos)
      << c.output;
  EXPECT_EQ(c.report["clusters"]["src"]["measured"], true) << c.output;
}

TEST_F(SecurityTest, WrongHostNameIsRefusedBeforeAnythingIsSent) {
  auto misnamed = ca_->issueServer("other.example", {"DNS:other.example"});
  RedisServer source;
  auto target = tlsServer(misnamed);
  const auto target_before = commandCounts(*target);

  // By address: 127.0.0.1 is not among the certificate's names.
  const std::string by_ip =
      writeConfig("agent", Side{&source, "", "", ""}, Side{target.get(), "", "", caTls()});
  {
    AgentProcess agent(by_ip, dir_.file("agent.log"));
    const std::string line = waitForLogLine(agent, "pipeline p: target dst");
    ASSERT_FALSE(line.empty()) << agent.logTail();
    EXPECT_NE(line.find("TLS: certificate verify failed: IP address mismatch"), std::string::npos)
        << line;
    EXPECT_NE(line.find("not valid for the name \"127.0.0.1\" (it lists DNS:other.example); "
                        "set clusters.dst.tls.server_name"),
              std::string::npos)
        << line;
    std::this_thread::sleep_for(1500ms);
    EXPECT_FALSE(agent.terminate().forced);
  }
  // By name: server_name is checked (and sent as SNI).
  const std::string by_name =
      writeConfig("named", Side{&source, "", "", ""},
                  Side{target.get(), "", "", caTls(", server_name: redis.example")});
  auto v = verifyCommand(by_name, "verify");
  EXPECT_EQ(v.exit_code, 2) << v.output;
  EXPECT_NE(v.output.find("TLS: certificate verify failed: hostname mismatch"), std::string::npos)
      << v.output;
  EXPECT_NE(v.output.find("not valid for the name \"redis.example\""), std::string::npos)
      << v.output;
  // The target executed nothing from the agent: no AUTH, PING, CONFIG, TIME, GET, SET, RESTORE.
  EXPECT_EQ(commandCounts(*target), target_before) << describe(commandCounts(*target));
  EXPECT_EQ(dataKeys(*target), 0);
}

TEST_F(SecurityTest, ExpiredCertificateIsRefusedBeforeAnythingIsSent) {
  CertOptions expired;
  expired.not_before = "20200101000000Z";
  expired.not_after = "20200102000000Z";
  auto old = ca_->issue("expired.example", {"DNS:localhost", "IP:127.0.0.1"}, expired);
  auto source = tlsServer(old);
  RedisServer target;
  writeKeys(*source, "k:", 100);
  const auto source_before = commandCounts(*source);
  const std::string config =
      writeConfig("agent", Side{source.get(), "", "", caTls()}, Side{&target, "", "", ""});
  AgentProcess agent(config, dir_.file("agent.log"));
  const std::string line = waitForLogLine(agent, "pipeline p: source src");
  ASSERT_FALSE(line.empty()) << agent.logTail();
  EXPECT_NE(line.find("TLS: certificate verify failed: certificate has expired"), std::string::npos)
      << line;
  EXPECT_NE(line.find("expired on 2020-01-02 00:00:00 UTC"), std::string::npos) << line;
  EXPECT_NE(line.find("renew the server's certificate"), std::string::npos) << line;
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(commandCounts(*source), source_before) << describe(commandCounts(*source));
  EXPECT_EQ(dataKeys(target), 0);
  EXPECT_FALSE(agent.terminate().forced);
}

TEST_F(SecurityTest, MutualTlsIsRequiredAndWorksWithAClientCertificate) {
  auto source = tlsServer(good_, /*auth_clients=*/true);
  auto target = tlsServer(good_, /*auth_clients=*/true);
  writeKeys(*source, "full:", 300);
  const auto source_before = commandCounts(*source);
  const auto target_before = commandCounts(*target);

  // Without a client certificate: refused, nothing executed on either side.
  {
    const std::string config = writeConfig("nocert", Side{source.get(), "", "", caTls()},
                                           Side{target.get(), "", "", caTls()});
    AgentProcess agent(config, dir_.file("nocert.log"));
    const std::string line = waitForLogLine(agent, "pipeline p: target dst");
    ASSERT_FALSE(line.empty()) << agent.logTail();
    EXPECT_NE(line.find("requires a client certificate (mutual TLS, Redis "
                        "tls-auth-clients): set clusters.dst.tls.cert_file and "
                        "clusters.dst.tls.key_file"),
              std::string::npos)
        << line;
    auto v = verifyCommand(config, "verify-nocert");
    EXPECT_EQ(v.exit_code, 2) << v.output;
    EXPECT_NE(v.output.find("set clusters.src.tls.cert_file"), std::string::npos) << v.output;
    EXPECT_FALSE(agent.terminate().forced);
    EXPECT_EQ(commandCounts(*source), source_before) << describe(commandCounts(*source));
    EXPECT_EQ(commandCounts(*target), target_before) << describe(commandCounts(*target));
    EXPECT_EQ(dataKeys(*target), 0);
  }
  // With one: full sync and stream.
  auto client = ca_->issueClient("xdcr-agent");
  const std::string mtls =
      caTls(", cert_file: \"" + client.cert_file + "\", key_file: \"" + client.key_file + "\"");
  const std::string config =
      writeConfig("mtls", Side{source.get(), "", "", mtls}, Side{target.get(), "", "", mtls});
  AgentProcess agent(config, dir_.file("mtls.log"));
  ASSERT_TRUE(waitForKeys(*target, 300)) << agent.logTail();
  writeKeys(*source, "stream:", 200);
  ASSERT_TRUE(waitForKeys(*target, 500)) << agent.logTail();
  expectSameKeys(*source, *target);
  EXPECT_FALSE(agent.terminate().forced);
}

TEST_F(SecurityTest, TlsOnOneSideOnlyGivesAHint) {
  auto tls_only = tlsServer(good_);
  RedisServer plain;
  // A plain client on the TLS port, then a TLS client on the plain port; `clock` probes both.
  const std::string config =
      writeConfig("agent", Side{tls_only.get(), "", "", ""}, Side{&plain, "", "", caTls()});
  auto c = runAgentCommand({"clock", "-c", config, "-o", "json"}, dir_.file("clock.out"),
                           kCommandTimeout);
  const std::string src_error = c.report["clusters"]["src"].value("error", "");
  const std::string dst_error = c.report["clusters"]["dst"].value("error", "");
  EXPECT_NE(src_error.find("if the server expects TLS on this port, add a tls: section to "
                           "cluster src"),
            std::string::npos)
      << c.output;
  EXPECT_NE(dst_error.find("is " + plain.address() +
                           " a TLS port? If the server does not use "
                           "TLS there, remove tls: from cluster dst"),
            std::string::npos)
      << c.output;
}

TEST_F(SecurityTest, WrongPasswordNamesTheClusterAndUserButNotThePassword) {
  auto source = tlsServer(good_);
  RedisServer target;
  const std::string right = randomSecret("right-");
  const std::string wrong = randomSecret("wrong-");
  source->client().command({"ACL", "SETUSER", "xdcr-source", "on", ">" + right, "+psync",
                            "+replconf", "+ping", "+time"});
  ::setenv("XDCR_SECURITY_TEST_WRONG_PW", wrong.c_str(), 1);
  const std::string config = writeConfig(
      "agent", Side{source.get(), "xdcr-source", "{env: XDCR_SECURITY_TEST_WRONG_PW}", caTls()},
      Side{&target, "", "", ""});
  AgentProcess agent(config, dir_.file("agent.log"));
  const std::string line = waitForLogLine(agent, "pipeline p: source src");
  ASSERT_FALSE(line.empty()) << agent.logTail();
  EXPECT_NE(line.find("authentication to cluster src as user \"xdcr-source\" failed: WRONGPASS"),
            std::string::npos)
      << line;
  EXPECT_NE(line.find("check the cluster's username and password"), std::string::npos) << line;
  auto v = verifyCommand(config, "verify");
  EXPECT_EQ(v.exit_code, 2) << v.output;
  EXPECT_NE(v.output.find("authentication to cluster src as user \"xdcr-source\" failed"),
            std::string::npos)
      << v.output;
  EXPECT_FALSE(agent.terminate().forced);
  for (const std::string& shown : {agent.logText(), v.output}) {
    EXPECT_EQ(shown.find(wrong), std::string::npos);
    EXPECT_EQ(shown.find(right), std::string::npos);
  }
}

/** The `ACL SETUSER …` lines of the README's Security section, in order. */
std::vector<std::string> documentedAclLines() {
  std::ifstream in(std::string(XDCR_SOURCE_DIR) + "/README.md");
  std::vector<std::string> lines;
  std::string line;
  bool in_security = false;
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) in_security = line == "## Security";
    if (in_security && line.rfind("ACL SETUSER ", 0) == 0) lines.push_back(line);
  }
  return lines;
}

/** Runs one documented line with the placeholders replaced, split at spaces as redis-cli would. */
void applyAcl(const RedisServer& server, std::string line, const std::string& source_pw,
              const std::string& target_pw) {
  for (auto [from, to] : {std::pair<std::string, std::string>{"SOURCE_PASSWORD", source_pw},
                          std::pair<std::string, std::string>{"TARGET_PASSWORD", target_pw}}) {
    if (auto at = line.find(from); at != std::string::npos) line.replace(at, from.size(), to);
  }
  RespCommand cmd;
  std::istringstream in(line);
  std::string word;
  while (in >> word) cmd.push_back(word);
  auto r = server.client().command(cmd);
  ASSERT_FALSE(r.isError()) << line << ": " << r.toString();
}

TEST_F(SecurityTest, DocumentedMinimalAclsReplicateAFullSyncAndTheStream) {
  const auto acl = documentedAclLines();
  ASSERT_EQ(acl.size(), 4u) << "README.md's Security section must list 4 ACL SETUSER lines";
  ASSERT_NE(acl[0].find("ACL SETUSER xdcr-source on >SOURCE_PASSWORD"), std::string::npos);
  ASSERT_NE(acl[1].find("ACL SETUSER xdcr-target on >TARGET_PASSWORD"), std::string::npos);
  RedisServer source{{"--repl-diskless-sync-delay", "0"}};
  RedisServer target;
  const std::string source_pw = randomSecret("src-");
  const std::string target_pw = randomSecret("dst-");
  ASSERT_NO_FATAL_FAILURE(applyAcl(source, acl[0], source_pw, target_pw));
  ASSERT_NO_FATAL_FAILURE(applyAcl(target, acl[1], source_pw, target_pw));

  // A snapshot with several types and two dbs; a stale key in the pipeline's key space.
  {
    RespClient c = source.client();
    std::vector<RespCommand> cmds;
    for (int i = 0; i < 300; ++i) {
      cmds.push_back({"SET", "s:" + std::to_string(i), "v", "EX", "3600"});
    }
    for (int i = 0; i < 20; ++i) cmds.push_back({"HSET", "h:" + std::to_string(i), "f", "v"});
    for (int i = 0; i < 20; ++i) cmds.push_back({"RPUSH", "l:" + std::to_string(i), "a", "b"});
    cmds.push_back({"SET", "counter", "10"});
    c.pipeline(cmds);
    c.select(1);
    c.command({"SET", "db1:key", "x"});
    RespClient t = target.client();
    t.command({"SET", "stale:1", "from an older history"});
  }
  writeFileText(dir_.file("src.pass"), source_pw + "\n");
  ::setenv("XDCR_SECURITY_TEST_TARGET_PW", target_pw.c_str(), 1);
  const std::string admin = "127.0.0.1:" + std::to_string(freePort());
  const std::string config =
      writeConfig("agent", Side{&source, "xdcr-source", "{file: src.pass}", ""},
                  Side{&target, "xdcr-target", "{env: XDCR_SECURITY_TEST_TARGET_PW}", ""},
                  ", admin_listen: \"" + admin + "\"", ", full_sync: {delete_stale_keys: true}");
  auto status = [&] {
    auto r = replicator::adminGet(admin, "/status", 5s);
    return r && r->first == 200 ? nlohmann::json::parse(r->second, nullptr, false)
                                : nlohmann::json();
  };
  auto caughtUp = [&] {
    RespClient c = source.client();
    const uint64_t master = std::stoull(c.info("replication")["master_repl_offset"]);
    auto s = status();
    return s.is_object() && s["pipelines"][0]["state"] == "streaming" &&
           s["pipelines"][0]["applied_offset"].get<uint64_t>() == master;
  };
  auto agent = std::make_unique<AgentProcess>(config, dir_.file("agent.log"));
  ASSERT_TRUE(waitUntil(caughtUp, kReplicateTimeout)) << agent->logTail();
  EXPECT_EQ(dataKeys(target), 341) << agent->logTail();  // 300 + 20 + 20 + counter
  EXPECT_EQ(dataKeys(target, 1), 1);
  EXPECT_EQ(target.client().command({"EXISTS", "stale:1"}).integer(), 0)
      << "the stale-key sweep (SCAN + DEL) did not run";

  // The stream: every kind of write, a non-idempotent one (replay stamp in MULTI/EXEC), a
  // source transaction.
  {
    RespClient c = source.client();
    std::vector<RespCommand> cmds = {{"SET", "s:new", "v", "PX", "600000"},
                                     {"HSET", "h:0", "g", "w"},
                                     {"INCR", "counter"},
                                     {"INCR", "counter"},
                                     {"RPUSH", "l:0", "c"},
                                     {"DEL", "s:1"},
                                     {"EXPIRE", "h:1", "500"},
                                     {"PERSIST", "s:2"},
                                     {"MULTI"},
                                     {"SET", "tx:a", "1"},
                                     {"INCRBY", "counter", "5"},
                                     {"EXEC"}};
    c.pipeline(cmds);
  }
  ASSERT_TRUE(waitUntil(caughtUp, kReplicateTimeout)) << agent->logTail();
  EXPECT_EQ(target.client().command({"GET", "counter"}), RespValue::bulk("17"));
  EXPECT_EQ(target.client().command({"GET", "tx:a"}), RespValue::bulk("1"));
  EXPECT_EQ(target.client().command({"EXISTS", "__xdcr_marker__:p:applied"}).integer(), 1)
      << "no replay stamp was written";
  ASSERT_TRUE(waitUntil(
      [&] {
        return target.client().command({"EXISTS", "__xdcr_marker__:p"}).integer() == 1;
      },
      10s))
      << "no checkpoint marker was written";
  {
    auto s = status();
    EXPECT_EQ(s["clock"]["clusters"]["src"]["error"], "") << s.dump(2);
    EXPECT_EQ(s["clock"]["clusters"]["dst"]["error"], "") << s.dump(2);
    EXPECT_EQ(s["clock"]["clusters"]["src"]["measured"], true) << s.dump(2);
    EXPECT_EQ(s["clock"]["clusters"]["dst"]["measured"], true) << s.dump(2);
  }
  // Resume: the marker check (GET) on reconnect, then a partial resync.
  EXPECT_FALSE(agent->terminate().forced);
  source.client().command({"INCR", "counter"});
  agent = std::make_unique<AgentProcess>(config, dir_.file("agent2.log"));
  ASSERT_TRUE(waitUntil(caughtUp, kReplicateTimeout)) << agent->logTail();
  EXPECT_NE(agent->logText().find("partial resync accepted"), std::string::npos)
      << agent->logTail();
  EXPECT_EQ(target.client().command({"GET", "counter"}), RespValue::bulk("18"));
  for (const auto* a : {"agent.log", "agent2.log"}) {
    const std::string log = readFileText(dir_.file(a));
    EXPECT_EQ(log.find("NOPERM"), std::string::npos) << log;
    EXPECT_EQ(log.find("target error"), std::string::npos) << log;
  }

  // verify needs the two extra lines: without them it cannot read the keys.
  auto denied = verifyCommand(config, "verify-denied");
  EXPECT_NE(denied.exit_code, 0) << denied.output;
  ASSERT_NO_FATAL_FAILURE(applyAcl(source, acl[2], source_pw, target_pw));
  ASSERT_NO_FATAL_FAILURE(applyAcl(target, acl[3], source_pw, target_pw));
  auto v = verifyCommand(config, "verify");
  EXPECT_EQ(v.exit_code, 0) << v.output;
  EXPECT_NE(v.output.find("0 missing, 0 value mismatches, 0 ttl mismatches"), std::string::npos)
      << v.output;
  EXPECT_FALSE(agent->terminate().forced);
}

TEST_F(SecurityTest, SecretsNeverAppearAndTheAdminTokenGuardsPosts) {
  auto source = tlsServer(good_);
  RedisServer target;
  const std::string source_pw = randomSecret("src-");
  const std::string source_pw2 = randomSecret("src2-");
  const std::string target_pw = randomSecret("dst-");
  const std::string token = randomSecret("tok-");
  const std::string wrong_token = randomSecret("badtok-");
  source->client().command({"ACL", "SETUSER", "xdcr-source", "on", ">" + source_pw, "+psync",
                            "+replconf", "+ping", "+time"});
  target.client().command({"CONFIG", "SET", "requirepass", target_pw});
  ::setenv("XDCR_SECURITY_TEST_SOURCE_PW", source_pw.c_str(), 1);
  ::setenv("XDCR_SECURITY_TEST_ADMIN_TOKEN", token.c_str(), 1);
  const std::string admin = "127.0.0.1:" + std::to_string(freePort());
  // Three forms of secret: env (source), plain string (target), env (admin token).
  const std::string config = writeConfig(
      "agent", Side{source.get(), "xdcr-source", "{env: XDCR_SECURITY_TEST_SOURCE_PW}", caTls()},
      Side{&target, "", "\"" + target_pw + "\"", ""},
      ", admin_listen: \"" + admin + "\", admin_token: {env: XDCR_SECURITY_TEST_ADMIN_TOKEN}");
  AgentProcess agent(config, dir_.file("agent.log"));
  auto request = [&](const std::string& method, const std::string& path,
                     const std::string& bearer = "") {
    auto r = replicator::adminRequest(admin, method, path, 5s, bearer);
    return r ? *r : std::pair<int, std::string>{-1, r.error().message};
  };
  ASSERT_TRUE(waitUntil([&] { return request("GET", "/readyz").first == 200; }, kReplicateTimeout))
      << agent.logTail();
  writeKeys(*source, "k:", 50);
  ASSERT_TRUE(waitForKeys(target, 50, kReplicateTimeout, target_pw)) << agent.logTail();

  // GETs are open; POSTs need the token.
  std::vector<std::string> shown;
  for (const char* path : {"/healthz", "/readyz", "/status", "/metrics", "/config"}) {
    auto [code, body] = request("GET", path);
    EXPECT_EQ(code, 200) << path << ": " << body;
    shown.push_back(body);
  }
  const std::string& cfg = shown.back();
  EXPECT_NE(cfg.find("\"password\": \"{env: XDCR_SECURITY_TEST_SOURCE_PW}\""), std::string::npos)
      << cfg;
  EXPECT_NE(cfg.find("\"password\": \"<redacted>\""), std::string::npos) << cfg;
  EXPECT_NE(cfg.find("\"admin_token\": \"{env: XDCR_SECURITY_TEST_ADMIN_TOKEN}\""),
            std::string::npos)
      << cfg;
  auto none = request("POST", "/pipelines/p/pause");
  EXPECT_EQ(none.first, 401) << none.second;
  EXPECT_NE(none.second.find("Authorization: Bearer <agent.admin_token>"), std::string::npos)
      << none.second;
  auto bad = request("POST", "/pipelines/p/pause", wrong_token);
  EXPECT_EQ(bad.first, 401) << bad.second;
  EXPECT_EQ(request("GET", "/status").second.find("\"paused\": true"), std::string::npos);
  auto good = request("POST", "/pipelines/p/pause", token);
  EXPECT_EQ(good.first, 200) << good.second;
  EXPECT_NE(request("GET", "/status").second.find("\"paused\": true"), std::string::npos);
  EXPECT_EQ(request("POST", "/pipelines/p/resume", token).first, 200);
  shown.push_back(none.second);
  shown.push_back(bad.second);
  auto st = runAgentCommand({"status", "--admin", admin}, dir_.file("status.out"), kCommandTimeout);
  EXPECT_EQ(st.exit_code, 0) << st.output;
  EXPECT_NE(st.output.find("p "), std::string::npos) << st.output;
  shown.push_back(st.output);

  // A failed connection: the source's password changes under the running agent.
  source->client().command({"ACL", "SETUSER", "xdcr-source", "resetpass", ">" + source_pw2});
  source->client().command({"CLIENT", "KILL", "TYPE", "replica"});
  const std::string line =
      waitForLogLine(agent, "authentication to cluster src as user \"xdcr-source\" failed");
  EXPECT_FALSE(line.empty()) << agent.logTail();
  ASSERT_TRUE(waitUntil(
      [&] {
        return request("GET", "/status").second.find("authentication to cluster src") !=
               std::string::npos;
      },
      kRefusalTimeout))
      << request("GET", "/status").second;
  shown.push_back(request("GET", "/status").second);
  shown.push_back(request("GET", "/readyz").second);
  shown.push_back(request("GET", "/config").second);
  shown.push_back(request("GET", "/metrics").second);
  auto v = verifyCommand(config, "verify");
  EXPECT_EQ(v.exit_code, 2) << v.output;
  shown.push_back(v.output);
  EXPECT_FALSE(agent.terminate().forced);
  const std::string log = agent.logText();
  EXPECT_NE(log.find("admin server: POST /pipelines/p/pause refused: wrong bearer token"),
            std::string::npos)
      << log;
  shown.push_back(log);

  for (const auto& secret : {source_pw, source_pw2, target_pw, token, wrong_token}) {
    for (size_t i = 0; i < shown.size(); ++i) {
      EXPECT_EQ(shown[i].find(secret), std::string::npos)
          << "a secret appears in output #" << i << ":\n"
          << shown[i];
    }
    // Line by line through the whole log, so a failure names the line.
    std::istringstream in(log);
    std::string l;
    while (std::getline(in, l)) EXPECT_EQ(l.find(secret), std::string::npos) << l;
  }
}

TEST_F(SecurityTest, UnreadableTlsFilesAreConfigErrors) {
  RedisServer a, b;
  const std::string config = writeConfig(
      "agent", Side{&a, "", "", "{ca_file: " + dir_.file("missing-ca.crt") + "}"},
      Side{&b, "", "",
           "{ca_file: \"" + ca_->caFile() + "\", key_file: \"" + good_.key_file + "\"}"});
  auto v = runAgentCommand({"validate", "-c", config}, dir_.file("validate.out"), kCommandTimeout);
  EXPECT_EQ(v.exit_code, 78) << v.output;
  EXPECT_NE(v.output.find("error: cannot read tls.ca_file"), std::string::npos) << v.output;
  EXPECT_NE(v.output.find("key_file is set but cert_file is not"), std::string::npos) << v.output;
  // Not checked with --no-environment (the files may exist only where the agent runs).
  auto n = runAgentCommand({"validate", "--no-environment", "-c", config},
                           dir_.file("validate-noenv.out"), kCommandTimeout);
  EXPECT_EQ(n.output.find("cannot read tls.ca_file"), std::string::npos) << n.output;
}

// ---- Without servers: the token check, the config's secrets and TLS -> endpoint ------------

TEST(SecurityUnit, BearerTokenMatchesOnlyTheExactToken) {
  using replicator::bearerTokenMatches;
  const std::string token = randomSecret("tok-");
  EXPECT_TRUE(bearerTokenMatches("Bearer " + token, token));
  EXPECT_TRUE(bearerTokenMatches("bearer " + token, token));  // the scheme is case-insensitive
  EXPECT_FALSE(bearerTokenMatches("Bearer " + token + "x", token));
  EXPECT_FALSE(bearerTokenMatches("Bearer " + token.substr(1), token));
  EXPECT_FALSE(bearerTokenMatches("Basic " + token, token));
  EXPECT_FALSE(bearerTokenMatches(token, token));
  EXPECT_FALSE(bearerTokenMatches("", token));
  EXPECT_FALSE(bearerTokenMatches("Bearer ", ""));  // no token configured matches nothing
}

TEST(SecurityUnit, AdminTokenIsASecretAndEmptySecretsAreErrors) {
  const std::string token = randomSecret("tok-");
  ::setenv("XDCR_SECURITY_UNIT_TOKEN", token.c_str(), 1);
  ::setenv("XDCR_SECURITY_UNIT_EMPTY", "", 1);
  const std::string base =
      "clusters:\n  a: {address: \"127.0.0.1:1\"}\n  b: {address: \"127.0.0.1:2\"}\n"
      "pipelines:\n  - {name: p, source: a, target: b}\n";
  auto ok = config::loadConfigString(
      "agent: {admin_listen: \"127.0.0.1:9\", admin_token: {env: XDCR_SECURITY_UNIT_TOKEN}}\n" +
          base,
      "t.yaml");
  ASSERT_TRUE(ok.ok()) << (ok.diagnostics.empty() ? "" : ok.diagnostics[0].format());
  EXPECT_EQ(ok.config->agent.admin_token.value, token);
  const std::string json = config::redactedJson(*ok.config);
  EXPECT_NE(json.find("{env: XDCR_SECURITY_UNIT_TOKEN}"), std::string::npos) << json;
  EXPECT_EQ(json.find(token), std::string::npos) << json;

  auto empty = config::loadConfigString(
      "agent: {admin_listen: \"127.0.0.1:9\", admin_token: {env: XDCR_SECURITY_UNIT_EMPTY}}\n" +
          base,
      "t.yaml");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.diagnostics.at(0).format().find(
                "environment variable \"XDCR_SECURITY_UNIT_EMPTY\" is empty"),
            std::string::npos)
      << empty.diagnostics.at(0).format();
}

TEST(SecurityUnit, ClusterEndpointCarriesCredentialsAndTls) {
  ::setenv("XDCR_SECURITY_UNIT_PW", "pw-unit", 1);
  auto r = config::loadConfigString(
      "clusters:\n"
      "  a:\n    address: \"db.example:6380\"\n    username: u\n"
      "    password: {env: XDCR_SECURITY_UNIT_PW}\n"
      "    tls: {ca_file: /x/ca.crt, cert_file: /x/c.crt, key_file: /x/c.key, "
      "server_name: n.example}\n"
      "  b: {address: \"127.0.0.1:2\", tls: {verify: false}}\n"
      "pipelines:\n  - {name: p, source: a, target: b}\n",
      "t.yaml");
  ASSERT_TRUE(r.ok()) << (r.diagnostics.empty() ? "" : r.diagnostics[0].format());
  const RedisEndpoint a = r.config->cluster("a")->endpoint();
  EXPECT_EQ(a.cluster, "a");
  EXPECT_EQ(a.address(), "db.example:6380");
  EXPECT_EQ(a.username, "u");
  EXPECT_EQ(a.password, std::optional<std::string>("pw-unit"));
  ASSERT_TRUE(a.tls.has_value());
  EXPECT_EQ(a.tls->ca_file, "/x/ca.crt");
  EXPECT_EQ(a.tls->cert_file, "/x/c.crt");
  EXPECT_EQ(a.tls->key_file, "/x/c.key");
  EXPECT_EQ(a.tls->server_name, "n.example");
  EXPECT_TRUE(a.tls->verify);
  const RedisEndpoint b = r.config->cluster("b")->endpoint();
  EXPECT_FALSE(b.password.has_value());
  ASSERT_TRUE(b.tls.has_value());
  EXPECT_FALSE(b.tls->verify);
  const auto warnings = config::securityWarnings(*r.config);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("cluster b (127.0.0.1:2): tls.verify is false"), std::string::npos);
}

}  // namespace
}  // namespace xdcr::test
