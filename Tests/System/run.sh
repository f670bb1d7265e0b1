#!/usr/bin/env bash
# System tests: the real binary under the shipped units, run by a real systemd user manager with a real journald
# (harness.sh). Usage: Tests/System/run.sh path/to/klarna-reconciler (the klarna-sandbox binary built beside it serves
# as Klarna).
# What they prove is listed in docs/development.md; each test prints PASS or FAIL with the reason.
set -uo pipefail
BIN=$(realpath "$1")
SANDBOX_BIN=$(dirname "$BIN")/klarna-sandbox
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)

if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null; then
    echo "system tests: SKIPPED (they need root and unshare for a private /run)"; exit 0
fi
if [ -z "${KLARNA_SYSTEST_NAMESPACE:-}" ]; then
    if ! unshare --mount --propagation private sh -c 'mount -t tmpfs tmpfs /mnt' 2>/dev/null; then
        echo "system tests: SKIPPED (this machine does not allow a private mount namespace: no CAP_SYS_ADMIN)"; exit 0
    fi
    exec env KLARNA_SYSTEST_NAMESPACE=1 unshare --mount --propagation private "$0" "$@"
fi

source "$HERE/harness.sh"
source "$HERE/checks.sh"
trap 'world_down' EXIT

# --- the world: journald, user manager, sandbox, units -------------------------------------------------------
world_up || exit 1
# The units run the binary from the private /run, not from the build tree: a clone under /tmp would be hidden from
# them by the unit's PrivateTmp= (203/EXEC), and the test must pass from any clone path with the units as shipped.
install -D -m 0755 "$BIN" "$W/bin/klarna-reconciler"
install -D -m 0755 "$SANDBOX_BIN" "$W/bin/klarna-sandbox"
BIN=$W/bin/klarna-reconciler
SANDBOX_BIN=$W/bin/klarna-sandbox
mkdir -p "$W/etc" "$W/credstore" "$W/spool" "$W/outbox" "$W/fault"
PORT=$(free_port)
printf 'systest-password-%s\n' "$RANDOM$RANDOM" >"$W/credstore/klarna-password"
printf 'systest-callback-key-%s\n' "$RANDOM$RANDOM" >"$W/credstore/callback-key"
printf '{"krn:partner:global:notification:signing-key:1": "systest-signing-%s"}\n' "$RANDOM" >"$W/credstore/webhook-signing-keys"
SECRETS=("$(cat "$W/credstore/klarna-password")" "$(cat "$W/credstore/callback-key")")
SANDBOX=http://127.0.0.1:$PORT

cat >"$UNITS/klarna-sandbox.service" <<UNIT
[Service]
Type=notify
ExecStart=$SANDBOX_BIN --listen 127.0.0.1:$PORT --username merchant --password-file $W/credstore/klarna-password
UNIT

write_config() {  # write_config [extra YAML lines]
    cat >"$W/etc/config.yaml" <<YAML
klarna:
  base_url: $SANDBOX
  username: merchant
  request_timeout_seconds: 2
${SECRET_FILES:+  password_file: $W/credstore/klarna-password
callback_token:
  key_file: $W/credstore/callback-key
webhook_signing:
  keys_file: $W/credstore/webhook-signing-keys}
outbox:
  dir: $W/outbox
ingest:
  spool_dir: $W/spool
  spool_rescan_seconds: 1
polling:
  dense_interval_seconds: 0.2
retry:
  initial_delay_ms: 100
  max_delay_seconds: 1
rate_limit:
  requests_per_second: 500
  burst: 50
engine:
  wakeup_interval_ms: 100
  status_interval_seconds: 0.5
testing:
  wedge_work_loop_file: $W/fault/wedge
$*
YAML
}

