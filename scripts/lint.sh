#!/usr/bin/env bash
# Static checks, run by scripts/test.sh (CI) after the build:
#   1. clang-format (.clang-format): every C++ file of the repository is formatted;
#   2. clang-tidy (.clang-tidy: bug patterns and needless copies, findings are errors) on the
#      engine's translation units, with the build's compile_commands.json.
#   BUILD_DIR=build (needs a configured build)  LINT_JOBS=2  LINT_TIDY=0 skips clang-tidy
# Fix formatting with: git ls-files '*.cc' '*.h' | xargs clang-format -i
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
files=$(git ls-files '*.cc' '*.h')
echo "lint: clang-format on $(echo "$files" | wc -l) files"
if ! echo "$files" | xargs clang-format --dry-run --Werror 2>/tmp/xdcr-format.$$; then
  head -40 /tmp/xdcr-format.$$ >&2
  echo "lint: files above are not formatted; run: git ls-files '*.cc' '*.h' | xargs clang-format -i" >&2
  rm -f /tmp/xdcr-format.$$
  exit 1
fi
rm -f /tmp/xdcr-format.$$
if [ "${LINT_TIDY:-1}" = 0 ]; then exit 0; fi
# The engine: every module's sources but the one-file Asio/OpenSSL implementation units.
units=$(git ls-files 'common/*.cc' 'clock/*.cc' 'config/*.cc' 'source/*.cc' 'filters/*.cc' \
          'target/*.cc' 'replicator/*.cc' | grep -v '_impl\.cc$')
echo "lint: clang-tidy on $(echo "$units" | wc -l) translation units (-j${LINT_JOBS:-2})"
started=$SECONDS
log=$(mktemp)
status=0
echo "$units" | xargs -P "${LINT_JOBS:-2}" -n 4 clang-tidy -p "$BUILD_DIR" --quiet >"$log" 2>&1 ||
  status=$?
# clang-tidy exits non-zero on a finding (WarningsAsErrors: every check is an error).
grep -v "warnings generated\|^Suppressed \|^Use -header-filter\|^Use -system-headers" "$log" || true
rm -f "$log"
if [ "$status" != 0 ]; then
  echo "lint: clang-tidy found problems (above), exit $status" >&2
  exit 1
fi
echo "lint: clean ($((SECONDS - started)) s)"
