#!/usr/bin/env bash
# `swift build` (arguments passed on) that fails on a warning from this package's own code: Sources/, Tests/ and
# Benchmarks/, and SwiftPM's warnings about the package itself. Dependencies' warnings are theirs and pass.
# A build only prints the warnings of what it compiles: CI builds a fresh clone, so there every file is checked.
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
log=$(mktemp "${TMPDIR:-/tmp}/swift-build.XXXXXX")
trap 'rm -f "$log"' EXIT
swift build "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
[ "$status" -eq 0 ] || exit "$status"
"$REPO/scripts/check-warnings.sh" "$log"
