// xdcr-agent: the command line (interface.md §1).

#include <malloc.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common/logging.h"
#include "common/version.h"
#include "config/config.h"
#include "replicator/admin_server.h"
#include "replicator/agent.h"
#include "replicator/clock_report.h"
#include "replicator/verify.h"

namespace {

constexpr int kExitConfig = 78;  // EX_CONFIG

const char* levelName(xdcr::config::LogLevel l) {
  using L = xdcr::config::LogLevel;
  switch (l) {
    case L::Trace:
      return "trace";
    case L::Debug:
      return "debug";
    case L::Info:
      return "info";
    case L::Warn:
      return "warn";
    case L::Error:
      return "error";
  }
  return "info";
}

/** What `version` and `--version` print. */
std::string versionLine() {
  return fmt::format("xdcr-agent {} (revision {}, {} build)", xdcr::version(), xdcr::gitRevision(),
                     xdcr::buildType());
}

/** Levenshtein distance: how far a mistyped command is from each real one. */
size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

/**
 * `xdcr-agent help` prints the help; a first word that is no command is answered with the
 * closest one(s) and the list (CLI11 alone says only "A subcommand is required"). Returns the
 * exit status when the command line ends here.
 */
std::optional<int> answerHelpOrUnknown(CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return std::nullopt;
  const std::string word = argv[1];
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
  if (word == "help") {
    std::cout << app.help();
    return 0;
  }
  if (std::find(names.begin(), names.end(), word) != names.end()) return std::nullopt;
  std::vector<size_t> distance;
  for (const auto& n : names) distance.push_back(editDistance(word, n));
  const size_t best = *std::min_element(distance.begin(), distance.end());
  std::string close;
  for (size_t i = 0; i < names.size(); ++i) {
    if (distance[i] == best && best <= 2) close += (close.empty() ? "" : " or ") + names[i];
  }
  std::string all;
  for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
  std::cerr << "xdcr-agent: unknown command \"" << word << "\""
            << (close.empty() ? "" : "; did you mean " + close + "?") << "\ncommands: " << all
            << ", help; xdcr-agent --help for the options\n";
  return 2;  // a usage error, as for a bad option
}

/** Prints every diagnostic; returns the config or null. */
xdcr::config::ConfigConstSharedPtr load(const std::string& path, bool resolve_env) {
  xdcr::config::LoadOptions opts;
  opts.resolve_environment = resolve_env;
  opts.check_files = true;  // TLS files must be readable (unless --no-environment)
  auto result = xdcr::config::loadConfigFile(path, opts);
  for (const auto& d : result.diagnostics) std::cerr << d.format() << "\n";
  return result.config;
}

/** xdcr-agent status: GET /status and print it. */
int printStatus(const std::string& admin, bool as_json) {
  auto r = xdcr::replicator::adminGet(admin, "/status", std::chrono::seconds(5));
  if (!r) {
    std::cerr << "xdcr-agent status: " << r.error().message << "\n";
    return 2;
  }
  if (r->first != 200) {
    std::cerr << "xdcr-agent status: HTTP " << r->first << ": " << r->second;
    return 2;
  }
  if (as_json) {
    std::cout << r->second;
    return 0;
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(r->second);
  } catch (const std::exception& e) {
    std::cerr << "xdcr-agent status: not a status reply: " << e.what() << "\n";
    return 2;
  }
  std::printf("xdcr-agent %s (%s)%s\n", j.value("version", "?").c_str(),
              j.value("revision", "?").c_str(), j.value("draining", false) ? ", draining" : "");
  std::printf("%-20s %-13s %9s %12s %16s %16s %10s  %s\n", "PIPELINE", "STATE", "LAG_S",
              "BACKLOG_B", "SOURCE_OFFSET", "APPLIED_OFFSET", "SKEW_S", "NOTE");
  for (const auto& p : j["pipelines"]) {
    std::string note = p.value("paused_detail", "");
    if (note.empty()) note = p.value("paused_reason", "");
    const auto clock = p.value("clock", nlohmann::json::object());
    const std::string skew = clock.contains("skew_seconds")
                                 ? fmt::format("{:+.3f}", clock["skew_seconds"].get<double>())
                                 : "-";
    if (note.empty() && clock.value("exceeded", false)) note = clock.value("reason", "");
    const auto& fs = p["full_sync"];
    if (fs.value("active", false)) {
      note = fmt::format("full sync {}/{} keys", fs.value("keys_done", 0ull),
                         fs.value("keys_total", 0ull));
    }
    if (note.empty()) note = p.value("last_error", "");
    std::printf("%-20s %-13s %9.3f %12llu %16llu %16llu %10s  %s\n", p.value("name", "").c_str(),
                p.value("state", "").c_str(), p.value("lag_seconds", 0.0),
                static_cast<unsigned long long>(p.value("backlog_bytes", 0ull)),
                static_cast<unsigned long long>(p.value("source_offset", 0ull)),
                static_cast<unsigned long long>(p.value("applied_offset", 0ull)), skew.c_str(),
                note.c_str());
  }
  return 0;
}

}  // namespace

