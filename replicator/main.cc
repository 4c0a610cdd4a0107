// xdcr-agent: the command line (interface.md §1).

#include <malloc.h>

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "common/logging.h"
#include "config/config.h"
#include "replicator/admin_server.h"
#include "replicator/agent.h"
#include "replicator/cli.h"
#include "replicator/cli_docs.h"
#include "replicator/clock_report.h"
#include "replicator/explain.h"
#include "replicator/operator_command.h"
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
  xdcr::cli::Options o;
  xdcr::cli::Commands commands;
  const std::unique_ptr<CLI::App> app = xdcr::cli::buildApp(o, commands);
  if (auto answered = xdcr::cli::answerHelpOrUnknown(*app, argc, argv)) return *answered;
  try {
    app->parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app->exit(e);
  }

  if (commands.version->parsed()) {
    std::printf("%s\n", xdcr::cli::versionLine().c_str());
    return 0;
  }
  if (commands.man->parsed()) {
    std::cout << xdcr::cli::manPage(*app);
    return 0;
  }
  if (commands.completion->parsed()) {
    std::cout << (o.completion.shell == "zsh" ? xdcr::cli::zshCompletion(*app)
                                              : xdcr::cli::bashCompletion(*app));
    return 0;
  }
  if (commands.status->parsed()) {
    return printStatus(o.status.admin, o.status.output == "json");
  }
  for (CLI::App* op : {commands.pause, commands.resume, commands.resync}) {
    if (!op->parsed()) continue;
    auto cfg = load(o.op.config_path, true);
    if (!cfg) return kExitConfig;
    xdcr::setupLogging(o.log_level.empty() ? "warn" : o.log_level, xdcr::LogFormat::Text);
    return xdcr::replicator::runOperatorCommand(*cfg, op->get_name(), o.op.pipeline, o.op.admin);
  }
  if (commands.validate->parsed()) {
    const std::string& config_path = o.validate.config_path;
    auto cfg = load(config_path, !o.validate.no_environment);
    if (!cfg) return kExitConfig;
    std::printf("%s: valid (%zu cluster(s), %zu pipeline(s))\n", config_path.c_str(),
                cfg->clusters.size(), cfg->pipelines.size());
    return 0;
  }
  const std::string& log_level = o.log_level;
  if (commands.verify->parsed()) {
    auto cfg = load(o.verify.config_path, true);
    if (!cfg) return kExitConfig;
    auto& verify_opts = o.verify.verify;
    const std::string& ttl_tolerance = o.verify.ttl_tolerance;
    xdcr::setupLogging(log_level.empty() ? "warn" : log_level, xdcr::LogFormat::Text);
    auto tol = xdcr::config::parseDuration(ttl_tolerance);
    if (!tol) {
      std::cerr << "verify: --ttl-tolerance " << ttl_tolerance
                << ": not a duration (e.g. 500ms, 1s, 2m)\n";
      return kExitConfig;
    }
    verify_opts.ttl_tolerance = *tol;
    verify_opts.json = o.verify.output == "json";
    for (const auto& w : xdcr::config::securityWarnings(*cfg)) spdlog::warn("{}", w);
    return xdcr::replicator::runVerify(cfg, verify_opts);
  }
  if (commands.explain->parsed()) {
    auto cfg = load(o.explain.config_path, true);
    if (!cfg) return kExitConfig;
    xdcr::setupLogging(log_level.empty() ? "warn" : log_level, xdcr::LogFormat::Text);
    xdcr::replicator::ExplainOptions explain_opts;
    explain_opts.pipeline = o.explain.pipeline;
    explain_opts.key = o.explain.key;
    explain_opts.db = o.explain.db;
    explain_opts.json = o.explain.output == "json";
    auto tol = xdcr::config::parseDuration(o.explain.ttl_tolerance);
    if (!tol) {
      std::cerr << "explain: --ttl-tolerance " << o.explain.ttl_tolerance
                << ": not a duration (e.g. 500ms, 1s, 2m)\n";
      return kExitConfig;
    }
    explain_opts.ttl_tolerance = *tol;
    for (const auto& w : xdcr::config::securityWarnings(*cfg)) spdlog::warn("{}", w);
    return xdcr::replicator::runExplain(cfg, explain_opts);
  }
  if (commands.clock->parsed()) {
    auto cfg = load(o.clock.config_path, true);
    if (!cfg) return kExitConfig;
    xdcr::setupLogging(log_level.empty() ? "warn" : log_level, xdcr::LogFormat::Text);
    for (const auto& w : xdcr::config::securityWarnings(*cfg)) spdlog::warn("{}", w);
    return xdcr::replicator::runClockCommand(cfg, o.clock.output == "json");
  }
  if (commands.run->parsed()) {
    auto cfg = load(o.run.config_path, true);
    if (!cfg) return kExitConfig;
    xdcr::setupLogging(
        log_level.empty() ? levelName(cfg->agent.log_level) : log_level,
        (o.log_format.empty() ? cfg->agent.log_format == xdcr::config::LogFormat::Json
                              : o.log_format == "json")
            ? xdcr::LogFormat::Json
            : xdcr::LogFormat::Text);
    try {
      return xdcr::replicator::runAgent(cfg);
    } catch (const std::exception& e) {
      spdlog::critical("fatal: {}", e.what());
      return 1;
    }
  }
  // A subcommand defined in cli.cc without a branch here.
  std::cerr << "xdcr-agent: internal error: no handler for this command\n";
  return 2;
}
