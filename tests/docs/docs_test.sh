#!/usr/bin/env bash
# The documentation a clone of the project carries is whole and true to the code (issue 18,
# finding 8: the README and examples/demo.yaml sent readers to expiry-semantics.md and
# interface.md, files a clone did not have).
#
#   bash tests/docs/docs_test.sh [PROJECT_ROOT]     (default: this script's project)
#
# Checks, over README.md, docs/*.md, examples/* and packaging/**:
#   1. every relative markdown link [text](path[#anchor]) names a file of the project, and an
#      anchor into a markdown file names one of its headings (GitHub's slugs);
#   2. every file name ending in .md that the text mentions (`interface.md`, docs/x.md) exists
#      in the project (URLs and absolute paths, e.g. the installed /usr/share/doc/…, aside): no
#      reader is sent to a document only the authors had;
#   3. nothing mentions ../shared (the workspace the project was written in, not part of it);
# and against the code:
#   4. every metric family the agent defines (quoted "xdcr_…"/"process_…" names in the sources)
#      is in docs/interface.md, and every xdcr_ name docs/interface.md gives exists in the code
#      unless its line says "not implemented";
#   5. every subcommand and every long option of the command line (add_subcommand / add_option /
#      add_flag in replicator/*.cc) is in docs/interface.md, and every `xdcr-agent WORD` there is
#      a real subcommand unless its line says "not implemented".
# Bash, grep and sed only (Debian's coreutils): runs on a fresh machine before anything is built.
set -u
root=${1:-"$(cd "$(dirname "$0")/../.." && pwd)"}
cd "$root" || exit 2
fail=0
failed() {  # failed MESSAGE: one line, what is wrong and where
  echo "FAILED: $*"
  fail=$((fail + 1))
}

docs=(README.md docs/*.md)
others=()
while IFS= read -r f; do others+=("$f"); done < <(find examples packaging -type f 2>/dev/null | sort)
all=("${docs[@]}" "${others[@]}")
interface=docs/interface.md

# GitHub's anchor of a heading: lower case, punctuation dropped (not - and _), spaces to -.
slug() {
  printf '%s' "$1" | sed -E 's/^#+[[:space:]]*//; s/[[:space:]]+$//' | tr '[:upper:]' '[:lower:]' |
    LC_ALL=C sed -E 's/[^a-z0-9 _-]//g; s/ /-/g'
}
anchors_of() {  # the anchors of a markdown file, one a line (fenced code skipped)
  awk '/^```/ {code = !code; next} !code && /^#+ / {print}' "$1" | while IFS= read -r h; do
    slug "$h"
    echo
  done
}

