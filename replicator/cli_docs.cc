// Man page and shell completions generated from the command-line definition (cli_docs.h).
//
// What CLI11 exposes of an option: its names, its description, whether it takes a value, the
// value's type name (set with type_name() in cli.cc: FILE, NAME, DURATION, ...), and the
// descriptions of its checks, of which an IsMember check reads "{a,b,c}": the choices. A FILE
// value is completed with file names, a choice with the choices, anything else not at all.

#include "replicator/cli_docs.h"

#include <cctype>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/version.h"

namespace xdcr::cli {

namespace {

struct OptionInfo {
  std::vector<std::string> names;  // "-c", "--config"; empty for a positional
  std::string positional;          // a positional's name, e.g. SHELL
  std::string value;               // the value's name (FILE, N, ...); empty for a flag
  std::vector<std::string> choices;
  std::string description;
  bool required = false;
};

std::vector<std::string> splitChoices(const std::string& braced) {
  std::vector<std::string> out;
  std::string cur;
  for (size_t i = 1; i + 1 < braced.size(); ++i) {
    if (braced[i] == ',') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += braced[i];
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

OptionInfo describe(const CLI::Option& opt) {
  OptionInfo info;
  for (const auto& s : opt.get_snames()) info.names.push_back("-" + s);
  for (const auto& l : opt.get_lnames()) info.names.push_back("--" + l);
  if (!opt.nonpositional()) info.positional = opt.get_name(true);
  info.description = opt.get_description();
  info.required = opt.get_required();
  if (opt.get_expected_max() > 0 && opt.get_type_size_max() > 0) {  // not a flag
    // "FILE" or "FORMAT:{table,json}" (the type name, then each check's description).
    const std::string full = opt.get_type_name();
    const auto colon = full.find(':');
    info.value = full.substr(0, colon);
    if (colon != std::string::npos) {
      const std::string rest = full.substr(colon + 1);
      if (rest.size() > 2 && rest.front() == '{' && rest.back() == '}') {
        info.choices = splitChoices(rest);
      }
    }
    if (info.value.empty()) info.value = "VALUE";
  }
  return info;
}

std::vector<OptionInfo> optionsOf(const CLI::App& app) {
  std::vector<OptionInfo> out;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_group().empty()) continue;  // hidden
    out.push_back(describe(*opt));
  }
  return out;
}

std::vector<const CLI::App*> commandsOf(const CLI::App& app) {
  return app.get_subcommands([](const CLI::App* sub) { return !sub->get_name().empty(); });
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

/** The program's one-line description without the "xdcr-agent: " in front. */
std::string summary(const CLI::App& app) {
  std::string d = app.get_description();
  const std::string prefix = app.get_name() + ": ";
  if (d.rfind(prefix, 0) == 0) d = d.substr(prefix.size());
  return d;
}

// ---- roff ----

/** Text for roff: backslashes and dashes escaped, no line starting with a control character. */
std::string roff(const std::string& text) {
  std::string out;
  bool line_start = true;
  for (char ch : text) {
    if (line_start && (ch == '.' || ch == '\'')) out += "\\&";
    line_start = ch == '\n';
    if (ch == '\\') {
      out += "\\e";
    } else if (ch == '-') {
      out += "\\-";
    } else {
      out += ch;
    }
  }
  return out;
}

std::string roffOptionHead(const OptionInfo& o) {
  if (!o.positional.empty()) return "\\fI" + roff(o.positional) + "\\fR";
  std::vector<std::string> names;
  for (const auto& n : o.names) names.push_back("\\fB" + roff(n) + "\\fR");
  std::string head = join(names, ", ");
  if (!o.value.empty()) head += " \\fI" + roff(o.value) + "\\fR";
  return head;
}

std::string roffOptionList(const std::vector<OptionInfo>& opts) {
  std::string out;
  for (const auto& o : opts) {
    out += ".TP\n" + roffOptionHead(o) + "\n" + roff(o.description);
    if (!o.choices.empty()) out += roff(" (one of: " + join(o.choices, ", ") + ")");
    if (o.required) out += roff("; required");
    out += "\n";
  }
  return out;
}

/** "xdcr-agent verify -c FILE -p NAME [OPTIONS]": the required options, then the rest. */
std::string roffSynopsis(const CLI::App& app, const CLI::App& sub) {
  std::string line = "\\fB" + roff(app.get_name()) + " " + roff(sub.get_name()) + "\\fR";
  bool optional = false;
  for (const auto& o : optionsOf(sub)) {
    if (!o.positional.empty()) {
      line += " \\fI" + roff(o.positional) + "\\fR";
    } else if (o.required) {
      line += " \\fB" + roff(o.names.front()) + "\\fR \\fI" + roff(o.value) + "\\fR";
    } else {
      optional = true;
    }
  }
  if (optional) line += " [\\fIOPTIONS\\fR]";
  return line;
}

/** A footer ("Exit status: ...") as its own paragraph(s). */
std::string roffParagraphs(const std::string& text) {
  std::string out;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    if (!line.empty()) out += ".PP\n" + roff(line) + "\n";
    start = end + 1;
  }
  return out;
}

// ---- shells ----

/** A word list for bash's compgen -W (the words are option names and choices: no quoting). */
std::string words(const std::vector<std::string>& v) {
  return join(v, " ");
}

std::vector<std::string> allNames(const std::vector<OptionInfo>& opts) {
  std::vector<std::string> out;
  for (const auto& o : opts) out.insert(out.end(), o.names.begin(), o.names.end());
  return out;
}

/** The bash `case $prev in` arms completing the values of these options. */
std::string bashValueArms(const std::vector<OptionInfo>& opts, const std::string& indent) {
  std::string out;
  for (const auto& o : opts) {
    if (o.value.empty() || o.names.empty()) continue;
    std::string action;
    if (!o.choices.empty()) {
      action = "COMPREPLY=($(compgen -W \"" + words(o.choices) + "\" -- \"$cur\"))";
    } else if (o.value == "FILE") {
      action = "compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- \"$cur\"))";
    } else {
      action = "COMPREPLY=()";  // a free value (a name, a number, an address)
    }
    out += fmt::format("{}{}) {}; return ;;\n", indent, join(o.names, "|"), action);
  }
  return out;
}

/** Text inside a zsh single-quoted string. */
std::string zshQuote(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '\'') {
      out += "'\\''";
    } else {
      out += ch;
    }
  }
  return out;
}

