// xdcr-agent: the command line (interface.md §1).

#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "common/logging.h"
#include "common/version.h"
#include "config/config.h"
#include "replicator/agent.h"

namespace {

constexpr int kExitConfig = 78;  // EX_CONFIG

const char* levelName(xdcr::config::LogLevel l) {
  using L = xdcr::config::LogLevel;
  switch (l) {
    case L::Trace: return "trace";
    case L::Debug: return "debug";
    case L::Info: return "info";
    case L::Warn: return "warn";
    case L::Error: return "error";
  }
  return "info";
}

/** Prints every diagnostic; returns the config or null. */
xdcr::config::ConfigConstSharedPtr load(const std::string& path, bool resolve_env) {
  xdcr::config::LoadOptions opts;
  opts.resolve_environment = resolve_env;
  auto result = xdcr::config::loadConfigFile(path, opts);
  for (const auto& d : result.diagnostics) std::cerr << d.format() << "\n";
  return result.config;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"xdcr-agent: replicates expiring documents between clusters"};
  app.require_subcommand(1);
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

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  if (app.got_subcommand("version")) {
    std::printf("xdcr-agent %s (revision %s, %s build)\n", xdcr::version(), xdcr::gitRevision(),
                xdcr::buildType());
    return 0;
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