// Only CLI11's option setup can throw out of main, on a programming error; parsing and every
// command catch their own.
// NOLINTNEXTLINE(bugprone-exception-escape)
int main(int argc, char** argv) {
  // A fixed mmap threshold. glibc raises it (up to 32 MiB) whenever a large mmapped block is
  // freed, e.g. the image string of a checkpoint compaction; from then on the 16 MiB command
  // buffers and other large blocks come from the heap, which keeps freed pages. Measured with
  // bench/run.sh --only cost: RSS growth over a third million deadlines 49.5-51.5 bytes each
  // with the default, 28.6-29.7 with 64 KiB (the index itself: 26.6).
  ::mallopt(M_MMAP_THRESHOLD, 64 * 1024);
  CLI::App app{"xdcr-agent: replicates expiring documents between clusters", "xdcr-agent"};
  app.require_subcommand(1);
  app.fallthrough();  // --log-level / --log-format also after the subcommand
  std::string log_level, log_format;
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error (overrides the file)")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
  app.add_option("--log-format", log_format, "text|json (overrides the file)")
      ->check(CLI::IsMember({"text", "json"}));

  std::string config_path;
  auto* run = app.add_subcommand("run", "run every pipeline of the config until SIGTERM/SIGINT");
  run->add_option("-c,--config", config_path, "config file")->required();

  bool no_env = false;
  auto* validate = app.add_subcommand("validate", "check a config file without connecting");
  validate->add_option("-c,--config", config_path, "config file")->required();
  validate->add_flag("--no-environment", no_env,
                     "do not check environment variables and secret files");

  app.add_subcommand("version", "print version, git revision and build type");

  xdcr::replicator::VerifyOptions verify_opts;
  std::string ttl_tolerance = "1s", verify_output = "table";
  auto* verify = app.add_subcommand(
      "verify", "compare a pipeline's source and target: keys, values, deadlines");
  verify->add_option("-c,--config", config_path, "config file")->required();
  verify->add_option("-p,--pipeline", verify_opts.pipeline, "pipeline name")->required();
  verify->add_option("--ttl-tolerance", ttl_tolerance, "deadline tolerance (default 1s)");
  verify->add_option("--sample", verify_opts.sample, "check about N keys instead of all");
  verify->add_option("--rate", verify_opts.rate, "keys per second at most (default 5000)");
  verify->add_option("--rechecks", verify_opts.rechecks,
                     "re-read a differing key this many times, a second apart (default 3)");
  verify->add_option("-o,--output", verify_output, "table or json")
      ->check(CLI::IsMember({"table", "json"}));

  auto* clock_cmd = app.add_subcommand(
      "clock", "one-shot clock report: NTP, every cluster, every pipeline's skew");
  clock_cmd->add_option("-c,--config", config_path, "config file")->required();
  std::string clock_output = "table";
  clock_cmd->add_option("-o,--output", clock_output, "table or json")
      ->check(CLI::IsMember({"table", "json"}));

  std::string admin_addr = "127.0.0.1:9464", output = "table";
  auto* status = app.add_subcommand("status", "show a running agent's /status");
  status->add_option("--admin", admin_addr, "the agent's admin_listen address (host:port)");
  status->add_option("-o,--output", output, "table or json")
      ->check(CLI::IsMember({"table", "json"}));

  app.set_version_flag("--version", versionLine);
  if (auto answered = answerHelpOrUnknown(app, argc, argv)) return *answered;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  if (app.got_subcommand("version")) {
    std::printf("%s\n", versionLine().c_str());
    return 0;
  }
  if (app.got_subcommand("status")) {
    return printStatus(admin_addr, output == "json");
  }
  if (app.got_subcommand("validate")) {
    auto cfg = load(config_path, !no_env);
    if (!cfg) return kExitConfig;
    std::printf("%s: valid (%zu cluster(s), %zu pipeline(s))\n", config_path.c_str(),
                cfg->clusters.size(), cfg->pipelines.size());
    return 0;
  }
  auto cfg = load(config_path, true);
  if (!cfg) return kExitConfig;
  if (app.got_subcommand("verify")) {
    xdcr::setupLogging(log_level.empty() ? "warn" : log_level, xdcr::LogFormat::Text);
    auto tol = xdcr::config::parseDuration(ttl_tolerance);
    if (!tol) {
      std::cerr << "verify: --ttl-tolerance " << ttl_tolerance
                << ": not a duration (e.g. 500ms, 1s, 2m)\n";
      return kExitConfig;
    }
    verify_opts.ttl_tolerance = *tol;
    verify_opts.json = verify_output == "json";
    for (const auto& w : xdcr::config::securityWarnings(*cfg)) spdlog::warn("{}", w);
    return xdcr::replicator::runVerify(cfg, verify_opts);
  }
  if (app.got_subcommand("clock")) {
    xdcr::setupLogging(log_level.empty() ? "warn" : log_level, xdcr::LogFormat::Text);
    for (const auto& w : xdcr::config::securityWarnings(*cfg)) spdlog::warn("{}", w);
    return xdcr::replicator::runClockCommand(cfg, clock_output == "json");
  }
  xdcr::setupLogging(log_level.empty() ? levelName(cfg->agent.log_level) : log_level,
                     (log_format.empty() ? cfg->agent.log_format == xdcr::config::LogFormat::Json
                                         : log_format == "json")
                         ? xdcr::LogFormat::Json
                         : xdcr::LogFormat::Text);
  try {
    return xdcr::replicator::runAgent(cfg);
  } catch (const std::exception& e) {
    spdlog::critical("fatal: {}", e.what());
    return 1;
  }
}
