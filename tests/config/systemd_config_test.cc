// Issue 18, finding 5: the config and the systemd unit work together. Secrets come through
// systemd credentials ({credential: NAME} reads $CREDENTIALS_DIRECTORY/NAME, which
// LoadCredential=NAME:PATH fills); a {file:} secret that cannot be read says who the agent runs
// as and suggests a credential; and a state_dir that cannot be created or written is an error
// when the file is loaded as validate and run load it (check_files), not a failure of run.

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/config.h"

namespace xdcr::config {
namespace {

using testing::ElementsAre;
using testing::HasSubstr;
using testing::IsEmpty;
using testing::Not;

std::vector<std::string> errorsOf(const LoadResult& result) {
  std::vector<std::string> lines;
  for (const auto& d : result.diagnostics) {
    if (d.severity == Diagnostic::Severity::Error) lines.push_back(d.format());
  }
  return lines;
}

/** Sets (or, with nullptr, unsets) an environment variable; restores it at the end. */
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      ::setenv(name_.c_str(), old_->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "xdcr-systemd-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string write(const std::string& name, const std::string& text) const {
    const std::filesystem::path file = path_ / name;
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file, std::ios::binary) << text;
    return file.string();
  }

 private:
  std::filesystem::path path_;
};

/** A config with admin_token `token_yaml` and state_dir `state_dir`. */
std::string configText(const std::string& token_yaml, const std::string& state_dir) {
  return "agent:\n  admin_listen: 127.0.0.1:9464\n  admin_token: " + token_yaml +
         "\n  state_dir: " + state_dir +
         "\nclusters:\n  a: {address: 127.0.0.1:7001}\n  b: {address: 127.0.0.1:7002}\n"
         "pipelines:\n  - {name: p, source: a, target: b}\n";
}

LoadOptions asRunLoads() {
  LoadOptions options;
  options.resolve_environment = true;
  options.check_files = true;  // as `validate`, `run` and every command of main() load
  return options;
}

TEST(SystemdConfig, CredentialIsReadFromTheCredentialsDirectory) {
  TempDir dir;
  dir.write("creds/admin-token", "token-from-systemd\n");  // the final newline goes, as for file
  ScopedEnv creds("CREDENTIALS_DIRECTORY", (dir.path() / "creds").c_str());
  const std::string path = dir.write("xdcr.yaml", configText("{credential: admin-token}", "state"));
  const LoadResult result = loadConfigFile(path, asRunLoads());
  ASSERT_TRUE(result.ok()) << testing::PrintToString(errorsOf(result));
  const Secret& token = result.config->agent.admin_token;
  EXPECT_EQ(token.kind, Secret::Kind::Credential);
  EXPECT_EQ(token.ref, "admin-token");
  EXPECT_EQ(token.value, "token-from-systemd");
  // Redaction names the credential, never the value.
  EXPECT_EQ(token.describe(), "{credential: admin-token}");
  const std::string json = redactedJson(*result.config);
  EXPECT_THAT(json, HasSubstr("\"admin_token\": \"{credential: admin-token}\""));
  EXPECT_THAT(json, Not(HasSubstr("token-from-systemd")));
}

TEST(SystemdConfig, CredentialWithoutCredentialsDirectorySaysWhatToPutInTheUnit) {
  TempDir dir;
  ScopedEnv creds("CREDENTIALS_DIRECTORY", nullptr);
  const std::string path = dir.write("xdcr.yaml", configText("{credential: admin-token}", "state"));
  const LoadResult result = loadConfigFile(path, asRunLoads());
  EXPECT_THAT(
      errorsOf(result),
      ElementsAre(path + ":3:29: error: admin_token {credential: admin-token}: "
                         "CREDENTIALS_DIRECTORY is not set, so there are no systemd credentials "
                         "(the agent was not started by systemd with one); put the secret in "
                         "/etc/xdcr-agent/admin-token (root-owned, mode 0600) and add "
                         "\"LoadCredential=admin-token:/etc/xdcr-agent/admin-token\" to the "
                         "unit's [Service] section (systemctl edit xdcr-agent), or outside "
                         "systemd use {env: NAME} or {file: PATH}"));
}

TEST(SystemdConfig, CredentialTheUnitDoesNotPassNamesTheFileAndTheUnitLine) {
  TempDir dir;
  std::filesystem::create_directories(dir.path() / "creds");
  ScopedEnv creds("CREDENTIALS_DIRECTORY", (dir.path() / "creds").c_str());
  const std::string path = dir.write("xdcr.yaml", configText("{credential: east-pass}", "state"));
  const LoadResult result = loadConfigFile(path, asRunLoads());
  EXPECT_THAT(errorsOf(result),
              ElementsAre(path + ":3:29: error: admin_token {credential: east-pass}: cannot read " +
                          (dir.path() / "creds" / "east-pass").string() +
                          ": No such file or directory; the unit passes no credential "
                          "\"east-pass\": add \"LoadCredential=east-pass:/etc/xdcr-agent/"
                          "east-pass\" to its [Service] section (systemctl edit xdcr-agent), "
                          "with the secret in /etc/xdcr-agent/east-pass"));
}

