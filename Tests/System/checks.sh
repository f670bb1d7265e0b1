#!/usr/bin/env bash
# How the shell test suites report (system tests, package tests): each check prints "ok:" or "FAIL:" with the last
# lines of what the failed command said; FAILURES counts them. Sourced.
FAILURES=0
fail() { echo "  FAIL: $*"; FAILURES=$((FAILURES + 1)); }
check() {
    local what=$1 out; shift
    if out=$("$@" 2>&1); then echo "  ok: $what"; else fail "$what"; [ -n "$out" ] && tail -3 <<<"$out" | sed 's/^/      /'; fi
}