# The shipped units, changed only where a user manager differs from the system manager: it cannot switch users
# (User=, Group=, SupplementaryGroups=, and the klarna-ingest group does not exist here), and paths point into $W.
# ProtectHome=, ProtectKernelTunables= and ProtectKernelLogs= make the user manager fail with 226/NAMESPACE here
# (measured one by one with systemd-run; the others apply), so the test copy goes without those three. And this user
# manager cannot start ExecReload= inside a mount namespace that holds credentials (LoadCredential= together with any
# of ProtectSystem=, PrivateTmp=, PrivateDevices=, PrivateMounts=, ... gives 226/NAMESPACE, measured pair by pair,
# with or without "+"), so the reload test (1) runs on a copy without LoadCredential=; see there.
sed -e "s#/usr/local/bin/klarna-reconciler#$BIN#g" \
    -e "s#/etc/klarna-reconciler/config.yaml#$W/etc/config.yaml#g" \
    -e "s#/etc/credstore/klarna-reconciler\.#$W/credstore/#g" \
    -e "s#^ReadWritePaths=.*#ReadWritePaths=$W/spool $W/outbox $W/fault#" \
    -e '/^User=/d' -e '/^Group=/d' -e '/^SupplementaryGroups=/d' \
    -e '/^ProtectHome=/d' -e '/^ProtectKernelTunables=/d' -e '/^ProtectKernelLogs=/d' \
    "$REPO/systemd/klarna-reconciler.service" >"$UNITS/klarna-reconciler.service"
sed -e "s#^ListenStream=.*#ListenStream=$W/ingest.sock#" -e 's#^SocketGroup=.*#SocketGroup=root#' \
    "$REPO/systemd/klarna-reconciler.socket" >"$UNITS/klarna-reconciler.socket"
mkdir -p "$UNITS/klarna-reconciler.service.d"
cat >"$UNITS/klarna-reconciler.service.d/test.conf" <<'UNIT'
# A short watchdog, so the wedge test takes seconds rather than a minute.
[Service]
WatchdogSec=3s
RestartSec=1s
UNIT
systemctl --user daemon-reload
systemctl --user start klarna-sandbox.service || {
    fail "the sandbox did not start (port $PORT)"
    journalctl --no-pager -n 10 -o cat | sed 's/^/      journal: /'
    exit 1
}

