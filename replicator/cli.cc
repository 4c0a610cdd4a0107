// xdcr-agent's command line: the one CLI11 definition (see cli.h).

#include "replicator/cli.h"

#include <algorithm>
#include <cstddef>
#include <iostream>
#include <vector>

#include <fmt/format.h>

#include "common/version.h"

namespace xdcr::cli {

namespace {

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

}  // namespace

std::string versionLine() {
  return fmt::format("xdcr-agent {} (revision {}, {} build)", xdcr::version(), xdcr::gitRevision(),
                     xdcr::buildType());
}

std::unique_ptr<CLI::App> buildApp(Options& o, Commands& c) {
  auto app = std::make_unique<CLI::App>(
      "xdcr-agent: replicates expiring documents between clusters", "xdcr-agent");
  app->require_subcommand(1);
  app->fallthrough();  // --log-level / --log-format also after the subcommand
  app->add_option("--log-level", o.log_level, "log level (overrides the file)")
      ->type_name("LEVEL")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}));
  app->add_option("--log-format", o.log_format, "log format (overrides the file)")
      ->type_name("FORMAT")
      ->check(CLI::IsMember({"text", "json"}));

  c.run = app->add_subcommand("run", "run every pipeline of the config until SIGTERM/SIGINT");
  c.run->add_option("-c,--config", o.run.config_path, "config file")->required()->type_name("FILE");
  c.run->footer(
      "Exit status: 0 after draining on SIGTERM/SIGINT; 78 an invalid configuration or an "
      "agent.state_dir that cannot be created or written; 75 another agent holds "
      "agent.state_dir; 1 a fatal error.");

  c.validate = app->add_subcommand("validate", "check a config file without connecting");
  c.validate->add_option("-c,--config", o.validate.config_path, "config file")
      ->required()
      ->type_name("FILE");
  c.validate->add_flag("--no-environment", o.validate.no_environment,
                       "do not check environment variables and secret files");
  c.validate->footer("Exit status: 0 valid; 78 invalid (every error is listed).");

  c.version = app->add_subcommand("version", "print version, git revision and build type");

  auto& v = o.verify;
  c.verify = app->add_subcommand("verify",
                                 "compare a pipeline's source and target: keys, values, deadlines");
  c.verify->add_option("-c,--config", v.config_path, "config file")->required()->type_name("FILE");
  c.verify->add_option("-p,--pipeline", v.verify.pipeline, "pipeline name")
      ->required()
      ->type_name("NAME");
  c.verify->add_option("--ttl-tolerance", v.ttl_tolerance, "deadline tolerance (default 1s)")
      ->type_name("DURATION");
  c.verify->add_option("--sample", v.verify.sample, "check about N keys instead of all")
      ->type_name("N");
  c.verify->add_option("--rate", v.verify.rate, "keys per second at most (default 5000)")
      ->type_name("N");
  c.verify
      ->add_option("--rechecks", v.verify.rechecks,
                   "re-read a differing key this many times, a second apart (default 3)")
      ->type_name("N");
  c.verify->add_option("-o,--output", v.output, "output format")
      ->check(CLI::IsMember({"table", "json"}))
      ->type_name("FORMAT");
  c.verify->footer(
      "Under a target max_ttl, a source key absent on the target counts as missing unless its "
      "copy has provably expired: the source key idle (OBJECT IDLETIME) and the pipeline's last "
      "full sync (its checkpoint in agent.state_dir: run verify on the agent's host) both over "
      "max_ttl + tolerance ago; such keys are listed as \"expired\".\n"
      "A memcached target is read per source key (mg <key> v t f): keys its rules refuse (a "
      "deadline after 2038, a value over item_size_max, a key over 250 bytes, a non-string with "
      "non_strings: refuse) are listed as \"refused\", not as differences; extra keys are not "
      "counted (memcached cannot list its keys cheaply).\n"
      "Exit status: 0 in sync; 1 differences; 2 a cluster cannot be reached; 78 an invalid "
      "configuration or pipeline name.");

  c.clock = app->add_subcommand("clock",
                                "one-shot clock report: NTP, every cluster, every pipeline's skew");
  c.clock->add_option("-c,--config", o.clock.config_path, "config file")
      ->required()
      ->type_name("FILE");
  c.clock->add_option("-o,--output", o.clock.output, "output format")
      ->check(CLI::IsMember({"table", "json"}))
      ->type_name("FORMAT");
  c.clock->footer(
      "Exit status: 0 every skew within max_skew; 1 a skew beyond it, or a clock that could not "
      "be read; 2 no NTP majority; 78 an invalid configuration.");

  c.status = app->add_subcommand("status", "show a running agent's /status");
  c.status->add_option("--admin", o.status.admin, "the agent's admin_listen address (host:port)")
      ->type_name("ADDRESS");
  c.status->add_option("-o,--output", o.status.output, "output format")
      ->check(CLI::IsMember({"table", "json"}))
      ->type_name("FORMAT");
  c.status->footer("Exit status: 0 printed; 2 the agent cannot be reached or answered an error.");

  // pause, resume, resync: through the running agent's admin server, else in the state dir.
  auto operatorCommand = [&](CLI::App* sub, const char* done) {
    sub->add_option("-c,--config", o.op.config_path,
                    "config file (admin_listen, admin_token, "
                    "state_dir)")
        ->required()
        ->type_name("FILE");
    sub->add_option("-p,--pipeline", o.op.pipeline, "pipeline name")->required()->type_name("NAME");
    sub->add_option("--admin", o.op.admin,
                    "the agent's admin server (host:port), if not the config's admin_listen")
        ->type_name("ADDRESS");
    sub->footer(std::string(done) +
                " When no agent runs on the config's state_dir, the request is recorded there "
                "for the next start.\nExit status: 0 done or recorded; 1 no such pipeline; 2 an "
                "agent runs but cannot be reached or refused; 78 an invalid configuration.");
    return sub;
  };
  c.pause = operatorCommand(
      app->add_subcommand("pause", "pause a pipeline (kept across restarts and reloads)"),
      "The source's backlog holds the stream meanwhile; lag and backlog "
      "keep counting.");
  c.resume = operatorCommand(app->add_subcommand("resume", "end an operator pause"),
                             "A clock-skew pause stays.");
  c.resync = operatorCommand(app->add_subcommand("resync", "a full sync of a pipeline on demand"),
                             "E.g. after widening a filter: its checkpoints are dropped and it "
                             "starts again with a full sync.");

  auto& x = o.explain;
  c.explain = app->add_subcommand("explain", "why a key is or is not on the target: a dry run");
  c.explain->add_option("-c,--config", x.config_path, "config file")->required()->type_name("FILE");
  c.explain->add_option("-p,--pipeline", x.pipeline, "pipeline name")
      ->required()
      ->type_name("NAME");
  c.explain->add_option("KEY", x.key, "the key, as named on the source")
      ->required()
      ->type_name("KEY");
  c.explain->add_option("--db", x.db, "the source db the key is in (default 0)")
      ->check(CLI::NonNegativeNumber)
      ->type_name("N");
  c.explain->add_option("--ttl-tolerance", x.ttl_tolerance, "deadline tolerance (default 1s)")
      ->type_name("DURATION");
  c.explain->add_option("-o,--output", x.output, "output format")
      ->check(CLI::IsMember({"table", "json"}))
      ->type_name("FORMAT");
  c.explain->footer(
      "A dry run (nothing is written): reads KEY on the source (CLIENT NO-TOUCH where the server "
      "has it, so its idle time stays as it was) and on the target, and tells with the agent's "
      "own rules whether the pipeline's filters select it (naming the rule that excludes it), "
      "the target db, key and collection, the max_ttl in effect, the deadline the agent would "
      "write now (expired on arrival when past), what the target holds and whether it matches, "
      "and, when it is absent, the likely reasons: filtered, expired by its clamped deadline, "
      "the pipeline paused or behind (the running agent's /status through agent.admin_listen), "
      "not yet replicated.\n"
      "A memcached target is not supported (exit 2): use verify.\n"
      "Exit status: 0 explained; 2 a cluster cannot be reached, or the target is memcached; 78 "
      "an invalid configuration or pipeline name.");

  c.man = app->add_subcommand("man", "print this command line's man page (roff)");
  c.completion = app->add_subcommand("completion", "print a shell completion script");
  c.completion->add_option("SHELL", o.completion.shell, "the shell")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh"}))
      ->type_name("SHELL");

  // Last: a subcommand copies its parent's footer when it is added.
  app->footer(
      "Exit status: 0 success; 78 an invalid configuration (every error is listed); 2 an unknown "
      "command; 100-127 a bad option or argument (CLI11's codes); a command's own: COMMAND "
      "--help.");
  app->set_version_flag("--version", versionLine);
  return app;
}

std::optional<int> answerHelpOrUnknown(const CLI::App& app, int argc, char** argv) {
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

}  // namespace xdcr::cli
