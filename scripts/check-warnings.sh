#!/usr/bin/env bash
# Reads a `swift build` log and fails, listing them, on warnings from this package's own targets (a file under
# Sources/, Tests/ or Benchmarks/ of this clone, wherever it sits) or from SwiftPM about this package.
# Usage: scripts/check-warnings.sh BUILD_LOG
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
own=$(grep -E "^($REPO/(Sources|Tests|Benchmarks)/[^:]+:[0-9]+:[0-9]+: warning: |warning: 'klarna-reconciler': )" "$1" | sort -u)
if [ -n "$own" ]; then
    echo
    echo "==== $(wc -l <<<"$own") warning(s) from this package's own code: a warning is a bug like a failing test ===="
    echo "$own"
    exit 1
fi
echo "no warnings from this package's own targets"
