#!/usr/bin/env bash
# Runs the Swift tests (arguments go to `swift test`) and, when any fails, repeats what failed at the very end of the
# output: a CI log is often read from its tail, and the failure itself may be thousands of lines further up.
set -uo pipefail
# At most 12 tests at once in the test process (Swift Testing's own setting; unset, it starts every test at once): the
# process tests each run a daemon and the cluster tests three, and on two cores a run that started them all together
# starved the early ones past their deadlines (a 2 s test waited over 90 s). Capped, a full run is also faster
# (170 s against 195-224 s; docs/development.md). An explicit setting wins.
export SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=${SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH:-12}
log=$(mktemp "${TMPDIR:-/tmp}/swift-test.XXXXXX")
trap 'rm -f "$log"' EXIT
swift test "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
if [ "$status" -ne 0 ]; then
    echo
    echo "==== what failed (repeated from above) ===="
    # Swift Testing marks failures with ✘ (and the details on the lines indented after it); XCTest says error:.
    grep -E -A6 '✘|: error: |Fatal error|Test Case .* failed' "$log" | head -200
fi
exit "$status"