/** An _arguments description in [...]: brackets escaped. */
std::string zshExplanation(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (ch == '[' || ch == ']' || ch == '\\') out += '\\';
    out += ch;
  }
  return zshQuote(out);
}

std::string zshAction(const OptionInfo& o) {
  if (!o.choices.empty()) return "(" + join(o.choices, " ") + ")";
  if (o.value == "FILE") return "_files";
  return " ";
}

/** One _arguments spec per option, each on its own line inside an array. */
std::string zshSpecs(const std::vector<OptionInfo>& opts, const std::string& indent) {
  std::string out;
  for (const auto& o : opts) {
    const std::string value =
        o.value.empty() ? "" : ":" + zshQuote(o.value) + ":" + zshQuote(zshAction(o));
    if (!o.positional.empty()) {
      out += indent + "'1:" + zshQuote(o.positional) + ":" + zshQuote(zshAction(o)) + "'\n";
      continue;
    }
    const std::string expl = "[" + zshExplanation(o.description) + "]";
    // -h/--help and --version end the command line: nothing else after them.
    const bool terminal = o.names.back() == "--help" || o.names.back() == "--version";
    if (o.names.size() == 1) {
      out += fmt::format("{}'{}{}{}{}'\n", indent, terminal ? "(- *)" : "", o.names.front(), expl,
                         value);
    } else {
      const std::string exclusive = terminal ? "- *" : join(o.names, " ");
      out +=
          fmt::format("{}'({})'{{{}}}'{}{}'\n", indent, exclusive, join(o.names, ","), expl, value);
    }
  }
  return out;
}

}  // namespace