TEST(SystemdConfig, CredentialNameMustBeAFileName) {
  TempDir dir;
  const std::string path = dir.write("xdcr.yaml", configText("{credential: ../etc/x}", "state"));
  LoadOptions no_env;
  no_env.resolve_environment = false;  // the name is checked even by validate --no-environment
  const LoadResult result = loadConfigFile(path, no_env);
  EXPECT_THAT(errorsOf(result),
              ElementsAre(path + ":3:29: error: credential name \"../etc/x\" is not a file name; "
                                 "use the NAME of LoadCredential=NAME:PATH (no '/')"));
}

TEST(SystemdConfig, OneOfEnvFileOrCredential) {
  TempDir dir;
  const std::string path = dir.write("xdcr.yaml", configText("{credential: t, env: T}", "state"));
  LoadOptions no_env;
  no_env.resolve_environment = false;
  const LoadResult result = loadConfigFile(path, no_env);
  EXPECT_THAT(errorsOf(result),
              ElementsAre(path + ":3:16: error: admin_token takes one of env, file or credential, "
                                 "not several; keep one"));
}

TEST(SystemdConfig, NoEnvironmentDoesNotReadCredentials) {
  TempDir dir;
  ScopedEnv creds("CREDENTIALS_DIRECTORY", nullptr);
  const std::string path = dir.write("xdcr.yaml", configText("{credential: admin-token}", "state"));
  LoadOptions no_env;
  no_env.resolve_environment = false;
  const LoadResult result = loadConfigFile(path, no_env);
  ASSERT_TRUE(result.ok()) << testing::PrintToString(errorsOf(result));
  EXPECT_EQ(result.config->agent.admin_token.kind, Secret::Kind::Credential);
  EXPECT_EQ(result.config->agent.admin_token.value, "");
}

TEST(SystemdConfig, UnreadableSecretFileNamesTheFileTheErrorTheUserAndSuggestsACredential) {
  TempDir dir;
  const std::string path = dir.write("xdcr.yaml", configText("{file: nowhere.pass}", "state"));
  const LoadResult result = loadConfigFile(path, asRunLoads());
  const std::string file = (dir.path() / "nowhere.pass").string();
  ASSERT_EQ(errorsOf(result).size(), 1u) << testing::PrintToString(errorsOf(result));
  const std::string error = errorsOf(result)[0];
  EXPECT_THAT(error, HasSubstr("cannot read admin_token file \"nowhere.pass\" (" + file + ")"));
  EXPECT_THAT(error, HasSubstr("No such file or directory"));
  EXPECT_THAT(error, HasSubstr(" as user "));
  EXPECT_THAT(error, HasSubstr("(uid " + std::to_string(::geteuid()) + ")"));
  EXPECT_THAT(error, HasSubstr("LoadCredential=NAME:" + file +
                               " in the unit and "
                               "{credential: NAME} here"));
}

TEST(SystemdConfig, StateDirThatCannotBeCreatedIsAnErrorAtLoad) {
  TempDir dir;
  dir.write("not-a-dir", "x");  // a file where the state directory's parent should be
  const std::string path = dir.write("xdcr.yaml", configText("plain-token", "not-a-dir/state"));
  const LoadResult result = loadConfigFile(path, asRunLoads());
  ASSERT_EQ(errorsOf(result).size(), 1u) << testing::PrintToString(errorsOf(result));
  const std::string error = errorsOf(result)[0];
  EXPECT_THAT(error, HasSubstr(path + ":4:14: error: agent.state_dir \"" +
                               (dir.path() / "not-a-dir" / "state").string() +
                               "\" cannot be created or written as user "));
  EXPECT_THAT(error, HasSubstr((dir.path() / "not-a-dir").string() + " is not a directory"));
  EXPECT_THAT(error, HasSubstr("StateDirectory=xdcr-agent"));
  EXPECT_THAT(error, HasSubstr("set agent.state_dir: /var/lib/xdcr-agent"));

  // The default state_dir (./xdcr-state beside the file) is checked as well: the line is the
  // top of the file then.
  TempDir other;
  other.write("xdcr-state", "a file, not a directory");
  const std::string no_key =
      other.write("xdcr.yaml",
                  "clusters:\n  a: {address: 127.0.0.1:7001}\n  b: {address: 127.0.0.1:7002}\n"
                  "pipelines:\n  - {name: p, source: a, target: b}\n");
  const LoadResult defaulted = loadConfigFile(no_key, asRunLoads());
  ASSERT_EQ(errorsOf(defaulted).size(), 1u) << testing::PrintToString(errorsOf(defaulted));
  EXPECT_THAT(errorsOf(defaulted)[0],
              HasSubstr((other.path() / "xdcr-state").string() + " is not a directory"));

  // validate --no-environment (a file checked away from where it runs) does not look.
  LoadOptions away;
  away.resolve_environment = false;
  EXPECT_THAT(errorsOf(loadConfigFile(path, away)), IsEmpty());
}

TEST(SystemdConfig, StateDirThatExistsOrCanBeCreatedIsFine) {
  TempDir dir;
  std::filesystem::create_directories(dir.path() / "existing");
  for (const char* state : {"existing", "new/deeper/state"}) {
    const std::string path = dir.write("xdcr.yaml", configText("plain-token", state));
    const LoadResult result = loadConfigFile(path, asRunLoads());
    EXPECT_TRUE(result.ok()) << state << ": " << testing::PrintToString(errorsOf(result));
  }
  // Loading creates nothing.
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "new"));
}

}  // namespace
}  // namespace xdcr::config