# 1. Relative markdown links.
for f in "${all[@]}"; do
  [ -f "$f" ] || continue
  dir=$(dirname "$f")
  grep -noE '\]\([^) ]+\)' "$f" | while IFS= read -r hit; do
    line=${hit%%:*}
    target=${hit#*:](}
    target=${target%)}
    case $target in http://* | https://* | mailto:* | file://*) continue ;; esac
    path=${target%%#*}
    anchor=
    [ "$path" != "$target" ] && anchor=${target#*#}
    [ -z "$path" ] && path=$(basename "$f")  # (#anchor): this file
    resolved="$dir/$path"
    if [ ! -e "$resolved" ]; then
      echo "FAILED: $f:$line: link to $target: no file $resolved in the project"
      continue
    fi
    if [ -n "$anchor" ] && [[ $resolved == *.md ]]; then
      if ! anchors_of "$resolved" | grep -qxF -- "$anchor"; then
        echo "FAILED: $f:$line: link to $target: $resolved has no heading with anchor #$anchor"
      fi
    fi
  done
done >"${TMPDIR:-/tmp}/docs_test.$$"
while IFS= read -r l; do failed "${l#FAILED: }"; done <"${TMPDIR:-/tmp}/docs_test.$$"
rm -f "${TMPDIR:-/tmp}/docs_test.$$"

# 2. Markdown files mentioned by name.
md_files=$(find . -name '*.md' -not -path './build*' -not -path './.git/*' | sed 's|^\./||')
for f in "${all[@]}"; do
  [ -f "$f" ] || continue
  dir=$(dirname "$f")
  while IFS= read -r hit; do
    line=${hit%%:*}
    name=${hit#*:}
    if [[ $name == */* ]]; then
      [ -e "$dir/$name" ] || [ -e "$name" ] || [ -e "$dir/${name#../}" ] ||
        failed "$f:$line: mentions $name, which is not in the project"
    else
      grep -qE "(^|/)${name//./\\.}\$" <<<"$md_files" ||
        failed "$f:$line: mentions $name, which is not in the project (a document of the authors' workspace? point to docs/ instead)"
    fi
  done < <(grep -noE '(https?:/|file:/)?[A-Za-z0-9_./-]*[A-Za-z0-9_-]\.md\b' "$f" |
    grep -vE '^[0-9]+:(https?:|file:|/)' | sort -u -t: -k1,1n -k2)
done

# 3. The authors' workspace.
for f in "${all[@]}"; do
  [ -f "$f" ] || continue
  while IFS= read -r hit; do
    failed "$f:${hit%%:*}: mentions ../shared, which a clone does not have: ${hit#*:}"
  done < <(grep -nE '\.\./shared|shared/(docs|seeds|tools|reference|hooks)/' "$f")
done

[ -f "$interface" ] || failed "$interface does not exist: the CLI, YAML, endpoint and metrics reference"

# 4. Metric families.
sources=(common config clock source target filters replicator)
code_metrics=$(grep -rhoE '"(xdcr|process)_[a-z0-9_]+' --include='*.cc' --include='*.h' "${sources[@]}" |
  tr -d '"' | sort -u)
[ -n "$code_metrics" ] || failed "no metric names found in ${sources[*]}: the test cannot see the code"
for m in $code_metrics; do
  grep -qE "(^|[^a-z0-9_])$m([^a-z0-9_]|\$)" "$interface" 2>/dev/null ||
    failed "metric $m (in the code) is not in $interface §4"
done
if [ -f "$interface" ]; then
  while IFS= read -r hit; do
    line=${hit%%:*}
    m=${hit#*:}
    base=$(sed -E 's/_(bucket|sum|count)$//' <<<"$m")
    grep -qxF "$m" <<<"$code_metrics" || grep -qxF "$base" <<<"$code_metrics" ||
      sed -n "${line}p" "$interface" | grep -qi 'not implemented' ||
      failed "$interface:$line: metric $m is not in the code (mark it not implemented, or remove it)"
  done < <(grep -noE '(^|[^a-z0-9_])xdcr_[a-z0-9_]+' "$interface" | sed -E 's/:[^x]*xdcr_/:xdcr_/')
fi

# 5. The command line.
cli_sources=(replicator/*.cc)
commands=$(grep -hoE 'add_subcommand\(\s*"[a-z-]+"' "${cli_sources[@]}" | grep -oE '"[a-z-]+"' |
  tr -d '"' | sort -u)
[ -n "$commands" ] || failed "no add_subcommand in replicator/*.cc: the test cannot see the CLI"
for c in $commands help; do
  grep -qE "xdcr-agent $c([^a-z-]|\$)" "$interface" 2>/dev/null ||
    failed "command \"xdcr-agent $c\" is not in $interface §1"
done
options=$(grep -hoE 'add_(option|flag)\(\s*"[^"]*--[a-z-]+"' "${cli_sources[@]}" |
  grep -oE -- '--[a-z-]+' | sort -u)
for o in $options --version --help; do
  grep -qE -- "$o([^a-z-]|\$)" "$interface" 2>/dev/null ||
    failed "option $o (in the CLI definition) is not in $interface §1"
done
if [ -f "$interface" ]; then
  while IFS= read -r hit; do
    line=${hit%%:*}
    c=${hit##* }
    grep -qxF "$c" <<<"$commands"$'\nhelp' ||
      sed -n "${line}p" "$interface" | grep -qi 'not implemented' ||
      failed "$interface:$line: \"xdcr-agent $c\" is no command of the CLI (mark it not implemented, or remove it)"
  done < <(grep -noE 'xdcr-agent [a-z][a-z-]*' "$interface")
fi

if [ "$fail" -gt 0 ]; then
  echo "docs_test: $fail problem(s)"
  exit 1
fi
echo "docs_test: ok (${#all[@]} files; $(wc -w <<<"$code_metrics") metric families, $(wc -w <<<"$commands") commands, $(wc -w <<<"$options") options checked against $interface)"