std::string manPage(const CLI::App& app) {
  const std::string& name = app.get_name();
  std::string upper = name;
  for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  std::string out;
  out += ".\\\" Generated by `" + name + " man` from the command-line definition; do not edit.\n";
  out += fmt::format(".TH {} 1 \"\" \"{} {}\" \"User Commands\"\n", upper, name, xdcr::version());
  out += ".SH NAME\n" + roff(name) + " \\- " + roff(summary(app)) + "\n";
  out += ".SH SYNOPSIS\n";
  out += ".B " + roff(name) + "\n[\\fIGLOBAL OPTIONS\\fR] \\fICOMMAND\\fR [\\fIOPTIONS\\fR]\n";
  for (const CLI::App* sub : commandsOf(app)) out += ".br\n" + roffSynopsis(app, *sub) + "\n";
  out += ".SH DESCRIPTION\n" + roff(name) + " " + roff(summary(app)) + ".\n";
  out += ".PP\n" + roff(name + " help") + " and " + roff(name + " COMMAND --help") +
         " print the same options as this page.\n";
  out += ".SH GLOBAL OPTIONS\nAccepted before or after the command.\n";
  out += roffOptionList(optionsOf(app));
  out += ".SH COMMANDS\n";
  for (const CLI::App* sub : commandsOf(app)) {
    out += ".SS \"" + roff(name + " " + sub->get_name()) + "\"\n";
    out += roffSynopsis(app, *sub) + "\n.PP\n" + roff(sub->get_description()) + "\n";
    std::vector<OptionInfo> opts;  // -h/--help: said once, in DESCRIPTION
    for (auto& opt : optionsOf(*sub)) {
      if (opt.names.empty() || opt.names.back() != "--help") opts.push_back(std::move(opt));
    }
    out += roffOptionList(opts);
    // A subcommand added after the program's footer was set inherits it: listed once, below.
    if (sub->get_footer() != app.get_footer()) out += roffParagraphs(sub->get_footer());
  }
  out += ".SH EXIT STATUS\n" + roffParagraphs(app.get_footer());
  out += ".SH FILES\n";
  out +=
      ".TP\n.I /etc/xdcr\\-agent/xdcr.yaml\nThe configuration the systemd unit runs with "
      "(an example: /usr/share/doc/xdcr\\-agent/examples/xdcr.yaml).\n";
  out +=
      ".TP\n.I /var/lib/xdcr\\-agent\nThe state directory (agent.state_dir) the unit "
      "gives the agent (StateDirectory=xdcr\\-agent): checkpoints, spool.\n";
  out +=
      ".SH SEE ALSO\n.BR systemd.exec (5),\n.BR systemd\\-creds (1),\n"
      ".I /usr/share/doc/xdcr\\-agent/README.md\n";
  return out;
}

