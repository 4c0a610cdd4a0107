#!/usr/bin/env bash
# The man page and the bash/zsh completions that the build generates from the command-line
# definition (`xdcr-agent man`, `xdcr-agent completion bash|zsh`): every command and option that
# `xdcr-agent --help` / `COMMAND --help` lists is in all three; the man page renders without
# warnings; the bash script registers itself and completes commands, choices and files; the zsh
# function completes the same in a real interactive zsh (when zsh is installed:
# scripts/install-deps.sh --test installs it).
set -u
build=$(cd "$1" && pwd)
agent=$build/xdcr-agent
gen=$build/generated
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
check() {  # check NAME COMMAND...
  if "${@:2}" >"$tmp/out" 2>&1; then pass=$((pass + 1)); else
    fail=$((fail + 1)); echo "FAILED: $1"; cat "$tmp/out"; fi
}
for f in xdcr-agent.1 xdcr-agent.1.gz xdcr-agent.bash _xdcr-agent; do
  [ -s "$gen/$f" ] || { echo "FAILED: $gen/$f missing (build the target xdcr-agent-docs)"; exit 1; }
done
man=$gen/xdcr-agent.1 bashc=$gen/xdcr-agent.bash zshc=$gen/_xdcr-agent

# The generated files are what the binary prints now (not stale).
check "man page is the binary's" cmp "$man" <("$agent" man)
check "man page .gz holds the same" cmp "$man" <(gzip -dc "$gen/xdcr-agent.1.gz")
check "bash completion is the binary's" cmp "$bashc" <("$agent" completion bash)
check "zsh completion is the binary's" cmp "$zshc" <("$agent" completion zsh)

# The commands and options, read from the help, not from the generator.
commands=$("$agent" --help | sed -n '/^Subcommands:/,$p' | awk 'NR > 1 && /^  [a-z]/ {print $1}')
[ "$(echo "$commands" | wc -w)" -ge 8 ] || { echo "FAILED: too few commands in --help: $commands"; exit 1; }
for c in $commands; do
  check "man page has a section for $c" grep -qF ".SS \"xdcr\\-agent $c\"" "$man"
  check "bash completion knows $c" grep -qE "^    $c\)" "$bashc"
  check "zsh completion knows $c" grep -qE "^        '$c:" "$zshc"
  for opt in $("$agent" "$c" --help | grep -oE '^  (-[a-zA-Z],)?--[a-z-]+' | tr ',' ' '); do
    roff_opt=${opt//-/\\-}
    check "man page has $c $opt" grep -qF -- "$roff_opt" "$man"
    check "bash completion has $c $opt" grep -qE -- "(\"| )$opt( |\")" "$bashc"
    check "zsh completion has $c $opt" grep -qE -- "(\{|,|'|\))$opt(\[|,|\})" "$zshc"
  done
done

# man: renders, and without a warning (groff's -ww through man --warnings).
check "man renders the page" bash -c "MANWIDTH=80 man -l '$man' | grep -q 'EXIT STATUS'"
MANWIDTH=80 man --warnings -l "$man" >/dev/null 2>"$tmp/man.err"
check "man --warnings prints nothing" test ! -s "$tmp/man.err"
cat "$tmp/man.err"

# bash: the script registers the function and completes.
check "bash: complete -p xdcr-agent" bash -c \
  "source '$bashc' && complete -p xdcr-agent | grep -qx 'complete -F _xdcr_agent xdcr-agent'"
complete_bash() {  # complete_bash WORD... ; prints COMPREPLY, one a line (the last word is completed)
  bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _xdcr_agent
           printf "%s\n" "${COMPREPLY[@]}" | sort' sh "$bashc" "$@"
}
check "bash: 'xdcr-agent comp' -> completion" test "$(complete_bash xdcr-agent comp)" = completion
out=$(complete_bash xdcr-agent '')
for c in $commands help; do check "bash: 'xdcr-agent ' offers $c" grep -qx "$c" <<<"$out"; done
check "bash: verify -o offers the choices" test "$(complete_bash xdcr-agent verify -o '' | tr '\n' ' ')" = "json table "
check "bash: --log-level after a command" test "$(complete_bash xdcr-agent run --log-level w | tr '\n' ' ')" = "warn "
check "bash: completion offers the shells" test "$(complete_bash xdcr-agent completion '' | tr '\n' ' ')" = "bash zsh "
touch "$tmp/conf-one.yaml"
check "bash: -c completes file names" test "$(complete_bash xdcr-agent validate -c "$tmp/conf-" )" = "$tmp/conf-one.yaml"

# zsh: the function in $fpath, completion through a real interactive shell (zsh/zpty).
if command -v zsh >/dev/null; then
  check "zsh: parses" zsh -n "$zshc"
  mkdir -p "$tmp/fpath" && cp "$zshc" "$tmp/fpath/_xdcr-agent"
  # The shell may take seconds to start (compinit -D scans every completion function; on a fresh
  # machine under the suite's load, with a cold page cache, over a second): every read waits for
  # what it expects, never for a fixed time. The tty echoes what is typed before zsh reads it, so
  # the ready mark is typed as RE""ADY and only zsh's output of it reads READY; a TAB typed before
  # ZLE is up sits in the echo until ZLE takes it.
  cat >"$tmp/z.zsh" <<ZEOF
zmodload zsh/zpty
zpty z zsh -f -i
zpty -w z 'PS1="> "; fpath=($tmp/fpath \$fpath); autoload -U compinit; compinit -u -D; print RE""ADY'
zpty -r z line '*READY*'
# await PATTERN: reads the screen until it matches PATTERN, then until it is quiet for 0.5 s (the
# rest of a listing); 30 s at most. Prints what it read.
await() {
  local chunk out= quiet=0 i
  for i in {1..300}; do
    if zpty -r -t z chunk; then out+=\$chunk; quiet=0; continue; fi
    if [[ \$out == \$~1 ]]; then (( ++quiet >= 5 )) && break; fi
    sleep 0.1
  done
  print -r -- "\$out"
}
zpty -w -n z \$'xdcr-agent \t'; print -- '--- top'; await '*-- *'; zpty -w -n z \$'\C-u'
zpty -w -n z \$'xdcr-agent verify -o \t'; print -- '--- verify -o'; await '*json*table*'; zpty -w -n z \$'\C-u'
zpty -w -n z \$'xdcr-agent completion \t'; print -- '--- completion'; await '*bash*zsh*'
zpty -d z
ZEOF
  timeout 120 zsh -f "$tmp/z.zsh" | tr -d '\r' | sed 's/\x1b\[[0-9;?]*[a-zA-Z]//g' >"$tmp/z.out" 2>&1
  top=$(sed -n '/^--- top/,/^--- verify/p' "$tmp/z.out")
  for c in $commands; do check "zsh: 'xdcr-agent <TAB>' lists $c" grep -qE "(^| )$c +-- " <<<"$top"; done
  check "zsh: verify -o <TAB> lists json and table" bash -c \
    "sed -n '/^--- verify -o/,/^--- completion/p' '$tmp/z.out' | grep -qE 'json +table'"
  check "zsh: completion <TAB> lists bash and zsh" bash -c \
    "sed -n '/^--- completion/,\$p' '$tmp/z.out' | grep -qE 'bash +zsh'"
  [ "$fail" -eq 0 ] || { echo "--- zsh session:"; cat "$tmp/z.out"; }
else
  echo "zsh not installed: the zsh completion was checked for its commands and options only"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
