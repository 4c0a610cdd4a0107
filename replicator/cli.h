// xdcr-agent's command line: one definition (CLI11) that main() dispatches on and that the man
// page and the shell completions are generated from (interface.md §1).

#pragma once

#include <memory>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "replicator/verify.h"

namespace xdcr::cli {

/**
 * Every value the command line sets. A subcommand's options live in its own struct; options that
 * several subcommands share (e.g. -c) are bound to one field per subcommand struct, so adding a
 * subcommand is: a struct here, a field in Options, a few lines in buildApp(), a branch in main().
 */
struct RunOptions {
  std::string config_path;
};
struct ValidateOptions {
  std::string config_path;
  bool no_environment = false;
};
struct VerifyCommandOptions {
  std::string config_path;
  replicator::VerifyOptions verify;  // pipeline, sample, rate, rechecks
  std::string ttl_tolerance = "1s";
  std::string output = "table";
};
struct ClockOptions {
  std::string config_path;
  std::string output = "table";
};
struct StatusOptions {
  std::string admin = "127.0.0.1:9464";
  std::string output = "table";
};
/** pause, resume and resync (one of them is parsed at a time). */
struct OperatorOptions {
  std::string config_path;
  std::string pipeline;
  std::string admin;  // "" = the config's agent.admin_listen
};
struct ExplainCommandOptions {
  std::string config_path;
  std::string pipeline;
  std::string key;
  int db = 0;
  std::string ttl_tolerance = "1s";
  std::string output = "table";
};
struct CompletionOptions {
  std::string shell;  // bash | zsh
};
struct Options {
  // Global: also accepted after the subcommand.
  std::string log_level;
  std::string log_format;

  RunOptions run;
  ValidateOptions validate;
  VerifyCommandOptions verify;
  ClockOptions clock;
  StatusOptions status;
  OperatorOptions op;
  ExplainCommandOptions explain;
  CompletionOptions completion;
};

/** The subcommands' CLI::App objects, for main()'s dispatch (null until buildApp). */
struct Commands {
  CLI::App* run = nullptr;
  CLI::App* validate = nullptr;
  CLI::App* version = nullptr;
  CLI::App* verify = nullptr;
  CLI::App* clock = nullptr;
  CLI::App* status = nullptr;
  CLI::App* pause = nullptr;
  CLI::App* resume = nullptr;
  CLI::App* resync = nullptr;
  CLI::App* explain = nullptr;
  CLI::App* man = nullptr;         // prints the man page (cli_docs.h)
  CLI::App* completion = nullptr;  // prints a shell completion script
};

/** What `version` and `--version` print. */
std::string versionLine();

/**
 * Builds the whole command line. Options are bound by reference into `options`, which must
 * outlive the returned app; `commands` receives the subcommands. The man page and the
 * completions are generated from it (cli_docs.h): give every option a description and a
 * type_name() (FILE values are completed with file names), restrict fixed choices with
 * CLI::IsMember (they are completed and listed), and put a command's exit statuses in its
 * footer().
 */
std::unique_ptr<CLI::App> buildApp(Options& options, Commands& commands);

/**
 * `xdcr-agent help` prints the help; a first word that is no command is answered with the
 * closest one(s) and the list (CLI11 alone says only "A subcommand is required"). Returns the
 * exit status when the command line ends here.
 */
std::optional<int> answerHelpOrUnknown(const CLI::App& app, int argc, char** argv);

}  // namespace xdcr::cli