std::string bashCompletion(const CLI::App& app) {
  const std::string& name = app.get_name();
  std::string fn = "_" + name;
  for (char& ch : fn) {
    if (ch == '-') ch = '_';
  }
  const auto globals = optionsOf(app);
  std::vector<std::string> command_names;
  for (const CLI::App* sub : commandsOf(app)) command_names.push_back(sub->get_name());

  std::string out;
  out += "# bash completion for " + name + "\n";
  out += "# Generated by `" + name +
         " completion bash` from the command-line definition; "
         "do not edit.\n";
  out += fn + "() {\n";
  out += "  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} cmd= i\n";
  out += "  for ((i = 1; i < COMP_CWORD; i++)); do\n";
  out += "    case ${COMP_WORDS[i]} in\n";
  out += "      " + join(command_names, "|") + ") cmd=${COMP_WORDS[i]}; break ;;\n";
  out += "    esac\n  done\n";
  out += "  case $prev in\n" + bashValueArms(globals, "    ") + "  esac\n";
  out += "  case $cmd in\n";
  out += "    '')\n";
  out += "      if [[ $cur == -* ]]; then\n";
  out += "        COMPREPLY=($(compgen -W \"" + words(allNames(globals)) + "\" -- \"$cur\"))\n";
  out += "      else\n";
  out += "        COMPREPLY=($(compgen -W \"" + words(command_names) + " help\" -- \"$cur\"))\n";
  out += "      fi ;;\n";
  for (const CLI::App* sub : commandsOf(app)) {
    const auto opts = optionsOf(*sub);
    std::vector<std::string> option_words = allNames(opts);
    for (const auto& g : allNames(globals)) {
      if (g != "-h" && g != "--help" && g != "--version") option_words.push_back(g);
    }
    std::vector<std::string> positional_choices;
    for (const auto& o : opts) {
      if (!o.positional.empty()) {
        positional_choices.insert(positional_choices.end(), o.choices.begin(), o.choices.end());
      }
    }
    out += "    " + sub->get_name() + ")\n";
    const std::string arms = bashValueArms(opts, "        ");
    if (!arms.empty()) out += "      case $prev in\n" + arms + "      esac\n";
    if (positional_choices.empty()) {
      out += "      COMPREPLY=($(compgen -W \"" + words(option_words) + "\" -- \"$cur\")) ;;\n";
    } else {
      out += "      if [[ $cur == -* ]]; then\n";
      out += "        COMPREPLY=($(compgen -W \"" + words(option_words) + "\" -- \"$cur\"))\n";
      out += "      else\n";
      out +=
          "        COMPREPLY=($(compgen -W \"" + words(positional_choices) + "\" -- \"$cur\"))\n";
      out += "      fi ;;\n";
    }
  }
  out += "  esac\n}\n";
  out += "complete -F " + fn + " " + name + "\n";
  return out;
}

std::string zshCompletion(const CLI::App& app) {
  const std::string& name = app.get_name();
  std::string out;
  out += "#compdef " + name + "\n";
  out += "# zsh completion for " + name + "\n";
  out += "# Generated by `" + name +
         " completion zsh` from the command-line definition; "
         "do not edit.\n\n";
  out += "_" + name + "() {\n";
  out += "  local curcontext=$curcontext state state_descr line ret=1\n";
  out += "  typeset -A opt_args\n";
  // The global options are accepted after the command as well (CLI11 fallthrough).
  out += "  local -a global_opts\n  global_opts=(\n";
  std::vector<OptionInfo> shared;
  for (const auto& g : optionsOf(app)) {
    if (g.names.back() != "--help" && g.names.back() != "--version") shared.push_back(g);
  }
  out += zshSpecs(shared, "    ") + "  )\n";
  std::vector<OptionInfo> top_only;
  for (const auto& g : optionsOf(app)) {
    if (g.names.back() == "--help" || g.names.back() == "--version") top_only.push_back(g);
  }
  out += "  _arguments -C \\\n    $global_opts \\\n";
  std::string top = zshSpecs(top_only, "    ");
  size_t pos = 0;
  while ((pos = top.find('\n', pos)) != std::string::npos) {
    top.replace(pos, 1, " \\\n");
    pos += 3;
  }
  out += top;
  out += "    '1: :->command' \\\n    '*:: :->args' && ret=0\n";
  out += "  case $state in\n";
  out += "    command)\n      local -a commands\n      commands=(\n";
  for (const CLI::App* sub : commandsOf(app)) {
    out += "        '" + zshQuote(sub->get_name() + ":" + sub->get_description()) + "'\n";
  }
  out += "        'help:print the help'\n      )\n";
  out += "      _describe -t commands '" + name + " command' commands && ret=0 ;;\n";
  out += "    args)\n";
  out += "      curcontext=${curcontext%:*:*}:" + name + "-$words[1]:\n";
  out += "      case $words[1] in\n";
  for (const CLI::App* sub : commandsOf(app)) {
    out += "        " + sub->get_name() + ")\n          _arguments $global_opts \\\n";
    std::string specs = zshSpecs(optionsOf(*sub), "            ");
    pos = 0;
    while ((pos = specs.find('\n', pos)) != std::string::npos) {
      specs.replace(pos, 1, " \\\n");
      pos += 3;
    }
    out += specs + "            && ret=0 ;;\n";
  }
  out += "      esac ;;\n  esac\n  return ret\n}\n\n";
  out += "_" + name + " \"$@\"\n";
  return out;
}

}  // namespace xdcr::cli