# --- helpers ---------------------------------------------------------------------------------------------------
UNIT=klarna-reconciler.service SOCK=$W/ingest.sock
sock() { curl -sS --max-time 30 --unix-socket "$SOCK" "$@"; }
sandbox() { curl -sS --max-time 10 "$SANDBOX/_sandbox/$1" "${@:2}"; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
# new_payment MODE REFERENCE: a sandbox session the consumer completes after 0.5 s; prints "HPP KP".
new_payment() {
    sandbox sessions -H 'Content-Type: application/json' \
        -d "{\"place_order_mode\": \"$1\", \"merchant_reference\": \"$2\", \"schedule\": [{\"after_seconds\": 0.5, \"status\": \"COMPLETED\"}]}" \
        | json 'd["hpp_session_id"] + " " + d["kp_session_id"]'
}
track() {  # track HPP KP MODE REFERENCE -> HTTP status
    sock -o /dev/null -w '%{http_code}' -H 'Content-Type: application/json' -X POST http://localhost/v1/sessions \
        -d "{\"hpp_session_id\": \"$1\", \"kp_session_id\": \"$2\", \"place_order_mode\": \"$3\", \"merchant_reference\": \"$4\"}"
}
outbox_has() { grep -l "\"$2\"" "$W"/outbox/new/* 2>/dev/null | xargs -r grep -l "\"$1\"" | grep -q .; }
journal() { journalctl --no-pager "$@"; }
message_id() { sed -n "s/^ *case $1 = \"\([0-9a-f]*\)\".*/\1/p" "$REPO/Sources/ReconcilerCore/Operations/MessageID.swift"; }
monotonic() { journal -o json MESSAGE_ID="$(message_id "$1")" "${@:2}" | tail -1 | json 'd["__MONOTONIC_TIMESTAMP"]'; }

echo "system tests (systemd $(systemctl --version | head -1 | cut -d' ' -f2), binary $BIN)"

# --- 1. reload: systemctl reload waits for the daemon, applies a change, refuses a broken file ------------------
echo "1. reload"
# This user manager cannot start ExecReload= at all in a unit that loads credentials (226/NAMESPACE, see the unit's
# copy above; a system manager starts it but without the credentials, systemd#35227, which the reload command does
# not need: IntegrationTests/SystemdProtocolTests runs it without). So the reload test runs first, on a copy of the
# shipped unit that takes its secrets from *_file keys; everything else about it is as shipped.
grep -v '^LoadCredential=' "$UNITS/klarna-reconciler.service" >"$UNITS/klarna-reconciler-reload.service"
cp -r "$UNITS/klarna-reconciler.service.d" "$UNITS/klarna-reconciler-reload.service.d"
UNIT=klarna-reconciler-reload.service
SOCK=$XDG_RUNTIME_DIR/klarna-reconciler/ingest.sock
SECRET_FILES=1
write_config
systemctl --user daemon-reload
check "the copy without credentials starts" systemctl --user start $UNIT
check "no debug lines before the reload" test "$(journal -o cat PRIORITY=7 _SYSTEMD_UNIT=$UNIT | wc -l)" = 0
write_config "log:
  level: debug"
reload() {  # on failure, shows how the reload command ended
    systemctl --user reload $UNIT && return 0
    systemctl --user status $UNIT --no-pager | grep ExecReload
    return 1
}
check "systemctl --user reload succeeds" reload
check "the journal says what the reload applied" grep -q "applied log.level" <<<"$(journal -o cat MESSAGE_ID="$(message_id reloaded)")"
read -r HPP3 KP3 <<<"$(new_payment NONE ref-after-reload)"
check "a track request is accepted" test "$(track "$HPP3" "$KP3" NONE ref-after-reload)" = 202
debug_lines() { test "$(journal -o cat PRIORITY=7 HPP_SESSION_ID="$HPP3" | wc -l)" -gt 0; }
wait_for 15 "debug lines after the reload (log.level took effect)" debug_lines && echo "  ok: log.level debug took effect without a restart"
write_config "capture:
  default_policy: sometimes"
systemctl --user reload $UNIT 2>/dev/null && fail "reload of an invalid config succeeded"
# The reload command validates first, so a broken file never reaches the daemon.
check "the reload command refused it as a config error (exit 78)" grep -q "status=78" <<<"$(systemctl --user show $UNIT -p ExecReload --value)"
refusal_logged() { journal -o cat | grep -q "config error: capture.default_policy"; }
wait_for 5 "the reason of the refused reload in the journal" refusal_logged \
    && echo "  ok: the journal has the reason: $(journal -o cat | grep "config error: capture" | tail -1)"
check "the daemon is still active after the refused reload" test "$(prop ActiveState)" = active
check "NRestarts is still 0" test "$(prop NRestarts)" = 0
systemctl --user stop $UNIT

UNIT=klarna-reconciler.service SOCK=$W/ingest.sock SECRET_FILES=
write_config

# --- 2. a configuration error fails the start, says why, and is not restarted ----------------------------------
echo "2. configuration error"
write_config "bogus_key: 1"
systemctl --user start klarna-reconciler.service 2>/dev/null && fail "start succeeded with an invalid config"
check "the unit failed without ever being active" test "$(prop ActiveState)" = failed
check "exit status 78" test "$(prop ExecMainStatus)" = 78
check "no restart (RestartPreventExitStatus=78)" test "$(prop NRestarts)" = 0
check "StatusText names the problem" grep -q "config error" <<<"$(prop StatusText)"
check "the journal has start_failed with the reason" grep -q bogus_key <<<"$(journal MESSAGE_ID="$(message_id startFailed)" -o cat)"
systemctl --user reset-failed klarna-reconciler.service
write_config

# --- 3. socket activation: a delivery sent before the daemon runs is accepted and acted on ---------------------
echo "3. socket activation"
systemctl --user start klarna-reconciler.socket
check "the socket is mode 0660" test "$(stat -c %a "$W/ingest.sock")" = 660
check "the service is not running yet" test "$(prop ActiveState)" = inactive
read -r HPP1 KP1 <<<"$(new_payment PLACE_ORDER ref-activation)"
check "the track request sent to the socket is answered 202" test "$(track "$HPP1" "$KP1" PLACE_ORDER ref-activation)" = 202
check "the delivery started the service" test "$(prop ActiveState)" = active
wait_for 20 "the activated payment's order_placed and captured outcomes" outbox_has "$HPP1" captured \
    && echo "  ok: the payment tracked before the daemon started ended captured"

# --- 4. READY: the unit became active only after the daemon said it was ready ----------------------------------
echo "4. readiness"
# Type=notify: systemd keeps the unit "activating" until READY=1, whatever the process does meanwhile.
READIES=$(journal -o cat MESSAGE_ID="$(message_id ready)" | wc -l)
systemctl --user restart --no-block $UNIT
STATES=" " DEADLINE=$((SECONDS + 30))
until [ "$(prop ActiveState)" = active ] || [ $SECONDS -ge $DEADLINE ]; do
    state=$(prop ActiveState); [[ $STATES == *" $state "* ]] || STATES+="$state "
done
check "the unit was activating before it was active (states seen:$STATES)" grep -q " activating " <<<"$STATES"
ready_logged() { test "$(journal -o cat MESSAGE_ID="$(message_id ready)" | wc -l)" -gt "$READIES"; }
wait_for 5 "the ready line of the restarted daemon" ready_logged && echo "  ok: the restarted daemon logged ready (MESSAGE_ID ready)"
check "StatusText was set with READY=1" grep -q "open" <<<"$(prop StatusText)"
# A user manager's StateDirectory= is under $XDG_CONFIG_HOME on systemd 252, $XDG_STATE_HOME from 254.
check "the store is in the StateDirectory" test -s "$XDG_CONFIG_HOME/klarna-reconciler/state.sqlite" -o -s "$XDG_STATE_HOME/klarna-reconciler/state.sqlite"

# --- 5. STATUS= follows live state ---------------------------------------------------------------------------
echo "5. live status"
sandbox faults -H 'Content-Type: application/json' -d '{"route": "*", "kind": "status", "status": 503, "count": null}' >/dev/null
read -r HPP2 KP2 <<<"$(new_payment PLACE_ORDER ref-outage)"
track "$HPP2" "$KP2" PLACE_ORDER ref-outage >/dev/null
status_says() { grep -q "$1" <<<"$(prop StatusText)"; }
wait_for 15 "StatusText to report Klarna's 503" status_says "last Klarna error.*503" && echo "  ok: StatusText: $(prop StatusText)"
check "StatusText counts the open payment" status_says "^1 open"
sandbox faults -X DELETE >/dev/null
wait_for 20 "StatusText to say Klarna is ok and nothing is open" status_says "^0 open.*Klarna ok" && echo "  ok: StatusText: $(prop StatusText)"

# --- 6. journald: one order's whole story with its fields and MESSAGE_IDs --------------------------------------
echo "6. journald"
ORDER=$(journal -o json MESSAGE_ID="$(message_id orderPlaced)" HPP_SESSION_ID="$HPP1" | tail -1 | json 'd["ORDER_ID"]')
check "the order_placed line names the order" test -n "$ORDER"
journal -o json ORDER_ID="$ORDER" >"$W/order.json"
python3 - "$W/order.json" "$HPP1" "$KP1" "$(message_id orderPlaced)" "$(message_id captured)" "$(message_id sideEffectSent)" <<'PY' || fail "the order's journal story is incomplete (above)"
import json, sys
path, hpp, kp, placed, captured, sent = sys.argv[1:]
entries = [json.loads(line) for line in open(path)]
problems = []
ids = {e.get("MESSAGE_ID") for e in entries}
for want, name in ((placed, "order_placed"), (captured, "captured"), (sent, "side effect sent")):
    if want not in ids: problems.append(f"no {name} entry (MESSAGE_ID={want})")
for e in entries:
    for field in ("MESSAGE", "PRIORITY", "SYSLOG_IDENTIFIER", "CODE_FILE", "CODE_LINE", "CODE_FUNC", "HPP_SESSION_ID", "KP_SESSION_ID", "MERCHANT_REFERENCE"):
        if field not in e: problems.append(f"entry {e.get('MESSAGE')!r} lacks {field}")
    if e.get("SYSLOG_IDENTIFIER") != "klarna-reconciler": problems.append(f"SYSLOG_IDENTIFIER {e.get('SYSLOG_IDENTIFIER')}")
    if e.get("HPP_SESSION_ID") != hpp or e.get("KP_SESSION_ID") != kp: problems.append(f"entry {e.get('MESSAGE')!r} names another payment")
capture = [e for e in entries if e.get("MESSAGE_ID") == sent and e.get("INTENT")]
if not capture or "ATTEMPT" not in capture[-1]: problems.append("the capture attempt lacks INTENT/ATTEMPT")
if not any("KLARNA_CORRELATION_ID" in e for e in entries): problems.append("no entry carries KLARNA_CORRELATION_ID")
for p in problems: print("   ", p)
print(f"  ok: journalctl ORDER_ID={entries[0]['ORDER_ID']} returned {len(entries)} entries" if not problems else "", end="")
sys.exit(1 if problems else 0)
PY
echo
check "the order's story is in time order from placement to capture" \
    test "$(json 'd["MESSAGE_ID"]' <"$W/order.json" 2>/dev/null | head -0; grep -c . "$W/order.json")" -ge 4
leaked=0
for secret in "${SECRETS[@]}"; do journal -o export | grep -qF "$secret" && leaked=1; done
check "no secret (Klarna password, callback key) anywhere in the journal" test $leaked = 0

# --- 8. hardening applied to the real process ----------------------------------------------------------------
echo "8. hardening"
PID=$(prop MainPID)
check "the seccomp filter is on (Seccomp: 2)" grep -q "^Seccomp:[[:space:]]*2" "/proc/$PID/status"
check "no new privileges" grep -q "^NoNewPrivs:[[:space:]]*1" "/proc/$PID/status"
check "no capabilities in the bounding set" grep -q "^CapBnd:[[:space:]]*0000000000000000" "/proc/$PID/status"
families() { tr ' ' '\n' <<<"$(prop RestrictAddressFamilies)" | sort | xargs; }
check "address families restricted to AF_INET AF_INET6 AF_UNIX ($(families))" test "$(families)" = "AF_INET AF_INET6 AF_UNIX"
check "the hardened daemon still talks to Klarna (payments above completed) and to journald (entries above)" test -n "$ORDER"
# The restriction is enforced, not just configured: a binary built like the daemon (the sandbox: the same toolchain and
# HTTP server), under the unit's filters but with AF_INET taken away, cannot open a TCP listener, while with the unit's
# own families it can.
sandboxed() {  # sandboxed FAMILIES: runs `klarna-sandbox` on a TCP port under the unit's filters for 2 s
    timeout 5 systemd-run --user --wait --pipe -q -p NoNewPrivileges=yes -p "RestrictAddressFamilies=$1" \
        -p SystemCallFilter=@system-service -p "SystemCallFilter=~@privileged" -p SystemCallErrorNumber=EPERM \
        -p RuntimeMaxSec=2 "$SANDBOX_BIN" --listen 127.0.0.1:0 2>&1
}
check "without AF_INET the binary cannot open a TCP socket" grep -qi "address family not supported" <<<"$(sandboxed AF_UNIX)"
check "with the unit's families it can" grep -q "listening on 127.0.0.1" <<<"$(sandboxed "AF_UNIX AF_INET AF_INET6")"

# --- 9. watchdog: a wedged work loop gets the daemon restarted, and work then completes ------------------------
echo "9. watchdog"
touch "$W/fault/wedge"
restarted() { test "$(prop NRestarts)" -ge 1 && test "$(prop ActiveState)" = active; }
wait_for 30 "the watchdog to restart the wedged daemon" restarted && echo "  ok: restarted by the watchdog (NRestarts=$(prop NRestarts))"
check "the daemon reported itself wedged (MESSAGE_ID stalled)" grep -q "work loop" <<<"$(journal -o cat MESSAGE_ID="$(message_id stalled)")"
check "the wedge file was consumed" test ! -e "$W/fault/wedge"
read -r HPP4 KP4 <<<"$(new_payment PLACE_ORDER ref-after-watchdog)"
track "$HPP4" "$KP4" PLACE_ORDER ref-after-watchdog >/dev/null
wait_for 20 "a payment tracked after the restart to end captured" outbox_has "$HPP4" captured && echo "  ok: work completes after the restart"

# --- 10. stop: drains within the timeout and exits cleanly -----------------------------------------------------
echo "10. stop"
sandbox faults -H 'Content-Type: application/json' -d '{"route": "om.create_capture", "kind": "delay", "delay_ms": 1500}' >/dev/null
read -r HPP5 KP5 <<<"$(new_payment PLACE_ORDER ref-during-stop)"
track "$HPP5" "$KP5" PLACE_ORDER ref-during-stop >/dev/null
capture_started() { sandbox "requests?route=om.create_capture" | grep -q "$HPP5\|capture"; }
wait_for 20 "a capture under way" capture_started
STARTED=$SECONDS
check "systemctl --user stop returns" systemctl --user stop klarna-reconciler.service
check "it took less than TimeoutStopSec=40s ($((SECONDS - STARTED)) s)" test $((SECONDS - STARTED)) -lt 40
check "the daemon exited cleanly (Result=success)" test "$(prop Result)" = success
check "the journal has stopping then stopped" test "$(monotonic stopping)" -lt "$(monotonic stopped)"
sandbox faults -X DELETE >/dev/null

# --- 11. a start on a full disk waits: never failed, never restarted, started by itself once space returns ---------
echo "11. full disk"
# A first start with the store on a small filesystem filled to the last byte; a start timeout far shorter than the
# wait, which EXTEND_TIMEOUT_USEC keeps from firing (an exit every few seconds would reach the start limit instead).
mkdir -p "$W/fault/disk"
mount -t tmpfs -o size=8m,mode=0755 tmpfs "$W/fault/disk"
dd if=/dev/zero of="$W/fault/disk/filler" bs=64k 2>/dev/null
write_config "store:
  path: $W/fault/disk/state.sqlite
disk:
  min_free_mb: 1
  reserve_mb: 1"
printf '[Service]\nTimeoutStartSec=5s\n' >"$UNITS/klarna-reconciler.service.d/full-disk.conf"
systemctl --user daemon-reload
systemctl --user reset-failed $UNIT 2>/dev/null
STARTED=$SECONDS
systemctl --user start --no-block $UNIT
wait_for 20 "StatusText to say it waits for the store" status_says "waiting for the store" && echo "  ok: STATUS= says it waits for the store"
waited_past_timeout() { test $((SECONDS - STARTED)) -ge 8 && test "$(prop ActiveState)" = activating; }
wait_for 30 "the start to outlive TimeoutStartSec=5s, still activating" waited_past_timeout && echo "  ok: still activating past TimeoutStartSec"
check "never restarted (NRestarts=0)" test "$(prop NRestarts)" = 0
check "the journal says it waits, with its MESSAGE_ID" grep -q "database or disk is full" <<<"$(journal -o cat MESSAGE_ID="$(message_id storeWaiting)")"
rm -f "$W/fault/disk/filler"
is_active() { test "$(prop ActiveState)" = active; }
wait_for 30 "the daemon to start once space returned" is_active && echo "  ok: active once space returned"
read -r HPP6 KP6 <<<"$(new_payment PLACE_ORDER ref-after-full-disk)"
check "a track request is accepted" test "$(track "$HPP6" "$KP6" PLACE_ORDER ref-after-full-disk)" = 202
wait_for 20 "the payment tracked after the full disk to end captured" outbox_has "$HPP6" captured && echo "  ok: work completes"
check "the reserve was made once space returned" test -s "$W/fault/disk/state.sqlite.reserve"
systemctl --user stop $UNIT
rm -f "$UNITS/klarna-reconciler.service.d/full-disk.conf"
systemctl --user daemon-reload
umount -l "$W/fault/disk"

if [ $FAILURES -gt 0 ]; then
    echo "system tests: $FAILURES FAILED; the daemon's last journal lines and the unit's state:"
    journal -o short-monotonic -t klarna-reconciler -t systemd | grep -v kernel: | grep -i "${DUMP_FILTER:-.}" | tail -80
    systemctl --user status $UNIT --no-pager
    exit 1
fi
echo "system tests: all passed"
