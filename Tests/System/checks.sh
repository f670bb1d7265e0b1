#!/usr/bin/env bash
# How the shell test suites report (system tests, package tests): each check prints "ok:" or "FAIL:" with the last
# lines of what the failed command said; FAILURES counts them; and a free port for what they start. Sourced.
FAILURES=0
fail() { echo "  FAIL: $*"; FAILURES=$((FAILURES + 1)); }
check() {
    local what=$1 out; shift
    if out=$("$@" 2>&1); then echo "  ok: $what"; else fail "$what"; [ -n "$out" ] && tail -3 <<<"$out" | sed 's/^/      /'; fi
}

# free_port: a loopback port nothing listens on, below the kernel's ephemeral range (32768 and up), where outgoing
# connections cannot take it between the check and the sandbox's bind.
free_port() {
    local port
    for _ in $(seq 50); do
        port=$((10000 + RANDOM % 20000))
        python3 -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', $port))" 2>/dev/null && { echo $port; return 0; }
    done
    return 1
}
