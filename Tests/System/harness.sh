#!/usr/bin/env bash
# A private systemd world for the system tests: a tmpfs on /run, a real systemd-journald and a real user manager
# (`systemd --user`), in a mount namespace of their own, so nothing touches the machine's /run or journal.
# Recipe and limits: docs/development.md, "System tests". Sourced by run.sh; needs root and unshare.

W=/run/klarna-systest            # everything the tests make lives here, on the private /run
export XDG_RUNTIME_DIR=/run/user/0 HOME=$W/home
export XDG_CONFIG_HOME=$HOME/.config XDG_STATE_HOME=$HOME/.local/state
UNITS=$XDG_CONFIG_HOME/systemd/user
JPID= SPID=

world_up() {
    mount -t tmpfs -o mode=0755 tmpfs /run
    # Shared within this namespace (the host never sees it): the manager prepares a unit's credentials in a child
    # mount namespace and moves them into place, which only propagates back through a shared mount.
    mount --make-shared /run
    mkdir -p /run/systemd/system /run/systemd/journal /run/log/journal /run/user/0 "$UNITS" "$XDG_STATE_HOME"
    chmod 700 /run/user/0
    /lib/systemd/systemd-journald & JPID=$!
    wait_for 10 "journald's socket" test -S /run/systemd/journal/socket
    /lib/systemd/systemd --user >"$W/manager.log" 2>&1 & SPID=$!
    wait_for 20 "the user manager" manager_running
}

world_down() {
    systemctl --user stop klarna-reconciler.service klarna-reconciler-reload.service klarna-reconciler.socket klarna-reconciler-control.socket klarna-sandbox.service >/dev/null 2>&1 || true
    [ -n "$SPID" ] && kill "$SPID" 2>/dev/null
    [ -n "$JPID" ] && kill "$JPID" 2>/dev/null
    wait 2>/dev/null || true
}

manager_running() {
    case $(systemctl --user is-system-running 2>&1) in running|degraded) return 0;; esac
    return 1
}

# wait_for SECONDS WHAT COMMAND...: polls COMMAND every 0.1 s until it succeeds; fails the test with WHAT.
wait_for() {
    local seconds=$1 what=$2; shift 2
    local deadline=$((SECONDS + seconds))
    until "$@" >/dev/null 2>&1; do
        if [ $SECONDS -ge $deadline ]; then fail "timed out after ${seconds}s waiting for $what"; return 1; fi
        sleep 0.1
    done
}

prop() { systemctl --user show "$UNIT" -p "$1" --value; }
